"""The Model Registry: the champion (production placement) of each configuration, its
compare-and-set promotion under the configuration's lock, and the publish decisions recorded on
parent runs (``celeritas production show/history``)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celeritas_core.errors import CeleritasInputError
from tasks.policy import file_sha256
from tasks.tracking.lock import LOCK_PREFIX, _registry_lock
from tasks.tracking.runs import _current_names, _parent_runs, _seconds, log_metrics, set_tags
from tasks.tracking.store import (
    EXPERIMENT,
    MAX_TAG_VALUE,
    TAG_BEST_MEASURED,
    TAG_DECISION,
    TAG_JOB,
    TAG_MODEL,
    TAG_NOTE,
    TAG_PLACER,
    TAG_PRODUCTION,
    TAG_PROMOTE_REASON,
    TAG_PROMOTED_AT,
    TAG_REASON,
    TAG_SUPERSEDED_AT,
    TAG_SUPERSEDED_BY,
    TAG_TRANSFER_MODEL,
    TAG_TRANSFER_REASON,
    _client,
    _iso,
    _local_path,
    _quote,
    _set_tag_dict,
    _store_is_empty,
    _tag_values,
    _text,
    _tracked,
    _truncate,
    tracking_uri,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

# One registered model per configuration (tasks/configuration.py); its versions are the placements
# ever promoted for it and its alias ``champion`` the one in production. Promotion is a
# compare-and-set under the configuration's store-wide lock (tasks/tracking/lock.py).
ALIAS_CHAMPION = "champion"
PUBLISHED_FOLDER = "published"
TAG_CONFIG_KEY = "celeritas.config_key"
TAG_CONFIG = "celeritas.configuration"
TAG_REGISTERED_MODEL = "celeritas.registered_model"
TAG_MODEL_VERSION = "celeritas.model_version"
TAG_DECIDED_AT = "celeritas.decided_at"


@dataclass(frozen=True)
class Champion:
    """The production placement of one configuration: a version of its registered model.
    ``transfer_model`` is the transfer model its run placed with (``calibrated`` or ``default``:
    what ``calibrate_comm`` did, which a configuration asking for calibration does not settle) and
    ``transfer_reason`` why; both empty when the run did not record them (or is gone)."""

    model: str
    config_key: str
    configuration: str
    registered_model: str
    version: str
    run_id: str
    job_id: str
    placer: str
    placement_uri: str
    placement_sha256: str
    step_time_s: float
    promoted_at: str
    reason: str
    transfer_model: str = ""
    transfer_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The champion as a JSON object (``celeritas production show --json``), its configuration
        parsed (``configuration.json`` of the version)."""
        try:
            configuration: Any = json.loads(self.configuration)
        except ValueError:
            configuration = self.configuration
        return {**asdict(self), "configuration": configuration}


@dataclass(frozen=True)
class Decision:
    """One publish decision about a model (``celeritas production history``): when (ISO UTC), the
    configuration, promoted or kept, the run's best placer and its median step time (s), the
    champion's measured alongside, the relative gain and the test's p-value (None without a
    champion), the version promoted (None when kept), the parent run, the job and the reason."""

    decided_at: str
    config_key: str
    decision: str
    placer: str
    step_time_s: float | None
    champion_step_time_s: float | None
    gain: float | None
    p_value: float | None
    version: str | None
    run_id: str
    job_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The decision as a JSON object (``celeritas production history --json``)."""
        return asdict(self)


@dataclass(frozen=True)
class Promotion:
    """The outcome of :func:`promote_if_current`: promoted or not, why, and the champion after it."""

    promoted: bool
    reason: str
    champion: Champion | None


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ensure_registered_model(client: MlflowClient, name: str, model: str, config_key: str,
                             configuration: str) -> None:
    """Create the configuration's registered model if it does not exist yet (concurrency-safe)."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
        return
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    with suppress(MlflowException):  # created concurrently: fine
        client.create_registered_model(
            name, tags={TAG_MODEL: model, TAG_CONFIG_KEY: config_key,
                        TAG_CONFIG: _truncate(configuration, MAX_TAG_VALUE)},
            description=f"Celeritas placements of {model} for configuration {config_key}; alias "
                        f"'{ALIAS_CHAMPION}' is the one in production.")


def _champion_of(client: MlflowClient, name: str) -> Champion | None:
    """The version the alias ``champion`` of ``name`` points to (with its run's transfer model), or
    None."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(name, ALIAS_CHAMPION)
        registered = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise
    t = version.tags
    try:
        step = float(t.get("celeritas.step_time_s", "nan"))
    except ValueError:
        step = float("nan")
    run_tags: Mapping[str, str] = {}
    if version.run_id:
        with suppress(MlflowException):  # the run was deleted: the transfer model is unknown
            run_tags = client.get_run(version.run_id).data.tags
    return Champion(model=registered.tags.get(TAG_MODEL, ""),
                    config_key=registered.tags.get(TAG_CONFIG_KEY, ""),
                    configuration=registered.tags.get(TAG_CONFIG, ""), registered_model=name,
                    version=str(version.version), run_id=version.run_id or "", job_id=t.get(TAG_JOB, ""),
                    placer=t.get(TAG_PLACER, ""), placement_uri=f"{version.source}/placement.json",
                    placement_sha256=t.get("celeritas.placement_sha256", ""), step_time_s=step,
                    promoted_at=t.get(TAG_PROMOTED_AT, ""), reason=t.get(TAG_PROMOTE_REASON, ""),
                    transfer_model=run_tags.get(TAG_TRANSFER_MODEL, ""),
                    transfer_reason=run_tags.get(TAG_TRANSFER_REASON, ""))


@_tracked
def champion(registered_model: str) -> Champion | None:
    """The champion of the configuration whose registered model is ``registered_model``, or None."""
    _text(registered_model, "registered model")
    return _champion_of(_client(), registered_model)


@_tracked
def download_published(placement_uri: str, dest_dir: str | os.PathLike[str], *,
                       expected_sha256: str | None = None) -> Path:
    """Download a champion's published file (:attr:`Champion.placement_uri`) into ``dest_dir``;
    with ``expected_sha256`` (:attr:`Champion.placement_sha256`), refuse bytes with another digest
    in one line (the artifact was changed or damaged after it was published)."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    import mlflow.artifacts

    _text(placement_uri, "placement URI")
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=placement_uri, dst_path=str(dest_dir),
                                                     tracking_uri=tracking_uri()))
    if expected_sha256:
        digest = file_sha256(local)
        if digest != expected_sha256:
            raise CeleritasInputError(f"the published file's SHA-256 is {digest[:12]}…, not the "
                                      f"{expected_sha256[:12]}… the registry recorded when it was published: "
                                      "it was changed since; refusing it", source=placement_uri)
    return local


@_tracked
def promote_if_current(*, registered_model: str, model: str, config_key: str, configuration: str,
                       run_id: str, expected_version: str | None, published: Mapping[str, str],
                       tags: Mapping[str, object], reason: str) -> Promotion:
    """Make the run's placement the configuration's champion if the champion is still
    ``expected_version`` (None: there was none): compare-and-set under the configuration's lock.

    ``published`` maps file names (``placement.json`` must be one) to local files, logged once to
    the run under ``published/``: the version's immutable artifacts, with the SHA-256 of
    ``placement.json`` recorded on the version (``celeritas.placement_sha256``). A retry of a
    promotion returns the version it made (or finishes it: a version registered but not yet the
    champion gets the alias) instead of creating a second one.
    """
    for key in (registered_model, model, config_key, run_id):
        _text(key, "promotion field")
    if "placement.json" not in published:
        raise CeleritasInputError("promote_if_current: published files must include placement.json")
    client = _client()
    run = client.get_run(run_id)
    _ensure_registered_model(client, registered_model, model, config_key, configuration)
    with _registry_lock(client, registered_model):
        current = _champion_of(client, registered_model)
        if current is not None and current.run_id == run_id:
            log.info("promotion: run %s is already the champion (version %s): a retried publish",
                     run_id, current.version)
            return Promotion(True, reason, current)
        if (current.version if current else None) != expected_version:
            now = current.version if current else "none"
            return Promotion(False, "the champion changed while this run measured it (measured against "
                                    f"version {expected_version or 'none'}, now {now}); production kept",
                             current)
        mine = [v for v in client.search_model_versions(f"name = {_quote(registered_model)}")
                if v.run_id == run_id]
        if mine:
            version = mine[0]
        else:
            with tempfile.TemporaryDirectory() as tmp:
                for filename, local in published.items():
                    shutil.copyfile(_local_path(local), Path(tmp) / filename)
                client.log_artifacts(run_id, tmp, PUBLISHED_FOLDER)
            version_tags = {**_tag_values(tags), TAG_PROMOTED_AT: _now_iso(),
                            TAG_PROMOTE_REASON: _truncate(reason, MAX_TAG_VALUE),
                            TAG_JOB: run.data.tags.get(TAG_JOB, ""),
                            "celeritas.placement_sha256": file_sha256(published["placement.json"])}
            source = f"{run.info.artifact_uri}/{PUBLISHED_FOLDER}"
            version = client.create_model_version(registered_model, source, run_id=run_id, tags=version_tags,
                                                  description=reason)
        client.set_registered_model_alias(registered_model, ALIAS_CHAMPION, str(version.version))
        promoted = _champion_of(client, registered_model)
    _set_tag_dict(client, run_id, {TAG_MODEL_VERSION: str(version.version),
                                   TAG_REGISTERED_MODEL: registered_model,
                                   TAG_PRODUCTION: "true", TAG_PROMOTED_AT: _now_iso()})
    if current is not None:
        with suppress(Exception):
            _set_tag_dict(client, current.run_id, {TAG_PRODUCTION: "false", TAG_SUPERSEDED_BY: run_id,
                                                   TAG_SUPERSEDED_AT: _now_iso()})
    return Promotion(True, reason, promoted)


@_tracked
def record_decision(run_id: str, decision: str, reason: str, *, config_key: str | None = None,
                    metrics: Mapping[str, float] | None = None, note: str | None = None) -> None:
    """Record the publish decision (``promoted``/``kept``), its reason, the configuration and the
    statistics' figures on the parent run (tags and metrics); ``note`` becomes the run's
    description in MLflow's UI (``mlflow.note.content``)."""
    _text(decision, "decision")
    tags: dict[str, object] = {TAG_DECISION: decision, TAG_REASON: str(reason), TAG_DECIDED_AT: _now_iso()}
    if note:
        tags[TAG_NOTE] = note
    if config_key:
        tags[TAG_CONFIG_KEY] = config_key
    set_tags(run_id, tags)
    if metrics:
        log_metrics(run_id, metrics)


@_tracked
def champions(model: str) -> list[Champion]:
    """The champion of every configuration of ``model`` (configurations without one are left out)."""
    _text(model, "model")
    if _store_is_empty():
        return []
    client = _client()
    found = client.search_registered_models(f"tags.`{TAG_MODEL}` = {_quote(model)}")
    names = [r.name for r in found if not r.name.startswith(LOCK_PREFIX)]
    out = [c for c in (_champion_of(client, name) for name in names) if c]
    return sorted(out, key=lambda c: (c.configuration, c.config_key))


@_tracked
def decision_history(model: str, *, experiment: str = EXPERIMENT, limit: int = 1000) -> list[Decision]:
    """Every publish decision about ``model`` (all its configurations), oldest first."""
    _text(model, "model")
    if _store_is_empty():
        return []
    runs = _parent_runs(_client(), model, experiment, limit)
    rows = [_decision_of(run) for run in runs if TAG_DECISION in run.data.tags]
    return sorted(rows, key=lambda d: d.decided_at)


def _decision_of(run: Run) -> Decision:
    """The :class:`Decision` recorded on a parent run by :func:`record_decision` (step times in s)."""
    t, m = run.data.tags, _current_names(run.data.metrics)
    return Decision(decided_at=t.get(TAG_DECIDED_AT) or _iso(run.info.end_time or run.info.start_time) or "",
                    config_key=t.get(TAG_CONFIG_KEY, ""), decision=t.get(TAG_DECISION, ""),
                    placer=t.get(TAG_BEST_MEASURED, ""),
                    step_time_s=_seconds(m.get("challenger_median_step_time_ms")),
                    champion_step_time_s=_seconds(m.get("champion_median_step_time_ms")),
                    gain=m.get("gain_vs_champion"),
                    p_value=m.get("ab_p_value"), version=t.get(TAG_MODEL_VERSION) if t.get(TAG_DECISION)
                    == "promoted" else None, run_id=run.info.run_id, job_id=t.get(TAG_JOB, ""),
                    reason=t.get(TAG_REASON, ""))
