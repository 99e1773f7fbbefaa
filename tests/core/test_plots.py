"""The charts say what they show: ``memory.png``'s panels are titled with what each one draws."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers.compare import compare_placers
from celeritas_core.plots import _pyplot, memory_chart, memory_figure
from celeritas_core.readwrite.formats import graph_from_json
from tests.documents import graph_doc


@pytest.fixture
def placed():
    graph = graph_from_json(graph_doc())
    cluster = Cluster.homogeneous(2, 1e9)
    comparison = compare_placers(graph, cluster, ["single", "m-topo"])
    return graph, cluster, comparison.placements


def test_memory_panels_say_one_placer_left_and_every_placer_right(placed):
    graph, cluster, placements = placed
    chosen = placements[1]
    assert chosen.placer == "m-topo"
    fig = memory_figure(placements, cluster, title="g: memory of the m-topo placement", graph=graph,
                        best=chosen)
    try:
        left, right = fig.axes
        # the issue: the right panel was titled with one placer while it shows every placer
        assert left.get_title() == "m-topo: memory per device over the simulated step"
        assert right.get_title() == "peak memory per device, every placer"
        assert fig.get_suptitle() == "g: memory of the m-topo placement"
        weights = {label.get_text(): label.get_fontweight() for label in right.get_xticklabels()}
        assert weights == {"single": "normal", "m-topo": "bold"}  # the placer on the left stands out
    finally:
        _pyplot().close(fig)


def test_the_bars_alone_keep_the_given_title(placed, tmp_path):
    _, cluster, placements = placed
    fig = memory_figure(placements, cluster, title="g: peak memory per device")
    try:
        (only,) = fig.axes
        assert only.get_title() == "g: peak memory per device" and not fig.get_suptitle()
        assert {label.get_fontweight() for label in only.get_xticklabels()} == {"normal"}
    finally:
        _pyplot().close(fig)
    png = memory_chart(placements, cluster, tmp_path / "m.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
