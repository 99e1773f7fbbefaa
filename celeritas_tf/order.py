"""Make each device run its ops in a recorded order, and check the order a traced step ran in.

A ``celeritas-placement/1`` records ``device_order`` (docs/formats.md): per device index, the
step's ops in the order the simulator ran them. TensorFlow's executor runs whichever op is ready,
so without help a device runs its ops in an order of its own. :func:`enforce_device_order` chains
each device's ops with control dependencies, ``a → b`` for each consecutive pair, leaving out the
pairs a data or control path already orders and the ops no order can hold (:func:`free_ops`: fed
placeholders, the variables' handles). :func:`executed_device_order` reads the order a traced
step ran in from its ``RunMetadata.step_stats``; :func:`order_agreement` says which share of the
recorded order it followed.

What the session does to the edges: Grappler is off in :func:`celeritas_tf.tf.session_config`
(``disable_meta_optimizer``: none of its optimizers runs, so neither its dependency optimizer,
which removes control edges a path makes redundant, nor its model pruner), and the classic graph
optimizer runs at ``L0`` with function inlining, constant folding and common subexpressions off.
The session prunes the graph to what the fetches need (every edge joins two ops of the step, so
all stay) and runs TensorFlow's post-placement passes; of those, ``ReplicateConstantsPass``
copies a small constant (at most 16 elements) with no control successor to each device that
consumes it, so chained constants always get a control edge out. ``tests/tf/test_device_order.py``
finds every edge added in the partition graphs the session ran.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.profile import _op_name, is_tracer_device
from celeritas_tf.step import TrainingStep

#: Ops the backward search of one pair may visit before it gives up and adds the edge (a
#: redundant control edge is harmless; a missing one is not).
SEARCH_BUDGET = 256

#: A copy of a small constant that TensorFlow's ``ReplicateConstantsPass`` made for one device.
_REPLICA = re.compile(r"^(.+)/replicate/_\d+$")


@dataclass(frozen=True)
class OrderEdges:
    """What :func:`enforce_device_order` did.

    ``added``: control edges added; ``implied``: consecutive pairs that a data or control path
    already ordered (no edge added); ``ops``: ops the order names; ``free``: those of them left
    out of the chains (:func:`free_ops`). Each device whose chain holds ``k`` ops has ``k - 1``
    consecutive pairs, so ``added + implied == ops - free - devices`` (devices with at least one
    chained op). ``pinned``: constants that end their device's list and got a control edge to a
    consumer besides (see :func:`enforce_device_order`).
    """

    added: int
    implied: int
    ops: int
    free: int = 0
    pinned: int = 0


def free_ops(step: TrainingStep) -> frozenset[str]:
    """The step's ops an order leaves free: :func:`enforce_device_order` chains none of them.

    - Placeholders: every run feeds them, and the session replaces a fed placeholder by its own
      feed node (``_arg_NAME_0_K``) on the client's device, whatever device the placement gives
      it, dropping the control edges into it.
    - Ops the step's initialiser also runs (the variables' handles): an edge into one would make
      initialising the variables run part of the step (and ask for its feeds).

    Examples
    --------
    >>> from celeritas_tf.models import get_model
    >>> from celeritas_tf.step import build_training_step
    >>> step = build_training_step(get_model("mlp"), 4)
    >>> sorted(free_ops(step))[:4]
    ['beta1_power', 'beta2_power', 'dense_0/bias', 'dense_0/bias/Adam']
    >>> {"features", "labels"} <= free_ops(step)
    True
    """
    return _read_step(step).free


def enforce_device_order(step: TrainingStep, device_order: Sequence[Sequence[str]], *,
                         source: str | None = None) -> OrderEdges:
    """Add control dependencies so that each device runs its ops in ``device_order``.

    For each device's list and each consecutive pair ``(a, b)`` of it, ``b`` gets the control
    input ``a`` unless a path ``a → … → b`` of data or control edges already exists (found by a
    backward search from ``b`` over ops ordered after ``a``, at most :data:`SEARCH_BUDGET` visits;
    when the budget runs out the edge is added). A constant ``a`` with several consumers and no
    control successor always gets its edge, and one that ends its list gets a control edge to its
    first consumer (``pinned``): TensorFlow (``ReplicateConstantsPass``) copies such a small
    constant to every device that consumes it, and the copies, not the op, would run. The ops of
    :func:`free_ops` (placeholders, the variables' handles) are left out of the chains: the op
    after one is chained to the op before it. Apply it to a freshly built step, before or after
    :func:`celeritas_tf.profile.place_ops`; it drops the step's cached GraphDef.

    Parameters
    ----------
    step : TrainingStep
        The step whose graph gets the edges (changed in place).
    device_order : sequence of sequence of str
        Per device index, op names in the order the device runs them (a placement's
        ``device_order``); ops not named are left free.
    source : str, optional
        The file the order came from, named in errors.

    Returns
    -------
    OrderEdges
        The edges added, the pairs already ordered, the ops named and the free ones among them.

    Raises
    ------
    CeleritasInputError
        One line when the order names an op that is not an op of the step or names one twice,
        or contradicts the step's dependencies (the edges would make a cycle: names the device
        and the two ops).

    Examples
    --------
    >>> from celeritas_tf.models import get_model
    >>> from celeritas_tf.step import build_training_step
    >>> step = build_training_step(get_model("mlp"), 4)
    >>> names = step.step_op_names()   # GraphDef order: a topological order of the step
    >>> edges = enforce_device_order(step, [names])
    >>> edges.ops == len(names), edges.added + edges.implied == edges.ops - edges.free - 1
    (True, True)
    >>> enforce_device_order(step, [[names[-1], "ghost"]], source="p.json")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: p.json: device_order: 'ghost' is not an op of the step
    """
    read = _read_step(step)
    preds, free, replicable = read.preds, read.free, set(read.replicable)
    chains: list[list[str]] = []
    seen: set[str] = set()
    named = 0
    for ops in device_order:
        for op in ops:
            if op not in preds:
                raise CeleritasInputError(f"device_order: {op!r} is not an op of the step", source=source)
            if op in seen:
                raise CeleritasInputError(f"device_order: {op!r} is listed twice", source=source)
            seen.add(op)
        named += len(ops)
        chains.append([op for op in ops if op not in free])
    pairs = [(d, a, b) for d, chain in enumerate(chains) for a, b in pairwise(chain)]
    pos = _positions(preds, pairs, source)
    current = {name: list(inputs) for name, inputs in preds.items()}
    edges: list[tuple[str, str]] = []
    for _, a, b in pairs:
        if a in replicable or not _has_path(current, pos, a, b):
            edges.append((a, b))
            current[b].append(a)
            replicable.discard(a)
    # a constant that ends its list: a control edge to a consumer keeps it whole, on its device
    ends = {chain[-1] for chain in chains if chain and chain[-1] in replicable}
    consumer: dict[str, str] = {}
    for name, inputs in preds.items():
        for src in inputs:
            if src in ends:
                consumer.setdefault(src, name)  # its first consumer in GraphDef order
    pins = list(consumer.items())
    if edges or pins:
        by_name = {op.name: op for op in step.graph.get_operations()}
        for a, b in (*edges, *pins):
            by_name[b]._add_control_input(by_name[a])
    step.forget_graph_def()
    return OrderEdges(added=len(edges), implied=len(pairs) - len(edges), ops=named,
                      free=sum(1 for op in seen if op in free), pinned=len(pins))


def executed_device_order(step_stats: Any, *, ops: Collection[str] | None = None) -> dict[str, list[str]]:
    """Per device (as TensorFlow names it), the ops a traced step ran there, in the order they
    started.

    Entries are sorted by their start (``all_start_nanos``, else ``all_start_micros``), then
    ``op_start_rel``, then the order the device's entries were recorded in (TensorFlow records
    an entry once its op is done) rather than by name.
    The runtime's own entries (``_SOURCE``, ``_SINK``, sends, receives, ``_retval``) and the GPU
    tracer's pseudo-devices (``/device:GPU:0/stream:all`` and the like, which list kernels, not
    the order the executor ran ops in) are left out; a fed placeholder's feed node
    ``_arg_NAME_0_K`` counts as ``NAME``, and so does a copy ``NAME/replicate/_K`` of a small
    constant that TensorFlow made for a device that consumes it.

    Parameters
    ----------
    step_stats : StepStats
        ``RunMetadata.step_stats`` of a step run with ``trace_level=FULL_TRACE``.
    ops : collection of str, optional
        Keep only these op names (e.g. :meth:`TrainingStep.step_op_names`); None keeps every op.

    Returns
    -------
    dict of str to list of str
        Device name to op names in the order they ran; a name appears once per device.

    Examples
    --------
    >>> from tensorflow.core.framework.step_stats_pb2 import StepStats
    >>> stats = StepStats()
    >>> dev = stats.dev_stats.add(device="/device:CPU:0")
    >>> for name, start in [("_SOURCE", 1), ("b", 20), ("a", 10), ("c", 20), ("_arg_x_0_0", 5),
    ...                     ("k/replicate/_3", 30), ("a/_12", 40)]:
    ...     _ = dev.node_stats.add(node_name=name, all_start_micros=start)
    >>> executed_device_order(stats)
    {'/device:CPU:0': ['x', 'a', 'b', 'c', 'k']}
    >>> executed_device_order(stats, ops={"a", "c"})
    {'/device:CPU:0': ['a', 'c']}
    """
    keep = None if ops is None else set(ops)
    out: dict[str, list[str]] = {}
    for dev in step_stats.dev_stats:
        if is_tracer_device(dev.device):
            continue
        rows = []
        for i, ns in enumerate(dev.node_stats):
            name = _executed_op(ns.node_name)
            if name is None or (keep is not None and name not in keep):
                continue
            start = ns.all_start_nanos or ns.all_start_micros * 1000
            rel = ns.op_start_rel_nanos or ns.op_start_rel_micros * 1000
            rows.append((start, rel, i, name))
        rows.sort()
        names = out.setdefault(dev.device, [])
        listed = set(names)
        for *_, name in rows:
            if name not in listed:
                listed.add(name)
                names.append(name)
    return out


def order_agreement(recorded: Sequence[Sequence[str]], executed: Mapping[str, Sequence[str]],
                    device_names: Sequence[str], *, skip: Collection[str] = ()) -> float:
    """The share of the recorded ops that ran in the recorded order.

    An op of ``recorded[d]`` counts when it ran on device ``device_names[d]`` and the op before
    it in ``recorded[d]`` (if any) ran there before it. Ops in ``skip`` (e.g. :func:`free_ops`,
    which no order holds) are left out of both the recorded lists and the count. No op to count gives 1.0.

    Parameters
    ----------
    recorded : sequence of sequence of str
        Per device index, op names in the order the placement records.
    executed : mapping of str to sequence of str
        Per device name, op names in the order they ran (:func:`executed_device_order`).
    device_names : sequence of str
        The device name of each device index (:func:`celeritas_tf.tf.step_device`).
    skip : collection of str, optional
        Ops left out.

    Returns
    -------
    float
        Between 0 and 1; 1.0 when every device ran its recorded ops in the recorded order.

    Examples
    --------
    >>> order_agreement([["a", "b", "c"], ["d"]], {"g0": ["a", "c", "b"], "g1": ["d"]}, ["g0", "g1"])
    0.75
    >>> order_agreement([["a", "b", "c"]], {"g0": ["a", "b", "c"]}, ["g0"], skip={"b"})
    1.0
    """
    if len(device_names) < len(recorded):
        raise CeleritasInputError(f"the order has {len(recorded)} devices but only {len(device_names)} "
                                  "device names are given")
    ran = total = 0
    for d, ops in enumerate(recorded):
        chain = [op for op in ops if op not in skip]
        where = {name: i for i, name in enumerate(executed.get(device_names[d], ()))}
        total += len(chain)
        for i, op in enumerate(chain):
            at = where.get(op)
            if at is not None and (i == 0 or where.get(chain[i - 1], at) < at):
                ran += 1
    return ran / total if total else 1.0


def _executed_op(node_name: str) -> str | None:
    """The op of the step a step-stats entry ran (None for the runtime's own entries)."""
    replica = _REPLICA.match(node_name)
    return replica.group(1) if replica else _op_name(node_name)


@dataclass(frozen=True)
class _StepEdges:
    """The step's ops and edges, read from the graph as it is now."""

    preds: dict[str, list[str]]
    """Each op of the step → the ops it takes a data or control input from (GraphDef order)."""
    free: frozenset[str]
    """The ops of :func:`free_ops`."""
    replicable: frozenset[str]
    """The constants TensorFlow may copy to their consumers' devices (``ReplicateConstantsPass``:
    two or more output edges in the step, no control successor)."""


def _read_step(step: TrainingStep) -> _StepEdges:
    """The step's edges from a plain GraphDef of its graph (the step's ops are the transitive
    inputs of ``train_step`` and the loss, as :meth:`TrainingStep.step_graph_def`'s, which costs
    several times more to build: shapes, and a sub-graph extracted in Python)."""
    raw: dict[str, tuple[str, list[str], list[str]]] = {}
    for node in step.graph.as_graph_def().node:
        inputs, control = [], []
        for name in node.input:
            if name.startswith("^"):
                control.append(name[1:])
                inputs.append(name[1:])
            else:
                inputs.append(name.split(":", 1)[0])
        raw[node.name] = (node.op, inputs, control)

    def closure(roots: Sequence[str]) -> set[str]:
        stack, seen = list(roots), set(roots)
        while stack:
            for src in raw[stack.pop()][1]:
                if src not in seen:
                    seen.add(src)
                    stack.append(src)
        return seen

    step_ops = closure([step.train_op.name, step.loss.op.name])
    preds = {name: list(dict.fromkeys(inputs)) for name, (_, inputs, _) in raw.items() if name in step_ops}
    free = {tensor.op.name for tensor, _ in step.placeholders} | (closure([step.init_op.name]) & step_ops)
    out_edges: dict[str, int] = {}
    control_out: set[str] = set()
    for name in preds:
        for src in raw[name][1]:
            out_edges[src] = out_edges.get(src, 0) + 1
        control_out.update(raw[name][2])
    replicable = {name for name in preds
                  if raw[name][0] == "Const" and out_edges.get(name, 0) > 1 and name not in control_out}
    return _StepEdges(preds, frozenset(free), frozenset(replicable))


def _positions(preds: Mapping[str, list[str]], pairs: Sequence[tuple[int, str, str]],
               source: str | None) -> dict[str, int]:
    """Each op's place in a topological order of the step's edges and the order's pairs;
    raises when the pairs make a cycle with the step's edges."""
    chained = {b: a for _, a, b in pairs}
    indegree = {name: len(inputs) + (name in chained) for name, inputs in preds.items()}
    succs: dict[str, list[str]] = {name: [] for name in preds}
    for name, inputs in preds.items():
        for src in inputs:
            succs[src].append(name)
    for b, a in chained.items():
        succs[a].append(b)
    ready = deque(name for name, k in indegree.items() if k == 0)
    pos: dict[str, int] = {}
    while ready:
        name = ready.popleft()
        pos[name] = len(pos)
        for nxt in succs[name]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if len(pos) < len(preds):
        _refuse_cycle(preds, pairs, pos, source)
    return pos


def _refuse_cycle(preds: Mapping[str, list[str]], pairs: Sequence[tuple[int, str, str]],
                  done: Mapping[str, int], source: str | None) -> None:
    """Find a cycle among the ops a topological sort left over and name a pair of it."""
    device_of = {(a, b): d for d, a, b in pairs}
    chained = {b: a for _, a, b in pairs}

    def left_preds(name: str) -> list[str]:
        inputs = [*preds[name], *([chained[name]] if name in chained else [])]
        return [p for p in inputs if p not in done]

    # every op left over has a predecessor left over: walk back until an op repeats
    walk = [next(name for name in preds if name not in done)]
    at = {walk[0]: 0}
    while True:
        prev = left_preds(walk[-1])[0]
        if prev in at:
            cycle = walk[at[prev]:]
            break
        at[prev] = len(walk)
        walk.append(prev)
    # the walk runs backwards: cycle[i + 1] → cycle[i]
    on_cycle = [(cycle[(i + 1) % len(cycle)], cycle[i]) for i in range(len(cycle))]
    # the order's own edges on it (at least one: the step's edges make no cycle)
    ordered = [(a, b) for a, b in reversed(on_cycle) if (a, b) in device_of and a not in preds[b]]
    for a, b in ordered:
        if _is_ancestor(preds, b, a):
            raise CeleritasInputError(f"device_order: device {device_of[a, b]} lists {a!r} before {b!r}, "
                                      f"but {a!r} depends on {b!r}", source=source)
    a, b = ordered[0]
    raise CeleritasInputError(f"device_order: device {device_of[a, b]} lists {a!r} before {b!r}, which "
                              "with the other devices' orders makes a cycle", source=source)


def _is_ancestor(preds: Mapping[str, list[str]], ancestor: str, name: str) -> bool:
    """Whether a path of the step's own edges leads from ``ancestor`` to ``name``."""
    stack, seen = [name], {name}
    while stack:
        for p in preds[stack.pop()]:
            if p == ancestor:
                return True
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _has_path(preds: Mapping[str, list[str]], pos: Mapping[str, int], a: str, b: str) -> bool:
    """Whether a path ``a → … → b`` exists, searching back from ``b`` over ops placed after ``a``
    (every op on such a path is); False also when :data:`SEARCH_BUDGET` visits found none."""
    if a in preds[b]:
        return True
    floor = pos[a]
    stack, seen = [b], {b}
    while stack:
        for p in preds[stack.pop()]:
            if p == a:
                return True
            if p not in seen and pos[p] > floor:
                if len(seen) > SEARCH_BUDGET:
                    return False
                seen.add(p)
                stack.append(p)
    return False
