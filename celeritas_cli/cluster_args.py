"""The cluster options every placing command shares: ``--cluster FILE`` or ``--devices N
--device-memory SIZE`` with the transfer model ``--comm-slope`` and ``--comm-intercept``."""

from __future__ import annotations

import argparse
import typing

from celeritas_cli import flags
from celeritas_core.defaults import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_DEVICES, MAX_SLOPE_US_PER_BYTE, MAX_TIME_US

if typing.TYPE_CHECKING:  # numpy loads when a command builds a cluster, not with the parser
    from celeritas_core.cluster import Cluster


def add_cluster_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add the ``cluster`` argument group to ``parser``."""
    group = parser.add_argument_group(
        "cluster", "either a celeritas-cluster/1 file, or --devices with --device-memory"
    )
    group.add_argument("--cluster", metavar="FILE", help="cluster JSON (celeritas-cluster/1)")
    group.add_argument("--devices", type=int, metavar="N",
                       help=f"number of identical devices (1 to {MAX_DEVICES:,})")
    group.add_argument("--device-memory", metavar="SIZE",
                       help="memory per device, e.g. 32GiB, 500MB, 1e9 (bytes)")
    group.add_argument("--comm-slope", type=float, default=DEFAULT_SLOPE_US_PER_BYTE,
                       metavar="US_PER_BYTE",
                       help="transfer time per byte k in t = k*bytes + b (default: %(default)g)")
    group.add_argument("--comm-intercept", type=float, default=DEFAULT_INTERCEPT_US, metavar="US",
                       help="fixed transfer latency b in µs (default: %(default)g)")


def check_cluster_flags(args: argparse.Namespace) -> None:
    """Check the cluster flags' values (whatever else is given): ``--devices`` from 1 to
    :data:`~celeritas_core.limits.MAX_DEVICES`, ``--device-memory`` a size up to ``MAX_BYTES``,
    ``--comm-slope`` and ``--comm-intercept`` finite, ``>= 0`` and within their limits."""
    if args.devices is not None:
        flags.devices(args.devices)
    if args.device_memory is not None:
        flags.size(args.device_memory, "--device-memory")
    flags.number(args.comm_slope, "--comm-slope", high=MAX_SLOPE_US_PER_BYTE)
    flags.number(args.comm_intercept, "--comm-intercept", high=MAX_TIME_US)


def cluster_from_args(args: argparse.Namespace, fallback: Cluster | None = None) -> Cluster:
    """The cluster the options of :func:`add_cluster_args` describe (``fallback`` when none is given)."""
    # lazy: numpy and the engine load only when a command runs (fast --help)
    from celeritas_core.cluster import Cluster
    from celeritas_core.formats import load_cluster

    check_cluster_flags(args)
    if args.cluster is not None:  # `--cluster ''` is an error, not "no cluster"
        if args.devices is not None or args.device_memory is not None:
            raise CeleritasInputError("give either --cluster FILE or --devices/--device-memory, not both")
        return load_cluster(args.cluster)
    if args.devices is None and args.device_memory is None:
        if fallback is not None:
            return fallback
        raise CeleritasInputError("no cluster: give --cluster FILE or --devices N --device-memory SIZE")
    if args.devices is None or args.device_memory is None:
        raise CeleritasInputError("--devices and --device-memory must be given together")
    memory = flags.size(args.device_memory, "--device-memory")
    return Cluster.homogeneous(args.devices, memory, slope_us_per_byte=args.comm_slope,
                               intercept_us=args.comm_intercept)
