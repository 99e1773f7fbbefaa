"""Finding a model: a zoo model by name (:mod:`celeritas_tf.zoo`), or a user model given as
``module:function`` or a ``.keras`` file.

A :class:`ModelSpec` says how to make a fresh Keras model (``weights=None``: nothing is
downloaded), the shapes and dtypes of its inputs and labels *without* the batch dimension, and
its loss. Inputs are synthetic tensors of the right shape. Zoo models take size knobs so that
tests and the demo can run small versions on CPU; ``paper=True`` gives the paper's configuration.
The specs (:mod:`celeritas_tf.spec`) and the zoo are re-exported here: ``from celeritas_tf.models
import ZOO, ModelSpec``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.spec import LossFn, ModelSpec, TensorSpec, ZooEntry
from celeritas_tf.tf import tensorflow
from celeritas_tf.zoo import ZOO, register_model

__all__ = ["ZOO", "LossFn", "ModelSpec", "TensorSpec", "ZooEntry", "get_model", "load_keras_file",
           "load_user_function", "register_model"]


def get_model(name: str, *, paper: bool = False, **knobs: Any) -> ModelSpec:
    """A zoo model by name (``paper=True``: the paper's configuration; ``knobs`` override), or a
    user model given as ``module:function`` or a path to a ``.keras`` file."""
    if name in ZOO:
        entry = ZOO[name]
        config = {**(entry.paper_config if paper else entry.small_config), **knobs}
        try:
            return entry.factory(**config)
        except TypeError as exc:
            raise CeleritasInputError(f"model {name!r}: {exc}") from None
    if name.endswith(".keras"):
        return load_keras_file(name)
    if ":" in name:
        return load_user_function(name)
    raise CeleritasInputError(
        f"unknown model {name!r} (zoo: {', '.join(sorted(ZOO))}; or MODULE:FUNCTION, or a .keras file)")


def load_user_function(target: str) -> ModelSpec:
    """``module:function`` returning a ModelSpec, or ``(model, loss, input_signature[, label_signature])``."""
    module_name, _, func_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CeleritasInputError(f"model {target!r}: cannot import module {module_name!r} ({exc})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise CeleritasInputError(f"model {target!r}: module {module_name!r} has no function {func_name!r}")
    result = func()
    if isinstance(result, ModelSpec):
        return result
    if not isinstance(result, tuple) or len(result) not in (3, 4):
        raise CeleritasInputError(
            f"model {target!r}: expected a ModelSpec or (model, loss, input_signature[, label_signature]), "
            f"got {type(result).__name__}")
    model, loss, input_signature = result[:3]
    label_signature = result[3] if len(result) == 4 else None
    # each training step is built in a fresh graph, so the function runs again there
    return _spec_from_keras(target, lambda: func()[0], model, loss, input_signature, label_signature)


def load_keras_file(path: str) -> ModelSpec:
    """A saved ``.keras`` model; its compiled loss (or ``mse``) and its input shapes."""
    p = Path(path)
    if not p.is_file():
        raise CeleritasInputError("file not found", source=path)
    tensorflow()
    import keras  # lazy: TensorFlow loads only when a model is built

    def make() -> Any:
        return keras.saving.load_model(str(p), compile=False, safe_mode=True)

    try:  # safe_mode: a file with serialized Python code (a lambda layer) is refused, never run
        probe = keras.saving.load_model(str(p), safe_mode=True)
    except Exception as exc:  # a corrupt or foreign file: keras raises many types
        raise CeleritasInputError(f"cannot load Keras model ({type(exc).__name__}: {exc})",
                                  source=path) from None
    loss = getattr(probe, "loss", None) or "mse"
    signature = [tuple(i.shape) for i in probe.inputs]
    return _spec_from_keras(p.stem, make, probe, loss, signature, None)


def _spec_from_keras(name: str, make: Callable[[], Any], model: Any, loss: Any, input_signature: Any,
                     label_signature: Any) -> ModelSpec:
    """Turn (model, loss, signatures) into a ModelSpec; signatures hold shapes with the batch dim."""
    def spec_of(sig: Any, fallback_name: str) -> TensorSpec:
        shape = tuple(getattr(sig, "shape", sig))
        dtype = getattr(getattr(sig, "dtype", None), "name", None) or "float32"
        dims = tuple(int(d) for d in shape[1:])
        return TensorSpec(getattr(sig, "name", None) or fallback_name, dims, dtype)

    sigs = list(input_signature) if isinstance(input_signature, list | tuple) and input_signature and \
        not isinstance(input_signature[0], int | type(None)) else [input_signature]
    inputs = tuple(spec_of(s, f"input_{i}") for i, s in enumerate(sigs))
    if label_signature is not None:
        labels = spec_of(label_signature, "labels")
    else:
        out_shape = tuple(int(d) for d in model.outputs[0].shape[1:])
        sparse = isinstance(loss, str) and "sparse" in loss
        labels = TensorSpec("labels", out_shape[:-1] if sparse else out_shape,
                            "int32" if sparse else "float32", high=out_shape[-1] if sparse else None)
    return ModelSpec(name=name, make_model=make, inputs=inputs, labels=labels, loss=loss,
                     config={"source": name}, description=f"user model {name}")
