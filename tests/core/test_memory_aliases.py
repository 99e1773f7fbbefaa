"""Output aliases: an output that shares an input's buffer adds no bytes and keeps that buffer live."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.readwrite.formats import graph_from_json, graph_to_json
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import simulate

X = 100.0


def _graph(names: list[str], edges: list[tuple[str, str]], *, aliases: dict[str, str] | None = None,
           sizes: dict[str, float] | None = None, scratch: dict[str, float] | None = None,
           times: dict[str, float] | None = None) -> Graph:
    """Ops of 10 µs (or ``times``) with one output of ``sizes.get(op, X)`` bytes; ``aliases[op]``
    names the input whose output 0 the op's output 0 shares."""
    index = {n: i for i, n in enumerate(names)}
    sizes, scratch, times, aliases = sizes or {}, scratch or {}, times or {}, aliases or {}
    live = Liveness.from_lists([0.0] * len(names), [scratch.get(n) for n in names],
                               [[sizes.get(n, X)] for n in names],
                               [[(index[aliases[n]], 0)] if n in aliases else None for n in names])
    return Graph.from_arrays(
        name="aliases", node_names=names, time_us=[times.get(n, 10.0) for n in names],
        memory_bytes=[sizes.get(n, X) + scratch.get(n, 0.0) for n in names],
        edge_src=[index[a] for a, _ in edges], edge_dst=[index[b] for _, b in edges],
        edge_bytes=[sizes.get(a, X) for a, _ in edges], liveness=live)


def _peaks(graph: Graph, assignment: list[int], devices: int = 1) -> np.ndarray:
    cluster = Cluster.homogeneous(devices, 1e12, slope_us_per_byte=0.0, intercept_us=5.0)
    a = np.asarray(assignment)
    return memory_profile(graph, devices, a, simulate(graph, cluster, a)).peak_bytes


def _without_aliases(graph: Graph) -> Graph:
    live = graph.liveness
    assert live is not None
    plain = Liveness(live.modelled, live.persistent_bytes, live.scratch_bytes, live.output_ptr,
                     live.output_bytes)
    return Graph.from_arrays(name=graph.name, node_names=graph.node_names, time_us=graph.time_us,
                             memory_bytes=graph.memory_bytes, edge_src=graph.edge_src,
                             edge_dst=graph.edge_dst, edge_bytes=graph.edge_bytes, liveness=plain)


def test_a_view_shares_its_input_buffer_instead_of_doubling_it():
    # p feeds a view v and a late consumer l; c reads the view at the end
    names = ["p", "v", "x", "l", "c"]
    edges = [("p", "v"), ("p", "l"), ("v", "c"), ("x", "l"), ("l", "c")]
    g = _graph(names, edges, aliases={"v": "p"}, sizes={"x": 0.0, "l": 0.0, "c": 0.0})
    assert _peaks(_without_aliases(g), [0] * 5)[0] == pytest.approx(2 * X)  # p and v counted apart
    assert _peaks(g, [0] * 5)[0] == pytest.approx(X)  # one buffer


def test_the_shared_buffer_lives_until_the_alias_consumers_finish():
    # p's only consumer is the view v; x (scratch) runs after v and before c reads the view
    names = ["p", "v", "x", "c"]
    edges = [("p", "v"), ("v", "x"), ("v", "c"), ("x", "c")]
    g = _graph(names, edges, aliases={"v": "p"}, sizes={"v": 1.0, "x": 0.0, "c": 0.0}, scratch={"x": 50.0})
    # without the alias p would be freed after v and only v's 1 byte would remain while x runs
    assert _peaks(_without_aliases(g), [0] * 4)[0] == pytest.approx(X + 1.0)
    assert _peaks(g, [0] * 4)[0] == pytest.approx(X + 50.0)


def test_a_chain_of_views_keeps_the_root_buffer():
    names = ["p", "v1", "v2", "x", "c"]
    edges = [("p", "v1"), ("v1", "v2"), ("v2", "c"), ("x", "c")]
    g = _graph(names, edges, aliases={"v1": "p", "v2": "v1"},
               sizes={"v1": 0.0, "v2": 0.0, "x": 0.0, "c": 0.0}, scratch={"x": 30.0})
    assert _peaks(g, [0] * 5)[0] == pytest.approx(X + 30.0)


def test_a_view_of_a_received_tensor_keeps_the_received_copy():
    # p on device 0; the view v and its late consumer c on device 1, with x's scratch in between
    names = ["p", "v", "x", "c"]
    edges = [("p", "v"), ("v", "x"), ("v", "c"), ("x", "c")]
    g = _graph(names, edges, aliases={"v": "p"}, sizes={"v": 0.0, "x": 0.0, "c": 0.0}, scratch={"x": 50.0})
    peaks = _peaks(g, [0, 1, 1, 1], devices=2)
    assert peaks[1] == pytest.approx(X + 50.0)  # the copy of p stays while x runs, until c
    assert peaks[0] == pytest.approx(X)


def test_aliases_round_trip_through_json_and_bad_ones_are_named():
    g = _graph(["p", "v", "c"], [("p", "v"), ("v", "c")], aliases={"v": "p"})
    doc = graph_to_json(g)
    entry = next(n for n in doc["nodes"] if n["name"] == "v")
    assert entry["output_aliases"] == [{"node": "p", "output": 0}]
    back = graph_from_json(doc)
    assert back.liveness is not None and back.liveness.aliases(1) == [(0, 0)]
    assert _peaks(back, [0, 0, 0])[0] == pytest.approx(_peaks(g, [0, 0, 0])[0])
    entry["output_aliases"] = [{"node": "c", "output": 0}]  # c is not an input of v
    with pytest.raises(CeleritasInputError, match=r"node 'v': output_aliases\[0\] names 'c'"):
        graph_from_json(doc)
    for bad in ([{"node": "p"}], [["p", 0]], [None, None], "p"):
        entry["output_aliases"] = bad
        with pytest.raises(CeleritasInputError, match="node 'v'"):
            graph_from_json(doc)


def test_peak_with_aliases_stays_between_largest_buffer_and_sum():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = 12
        names = [f"n{i}" for i in range(n)]
        edges = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, size=(25, 2)) if a < b})
        aliases = {names[b]: names[a] for a, b in edges if rng.random() < 0.3}
        sizes = {m: float(rng.integers(1, 100)) for m in names}
        for m in names:  # in topological order: a view is as large as the buffer it shares
            if m in aliases:
                sizes[m] = sizes[aliases[m]]
        g = _graph(names, [(names[a], names[b]) for a, b in edges], aliases=aliases, sizes=sizes)
        devices = rng.integers(0, 2, size=n).tolist()
        peak = _peaks(g, devices, devices=2).max()
        plain = _peaks(_without_aliases(g), devices, devices=2).max()
        assert peak <= plain + 1e-9  # sharing a buffer never costs more than separate buffers
        own = [g.liveness.outputs(i)[0] for i in range(n) if names[i] not in aliases]
        assert peak >= max(own) - 1e-9
