"""Every document the project reads or writes, by its ``format`` tag (docs/formats.md).

One declaration per tag, in a module that imports nothing, so the pipeline's contracts (which the
Airflow DAG files import at parse time) name a tag without loading numpy. The readers and writers
in :mod:`celeritas_core.readwrite.formats` and :mod:`celeritas_core.readwrite.columnar` import them from here.
"""

from __future__ import annotations

GRAPH_FORMAT = "celeritas-graph/1"
#: The columnar graph format, a NumPy .npz archive (:mod:`celeritas_core.readwrite.columnar`).
GRAPH_COLUMNS_FORMAT = "celeritas-graph-columns/1"
CLUSTER_FORMAT = "celeritas-cluster/1"
#: A cluster with a link topology (``topology``; docs/formats.md). Readers take both tags; writers
#: write ``/1`` for a flat cluster (files as before) and ``/2`` only with a topology, which a
#: reader of ``/1`` alone would silently ignore.
CLUSTER_FORMAT_V2 = "celeritas-cluster/2"
PLACEMENT_FORMAT = "celeritas-placement/1"
COMPARE_FORMAT = "celeritas-compare/1"
ACCURACY_FORMAT = "celeritas-accuracy/1"
VALIDATION_FORMAT = "celeritas-validation/1"
FUSION_FORMAT = "celeritas-fusion/1"
VALIDATION_SUMMARY_FORMAT = "celeritas-validation-summary/1"
PUBLISH_FORMAT = "celeritas-publish/1"
PROFILE_FORMAT = "celeritas-profile/1"
FITS_FORMAT = "celeritas-fits/1"
#: Fits with a per-op time model (``fit --time-model choose``): ``celeritas-fits/1`` plus each
#: op's ``time_model``. Paper-line fits stay ``celeritas-fits/1``, byte for byte as before.
FITS_FORMAT_V2 = "celeritas-fits/2"
