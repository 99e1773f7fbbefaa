"""What a training step is built from: a model's :class:`ModelSpec` (how to make a fresh Keras
model, its inputs, labels and loss) and a zoo entry (:class:`ZooEntry`). Plain data: the zoo
(:mod:`celeritas_tf.zoo`) and the user models (:mod:`celeritas_tf.models`) both make them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TensorSpec:
    """One input or label tensor: shape without the batch dimension, dtype, value range for ints."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int | None = None
    """For integer tensors: values are drawn from ``[0, high)`` (e.g. the vocabulary size)."""


#: ``loss(labels, outputs) -> scalar tensor``; a string names a Keras loss
#: (e.g. ``"sparse_categorical_crossentropy"``, ``"mse"``), reduced by its mean.
LossFn = Callable[[Any, Any], Any] | str


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model's training step (see :func:`celeritas_tf.step.build_training_step`)."""

    name: str
    make_model: Callable[[], Any]
    """Returns a fresh ``keras.Model`` called as ``model(inputs, training=True)``; ``inputs`` is
    one tensor, or a list in the order of :attr:`inputs`."""
    inputs: tuple[TensorSpec, ...]
    labels: TensorSpec
    loss: LossFn
    config: Mapping[str, Any] = field(default_factory=dict)
    """The knobs the model was built with (recorded in the graph's ``meta``)."""
    description: str = ""


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: a factory taking size knobs, and the paper's configuration of those knobs."""

    name: str
    factory: Callable[..., ModelSpec]
    description: str
    paper_config: Mapping[str, Any]
    paper_batch_size: int
    small_config: Mapping[str, Any]
    """A configuration that builds and runs a step in seconds on one CPU core (tests, demo)."""
