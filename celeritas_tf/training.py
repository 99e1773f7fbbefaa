"""Train a model with a placement: its training step pinned to the devices a
``celeritas-placement/1`` names, each device running its ops in the recorded order, stepped with
the caller's own batches.

:func:`train_with_placement` (or :class:`PlacedTraining` with a :class:`TrainingConfig`) builds
the model's training step (:func:`celeritas_tf.step.build_training_step`: forward, backward, Adam)
at the batch size, checks that the placement was made for it (the structure digest
``op_keys_digest``, every op placed, a device count this machine runs, a ``device_order`` that
lists every op once on its own device), pins each op to its device
(:func:`celeritas_tf.profile.place_ops`), enforces the recorded order with control dependencies
(:func:`celeritas_tf.order.enforce_device_order`) unless the order is ``free``, and opens a
session with the variables initialised. A pipelined placement (its ``pipeline`` object,
docs/pipelining.md) runs as its micro-batch step instead
(:func:`celeritas_tf.microbatch.pipelined_arm`): each batch split into ``M`` micro-batches whose
replicas run where the placement puts their ops, in each device's recorded order of runs, the
gradients accumulated and Adam applied once. Then :meth:`PlacedTraining.step` runs one training step
on one batch and returns its loss, :meth:`PlacedTraining.fit` runs many (NumPy arrays, a
``tf.data.Dataset`` or any iterable of batches), and :meth:`PlacedTraining.save_weights` /
:meth:`PlacedTraining.load_weights` write and read the model's weights in Keras's format
(``.weights.h5``), the values the session holds.

The step runs in ``tf.compat.v1`` graph mode (the mode every step of this package runs in), so
Keras cannot read the variables itself: the values are read from the session and written through
a copy of the Keras model built eagerly (and read back the same way), so a file saved here loads
with ``model.load_weights`` in any Keras program, and one saved by Keras loads here.

A model is a :class:`~celeritas_tf.spec.ModelSpec` (or a name :func:`celeritas_tf.models.get_model`
resolves: a zoo model, ``MODULE:FUNCTION`` or a ``.keras`` file); the pipeline's champions are
resolved to a model and a placement by ``tasks.training`` (the registry lives above this layer).
"""

from __future__ import annotations

import math
import os
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.defaults import ENFORCED_ORDER, FREE_ORDER, ORDER_MODES
from celeritas_core.errors import CeleritasInputError, one_line
from celeritas_core.limits import MAX_BATCH_SIZE, MAX_DEVICES, MAX_STEPS, check_int, short_repr
from celeritas_core.readwrite.format_tags import PLACEMENT_FORMAT
from celeritas_core.readwrite.formats import (
    check_device_order,
    placement_batch_size,
    placement_device_order,
    placement_op_keys_digest,
    placement_order_mode,
    read_json,
)
from celeritas_core.readwrite.safe_io import check_input_file, check_output_path, write_atomic
from celeritas_tf.evaluation import check_assignment, check_devices
from celeritas_tf.identity import step_digest
from celeritas_tf.microbatch import pipelined_arm, placement_pipeline_run
from celeritas_tf.models import get_model
from celeritas_tf.order import OrderEdges, enforce_device_order
from celeritas_tf.profile import place_ops
from celeritas_tf.spec import ModelSpec, TensorSpec
from celeritas_tf.step import TrainingStep, build_training_step
from celeritas_tf.tf import run_options, session_config, tensorflow

#: What a weights file's name must end with: Keras's weights-only format.
WEIGHTS_SUFFIX = ".weights.h5"
#: ``progress(step, loss)`` after each step of :meth:`PlacedTraining.fit` (steps counted from 1).
Progress = Callable[[int, float], None]
#: Batches of random inputs and labels :meth:`PlacedTraining.synthetic_data` makes by default.
SYNTHETIC_BATCHES = 4


@dataclass(frozen=True)
class TrainingConfig:
    """How a placed model is trained; checked when built (one line naming the field).

    Parameters
    ----------
    batch_size : int
        The batch every step takes (1 to 1,000,000). The placement must have been made for the
        step's structure at this batch (its ``op_keys_digest``, when recorded).
    order : {"enforced", "free"} or None
        ``enforced``: each device runs its ops in the placement's ``device_order``;
        ``free``: in TensorFlow's own order; None (default): the placement's ``order_mode``.
    learning_rate : float
        Adam's learning rate, finite and above 0 (at most 10).
    seed : int or None
        Seeds Keras, NumPy and TensorFlow (``keras.utils.set_random_seed``) before the step is
        built, so the initial weights and :meth:`PlacedTraining.synthetic_data` repeat; None
        leaves the process's random state alone.
    """

    batch_size: int
    order: str | None = None
    learning_rate: float = 1e-3
    seed: int | None = None

    def __post_init__(self) -> None:
        check_int(self.batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        if self.order is not None and self.order not in ORDER_MODES:
            raise CeleritasInputError(f"order: must be one of {', '.join(ORDER_MODES)}, got "
                                      f"{short_repr(self.order)}")
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
                or not 0 < rate <= 10:
            raise CeleritasInputError(f"learning_rate: must be a finite number above 0 and at most 10, got "
                                      f"{short_repr(rate)}")
        if self.seed is not None:
            check_int(self.seed, "seed", low=0, high=2**32 - 1)


class PlacedTraining:
    """A model's training step placed on devices as a placement says, ready to run batches.

    Build it with :func:`train_with_placement` (or ``PlacedTraining(model, placement, config)``);
    every check happens here, before anything runs. It holds a ``tf.compat.v1.Session`` on the
    step's graph until :meth:`close` (or the end of a ``with`` block).

    Parameters
    ----------
    model : ModelSpec or str
        The model; a string is resolved by :func:`celeritas_tf.models.get_model` (a zoo name, with
        its small configuration; ``MODULE:FUNCTION``; a ``.keras`` file).
    placement : mapping, str or os.PathLike
        A ``celeritas-placement/1`` document, or the path of its JSON file.
    config : TrainingConfig
        Batch size, execution order, learning rate, seed.
    source : str, optional
        Where the placement came from, named in every error (default: its path when given one).

    Attributes
    ----------
    model : ModelSpec
        The model trained.
    config : TrainingConfig
        As given.
    num_devices : int
        The placement's devices (``len(devices)``); device ``k`` is logical device ``k`` here.
    placer : str
        The placement's ``placer`` (``"unknown"`` when absent).
    order_mode : str
        The order the step runs in: ``"enforced"`` or ``"free"``.
    order_edges : OrderEdges or None
        The control edges the enforced order added (None when free).
    step_graph : TrainingStep
        The built, placed step.
    steps_run : int
        Training steps run so far.

    Raises
    ------
    CeleritasInputError
        One line naming the placement: not a placement; a placement of another model or of
        another structure (digest); ops missing or unknown; more devices than this machine runs;
        a bad ``device_order``, or ``enforced`` asked of a placement that records none.
    """

    def __init__(self, model: ModelSpec | str, placement: Mapping[str, Any] | str | os.PathLike[str],
                 config: TrainingConfig, *, source: str | None = None) -> None:
        if not isinstance(config, TrainingConfig):
            raise CeleritasInputError(f"config: expected a TrainingConfig, got {type(config).__name__}")
        if isinstance(placement, str | os.PathLike):
            source = source or os.fspath(placement)
            placement = read_json(placement)
        doc = _placement_document(placement, source)
        self.config = config
        self.source = source
        self.placer = str(doc.get("placer") or "unknown")
        self.num_devices = len(doc["devices"])
        assignment: dict[str, int] = doc["assignment"]
        _check_device_count(self.num_devices, source)
        device_order = placement_device_order(doc, source)
        recorded_mode = placement_order_mode(doc, source)  # checked whatever is asked: a bad file is bad
        self.order_mode = config.order or recorded_mode
        if self.order_mode == ENFORCED_ORDER and device_order is None:
            raise CeleritasInputError("the placement records no device_order, so its order cannot be "
                                      "enforced (order 'free' runs it in TensorFlow's own order)",
                                      source=source)
        spec = get_model(model) if isinstance(model, str) else model
        if not isinstance(spec, ModelSpec):
            raise CeleritasInputError(f"model: expected a ModelSpec or a model name, got "
                                      f"{type(model).__name__}")
        self.model = spec
        if config.seed is not None:
            _keras().utils.set_random_seed(config.seed)
        built: list[Any] = []

        def make_model() -> Any:  # the step's Keras model, kept for its weights
            net = spec.make_model()
            built.append(net)
            return net

        _check_batch(doc, config.batch_size, source)
        run = placement_pipeline_run(doc, source)
        self.micro_batches = run.micro_batches if run is not None else 1
        self.order_edges: OrderEdges | None = None
        if run is not None:  # the pipelined step: micro-batch replicas, gradients accumulated
            step, _ = pipelined_arm(replace(spec, make_model=make_model), config.batch_size, assignment, run,
                                    enforced=self.order_mode == ENFORCED_ORDER, source=source,
                                    learning_rate=float(config.learning_rate))
            self._net = built[-1]
        else:
            step = build_training_step(replace(spec, make_model=make_model), config.batch_size,
                                       learning_rate=float(config.learning_rate))
            self._net = built[-1]
            _check_structure(step, doc, source)
            check_assignment(step.step_op_names(), assignment, self.num_devices, source)
            if device_order is not None:
                check_device_order(device_order, assignment, source)
            place_ops(step, assignment)
            if self.order_mode == ENFORCED_ORDER:
                self.order_edges = enforce_device_order(step, device_order or (), source=source)
        self.step_graph: TrainingStep = step
        self.steps_run = 0
        tf1 = tensorflow().compat.v1
        self._session = tf1.Session(graph=step.graph, config=session_config(self.num_devices))
        self._closer = weakref.finalize(self, self._session.close)
        self._session.run(step.init_op)
        self._options = run_options(self.num_devices)
        self._mirror_model: Any = None

    # ------------------------------------------------------------------ running
    def step(self, inputs: Any, labels: Any) -> float:
        """Run one training step (forward, backward, Adam update) on one batch; its loss.

        Parameters
        ----------
        inputs : array-like, sequence or mapping of array-likes
            The model's inputs for one batch: one array for a one-input model, else a sequence in
            the order of ``model.inputs`` or a mapping by input name. Each has the shape
            ``(batch_size, *input.shape)``.
        labels : array-like
            The labels, ``(batch_size, *labels.shape)``.

        Returns
        -------
        float
            The batch's loss before the update.
        """
        self._check_open()
        feed = self._feed(inputs, labels)
        _, loss = self._session.run([self.step_graph.train_op, self.step_graph.loss], feed,
                                    options=self._options)
        self.steps_run += 1
        return float(loss)

    def fit(self, data: Any, *, steps: int | None = None, progress: Progress | None = None) -> list[float]:
        """Run training steps over ``data``; the loss of each, in order.

        Parameters
        ----------
        data : tuple, tf.data.Dataset or iterable
            ``(inputs, labels)`` of NumPy arrays holding whole examples (inputs as for
            :meth:`step`, with any number of examples, at least one batch): taken in consecutive
            batches, from the start again when they run out, the last partial batch left out;
            or a ``tf.data.Dataset`` whose elements are batches, ``(inputs, labels)`` or a
            mapping by input and label names; or any iterable of ``(inputs, labels)`` batches.
        steps : int, optional
            Steps to run (1 to 100,000). Default: one pass over arrays (every whole batch), or
            until a dataset or iterable ends. A dataset or iterable that ends first ends the fit
            early (the losses say how many ran).
        progress : callable, optional
            ``progress(step, loss)`` after each step (steps counted from 1 in this call).

        Returns
        -------
        list of float
            One loss per step run.
        """
        if steps is not None:
            check_int(steps, "steps", low=1, high=MAX_STEPS)
        losses: list[float] = []
        for inputs, labels in self._batches(data, steps):
            losses.append(self.step(inputs, labels))
            if progress is not None:
                progress(len(losses), losses[-1])
            if steps is not None and len(losses) >= steps:
                break
        return losses

    def synthetic_data(self, batches: int = SYNTHETIC_BATCHES, *, seed: int | None = None) -> tuple[Any, Any]:
        """Random inputs and labels of the model's shapes and dtypes, ``batches`` batches of them.

        Repeated by :meth:`fit`, they are a few examples the model learns by heart: the loss
        falls, which checks the placed step end to end (it is no real training). Integer inputs
        and labels are drawn from their value range (e.g. the classes).

        Parameters
        ----------
        batches : int
            Batches of examples (1 to 100,000).
        seed : int, optional
            Random seed (default: the config's seed, else 0).

        Returns
        -------
        tuple
            ``(inputs, labels)``: inputs one array for a one-input model, else a dict by input name.
        """
        check_int(batches, "batches", low=1, high=MAX_STEPS)
        rng = np.random.default_rng(seed if seed is not None else (self.config.seed or 0))
        feeds = [self.step_graph.feed_dict(rng) for _ in range(batches)]
        arrays = {spec.name: np.concatenate([f[tensor] for f in feeds])
                  for tensor, spec in self.step_graph.placeholders}
        inputs = {spec.name: arrays[spec.name] for spec in self.model.inputs}
        shown = next(iter(inputs.values())) if len(inputs) == 1 else inputs
        return shown, arrays[self.model.labels.name]

    # ------------------------------------------------------------------ weights
    def weights(self) -> list[np.ndarray]:
        """The model's weights as the session holds them now (Keras's order: ``model.weights``)."""
        self._check_open()
        return [np.asarray(v) for v in self._session.run([w.value for w in self._net.weights])]

    def save_weights(self, path: str | os.PathLike[str]) -> Path:
        """Write the model's current weights (the trained ones) in Keras's format.

        The file is written whole or not at all (a temporary file renamed into place) and loads
        with Keras's ``model.load_weights`` into the model, or here with :meth:`load_weights`.

        Parameters
        ----------
        path : str or os.PathLike
            A file name ending in ``.weights.h5``; an existing regular file is replaced.

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        target = _weights_path(path)
        check_output_path(target)
        values = self.weights()
        mirror = self._mirror()
        with tempfile.TemporaryDirectory(prefix="celeritas-weights-") as tmp:
            staged = Path(tmp) / f"model{WEIGHTS_SUFFIX}"
            with _eager_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # Keras's own np.array(variable)
                for variable, value in zip(mirror.weights, values, strict=True):
                    variable.assign(value)
                mirror.save_weights(str(staged))
            data = staged.read_bytes()
        return write_atomic(target, lambda fh: fh.write(data), binary=True)

    def load_weights(self, path: str | os.PathLike[str]) -> None:
        """Set the model's weights from a Keras weights file (``.weights.h5``); the optimizer's
        state (Adam's moments and step count) is left as it is.

        Nothing changes unless every weight loads: a file of another model, or of another
        configuration of it, is refused in one line.

        Parameters
        ----------
        path : str or os.PathLike
            A file written by :meth:`save_weights` or by Keras's ``model.save_weights``.
        """
        self._check_open()
        source = _weights_path(path)
        check_input_file(source)
        mirror = self._mirror()
        try:
            with _eager_mode():
                mirror.load_weights(source)
                values = [np.asarray(w.numpy()) for w in mirror.weights]
        except Exception as exc:  # Keras reports a foreign or corrupt file with many exception types
            raise CeleritasInputError(f"cannot load these weights into {self.model.name!r} "
                                      f"({type(exc).__name__}: {one_line(str(exc).strip())[:300]})",
                                      source=source) from None
        variables = [w.value for w in self._net.weights]
        stored = _stored_arrays(source)
        if stored != len(variables):  # Keras loads by position: a longer file of a bigger model could pass
            raise CeleritasInputError(f"the file holds {stored} weights, the model {self.model.name!r} "
                                      f"{len(variables)}", source=source)
        for variable, value in zip(variables, values, strict=True):
            if tuple(value.shape) != tuple(variable.shape):
                raise CeleritasInputError(f"weight {variable.name!r} has shape {tuple(value.shape)} in the "
                                          f"file, {tuple(variable.shape)} in the model", source=source)
        feed = {v.initializer.inputs[1]: value for v, value in zip(variables, values, strict=True)}
        self._session.run([v.initializer for v in variables], feed)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the session (idempotent); the object can no longer run."""
        self._closer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return not self._closer.alive

    def __enter__(self) -> PlacedTraining:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PlacedTraining({self.model.name!r}, batch {self.config.batch_size}, {self.num_devices} "
                f"devices, placer {self.placer!r}, {self.order_mode} order, {self.steps_run} steps run)")

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self.closed:
            raise CeleritasInputError("this PlacedTraining is closed")

    def _mirror(self) -> Any:
        """A copy of the Keras model built eagerly, whose variables Keras can save and load."""
        if self._mirror_model is None:
            keras = _keras()
            with _eager_mode():
                keras.backend.clear_session()  # layer names as in every fresh build: the file's paths
                mirror = self.model.make_model()
            mine = [tuple(w.shape) for w in self._net.weights]
            theirs = [tuple(w.shape) for w in mirror.weights]
            if mine != theirs:
                raise CeleritasInputError(f"model {self.model.name!r} builds different weights each time "
                                          f"({len(mine)} then {len(theirs)}): its weights cannot be saved")
            self._mirror_model = mirror
        return self._mirror_model

    def _feed(self, inputs: Any, labels: Any) -> dict[Any, np.ndarray]:
        """The feed of one batch, every array checked against its placeholder (one line each)."""
        specs = self.model.inputs
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - {s.name for s in specs})
            missing = [s.name for s in specs if s.name not in inputs]
            if unknown or missing:
                raise CeleritasInputError(f"inputs: expected the model's inputs {[s.name for s in specs]}, "
                                          f"got {sorted(map(str, inputs))}")
            given = [inputs[s.name] for s in specs]
        elif len(specs) == 1:
            given = [inputs]
        elif isinstance(inputs, Sequence) and not isinstance(inputs, str) and len(inputs) == len(specs):
            given = list(inputs)
        else:
            raise CeleritasInputError(f"inputs: the model takes {len(specs)} inputs "
                                      f"{[s.name for s in specs]}: give a sequence of that many arrays or a "
                                      "mapping by name")
        tensors = [tensor for tensor, _ in self.step_graph.placeholders]
        values = [*given, labels]
        specs_all = [*specs, self.model.labels]
        batch = self.config.batch_size
        return {tensor: _batch_array(value, spec, batch, "labels" if i == len(specs) else "inputs")
                for i, (tensor, value, spec) in enumerate(zip(tensors, values, specs_all, strict=True))}

    def _batches(self, data: Any, steps: int | None) -> Iterator[tuple[Any, Any]]:
        """The batches of ``data`` (see :meth:`fit`)."""
        tf = tensorflow()
        if isinstance(data, tf.data.Dataset):
            return _dataset_batches(data, self.model)
        if isinstance(data, tuple) and len(data) == 2 and _is_arrays(data[1]):
            return self._array_batches(data[0], data[1], steps)
        if isinstance(data, Iterable) and not isinstance(data, str | bytes | Mapping):
            return (_pair(element) for element in data)
        raise CeleritasInputError(f"data: expected (inputs, labels) arrays, a tf.data.Dataset or an iterable "
                                  f"of (inputs, labels) batches, got {type(data).__name__}")

    def _array_batches(self, inputs: Any, labels: Any, steps: int | None) -> Iterator[tuple[Any, Any]]:
        """Consecutive whole batches of example arrays, from the start again when they run out."""
        pack: Callable[[list[Any]], Any]
        if isinstance(inputs, Mapping):
            keys = list(inputs)
            columns = [np.asarray(inputs[k]) for k in keys]
            pack = lambda parts: dict(zip(keys, parts, strict=True))  # noqa: E731
        elif isinstance(inputs, list | tuple) and len(self.model.inputs) > 1:
            columns, pack = [np.asarray(v) for v in inputs], list
        else:
            columns, pack = [np.asarray(inputs)], lambda parts: parts[0]
        y = np.asarray(labels)
        sizes = [a.shape[0] if a.ndim else 0 for a in (*columns, y)]
        batch = self.config.batch_size
        if len(set(sizes)) != 1:
            raise CeleritasInputError(f"data: the inputs and labels hold different numbers of examples "
                                      f"{sizes}")
        if sizes[0] < batch:
            raise CeleritasInputError(f"data: {sizes[0]} examples, fewer than one batch of {batch}")
        whole = sizes[0] // batch
        for i in range(whole if steps is None else steps):
            part = slice((i % whole) * batch, (i % whole + 1) * batch)
            yield pack([a[part] for a in columns]), y[part]


def train_with_placement(model: ModelSpec | str, placement: Mapping[str, Any] | str | os.PathLike[str], *,
                         batch_size: int, order: str | None = None, learning_rate: float = 1e-3,
                         seed: int | None = None, source: str | None = None) -> PlacedTraining:
    """Place ``model``'s training step as ``placement`` says and open it for training.

    Parameters
    ----------
    model : ModelSpec or str
        The model (a string: a zoo name, ``MODULE:FUNCTION`` or a ``.keras`` file).
    placement : mapping, str or os.PathLike
        A ``celeritas-placement/1`` document (``celeritas place`` writes one for a graph that
        ``celeritas graph`` extracted; the pipeline publishes its champion's), or its path.
    batch_size : int
        The batch each step takes.
    order : {"enforced", "free"}, optional
        The execution order; default the placement's ``order_mode``.
    learning_rate : float
        Adam's learning rate (default 1e-3).
    seed : int, optional
        Seeds the initial weights and the synthetic data (see :class:`TrainingConfig`).
    source : str, optional
        Names the placement in errors (default: its path).

    Returns
    -------
    PlacedTraining
        Ready to :meth:`~PlacedTraining.step` or :meth:`~PlacedTraining.fit`; close it (or use
        ``with``) when done.

    Raises
    ------
    CeleritasInputError
        One line: a bad setting, or a placement made for another model, structure or batch's
        structure, for more devices than this machine runs, or with a bad order.

    Examples
    --------
    A placement of every op on one device (``celeritas place`` makes real ones), 20 steps on
    two batches of synthetic data, the weights saved and loaded back:

    >>> import os, tempfile
    >>> from celeritas_tf.models import get_model
    >>> from celeritas_tf.step import build_training_step
    >>> model = get_model("mlp")
    >>> ops = build_training_step(model, 8).step_op_names()
    >>> placement = {"format": "celeritas-placement/1", "devices": ["gpu:0"],
    ...              "assignment": dict.fromkeys(ops, 0)}
    >>> with train_with_placement(model, placement, batch_size=8, learning_rate=0.01, seed=1) as training:
    ...     losses = training.fit(training.synthetic_data(batches=2), steps=20)
    ...     path = training.save_weights(os.path.join(tempfile.mkdtemp(), "mlp.weights.h5"))
    ...     trained = training.weights()
    >>> len(losses), losses[-1] < losses[0] / 2
    (20, True)
    >>> with train_with_placement(model, placement, batch_size=8) as fresh:
    ...     fresh.load_weights(path)
    ...     all((a == b).all() for a, b in zip(fresh.weights(), trained))
    True
    >>> train_with_placement("mlp", placement, batch_size=8, order="sorted")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: order: must be one of enforced, free, got 'sorted'
    """
    config = TrainingConfig(batch_size=batch_size, order=order, learning_rate=learning_rate, seed=seed)
    return PlacedTraining(model, placement, config, source=source)


# ---------------------------------------------------------------------- checks
def _placement_document(doc: Any, source: str | None) -> dict[str, Any]:
    """``doc`` if it is a placement document with devices and an assignment of device indices."""
    if not isinstance(doc, Mapping) or doc.get("format") != PLACEMENT_FORMAT:
        raise CeleritasInputError(f"not a {PLACEMENT_FORMAT} document (field 'format')", source=source)
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices) \
            or len(devices) > MAX_DEVICES:
        raise CeleritasInputError(f"field 'devices' must be a list of 1 to {MAX_DEVICES:,} device names",
                                  source=source)
    assignment = doc.get("assignment")
    if not isinstance(assignment, Mapping):
        raise CeleritasInputError("field 'assignment' must map op names to device indices", source=source)
    for op, device in assignment.items():
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < len(devices):
            raise CeleritasInputError(f"field 'assignment': op {op!r} has device {short_repr(device)}, "
                                      f"expected an index 0..{len(devices) - 1} of the placement's devices",
                                      source=source)
    return dict(doc)


def _check_device_count(num_devices: int, source: str | None) -> None:
    """A placement's devices must be devices this machine runs (:func:`check_devices`)."""
    try:
        check_devices(num_devices)
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"the placement has {num_devices} devices, more than this machine runs "
                                  f"({exc.message.removeprefix('--devices: ')})", source=source) from None


def _check_batch(doc: Mapping[str, Any], batch: int, source: str | None) -> None:
    """The placement's ``batch_size`` (when recorded) must be the batch trained at: its op costs
    and memory (and so which device overflows) are that batch's."""
    recorded = placement_batch_size(doc, source)
    if recorded is not None and recorded != batch:
        raise CeleritasInputError(f"the placement was made for batch size {recorded}, not {batch}: its op "
                                  f"costs and memory are batch {recorded}'s (train at batch {recorded}, or "
                                  f"place the model at batch {batch})", source=source)


def _check_structure(step: TrainingStep, doc: Mapping[str, Any], source: str | None) -> None:
    """The placement's ``op_keys_digest`` (when recorded) must be the step's: else it was made for
    another model (its ``graph`` names another), or another configuration or batch's structure."""
    recorded = placement_op_keys_digest(doc, source)
    if recorded is None:
        return
    mine = step_digest(step)
    if recorded == mine:
        return
    name, graph = step.model.name, doc.get("graph")
    if isinstance(graph, str) and graph and graph != name:
        raise CeleritasInputError(f"the placement was made for model {graph!r}, not {name!r} (op keys digest "
                                  f"{recorded}, this step {mine})", source=source)
    raise CeleritasInputError(f"the placement was made for another structure of {name!r}: op keys digest "
                              f"{recorded}, the step at batch {step.batch_size} has {mine} (another "
                              f"configuration of the model, another batch size's structure or another "
                              f"TensorFlow)", source=source)


def _batch_array(value: Any, spec: TensorSpec, batch: int, what: str) -> np.ndarray:
    """``value`` as one batch of ``spec``: its exact shape, its dtype (casting only within a kind)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise CeleritasInputError(f"{what} {spec.name!r}: not an array ({exc})") from None
    shape = (batch, *spec.shape)
    if array.shape != shape:
        raise CeleritasInputError(f"{what} {spec.name!r}: expected shape {shape} (a batch of {batch}), got "
                                  f"{array.shape}")
    if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
        raise CeleritasInputError(f"{what} {spec.name!r}: expected {spec.dtype} values, got {array.dtype}")
    return array.astype(spec.dtype, copy=False)


def _is_arrays(value: Any) -> bool:
    """Whether ``value`` looks like a NumPy array (or a nested list of numbers), not a batch iterator."""
    if isinstance(value, np.ndarray):
        return True
    return isinstance(value, list) and not (value and isinstance(value[0], tuple))


def _pair(element: Any) -> tuple[Any, Any]:
    if not isinstance(element, tuple | list) or len(element) != 2:
        raise CeleritasInputError(f"data: each batch must be a pair (inputs, labels), got "
                                  f"{type(element).__name__}")
    return element[0], element[1]


def _dataset_batches(dataset: Any, model: ModelSpec) -> Iterator[tuple[Any, Any]]:
    """The batches of a ``tf.data.Dataset`` (graph mode: a one-shot iterator in the dataset's own
    graph and session), as NumPy: ``(inputs, labels)`` or a mapping by input and label names."""
    tf = tensorflow()
    tf1 = tf.compat.v1
    graph = getattr(dataset, "_graph", None) or tf1.get_default_graph()
    with graph.as_default():
        following = tf1.data.make_one_shot_iterator(dataset).get_next()
    # our session config: TensorFlow's default would create every GPU and take its memory
    with tf1.Session(graph=graph, config=session_config(1)) as session:
        while True:
            try:
                element = session.run(following)
            except tf.errors.OutOfRangeError:
                return
            if isinstance(element, Mapping):
                names = [s.name for s in model.inputs]
                wanted = [*names, model.labels.name]
                if set(element) != set(wanted):
                    raise CeleritasInputError(f"data: a dataset of mappings needs the keys {wanted}, got "
                                              f"{sorted(element)}")
                yield {n: element[n] for n in names}, element[model.labels.name]
            else:
                yield _pair(element)


def _weights_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not text.endswith(WEIGHTS_SUFFIX):
        raise CeleritasInputError(f"a weights file's name must end in {WEIGHTS_SUFFIX} (Keras's format)",
                                  source=text)
    return text


def _stored_arrays(path: str) -> int:
    """How many variables' values a Keras weights file holds (its datasets under ``vars``)."""
    import h5py  # lazy: Keras's own file library, needed only to read a weights file

    found: list[str] = []
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset)
                          and "vars" in name.split("/") else None)
    return len(found)


def _keras() -> Any:
    """``keras``, imported after TensorFlow is set up (graph mode, quiet)."""
    tensorflow()
    import keras  # lazy: Keras loads after tensorflow() has set TensorFlow up (graph mode, quiet)

    return keras


def _eager_mode() -> Any:
    """A block run eagerly, where Keras can read and write variables (the process is otherwise in
    graph mode: :func:`celeritas_tf.tf.tensorflow`)."""
    return tensorflow().__internal__.eager_context.eager_mode()


__all__ = ["ENFORCED_ORDER", "FREE_ORDER", "SYNTHETIC_BATCHES", "WEIGHTS_SUFFIX", "PlacedTraining",
           "Progress", "TrainingConfig", "train_with_placement"]
