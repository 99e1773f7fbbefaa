"""The device cluster: per-device memory and speed, and the paper's linear transfer model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.defaults import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
from celeritas_core.errors import CeleritasInputError
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
    :func:`~celeritas_core.formats.load_cluster`. An op of ``time_us`` runs ``time_us / speed``
    µs on a device; a tensor of ``s`` bytes between two devices takes ``k·s + b`` µs
    (``slope_us_per_byte``, ``intercept_us``; default a PCIe-class link of about 10 GB/s and 25 µs).

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

    @classmethod
    def build(
        cls,
        device_names: Sequence[str],
        memory_bytes: Sequence[float],
        speed: Sequence[float] | None = None,
        *,
        slope_us_per_byte: float = DEFAULT_SLOPE_US_PER_BYTE,
        intercept_us: float = DEFAULT_INTERCEPT_US,
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
        return cls(names, mem, spd, float(slope_us_per_byte), float(intercept_us))

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
            Memory of each device (bytes); :func:`~celeritas_core.units.parse_size` reads
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
        """Transfer time (µs) of a tensor of ``nbytes`` between two different devices."""
        return self.slope_us_per_byte * nbytes + self.intercept_us

    def with_headroom(self, headroom: float) -> Cluster:
        """A copy whose devices keep ``headroom`` (a fraction in [0, 1)) of their memory free."""
        if not 0.0 <= headroom < 1.0:
            raise CeleritasInputError(f"headroom: must be in [0, 1), got {headroom!r}")
        return Cluster(self.device_names, self.memory_bytes * (1.0 - headroom), self.speed.copy(),
                       self.slope_us_per_byte, self.intercept_us)

    def with_memory(self, memory_bytes: float) -> Cluster:
        """A copy with every device's memory set to ``memory_bytes`` (e.g. unlimited)."""
        return Cluster(
            self.device_names,
            np.full(self.num_devices, float(memory_bytes)),
            self.speed.copy(),
            self.slope_us_per_byte,
            self.intercept_us,
        )


def _numbers(values: Any, field_name: str) -> np.ndarray:
    """``values`` (one number per device) as a float64 vector; anything else is an input error."""
    items = list(values) if isinstance(values, Sequence | np.ndarray) else None
    if items is None or not all(is_number(v) or isinstance(v, np.integer | np.floating) for v in items):
        raise CeleritasInputError(
            f"devices: {field_name} must be one number per device, got {short_repr(values)}")
    return np.asarray([as_float(v) for v in items], dtype=np.float64)
