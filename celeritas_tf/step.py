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
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size <= 0:
        raise CeleritasInputError(f"batch size must be a positive integer, got {batch_size!r}")
    tf = tensorflow()
    tf1 = tf.compat.v1
    # lazy: Keras loads after tensorflow() has set TensorFlow up (graph mode, quiet)
    import keras

    keras.backend.clear_session()
    graph = tf.Graph()
    with graph.as_default():
        placeholders = []
        for spec in (*model.inputs, model.labels):
            tensor = tf1.placeholder(spec.dtype, (batch_size, *spec.shape), name=spec.name)
            placeholders.append((tensor, spec))
        labels = placeholders[-1][0]
        net = model.make_model()
        inputs = [p for p, _ in placeholders[:-1]]
        outputs = net(inputs[0] if len(inputs) == 1 else inputs, training=True)
        loss = tf.identity(_loss_value(model.loss, labels, outputs), name=LOSS)
        optimizer = tf1.train.AdamOptimizer(learning_rate)
        train_op = optimizer.minimize(loss, name=TRAIN_OP)
        # Keras layers with state updates (batch norm moving averages) run with the step
        init_op = tf1.global_variables_initializer()
    return TrainingStep(model, int(batch_size), graph, train_op, loss, init_op, placeholders)


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

