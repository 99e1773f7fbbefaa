"""The cluster options every placing command shares: ``--cluster FILE`` or ``--devices N
--device-memory SIZE`` with the transfer model ``--comm-slope`` and ``--comm-intercept``, and a
link topology preset ``--topology`` over either."""

from __future__ import annotations

import argparse
import typing

from celeritas_cli import flags
from celeritas_core.defaults import (
    DEFAULT_INTERCEPT_US,
    DEFAULT_SLOPE_US_PER_BYTE,
    LINK_ALIASES,
    LINK_PRESETS,
)
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_DEVICES, MAX_SLOPE_US_PER_BYTE, MAX_TIME_US

if typing.TYPE_CHECKING:  # numpy loads when a command builds a cluster, not with the parser
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.topology import TopologyPreset

#: ``--topology``'s grammar and preset links (also in ``calibrate-comm``'s help).
TOPOLOGY_HELP = (
    "Presets (docs/formats.md, \"Topology presets\"): "
    "NODESxDEVICES:LINK[,NETWORK], e.g. 2x4:nvlink,ib (2 nodes of 4 devices, NVLink inside a node, "
    "InfiniBand between nodes, one network port per node shared by its devices), or "
    "NODESxISLANDSxDEVICES:LINK,HOST_LINK[,NETWORK] for islands inside a node (1x2x4:nvlink,pcie); "
    "options ,nics=N (network ports per node) and ,host-shared (islands share an uplink). Links: "
    f"{', '.join(LINK_PRESETS)} ({', '.join(f'{a} = {b}' for a, b in LINK_ALIASES.items())}); devices "
    "go to nodes in index order")


def add_cluster_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add the ``cluster`` argument group to ``parser``."""
    group = parser.add_argument_group(
        "cluster", "either a celeritas-cluster/1 or /2 file, or --devices with --device-memory; "
                   "--topology adds a link topology to either"
    )
    group.add_argument("--cluster", metavar="FILE", help="cluster JSON (celeritas-cluster/1 or /2)")
    group.add_argument("--devices", type=int, metavar="N",
                       help=f"number of identical devices (1 to {MAX_DEVICES:,}; with --topology, "
                            "optional: the preset's count)")
    group.add_argument("--device-memory", metavar="SIZE",
                       help="memory per device, e.g. 32GiB, 500MB, 1e9 (a bare number is bytes, at least "
                            "1MiB: smaller devices take their unit, 600B)")
    group.add_argument("--comm-slope", type=float, default=None, metavar="US_PER_BYTE",
                       help="transfer time per byte k in t = k*bytes + b, every pair of devices "
                            f"(default: {DEFAULT_SLOPE_US_PER_BYTE:g}; not with --topology)")
    group.add_argument("--comm-intercept", type=float, default=None, metavar="US",
                       help=f"fixed transfer latency b in µs (default: {DEFAULT_INTERCEPT_US:g}; "
                            "not with --topology)")
    group.add_argument("--topology", metavar="PRESET",
                       help="group the devices into nodes and islands joined by preset links, each pair "
                            "with its own transfer model. With --cluster FILE the file's devices keep "
                            "their memory and speed (mixed devices) and the preset replaces any topology "
                            "the file has. " + TOPOLOGY_HELP)


def check_cluster_flags(args: argparse.Namespace) -> None:
    """Check the cluster flags' values (whatever else is given): ``--devices`` from 1 to
    :data:`~celeritas_core.limits.MAX_DEVICES`, ``--device-memory`` a size up to ``MAX_BYTES``,
    ``--comm-slope`` and ``--comm-intercept`` finite, ``>= 0`` and within their limits,
    ``--topology`` a preset (and then no ``--comm-*``, and ``--devices`` its count)."""
    if args.devices is not None:
        flags.devices(args.devices)
    if args.device_memory is not None:
        flags.device_memory(args.device_memory)
    if args.comm_slope is not None:
        flags.number(args.comm_slope, "--comm-slope", high=MAX_SLOPE_US_PER_BYTE)
    if args.comm_intercept is not None:
        flags.number(args.comm_intercept, "--comm-intercept", high=MAX_TIME_US)
    preset = topology_preset(args)
    if preset is None:
        return
    if args.comm_slope is not None or args.comm_intercept is not None:
        raise CeleritasInputError("--comm-slope and --comm-intercept set one link for every pair: not with "
                                  "--topology, whose preset sets each link (docs/formats.md)")
    if args.devices is not None and args.devices != preset.num_devices:
        raise CeleritasInputError(f"--devices {args.devices} but --topology {args.topology} has "
                                  f"{preset.num_devices} devices")


def topology_preset(args: argparse.Namespace) -> TopologyPreset | None:
    """``--topology``'s preset, parsed (None when not given)."""
    if getattr(args, "topology", None) is None:
        return None
    # lazy: numpy and the engine load only when a command runs (fast --help)
    from celeritas_core.graphs.topology import parse_preset

    return parse_preset(args.topology, "--topology")


def cluster_from_args(args: argparse.Namespace, fallback: Cluster | None = None) -> Cluster:
    """The cluster the options of :func:`add_cluster_args` describe (``fallback`` when none is given)."""
    check_cluster_flags(args)
    preset = topology_preset(args)
    cluster = _devices_from_args(args, fallback, preset)
    if preset is None:
        return cluster
    if cluster.num_devices != preset.num_devices:
        hint = "" if args.cluster is not None else " (give --device-memory SIZE for the preset's devices)"
        raise CeleritasInputError(f"--topology {args.topology} has {preset.num_devices} devices, but the "
                                  f"cluster has {cluster.num_devices}{hint}")
    try:
        return cluster.with_topology(preset.topology(cluster.device_names))
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"--topology: {exc.message}") from None


def _devices_from_args(args: argparse.Namespace, fallback: Cluster | None,
                       preset: TopologyPreset | None) -> Cluster:
    """The devices (and flat transfer model) of ``--cluster`` or ``--devices/--device-memory``."""
    # lazy: numpy and the engine load only when a command runs (fast --help)
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.readwrite.formats import load_cluster

    if args.cluster is not None:  # `--cluster ''` is an error, not "no cluster"
        if args.devices is not None or args.device_memory is not None:
            raise CeleritasInputError("give either --cluster FILE or --devices/--device-memory, not both")
        return load_cluster(args.cluster)
    devices = args.devices if preset is None or args.devices is not None else (
        preset.num_devices if args.device_memory is not None else None)
    if devices is None and args.device_memory is None:
        if fallback is not None:
            return fallback
        if preset is not None:
            raise CeleritasInputError(f"--topology {args.topology} needs --device-memory SIZE "
                                      "(or --cluster FILE)")
        raise CeleritasInputError("no cluster: give --cluster FILE or --devices N --device-memory SIZE")
    if devices is None or args.device_memory is None:
        raise CeleritasInputError("--devices and --device-memory must be given together")
    memory = flags.device_memory(args.device_memory)
    slope = DEFAULT_SLOPE_US_PER_BYTE if args.comm_slope is None else args.comm_slope
    intercept = DEFAULT_INTERCEPT_US if args.comm_intercept is None else args.comm_intercept
    return Cluster.homogeneous(devices, memory, slope_us_per_byte=slope, intercept_us=intercept)
