"""The device cluster: per-device memory and speed, and the paper's linear transfer model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from celeritas_core.errors import CeleritasInputError

#: Default transfer model: PCIe-class link, ~10 GB/s (1e-4 µs per byte) and 25 µs latency.
DEFAULT_SLOPE_US_PER_BYTE = 1e-4
DEFAULT_INTERCEPT_US = 25.0


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices (memory in bytes, relative speed) and the transfer model t = k·bytes + b (µs)."""

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
        """Validate and build a cluster (raises CeleritasInputError naming the bad field)."""
        names = tuple(device_names)
        if not names:
            raise CeleritasInputError("devices: the cluster has no devices")
        if len(set(names)) != len(names):
            raise CeleritasInputError("devices: device names must be unique")
        mem = np.asarray(memory_bytes, dtype=np.float64)
        spd = np.ones(len(names)) if speed is None else np.asarray(speed, dtype=np.float64)
        if mem.shape != (len(names),) or spd.shape != (len(names),):
            raise CeleritasInputError("devices: memory_bytes and speed need one value per device")
        for i, name in enumerate(names):
            if not np.isfinite(mem[i]) or mem[i] <= 0:
                raise CeleritasInputError(
                    f"devices[{i}] ({name!r}): memory_bytes must be positive, got {mem[i]!r}"
                )
            if not np.isfinite(spd[i]) or spd[i] <= 0:
                raise CeleritasInputError(
                    f"devices[{i}] ({name!r}): speed must be positive, got {spd[i]!r}"
                )
        for field_name, value in (("slope_us_per_byte", slope_us_per_byte),
                                  ("intercept_us", intercept_us)):
            if not isinstance(value, int | float) or isinstance(value, bool) \
                    or not np.isfinite(value) or value < 0:
                raise CeleritasInputError(f"comm.{field_name}: must be a number >= 0, got {value!r}")
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
        """``num_devices`` identical devices named ``gpu:0``… with ``memory_bytes`` each."""
        if num_devices <= 0:
            raise CeleritasInputError(f"devices: need at least one device, got {num_devices}")
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
