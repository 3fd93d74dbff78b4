"""What a timing backend provides, and the device description recorded with every run.

Two backends implement :class:`Backend`: ``cupy_backend.CupyBackend`` (real kernels on the
current GPU) and ``synthetic.SyntheticBackend`` (times drawn from a known profile plus noise,
so the whole pipeline runs and is checked without a GPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pagesim.calibrate.grid import Case
from pagesim.calibrate.timing import TimingPolicy, TimingStats


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    software: dict[str, str] = field(default_factory=dict)
    #: the pagesim GPU spec key, when the backend knows it (otherwise guessed from name and memory)
    gpu_spec: str | None = None
    memory_bus_width_bits: int | None = None

    @property
    def peak_memory_bytes_per_s(self) -> float | None:
        """The memory's peak bandwidth from its clock and bus width (double data rate:
        two transfers a clock), as the device reports them; None if it reports neither."""
        if not self.memory_clock_mhz or not self.memory_bus_width_bits:
            return None
        return 2.0 * self.memory_clock_mhz * 1e6 * self.memory_bus_width_bits / 8

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    def device_info(self) -> DeviceInfo: ...

    def copy_bandwidth_bytes_per_s(self, policy: TimingPolicy) -> float:
        """Bytes read + written per second by a large device-to-device copy."""
        ...

    def time_case(self, case: Case, policy: TimingPolicy) -> TimingStats: ...
