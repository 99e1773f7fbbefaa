"""What a pipeline run may load and where it may write: the deployment's policy on parameters.

The form and ``celeritas run`` take a model and a run directory from whoever triggers a run, and
the workers execute them; so a model is one of: a zoo name; a ``.keras`` file under the models
root (loaded with Keras ``safe_mode=True``, which refuses serialized Python code); a
``MODULE:FUNCTION`` whose module is under an allowed prefix. A run directory stays under the runs
root (a local folder) or an allowed S3 prefix. The deployment sets these in the environment:

=============================  ========================================  ===========================
variable                       meaning                                   default
=============================  ========================================  ===========================
``CELERITAS_MODELS_ROOT``      folder that ``.keras`` models must be in  ``<home>/models``
``CELERITAS_MODELS_S3_PREFIX`` ``s3://bucket/prefix`` for ``.keras``     none: S3 models refused
``CELERITAS_MODEL_MODULES``    comma-separated module prefixes allowed   none: functions refused
                               for ``MODULE:FUNCTION``
``CELERITAS_RUNS_ROOT``        folder that local run directories are in  ``<home>/build/runs``
``CELERITAS_RUNS_S3_PREFIX``   ``s3://bucket/prefix`` for run dirs       none: S3 run dirs refused
=============================  ========================================  ===========================

``<home>`` is ``CELERITAS_HOME`` (default: the working folder). Every refusal is a one-line
:class:`~celeritas_core.errors.CeleritasInputError` naming the parameter and the variable to set.
Nothing here imports TensorFlow: ``prepare`` checks the policy before any GPU task runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import io
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.models import ZOO
from tasks import storage

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelReference:
    """A model a run may load: its kind, its name as given, where it is (a path, an ``s3://`` URI,
    a module file; empty for the zoo) and the SHA-256 of its content (empty for the zoo, whose
    identity is its name and knobs)."""

    kind: Literal["zoo", "keras", "function"]
    name: str
    location: str
    content_sha256: str


def _home() -> Path:
    return Path(os.environ.get("CELERITAS_HOME") or Path.cwd())


def models_root() -> Path:
    """The folder ``.keras`` models must be in (``CELERITAS_MODELS_ROOT``)."""
    return Path(os.environ.get("CELERITAS_MODELS_ROOT") or _home() / "models")


def runs_root() -> Path:
    """The folder local run directories must be in (``CELERITAS_RUNS_ROOT``)."""
    return Path(os.environ.get("CELERITAS_RUNS_ROOT") or _home() / "build" / "runs")


def _s3_prefix(variable: str) -> str | None:
    value = (os.environ.get(variable) or "").strip()
    return value.rstrip("/") + "/" if value else None


def module_prefixes() -> tuple[str, ...]:
    """The module prefixes ``MODULE:FUNCTION`` models may come from (``CELERITAS_MODEL_MODULES``)."""
    return tuple(p.strip() for p in (os.environ.get("CELERITAS_MODEL_MODULES") or "").split(",") if p.strip())


def _inside(path: str, root: Path) -> Path | None:
    """``path`` resolved (symlinks and ``..`` followed), if it lies inside ``root``; else None."""
    resolved = Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    return resolved if resolved == base or base in resolved.parents else None


def _under_root(path: str, root: Path, refusal: str, variable: str) -> Path:
    """``path`` (relative ones taken from ``root``) resolved, if inside ``root``; else the one-line
    ``refusal``, completed with the root and the variable that sets it."""
    resolved = _inside(path if os.path.isabs(path) else str(root / path), root)
    if resolved is None:
        raise CeleritasInputError(f"{refusal} {root} ({variable})")
    return resolved


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a local file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_model(model: str, knobs: Mapping[str, Any] | None = None, *,
                  paper: bool = False) -> ModelReference:
    """Check ``model`` (and a zoo model's ``knobs`` over its small or ``paper`` configuration) against
    the policy; its reference."""
    kind = check_model(model, knobs, paper=paper)
    if kind == "keras":
        return _keras_reference(model)
    if kind == "function":
        return _function_reference(model)
    return ModelReference("zoo", model, "", "")


def check_model(model: str, knobs: Mapping[str, Any] | None = None, *,
                paper: bool = False) -> Literal["zoo", "keras", "function"]:
    """The checks of :func:`resolve_model` that the API server can make when a run is triggered.

    A zoo model's knobs are checked in full (their names, and their values by the model's factory,
    which only builds a recipe); a ``.keras`` file must be under the models root, exist and be a
    Keras archive (only its zip directory is read), or be under the allowed S3 prefix (whether it
    exists there is left to ``prepare``); a ``MODULE:FUNCTION`` must be under an allowed module
    prefix (finding the module is left to ``prepare``: only the workers need it installed). Nothing
    imports TensorFlow.

    Parameters
    ----------
    model : str
        The ``model`` parameter.
    knobs : Mapping, optional
        A zoo model's size knobs.
    paper : bool
        Whether the knobs override the paper's configuration instead of the small one.

    Returns
    -------
    str
        The model's kind: ``zoo``, ``keras`` or ``function``.

    Raises
    ------
    CeleritasInputError
        One sentence naming the parameter and what is allowed.
    """
    if model in ZOO:
        _check_knobs(model, ZOO[model].factory, knobs or {})
        base = ZOO[model].paper_config if paper else ZOO[model].small_config
        _check_knob_values(model, {**base, **(knobs or {})})
        return "zoo"
    if model.endswith(".keras"):
        if model.startswith("s3://"):
            _check_s3_model(model)
        else:
            path = _local_keras(model)
            _check_keras_archive(path, str(path))
        return "keras"
    if ":" in model and not model.startswith(("s3://", "file:")):
        _allowed_function(model)
        return "function"
    raise CeleritasInputError(f"parameter 'model': unknown model {model!r} (zoo: {', '.join(sorted(ZOO))}; "
                              f"or a .keras file under {models_root()}, or MODULE:FUNCTION under "
                              "CELERITAS_MODEL_MODULES)")


def _check_knobs(model: str, factory: Any, knobs: Mapping[str, Any]) -> None:
    """Refuse knobs the zoo model does not take."""
    allowed = [p for p in inspect.signature(factory).parameters if p not in ("self",)]
    unknown = sorted(set(knobs) - set(allowed))
    if unknown:
        raise CeleritasInputError(f"parameter 'model_knobs': {model} has no knob {unknown[0]!r} (its knobs: "
                                  f"{', '.join(allowed)}); leave the knobs empty for its own sizes")


def _check_knob_values(model: str, config: Mapping[str, Any]) -> None:
    """Refuse knob values the zoo model's factory refuses; it only builds a recipe (no TensorFlow),
    so a bad size fails here, in ``prepare``, not on a GPU worker."""
    try:
        ZOO[model].factory(**config)
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"parameter 'model_knobs': {exc}") from None
    except (TypeError, ValueError) as exc:
        raise CeleritasInputError(f"parameter 'model_knobs': model {model!r}: {exc}") from None


def _keras_reference(model: str) -> ModelReference:
    """A ``.keras`` file under the models root (or the allowed S3 prefix), checked to be a Keras
    archive (a zip with ``config.json``) before any worker loads it."""
    if model.startswith("s3://"):
        _check_s3_model(model)

        try:
            data = storage.read_bytes(model)
        except storage.ArtifactNotFound:
            raise CeleritasInputError(f"parameter 'model': no such .keras file: {model}") from None
        _check_keras_archive(io.BytesIO(data), model)
        return ModelReference("keras", model, model, hashlib.sha256(data).hexdigest())
    resolved = _local_keras(model)
    _check_keras_archive(resolved, str(resolved))
    return ModelReference("keras", model, str(resolved), file_sha256(resolved))


def _check_s3_model(model: str) -> None:
    """Refuse an ``s3://`` model outside the allowed prefix (``CELERITAS_MODELS_S3_PREFIX``)."""
    prefix = _s3_prefix("CELERITAS_MODELS_S3_PREFIX")
    if prefix is None or not model.startswith(prefix) or "/../" in model or model.endswith("/.."):
        allowed = prefix or "nowhere (set CELERITAS_MODELS_S3_PREFIX to allow a bucket prefix)"
        raise CeleritasInputError(f"parameter 'model': {model} is outside the allowed S3 prefix: {allowed}")


def _local_keras(model: str) -> Path:
    """A local ``.keras`` path resolved inside the models root, if it is a file there."""
    where = "parameter 'model'"
    if model.startswith("file:"):
        raise CeleritasInputError(f"{where}: give a path, not a file: URI ({model})")
    resolved = _under_root(model, models_root(), f"{where}: {model} is outside the models root",
                           "CELERITAS_MODELS_ROOT")
    if not resolved.is_file():
        raise CeleritasInputError(f"{where}: no such .keras file: {resolved}")
    return resolved


def _check_keras_archive(source: Path | IO[bytes], shown: str) -> None:
    """Refuse a file that is not a Keras archive (a zip holding ``config.json``), local or from S3."""
    refused = f"parameter 'model': {shown} is not a Keras archive"
    try:
        with zipfile.ZipFile(source) as archive:
            if "config.json" not in archive.namelist():
                raise CeleritasInputError(f"{refused} (no config.json)")
    except zipfile.BadZipFile:
        raise CeleritasInputError(f"{refused} (not a zip file)") from None


def _allowed_function(model: str) -> str:
    """The module of a ``MODULE:FUNCTION`` model, if well formed and under an allowed prefix."""
    where = "parameter 'model'"
    module, _, function = model.partition(":")
    if not _MODULE.match(module) or not _FUNCTION.match(function):
        raise CeleritasInputError(f"{where}: {model!r} is not MODULE:FUNCTION")
    prefixes = module_prefixes()
    if not any(module == p or module.startswith(p + ".") for p in prefixes):
        allowed = ", ".join(prefixes) or "none (set CELERITAS_MODEL_MODULES, e.g. 'mycompany.models')"
        raise CeleritasInputError(f"{where}: module {module!r} is not under an allowed prefix: {allowed}")
    return module


def _function_reference(model: str) -> ModelReference:
    """A ``MODULE:FUNCTION`` under an allowed module prefix, its module found (not imported)."""
    module = _allowed_function(model)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise CeleritasInputError(f"parameter 'model': cannot find module {module!r}")
    return ModelReference("function", model, spec.origin, file_sha256(Path(spec.origin)))


def check_run_dir(run_dir: str) -> str:
    """``run_dir`` if it stays inside the runs root (resolved) or the allowed S3 prefix."""
    where = "parameter 'run_dir'"
    if run_dir.startswith("s3://"):
        prefix = _s3_prefix("CELERITAS_RUNS_S3_PREFIX")
        parts = run_dir[5:].split("/")
        if prefix is None or not (run_dir.rstrip("/") + "/").startswith(prefix) or ".." in parts:
            allowed = prefix or "nowhere (set CELERITAS_RUNS_S3_PREFIX to allow a bucket prefix)"
            raise CeleritasInputError(f"{where}: {run_dir} is outside the allowed S3 prefix: {allowed}")
        return run_dir
    if run_dir.lower().startswith("file:"):
        raise CeleritasInputError(f"{where}: {run_dir} is not a folder or s3:// URI: file: URIs are refused, "
                                  f"give a folder under the runs root {runs_root()} instead")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", run_dir):
        raise CeleritasInputError(f"{where}: {run_dir} is not a folder or s3:// URI")
    return str(_under_root(run_dir, runs_root(), f"{where}: {run_dir} is outside the runs root",
                           "CELERITAS_RUNS_ROOT"))
