"""Placement-quality benchmark: Celeritas against every other placer on four seeded graph families.

The families (``celeritas_core.generators.families``): (a) synthetic training steps on devices holding 30–60 %
of the model (and cases where one device holds it all), the same steps with liveness fields
(``/live``: devices of 30–60 % of the one-device liveness peak, on 2, 4 and 8 devices) and as
memory-bound steps with cheap transfers (``/cheap``: the same, on a transfer model of CCR 0.05),
(b) inference graphs with parallel branches (Inception-like modules, multi-tower), (c) random
layered task DAGs in the style of the classic scheduling benchmarks (Kasahara's STG set,
Davidović & Crainic 2006) at CCR 0, 0.1, 1 and 10 on 2, 4 and 8 devices, (d) graphs of at most
30 ops for the exact MILP placer ``optimal``.

Every instance runs the placers celeritas, single, metis, m-topo (also non-uniform), m-etf, m-sct
(both also on the ops), heft, order-place and stages (a placer that is not registered is skipped
with a note), plus ``optimal`` on family (d), through ``celeritas_core.placers.place`` (simulated
step time, OOM, placement seconds). A placement *fits* when its replayed liveness-aware peak is
within every device's capacity (``placement.oom`` false; for graphs without liveness fields the
peak is the sum of op memory).
Per family it prints the number of graphs; Celeritas / best other placer that fits memory
(geometric mean and worst, naming the graph and the placer that beat Celeritas there); on the
cheap-transfer steps of (a), Celeritas / the fastest that fits of the list schedules that keep
co-location groups together and Baechi's recipes (heft, m-etf, m-etf/ops, m-sct, m-sct/ops,
m-topo); on (d), where ``optimal`` runs with ``channels=1`` (send/receive channel contention, so
its optimum is a lower bound on every placement's simulated step time), Celeritas's simulated step
/ the optimal placement's simulated step, / the channel MILP's objective and / its bound, and on
a second line per graph Celeritas's step simulated without channel contention / the no-channel
MILP's objective and bound (the first phase of the channel solve); on the CCR-0 DAGs of (c)
Celeritas / the lower bound max(critical path, work / devices); Celeritas's placement replayed
under the five alternative dispatch orders of ``celeritas_core.simulation.simulator.ALTERNATIVE_DISPATCH``
(Kahn FIFO, four seeded random topological orders), as the median of the five / the predicted
step (geometric mean, range, the instance furthest from 1); and every placer's placement seconds
(mean, max). Then PASS/MISS lines for the targets:

* Celeritas never more than 1 % slower than the best other placer that fits, on any graph;
* geometric mean of Celeritas / best other <= 0.95 over all families;
* within 1.10x of the channel MILP optimum on (d) (over the instances proven optimal) and of the
  lower bound on the CCR-0 DAGs of (c);
* never slower than the single-device time when one device holds the model (by its peak);
* on the cheap-transfer memory-bound steps of (a), Celeritas never more than 1 % slower than the
  best of heft, m-etf, m-etf/ops, m-sct, m-sct/ops and m-topo that fits (and fitting wherever one
  of them does);
* every placement keeps its co-location groups on one device (checked on each assignment;
  ``place`` refuses a split too);
* Celeritas's step under the alternative dispatch orders within 3 % of its prediction (median of
  the five / predicted), on every instance.

**Baechi's own code** as a reference column (``--baechi``; ``bench/baechi_reference.py`` runs
beomyeol/baechi's placers outside the product, from a checkout named by ``--baechi DIR`` or
``$BAECHI_DIR``, or extracted from the git mirror ``$BAECHI_MIRROR``): on every instance of at most
``--baechi-max-nodes`` ops (default 1,500) each configuration that runs here (m-ETF, m-ETF with
memory reservation, m-TOPO, m-TOPO non-uniform; each also with Baechi's fusion) places the graph and
our simulator replays the placement (step, and whether it fits by its replayed peak). Targets, per
family where Baechi ran:

* on (e), Celeritas never more than 1 % slower than the best of every other placer and of Baechi's
  placements that fit, and the geometric mean of that ratio <= 0.95;
* the project's ``m-etf``, ``m-sct`` and ``m-topo`` within 2 % of Baechi's own on every instance of
  (e), each against Baechi's configuration that is best there among those that fit (m-ETF and
  m-SCT with or without memory reservation, m-TOPO uniform or not), run the same way: on the ops
  (ours ``/ops``) or with Baechi's fusion (ours by default); reported for the other families too.

Without a checkout the column is skipped and said so. Baechi's m-SCT solves its LP with MOSEK,
which needs a licence; without MOSEK it runs with cvxopt's own LP solver
(``baechi_reference.SCT_SOLVER``; the LP's optimum is the same, the favourite children can differ
where it is not unique).

Targets are reported, not enforced (exit 0). Figures go to ``build/bench/quality.json``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_quality.py --help``). To get Baechi's code:
``git clone https://github.com/beomyeol/baechi`` and ``--baechi PATH`` (or ``BAECHI_DIR=PATH``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# one core per process, as in the other benchmarks: pin BLAS pools before numpy loads
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from celeritas_core.errors import CeleritasInputError  # noqa: E402
from celeritas_core.generators.families import FAMILIES, Instance, benchmark_instances  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.colocation import colocation_respected  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.graphs.levels import ccr  # noqa: E402
from celeritas_core.graphs.placement import Placement  # noqa: E402
from celeritas_core.placers import PLACERS, place  # noqa: E402
from celeritas_core.placers.local_search import excess_bytes  # noqa: E402
from celeritas_core.readwrite.formats import write_json_atomic  # noqa: E402
from celeritas_core.readwrite.units import format_us  # noqa: E402
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, simulate  # noqa: E402

PLACER_NAMES = ("celeritas", "single", "metis", "m-topo", "m-topo/nonuniform", "m-etf", "m-etf/ops", "m-sct",
                "m-sct/ops", "heft", "order-place", "stages")
#: Variants run under their own label: Baechi's placers both as Baechi runs them (grouping and
#: fusion, the default) and on the ops, so every graph meets the stronger of the two.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "m-etf/ops": ("m-etf", {"fusion": 0}),
    "m-sct/ops": ("m-sct", {"fusion": 0}),
    "m-topo/nonuniform": ("m-topo", {"uniform": 0}),
}


def placer_of(label: str) -> tuple[str, dict[str, Any] | None]:
    """Registered placer name and parameters behind a table label."""
    return VARIANTS.get(label, (label, None))
OPTIMAL = "optimal"
OPTIMAL_FAMILY = "d"
OPTIMAL_TIME_LIMIT_S = 30
WORST_TARGET = 1.01  # Celeritas / best other, every graph
GEOMEAN_TARGET = 0.95  # Celeritas / best other, geometric mean over all graphs
OPTIMUM_TARGET = 1.10  # Celeritas / MILP optimum on (d), Celeritas / lower bound on CCR-0 DAGs of (c)
#: The list schedules that keep co-location groups together (HEFT, m-ETF, m-SCT on Baechi's fused
#: graph and on the ops) and Baechi's recipes (m-TOPO, m-ETF, m-SCT): the reference on family a's
#: memory-bound steps with cheap transfers, where they beat Celeritas on real graphs.
LIST_SCHEDULES = ("heft", "m-etf", "m-etf/ops", "m-sct", "m-sct/ops", "m-topo")
CHEAP_VARIANT = "cheap"  # families.Instance.variant of those steps
CHEAP_TARGET = 1.01  # Celeritas / best of LIST_SCHEDULES that fits, every cheap-transfer step
DISPATCH_TARGET = 0.03  # |median step under the alternative dispatch orders / predicted - 1|
#: Per algorithm, Baechi's configurations -> our placer label that runs it the same way (op level
#: with TensorFlow's co-location groups: ``/ops``; Baechi's co-placement grouping and fusion: our
#: default). On each instance our placer is compared with the configuration best for Baechi there.
BAECHI_PAIRS: dict[str, dict[str, str]] = {
    "m-etf": {"m-etf": "m-etf/ops", "m-etf-reserve": "m-etf/ops", "m-etf/fusion": "m-etf",
              "m-etf-reserve/fusion": "m-etf"},
    "m-sct": {"m-sct": "m-sct/ops", "m-sct-reserve": "m-sct/ops", "m-sct/fusion": "m-sct",
              "m-sct-reserve/fusion": "m-sct"},
    "m-topo": {"m-topo": "m-topo", "m-topo-nonuniform": "m-topo/nonuniform", "m-topo/fusion": "m-topo",
               "m-topo-nonuniform/fusion": "m-topo/nonuniform"},
}
BAECHI_PAIR_TARGET = 1.02  # our placer / Baechi's own, same configuration, where Baechi's fits
BAECHI_FAMILY = "e"  # the family whose targets include Baechi's placements
BAECHI_MAX_NODES = 1_500

Row = dict[str, Any]


class EnforcedReplayCheck:
    """Every placement this benchmark (and bench_real, bench_topology) makes, replayed with its
    recorded order enforced (``device_order``, docs/simulator.md "Enforced order"): is the step
    the one predicted, bit for bit? The prediction is the free replay under the documented
    dispatch order; the enforced replay is what a runtime that follows the order runs."""

    def __init__(self) -> None:
        self.checked = 0
        self.differing: list[str] = []

    def check(self, graph: Graph, cluster: Cluster, placement: Placement, label: str) -> None:
        """Replay ``placement`` (evaluated on ``cluster``) with its recorded order enforced."""
        self.checked += 1
        if placement.device_order is None:
            self.differing.append(f"{label}: no recorded order")
            return
        order = placement.device_order
        step = simulate(graph, cluster, placement.assignment, device_order=order).step_time_us
        if step != placement.predicted_step_time_us:
            self.differing.append(f"{label}: enforced {step!r} µs, predicted "
                                  f"{placement.predicted_step_time_us!r} µs")

    def line(self) -> str:
        """The target's PASS/MISS line, with the first placements that differ."""
        verdict = _verdict(not self.differing and self.checked > 0)
        shown = "; ".join(self.differing[:3])
        return (f"{verdict} every placement's replay with its recorded order enforced is its predicted step, "
                f"bit for bit ({self.checked - len(self.differing)} of {self.checked} placements)"
                + (f": {shown}" if shown else ""))


#: Every placement of this run replayed with its recorded order enforced (docs/simulator.md).
ENFORCED = EnforcedReplayCheck()


# ---------------------------------------------------------------------------- running
def _run_placer(inst: Instance, name: str, params: Mapping[str, Any] | None = None) -> Row:
    """One placer on one instance: step time (µs), OOM, placement seconds, or the error it raised."""
    try:
        p = place(inst.graph, inst.cluster, name, params)
    except Exception as exc:  # a placer's failure is a result to report, not a reason to stop
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    ENFORCED.check(inst.graph, inst.cluster, p, f"{inst.name} {name}")
    # "fits" is the replay's liveness-aware peak against every device's capacity (``p.oom``; the
    # sum of op memory for graphs without liveness fields), as Celeritas itself ranks candidates
    row: Row = {"step_time_us": float(p.predicted_step_time_us), "oom": bool(p.oom),
                "placement_seconds": float(p.placement_seconds),
                "keeps_groups": colocation_respected(inst.graph, p.assignment)}
    if name == OPTIMAL:
        row["extra"] = {k: v for k, v in p.extra.items() if k.startswith("milp_")}
    row["_assignment"] = p.assignment
    return row


def _optimal_params(inst: Instance) -> dict[str, Any]:
    """``time_limit`` (s), ``channels=1`` and, when the placer has one, a ``max_ops`` that admits
    this graph."""
    accepted = {p.name: p for p in PLACERS[OPTIMAL].params}
    params: dict[str, Any] = {}
    if "time_limit" in accepted:
        params["time_limit"] = OPTIMAL_TIME_LIMIT_S
    if "channels" in accepted:
        params["channels"] = 1
    spec = accepted.get("max_ops")
    if spec is not None and spec.default < inst.graph.num_nodes:
        params["max_ops"] = inst.graph.num_nodes
    return params


def _no_channels_us(inst: Instance, assignment: Any) -> float | None:
    """Step time (µs) of ``assignment`` simulated without channel contention (the MILP's model)."""
    return float(simulate(inst.graph, inst.cluster, assignment, channels=False).step_time_us)


def _dispatch_figures(inst: Instance, cel: Row | None) -> Row | None:
    """Celeritas's placement replayed under each of ``ALTERNATIVE_DISPATCH`` (other valid orders
    of starting ready ops): the steps (µs), their median and median / the predicted step."""
    if cel is None or "error" in cel:
        return None
    steps = {name: float(simulate(inst.graph, inst.cluster, cel["_assignment"], dispatch=name).step_time_us)
             for name in ALTERNATIVE_DISPATCH}
    median = statistics.median(steps.values())
    return {"steps_us": steps, "median_us": median, "ratio": median / cel["step_time_us"]}


class BaechiColumn:
    """Baechi's own placers (``bench/baechi_reference.py``) on the instances of at most ``max_nodes``
    ops, replayed by our simulator; ``note`` says why the column is empty when it is."""

    def __init__(self, choice: str, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.dir: Path | None = None
        self.note = ""
        self.configs: list[str] = []
        if choice == "off":
            self.note = "Baechi's own placers: off (--baechi off)"
            return
        try:
            import baechi_reference as br  # bench/ is on sys.path when this script runs
        except ImportError as exc:  # pragma: no cover - the module sits beside this script
            self.note = f"Baechi's own placers: skipped ({exc})"
            return
        try:
            path = br.default_baechi_dir() if choice == "auto" else Path(choice)
        except (OSError, RuntimeError, ValueError) as exc:
            self.note = (f"Baechi's own placers: skipped (no checkout: {str(exc).splitlines()[0]}; "
                         f"--baechi PATH or ${br.BAECHI_DIR_ENV})")
            return
        reason = br.baechi_available(path)
        if reason is not None:
            self.note = f"Baechi's own placers: skipped ({reason})"
            return
        self.dir, self.configs, self._br = path, list(br.BAECHI_CONFIGS), br

    def run(self, inst: Instance) -> dict[str, Row] | None:
        """Each configuration's replayed step (µs), fit and seconds, or its error; None when skipped."""
        if self.dir is None or inst.graph.num_nodes > self.max_nodes or not inst.cluster.is_flat \
                or len(set(inst.cluster.speed.tolist())) > 1:
            return None
        out: dict[str, Row] = {}
        for config in self.configs:
            result = self._br.baechi_run(inst.graph, inst.cluster, config, self.dir)
            if result.assignment is None:
                out[config] = {"error": (result.error or "").splitlines()[0][:200]}
                continue
            replay = simulate(inst.graph, inst.cluster, result.assignment)
            excess = excess_bytes(inst.graph, inst.cluster, result.assignment, replay)
            out[config] = {"step_time_us": float(replay.step_time_us), "oom": bool(excess > 0),
                           "placement_seconds": result.placement_seconds,
                           "keeps_groups": colocation_respected(inst.graph, result.assignment)}
        return out


def run_instance(inst: Instance, placers: Sequence[str], with_optimal: bool,
                 baechi: BaechiColumn | None = None) -> Row:
    """Run every placer on ``inst``; return its row of figures (times in µs, seconds)."""
    graph, cluster = inst.graph, inst.cluster
    figures = {label: _run_placer(inst, *placer_of(label)) for label in placers}
    row: Row = {
        "name": inst.name, "family": inst.family, "notes": inst.notes, "nodes": graph.num_nodes,
        "edges": graph.num_edges, "devices": cluster.num_devices,
        "device_memory_bytes": float(cluster.memory_bytes[0]),
        "model_memory_bytes": graph.total_memory_bytes, "fits_one_device": inst.fits_one_device,
        "ccr": ccr(graph, cluster), "target_ccr": graph.meta.get("target_ccr"), "variant": inst.variant,
        "dispatch": _dispatch_figures(inst, figures.get("celeritas")),
    }
    if with_optimal:
        opt = _run_placer(inst, OPTIMAL, _optimal_params(inst))
        if "error" not in opt:
            cel_assignment = figures.get("celeritas", {}).get("_assignment")
            opt["celeritas_no_channels_us"] = (None if cel_assignment is None
                                               else _no_channels_us(inst, cel_assignment))
            opt["optimal_no_channels_us"] = _no_channels_us(inst, opt["_assignment"])
        row["optimal"] = opt
    from celeritas_core.simulation.bounds import lower_bound_us, single_device_time_us

    row["single_device_time_us"] = single_device_time_us(graph, cluster)
    row["lower_bound_us"] = lower_bound_us(graph, cluster)
    for fig in [*figures.values(), row.get("optimal", {})]:
        fig.pop("_assignment", None)
    row["placers"] = figures
    row["baechi"] = baechi.run(inst) if baechi is not None else None
    row.update(_ratios(row))
    row.update(_baechi_ratios(row))
    return row


def _baechi_ratios(row: Row) -> Row:
    """Celeritas / the best of every other placer and Baechi's placements that fit; and our placer /
    Baechi's own in each configuration of :data:`BAECHI_PAIRS` where Baechi's fits."""
    baechi = row.get("baechi")
    out: Row = {"best_with_baechi": row["best_other"],
                "ratio_vs_best_with_baechi": row["ratio_vs_best_other"], "baechi_pairs": {}}
    if not baechi:
        return out
    fits = {f"baechi:{c}": f["step_time_us"] for c, f in baechi.items() if "error" not in f and not f["oom"]}
    if row["best_other"] is not None:
        fits[row["best_other"]] = row["best_other_step_us"]
    if fits:
        best = min(fits, key=fits.__getitem__)
        out["best_with_baechi"] = best
        cel = row["placers"].get("celeritas", {})
        if not row["celeritas_oom"]:
            out["ratio_vs_best_with_baechi"] = cel["step_time_us"] / fits[best]
    for algorithm, configs in BAECHI_PAIRS.items():
        fitting = [(baechi[c]["step_time_us"], c) for c in configs
                   if "step_time_us" in baechi.get(c, {}) and not baechi[c]["oom"]]
        if not fitting:
            continue
        step, config = min(fitting)
        ours = configs[config]
        mine = row["placers"].get(ours, {})
        if "step_time_us" in mine:
            out["baechi_pairs"][algorithm] = {"config": config, "ours": ours, "ours_oom": mine["oom"],
                                              "ratio": mine["step_time_us"] / step}
    return out


def _ratios(row: Row) -> Row:
    """Celeritas / best other placer that fits, / lower bound, / single device, / MILP optimum."""
    figures = row["placers"]
    cel = figures.get("celeritas", {})
    others = {n: f["step_time_us"] for n, f in figures.items()
              if n != "celeritas" and "error" not in f and not f["oom"]}
    out: Row = {"best_other": None, "best_other_step_us": None, "ratio_vs_best_other": None,
                "celeritas_oom": bool(cel.get("oom", True)) or "error" in cel}
    if others:
        best = min(others, key=others.__getitem__)
        out["best_other"], out["best_other_step_us"] = best, others[best]
        if not out["celeritas_oom"]:
            out["ratio_vs_best_other"] = cel["step_time_us"] / others[best]
    out.update(_list_ratio(figures, out["celeritas_oom"]))
    if "error" not in cel:
        out["ratio_vs_lower_bound"] = cel["step_time_us"] / row["lower_bound_us"]
        out["ratio_vs_single"] = cel["step_time_us"] / row["single_device_time_us"]
    opt = row.get("optimal")
    if opt is not None and "error" not in opt:
        out["optimal"] = {**opt, **_optimum_ratios(cel, opt)}
    return out


def _list_ratio(figures: Mapping[str, Row], celeritas_oom: bool) -> Row:
    """Celeritas / the fastest of :data:`LIST_SCHEDULES` that fits (its replayed peak within
    every device; None when none fits or Celeritas does not)."""
    fits = {n: figures[n]["step_time_us"] for n in LIST_SCHEDULES
            if n in figures and "error" not in figures[n] and not figures[n]["oom"]}
    out: Row = {"best_list": None, "best_list_step_us": None, "ratio_vs_best_list": None}
    if fits:
        best = min(fits, key=fits.__getitem__)
        out["best_list"], out["best_list_step_us"] = best, fits[best]
        if not celeritas_oom:
            out["ratio_vs_best_list"] = figures["celeritas"]["step_time_us"] / fits[best]
    return out


def _optimum_ratios(cel: Row, opt: Row) -> Row:
    """Celeritas against the optimal placer: simulated times, channel and no-channel MILP objective
    and bound.

    With ``channels=1`` the MILP's objective and bound are under channel contention, lower bounds
    on every placement's simulated step when proven optimal (the bound always); its no-channel
    first phase is compared with Celeritas simulated without channel contention.
    """
    extra = opt.get("extra", {})
    status = extra.get("milp_status")
    channels = str(extra.get("milp_model", "")).startswith("channel contention")
    makespan, bound = extra.get("milp_makespan_us"), extra.get("milp_bound_us")
    if channels:
        nc_status = extra.get("milp_no_channel_status")
        nc_makespan = extra.get("milp_no_channel_makespan_us")
        nc_bound = extra.get("milp_no_channel_bound_us")
    else:
        nc_status, nc_makespan, nc_bound = status, makespan, bound
    cel_ok = "error" not in cel
    step = cel["step_time_us"] if cel_ok else None
    nochan = opt.get("celeritas_no_channels_us")
    return {
        "milp_status": status,
        "milp_channels": channels,
        "ratio_sim": step / opt["step_time_us"] if step is not None and opt["step_time_us"] > 0 else None,
        "ratio_chan": step / makespan if channels and step is not None and makespan else None,
        "ratio_chan_bound": step / bound if channels and step is not None and bound else None,
        "no_channel_status": nc_status,
        "ratio_milp": nochan / nc_makespan if nochan is not None and nc_makespan else None,
        "ratio_milp_bound": nochan / nc_bound if nochan is not None and nc_bound else None,
    }


def run(families: Sequence[str], quick: bool, seed: int,
        baechi: BaechiColumn | None = None) -> tuple[dict[str, list[Row]], list[str]]:
    """Run the benchmark; return the rows per family and the notes on skipped placers."""
    placers = [p for p in PLACER_NAMES if placer_of(p)[0] in PLACERS]
    notes = [f"placer {p!r} is not registered: skipped"
             for p in PLACER_NAMES if placer_of(p)[0] not in PLACERS]
    with_optimal = OPTIMAL in PLACERS
    if OPTIMAL_FAMILY in families and not with_optimal:
        notes.append("optimal placer not available")
    start = time.perf_counter()
    rows: dict[str, list[Row]] = {}
    for family in families:
        instances = benchmark_instances(family, quick=quick, seed=seed)
        rows[family] = []
        for i, inst in enumerate(instances):
            print(f"  [{family} {i + 1}/{len(instances)}] {inst.name}: {inst.graph.num_nodes:,} ops "
                  f"({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
            optimal = with_optimal and family == OPTIMAL_FAMILY
            rows[family].append(run_instance(inst, placers, optimal, baechi))
    return rows, notes


# ---------------------------------------------------------------------------- summaries
def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean of positive values (None when empty)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: Sequence[Row], placers: Sequence[str]) -> Row:
    """One family's figures: ratios to the best other placer, bounds, optimum, placement seconds."""
    ratios = [r for r in rows if r["ratio_vs_best_other"] is not None]
    worst = max(ratios, key=lambda r: r["ratio_vs_best_other"], default=None)
    ccr0 = [r for r in rows if r["family"] == "c" and r["target_ccr"] == 0 and "ratio_vs_lower_bound" in r]
    optimum = [r["optimal"] for r in rows if "optimal" in r and "error" not in r["optimal"]]
    seconds = {}
    for p in placers:
        vals = [r["placers"][p]["placement_seconds"] for r in rows
                if p in r["placers"] and "error" not in r["placers"][p]]
        if vals:
            seconds[p] = {"mean": sum(vals) / len(vals), "max": max(vals)}
    if optimum:
        vals = [o["placement_seconds"] for o in optimum]
        seconds[OPTIMAL] = {"mean": sum(vals) / len(vals), "max": max(vals)}
    return {
        "graphs": len(rows),
        "geomean_vs_best_other": geomean([r["ratio_vs_best_other"] for r in ratios]),
        "worst_vs_best_other": worst["ratio_vs_best_other"] if worst else None,
        "worst_graph": worst["name"] if worst else None,
        "worst_beaten_by": worst["best_other"] if worst else None,
        "celeritas_oom_where_another_fits": [r["name"] for r in rows
                                             if r["celeritas_oom"] and r["best_other"] is not None],
        "ccr0_graphs": len(ccr0),
        "geomean_vs_lower_bound_ccr0": geomean([r["ratio_vs_lower_bound"] for r in ccr0]),
        "worst_vs_lower_bound_ccr0": max((r["ratio_vs_lower_bound"] for r in ccr0), default=None),
        "optimal_runs": len(optimum),
        "optimal_proven": sum(1 for o in optimum if o["milp_status"] == "optimal"),
        "worst_vs_optimum_sim": max((o["ratio_sim"] for o in optimum
                                     if o["milp_status"] == "optimal" and o["ratio_sim"] is not None),
                                    default=None),
        "worst_vs_channel_milp": max((o["ratio_chan"] for o in optimum
                                      if o["milp_status"] == "optimal" and o["ratio_chan"] is not None),
                                     default=None),
        "worst_vs_milp": max((o["ratio_milp"] for o in optimum
                              if o["no_channel_status"] == "optimal" and o["ratio_milp"] is not None),
                             default=None),
        "placement_seconds": seconds,
        **_cheap_summary(rows),
        **_dispatch_summary(rows),
        **_baechi_summary(rows),
        "groups_split": [f"{p} on {r['name']}" for r in rows for p, f in r["placers"].items()
                         if f.get("keeps_groups") is False],
    }


def _cheap_summary(rows: Sequence[Row]) -> Row:
    """Family a's cheap-transfer steps: Celeritas / the best list schedule that fits."""
    cheap = [r for r in rows if r.get("variant") == CHEAP_VARIANT]
    rated = [r for r in cheap if r["ratio_vs_best_list"] is not None]
    worst = max(rated, key=lambda r: r["ratio_vs_best_list"], default=None)
    return {
        "cheap_graphs": len(cheap),
        "cheap_rated": len(rated),
        "geomean_vs_best_list_cheap": geomean([r["ratio_vs_best_list"] for r in rated]),
        "worst_vs_best_list_cheap": worst["ratio_vs_best_list"] if worst else None,
        "worst_cheap_graph": worst["name"] if worst else None,
        "worst_cheap_beaten_by": worst["best_list"] if worst else None,
        "celeritas_oom_where_a_list_schedule_fits_cheap": [r["name"] for r in cheap if r["celeritas_oom"]
                                                           and r["best_list"] is not None],
    }


def _baechi_summary(rows: Sequence[Row]) -> Row:
    """Where Baechi's own placers ran: Celeritas / the best with them, and our placers / Baechi's."""
    ran = [r for r in rows if r.get("baechi")]
    rated = [r for r in ran if r["ratio_vs_best_with_baechi"] is not None]
    worst = max(rated, key=lambda r: r["ratio_vs_best_with_baechi"], default=None)
    pairs: Row = {}
    for algorithm in BAECHI_PAIRS:
        ratios = [(r["baechi_pairs"][algorithm]["ratio"], r["name"], r["baechi_pairs"][algorithm]["config"])
                  for r in ran if algorithm in r["baechi_pairs"]]
        if ratios:
            high = max(ratios)
            pairs[algorithm] = {"rated": len(ratios), "geomean": geomean([x for x, _, _ in ratios]),
                                "worst": high[0], "worst_graph": high[1], "worst_config": high[2]}
    fits = {c: sum(1 for r in ran if "step_time_us" in r["baechi"].get(c, {}) and not r["baechi"][c]["oom"])
            for c in (ran[0]["baechi"] if ran else {})}
    return {
        "baechi_graphs": len(ran),
        "baechi_fits": fits,
        "geomean_vs_best_with_baechi": geomean([r["ratio_vs_best_with_baechi"] for r in rated]),
        "worst_vs_best_with_baechi": worst["ratio_vs_best_with_baechi"] if worst else None,
        "worst_with_baechi_graph": worst["name"] if worst else None,
        "worst_with_baechi_by": worst["best_with_baechi"] if worst else None,
        "baechi_pairs": pairs,
    }


def _dispatch_summary(rows: Sequence[Row]) -> Row:
    """Celeritas's step under the alternative dispatch orders: median / predicted, over the rows."""
    rated = [r for r in rows if r.get("dispatch")]
    ratios = [r["dispatch"]["ratio"] for r in rated]
    worst = max(rated, key=lambda r: abs(r["dispatch"]["ratio"] - 1.0), default=None)
    return {
        "dispatch_graphs": len(rated),
        "dispatch_geomean": geomean(ratios),
        "dispatch_min": min(ratios, default=None),
        "dispatch_max": max(ratios, default=None),
        "dispatch_worst": worst["dispatch"]["ratio"] if worst else None,
        "dispatch_worst_graph": worst["name"] if worst else None,
    }


# ---------------------------------------------------------------------------- printing
def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_family(family: str, rows: Sequence[Row], summary: Row, placers: Sequence[str]) -> None:
    """The family's per-graph table and its summary lines."""
    print(f"== ({family}) {FAMILIES[family]}: {summary['graphs']} graphs ==")
    head = (f"{'graph':<38}{'ops':>6}{'dev':>4}{'CCR':>7}{'celeritas':>11}{'best other':>12}"
            f"{'by':>13}{'ratio':>7}{'vs LB':>7}")
    print(head)
    for r in rows:
        cel = r["placers"].get("celeritas", {})
        cel_text = "error" if "error" in cel else ("OOM" if cel["oom"] else format_us(cel["step_time_us"]))
        other = format_us(r["best_other_step_us"]) if r["best_other_step_us"] is not None else "-"
        print(f"{r['name'][:37]:<38}{r['nodes']:>6}{r['devices']:>4}{r['ccr']:>7.2f}{cel_text:>11}"
              f"{other:>12}{r['best_other'] or '-':>13}{_fmt(r['ratio_vs_best_other']):>7}"
              f"{_fmt(r.get('ratio_vs_lower_bound'), '.2f'):>7}")
    print(f"Celeritas / best other placer that fits: geomean {_fmt(summary['geomean_vs_best_other'])}, "
          f"worst {_fmt(summary['worst_vs_best_other'])} on {summary['worst_graph']} "
          f"(best other there: {summary['worst_beaten_by']})")
    oom = summary["celeritas_oom_where_another_fits"]
    if oom:
        print(f"Celeritas OOM where another placer fits: {', '.join(oom)}")
    if summary["ccr0_graphs"]:
        print(f"Celeritas / lower bound on the {summary['ccr0_graphs']} CCR-0 DAGs: geomean "
              f"{_fmt(summary['geomean_vs_lower_bound_ccr0'])}, "
              f"worst {_fmt(summary['worst_vs_lower_bound_ccr0'])}")
    if any("optimal" in r for r in rows):
        _print_optimum(rows, summary)
    if summary["cheap_graphs"]:
        _print_cheap(rows, summary)
    if summary["dispatch_graphs"]:
        print(f"Celeritas under the {len(ALTERNATIVE_DISPATCH)} alternative dispatch orders, median / "
              f"predicted step: geomean {_fmt(summary['dispatch_geomean'])}, range "
              f"{_fmt(summary['dispatch_min'])}–{_fmt(summary['dispatch_max'])}, furthest from 1 on "
              f"{summary['dispatch_worst_graph']}")
    if summary["baechi_graphs"]:
        _print_baechi(summary)
    print(f"{'placement seconds':<18}{'mean':>9}{'max':>9}")
    for p in [*placers, OPTIMAL]:
        if p in summary["placement_seconds"]:
            s = summary["placement_seconds"][p]
            print(f"  {p:<16}{s['mean']:>9.3f}{s['max']:>9.3f}")
    errors = [(r["name"], p, f["error"]) for r in rows for p, f in r["placers"].items() if "error" in f]
    errors += [(r["name"], OPTIMAL, r["optimal"]["error"]) for r in rows
               if "optimal" in r and "error" in r["optimal"]]
    for name, p, err in errors:
        print(f"  error: {p} on {name}: {err}")
    print()


def _print_cheap(rows: Sequence[Row], summary: Row) -> None:
    """Family a's memory-bound steps with cheap transfers: Celeritas against the list schedules."""
    print(f"Cheap-transfer memory-bound steps ({summary['cheap_graphs']}): Celeritas / the fastest that fits "
          f"of {', '.join(LIST_SCHEDULES)} (group-keeping list schedules and Baechi's recipes); 'fit' counts "
          f"those that fit by their replayed peak")
    print(f"  {'graph':<38}{'CCR':>6}{'celeritas':>11}{'best list':>11}{'by':>11}{'fit':>5}{'ratio':>7}")
    for r in rows:
        if r.get("variant") != CHEAP_VARIANT:
            continue
        cel = r["placers"].get("celeritas", {})
        cel_text = "error" if "error" in cel else ("OOM" if cel["oom"] else format_us(cel["step_time_us"]))
        best = format_us(r["best_list_step_us"]) if r["best_list_step_us"] is not None else "-"
        fit = sum(1 for n in LIST_SCHEDULES if n in r["placers"] and not r["placers"][n].get("oom", True))
        print(f"  {r['name'][:37]:<38}{r['ccr']:>6.3f}{cel_text:>11}{best:>11}{r['best_list'] or '-':>11}"
              f"{fit:>5}{_fmt(r['ratio_vs_best_list']):>7}")
    print(f"  geomean {_fmt(summary['geomean_vs_best_list_cheap'])} over {summary['cheap_rated']} rated, "
          f"worst {_fmt(summary['worst_vs_best_list_cheap'])} on {summary['worst_cheap_graph']} "
          f"(by {summary['worst_cheap_beaten_by']})")


def _print_baechi(summary: Row) -> None:
    """Baechi's own placers: how often each fits, Celeritas against the best with them, the pairs."""
    fits = ", ".join(f"{c} {n}" for c, n in summary["baechi_fits"].items())
    print(f"Baechi's own code on {summary['baechi_graphs']} graphs (placements that fit: {fits})")
    print(f"  Celeritas / best of every placer and Baechi's placements that fit: geomean "
          f"{_fmt(summary['geomean_vs_best_with_baechi'])}, "
          f"worst {_fmt(summary['worst_vs_best_with_baechi'])} "
          f"on {summary['worst_with_baechi_graph']} (by {summary['worst_with_baechi_by']})")
    for algorithm, pair in summary["baechi_pairs"].items():
        print(f"  our {algorithm} / Baechi's own in its best configuration that fits: geomean "
              f"{_fmt(pair['geomean'])}, worst {_fmt(pair['worst'])} on {pair['worst_graph']} (Baechi's "
              f"{pair['worst_config']}; {pair['rated']} rated)")


def _print_optimum(rows: Sequence[Row], summary: Row) -> None:
    """Family (d): Celeritas against the MILP optimum, per graph: channel model, then no channels."""
    print(f"Celeritas / optimum ({summary['optimal_proven']} of {summary['optimal_runs']} channel MILPs "
          f"proven optimal). Per graph, line 1: the channel-contention MILP, whose optimum (and bound) is a "
          f"lower bound on every placement's simulated step: cel/opt = Celeritas / the optimal placement "
          f"(both simulated), cel/obj and cel/bound = Celeritas's simulated step / the MILP's objective "
          f"and bound. Line 2 ('no-chan'): the MILP without channel contention against Celeritas "
          f"simulated without it.")
    print(f"  {'graph':<34}{'status':>12}{'optimal sim':>12}{'MILP obj':>11}{'MILP bound':>11}"
          f"{'cel/opt':>8}{'cel/obj':>9}{'cel/bound':>10}")
    for r in rows:
        o = r.get("optimal")
        if o is None or "error" in o:
            continue
        extra = o.get("extra", {})
        obj, bound = extra.get("milp_makespan_us"), extra.get("milp_bound_us")
        if o.get("milp_channels"):
            print(f"  {r['name'][:33]:<34}{o['milp_status'] or '-':>12}{format_us(o['step_time_us']):>12}"
                  f"{format_us(obj) if obj else '-':>11}{format_us(bound) if bound else '-':>11}"
                  f"{_fmt(o['ratio_sim']):>8}{_fmt(o['ratio_chan']):>9}{_fmt(o['ratio_chan_bound']):>10}")
            obj, bound = extra.get("milp_no_channel_makespan_us"), extra.get("milp_no_channel_bound_us")
            name = "  no-chan"
        else:
            name = r["name"][:33]
        print(f"  {name:<34}{o['no_channel_status'] or '-':>12}{'':>12}"
              f"{format_us(obj) if obj else '-':>11}{format_us(bound) if bound else '-':>11}"
              f"{'':>8}{_fmt(o['ratio_milp']):>9}{_fmt(o['ratio_milp_bound']):>10}")


# ---------------------------------------------------------------------------- targets
def targets(rows: dict[str, list[Row]], notes: Sequence[str]) -> list[str]:
    """PASS/MISS (or SKIP) lines for the targets over every family that ran."""
    every = [r for fam in rows.values() for r in fam]
    lines = [_worst_target(every), _geomean_target(every)]
    if OPTIMAL_FAMILY in rows:
        lines.append(_optimum_target(rows[OPTIMAL_FAMILY], notes))
    if "c" in rows:
        lines.append(_bound_target(rows["c"]))
    lines.append(_single_target(every))
    if any(r.get("variant") == CHEAP_VARIANT for r in every):
        lines.append(_cheap_target(every))
    if BAECHI_FAMILY in rows:
        lines.extend(_baechi_targets(rows[BAECHI_FAMILY], notes))
    lines.append(_groups_target(every))
    lines.append(_dispatch_target(every))
    lines.append(ENFORCED.line())
    return lines


def _baechi_targets(rows: Sequence[Row], notes: Sequence[str]) -> list[str]:
    """Family (e): Celeritas against every placer and Baechi's own placements; our baselines against
    Baechi's in the same configuration."""
    what = f"({BAECHI_FAMILY}) with Baechi's own placements"
    ran = [r for r in rows if r.get("baechi")]
    if not ran:
        why = next((n for n in notes if n.startswith("Baechi")), "Baechi's own placers did not run")
        return [f"SKIP Celeritas on {what}: {why}"]
    rated = [r for r in ran if r["ratio_vs_best_with_baechi"] is not None]
    worst = max(rated, key=lambda r: r["ratio_vs_best_with_baechi"], default=None)
    g = geomean([r["ratio_vs_best_with_baechi"] for r in rated])
    detail = (f"worst {worst['ratio_vs_best_with_baechi']:.3f} on {worst['name']} "
              f"vs {worst['best_with_baechi']}" if worst else "none rated")
    ok = worst is not None and worst["ratio_vs_best_with_baechi"] <= WORST_TARGET
    lines = [f"{_verdict(ok)} Celeritas never more than {WORST_TARGET - 1:.0%} slower than the best other "
             f"placer or Baechi placement on {what} ({detail}; {len(rated)} of {len(rows)} rated)",
             f"{_verdict(g is not None and g <= GEOMEAN_TARGET)} geomean Celeritas / best with Baechi's "
             f"{_fmt(g)} on {what} (target <= {GEOMEAN_TARGET})"]
    pairs = [(pair["ratio"], r["name"], pair) for r in ran for pair in r["baechi_pairs"].values()]
    over = [p for p in pairs if p[0] > BAECHI_PAIR_TARGET]
    high = max(pairs, key=lambda p: p[0], default=None)
    detail = (f"worst {high[0]:.3f}: our {high[2]['ours']} vs Baechi's {high[2]['config']} on {high[1]}"
              if high else "none")
    lines.append(f"{_verdict(bool(pairs) and not over)} our {', '.join(BAECHI_PAIRS)} within "
                 f"{BAECHI_PAIR_TARGET - 1:.0%} of Baechi's own in its best configuration that fits, run "
                 f"the same way (ops or fused), on ({BAECHI_FAMILY}) ({detail}; {len(pairs)} pairs, "
                 f"{len(over)} over)")
    return lines


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _worst_target(every: Sequence[Row]) -> str:
    rated = [r for r in every if r["ratio_vs_best_other"] is not None]
    oom = [r["name"] for r in every if r["celeritas_oom"] and r["best_other"] is not None]
    worst = max(rated, key=lambda r: r["ratio_vs_best_other"], default=None)
    over = [r for r in rated if r["ratio_vs_best_other"] > WORST_TARGET]
    detail = (f"worst {worst['ratio_vs_best_other']:.3f} on {worst['name']} vs {worst['best_other']}"
              if worst else "no graph rated")
    extra = f"; {len(over)} graphs over" if over else ""
    extra += f"; Celeritas OOM on {len(oom)} where another fits" if oom else ""
    return (f"{_verdict(not over and not oom)} Celeritas never more than {WORST_TARGET - 1:.0%} slower than "
            f"the best other placer ({detail}{extra})")


def _geomean_target(every: Sequence[Row]) -> str:
    g = geomean([r["ratio_vs_best_other"] for r in every if r["ratio_vs_best_other"] is not None])
    return (f"{_verdict(g is not None and g <= GEOMEAN_TARGET)} geomean Celeritas / best other "
            f"{_fmt(g)} over all families (target <= {GEOMEAN_TARGET})")


def _optimum_target(rows: Sequence[Row], notes: Sequence[str]) -> str:
    what = "the channel-contention MILP optimum on (d)"
    if "optimal placer not available" in notes:
        return f"SKIP within 1.10x of {what}: optimal placer not available"
    runs = [r["optimal"] for r in rows if "optimal" in r and "error" not in r["optimal"]]
    proven = [o for o in runs if o.get("milp_status") == "optimal" and o.get("ratio_chan") is not None]
    if not proven:
        return f"SKIP within 1.10x of {what}: no channel MILP proven optimal ({len(runs)} run)"
    worst = max(proven, key=lambda o: o["ratio_chan"])
    name = next(r["name"] for r in rows if r.get("optimal") is worst)
    return (f"{_verdict(worst['ratio_chan'] <= OPTIMUM_TARGET)} within {OPTIMUM_TARGET:.2f}x of {what} "
            f"(worst {worst['ratio_chan']:.3f} on {name}, Celeritas simulated step / channel MILP optimum, "
            f"over the {len(proven)} of {len(rows)} instances proven optimal)")


def _bound_target(rows: Sequence[Row]) -> str:
    ccr0 = [r for r in rows if r["target_ccr"] == 0 and "ratio_vs_lower_bound" in r]
    worst = max(ccr0, key=lambda r: r["ratio_vs_lower_bound"], default=None)
    if worst is None:
        return "SKIP within 1.10x of the lower bound on the CCR-0 DAGs of (c): none ran"
    return (f"{_verdict(worst['ratio_vs_lower_bound'] <= OPTIMUM_TARGET)} within {OPTIMUM_TARGET:.2f}x of "
            f"max(critical path, work/devices) on the {len(ccr0)} CCR-0 DAGs of (c) "
            f"(worst {worst['ratio_vs_lower_bound']:.3f} on {worst['name']})")


def _single_target(every: Sequence[Row]) -> str:
    fits = [r for r in every if r["fits_one_device"] and "ratio_vs_single" in r]
    slower = [r for r in fits if r["ratio_vs_single"] > 1.0 + 1e-9]
    worst = max(fits, key=lambda r: r["ratio_vs_single"], default=None)
    detail = f"worst {worst['ratio_vs_single']:.3f} on {worst['name']}" if worst else "no such graph"
    return (f"{_verdict(not slower)} no Celeritas placement slower than one device when one device holds "
            f"the model ({len(fits)} graphs, {len(slower)} slower; {detail})")


def _cheap_target(every: Sequence[Row]) -> str:
    """Celeritas within 1 % of the best group-keeping list schedule on every cheap-transfer step."""
    cheap = [r for r in every if r.get("variant") == CHEAP_VARIANT]
    rated = [r for r in cheap if r["ratio_vs_best_list"] is not None]
    oom = [r["name"] for r in cheap if r["celeritas_oom"] and r["best_list"] is not None]
    over = [r for r in rated if r["ratio_vs_best_list"] > CHEAP_TARGET]
    worst = max(rated, key=lambda r: r["ratio_vs_best_list"], default=None)
    detail = (f"worst {worst['ratio_vs_best_list']:.3f} on {worst['name']} vs {worst['best_list']}"
              if worst else "no step rated")
    none_fits = sum(r["best_list"] is None for r in cheap)
    detail += f"; {len(rated)} of {len(cheap)} rated, {none_fits} where none fits"
    detail += f"; {len(over)} over" if over else ""
    detail += f"; Celeritas OOM on {len(oom)} where one fits" if oom else ""
    return (f"{_verdict(not over and not oom)} Celeritas never more than {CHEAP_TARGET - 1:.0%} slower than "
            f"the best of {', '.join(LIST_SCHEDULES)} that fits on the memory-bound steps with cheap "
            f"transfers ({detail})")


def _groups_target(every: Sequence[Row]) -> str:
    """Every placement (list schedules included) keeps each co-location group on one device."""
    checked = [(r["name"], p) for r in every for p, f in r["placers"].items() if "keeps_groups" in f]
    split = [f"{p} on {r['name']}" for r in every for p, f in r["placers"].items()
             if f.get("keeps_groups") is False]
    detail = f"; split: {', '.join(split[:3])}" if split else ""
    return (f"{_verdict(not split)} every placement keeps its co-location groups together "
            f"({len(checked)} placements checked{detail})")


def _dispatch_target(every: Sequence[Row]) -> str:
    """Celeritas's predicted step holds under the alternative dispatch orders (median within 3 %)."""
    rated = [r for r in every if r.get("dispatch")]
    if not rated:
        return "SKIP Celeritas's step under the alternative dispatch orders: no Celeritas placement"
    worst = max(rated, key=lambda r: abs(r["dispatch"]["ratio"] - 1.0))
    off = [r for r in rated if abs(r["dispatch"]["ratio"] - 1.0) > DISPATCH_TARGET]
    extra = f"; {len(off)} of {len(rated)} outside" if off else ""
    return (f"{_verdict(not off)} Celeritas's step within {DISPATCH_TARGET:.0%} of its prediction on every "
            f"instance under the dispatch orders {', '.join(ALTERNATIVE_DISPATCH)} (median / predicted; "
            f"{len(rated)} placements, furthest {worst['dispatch']['ratio']:.3f} on {worst['name']}{extra})")


# ---------------------------------------------------------------------------- main
def _parse_families(text: str) -> list[str]:
    aliases = {"training": "a", "inference": "b", "layered": "c", "small": "d", "layers": "e"}
    out = []
    for part in (p.strip() for p in text.split(",")):
        key = aliases.get(part, part)
        if key not in FAMILIES:
            raise CeleritasInputError(f"--families: unknown family {part!r} (known: {', '.join(FAMILIES)})")
        if key not in out:
            out.append(key)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and targets, write the JSON; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated families {','.join(FAMILIES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="a few instances per family (for tests)")
    parser.add_argument("--seed", type=int, default=0, help="offset of every generator seed (default: 0)")
    parser.add_argument("--out", default="build/bench/quality.json", help="figures JSON")
    parser.add_argument("--baechi", default="auto",
                        help="Baechi's own placers as a reference column: a checkout of beomyeol/baechi, "
                             "'auto' ($BAECHI_DIR, else extracted from the git mirror $BAECHI_MIRROR; "
                             "skipped when neither exists) or 'off' (default: auto)")
    parser.add_argument("--baechi-max-nodes", type=int, default=BAECHI_MAX_NODES,
                        help=f"run Baechi's placers on instances of at most this many ops (default: "
                             f"{BAECHI_MAX_NODES})")
    args = parser.parse_args(argv)
    try:
        families = _parse_families(args.families)
        if args.seed < 0:
            raise CeleritasInputError(f"--seed: must be >= 0, got {args.seed}")
    except CeleritasInputError as exc:
        parser.error(str(exc))
    start = time.perf_counter()
    print(f"Quality benchmark, seed {args.seed}{', quick' if args.quick else ''}", file=sys.stderr)
    baechi = BaechiColumn(args.baechi, args.baechi_max_nodes)
    rows, notes = run(families, args.quick, args.seed, baechi)
    if baechi.note:
        notes.append(baechi.note)
    placers = [p for p in PLACER_NAMES if placer_of(p)[0] in PLACERS]
    for note in notes:
        print(note)
    if notes:
        print()
    summaries = {f: summarize(rows[f], placers) for f in families}
    for f in families:
        print_family(f, rows[f], summaries[f], placers)
    checks = targets(rows, notes)
    for line in checks:
        print(line)
    wall = time.perf_counter() - start
    doc = {"format": "celeritas-bench-quality/1", "seed": args.seed, "quick": args.quick,
           "placers": placers, "notes": notes, "wall_seconds": wall,
           "families": {f: {"title": FAMILIES[f], "summary": summaries[f], "instances": rows[f]}
                        for f in families},
           "checks": checks}
    write_json_atomic(Path(args.out), _json_safe(doc), indent=1)
    print(f"\nwrote {args.out} ({wall:.1f} s)")
    return 0


def _json_safe(x: Any) -> Any:
    """Replace non-finite floats by None and numpy scalars by Python numbers."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


if __name__ == "__main__":
    sys.exit(main())
