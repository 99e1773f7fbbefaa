"""The engine's commands of the ``celeritas`` CLI: place, simulate, info, placers, compare, generate.

They need only :mod:`celeritas_core` (numpy, networkx, scipy). Building their parsers imports
none of it but the numpy-free :mod:`celeritas_core.defaults`, :mod:`~celeritas_core.limits` and
:mod:`~celeritas_core.readwrite.units`: numpy and the engine load when a command runs (lazy imports for
start-up speed: ``celeritas --help``, tests/cli/test_startup.py).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

from celeritas_cli.cluster_args import add_cluster_args, check_cluster_flags, cluster_from_args
from celeritas_core.defaults import (
    ALTERNATIVE_DISPATCH,
    AUTO_SCHEDULE,
    DEFAULT_MEMORY_FRACTION,
    DEFAULT_ORDER_MODE,
    DEFAULT_R,
    DOCUMENTED_DISPATCH,
    ENFORCED_ORDER,
    FREE_ORDER,
    ORDER_MODES,
    SCHEDULES,
)
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_BYTES, MAX_DEVICES
from celeritas_core.readwrite.safe_io import check_input_file, check_outputs, staged_outputs
from celeritas_core.readwrite.units import format_bytes, format_change, format_us

if typing.TYPE_CHECKING:  # numpy and the engine load when a command runs (module docstring)
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.graph import Graph
    from celeritas_core.graphs.placement import Placement
    from celeritas_core.simulation.simulator import DispatchSpread


# ---------------------------------------------------------------------------- reports
def _summary(graph: Graph, cluster: Cluster, placement: Placement, dispatch: str | None = None) -> str:
    """The one-screen report of ``place`` and ``simulate``; ``dispatch`` names the replay's
    dispatch order when it is not the documented one."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    import numpy as np

    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.graphs.levels import ccr

    lines = []
    mem_set = sorted({format_bytes(m) for m in cluster.memory_bytes})
    lines.append(f"graph       {graph.name}: {graph.num_nodes:,} ops, {graph.num_edges:,} edges, "
                 f"CCR {ccr(graph, cluster):.2f}, {format_bytes(graph.total_memory_bytes)}")
    lines.append(f"cluster     {cluster.num_devices} devices ({', '.join(mem_set)}), "
                 f"{_transfer_text(cluster)}")
    nets = _safety_nets(placement.placer)
    params = " ".join(f"{k}={v}" for k, v in placement.params.items() if k not in nets)
    coarse = f", {placement.coarse_nodes:,} coarse nodes" if placement.coarse_nodes is not None else ""
    lines.append(f"placer      {placement.placer} {params}{coarse}, "
                 f"placed in {placement.placement_seconds:.3f} s")
    cut = _cut_by_clock(placement.extra)
    if cut:  # the result then depends on the machine's speed, not on the input alone: say so
        limits = [f"{k}={v}" for k, v in placement.params.items() if k in nets]
        lines.append(f"safety net  the wall clock passed {' '.join(limits) or 'its limit'} and cut optional "
                     f"quality work: {', '.join(cut)} (an idle or faster machine may place better"
                     f"{'; raise ' + ' or '.join(sorted(nets)) + ' to let it finish' if nets else ''})")
    lines.append("")
    lines.append(f"step time (simulated)  {format_us(placement.predicted_step_time_us):>12}")
    lines.append(f"execution order        {placement.order_mode:>12}   {_ORDER_TEXT[placement.order_mode]}")
    if dispatch is not None:
        lines.append(f"dispatch order         {dispatch:>12}   breaks ties between ready ops (documented: "
                     f"{DOCUMENTED_DISPATCH})")
    lines.append(f"single device          {format_us(placement.single_device_time_us):>12}   "
                 f"speed-up {placement.speedup_vs_single:.2f}x")
    lines.append(f"lower bound            {format_us(placement.lower_bound_us):>12}   "
                 f"gap {placement.gap_to_lower_bound * 100:+.1f} %")
    lines.append(f"transfers              {_traffic_text(graph, cluster, placement)}")
    lines.append("")
    busy = placement.device_busy_us if len(placement.device_busy_us) else None
    lines.append(f"{'device':<10} {'ops':>7} {'peak memory':>12} {'sum':>12} {'capacity':>12} {'peak %':>7} "
                 f"{'busy':>12}")
    counts = np.bincount(placement.assignment, minlength=cluster.num_devices)
    for d, name in enumerate(cluster.device_names):
        used = placement.device_peak_memory_bytes[d]
        cap = cluster.memory_bytes[d]
        flag = "  OOM" if name in placement.oom_devices else ""
        busy_text = format_us(busy[d]) if busy is not None else "-"
        lines.append(f"{name:<10} {counts[d]:>7,} {format_bytes(used):>12} "
                     f"{format_bytes(placement.device_memory_bytes[d]):>12} {format_bytes(cap):>12} "
                     f"{used / cap * 100:>6.1f}% {busy_text:>12}{flag}")
    lines.append("")
    if placement.oom:
        lines.append(f"OOM: {', '.join(placement.oom_devices)} peak above their memory "
                     "(best-effort placement)")
    else:
        lines.append("OOM: none")
    lines.append(_memory_bound_line(placement))
    lines.extend(_pipeline_lines(cluster, placement))
    return "\n".join(lines)


def _safety_nets(placer: str) -> set[str]:
    """The placer's wall-clock safety nets (:attr:`~celeritas_core.placers.base.ParamSpec.safety_net`):
    not budgets that shape the result, so the summary names them only when they cut something."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.placers import PLACERS

    spec = PLACERS.get(placer)  # a placement file may name a placer this version does not have
    return {p.name for p in spec.params if p.safety_net} if spec is not None else set()


def _cut_by_clock(extra: dict[str, typing.Any]) -> list[str]:
    """The optional stages a wall-clock safety net cut (``extra.stages.cut_by_clock``, also of the
    link-blind run on a topology, ``extra.blind``), each once, in order."""
    cut: list[str] = []
    for record in (extra, extra.get("blind")):
        stages = record.get("stages") if isinstance(record, dict) else None
        names = stages.get("cut_by_clock") if isinstance(stages, dict) else None
        cut += [str(n) for n in names or () if str(n) not in cut]
    return cut


def _pipeline_lines(cluster: Cluster, placement: Placement) -> list[str]:
    """The pipelined step beside the single-batch one (none for a single-batch placement)."""
    plan = placement.pipeline
    search = placement.extra.get("pipeline_search")
    if plan is None:
        if search:
            tried, ruled_out = search["micro_batches_tried"], search.get("micro_batches_ruled_out") or []
            parts = [f"tried {tried}"] if tried or not ruled_out else []
            parts += [f"ruled out {ruled_out} (their work alone takes longer)"] if ruled_out else []
            return ["", f"pipelined   micro-batches {', '.join(parts)}: one batch per step was fastest"]
        return []
    batch = f" of {plan.batch_size // plan.micro_batches}" if plan.batch_size else ""
    ratio = plan.predicted_step_time_us / plan.single_batch_step_time_us
    step = format_us(plan.predicted_step_time_us)
    lines = ["", f"pipelined step         {step:>12}   {plan.micro_batches} micro-batches{batch}, "
                 f"{plan.schedule}; {ratio:.2f}x the single-batch placement's "
                 f"{format_us(plan.single_batch_step_time_us)}",
             f"{'device':<10} {'warm-up':>7} {'peak memory':>12} {'capacity':>12} {'peak %':>7}"]
    for d, name in enumerate(cluster.device_names):
        used, cap = plan.device_peak_memory_bytes[d], cluster.memory_bytes[d]
        flag = "  OOM" if name in plan.oom_devices else ""
        lines.append(f"{name:<10} {int(plan.warmup[d]):>7} {format_bytes(used):>12} {format_bytes(cap):>12} "
                     f"{used / cap * 100:>6.1f}%{flag}")
    lines.append(f"OOM (pipelined): {', '.join(plan.oom_devices)}" if plan.oom else "OOM (pipelined): none")
    return lines


#: What each execution order means, on the summary's line (docs/simulator.md, "Enforced order").
_ORDER_TEXT = {ENFORCED_ORDER: "each device runs its ops in the order recorded in the placement",
               FREE_ORDER: "the runtime picks among ready ops its own way (predicted: one such way)"}


def _traffic_text(graph: Graph, cluster: Cluster, placement: Placement) -> str:
    """The replay's transfers and bytes, per kind of link on a topology (slowest first)."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.placers.partition import traffic_by_link

    rows = traffic_by_link(graph, cluster, placement.assignment)
    if not rows:
        return "none"
    return ", ".join(f"{count:,}{' over ' + name if name else ''} ({format_bytes(nbytes)})"
                     for name, count, nbytes in rows)


def _transfer_text(cluster: Cluster) -> str:
    """The transfer model in a few words: the flat ``k·bytes + b``, or the topology's links."""
    if cluster.topology is None:
        return f"transfer {cluster.slope_us_per_byte:g} µs/B + {cluster.intercept_us:g} µs"
    return f"topology {cluster.topology.describe()}"


def _memory_bound_line(placement: Placement) -> str:
    """What every placement needs on the fullest device, and whether no placement can fit."""
    need = format_bytes(placement.memory_lower_bound_bytes)
    if placement.cannot_fit:
        return (f"cannot fit: every placement needs at least {need} on its fullest device (what is live at "
                "once, or one co-location group's working set, exceeds these devices); add devices or memory")
    return f"memory bound: every placement needs at least {need} on its fullest device"


# ---------------------------------------------------------------------------- commands
def _placing_inputs(args: argparse.Namespace,
                    outputs: Sequence[str | Path]) -> tuple[Graph, Cluster, list[str | None]]:
    """``place`` and ``compare``: check ``--headroom``, the cluster flags, the graph file and the
    ``outputs`` (so a bad destination fails before any placer runs), then read the graph and the
    cluster. Returns them with the command's input files (which no output may replace)."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import load_graph

    if not 0.0 <= args.headroom < 1.0:  # NaN fails too
        raise CeleritasInputError(f"--headroom: must be a fraction with 0 <= F < 1, got {args.headroom!r}")
    check_cluster_flags(args)
    inputs = [args.graph, args.cluster]
    check_input_file(args.graph)
    check_outputs(outputs, inputs=inputs)
    return load_graph(args.graph), cluster_from_args(args), inputs


def _cmd_place(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.placers import get_placer, place
    from celeritas_core.readwrite.formats import save_placement

    spec = get_placer(args.placer)
    params = _parse_params(args.param)
    for p in spec.params:
        value = getattr(args, p.name.replace("-", "_"), None)
        if value is not None:
            params[p.name] = value
    spec.resolve_params(params)  # types and ranges (docs/algorithms.md), before any file is read
    request = _pipeline_request(args)
    out = args.out if args.out is not None else \
        Path(f"{Path(args.graph).stem}.{args.placer}.placement.json")  # as given: `--out dir/` is refused
    graph, cluster, inputs = _placing_inputs(args, [out])
    if request is None:
        placement = place(graph, cluster, args.placer, params, headroom=args.headroom, order_mode=args.order)
    else:
        # lazy: numpy and the engine load only when a command runs (see the module docstring)
        from celeritas_core.pipeline.plan import place_pipelined

        placement = place_pipelined(graph, cluster, args.placer, params, request=request,
                                    headroom=args.headroom)
    save_placement(placement, out, inputs=inputs, graph=graph)
    print(_summary(graph, cluster, placement))
    print(f"wrote {out}")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.pipeline.plan import with_replayed_plan
    from celeritas_core.placers import evaluate_placement
    from celeritas_core.readwrite.formats import load_graph, placement_from_json, read_json
    from celeritas_core.simulation.simulator import dispatch_spread

    dispatch = _check_dispatch_flag(args.dispatch)
    check_cluster_flags(args)
    graph = load_graph(args.graph)
    doc = read_json(args.placement)  # parsed once: a million-op placement is tens of MB
    fallback = None
    if args.cluster is None and args.devices is None and args.device_memory is None:
        caps = doc.get("device_capacity_bytes") if isinstance(doc, dict) else None
        devices = doc.get("devices") if isinstance(doc, dict) else None
        if (isinstance(caps, list) and isinstance(devices, list) and len(caps) == len(devices) and caps
                and len(caps) <= MAX_DEVICES):
            try:
                fallback = Cluster.build(devices, caps)
            except CeleritasInputError as exc:
                raise exc.with_source(args.placement) from None
    cluster = cluster_from_args(args, fallback)
    try:
        placed = placement_from_json(doc, graph, cluster)
    except CeleritasInputError as exc:
        raise exc.with_source(args.placement) from None
    placed = _with_order_flag(placed, args.order, args.placement)
    every = dispatch == _ALL_DISPATCH
    replayed = DOCUMENTED_DISPATCH if every else dispatch
    try:
        placement = with_replayed_plan(graph, cluster, evaluate_placement(graph, cluster, placed,
                                                                          dispatch=replayed))
    except CeleritasInputError as exc:  # an enforced order that deadlocks against the graph
        raise exc.with_source(args.placement) from None
    print(_summary(graph, cluster, placement, None if replayed == DOCUMENTED_DISPATCH else replayed))
    if every:
        spread = dispatch_spread(graph, cluster, placement.assignment, ALTERNATIVE_DISPATCH,
                                 documented_us=placement.predicted_step_time_us,
                                 device_order=placement.enforced_order)
        print()
        print(_dispatch_table(spread))
    return 0


def _with_order_flag(placed: Placement, flag: str | None, source: str) -> Placement:
    """``simulate --order``: the placement replayed in that mode (None: its own ``order_mode``);
    ``enforced`` needs a recorded ``device_order``."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from dataclasses import replace

    if flag is None or flag == placed.order_mode:
        return placed
    if flag == ENFORCED_ORDER and placed.device_order is None:
        raise CeleritasInputError("--order enforced: the placement records no device_order (written before "
                                  "orders were recorded): place the graph again", source=source)
    return replace(placed, order_mode=flag)


#: ``simulate --dispatch all``: the documented order and every alternative.
_ALL_DISPATCH = "all"


def _check_dispatch_flag(value: str) -> str:
    """``--dispatch``'s value if it names an order or ``all``, else a one-line input error."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.simulation.simulator import check_dispatch

    if value == _ALL_DISPATCH:
        return value
    try:
        return check_dispatch(value)
    except CeleritasInputError:
        raise CeleritasInputError(f"--dispatch: unknown dispatch order {value!r} (known: "
                                  f"{DOCUMENTED_DISPATCH}, fifo, random:N with N a non-negative integer, "
                                  f"{_ALL_DISPATCH})") from None


def _dispatch_table(spread: DispatchSpread) -> str:
    """The step under the documented dispatch order and each other one, and the others' median."""

    def change(step: float) -> str:
        return "" if spread.documented_us == 0 else f"   {format_change(step / spread.documented_us):>6}"

    lines = [f"{'dispatch order':<22} {'step time':>12}",
             f"{DOCUMENTED_DISPATCH + ' (documented)':<22} {format_us(spread.documented_us):>12}"]
    lines += [f"{name:<22} {format_us(step):>12}{change(step)}" for name, step in spread.steps_us]
    lines.append(f"{'median of the others':<22} {format_us(spread.median_us):>12}{change(spread.median_us)}"
                 f"   (min {format_us(spread.min_us)}, max {format_us(spread.max_us)})")
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    import numpy as np

    # lazy: as above
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.levels import ccr
    from celeritas_core.readwrite.formats import load_graph
    from celeritas_core.simulation.bounds import lower_bound_us

    check_cluster_flags(args)  # flags before any file is read, as in every command
    graph = load_graph(args.graph)
    cluster = cluster_from_args(args, Cluster.homogeneous(1, MAX_BYTES))
    zero_in = int(np.count_nonzero(graph.in_degree == 0))
    groups = len(graph.colocation_names)
    print(f"graph          {graph.name}")
    print(f"ops            {graph.num_nodes:,} ({zero_in:,} with in-degree 0)")
    print(f"edges          {graph.num_edges:,}")
    print(f"colocation     {groups:,} groups")
    print(f"total time     {format_us(graph.total_time_us)}")
    print(f"total memory   {format_bytes(graph.total_memory_bytes)}")
    print(f"CCR            {ccr(graph, cluster):.3f}" + ("" if cluster.topology is None else
                                                         " (the topology's flat model: mean over pairs)"))
    if cluster.topology is not None:
        print(f"topology       {cluster.topology.describe()}")
    print(f"lower bound    {format_us(lower_bound_us(graph, cluster))} on {cluster.num_devices} device(s)")
    if graph.meta:
        print(f"meta           {dict(graph.meta)}")
    return 0


def _cmd_placers(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.placers import PLACERS

    for spec in PLACERS.values():
        print(f"{spec.name:<14} {spec.summary}")
        for p in spec.params:
            default = str(p.default).lower() if p.kind is bool else p.default
            print(f"{'':<14}   {p.name}={default}: {p.description}")
    print("\nSet a parameter with --param NAME=VALUE on `place` and `compare` (R, memory_fraction and "
          "refine also have their own flags).")
    return 0


def _parse_params(pairs: Sequence[str] | None) -> dict[str, object]:
    """``NAME=VALUE`` strings into a dict (values stay strings; placers coerce and check them)."""
    params: dict[str, object] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise CeleritasInputError(f"--param: expected NAME=VALUE, got {pair!r}")
        params[name.strip().replace("-", "_")] = value.strip()
    return params


class _Progress:
    """One status line on stderr per placer: redrawn in place on a terminal, appended otherwise."""

    def __init__(self, stream: typing.TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self.start: float | None = None

    def __call__(self, index: int, total: int, name: str) -> None:
        if self.start is None:
            self.start = time.perf_counter()
        done = int(20 * index / total) if total else 20
        bar = "#" * done + "." * (20 - done)
        elapsed = time.perf_counter() - self.start
        text = f"[{bar}] {index}/{total} " + (f"running {name}" if name else "done") + f" ({elapsed:.1f} s)"
        if self.tty:
            self.stream.write("\r" + text.ljust(72) + ("\n" if not name else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


_COMPARE_FILES = ("compare.json", "compare.csv")
_COMPARE_FIGURES = ("gantt.png", "memory.png")


def _cmd_compare(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.placers.compare import (
        DEFAULT_PLACERS,
        compare_placers,
        effective_step,
        parse_placer_list,
    )
    from celeritas_core.readwrite.formats import write_json_atomic, write_text_atomic

    request = _pipeline_request(args)
    placers = parse_placer_list(args.placers) if args.placers is not None else list(DEFAULT_PLACERS)
    place_fn = None
    if request is not None:
        # lazy: numpy and the engine load only when a command runs (see the module docstring)
        from celeritas_core.pipeline.plan import STAGE_PLANNERS, place_pipelined

        place_fn = functools.partial(place_pipelined, request=request)
        if args.placers is None:
            placers += list(STAGE_PLANNERS)
    params = _parse_params(args.param)
    for flag in ("R", "memory_fraction", "refine"):
        if getattr(args, flag) is not None:
            params[flag] = getattr(args, flag)
    if args.out_dir == "":  # Path("") is the working folder: an empty flag must not mean it
        raise CeleritasInputError("--out-dir: expected a folder, got ''")
    out_dir = Path(args.out_dir) if args.out_dir is not None else Path(f"{Path(args.graph).stem}.compare")
    names = _COMPARE_FILES + (() if args.no_figures else _COMPARE_FIGURES)
    graph, cluster, inputs = _placing_inputs(args, [out_dir / name for name in names])
    progress = None if args.quiet else _Progress()
    comparison = compare_placers(graph, cluster, placers, params, progress=progress, headroom=args.headroom,
                                 place_fn=place_fn)
    print(f"graph   {graph.name}: {graph.num_nodes:,} ops, {graph.num_edges:,} edges on "
          f"{cluster.num_devices} devices; single device {format_us(comparison.single_device_time_us)}, "
          f"lower bound {format_us(comparison.lower_bound_us)}")
    print()
    print(comparison.table())
    print()
    best = comparison.best
    step, oom = effective_step(best)
    fits = "" if not oom else " (every placement is OOM: best effort)"
    how = f" ({best.pipeline.micro_batches} micro-batches, {best.pipeline.schedule})" if best.pipeline else ""
    print(f"best: {best.placer}, {format_us(step)} per step{how}{fits}")
    with staged_outputs(inputs=inputs) as outputs:  # all four files land, or none
        write_json_atomic(out_dir / "compare.json", comparison.to_json(), indent=1)
        write_text_atomic(out_dir / "compare.csv", comparison.to_csv())
        if not args.no_figures:
            # lazy: numpy and the engine load only when a command runs (see the module docstring)
            from celeritas_core.plots import gantt_chart, memory_chart

            gantt_chart(graph, cluster, best, out_dir / "gantt.png")
            memory_chart(comparison.placements, cluster, out_dir / "memory.png",
                         title=f"{graph.name}: memory of the best placement ({best.placer})", graph=graph,
                         best=best)
    print("wrote " + ", ".join(str(p) for p in outputs.paths))
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import check_graph_limits, save_graph

    start = time.perf_counter()
    check_outputs([args.out])
    graph = _generated_graph(args)
    try:
        check_graph_limits(graph)
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"the generated graph exceeds the limits (docs/formats.md, "
                                  f"\"Limits\"): {exc.message}") from None
    save_graph(graph, args.out)  # JSON, or the columnar format for a .npz path
    detail = ""
    if args.kind == "layered":
        detail = f", CCR {graph.meta['target_ccr']:g} at 1e-4 µs/B and no latency"
    print(f"wrote {args.out}: {graph.name}, {graph.num_nodes:,} ops, {graph.num_edges:,} edges{detail} "
          f"in {time.perf_counter() - start:.2f} s")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import graph_file_format, load_graph, save_graph

    start = time.perf_counter()
    file_format = graph_file_format(args.out, args.format)
    check_input_file(args.graph)
    check_outputs([args.out], inputs=[args.graph])  # never the input itself, nor a link to it
    graph = load_graph(args.graph)
    out = save_graph(graph, args.out, inputs=[args.graph], file_format=file_format)
    print(f"wrote {out}: {graph.name}, {graph.num_nodes:,} ops, {graph.num_edges:,} edges, {file_format} "
          f"{format_bytes(out.stat().st_size)} (from {format_bytes(Path(args.graph).stat().st_size)}) "
          f"in {time.perf_counter() - start:.2f} s")
    return 0


#: ``celeritas generate`` kinds beyond the paper models -> the options each accepts.
_GENERATE_KINDS: dict[str, tuple[str, ...]] = {
    **{model: ("ops",) for model in ("tensor_holography", "inception_v3", "nmt", "transformer")},
    "layered": ("tasks", "ccr", "mean_predecessors"),
    "inception-modules": ("modules", "batch_size"),
    "towers": ("towers", "batch_size"),
}
_GENERATE_OPTIONS = ("ops", "tasks", "ccr", "mean_predecessors", "modules", "towers", "batch_size")


def _generated_graph(args: argparse.Namespace) -> Graph:
    """Build the graph ``celeritas generate`` asked for; bad values are one-line input errors."""
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.generators import families
    from celeritas_core.generators.synthetic import paper_shaped_graph

    accepted = _GENERATE_KINDS.get(args.kind, ())
    for option in _GENERATE_OPTIONS:
        if getattr(args, option) is not None and option not in accepted:
            flag = "--" + option.replace("_", "-")
            users = [k for k, opts in _GENERATE_KINDS.items() if option in opts]
            raise CeleritasInputError(f"{flag}: applies to {', '.join(users)} only, not {args.kind!r}")
    given = {k: getattr(args, k) for k in accepted if getattr(args, k) is not None}
    try:
        if args.kind == "layered":
            given.setdefault("tasks", 100)
            given.setdefault("ccr", 1.0)
            return families.layered_dag(seed=args.seed, **given)
        if args.kind == "inception-modules":
            return families.inception_graph(seed=args.seed, **given)
        if args.kind == "towers":
            return families.towers_graph(seed=args.seed, **given)
        return paper_shaped_graph(args.kind, seed=args.seed, nodes=given.get("ops"))
    except CeleritasInputError as exc:
        field = exc.message.split(":", 1)[0]
        if field == "nodes":  # the library's keyword for what the command calls --ops
            raise CeleritasInputError("--ops" + exc.message[len(field):]) from None
        if field in (*_GENERATE_OPTIONS, "seed"):  # name the flag, not the keyword argument
            raise CeleritasInputError("--" + field.replace("_", "-") + exc.message[len(field):]) from None
        raise


# ---------------------------------------------------------------------------- parser
_GRAPH_HELP = "graph file: celeritas-graph/1 JSON or the columnar celeritas-graph-columns/1 (.npz)"


def add_commands(sub: typing.Any) -> None:
    """Register the engine's commands on the CLI's subparsers (in the order ``--help`` lists them)."""
    _add_place(sub)
    _add_simulate(sub)
    _add_info(sub)
    _add_placers(sub)
    _add_compare(sub)
    _add_generate(sub)
    _add_convert(sub)


def _add_place(sub: typing.Any) -> None:
    p = sub.add_parser("place", help="place a graph on a cluster and write the placement JSON",
                       description="Place GRAPH (celeritas-graph/1) on a cluster, print a summary "
                                   "(simulated step time, vs single device, vs lower bound, "
                                   "per-device memory, OOM) and write a celeritas-placement/1 file.")
    p.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    add_cluster_args(p)
    p.add_argument("--placer", default="celeritas",
                   help="placer name (default: %(default)s; `celeritas placers` lists them)")
    p.add_argument("--R", dest="R", type=int, default=None, metavar="N",
                   help=f"exploration range of operation fusion (default {DEFAULT_R})")
    p.add_argument("--memory-fraction", dest="memory_fraction", type=float, default=None, metavar="F",
                   help="per-cluster memory cap as a fraction of device memory "
                        f"(default {DEFAULT_MEMORY_FRACTION})")
    p.add_argument("--refine", type=int, choices=(0, 1), default=None,
                   help="celeritas placer: 1 (default) also tries min-cut and multilevel partitions, "
                        "pipeline-stage splits, list schedules and one device, repairs those that "
                        "overflow a device, keeps the fastest replay and improves it by a "
                        "critical-path search; 0 is the paper's Adjusting Placement alone")
    _add_headroom(p)
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="any other placer parameter (repeatable; `celeritas placers` lists them)")
    p.add_argument("--out", metavar="FILE",
                   help="where to write the placement (default: GRAPH_STEM.PLACER.placement.json)")
    p.add_argument("--order", choices=ORDER_MODES, default=DEFAULT_ORDER_MODE,
                   help="execution order the placement asks of the runtime (recorded in the file): "
                        f"{ENFORCED_ORDER} (default): each device runs its ops in the order the simulator "
                        f"ran them, so the predicted step is the one that runs; {FREE_ORDER}: the runtime "
                        "picks among ready ops (docs/simulator.md, \"Enforced order\")")
    _add_pipeline_flags(p)
    p.set_defaults(func=_cmd_place)


def _add_pipeline_flags(parser: argparse.ArgumentParser) -> None:
    """``--micro-batches`` and what goes with it, on ``place`` and ``compare`` (docs/pipelining.md)."""
    parser.add_argument("--micro-batches", dest="micro_batches", metavar="M|auto", default=None,
                        help="place a training step as a pipelined step of M micro-batches (a divisor of "
                             "the batch; auto: the fastest that fits of every divisor up to 4 per device, "
                             "or one batch per step), gradients accumulated and the optimizer applied "
                             "once (docs/pipelining.md); default: one batch per step")
    parser.add_argument("--schedule", choices=(*SCHEDULES, AUTO_SCHEDULE), default=AUTO_SCHEDULE,
                        help="pipeline schedule with --micro-batches: gpipe (all forwards, then all "
                             "backwards), 1f1b (one forward, one backward: fewer activations in flight) "
                             "or auto (default: the faster that fits)")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=None, metavar="B",
                        help="the batch the graph's costs were measured at (default: the graph's "
                             "meta batch_size)")
    parser.add_argument("--op-floor-us", dest="op_floor_us", type=float, default=None, metavar="US",
                        help="per-op floor in µs that a micro-batch's op time never goes below (kernel "
                             "launch and dispatch; default: the graph's meta op_floor_us, else 5)")


def _pipeline_request(args: argparse.Namespace) -> typing.Any:
    """The :class:`~celeritas_core.pipeline.plan.PipelineRequest` of the flags, None without
    ``--micro-batches`` (checked before any file is read)."""
    if args.micro_batches is None:
        for flag in ("batch_size", "op_floor_us"):
            if getattr(args, flag) is not None:
                raise CeleritasInputError(f"--{flag.replace('_', '-')} needs --micro-batches")
        return None
    # lazy: numpy and the engine load only when a command runs (see the module docstring)
    from celeritas_core.pipeline.plan import PipelineRequest

    return PipelineRequest.parse(args.micro_batches, args.schedule, batch_size=args.batch_size,
                                 op_floor_us=args.op_floor_us)


def _add_headroom(parser: argparse.ArgumentParser) -> None:
    """``--headroom`` of ``place`` and ``compare`` (checked by :func:`_placing_inputs`)."""
    parser.add_argument("--headroom", type=float, default=0.0, metavar="F",
                        help="fraction of each device's memory the placers keep free, 0 <= F < 1 "
                             "(default 0): memory estimates err; OOM is still judged against the full "
                             "memory")


def _add_simulate(sub: typing.Any) -> None:
    s = sub.add_parser("simulate", help="replay a placement in the simulator",
                       description="Replay PLACEMENT of GRAPH in the event-driven simulator "
                                   "(docs/simulator.md) and print the summary. Without cluster "
                                   "options, the placement's own devices and capacities are used "
                                   "with the default transfer model.")
    s.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    s.add_argument("placement", metavar="PLACEMENT", help="placement JSON (celeritas-placement/1)")
    add_cluster_args(s)
    s.add_argument("--dispatch", default=DOCUMENTED_DISPATCH, metavar="NAME",
                   help="the order that breaks ties between ready ops (docs/simulator.md, \"Dispatch "
                        f"orders\"): {DOCUMENTED_DISPATCH} (default, the documented one), fifo or "
                        f"random:N (N >= 0); {_ALL_DISPATCH} prints the summary under "
                        f"{DOCUMENTED_DISPATCH}, then the step under it and under each of "
                        f"{', '.join(ALTERNATIVE_DISPATCH)}")
    s.add_argument("--order", choices=ORDER_MODES, default=None,
                   help=f"replay with the placement's recorded order {ENFORCED_ORDER} (each device runs its "
                        f"ops in that order) or {FREE_ORDER} (ready ops dispatched by --dispatch); default: "
                        "the placement's own order_mode (enforced when it records a device_order)")
    s.set_defaults(func=_cmd_simulate)


def _add_info(sub: typing.Any) -> None:
    i = sub.add_parser("info", help="print a graph's size, CCR, totals and lower bound",
                       description="Print statistics of GRAPH; CCR uses the cluster's transfer model "
                                   "(defaults when no cluster is given).")
    i.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    add_cluster_args(i)
    i.set_defaults(func=_cmd_info)


def _add_placers(sub: typing.Any) -> None:
    pl = sub.add_parser("placers", help="list the placers and their parameters",
                        description="List every registered placer with its parameters and defaults.")
    pl.set_defaults(func=_cmd_placers)


def _add_compare(sub: typing.Any) -> None:
    c = sub.add_parser("compare", help="run several placers on one graph and rank them",
                       description="Run placers on GRAPH, replay each in the simulator and print a "
                                   "table (step time, speed-up vs one device, gap to the lower bound, "
                                   "placement seconds, peak memory, OOM, and 'other orders': the "
                                   "median step under the other dispatch orders relative to the "
                                   "step time, docs/simulator.md). Writes compare.json, "
                                   "compare.csv, gantt.png (the best placement) and memory.png "
                                   "(every placer) to --out-dir. The best placement is the fastest "
                                   "one without OOM.")
    c.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    add_cluster_args(c)
    c.add_argument("--placers", metavar="A,B,...",
                   help="comma-separated placer names (default: single, metis, m-topo, m-etf, m-sct, "
                        "heft, order-place, celeritas; `optimal` only on small graphs)")
    c.add_argument("--R", dest="R", type=int, default=None, metavar="N",
                   help=f"exploration range for the fusion placers (default {DEFAULT_R})")
    c.add_argument("--memory-fraction", dest="memory_fraction", type=float, default=None, metavar="F",
                   help=f"per-cluster memory cap of the fusion placers (default {DEFAULT_MEMORY_FRACTION})")
    c.add_argument("--refine", type=int, choices=(0, 1), default=None,
                   help="celeritas placer's candidates and search beyond the paper (default 1)")
    _add_headroom(c)
    c.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a placer parameter, passed to every placer that accepts it (repeatable; "
                        "`celeritas placers` lists them), e.g. --param threshold=0.4")
    c.add_argument("--out-dir", metavar="DIR", help="output folder (default: GRAPH_STEM.compare)")
    c.add_argument("--no-figures", action="store_true", help="skip gantt.png and memory.png")
    c.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    _add_pipeline_flags(c)
    c.set_defaults(func=_cmd_compare)


def _add_generate(sub: typing.Any) -> None:
    g = sub.add_parser("generate", help="write a seeded synthetic graph (training step, task DAG, inference)",
                       description="Write a seeded synthetic graph (celeritas-graph/1 JSON, or the columnar "
                                   "celeritas-graph-columns/1 for a .npz --out): a training step "
                                   "shaped like one of the paper's models (node count and CCR of its "
                                   "Table 2), a random layered task DAG in the style of the STG "
                                   "scheduling benchmarks (`layered`: integer task times in [1, 100] µs, "
                                   "edge bytes scaled to an exact CCR at 1e-4 µs/byte and no latency), "
                                   "an inference graph of Inception-like modules (`inception-modules`) "
                                   "or a multi-tower inference graph (`towers`). `--ops N` sizes a "
                                   "training step to N ops (e.g. `transformer --ops 1000000`). "
                                   "Generators: "
                                   "celeritas_core/generators/synthetic.py and "
                                   "celeritas_core/generators/families.py.")
    g.add_argument("kind", metavar="KIND",
                   choices=list(_GENERATE_KINDS),
                   help="tensor_holography, inception_v3, nmt, transformer (paper-shaped training "
                        "steps), layered, inception-modules or towers")
    g.add_argument("--seed", type=int, default=0, help="random seed, >= 0 (default: %(default)s)")
    g.add_argument("--ops", type=int, metavar="N",
                   help="paper-shaped training steps: build N ops instead of the paper's count (more "
                        "or fewer layers of the same shape and CCR), up to 10,000,000 (a JSON file "
                        "holds about 6 million: use a .npz path beyond)")
    g.add_argument("--tasks", type=int, metavar="N",
                   help="layered: number of tasks, 2..2,000,000 (default 100)")
    g.add_argument("--ccr", type=float, metavar="X",
                   help="layered: communication-to-computation ratio, >= 0 (default 1)")
    g.add_argument("--mean-predecessors", dest="mean_predecessors", type=float, metavar="X",
                   help="layered: mean number of predecessors of a non-entry task, 1..1000 (default 3)")
    g.add_argument("--modules", type=int, metavar="N",
                   help="inception-modules: number of modules, 1..120 (default 4)")
    g.add_argument("--towers", type=int, metavar="K",
                   help="towers: number of towers, 1..100,000 (default 4)")
    g.add_argument("--batch-size", dest="batch_size", type=int, metavar="B",
                   help="inception-modules and towers: batch size, 1..1,000,000 (default 32 and 256)")
    g.add_argument("--out", required=True, metavar="FILE",
                   help="output graph: the columnar celeritas-graph-columns/1 when FILE ends in .npz, "
                        "celeritas-graph/1 JSON otherwise")
    g.set_defaults(func=_cmd_generate)


def _add_convert(sub: typing.Any) -> None:
    c = sub.add_parser("convert", help="convert a graph between JSON and the columnar .npz format",
                       description="Read GRAPH (celeritas-graph/1 JSON or celeritas-graph-columns/1 .npz, "
                                   "told apart by content), validate it and write it to OUT: the columnar "
                                   "format when OUT ends in .npz, JSON otherwise, or as --format says. "
                                   "Prints one line (ops, edges, sizes, seconds). OUT may not be GRAPH "
                                   "itself; on bad input nothing is written (docs/formats.md).")
    c.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    c.add_argument("out", metavar="OUT", help="the converted graph file")
    c.add_argument("--format", choices=("json", "npz"), default=None,
                   help="write this format whatever OUT's extension (default: by extension, .npz is npz)")
    c.set_defaults(func=_cmd_convert)
