"""Train with a published champion placement: the consumer's side of the pipeline.

The pipeline publishes each configuration's champion in MLflow's Model Registry (one registered
model per configuration, alias ``champion``; :mod:`tasks.tracking.registry`), its version's
artifacts immutable: ``placement.json`` and ``configuration.json`` under the promoting run's
``published/``. Here:

* :func:`registered_model_of` names the registered model of a configuration (the pipeline's
  parameters, as ``prepare`` computes it); :func:`registered_model_of_uri` reads
  ``models:/NAME@champion``;
* :func:`fetch_champion` downloads the champion of a registered model, :func:`fetch_published` the
  published files of one version (an Asset event names its placement URI), as a
  :class:`PublishedPlacement`;
* :func:`model_for` builds the model a configuration was placed for, under the deployment's
  policy as ``prepare`` resolves it (:func:`tasks.policy.resolve_model`), a user model only when
  its bytes are still those the configuration hashed; :func:`check_same_model` refuses another;
* :func:`train_published` trains it placed (:mod:`celeritas_tf.training`) on synthetic batches,
  for ``celeritas train --champion``, ``examples/train_with_champion.py`` and the example DAG
  ``celeritas_train_on_champion`` (:func:`training_items` and :func:`train_item`, whose results are
  :class:`TrainingRun` contracts), which also writes the weights and a summary under the runs root.

Every refusal is one line (:class:`~celeritas_core.errors.CeleritasInputError`); an unreachable
tracking server is :class:`~tasks.tracking.TransientTrackingError`.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import read_json
from celeritas_core.readwrite.redact import redact
from tasks import storage, tracking
from tasks.common import load_model
from tasks.configuration import configuration_from_json
from tasks.contracts import Contract, ResolvedModel
from tasks.policy import check_run_dir, resolve_model, runs_root
from tasks.prepare import configuration_for
from tasks.tracking.store import _store_is_empty

#: ``models:/NAME@champion``: the champion of a registered model, as MLflow writes a model URI.
_MODELS_URI = re.compile(r"^models:/(?P<name>[^/@\s]+)@(?P<alias>[^/@\s]+)$")
#: Training steps the example DAG runs when its parameters say nothing else.
DEFAULT_STEPS = 100
#: File names under a training's folder (:func:`train_item`).
WEIGHTS_FILE, SUMMARY_FILE = "model.weights.h5", "training.json"


@dataclass(frozen=True)
class PublishedPlacement:
    """A published champion placement and what it was made for, downloaded.

    ``placement``: the ``celeritas-placement/1`` document; ``configuration``: the published
    ``configuration.json`` (model identity and ``model_name``, ``batch_size``, ``cluster``, ``key``,
    ``registered_model``); ``version`` and ``placer`` of the model version (None when unknown);
    ``placement_uri``: where it was read from.
    """

    registered_model: str
    version: str | None
    placer: str
    placement_uri: str
    placement: dict[str, Any]
    configuration: dict[str, Any]
    transfer_model: str | None = None
    """The transfer model the champion's run placed with (``calibrated``, ``default``, empty: not
    recorded), as :attr:`tasks.tracking.Champion.transfer_model`; None: not read (a URI)."""
    transfer_reason: str = ""

    @property
    def batch_size(self) -> int:
        """The batch the configuration was placed for."""
        return int(self.configuration["batch_size"])

    @property
    def num_devices(self) -> int:
        """The placement's devices."""
        return len(self.placement["devices"])

    @property
    def config_key(self) -> str:
        """The configuration's key."""
        return str(self.configuration.get("key", ""))

    @property
    def source(self) -> str:
        """How errors name it: ``models:/NAME@champion (version V)`` or its URI."""
        version = f" (version {self.version})" if self.version else ""
        return f"models:/{self.registered_model}@{tracking.ALIAS_CHAMPION}{version}"

    def describe(self) -> str:
        """One line: version, registered model, placer, configuration (with the transfer model its
        run used, when read from the registry)."""
        try:
            config = configuration_from_json(self.configuration).describe(
                transfer_model=self.transfer_model, transfer_reason=self.transfer_reason)
        except (KeyError, TypeError, ValueError):  # an older or hand-made configuration.json
            config = str(self.configuration.get("description", ""))
        return (f"version {self.version or '?'} of {self.registered_model} (placer {self.placer}; "
                f"{describe_model(self.configuration.get('model', {}))}, {config})")


def registered_model_of(params: Mapping[str, Any]) -> str:
    """The registered model of the configuration of pipeline ``params`` (missing fields take
    :func:`tasks.params.defaults`): ``celeritas-MODEL-b<batch>-<key>``."""
    return str(configuration_for(params)["registered_model"])


def registered_model_of_uri(uri: str) -> str | None:
    """NAME of ``models:/NAME@champion`` (None when ``uri`` is not a ``models:/`` URI); another
    alias or a version number is refused in one line."""
    if not uri.startswith("models:/"):
        return None
    match = _MODELS_URI.match(uri)
    if match is None or match["alias"] != tracking.ALIAS_CHAMPION:
        raise CeleritasInputError(f"{uri}: only the champion of a registered model is published for "
                                  f"training: models:/NAME@{tracking.ALIAS_CHAMPION}")
    return match["name"]


def fetch_champion(registered_model: str, dest_dir: str | Path) -> PublishedPlacement:
    """Download the champion of ``registered_model`` into ``dest_dir``.

    Raises
    ------
    CeleritasInputError
        No such registered model or no champion (the tracking store named).
    TransientTrackingError
        The tracking server is unreachable.
    """
    uri = redact(tracking.tracking_uri(create=False))
    if _store_is_empty():
        raise CeleritasInputError(f"no champion {registered_model!r}: the tracking store {uri} holds no runs "
                                  "(run the pipeline first, e.g. make demo)")
    found = tracking.champion(registered_model)
    if found is None:
        raise CeleritasInputError(f"no champion for registered model {registered_model!r} in {uri} (run the "
                                  "pipeline for its configuration first; celeritas production show lists "
                                  "the champions)")
    published = fetch_published(found.placement_uri, dest_dir, registered_model=registered_model,
                                version=found.version, placer=found.placer,
                                placement_sha256=found.placement_sha256)
    return replace(published, transfer_model=found.transfer_model, transfer_reason=found.transfer_reason)


def fetch_published(placement_uri: str, dest_dir: str | Path, *, registered_model: str | None = None,
                    version: str | None = None, placer: str | None = None,
                    placement_sha256: str | None = None) -> PublishedPlacement:
    """Download a published placement (``.../published/placement.json``) and the
    ``configuration.json`` beside it into ``dest_dir``; with ``placement_sha256`` (the registry's
    record), bytes with another digest are refused."""
    if not isinstance(placement_uri, str) or not placement_uri.endswith("/placement.json"):
        raise CeleritasInputError(f"not a published placement URI (…/placement.json): {placement_uri!r}")
    dest = Path(dest_dir)
    local = tracking.download_published(placement_uri, dest / "placement", expected_sha256=placement_sha256)
    placement = read_json(local)
    configuration_uri = placement_uri.rsplit("/", 1)[0] + "/configuration.json"
    configuration = read_json(tracking.download_published(configuration_uri, dest / "configuration"))
    if not isinstance(placement, dict) or not isinstance(configuration, dict) \
            or not isinstance(configuration.get("batch_size"), int) or "model" not in configuration:
        raise CeleritasInputError("a published placement and its configuration must be JSON objects with a "
                                  "batch size and a model", source=placement_uri)
    name = registered_model or str(configuration.get("registered_model") or "")
    return PublishedPlacement(registered_model=name, version=version,
                              placer=placer or str(placement.get("placer") or "unknown"),
                              placement_uri=placement_uri, placement=placement, configuration=configuration)


def describe_model(identity: Mapping[str, Any]) -> str:
    """A model identity (:func:`tasks.configuration.model_identity`) in a few words."""
    if identity.get("kind") == "zoo":
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(dict(identity.get("knobs") or {}).items()))
        paper = ", paper size" if identity.get("paper_config") else ""
        return f"{identity.get('name')} ({knobs}{paper})" if knobs or paper else str(identity.get("name"))
    what = identity.get("function") or identity.get("kind", "model")
    return f"{what} (SHA-256 {str(identity.get('sha256', ''))[:12]}…)"


def check_same_model(published: PublishedPlacement, params: Mapping[str, Any]) -> None:
    """Refuse in one line when pipeline ``params``' model (``model``, ``model_knobs``,
    ``paper_config``) is not the one ``published`` was placed for."""
    mine = configuration_for({**params, "batch_size": published.batch_size})["model"]
    theirs = published.configuration["model"]
    if mine != theirs:
        raise CeleritasInputError(f"the champion {published.source} is a placement of "
                                  f"{describe_model(theirs)}, not of {describe_model(mine)}")


def model_for(configuration: Mapping[str, Any]) -> Any:
    """The ModelSpec of the model a configuration was placed for, built as the pipeline's steps
    build it (:func:`tasks.common.load_model`): a zoo model from its name and knobs; a user model
    resolved again under the policy, refused when its bytes changed since it was placed."""
    identity = dict(configuration.get("model") or {})
    if identity.get("kind") == "zoo":
        knobs = dict(identity.get("knobs") or {})
        resolved = ResolvedModel(kind="zoo", name=str(identity.get("name")), location=None,
                                 content_sha256=None, knobs=knobs,
                                 paper_config=bool(identity.get("paper_config")))
        return load_model(resolved)
    name = str(configuration.get("model_name") or "")
    reference = resolve_model(name)
    if reference.content_sha256 != identity.get("sha256"):
        raise CeleritasInputError(f"model {name!r} changed since its placement was published (SHA-256 "
                                  f"{str(identity.get('sha256'))[:12]}…, now "
                                  f"{reference.content_sha256[:12]}…)")
    return load_model(ResolvedModel(kind=reference.kind, name=reference.name,
                                    location=reference.location or None,
                                    content_sha256=reference.content_sha256, knobs={}, paper_config=False))


@dataclass(frozen=True)
class TrainingRun(Contract):
    """What a training with a published placement did: the placement (registered model,
    version, placer, configuration key), the run (batch, devices, order, steps, losses, seconds)
    and where the weights and this summary went (None when not written)."""

    model: str
    registered_model: str
    version: str | None
    placer: str
    config_key: str
    batch_size: int
    num_devices: int
    order_mode: str
    steps: int
    losses: tuple[float, ...]
    seconds: float
    weights_uri: str | None = None
    summary_uri: str | None = None

    @property
    def first_loss(self) -> float:
        """The first step's loss."""
        return self.losses[0]

    @property
    def last_loss(self) -> float:
        """The last step's loss."""
        return self.losses[-1]

    def summary(self) -> str:
        """One line for logs."""
        weights = f"; weights {self.weights_uri}" if self.weights_uri else ""
        return (f"trained {self.model} with version {self.version or '?'} of {self.registered_model} "
                f"({self.placer}, {self.order_mode} order) at batch {self.batch_size} on {self.num_devices} "
                f"devices: {self.steps} steps in {self.seconds:.1f} s, loss {self.first_loss:.4f} -> "
                f"{self.last_loss:.4f}{weights}")


def train_published(published: PublishedPlacement, *, steps: int = DEFAULT_STEPS, order: str | None = None,
                    learning_rate: float = 1e-3, seed: int | None = 0, model: Any = None,
                    weights_path: str | Path | None = None,
                    progress: Callable[[int, float], None] | None = None) -> TrainingRun:
    """Train the model of ``published`` placed as it says, ``steps`` steps on synthetic batches
    (:meth:`celeritas_tf.training.PlacedTraining.synthetic_data`, repeated: the loss falls as
    the model learns them), in the placement's ``order_mode`` unless ``order`` says otherwise;
    ``model``: its ModelSpec when already built (default :func:`model_for`); ``weights_path``:
    where to save the trained weights (``.weights.h5``)."""
    # lazy: TensorFlow loads only when a training runs (the DAG files import nothing heavy)
    from celeritas_tf.training import train_with_placement

    spec = model if model is not None else model_for(published.configuration)
    started = time.perf_counter()
    with train_with_placement(spec, published.placement, batch_size=published.batch_size, order=order,
                              learning_rate=learning_rate, seed=seed, source=published.source) as training:
        losses = training.fit(training.synthetic_data(), steps=steps, progress=progress)
        if weights_path is not None:
            training.save_weights(weights_path)
        mode = training.order_mode
    return TrainingRun(model=spec.name, registered_model=published.registered_model,
                       version=published.version, placer=published.placer, config_key=published.config_key,
                       batch_size=published.batch_size, num_devices=published.num_devices, order_mode=mode,
                       steps=len(losses), losses=tuple(losses), seconds=time.perf_counter() - started,
                       weights_uri=str(weights_path) if weights_path is not None else None)


@dataclass(frozen=True)
class TrainingItem(Contract):
    """One published placement to train with (the example DAG maps :func:`train_item` over
    them): from an Asset event (``placement_uri``, ``version``, ``config_key``, ``model``,
    ``placer``) or, triggered by hand, a registered model whose champion to take."""

    config_key: str
    placement_uri: str | None = None
    version: str | None = None
    model: str | None = None
    placer: str | None = None
    registered_model: str | None = None


def training_items(events: Sequence[Mapping[str, Any]],
                   registered_model: str | None = None) -> list[TrainingItem]:
    """What to train with: the published placement of each configuration the Asset events name
    (the latest event of each), or, with no event, the champion of ``registered_model``."""
    latest: dict[str, TrainingItem] = {}
    for extra in events:
        if not isinstance(extra, Mapping) or not extra.get("placement_uri"):
            raise CeleritasInputError(f"a published-placement event without a placement URI: "
                                      f"{dict(extra or {})}")
        key = str(extra.get("config_key") or extra["placement_uri"])
        latest[key] = TrainingItem(config_key=key, placement_uri=str(extra["placement_uri"]),
                                   version=None if extra.get("version") is None else str(extra["version"]),
                                   model=extra.get("model"), placer=extra.get("placer"))
    if latest:
        return list(latest.values())
    if registered_model:
        key = registered_model.rsplit("-", 1)[-1]
        return [TrainingItem(config_key=key, registered_model=registered_model)]
    raise CeleritasInputError("nothing to train: no published-placement event triggered this run and no "
                              "'registered_model' parameter names a champion")


def train_item(item: TrainingItem, *, job_id: str, steps: int = DEFAULT_STEPS, order: str | None = None,
               run_dir: str | None = None) -> TrainingRun:
    """Train with one :class:`TrainingItem`'s placement and write ``model.weights.h5`` and
    ``training.json`` under ``run_dir`` (checked as the pipeline's run directories are; default
    ``<runs root>/training/<registered model>/v<version>/<job id>``)."""
    with tempfile.TemporaryDirectory(prefix="celeritas-train-") as tmp:
        if item.placement_uri:
            published = fetch_published(item.placement_uri, tmp, version=item.version, placer=item.placer)
        else:
            published = fetch_champion(str(item.registered_model), tmp)
        safe = lambda text: re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"  # noqa: E731
        folder = check_run_dir(run_dir) if run_dir else str(
            runs_root() / "training" / safe(published.registered_model or published.config_key)
            / f"v{safe(published.version or 'unknown')}" / safe(job_id))
        local = Path(tmp) / WEIGHTS_FILE
        run = train_published(published, steps=steps, order=order, weights_path=local)
        weights_uri = storage.upload_file(local, storage.join(folder, WEIGHTS_FILE))
    summary_uri = storage.join(folder, SUMMARY_FILE)
    done = TrainingRun.from_xcom({**run.to_xcom(), "weights_uri": weights_uri, "summary_uri": summary_uri})
    storage.write_json(summary_uri, {"job_id": job_id, "placement_uri": published.placement_uri,
                                     "configuration": published.configuration, **done.to_xcom()})
    return done
