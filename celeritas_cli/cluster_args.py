"""The cluster options every placing command shares: ``--cluster FILE`` or ``--devices N
--device-memory SIZE`` with the transfer model ``--comm-slope`` and ``--comm-intercept``."""

from __future__ import annotations

import argparse

import numpy as np

from celeritas_core.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE, Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.units import parse_size


def add_cluster_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add the ``cluster`` argument group to ``parser``."""
    group = parser.add_argument_group(
        "cluster", "either a celeritas-cluster/1 file, or --devices with --device-memory"
    )
    group.add_argument("--cluster", metavar="FILE", help="cluster JSON (celeritas-cluster/1)")
    group.add_argument("--devices", type=int, metavar="N", help="number of identical devices")
    group.add_argument("--device-memory", metavar="SIZE",
                       help="memory per device, e.g. 32GiB, 500MB, 1e9 (bytes)")
    group.add_argument("--comm-slope", type=float, default=DEFAULT_SLOPE_US_PER_BYTE,
                       metavar="US_PER_BYTE",
                       help="transfer time per byte k in t = k*bytes + b (default: %(default)g)")
    group.add_argument("--comm-intercept", type=float, default=DEFAULT_INTERCEPT_US, metavar="US",
                       help="fixed transfer latency b in µs (default: %(default)g)")


def cluster_from_args(args: argparse.Namespace, fallback: Cluster | None = None) -> Cluster:
    """The cluster the options of :func:`add_cluster_args` describe (``fallback`` when none is given)."""
    from celeritas_core.formats import load_cluster

    if args.cluster:
        if args.devices is not None or args.device_memory is not None:
            raise CeleritasInputError("give either --cluster FILE or --devices/--device-memory, not both")
        return load_cluster(args.cluster)
    if args.devices is None and args.device_memory is None:
        if fallback is not None:
            return fallback
        raise CeleritasInputError("no cluster: give --cluster FILE or --devices N --device-memory SIZE")
    if args.devices is None or args.device_memory is None:
        raise CeleritasInputError("--devices and --device-memory must be given together")
    if args.devices <= 0:
        raise CeleritasInputError(f"--devices: need at least one device, got {args.devices}")
    memory = parse_size(args.device_memory, field="--device-memory")
    for flag, value in (("--comm-slope", args.comm_slope), ("--comm-intercept", args.comm_intercept)):
        if not np.isfinite(value) or value < 0:
            raise CeleritasInputError(f"{flag}: must be a number >= 0, got {value!r}")
    return Cluster.homogeneous(args.devices, memory, slope_us_per_byte=args.comm_slope,
                               intercept_us=args.comm_intercept)
