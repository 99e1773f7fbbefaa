"""Figures of a comparison: a Gantt chart of one placement and per-device memory bars (PNG).

matplotlib is imported lazily (Agg backend, no display needed) so the engine imports without it.
Files are written through a temporary file and an atomic rename.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import Placement
from celeritas_core.pipeline.plan import replay_plan
from celeritas_core.pipeline.roles import BACKWARD
from celeritas_core.pipeline.unroll import Unrolled
from celeritas_core.readwrite.safe_io import write_atomic
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import simulate


def _pyplot() -> Any:
    # lazy: matplotlib (about 0.3 s to import) loads only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # lazy: as above, after choosing the Agg backend

    return plt


def _save_atomic(fig: Any, path: str | os.PathLike[str]) -> Path:
    return write_atomic(path, lambda fh: fig.savefig(fh, dpi=110, format="png"), binary=True)


def _time_unit(span_us: float) -> tuple[float, str]:
    if span_us >= 2e6:
        return 1e6, "s"
    if span_us >= 2e3:
        return 1e3, "ms"
    return 1.0, "µs"


def gantt_chart(graph: Graph, cluster: Cluster, placement: Placement, path: str | os.PathLike[str]) -> Path:
    """Write a Gantt chart of ``placement``'s simulated step: per device a row of ops and below it
    a row of the transfers it receives; returns the PNG path. A single-batch step's ops are
    coloured by device; a pipelined step (``placement.pipeline``) is its replay, each op coloured
    by its micro-batch (forward ops light, backward ops dark, the ops run once grey)."""
    plt = _pyplot()
    if placement.pipeline is not None:
        replay = replay_plan(graph, cluster, placement)
        result, node_dev = replay.result, replay.unrolled.expand(placement.assignment)
        unrolled = replay.unrolled
        title = (f"{graph.name}: {placement.placer}, {replay.micro_batches} micro-batches "
                 f"({replay.schedule}), simulated step")
    else:
        result, node_dev = simulate(graph, cluster, placement.assignment), placement.assignment
        unrolled = None
        title = f"{graph.name}: {placement.placer}, simulated step"
    scale, unit = _time_unit(max(result.step_time_us, 1e-9))
    num_dev = cluster.num_devices
    fig, ax = plt.subplots(figsize=(11, 1.1 + 0.8 * num_dev))
    colors = plt.get_cmap("tab10")
    dur = (result.finish_us - result.start_us) / scale
    starts = result.start_us / scale
    t = result.transfers
    for d in range(num_dev):
        y = 2 * (num_dev - 1 - d)
        on = np.flatnonzero(node_dev == d)
        bars = list(zip(starts[on].tolist(), np.maximum(dur[on], 0).tolist(), strict=True))
        faces = colors(d % 10) if unrolled is None else [_micro_batch_color(colors, unrolled, i) for i in on]
        ax.broken_barh(bars, (y + 1.0, 0.8), facecolors=faces, edgecolor="none")
        into = np.flatnonzero(t.dst_device == d)
        tbars = list(zip((t.start_us[into] / scale).tolist(), (t.duration_us[into] / scale).tolist(),
                         strict=True))
        ax.broken_barh(tbars, (y + 0.15, 0.6), facecolors="0.55", edgecolor="none")
    ax.set_yticks([2 * (num_dev - 1 - d) + tick for d in range(num_dev) for tick in (1.4, 0.45)])
    ax.set_yticklabels([label for name in cluster.device_names for label in (name, "  ← recv")],
                       fontsize=8)
    ax.set_ylim(0, 2 * num_dev)
    ax.set_xlim(0, result.step_time_us / scale * 1.01 if result.step_time_us > 0 else 1)
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(f"{title} {result.step_time_us / scale:.3g} {unit}, {len(t):,} transfers", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        return _save_atomic(fig, path)
    finally:
        plt.close(fig)


def _micro_batch_color(colors: Any, unrolled: Unrolled, node: int) -> Any:
    """A pipelined step's op colour: its micro-batch's, light forward and dark backward; grey for
    the ops run once."""
    k = int(unrolled.micro_batch[node])
    if k < 0:
        return "0.7"
    r, g, b, _ = colors(k % 10)
    if unrolled.role[node] == BACKWARD:
        return (0.6 * r, 0.6 * g, 0.6 * b)
    return (r, g, b)


def memory_chart(placements: Sequence[Placement], cluster: Cluster, path: str | os.PathLike[str],
                 *, title: str = "", graph: Graph | None = None, best: Placement | None = None) -> Path:
    """Write :func:`memory_figure` as a PNG; returns its path."""
    plt = _pyplot()
    fig = memory_figure(placements, cluster, title=title, graph=graph, best=best)
    try:
        return _save_atomic(fig, path)
    finally:
        plt.close(fig)


def memory_figure(placements: Sequence[Placement], cluster: Cluster, *, title: str = "",
                  graph: Graph | None = None, best: Placement | None = None) -> Any:
    """Per-device memory as % of capacity (a matplotlib figure; the caller closes it).

    With ``graph`` and ``best``: on the left, ``best``'s liveness-aware usage over its replay with
    the capacity line (titled with ``best``'s placer); on the right, the replayed peak of every
    placement as grouped bars (titled as every placer's, ``best``'s label in bold; above 100 %,
    OOM, hatched); ``title`` above both. Without them: the bars alone, titled ``title``.
    """
    plt = _pyplot()
    timeline = graph is not None and best is not None
    width_in = max(6.0, 1.2 * len(placements) + 2) + (6.0 if timeline else 0.0)
    fig, axes = plt.subplots(1, 2 if timeline else 1, figsize=(width_in, 4.3 if timeline else 4),
                             squeeze=False)
    if timeline:
        _memory_over_time(axes[0][0], graph, cluster, best)
        _peak_bars(axes[0][-1], placements, cluster, "peak memory per device, every placer", best)
        if title:
            fig.suptitle(title, fontsize=11)
    else:
        _peak_bars(axes[0][-1], placements, cluster, title or "peak memory per device, every placer", best)
    fig.tight_layout()
    return fig


def _memory_over_time(ax: Any, graph: Graph, cluster: Cluster, placement: Placement) -> None:
    """Step lines of each device's memory (% of capacity) over the replay of ``placement``."""
    result = simulate(graph, cluster, placement.assignment)
    profile = memory_profile(graph, cluster.num_devices, placement.assignment, result)
    scale, unit = _time_unit(max(result.step_time_us, 1e-9))
    colors = _pyplot().get_cmap("tab10")
    for d, name in enumerate(cluster.device_names):
        times = np.concatenate([[0.0], profile.times_us[d], [result.step_time_us]]) / scale
        usage = np.concatenate([[profile.baseline_bytes[d]], profile.usage_bytes[d],
                                [profile.baseline_bytes[d]]]) / cluster.memory_bytes[d] * 100
        ax.step(times, usage, where="post", color=colors(d % 10), lw=1, label=name)
    ax.axhline(100, color="red", lw=1, ls="--", label="capacity")
    ax.set_ylim(0, max(110.0, ax.get_ylim()[1]))
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("device memory (% of capacity)")
    ax.set_title(f"{placement.placer}: memory per device over the simulated step", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)


def _peak_bars(ax: Any, placements: Sequence[Placement], cluster: Cluster, title: str,
               best: Placement | None = None) -> None:
    """Grouped bars of every placement's replayed peak per device (% of capacity); ``best``'s
    label in bold."""
    plt = _pyplot()
    num_dev = cluster.num_devices
    width = 0.8 / num_dev
    colors = plt.get_cmap("tab10")
    x = np.arange(len(placements))
    for d in range(num_dev):
        share = np.array([p.device_peak_memory_bytes[d] / cluster.memory_bytes[d] * 100 for p in placements])
        bars = ax.bar(x - 0.4 + width * (d + 0.5), share, width, color=colors(d % 10),
                      label=cluster.device_names[d])
        for bar, value in zip(bars, share, strict=True):
            if value > 100:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
    ax.axhline(100, color="red", lw=1, ls="--", label="capacity")
    ax.set_xticks(x)
    labels = ax.set_xticklabels([p.placer + (" (OOM)" if p.oom else "") for p in placements], fontsize=8)
    for label, p in zip(labels, placements, strict=True):
        if best is not None and p.placer == best.placer:
            label.set_fontweight("bold")
    ax.set_ylim(0, max(110.0, ax.get_ylim()[1]))
    ax.set_ylabel("peak device memory (% of capacity)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=min(num_dev + 1, 5), loc="upper right")
    ax.grid(axis="y", alpha=0.3)


def deviation_cdf_chart(curves: Sequence[tuple[str, Any, Any]], path: str | os.PathLike[str],
                        *, title: str = "") -> Path:
    """Write the paper's estimation-accuracy figure: CDFs of per-op relative deviation of memory
    (left) and time (right). ``curves`` holds ``(label, memory Deviation, time Deviation)``;
    deviations above 100 % are drawn at the right edge. Returns the PNG path."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, which, name in ((axes[0], 1, "memory"), (axes[1], 2, "time")):
        for curve in curves:
            values = np.sort(np.minimum(np.asarray(curve[which].values, dtype=np.float64), 1.0)) * 100
            if not len(values):
                continue
            share = np.arange(1, len(values) + 1) / len(values)
            ax.step(np.concatenate([[0.0], values]), np.concatenate([[0.0], share]), where="post",
                    label=f"{curve[0]} (mean {curve[which].mean * 100:.1f} %)")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 1.01)
        ax.set_xlabel(f"relative deviation of {name} (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("share of ops (CDF)")
    fig.suptitle(title or "estimated vs re-measured per-op costs", fontsize=10)
    fig.tight_layout()
    try:
        return _save_atomic(fig, path)
    finally:
        plt.close(fig)


def predicted_vs_measured_chart(points: Sequence[tuple[str, float, Mapping[str, float]]],
                                path: str | os.PathLike[str], *, title: str = "") -> Path:
    """Write a scatter of predicted (x) against measured (y) step time, one point per placer and
    execution-order mode, each labelled with its placer, and the line y = x (a perfect
    prediction). ``points`` holds ``(placer, predicted ms, {mode: measured ms})``; modes are drawn
    in their own marker and colour, in the order they first appear. Both axes are logarithmic
    with the same limits, so a point's height above the line is its measured / predicted ratio
    whatever the scale (a CPU step can take many times its prediction). ``title``'s lines are
    wrapped to the figure. Returns the PNG path."""
    plt = _pyplot()
    modes = list(dict.fromkeys(mode for _, _, measured in points for mode in measured))
    markers, colors = "os^Dv", plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7.5, 6))
    values = [v for _, p, measured in points for v in (p, *measured.values()) if v > 0]
    for i, mode in enumerate(modes):
        shown = [(label, predicted, measured[mode]) for label, predicted, measured in points
                 if mode in measured and predicted > 0 and measured[mode] > 0]
        ax.scatter([x for _, x, _ in shown], [y for _, _, y in shown], marker=markers[i % len(markers)],
                   color=colors(i % 10), s=40, label=f"{mode} order", zorder=3)
        for label, x, y in shown:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4 - 10 * i), fontsize=7,
                        color=colors(i % 10))
    low, high = (min(values), max(values)) if values else (0.1, 1.0)
    lim = (low / 1.5, high * 1.5)
    ax.plot(lim, lim, color="0.4", lw=1, ls="--", label="measured = predicted", zorder=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # lazy: matplotlib, as above

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted step time (ms, simulated)")
    ax.set_ylabel("measured step time (ms, median)")
    text = title or "predicted vs measured step time, every placer"
    ax.set_title("\n".join(textwrap.fill(line, 75) for line in text.splitlines()), fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    try:
        return _save_atomic(fig, path)
    finally:
        plt.close(fig)
