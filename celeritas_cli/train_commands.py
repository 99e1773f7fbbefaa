"""``celeritas train``: train a model with a placement, from a file or the configuration's champion
in MLflow's Model Registry (:mod:`celeritas_tf.training`; the champion through
:mod:`tasks.training`, as ``celeritas production show`` reaches the registry).

This module only defines arguments and checks the flags; TensorFlow, NumPy and MLflow load when
the command runs. Bad input, a missing champion, an unreachable registry or a placement of another
model: one line, exit 2, and no weights file written.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
import zipfile
from typing import Any

from celeritas_cli import flags
from celeritas_core.defaults import ORDER_MODES
from celeritas_core.errors import CeleritasInputError
from tasks.params import FIELDS

#: ``--data`` for random inputs and labels (a few batches, repeated).
SYNTHETIC = "synthetic"
#: Weights files are Keras's weights-only format.
WEIGHTS_SUFFIX = ".weights.h5"


def _bool(text: str | None, flag: str) -> bool | None:
    if text is None:
        return None
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise CeleritasInputError(f"{flag}: expected true or false, got {text!r}")


def _configuration_params(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline parameters that make the configuration (the others take their defaults)."""
    params: dict[str, Any] = {"model": args.model, "model_knobs": flags.model_knobs(args.set),
                              "paper_config": args.paper}
    if args.batch_size is not None:
        params["batch_size"] = args.batch_size
    if args.num_devices is not None:
        params["num_devices"] = args.num_devices
    if args.device_memory is not None:
        params["device_memory"] = args.device_memory
    calibrate = _bool(args.calibrate_comm, "--calibrate-comm")
    if calibrate is not None:
        params["calibrate_comm"] = calibrate
    if args.topology is not None:
        params["topology"] = args.topology
    return params


def _check_flags(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """Check every flag before anything loads; returns (placement file, registered model from a
    ``models:/`` URI or ``--registered-model``)."""
    flags.count(args.steps, "--steps")
    if args.batch_size is not None:
        flags.batch(args.batch_size, "--batch-size")
    if args.num_devices is not None:
        flags.devices(args.num_devices, "--num-devices")
    if args.device_memory is not None:
        flags.device_memory(args.device_memory)
    flags.number(args.learning_rate, "--learning-rate", low=1e-12, high=10.0)
    if args.seed is not None:
        flags.count(args.seed, "--seed", low=0, high=2**32 - 1)
    if (args.placement is None) == (not args.champion):
        raise CeleritasInputError("give the placement: --placement FILE (or models:/NAME@champion), or "
                                  "--champion (the champion of the configuration)")
    if args.registered_model is not None and not args.champion:
        raise CeleritasInputError("--registered-model names a champion: use it with --champion")
    if args.save_weights is not None and not args.save_weights.endswith(WEIGHTS_SUFFIX):
        raise CeleritasInputError(f"--save-weights: the file name must end in {WEIGHTS_SUFFIX} (Keras's "
                                  "format)", source=args.save_weights)
    is_uri = args.placement is not None and args.placement.startswith("models:/")
    registry_name = args.registered_model
    if is_uri:
        # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
        from tasks.training import registered_model_of_uri

        registry_name = registered_model_of_uri(args.placement)
    placement_file = args.placement if args.placement is not None and not is_uri else None
    if args.model is None and (placement_file is not None or (args.champion and registry_name is None)):
        raise CeleritasInputError("--model: required with a placement file, and with --champion unless "
                                  "--registered-model names the champion")
    if placement_file is not None and args.batch_size is None:
        raise CeleritasInputError("--batch-size: required with a placement file (the batch it was made for)")
    if placement_file is not None and (args.device_memory is not None or args.calibrate_comm is not None
                                       or args.topology is not None):
        raise CeleritasInputError("--device-memory, --calibrate-comm and --topology find the champion's "
                                  "configuration: use them with --champion")
    if args.data != SYNTHETIC:
        # lazy: the engine's I/O layer loads numpy's helpers only when a command runs (fast --help)
        from celeritas_core.readwrite.safe_io import check_input_file

        check_input_file(args.data)
    if args.save_weights is not None:
        # lazy: the engine's I/O layer loads numpy's helpers only when a command runs (fast --help)
        from celeritas_core.readwrite.safe_io import check_outputs

        model_file = args.model if args.model and os.path.exists(args.model) else None
        check_outputs([args.save_weights], inputs=[placement_file, model_file,
                                                   None if args.data == SYNTHETIC else args.data])
    return placement_file, registry_name


def _champion(args: argparse.Namespace, registry_name: str | None, tmp: str) -> tuple[Any, Any]:
    """The champion's published placement and its model (checked against the flags)."""
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks.tracking import TransientTrackingError
    from tasks.training import check_same_model, fetch_champion, model_for, registered_model_of

    try:
        name = registry_name or registered_model_of(_configuration_params(args))
        published = fetch_champion(name, tmp)
    except TransientTrackingError as exc:  # no registry, no placement: a refusal like any other (exit 2)
        raise CeleritasInputError(str(exc)) from None
    if registry_name is not None:  # the flags did not find it: they must agree with it
        if args.model is not None:
            check_same_model(published, _configuration_params(args))
        if args.batch_size is not None and args.batch_size != published.batch_size:
            raise CeleritasInputError(f"--batch-size {args.batch_size}: the champion {published.source} was "
                                      f"placed for batch {published.batch_size}")
        if args.num_devices is not None and args.num_devices != published.num_devices:
            raise CeleritasInputError(f"--num-devices {args.num_devices}: the champion {published.source} "
                                      f"places the model on {published.num_devices} devices")
    flags.say(f"champion: {published.describe()}")
    return published, model_for(published.configuration)


def _npz_data(path: str, model: Any) -> tuple[Any, Any]:
    """``(inputs, labels)`` from a NumPy ``.npz`` archive: arrays ``x`` and ``y``, or named like
    the model's inputs and labels."""
    import numpy as np  # lazy: numpy loads only when a command runs (fast --help)

    # lazy: the engine's I/O layer loads only when a command runs (fast --help)
    from celeritas_core.readwrite.safe_io import read_input_bytes

    try:
        archive = np.load(io.BytesIO(read_input_bytes(path)), allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        raise CeleritasInputError("not a NumPy .npz archive", source=path) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise CeleritasInputError("a single array, not an .npz archive of inputs and labels", source=path)
    names = [s.name for s in model.inputs]
    label = model.labels.name
    held = set(archive.files)
    try:
        if {*names, label} <= held:
            inputs = {n: archive[n] for n in names}
            return (inputs[names[0]] if len(names) == 1 else inputs), archive[label]
        if {"x", "y"} <= held and len(names) == 1:
            return archive["x"], archive["y"]
    except ValueError as exc:  # an object array, which would need pickle
        raise CeleritasInputError(f"cannot read its arrays ({exc})", source=path) from None
    wanted = "'x' and 'y', or " if len(names) == 1 else ""
    raise CeleritasInputError(f"expected arrays {wanted}{[*names, label]}; it holds {sorted(held)}",
                              source=path)


def cmd_train(args: argparse.Namespace) -> int:
    """Train a model with a placement for ``--steps`` steps; print progress and a summary."""
    placement_file, registry_name = _check_flags(args)
    with tempfile.TemporaryDirectory(prefix="celeritas-train-") as tmp:
        if placement_file is None:
            published, model = _champion(args, registry_name, tmp)
            placement, source, batch = published.placement, published.source, published.batch_size
        else:
            # lazy: TensorFlow and the engine load only when a command runs (see the module docstring)
            from celeritas_core.readwrite.formats import read_json
            from celeritas_tf.models import get_model

            placement, source, batch = read_json(placement_file), placement_file, args.batch_size
            devices = placement.get("devices") if isinstance(placement, dict) else None
            if args.num_devices is not None and isinstance(devices, list) \
                    and len(devices) != args.num_devices:
                raise CeleritasInputError(f"--num-devices {args.num_devices}: the placement has "
                                          f"{len(devices)} devices", source=placement_file)
            model = get_model(args.model, paper=args.paper, **flags.model_knobs(args.set))
        data = None if args.data == SYNTHETIC else _npz_data(args.data, model)
        # lazy: TensorFlow loads only when a command runs, after the placement is found
        from celeritas_tf.training import train_with_placement

        with train_with_placement(model, placement, batch_size=batch, order=args.order,
                                  learning_rate=args.learning_rate, seed=args.seed,
                                  source=source) as training:
            edges = f", {training.order_edges.added} control edges" if training.order_edges else ""
            flags.say(f"{model.name} at batch {batch} on {training.num_devices} devices, placer "
                 f"{training.placer}, {training.order_mode} order{edges}")
            every = max(1, args.steps // 10)

            def progress(step: int, loss: float) -> None:
                if step == 1 or step % every == 0 or step == args.steps:
                    flags.say(f"step {step}/{args.steps}: loss {loss:.4f}")

            started = time.perf_counter()
            losses = training.fit(training.synthetic_data() if data is None else data, steps=args.steps,
                                  progress=progress)
            seconds = time.perf_counter() - started
            if args.save_weights is not None:
                training.save_weights(args.save_weights)
    what = "synthetic data" if data is None else args.data
    saved = f"; weights: {args.save_weights}" if args.save_weights else ""
    print(f"trained {model.name} with {source} at batch {batch} on {training.num_devices} devices "
          f"({training.order_mode} order) on {what}: {len(losses)} steps in {seconds:.1f} s, loss "
          f"{losses[0]:.4f} -> {losses[-1]:.4f}{saved}")
    return 0


def add_commands(sub: Any) -> None:
    """Register ``train`` on the CLI's subparsers."""
    t = sub.add_parser(
        "train", help="train a model with a placement (a file or the configuration's champion)",
        description="Train MODEL with a placement: its training step (forward, backward, Adam) at the "
                    "placement's batch, each op on its device and each device running its ops in the "
                    "placement's recorded order (unless --order free), for --steps steps on synthetic or "
                    "given data; print the loss as it goes and a summary; optionally save the trained "
                    "weights (Keras's .weights.h5). The placement is a celeritas-placement/1 file "
                    "(celeritas place), models:/NAME@champion, or with --champion the champion of the "
                    "configuration the model, batch and cluster flags name in MLflow's Model Registry "
                    "(MLFLOW_TRACKING_URI, default a SQLite store under build/mlflow; celeritas production "
                    "show lists the champions). A placement made for another model or structure, for more "
                    "devices than this machine runs, or with a bad order, a missing champion or an "
                    "unreachable registry: one line, exit 2.")
    t.add_argument("--model", help="zoo name (`celeritas models`), MODULE:FUNCTION, or a .keras file "
                                   "(with a champion named by --registered-model or models:/: default "
                                   "the champion's model)")
    t.add_argument("--set", action="append", metavar="KNOB=VALUE", help="a model size knob (repeatable)")
    t.add_argument("--paper", action="store_true", help="the paper's model configuration")
    where = t.add_argument_group("placement", "a file or models:/ URI, or --champion")
    where.add_argument("--placement", metavar="FILE|URI",
                       help="a celeritas-placement/1 file, or models:/NAME@champion")
    where.add_argument("--champion", action="store_true",
                       help="the champion of the configuration of --model, --batch-size, --num-devices, "
                            "--device-memory (and --calibrate-comm, --topology, --set, --paper), or of "
                            "--registered-model")
    where.add_argument("--registered-model", metavar="NAME",
                       help="with --champion: the registered model (celeritas-MODEL-bBATCH-KEY) whose "
                            "champion to take")
    config = t.add_argument_group("configuration", "the pipeline's fields that make a configuration; the "
                                                   "others take the pipeline's defaults")
    config.add_argument("--batch-size", type=int, metavar="N",
                        help="batch size: required with a placement file; with --champion the "
                             f"configuration's (default {FIELDS['batch_size']['default']}); with "
                             "--registered-model or models:/ the champion's")
    config.add_argument("--num-devices", type=int, metavar="N",
                        help=f"devices of the configuration (default {FIELDS['num_devices']['default']}); "
                             "a placement must have as many")
    config.add_argument("--device-memory", metavar="SIZE",
                        help=f"memory per device of the configuration (default "
                             f"{FIELDS['device_memory']['default']})")
    config.add_argument("--calibrate-comm", metavar="BOOL",
                        help="whether the configuration's runs calibrate transfers (default "
                             f"{str(FIELDS['calibrate_comm']['default']).lower()})")
    config.add_argument("--topology", metavar="PRESET",
                        help="the configuration's link topology (default none)")
    run = t.add_argument_group("training")
    run.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    run.add_argument("--order", choices=ORDER_MODES,
                     help="enforced: each device runs its ops in the placement's device_order; free: in "
                          "TensorFlow's own order (default: the placement's order_mode)")
    run.add_argument("--data", default=SYNTHETIC, metavar="synthetic|NPZ",
                     help="synthetic: 4 batches of random inputs and labels, repeated (the loss falls as the "
                          "model learns them: a check of the placed step, not real training); or a NumPy "
                          ".npz with arrays x and y, or named like the model's inputs and labels, taken in "
                          "batches and repeated (default synthetic)")
    run.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's learning rate (default 0.001)")
    run.add_argument("--seed", type=int, help="seed of the initial weights and the synthetic data "
                                              "(default: unseeded weights, data seed 0)")
    run.add_argument("--save-weights", metavar="PATH",
                     help="write the trained weights there (Keras's format: a name ending in .weights.h5)")
    t.set_defaults(func=cmd_train)
