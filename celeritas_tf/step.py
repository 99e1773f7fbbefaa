"""Build a model's training step (forward, backward, Adam update) as a ``tf.compat.v1`` graph.

Op names must be the same for every batch size, because Standard Evaluation fits per-op costs
across batch sizes: every build starts with ``keras.backend.clear_session()`` (which resets
Keras's layer-name counters) in a fresh ``tf.Graph``. The step's ops are the transitive inputs
of the ``train_step`` op (the Adam update group); variable initialisers are not part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.spec import ModelSpec, TensorSpec
from celeritas_tf.tf import tensorflow

TRAIN_OP = "train_step"
LOSS = "loss"


@dataclass(eq=False)
class TrainingStep:
    """A built training step: its graph, the op to run, the loss, feeds and initialiser."""

    model: ModelSpec
    batch_size: int
    graph: Any
    train_op: Any
    loss: Any
    init_op: Any
    placeholders: list[tuple[Any, TensorSpec]]
    _graph_def: tuple[int, Any] | None = field(default=None, init=False, repr=False)

    def feed_dict(self, rng: np.random.Generator) -> dict[Any, np.ndarray]:
        """Synthetic inputs and labels of the right shapes and dtypes (no data is downloaded)."""
        feeds = {}
        for tensor, spec in self.placeholders:
            shape = (self.batch_size, *spec.shape)
            if spec.dtype.startswith("int"):
                feeds[tensor] = rng.integers(0, spec.high or 2, size=shape).astype(spec.dtype)
            else:
                feeds[tensor] = rng.standard_normal(shape).astype(spec.dtype)
        return feeds

    def step_graph_def(self) -> Any:
        """The GraphDef of the ops one training step runs (initialisers excluded).

        Built once and shared by every caller (extraction, analytical costs, validation: treat it
        as read-only); built again when ops were added to the graph or after
        :meth:`forget_graph_def` (:func:`celeritas_tf.profile.place_ops` calls it when it pins
        devices)."""
        if self._graph_def is None or self._graph_def[0] != self.graph.version:
            tf = tensorflow()
            full = self.graph.as_graph_def(add_shapes=True)
            self._graph_def = (self.graph.version,
                               tf.compat.v1.graph_util.extract_sub_graph(full, [TRAIN_OP, self.loss.op.name]))
        return self._graph_def[1]

    def forget_graph_def(self) -> None:
        """Drop the cached :meth:`step_graph_def` (after changing the graph's ops in place)."""
        self._graph_def = None

    def step_op_names(self) -> list[str]:
        """Names of the ops of :meth:`step_graph_def`, in GraphDef order."""
        return [node.name for node in self.step_graph_def().node]


def build_training_step(model: ModelSpec, batch_size: int, *, learning_rate: float = 1e-3) -> TrainingStep:
    """Build ``model``'s training step at ``batch_size`` in a fresh graph (Adam, ``learning_rate``)."""
    _check_batch_size(batch_size)
    tf1 = tensorflow().compat.v1
    graph = _new_graph()
    with graph.as_default():
        placeholders = _placeholders(model, batch_size)
        net = model.make_model()
        loss = _forward_loss(model, net, [tensor for tensor, _ in placeholders])
        train_op = _optimizer(learning_rate).minimize(loss, name=TRAIN_OP)
        # Keras 3 makes batch norm's moving-average assigns in the call, but neither the update
        # group nor the loss depends on them: a step leaves the moving statistics as they are
        init_op = tf1.global_variables_initializer()
    return TrainingStep(model, int(batch_size), graph, train_op, loss, init_op, placeholders)


# The pieces of a build, shared with celeritas_tf.microbatch (which builds the same step per
# micro-batch): each runs inside ``graph.as_default()`` of a graph from _new_graph, in this order.


def _check_batch_size(batch_size: Any) -> None:
    """Refuse a batch size that is not a positive integer, in one line."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size <= 0:
        raise CeleritasInputError(f"batch size must be a positive integer, got {batch_size!r}")


def _new_graph() -> Any:
    """A fresh ``tf.Graph`` after ``keras.backend.clear_session()``, which resets Keras's
    layer-name counters so that every build names its ops alike."""
    tf = tensorflow()
    # lazy: Keras loads after tensorflow() has set TensorFlow up (graph mode, quiet)
    import keras

    keras.backend.clear_session()
    return tf.Graph()


def _placeholders(model: ModelSpec, batch_size: int) -> list[tuple[Any, TensorSpec]]:
    """One placeholder of shape ``(batch_size, ...)`` per input, then the labels', named as the specs."""
    tf1 = tensorflow().compat.v1
    return [(tf1.placeholder(spec.dtype, (batch_size, *spec.shape), name=spec.name), spec)
            for spec in (*model.inputs, model.labels)]


def _forward_loss(model: ModelSpec, net: Any, tensors: list[Any]) -> Any:
    """The loss (op ``loss`` in the current name scope) of ``net`` run in training mode on
    ``tensors``: the inputs, in the order of ``model.inputs``, then the labels."""
    tf = tensorflow()
    *inputs, labels = tensors
    outputs = net(inputs[0] if len(inputs) == 1 else inputs, training=True)
    return tf.identity(_loss_value(model.loss, labels, outputs), name=LOSS)


def _optimizer(learning_rate: float) -> Any:
    """The step's optimizer: ``tf.compat.v1`` Adam with its default moments and epsilon."""
    return tensorflow().compat.v1.train.AdamOptimizer(learning_rate)


def _loss_value(loss: Any, labels: Any, outputs: Any) -> Any:
    tf = tensorflow()
    if callable(loss):
        return loss(labels, outputs)
    # lazy: Keras loads after tensorflow() has set TensorFlow up (graph mode, quiet)
    import keras

    try:
        fn = keras.losses.get(loss)
    except (ValueError, TypeError) as exc:
        raise CeleritasInputError(f"unknown loss {loss!r} ({exc})") from None
    return tf.reduce_mean(fn(labels, outputs))

