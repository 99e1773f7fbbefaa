"""Which ops of a training step run once per micro-batch and which once per step.

A pipelined step (:mod:`celeritas_core.pipeline`) repeats the ops that touch the batch once per
micro-batch and runs the others once. The roles are read from the graph's structure and op types
only, so they hold for graphs from TensorFlow and from the generators alike:

* **batch inputs**: the ops that feed the batch (``Placeholder``, ``PlaceholderWithDefault``,
  ``PlaceholderV2``, ``IteratorGetNext``, ``IteratorGetNextSync``), or the names listed in the
  graph's ``meta["batch_inputs"]``;
* **updates**: the optimizer's writes to variables (op types starting with ``Apply``,
  ``ResourceApply``, ``Assign``, ``ResourceAssign``, ``ScatterAdd``, ``ResourceScatter``), and every
  op after one of them (the ``train_step`` group): run once, after the last micro-batch;
* **per micro-batch**: every other op reached from a batch input. Among them, the **backward**
  ops are the loss's descendants (the loss: :func:`~celeritas_core.graphs.paths.turning_point`),
  closed under descendants, so that no forward op depends on a backward one; the rest are
  **forward**;
* **before**: the rest (variables, their reads, constants): run once, before the first
  micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.paths import turning_point

#: Op types that feed a batch.
BATCH_INPUT_OPS = frozenset({"Placeholder", "PlaceholderWithDefault", "PlaceholderV2", "IteratorGetNext",
                             "IteratorGetNextSync"})
#: Prefixes of the op types that write a variable (an optimizer's update).
UPDATE_OP_PREFIXES = ("Apply", "ResourceApply", "Assign", "ResourceAssign", "ScatterAdd", "ResourceScatter")

#: Role codes, in the order a pipelined step runs them.
BEFORE, FORWARD, BACKWARD, AFTER = 0, 1, 2, 3
ROLE_NAMES = ("before", "forward", "backward", "after")


@dataclass(frozen=True, eq=False)
class OpRoles:
    """Each op's role (:data:`BEFORE`, :data:`FORWARD`, :data:`BACKWARD`, :data:`AFTER`), int8."""

    role: np.ndarray

    @property
    def per_micro_batch(self) -> np.ndarray:
        """True for the ops run once per micro-batch (forward and backward)."""
        return (self.role == FORWARD) | (self.role == BACKWARD)

    def counts(self) -> dict[str, int]:
        """Number of ops of each role, by name."""
        return {name: int((self.role == code).sum()) for code, name in enumerate(ROLE_NAMES)}


def op_roles(graph: Graph) -> OpRoles:
    """The role of every op of ``graph`` (module docstring).

    Parameters
    ----------
    graph : Graph
        A training step: batch inputs, forward, loss, backward and (optionally) updates.

    Returns
    -------
    OpRoles
        One role per op.

    Raises
    ------
    CeleritasInputError
        When the graph has no batch input (nothing to split into micro-batches), or
        ``meta["batch_inputs"]`` names an op the graph does not have.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> roles = op_roles(g)
    >>> [int(roles.role[g.index[name]]) for name in ("input", "Adam/update")]
    [1, 3]
    >>> roles.counts()["backward"] > 0 and roles.counts()["before"] > 0
    True
    """
    sources = _batch_inputs(graph)
    order = graph.topological_order
    update = np.array([op.startswith(UPDATE_OP_PREFIXES) for op in graph.ops], dtype=bool)
    after = _descendants(order, graph.pred_ptr, graph.pred_idx, update)
    batch = _descendants(order, graph.pred_ptr, graph.pred_idx, sources) & ~after
    role = np.full(graph.num_nodes, BEFORE, dtype=np.int8)
    role[batch] = FORWARD
    role[after] = AFTER
    loss = turning_point(graph)
    if batch[loss]:
        below = np.zeros(graph.num_nodes, dtype=bool)
        below[graph.succ_idx[graph.succ_ptr[loss]:graph.succ_ptr[loss + 1]]] = True
        role[_descendants(order, graph.pred_ptr, graph.pred_idx, below) & batch] = BACKWARD
    return OpRoles(role)


def _batch_inputs(graph: Graph) -> np.ndarray:
    """True for the batch inputs (module docstring); raise when there is none."""
    named = graph.meta.get("batch_inputs") if isinstance(graph.meta, dict) else None
    sources = np.zeros(graph.num_nodes, dtype=bool)
    if named:
        for name in named:
            if name not in graph.index:
                raise CeleritasInputError(f"graph {graph.name!r}: meta batch_inputs names {name!r}, "
                                          "which is not an op of the graph")
            sources[graph.index[name]] = True
    else:
        sources[:] = [op in BATCH_INPUT_OPS for op in graph.ops]
    if not sources.any():
        raise CeleritasInputError(f"graph {graph.name!r} has no batch input (an op of type "
                                  f"{', '.join(sorted(BATCH_INPUT_OPS))}, or meta batch_inputs): "
                                  "nothing to split into micro-batches")
    return sources


@jit
def _descendants(order: np.ndarray, pred_ptr: np.ndarray, pred_idx: np.ndarray,
                 seed: np.ndarray) -> np.ndarray:
    """``seed`` and every op reached from it, in one pass over a topological ``order``."""
    out = seed.copy()
    for v in order:
        if not out[v]:
            for k in range(pred_ptr[v], pred_ptr[v + 1]):
                if out[pred_idx[k]]:
                    out[v] = True
                    break
    return out
