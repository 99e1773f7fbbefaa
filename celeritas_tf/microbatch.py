"""A pipelined training step: the batch split into micro-batches, gradients accumulated, one update.

GPipe (Huang et al. 2019) splits each batch into ``M`` equal micro-batches so that the stages of
a pipeline can work on different micro-batches at once. :func:`build_microbatch_step` builds that
step as one ``tf.compat.v1`` graph, by the conventions of
:func:`celeritas_tf.step.build_training_step` (fresh graph, ``keras.backend.clear_session()``,
the same placeholders, loss and Adam optimizer; it reuses that module's pieces):

- the placeholders hold the whole batch, ``(batch_size, ...)``, so
  :meth:`~celeritas_tf.step.TrainingStep.feed_dict` feeds it as it feeds a single-batch step;
  ``micro_batches/<input>`` (``tf.split``) cuts each into ``M`` slices along the batch;
- replica ``k`` (name scope ``micro_<k>``) runs the model's forward pass and loss on slice ``k``
  and the backward pass of its own loss (``Optimizer.compute_gradients``), reading the variables
  that every replica shares;
- per variable ``v`` (op name ``<v>``), ``accumulate/<v>/add_<k>`` adds replica ``k``'s gradient
  of ``v`` to the sum of the replicas before it (``k = 1 … M − 1``, in micro-batch order: one sum
  held while the micro-batches go by, as the simulator's accumulation chain,
  :mod:`celeritas_core.pipeline.unroll`) and ``accumulate/<v>/mean`` divides the sum by ``M``
  (the sum of the gradients of
  ``loss_k / M``, divided once rather than per replica): the gradient of the mean of the
  replicas' losses, which is the full-batch loss (each replica's loss is the mean over its
  slice, and the slices are equal). A sparse gradient (``tf.IndexedSlices``, e.g. of an
  embedding) is accumulated as ``accumulate/<v>/indices`` and ``accumulate/<v>/values`` (the
  replicas' rows concatenated: rows of one index add up in the update, as they do in a
  single-batch step) and ``accumulate/<v>/mean`` (the values divided by ``M``). Each addition
  ``add_<k>`` is colocated with the op that produces the gradient (every replica's copy of it
  runs on one device), so the sum crosses to the variable's device once per step, as the
  simulator models it; ``mean`` and the sparse concatenations are colocated with the variable.
  ``accumulate/loss/sum`` and
  ``accumulate/loss/mean`` average the replicas' losses into the step's ``loss``;
- the Adam update is applied once, to the accumulated gradients, as the update group
  :data:`~celeritas_tf.step.TRAIN_OP`: variables, Adam slots, ``beta1_power``/``beta2_power`` and
  the ``train_step/...`` updates carry the names they have in the single-batch step.

Names. Replica ``k``'s copy of the op a single-batch step names ``X`` is named ``micro_<k>/X``;
inside a gradient scope the replica's forward op names appear again with their prefix
(``micro_<k>/gradients/micro_<k>/X_grad/...`` for ``gradients/X_grad/...``), so a replica op's
single-batch name is its name with every path component ``micro_<k>`` taken out. TensorFlow
appends ``_1``, ``_2`` to a name already in use (the mlp's layer scopes are ``mlp_2/dense_0_1``
in a single-batch step because building the model used ``mlp`` and ``dense_0``), so each replica
scope starts with the graph's table of names in use as it was when the model was made, copied
under ``micro_<k>/`` (``tf.Graph._names_in_use``, a private attribute, as
:mod:`celeritas_tf.order` and :mod:`celeritas_tf.profile` use ``Operation._add_control_input``
and ``_set_device``): the replica then names its ops as the single-batch step does. Slice ``k``
of an input enters replica ``k`` as ``micro_<k>/<input>`` (an ``Identity``), whose single-batch
name is the input's placeholder. :attr:`MicrobatchStep.replica_of` maps each replica op of the
step to ``(single-batch name, k)``. Every single-batch name it holds is an op of the single-batch
step, and each replica has a copy of every op of it but the shared ones, on every zoo model
(``tests/tf/test_microbatch.py`` checks all but Inception-V3, whose build takes half a minute;
checked once by hand at ``M = 2``, it holds there too); the exceptions would be ops named from
a counter kept outside the graph (a name a model makes up anew on each call). Ops shared by the
replicas (placeholders, the ``micro_batches/`` splits, variables, the ``accumulate/`` ops,
``loss``, the optimizer's slots and updates) are not in it. Each replica reads the variables
itself: Keras's layer call makes the reads (``.../ReadVariableOp``), so they are replica ops.
The variables are made once, by ``make_model`` (a Keras functional model, as every zoo model,
builds its layers there); a model whose layers made their variables in their first call would
make them in replica 0's scope, where they would count as replica 0's ops.

``micro_batches == 1`` is built the same way (one replica, ``micro_0``, and the accumulation
ops), so that a placement of a micro-batch step means the same for every ``M``.

Batch normalisation. A batch-norm layer in training normalises by the statistics of the batch
it is called on, so replica ``k`` uses slice ``k``'s statistics: the step's loss is the mean
over ``k`` of the loss that ``build_training_step(model, batch_size // M)`` computes on slice
``k`` alone (same weights), not the full-batch loss, and the update applies the mean of those
steps' gradients. The moving averages are updated neither per micro-batch nor per step: Keras 3
in graph mode makes their assign ops (``.../batch_norm_*/AssignVariableOp``) in each call, but no
op of the update group or the loss depends on them, so a step never runs them, in a
single-batch step as in a micro-batch one (the moving statistics keep their initial values).
``tests/tf/test_microbatch.py`` checks each of these statements on Tensor Holography.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.pipeline_json import pipeline_from_json
from celeritas_tf.order import enforce_device_order
from celeritas_tf.spec import ModelSpec
from celeritas_tf.step import (
    LOSS,
    TRAIN_OP,
    TrainingStep,
    _check_batch_size,
    _forward_loss,
    _new_graph,
    _optimizer,
    _placeholders,
)
from celeritas_tf.tf import step_device, tensorflow

#: Name scope of the ``tf.split`` ops that cut each placeholder into micro-batches.
SPLIT_SCOPE = "micro_batches"
#: Name scope of the ops that add up the replicas' gradients and losses.
ACCUMULATE_SCOPE = "accumulate"
#: ``k`` in a pair of a device order that names a shared op (an op no replica has a copy of).
SHARED = -1

#: An op of a replica's name scope: ``micro_<k>/...``.
_REPLICA_OP = re.compile(r"^micro_(0|[1-9][0-9]*)/")


def replica_scope(k: int) -> str:
    """The name scope of micro-batch ``k``'s replica: ``micro_<k>``.

    Examples
    --------
    >>> replica_scope(3)
    'micro_3'
    """
    return f"micro_{k}"


@dataclass(eq=False)
class MicrobatchStep:
    """A built micro-batch step (:func:`build_microbatch_step`), with what placing it by a
    single-batch placement needs: which single-batch op each replica op stands for.

    Attributes
    ----------
    step : TrainingStep
        The step; it runs as any :class:`~celeritas_tf.step.TrainingStep` (``feed_dict``,
        ``init_op``, ``train_op``, ``loss``), so existing code that runs steps runs it.
    micro_batches : int
        ``M``, the number of replicas.
    replica_of : dict of str to (str, int)
        Each replica op of the step (op name) → ``(name of the op in the single-batch step,
        micro-batch k)``. Shared ops are not in it.
    """

    step: TrainingStep
    micro_batches: int
    replica_of: dict[str, tuple[str, int]]
    _op_of: dict[tuple[str, int], str] = field(default_factory=dict, init=False, repr=False)
    _shared: frozenset[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._op_of = {pair: name for name, pair in self.replica_of.items()}

    def op_name(self, name: str, k: int) -> str | None:
        """The op of the step that runs single-batch op ``name`` for micro-batch ``k``; ``k ==
        SHARED`` (-1) names a shared op by its own name. None when the step has no such op."""
        if k == SHARED:
            return name if name in self.shared_op_names() else None
        return self._op_of.get((name, k))

    def shared_op_names(self) -> frozenset[str]:
        """The ops of the step that no replica has a copy of (placeholders, splits, variables,
        accumulation, ``loss``, the optimizer's update)."""
        if self._shared is None:
            self._shared = frozenset(n for n in self.step.step_op_names() if n not in self.replica_of)
        return self._shared


def build_microbatch_step(model: ModelSpec, batch_size: int, micro_batches: int, *,
                          learning_rate: float = 1e-3) -> MicrobatchStep:
    """Build ``model``'s training step at ``batch_size`` as ``micro_batches`` replicas, each on
    an equal slice of the batch, whose gradients are accumulated into one Adam update.

    Parameters
    ----------
    model : ModelSpec
        The model (:func:`celeritas_tf.models.get_model`).
    batch_size : int
        The whole batch, as the placeholders hold it.
    micro_batches : int
        How many equal slices the batch is cut into (``M``); must divide ``batch_size``.
    learning_rate : float, optional
        Adam's learning rate, as :func:`~celeritas_tf.step.build_training_step`'s.

    Returns
    -------
    MicrobatchStep
        The step (its ``loss`` the mean of the replicas' losses) and its replicas' ops.

    Raises
    ------
    CeleritasInputError
        One line when the batch size or ``micro_batches`` is not a positive integer, or
        ``micro_batches`` does not divide the batch size.

    Examples
    --------
    >>> from celeritas_tf.models import get_model
    >>> mstep = build_microbatch_step(get_model("mlp"), 8, 2)
    >>> mstep.replica_of["micro_1/gradients/micro_1/mlp_2/logits_1/MatMul_grad/MatMul"]
    ('gradients/mlp_2/logits_1/MatMul_grad/MatMul', 1)
    >>> build_microbatch_step(get_model("mlp"), 8, 3)
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: micro_batches (3) must divide the batch size (8)
    """
    _check_batch_size(batch_size)
    m = micro_batches
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise CeleritasInputError(f"micro_batches must be a positive integer, got {m!r}")
    if batch_size % m:
        raise CeleritasInputError(f"micro_batches ({m}) must divide the batch size ({batch_size})")
    m = int(m)
    tf = tensorflow()
    tf1 = tf.compat.v1
    graph = _new_graph()
    with graph.as_default():
        placeholders = _placeholders(model, batch_size)
        net = model.make_model()
        # the names in use when the single-batch step starts its forward pass
        top_level = _names_in_use(graph)
        with tf.name_scope(SPLIT_SCOPE):
            slices = [tf.split(tensor, m, axis=0, name=spec.name) for tensor, spec in placeholders]
        optimizer = _optimizer(learning_rate)
        losses: list[Any] = []
        grads: list[list[tuple[Any, Any]]] = []
        for k in range(m):
            scope = replica_scope(k)
            with tf.name_scope(scope) as opened:
                if opened != f"{scope}/":  # the model's own ops took the name
                    raise CeleritasInputError(f"model {model.name!r}: its op names use {scope!r}, the name "
                                              "scope of a micro-batch replica")
                tensors = [tf.identity(parts[k], name=spec.name)
                           for parts, (_, spec) in zip(slices, placeholders, strict=True)]
                _mirror_names(graph, top_level, scope)
                loss_k = _forward_loss(model, net, tensors)
                grads.append(optimizer.compute_gradients(loss_k))
            losses.append(loss_k)
        with tf.name_scope(ACCUMULATE_SCOPE):
            accumulated = [_accumulate([g[i][0] for g in grads], var, m)
                           for i, (_, var) in enumerate(grads[0])]
            with tf.name_scope(LOSS):
                mean_loss = tf.math.divide(tf.math.add_n(losses, name="sum"), float(m), name="mean")
        loss = tf.identity(mean_loss, name=LOSS)
        train_op = optimizer.apply_gradients(accumulated, name=TRAIN_OP)
        init_op = tf1.global_variables_initializer()
    step = TrainingStep(model, int(batch_size), graph, train_op, loss, init_op, placeholders)
    replica_of = {}
    for name in step.step_op_names():
        k = _replica_index(name, m)
        if k is not None:
            replica_of[name] = (_single_batch_name(name, replica_scope(k)), k)
    return MicrobatchStep(step, m, replica_of)


def place_microbatch_step(mstep: MicrobatchStep, device_of: Mapping[str, str],
                          device_order: Sequence[Sequence[tuple[str, int]]] | None = None) -> None:
    """Pin the micro-batch step's ops to devices, and optionally make each device run its ops in
    a given order.

    A replica op goes to the device of its single-batch name in ``device_of``; a shared op to the
    device of its own name. An op that neither names follows the op it is colocated with (the
    additions that accumulate a gradient its producer, the mean their variable, initialisers and
    slots theirs), as
    :func:`celeritas_tf.profile.place_ops` places ops it has no entry for; with no such op
    either, its device is cleared and TensorFlow's placer picks it (``place_ops`` picks device 0
    instead: it knows the devices by index, this function only by name). Drops the step's
    cached GraphDef.

    Parameters
    ----------
    mstep : MicrobatchStep
        The step (changed in place).
    device_of : mapping of str to str
        Op name (single-batch names, and the shared ops' own names) to TensorFlow device name
        (:func:`celeritas_tf.tf.step_device`).
    device_order : sequence of sequence of (str, int), optional
        Per device, the ``(single-batch op name, micro-batch k)`` pairs in the order the device
        runs them (``k == -1`` for a shared op); enforced with control dependencies by
        :func:`celeritas_tf.order.enforce_device_order` (which leaves placeholders and the
        variables' handles free).

    Raises
    ------
    CeleritasInputError
        One line when ``device_order`` names a pair the step has no op for, or an order
        :func:`~celeritas_tf.order.enforce_device_order` refuses.
    """
    step = mstep.step
    names: list[list[str]] = []
    for ops in device_order or ():
        names.append([])
        for name, k in ops:
            op = mstep.op_name(name, k)
            if op is None:
                what = "shared op" if k == SHARED else f"op for micro-batch {k}"
                raise CeleritasInputError(f"device_order: ({name!r}, {k}) is no {what} of the "
                                          "micro-batch step")
            names[-1].append(op)
    if device_order is not None:  # before the devices: a refused order leaves the step as it was
        enforce_device_order(step, names)

    def device(name: str) -> str | None:
        single = mstep.replica_of.get(name)
        return device_of.get(single[0] if single is not None else name)

    for op in step.graph.get_operations():
        target = device(op.name)
        if target is None:
            for loc in op.colocation_groups():
                target = device(loc.decode().removeprefix("loc:@"))
                if target is not None:
                    break
        op._set_device(target or "")
    step.forget_graph_def()  # its NodeDefs carry the old devices


def _accumulate(grads: Sequence[Any], var: Any, micro_batches: int) -> tuple[Any, Any]:
    """``(mean of the replicas' gradients of var, var)`` as ``accumulate/<var>/...`` ops: the
    additions beside the gradient's producer, the mean on the variable's device; ``(None, var)``
    when the loss does not depend on ``var``."""
    tf = tensorflow()
    if grads[0] is None:
        return None, var
    with tf.compat.v1.colocate_with(var), tf.name_scope(var.op.name):
        if isinstance(grads[0], tf.IndexedSlices):
            indices = tf.concat([g.indices for g in grads], axis=0, name="indices")
            values = tf.concat([g.values for g in grads], axis=0, name="values")
            mean = tf.math.divide(values, float(micro_batches), name="mean")
            return tf.IndexedSlices(mean, indices, grads[0].dense_shape), var
        total = grads[0]
        for k in range(1, len(grads)):  # in micro-batch order, as the simulator adds them in place
            with tf.compat.v1.colocate_with(grads[k].op, ignore_existing=True):
                total = tf.math.add(total, grads[k], name=f"add_{k}")
        return tf.math.divide(total, float(micro_batches), name="mean"), var


def _names_in_use(graph: Any) -> dict[str, int]:
    """The graph's table of op and scope names in use (lower case) and how often each was asked
    for: ``tf.Graph.unique_name`` appends ``_<n>`` to a name from it."""
    return dict(graph._names_in_use)


def _mirror_names(graph: Any, names: Mapping[str, int], scope: str) -> None:
    """Mark ``names`` in use under ``scope`` as often as at the top level, so that ops built in
    the scope get the names (after ``scope/``) that they get at the top level of a graph whose
    table is ``names``."""
    table = graph._names_in_use
    prefix = f"{scope}/".lower()
    for name, count in names.items():
        key = prefix + name
        table[key] = max(table.get(key, 0), count)


def _replica_index(name: str, micro_batches: int) -> int | None:
    """The micro-batch whose replica op ``name`` is (None for a shared op).

    Examples
    --------
    >>> _replica_index("micro_1/loss", 2), _replica_index("micro_batches/features", 2)
    (1, None)
    """
    match = _REPLICA_OP.match(name)
    k = int(match.group(1)) if match else None
    return k if k is not None and k < micro_batches else None


def _single_batch_name(name: str, scope: str) -> str:
    """``name`` with every path component ``scope`` taken out.

    Examples
    --------
    >>> _single_batch_name("micro_1/gradients/micro_1/dense/MatMul_grad/MatMul", "micro_1")
    'gradients/dense/MatMul_grad/MatMul'
    """
    return "/".join(part for part in name.split("/") if part != scope)


# ---------------------------------------------------------------------------- running a placement
@dataclass(frozen=True)
class PipelineRun:
    """How a pipelined placement asks to be run: ``M`` micro-batches and, per device index, its
    runs in order as ``(single-batch op name, micro-batch k)`` pairs (``k = -1``: an op run once
    per step). Read from a placement document with :func:`placement_pipeline_run`."""

    micro_batches: int
    device_order: tuple[tuple[tuple[str, int], ...], ...]


def placement_pipeline_run(doc: Mapping[str, Any], source: str | None = None) -> PipelineRun | None:
    """The ``pipeline`` object of a ``celeritas-placement/1`` document as a :class:`PipelineRun`
    (checked as :func:`celeritas_core.readwrite.formats.placement_from_json` checks it, against
    the document's own ``assignment``); None when the placement is not pipelined. The additions
    that accumulate gradients are left out: the step colocates them with the gradients' producers.

    Examples
    --------
    >>> doc = {"devices": ["gpu:0"], "assignment": {"w": 0, "x": 0}, "pipeline": {
    ...     "micro_batches": 2, "schedule": "gpipe", "device_peak_memory_bytes": [1], "warmup": [2],
    ...     "device_order": [[["w", -1], ["x", 0], ["x", 1], ["x", 1, 0]]]}}
    >>> placement_pipeline_run(doc).device_order
    ((('w', -1), ('x', 0), ('x', 1)),)
    """
    names = list(doc.get("assignment") or {})
    devices = doc.get("devices")
    if doc.get("pipeline") is None or not isinstance(devices, list):
        return None
    try:
        plan = pipeline_from_json(doc, {name: i for i, name in enumerate(names)}, devices)
    except CeleritasInputError as exc:
        raise exc.with_source(source) from None
    assert plan is not None
    order = tuple(tuple((names[int(op)], int(k)) for op, k, out in rows.tolist() if out < 0)
                  for rows in plan.device_order)
    return PipelineRun(plan.micro_batches, order)


def pipelined_arm(model: ModelSpec, batch_size: int, assignment: Mapping[str, int], run: PipelineRun, *,
                  enforced: bool, source: str | None = None,
                  learning_rate: float = 1e-3) -> tuple[TrainingStep, tuple[tuple[str, ...], ...]]:
    """The micro-batch step of ``run`` placed by ``assignment`` (single-batch op name → device
    index), each device's recorded order enforced when ``enforced``; and that order in the step's
    own op names (for :func:`celeritas_tf.order.order_agreement`). Runs the step has no op for
    (an op run once in the plan that each replica runs, such as a variable's read, or a
    placeholder the step splits) are not ordered.

    Raises
    ------
    CeleritasInputError
        When the placement names an op that is not an op of the model's step.
    """
    mstep = build_microbatch_step(model, batch_size, run.micro_batches, learning_rate=learning_rate)
    known = {name for name, _ in mstep.replica_of.values()} | mstep.shared_op_names()
    unknown = sorted(set(assignment) - known)
    if unknown:
        raise CeleritasInputError(f"op {unknown[0]!r} of the placement is not an op of {model.name}'s "
                                  f"step ({len(unknown)} such ops): was it placed for another model?",
                                  source=source)
    pairs = tuple(tuple((name, k) for name, k in device if mstep.op_name(name, k) is not None)
                  for device in run.device_order)
    place_microbatch_step(mstep, {name: step_device(d) for name, d in assignment.items()},
                          pairs if enforced else None)
    return mstep.step, tuple(tuple(str(mstep.op_name(name, k)) for name, k in device) for device in pairs)
