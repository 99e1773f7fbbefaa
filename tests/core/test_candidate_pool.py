"""The candidate pool hands its best candidate's replay to the search (one replay fewer)."""

from __future__ import annotations

import numpy as np

from celeritas_core.generators import families
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers.local_search import CandidatePool
from celeritas_core.simulation.simulator import simulate


def test_best_replay_is_the_replay_of_the_best_candidate():
    graph = families.layered_dag(seed=5, tasks=80, ccr=1.0)
    cluster = Cluster.homogeneous(3, 1e15)
    pool = CandidatePool(graph, cluster)
    rng = np.random.default_rng(0)
    for k in range(6):
        pool.add(f"random/{k}", rng.integers(0, 3, graph.num_nodes))
        replay = pool.best_replay()
        assert replay is not None
        expected = simulate(graph, cluster, pool.best.assignment)
        assert replay.step_time_us == expected.step_time_us == pool.best.step_time_us
        np.testing.assert_array_equal(replay.finish_us, expected.finish_us)


def test_no_replay_when_the_best_was_not_replayed_here():
    graph = families.layered_dag(seed=6, tasks=40, ccr=1.0)
    cluster = Cluster.homogeneous(2, 1e15)
    pool = CandidatePool(graph, cluster)
    pool.add("slow", np.arange(graph.num_nodes) % 2)
    pool.add("given", np.zeros(graph.num_nodes, dtype=np.int64), step_time_us=1e-3)  # known, not replayed
    assert pool.best.name == "given"
    assert pool.best_replay() is None
