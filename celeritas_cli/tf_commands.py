"""The TensorFlow commands of the ``celeritas`` CLI: models, graph, profile, fit, remeasure,
validate, calibrate-comm.

This module only defines arguments; :mod:`celeritas_tf` (and so TensorFlow) is imported when a
command runs, so ``celeritas --help`` and the engine's commands start without it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from celeritas_cli import flags
from celeritas_cli.cluster_args import TOPOLOGY_HELP, add_cluster_args, check_cluster_flags, cluster_from_args
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_DEVICES
from celeritas_core.readwrite.safe_io import check_outputs, staged_outputs
from celeritas_core.readwrite.units import format_bytes, format_us


def _model(args: argparse.Namespace) -> Any:
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_tf.models import get_model

    return get_model(args.model, paper=args.paper, **flags.model_knobs(args.set))


def _check_batch(batch: int) -> int:
    if batch <= 0:
        raise CeleritasInputError(f"--batch: must be a positive integer, got {batch}")
    return flags.batch(batch, "--batch")


def _model_input(args: argparse.Namespace) -> str | None:
    """The model argument when it names a file (a saved ``.keras`` model): an input not to overwrite."""
    return args.model if args.model and os.path.exists(args.model) else None


def cmd_models(args: argparse.Namespace) -> int:
    """List the zoo: name, description, paper configuration and batch, small configuration."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_tf.models import ZOO

    for entry in ZOO.values():
        paper = ", ".join(f"{k}={v}" for k, v in entry.paper_config.items()) or "-"
        small = ", ".join(f"{k}={v}" for k, v in entry.small_config.items())
        print(f"{entry.name:<18} {entry.description}")
        print(f"{'':<18}   paper: {paper}, batch {entry.paper_batch_size}")
        print(f"{'':<18}   small (default): {small}")
    print("\nAlso: MODULE:FUNCTION returning (model, loss, input_signature[, label_signature]) or a "
          "ModelSpec, or a saved .keras file. Knobs: --set KNOB=VALUE; --paper for the paper's sizes.")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    """Build the training step and write it as a celeritas-graph/1 with the chosen costs."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import save_graph
    from celeritas_tf.extract import graph_from_step, view_aliases
    from celeritas_tf.step import build_training_step

    batch = _check_batch(args.batch)
    flags.count(args.steps, "--steps")
    source = args.costs
    if source != "static" and source != "profile" and not source.startswith("analytical"):
        raise CeleritasInputError(f"--costs: expected static, profile or analytical:DEVICE, got {source!r}")
    inputs = [_model_input(args)]
    check_outputs([args.out], inputs=inputs)
    model = _model(args)
    step = build_training_step(model, batch)
    costs = None
    aliases = view_aliases(step)
    if source == "profile":
        # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
        from celeritas_tf.profile import trace_costs, trace_step

        trace = trace_step(step, traced_steps=args.steps, progress=flags.say)
        costs, aliases = trace_costs(trace), trace.aliases
    elif source.startswith("analytical"):
        # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
        from celeritas_tf.analytical import analytical_costs, parse_cost_source

        costs = analytical_costs(step.step_graph_def(), parse_cost_source(source))
    graph = graph_from_step(step, costs, meta={"costs": source}, aliases=aliases)
    save_graph(graph, args.out, inputs=inputs)
    print(f"wrote {args.out}: {graph.name} at batch {batch}, {graph.num_nodes:,} ops, {graph.num_edges:,} "
          f"edges, {len(graph.colocation_names):,} co-location groups, costs: {source}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Trace the step at several small batch sizes on one device; write celeritas-profile/1."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import write_json_atomic
    from celeritas_tf.evaluation import ProfilePlan, profile_document, profile_small_batches

    sizes = flags.batch_list(args.batch_sizes, "--batch-sizes")
    plan = _profile_plan(args)
    inputs = [_model_input(args)]
    check_outputs([args.out], inputs=inputs)
    model = _model(args)
    traces = profile_small_batches(model, sizes, plan=ProfilePlan(**plan), progress=flags.say)
    write_json_atomic(args.out, profile_document(model, traces), inputs=inputs)
    print(f"wrote {args.out}: {model.name}, batch sizes {[t.batch_size for t in traces]}, "
          f"{len(traces[0].time_us):,} traced ops, traced steps {[len(t.step_seconds) for t in traces]}")
    return 0


def _profile_plan(args: argparse.Namespace) -> dict[str, Any]:
    """The profile's plan (:class:`celeritas_tf.evaluation.ProfilePlan` fields) from its flags,
    checked before TensorFlow loads."""
    steps = flags.count(args.steps, "--steps")
    plan: dict[str, Any] = {"traced_steps": steps}
    if args.noise_target is not None:
        plan["noise_target"] = flags.number(args.noise_target, "--noise-target", low=1e-6, high=1.0)
        if args.max_steps is None:
            raise CeleritasInputError("--noise-target needs --max-steps (the most traced steps per batch)")
    if args.max_steps is not None:
        plan["max_traced_steps"] = flags.count(args.max_steps, "--max-steps", low=steps)
    if args.span_target is not None:
        plan["span_target"] = flags.batch(args.span_target, "--span-target")
        if args.device_memory is None:
            raise CeleritasInputError("--span-target needs --device-memory (one device's memory, e.g. 16GiB)")
        plan["device_bytes"] = float(flags.device_memory(args.device_memory))
    elif args.device_memory is not None:
        raise CeleritasInputError("--device-memory is used only with --span-target (the batch to predict)")
    return plan


def cmd_fit(args: argparse.Namespace) -> int:
    """Fit per-op lines of time and memory against batch size; write celeritas-fits/1."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    import numpy as np

    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import (
        check_predicted_costs,
        fits_to_json,
        read_json,
        write_json_atomic,
    )

    batch = _check_batch(args.batch) if args.batch is not None else None
    inputs = [args.profiles]
    check_outputs([args.out], inputs=inputs)
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_tf.evaluation import fits_from_profile

    # fits_from_profile checks the document strictly first (check_profile_document)
    fits = fits_from_profile(read_json(args.profiles), args.profiles, time_model=args.time_model)
    out_doc = fits_to_json(fits)
    predicted = None
    if batch is not None:  # computed before anything is written: a bad --batch writes nothing
        predicted = fits.predict(batch)
        check_predicted_costs(fits.names, *predicted, what=f"--batch {batch}")
    write_json_atomic(args.out, out_doc, inputs=inputs)
    mem_r2 = float(np.nanmedian(fits.memory_r2)) if np.isfinite(fits.memory_r2).any() else float("nan")
    time_r2 = float(np.nanmedian(fits.time_r2)) if np.isfinite(fits.time_r2).any() else float("nan")
    print(f"wrote {args.out}: {len(fits.names):,} ops fitted on batch sizes {list(fits.batch_sizes)}; "
          f"median R² memory {mem_r2:.3f}, time {time_r2:.3f}")
    if fits.time_models is not None:
        print("time models chosen by leave-one-out error: " + ", ".join(
            f"{kind} {count:,}" for kind, count in fits.time_models.counts().items()))
    if not fits.op_keys:
        print(f"note: {args.profiles} records no op keys (written before op identity was recorded): "
              f"re-measurement will pair its fits with ops by name only")
    if predicted is not None:
        t, m = predicted
        print(f"predicted at batch {batch}: total time {format_us(float(t.sum()))}, "
              f"total memory {format_bytes(float(m.sum()))}")
    return 0


def cmd_remeasure(args: argparse.Namespace) -> int:
    """Standard Evaluation step 2: sequential placement of the large batch, re-measured per op."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import (
        check_predicted_costs,
        fits_from_json,
        read_json,
        save_graph,
        write_json_atomic,
    )

    batch = _check_batch(args.batch)
    flags.count(args.steps, "--steps")
    check_cluster_flags(args)
    inputs = [args.fits, args.cluster, _model_input(args)]
    check_outputs([args.out, args.estimated_out, args.accuracy_out, args.cdf_out], inputs=inputs)
    fits = fits_from_json(read_json(args.fits), source=args.fits)
    check_predicted_costs(fits.names, *fits.predict(batch), what=f"{args.fits}: at --batch {batch}")
    cluster = cluster_from_args(args)
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_tf.evaluation import accuracy_document, remeasure

    model = _model(args)
    result = remeasure(model, batch, fits, cluster, order=args.order, traced_steps=args.steps,
                       progress=flags.say, source=args.fits)
    note = result.identity_note()
    if note:
        print(f"note: {args.fits}: {note}")
    memory, timing = result.accuracy()
    peaks = result.peaks(cluster)
    with staged_outputs(inputs=inputs) as outputs:  # every output lands, or none
        save_graph(result.measured, args.out)
        if args.estimated_out:
            save_graph(result.estimated, args.estimated_out)
        if args.accuracy_out:
            write_json_atomic(args.accuracy_out, accuracy_document(model.name, batch, memory, timing, peaks),
                              indent=1)
        if args.cdf_out:
            # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
            from celeritas_core.plots import deviation_cdf_chart

            deviation_cdf_chart([(model.name, memory, timing)], args.cdf_out,
                                title=f"{model.name}: estimated (batch {batch}) vs re-measured")
    written = outputs.paths
    print(f"estimation accuracy at batch {batch}: mean memory deviation {memory.mean * 100:.2f} % over "
          f"{len(memory.names):,} ops, mean time deviation {timing.mean * 100:.2f} % over "
          f"{len(timing.names):,} ops")

    print("peak memory per device, predicted / measured: " + ", ".join(
        f"{format_bytes(a)} / {format_bytes(b)}"
        for a, b in zip(peaks["predicted_bytes"], peaks["measured_bytes"], strict=True)))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Run a placement in one or both execution-order modes, interleaved in blocks (warm-up steps,
    then timed steps); write celeritas-validation/1 with each mode's figures against the prediction."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import (
        PLACEMENT_FORMAT,
        placement_op_keys_digest,
        read_json,
        write_json_atomic,
    )
    from celeritas_tf.evaluation import (
        peak_metrics,
        placement_order,
        predicted_peaks,
        predicted_step_us,
        validate_interleaved,
    )
    from celeritas_tf.microbatch import placement_pipeline_run

    batch = _check_batch(args.batch)
    if args.devices is not None:
        flags.count(args.devices, "--devices", high=MAX_DEVICES)
    flags.count(args.warmup, "--warmup", low=0)
    flags.count(args.steps, "--steps")
    flags.count(args.blocks, "--blocks")
    inputs = [args.placement, _model_input(args)]
    check_outputs([args.out], inputs=inputs)
    doc = read_json(args.placement)
    if not isinstance(doc, dict) or doc.get("format") != PLACEMENT_FORMAT:
        raise CeleritasInputError(f"not a {PLACEMENT_FORMAT} document (field 'format')",
                                  source=args.placement)
    assignment = doc.get("assignment")
    if not isinstance(assignment, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in assignment.values()):
        raise CeleritasInputError("field 'assignment' must map op names to device indices",
                                  source=args.placement)
    listed = doc.get("devices")
    if listed is not None and (not isinstance(listed, list) or len(listed) > MAX_DEVICES):
        raise CeleritasInputError(f"field 'devices' must be a list of at most {MAX_DEVICES:,} device names",
                                  source=args.placement)
    order = placement_order(doc, args.placement)
    modes = order.modes(args.order, args.placement)
    model = _model(args)
    devices = args.devices or len(listed or []) or 1
    digest = placement_op_keys_digest(doc, args.placement)
    run = placement_pipeline_run(doc, args.placement)
    result = validate_interleaved(
        model, batch, {"placement": assignment}, devices, warmup_steps=args.warmup, steps=args.steps,
        blocks=args.blocks, progress=flags.say, sources={"placement": args.placement},
        digests={"placement": digest}, orders={"placement": order}, modes={"placement": modes},
        pipelines={"placement": run} if run is not None else None)["placement"]
    predicted, predicted_peak = predicted_step_us(doc), predicted_peaks(doc)
    if run is not None:  # the pipelined step's replay is the prediction
        predicted, predicted_peak = predicted_step_us(doc["pipeline"]), predicted_peaks(doc["pipeline"])
    extra = {"placer": doc.get("placer"), "placement": str(args.placement),
             "placement_order_mode": order.order_mode, "blocks": min(args.blocks, args.steps),
             "predicted_peak_bytes": predicted_peak,
             **({"micro_batches": run.micro_batches, "schedule": doc["pipeline"].get("schedule")}
                if run is not None else {})}
    write_json_atomic(args.out, result.to_json(extra, predicted_us=predicted), indent=1, inputs=inputs)
    shown = "unknown" if predicted is None else f"{predicted / 1e3:.3f} ms"
    blocks = min(args.blocks, args.steps)
    print(f"{model.name} batch {batch} on {devices} devices ({doc.get('placer')}): {args.steps} timed steps "
          f"per mode after {args.warmup} warm-up in each of {blocks} interleaved blocks; "
          f"predicted step ({_predicted_what(doc, run)}) {shown}")
    for mode, times in result.modes.items():
        ratio = "" if predicted is None else f"; measured/predicted {times.median_s * 1e6 / predicted:.2f}"
        own = " (the placement's mode)" if mode == order.order_mode else ""
        followed = ("" if times.order_agreement is None
                    else f"; {times.order_agreement * 100:.1f} % of ops ran in the recorded order")
        print(f"  {mode} order{own}: median {times.median_s * 1e3:.3f} ms, mean {times.mean_s * 1e3:.3f} ms, "
              f"p90 {times.p90_s * 1e3:.3f} ms{ratio}{followed}")
    peaks = peak_metrics(result.measured_peak_bytes, predicted_peak)
    if "measured_peak_memory_bytes" in peaks:
        measured = format_bytes(peaks["measured_peak_memory_bytes"])
        line = f"peak memory of the fullest device ({result.order_mode} order): measured {measured}"
        if "predicted_peak_memory_bytes" in peaks:
            line += (f", predicted {format_bytes(peaks['predicted_peak_memory_bytes'])} "
                     f"({peaks.get('peak_memory_relative_error', float('nan')) * 100:+.1f} %)")
        print(line)
    print(f"wrote {args.out}")
    return 0


def _predicted_what(doc: dict[str, Any], run: Any) -> str:
    """What ``validate`` compares with: the placement's simulated step, or its pipelined replay."""
    if run is None:
        return "the placement's simulated step"
    return (f"the placement's pipelined step of {run.micro_batches} micro-batches, "
            f"{doc['pipeline'].get('schedule')}, replayed")


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure transfers between two devices, fit t = k·bytes + b, write a celeritas-cluster/1 with
    the fit, or with the default model (and a warning) when the fit measured nothing useful. With
    ``--topology``, measure each class of pair and write a celeritas-cluster/2
    (:func:`_calibrate_topology`)."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.readwrite.formats import save_cluster
    from celeritas_tf.calibrate import (
        calibrate_comm,
        calibrated_cluster,
        calibration_record,
        choose_transfer_model,
    )

    preset = _calibration_preset(args)
    devices = preset.num_devices if preset is not None else (4 if args.devices is None else args.devices)
    flags.devices(devices)
    memory = flags.device_memory(args.device_memory)
    flags.count(args.repeats, "--repeats")
    sizes = None
    if args.sizes is not None:
        sizes = [flags.size(s, "--sizes", high=flags.MAX_CALIBRATION_BYTES)
                 for s in args.sizes.split(",") if s.strip()]
        if not sizes:  # `--sizes ''` or `--sizes ,` is not "the default sizes"
            raise CeleritasInputError(f"--sizes: expected comma-separated sizes, got {args.sizes!r}")
    check_outputs([args.out])
    kwargs: dict[str, Any] = {"repeats": args.repeats, "progress": flags.say}
    if sizes:
        kwargs["sizes"] = sizes
    if preset is not None:
        return _calibrate_topology(args, preset, memory, kwargs)
    calibration = calibrate_comm(2, **kwargs)
    choice = choose_transfer_model(calibration)
    cluster = calibrated_cluster(calibration, devices, memory)
    save_cluster(cluster, args.out, source=choice.source, calibration=calibration_record(calibration, choice))
    print(f"fit: t = {calibration.slope_us_per_byte:.4g} µs/B · bytes + {calibration.intercept_us:.4g} µs, "
          f"R² {calibration.r2:.3f} over {len(calibration.samples)} sizes")
    if choice.reason is not None:
        print(f"celeritas: warning: {choice.reason}: the cluster gets the default transfer model instead",
              file=sys.stderr)
    print(f"transfer model used: {choice.describe()}")
    print(f"wrote {args.out}: {devices} devices of {args.device_memory}")
    return 0


def _calibration_preset(args: argparse.Namespace) -> Any:
    """``calibrate-comm --topology``'s preset (None without), checked against ``--devices`` and the
    logical devices TensorFlow can configure."""
    if args.topology is None:
        return None
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.graphs.topology import parse_preset
    from celeritas_tf.evaluation import MAX_LOGICAL_DEVICES

    preset = parse_preset(args.topology, "--topology")
    if args.devices is not None and args.devices != preset.num_devices:
        raise CeleritasInputError(f"--devices {args.devices} but --topology {args.topology} has "
                                  f"{preset.num_devices} devices")
    if preset.num_devices > MAX_LOGICAL_DEVICES:
        raise CeleritasInputError(f"--topology: {preset.num_devices} devices to measure on, at most "
                                  f"{MAX_LOGICAL_DEVICES} logical devices")
    return preset


def _calibrate_topology(args: argparse.Namespace, preset: Any, memory: float, kwargs: dict[str, Any]) -> int:
    """Measure each class of pair of the preset's topology, write the cluster with the links that
    measured a transfer replaced by their fits (the others keep the preset's figures, with a warning)."""
    # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.readwrite.formats import save_cluster
    from celeritas_tf.calibrate import calibrate_topology

    base = Cluster.homogeneous(preset.num_devices, memory)
    topology, results = calibrate_topology(preset.topology(base.device_names), **kwargs)
    cluster = base.with_topology(topology)
    records = {r.link.name: r.record(cluster.device_names) for r in results}
    save_cluster(cluster, args.out, link_records=records)
    for r in results:
        if r.calibration is not None:
            print(f"fit {r.link.name}: t = {r.calibration.slope_us_per_byte:.4g} µs/B · bytes + "
                  f"{r.calibration.intercept_us:.4g} µs, R² {r.calibration.r2:.3f} over "
                  f"{len(r.calibration.samples)} sizes")
        if r.source != "calibrated" and r.calibration is not None:
            print(f"celeritas: warning: link {r.link.name}: {r.reason}: it keeps the preset's figures",
                  file=sys.stderr)
        print(f"link used: {r.describe()}")
    print(f"wrote {args.out}: {topology.describe()}, {preset.num_devices} devices of {args.device_memory}")
    return 0


def add_commands(sub: Any) -> None:
    """Register the TensorFlow commands on the CLI's subparsers."""
    m = sub.add_parser("models", help="list the model zoo (TensorFlow)",
                       description="List the zoo's models with the paper's and the small configurations.")
    m.set_defaults(func=cmd_models)
    _add_graph(sub)
    _add_profile_and_fit(sub)
    _add_remeasure(sub)
    _add_validate(sub)
    _add_calibrate(sub)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="zoo name (`celeritas models`), MODULE:FUNCTION, or a .keras file")
    p.add_argument("--paper", action="store_true", help="the paper's model configuration")
    p.add_argument("--set", action="append", metavar="KNOB=VALUE", help="a model size knob (repeatable)")


def _add_graph(sub: Any) -> None:
    g = sub.add_parser("graph", help="extract a model's training step as a graph (TensorFlow)",
                       description="Build MODEL's training step (forward, backward, Adam) at --batch and "
                                   "write it as celeritas-graph/1: one node per op, tensor bytes from static "
                                   "shapes, co-location from TensorFlow's constraints. Costs: static "
                                   "(time 0, memory = output bytes), profile (one traced run on one "
                                   "device) or analytical:DEVICE (FLOPs and bytes against a device "
                                   "spec, e.g. analytical:v100; nothing runs).")
    _model_args(g)
    g.add_argument("--batch", type=int, required=True, help="batch size")
    g.add_argument("--costs", default="static", help="static, profile or analytical:DEVICE (default: static)")
    g.add_argument("--steps", type=int, default=3, help="traced steps for --costs profile (default 3)")
    g.add_argument("--out", required=True, help="graph JSON to write")
    g.set_defaults(func=cmd_graph)


def _add_profile_and_fit(sub: Any) -> None:
    p = sub.add_parser("profile", help="Standard Evaluation 1: trace small batches on one device",
                       description="Run MODEL's step with full tracing at each small batch size on one "
                                   "device and write per-op time (µs) and memory (bytes) as "
                                   "celeritas-profile/1. By default as the paper: --steps traced steps "
                                   "per batch size. --max-steps traces more while the per-op times are "
                                   "noisy; --span-target also profiles a batch closer to the target "
                                   "(docs/tensorflow.md, \"Standard Evaluation\").")
    _model_args(p)
    p.add_argument("--batch-sizes", required=True, help="comma-separated small batch sizes, e.g. 2,4,8")
    p.add_argument("--steps", type=int, default=3, help="traced steps per batch size (median time)")
    p.add_argument("--max-steps", type=int,
                   help="trace more steps, up to this many per batch size, while the time-weighted "
                        "standard error of the per-op median times is above --noise-target "
                        "(default: no extra steps)")
    p.add_argument("--noise-target", type=float,
                   help="with --max-steps: the standard error to reach, a fraction (default 0.05)")
    p.add_argument("--span-target", type=int, metavar="BATCH",
                   help="the batch to predict: also profile the largest doubling of the largest batch "
                        "up to half of it whose predicted one-device peak fits --device-memory")
    p.add_argument("--device-memory", help="with --span-target: one device's memory, e.g. 16GiB")
    p.add_argument("--out", required=True, help="profile JSON to write")
    p.set_defaults(func=cmd_profile)

    f = sub.add_parser("fit", help="Standard Evaluation 1: per-op fits of time and memory",
                       description="Fit, per op, time and memory as linear functions of batch size from "
                                   "a profile (the paper's method); write celeritas-fits/1. With "
                                   "--time-model choose, each op's time model is linear, linear with a "
                                   "floor or a power law, whichever has the smallest leave-one-out error "
                                   "on the profiled batches (three or more); written as celeritas-fits/2.")
    f.add_argument("profiles", metavar="PROFILE", help="celeritas-profile/1 file")
    f.add_argument("--time-model", choices=("linear", "choose"), default="linear",
                   help="linear: the paper's line (default); choose: per op by leave-one-out error")
    f.add_argument("--batch", type=int, help="also print the predicted totals at this batch size")
    f.add_argument("--out", required=True, help="fits JSON to write")
    f.set_defaults(func=cmd_fit)


def _add_remeasure(sub: Any) -> None:
    r = sub.add_parser("remeasure", help="Standard Evaluation 2: sequential placement, re-measured",
                       description="Place MODEL's step at the large --batch (costs predicted by --fits) "
                                   "sequentially in CPD-TOPO or DFS order, filling each device to its "
                                   "memory, run it across the devices with full tracing and write the "
                                   "re-measured graph; print the estimation accuracy.")
    _model_args(r)
    r.add_argument("--batch", type=int, required=True, help="the large batch size")
    r.add_argument("--fits", required=True, help="celeritas-fits/1 or /2 file from `celeritas fit`")
    add_cluster_args(r)
    r.add_argument("--order", choices=("cpd", "dfs"), default="cpd", help="placement order (default cpd)")
    r.add_argument("--steps", type=int, default=3, help="traced steps (median time)")
    r.add_argument("--out", required=True, help="measured graph JSON to write")
    r.add_argument("--estimated-out", help="also write the graph with predicted costs")
    r.add_argument("--accuracy-out", help="also write the per-op deviation summary (celeritas-accuracy/1)")
    r.add_argument("--cdf-out", help="also write the CDF plot of per-op deviations (PNG)")
    r.set_defaults(func=cmd_remeasure)


def _add_validate(sub: Any) -> None:
    v = sub.add_parser(
        "validate", help="run a placement, its recorded order enforced and free: warm-up, then timed steps",
        description="Apply PLACEMENT to MODEL's step at --batch and time it in each execution-order mode "
                    "--order asks for: 'enforced' (each device runs its ops in the placement's recorded "
                    "device_order, through control dependencies), 'free' (TensorFlow's own dispatch), "
                    "interleaved in --blocks blocks, each mode in a fresh session per block with --warmup "
                    "untimed steps. Writes, per mode, mean, median, p90 and every step time, the predicted "
                    "step (the placement's predicted_step_time_us) and the ratio measured median / "
                    "predicted (celeritas-validation/1); the top-level figures are those of the placement's "
                    "order_mode when timed, else of the mode timed.")
    _model_args(v)
    v.add_argument("placement", metavar="PLACEMENT", help="celeritas-placement/1 file")
    v.add_argument("--batch", type=int, required=True, help="batch size the placement was made for")
    v.add_argument("--devices", type=int, help="devices to run on (default: the placement's)")
    v.add_argument("--order", choices=("enforced", "free", "both"), default=None,
                   help="execution order(s) to time: the placement's device_order enforced, TensorFlow's "
                        "free dispatch, or both interleaved (default: both when the placement records an "
                        "order, else free)")
    v.add_argument("--warmup", type=int, default=5,
                   help="untimed warm-up steps per mode and block (default 5)")
    v.add_argument("--steps", type=int, default=50, help="timed steps per mode (default 50)")
    v.add_argument("--blocks", type=int, default=5,
                   help="interleaved blocks the timed steps are spread over (default 5, at most --steps)")
    v.add_argument("--out", required=True, help="validation JSON to write")
    v.set_defaults(func=cmd_validate)


def _add_calibrate(sub: Any) -> None:
    c = sub.add_parser("calibrate-comm", help="fit the transfer model t = k·bytes + b",
                       description="Time transfers of tensors of several sizes between two devices, fit "
                                   "t = k·bytes + b and write a celeritas-cluster/1 of --devices devices "
                                   "(with --topology: each class of pair, a celeritas-cluster/2). A "
                                   "fit with a slope of 0 or R² below 0.98 measured nothing useful: the file "
                                   "then gets the default model (1e-4 µs/B, 25 µs) and a warning is printed.")
    c.add_argument("--devices", type=int, default=None,
                   help=f"devices in the written cluster, 1 to {MAX_DEVICES:,} (default 4; with --topology "
                        "the preset's)")
    c.add_argument("--topology", metavar="PRESET",
                   help="measure each class of pair of this topology (inside an island, between islands, "
                        "between nodes) on one representative pair and write a celeritas-cluster/2: a "
                        "link whose fit measured nothing useful keeps the preset's figures. " + TOPOLOGY_HELP)
    c.add_argument("--device-memory", required=True, help="memory per device, e.g. 32GiB")
    c.add_argument("--sizes", help="comma-separated tensor sizes, each at most 1GiB, e.g. 4KiB,1MiB,64MiB")
    c.add_argument("--repeats", type=int, default=20, help="timed transfers per size (median)")
    c.add_argument("--out", required=True, help="cluster JSON to write")
    c.set_defaults(func=cmd_calibrate)
