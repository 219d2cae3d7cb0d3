"""Energy from the hardware's own cumulative counters, or "not measured" and why -- never an estimate.

* **RAPL** (CPU): the Linux powercap zones under ``/sys/class/powercap``, each a folder with ``name``,
  ``energy_uj`` (microjoules since some moment, wrapping at ``max_energy_range_uj``). The zones counted are the
  packages (``package-N``, top-level ``intel-rapl:N``; AMD's RAPL driver uses the same names) and their ``dram``
  subzones; ``core`` / ``uncore`` lie inside a package and are not added to it, ``psys`` overlaps everything and
  the ``intel-rapl-mmio`` copies of the packages are skipped. ``energy_uj`` is root-only on most kernels since 2020
  and absent in most VMs: then the reason says so.
* **NVML** (NVIDIA GPU, ``nvidia-ml-py``, optional): ``nvmlDeviceGetTotalEnergyConsumption`` per device, the
  driver's cumulative millijoule counter (Volta and newer) -- not power polling, which samples only part of the
  time. Not verified on a GPU by this project yet: every figure from it is labelled so (:data:`NVML_NOTE`).

:func:`find_counters` looks (``root``: a fake sysfs tree in the tests), :class:`Meter` reads the counters around a
piece of work (:meth:`Meter.start` / :meth:`Reading.stop`), :func:`idle_power` measures the machine at rest.
codecarbon substitutes half the CPU's TDP when RAPL is unreadable; nothing here substitutes anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

POWERCAP = Path("/sys/class/powercap")
NVML_NOTE = "not verified on a GPU"  # NVML's counter has not been read on a lent GPU by this project's checks
IDLE_S = 2.0  # seconds of rest for the idle power


class Counter(Protocol):
    """One cumulative energy counter: its name and where it comes from, its reading in microjoules, and the value it
    wraps at (None: it does not wrap within a run)."""

    name: str
    source: str

    def read_uj(self) -> int: ...

    @property
    def max_uj(self) -> int | None: ...


@dataclass(frozen=True)
class RaplZone:
    """A powercap zone folder (``name``, ``energy_uj``, ``max_energy_range_uj``)."""

    folder: Path
    name: str
    source: str = "RAPL"

    def read_uj(self) -> int:
        return int((self.folder / "energy_uj").read_text().strip())

    @property
    def max_uj(self) -> int | None:
        try:
            return int((self.folder / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            return None


@dataclass
class NvmlDevice:
    """An NVIDIA GPU's total-energy counter through nvidia-ml-py (``pynvml``)."""

    nvml: Any  # the pynvml module
    handle: Any
    name: str
    source: str = "NVML"

    def read_uj(self) -> int:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) * 1000  # mJ -> uJ

    @property
    def max_uj(self) -> int | None:
        return None  # a 64-bit millijoule counter


def delta_uj(start: int, end: int, max_uj: int | None) -> int:
    """Microjoules between two readings of a counter that wraps at ``max_uj`` (once at most: a RAPL package
    counter wraps after minutes to hours)."""
    if end >= start:
        return end - start
    if not max_uj:
        raise ValueError(f"the counter went back from {start} to {end} and has no wrap value")
    return end + max_uj - start


def rapl_zones(root: str | Path) -> tuple[list[RaplZone], str | None]:
    """The readable package and dram zones under ``root``, or none and why."""
    root = Path(root)
    if not root.is_dir():
        return [], f"{root} does not exist: no powercap interface (a VM, or a kernel without intel_rapl)"
    zones: list[RaplZone] = []
    unreadable: list[str] = []
    for folder in sorted(root.glob("*rapl*")):
        if "mmio" in folder.name or not (folder / "energy_uj").exists():
            continue
        try:
            name = (folder / "name").read_text().strip()
        except OSError:
            continue
        parts = folder.name.split(":")
        top = len(parts) == 2  # intel-rapl:N; its subzones are intel-rapl:N:M
        if not ((top and name.startswith("package")) or name == "dram"):
            continue
        zone = RaplZone(folder, name)
        try:
            zone.read_uj()
        except (OSError, ValueError) as e:
            unreadable.append(f"{folder.name} ({name}): {type(e).__name__}: {e.strerror or e}"
                              if isinstance(e, OSError) else f"{folder.name} ({name}): {e}")
            continue
        zones.append(zone)
    if zones:
        return zones, None
    if unreadable:
        return [], "RAPL zones not readable (energy_uj is root-only on most kernels): " + "; ".join(unreadable)
    return [], f"no RAPL package or dram zone under {root}"


def nvml_devices() -> tuple[list[NvmlDevice], str | None]:
    """Every NVIDIA GPU's total-energy counter, or none and why."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return [], "nvidia-ml-py is not installed (pip install 'breaknli-fast[energy]')"
    try:
        pynvml.nvmlInit()
        out = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            dev = NvmlDevice(pynvml, h, f"gpu{i}")
            dev.read_uj()  # a GPU older than Volta has no such counter: NVMLError
            out.append(dev)
    except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and its kin: no driver, no counter
        return [], f"NVML: {type(e).__name__}: {e}"
    return (out, None) if out else ([], "NVML: no NVIDIA GPU")


@dataclass
class Counters:
    """The counters found for a device, and why each kind that is missing is missing."""

    counters: list[Counter] = field(default_factory=list)
    why_not: list[str] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return bool(self.counters)

    def source(self) -> str:
        """``RAPL package-0 + dram; NVML gpu0 (not verified on a GPU)``."""
        kinds: dict[str, list[str]] = {}
        for c in self.counters:
            kinds.setdefault(c.source, []).append(c.name)
        return "; ".join(f"{k} {' + '.join(v)}" + (f" ({NVML_NOTE})" if k == "NVML" else "")
                         for k, v in kinds.items())

    def reason(self) -> str:
        """Why nothing is measured: ``no readable counter: ...``."""
        return "no readable counter: " + "; ".join(self.why_not)


def find_counters(device: str = "cpu", root: str | Path | None = None) -> Counters:
    """The CPU's RAPL zones, and with a CUDA device the GPUs' NVML counters."""
    found = Counters()
    zones, why = rapl_zones(POWERCAP if root is None else root)
    found.counters += zones
    if why:
        found.why_not.append(why)
    if str(device).startswith("cuda"):
        gpus, why = nvml_devices()
        found.counters += gpus
        if why:
            found.why_not.append(why)
    return found


@dataclass
class Energy:
    """What the counters measured over a piece of work: joules per counter and in all, over ``seconds``."""

    joules: float
    seconds: float
    per_counter: dict[str, float] = field(default_factory=dict)

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.seconds > 0 else None


@dataclass
class Reading:
    counters: Sequence[Counter]
    start_uj: list[int]
    t0: float

    def stop(self) -> Energy:
        end = [c.read_uj() for c in self.counters]
        seconds = time.perf_counter() - self.t0
        per = {f"{c.source} {c.name}": delta_uj(s, e, c.max_uj) / 1e6
               for c, s, e in zip(self.counters, self.start_uj, end)}
        return Energy(sum(per.values()), seconds, per)


@dataclass
class Meter:
    """Reads every counter around a piece of work: ``r = meter.start(); ...; energy = r.stop()``."""

    counters: Sequence[Counter]

    def start(self) -> Reading:
        return Reading(self.counters, [c.read_uj() for c in self.counters], time.perf_counter())


def idle_power(meter: Meter, seconds: float = IDLE_S) -> Energy:
    """The machine at rest for ``seconds`` (nothing of the bench running): its average power is the idle power."""
    r = meter.start()
    time.sleep(max(0.0, float(seconds)))
    return r.stop()
