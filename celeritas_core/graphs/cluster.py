"""The device cluster: per-device memory and speed, the paper's linear transfer model and, when
the cluster has one, its link topology (:mod:`celeritas_core.graphs.topology`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from celeritas_core.defaults import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.topology import Link, Topology
from celeritas_core.limits import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_SLOPE_US_PER_BYTE,
    MAX_SPEED,
    MAX_TIME_US,
    MIN_SPEED,
    as_float,
    is_number,
    short_repr,
)


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices (memory in bytes, relative speed) and the transfer model t = k·bytes + b (µs).

    Build one with :meth:`build` or :meth:`homogeneous` (both validate), or read one with
    :func:`~celeritas_core.readwrite.formats.load_cluster`. An op of ``time_us`` runs ``time_us / speed``
    µs on a device; a tensor of ``s`` bytes between two devices takes ``k·s + b`` µs
    (``slope_us_per_byte``, ``intercept_us``; default a PCIe-class link of about 10 GB/s and 25 µs).


    Without a ``topology`` (a *flat* cluster) every pair of devices has that one model, the
    paper's. With one, each pair has its own link (:meth:`transfer_time_us`, the per-pair arrays
    :attr:`pair_slope_us_per_byte` and :attr:`pair_intercept_us`) and transfers between nodes
    share the nodes' network ports (:attr:`pair_egress`, :attr:`pair_ingress`);
    ``slope_us_per_byte``/``intercept_us`` are then the *flat* model a topology-blind tool uses
    (:meth:`comm_time_us`, :meth:`flat`).

    Examples
    --------
    >>> from celeritas_core import Cluster
    >>> cluster = Cluster.homogeneous(2, 16 * 2**30)
    >>> cluster.device_names, cluster.num_devices
    (('gpu:0', 'gpu:1'), 2)
    >>> cluster.comm_time_us(1_000_000)   # 1 MB: 1e-4 µs/B · 1e6 B + 25 µs
    125.0
    """

    device_names: tuple[str, ...]
    memory_bytes: np.ndarray
    speed: np.ndarray
    slope_us_per_byte: float = DEFAULT_SLOPE_US_PER_BYTE
    intercept_us: float = DEFAULT_INTERCEPT_US
    topology: Topology | None = None

    @classmethod
    def build(
        cls,
        device_names: Sequence[str],
        memory_bytes: Sequence[float],
        speed: Sequence[float] | None = None,
        *,
        slope_us_per_byte: float = DEFAULT_SLOPE_US_PER_BYTE,
        intercept_us: float = DEFAULT_INTERCEPT_US,
        topology: Topology | None = None,
    ) -> Cluster:
        """Validate and build a cluster.

        At most :data:`~celeritas_core.limits.MAX_DEVICES` devices with non-empty unique names;
        memory in ``(0, MAX_BYTES]`` bytes, speed in ``[MIN_SPEED, MAX_SPEED]``, the slope in
        ``[0, MAX_SLOPE_US_PER_BYTE]`` µs/B and the intercept in ``[0, MAX_TIME_US]`` µs
        (docs/formats.md, "Limits").

        Parameters
        ----------
        device_names : sequence of str
            Unique, non-empty device names, at least one.
        memory_bytes : sequence of float
            Memory of each device (bytes).
        speed : sequence of float, optional
            Relative speed of each device (an op lasts ``time_us / speed``); default all 1.
        slope_us_per_byte : float, optional
            Transfer time per byte between two devices (µs/B).
        intercept_us : float, optional
            Fixed latency of every transfer between two devices (µs).
        topology : Topology or None, optional
            Links between these devices (:mod:`celeritas_core.graphs.topology`); None for a flat cluster.

        Returns
        -------
        Cluster
            The validated cluster.

        Raises
        ------
        CeleritasInputError
            Naming the bad field: no devices, a duplicate or empty name, one value missing per
            device, or a value out of its range.

        Examples
        --------
        >>> from celeritas_core import Cluster
        >>> cluster = Cluster.build(["big", "small"], [16 * 2**30, 8 * 2**30], speed=[1.0, 0.5])
        >>> cluster.memory_bytes.tolist(), cluster.speed.tolist()
        ([17179869184.0, 8589934592.0], [1.0, 0.5])
        >>> Cluster.build(["gpu", "gpu"], [1e9, 1e9])
        Traceback (most recent call last):
        ...
        celeritas_core.errors.CeleritasInputError: devices: device names must be unique
        """
        names = tuple(device_names)
        if not names:
            raise CeleritasInputError("devices: the cluster has no devices")
        if len(names) > MAX_DEVICES:
            raise CeleritasInputError(f"devices: {len(names):,} devices, above the limit of {MAX_DEVICES:,}")
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name:
                raise CeleritasInputError(
                    f"devices[{i}]: name must be a non-empty string, got {short_repr(name)}")
        if len(set(names)) != len(names):
            raise CeleritasInputError("devices: device names must be unique")
        mem = _numbers(memory_bytes, "memory_bytes")
        spd = np.ones(len(names)) if speed is None else _numbers(speed, "speed")
        if mem.shape != (len(names),) or spd.shape != (len(names),):
            raise CeleritasInputError("devices: memory_bytes and speed need one value per device")
        for i, name in enumerate(names):
            if not np.isfinite(mem[i]) or mem[i] <= 0:
                raise CeleritasInputError(
                    f"devices[{i}] ({name!r}): memory_bytes must be positive, got {mem[i]!r}"
                )
            if mem[i] > MAX_BYTES:
                raise CeleritasInputError(f"devices[{i}] ({name!r}): memory_bytes must be at most "
                                          f"{MAX_BYTES:g} bytes (the limit), got {mem[i]!r}")
            if not np.isfinite(spd[i]) or spd[i] <= 0:
                raise CeleritasInputError(
                    f"devices[{i}] ({name!r}): speed must be positive, got {spd[i]!r}"
                )
            if not MIN_SPEED <= spd[i] <= MAX_SPEED:
                raise CeleritasInputError(f"devices[{i}] ({name!r}): speed must be from {MIN_SPEED:g} to "
                                          f"{MAX_SPEED:g} (the limits), got {spd[i]!r}")
        for field_name, value, limit in (("slope_us_per_byte", slope_us_per_byte, MAX_SLOPE_US_PER_BYTE),
                                         ("intercept_us", intercept_us, MAX_TIME_US)):
            if not is_number(value) or not np.isfinite(as_float(value)) or value < 0:
                raise CeleritasInputError(
                    f"comm.{field_name}: must be a number >= 0, got {short_repr(value)}")
            if value > limit:
                raise CeleritasInputError(f"comm.{field_name}: must be at most {limit:g} (the limit), "
                                          f"got {short_repr(value)}")
        if topology is not None and topology.num_devices != len(names):
            raise CeleritasInputError(
                f"topology: {topology.num_devices} devices, the cluster has {len(names)}")
        return cls(names, mem, spd, float(slope_us_per_byte), float(intercept_us), topology)

    @classmethod
    def homogeneous(
        cls,
        num_devices: int,
        memory_bytes: float,
        *,
        slope_us_per_byte: float = DEFAULT_SLOPE_US_PER_BYTE,
        intercept_us: float = DEFAULT_INTERCEPT_US,
    ) -> Cluster:
        """``num_devices`` identical devices named ``gpu:0``… with ``memory_bytes`` each.

        Parameters
        ----------
        num_devices : int
            How many devices (at least 1).
        memory_bytes : float
            Memory of each device (bytes); :func:`~celeritas_core.readwrite.units.parse_size` reads
            ``"32GiB"`` and the like.
        slope_us_per_byte, intercept_us : float, optional
            The transfer model, as for :meth:`build`.

        Returns
        -------
        Cluster
            Devices of speed 1.

        Raises
        ------
        CeleritasInputError
            As :meth:`build`, or when ``num_devices`` is not a positive integer.

        Examples
        --------
        >>> from celeritas_core import Cluster, parse_size
        >>> cluster = Cluster.homogeneous(4, parse_size("32GiB"), intercept_us=10.0)
        >>> cluster.device_names
        ('gpu:0', 'gpu:1', 'gpu:2', 'gpu:3')
        >>> float(cluster.memory_bytes[0]), cluster.comm_time_us(0)
        (34359738368.0, 10.0)
        """
        if not isinstance(num_devices, int | np.integer) or isinstance(num_devices, bool) or num_devices <= 0:
            raise CeleritasInputError(f"devices: need at least one device, got {short_repr(num_devices)}")
        if num_devices > MAX_DEVICES:
            raise CeleritasInputError(f"devices: {num_devices:,} devices, above the limit of {MAX_DEVICES:,}")
        return cls.build(
            [f"gpu:{i}" for i in range(num_devices)],
            [memory_bytes] * num_devices,
            slope_us_per_byte=slope_us_per_byte,
            intercept_us=intercept_us,
        )

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return len(self.device_names)

    def comm_time_us(self, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Transfer time (µs) of a tensor of ``nbytes`` between two different devices under the
        flat model (every pair alike; with a topology, its topology-blind summary)."""
        return self.slope_us_per_byte * nbytes + self.intercept_us

    # ------------------------------------------------------------------ pairwise view
    @property
    def is_flat(self) -> bool:
        """Whether every pair of devices has the one model ``k·bytes + b`` (no topology)."""
        return self.topology is None

    @functools.cached_property
    def pair_link(self) -> np.ndarray:
        """``(n, n)`` int64: the link of each ordered pair, an index into :attr:`links`; -1 on the
        diagonal. A flat cluster has one link, 0."""
        if self.topology is None:
            link = np.zeros((self.num_devices, self.num_devices), dtype=np.int64)
            np.fill_diagonal(link, -1)
            return link
        return self.topology.pair_link()

    @property
    def links(self) -> tuple[Link, ...]:
        """The cluster's kinds of link; a flat cluster's one is ``flat`` (its ``k``, ``b``)."""
        if self.topology is None:
            return (Link("flat", self.slope_us_per_byte, self.intercept_us),)
        return self.topology.links

    @functools.cached_property
    def pair_slope_us_per_byte(self) -> np.ndarray:
        """``(n, n)`` float64: ``k`` (µs/B) of the link from device i to device j; 0 on the diagonal."""
        return self._per_pair([x.slope_us_per_byte for x in self.links])

    @functools.cached_property
    def pair_intercept_us(self) -> np.ndarray:
        """``(n, n)`` float64: ``b`` (µs) of the link from device i to device j; 0 on the diagonal."""
        return self._per_pair([x.intercept_us for x in self.links])

    def _per_pair(self, per_link: list[float]) -> np.ndarray:
        values = np.asarray([*per_link, 0.0], dtype=np.float64)  # index -1: the diagonal
        out = values[self.pair_link]
        out.flags.writeable = False
        return out

    @functools.cached_property
    def pair_egress(self) -> np.ndarray:
        """``(n, n)`` int64: the shared port side a transfer from i to j holds as it leaves its node
        (its NIC's send side) or island (a shared uplink), -1 for none (flat: all -1). Ids are
        ``0 .. num_ports - 1``, disjoint from :attr:`pair_ingress`'s."""
        return self._ports[0]

    @functools.cached_property
    def pair_ingress(self) -> np.ndarray:
        """``(n, n)`` int64: the shared port side a transfer from i to j holds as it enters j's node
        (its NIC's receive side) or island, -1 for none."""
        return self._ports[1]

    @functools.cached_property
    def _ports(self) -> tuple[np.ndarray, np.ndarray]:
        if self.topology is None:
            none = np.full((self.num_devices, self.num_devices), -1, dtype=np.int64)
            return none, none
        return self.topology.pair_ports()

    @property
    def num_ports(self) -> int:
        """Number of shared port sides (0 when flat): the ids of :attr:`pair_egress`/``pair_ingress``."""
        return 0 if self.topology is None else self.topology.num_ports

    def transfer_time_us(self, nbytes: np.ndarray | float, src: np.ndarray | int,
                         dst: np.ndarray | int) -> np.ndarray | float:
        """Time (µs) of moving ``nbytes`` from device ``src`` to device ``dst`` alone on its link
        (no contention): ``k[src, dst]·nbytes + b[src, dst]``, 0 when ``src == dst``. Broadcasts
        over arrays. On a flat cluster exactly :meth:`comm_time_us` between different devices."""
        src, dst = np.asarray(src), np.asarray(dst)
        if self.topology is None:
            return np.where(src == dst, 0.0, self.comm_time_us(nbytes))
        return self.pair_slope_us_per_byte[src, dst] * nbytes + self.pair_intercept_us[src, dst]

    # ------------------------------------------------------------------ copies
    def flat(self) -> Cluster:
        """The same devices without the topology: the flat model ``comm`` for every pair."""
        return replace(self, memory_bytes=self.memory_bytes.copy(), speed=self.speed.copy(), topology=None)

    def with_topology(self, topology: Topology | None, *, comm: tuple[float, float] | None = None) -> Cluster:
        """A copy with ``topology`` (None: flat) over the same devices. ``comm``: its flat model
        ``(k µs/B, b µs)``; by default the topology's :meth:`~Topology.mean_link` (the current one
        when ``topology`` is None)."""
        if topology is not None and topology.num_devices != self.num_devices:
            raise CeleritasInputError(f"topology: {topology.num_devices} devices, the cluster has "
                                      f"{self.num_devices}")
        slope, intercept = comm if comm is not None else (
            topology.mean_link() if topology is not None else (self.slope_us_per_byte, self.intercept_us))
        return Cluster.build(self.device_names, self.memory_bytes, self.speed, slope_us_per_byte=slope,
                             intercept_us=intercept, topology=topology)

    def with_headroom(self, headroom: float) -> Cluster:
        """A copy whose devices keep ``headroom`` (a fraction in [0, 1)) of their memory free."""
        if not 0.0 <= headroom < 1.0:
            raise CeleritasInputError(f"headroom: must be in [0, 1), got {headroom!r}")
        return Cluster(self.device_names, self.memory_bytes * (1.0 - headroom), self.speed.copy(),
                       self.slope_us_per_byte, self.intercept_us, self.topology)

    def with_memory(self, memory_bytes: float) -> Cluster:
        """A copy with every device's memory set to ``memory_bytes`` (e.g. unlimited)."""
        return Cluster(
            self.device_names,
            np.full(self.num_devices, float(memory_bytes)),
            self.speed.copy(),
            self.slope_us_per_byte,
            self.intercept_us,
            self.topology,
        )


def _numbers(values: Any, field_name: str) -> np.ndarray:
    """``values`` (one number per device) as a float64 vector; anything else is an input error."""
    items = list(values) if isinstance(values, Sequence | np.ndarray) else None
    if items is None or not all(is_number(v) or isinstance(v, np.integer | np.floating) for v in items):
        raise CeleritasInputError(
            f"devices: {field_name} must be one number per device, got {short_repr(values)}")
    return np.asarray([as_float(v) for v in items], dtype=np.float64)
