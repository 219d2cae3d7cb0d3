"""Energy from the hardware's counters (breaknli_fast/bench/energy.py), read from a fake powercap tree: the package
and dram zones are counted (not core, not the MMIO copy), a counter that wraps at max_energy_range_uj is read across
the wrap, and where nothing is readable the reason says why -- no figure is made up. NVML through a stand-in
pynvml module."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from breaknli_fast.bench import energy


def _zone(folder: Path, name: str, uj: int, max_uj: int | None = 262143328850) -> Path:
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "energy_uj").write_text(f"{uj}\n")
    if max_uj is not None:
        (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder


def _powercap(root: Path) -> dict[str, Path]:
    """A tree laid out as Linux's /sys/class/powercap (subzones also listed at the top, as the kernel does)."""
    return {
        "pkg": _zone(root / "intel-rapl:0", "package-0", 1_000_000),
        "core": _zone(root / "intel-rapl:0:0", "core", 500_000),
        "dram": _zone(root / "intel-rapl:0:1", "dram", 200_000),
        "mmio": _zone(root / "intel-rapl-mmio:0", "package-0", 1_000_000),
        "psys": _zone(root / "intel-rapl:1", "psys", 9_000_000),
    }


def test_the_package_and_dram_zones_are_read_and_a_wrapping_counter_is_read_across_its_wrap(tmp_path):
    z = _powercap(tmp_path)
    (z["pkg"] / "max_energy_range_uj").write_text("1000500\n")  # the package counter wraps at 1000500 uJ
    found = energy.find_counters("cpu", tmp_path)
    assert found.readable and [c.name for c in found.counters] == ["package-0", "dram"]
    assert found.source() == "RAPL package-0 + dram"
    reading = energy.Meter(found.counters).start()
    (z["pkg"] / "energy_uj").write_text("300\n")  # wrapped: 1000500 - 1000000 + 300 = 800 uJ
    (z["dram"] / "energy_uj").write_text("200700\n")  # 700 uJ
    (z["core"] / "energy_uj").write_text("999999999\n")  # inside the package: not added to it
    e = reading.stop()
    assert e.per_counter == {"RAPL package-0": pytest.approx(800e-6), "RAPL dram": pytest.approx(700e-6)}
    assert e.joules == pytest.approx(1500e-6) and e.seconds > 0 and e.watts == pytest.approx(e.joules / e.seconds)
    assert energy.delta_uj(10, 25, None) == 15
    with pytest.raises(ValueError, match="no wrap value"):
        energy.delta_uj(25, 10, None)


def test_no_readable_counter_says_why_and_measures_nothing(tmp_path, monkeypatch):
    missing = energy.find_counters("cpu", tmp_path / "absent")
    assert not missing.readable and missing.counters == []
    assert missing.reason() == (f"no readable counter: {tmp_path / 'absent'} does not exist: no powercap interface "
                                "(a VM, or a kernel without intel_rapl)")
    tmp_path.joinpath("empty").mkdir()
    assert "no RAPL package or dram zone under" in energy.find_counters("cpu", tmp_path / "empty").reason()
    # a zone whose energy_uj cannot be read (root-only on most kernels): named, with the error
    bad = _zone(tmp_path / "locked" / "intel-rapl:0", "package-0", 5)
    (bad / "energy_uj").unlink()
    (bad / "energy_uj").mkdir()  # reading it fails as an unreadable file does
    why = energy.find_counters("cpu", tmp_path / "locked").reason()
    assert why.startswith("no readable counter: RAPL zones not readable") and "intel-rapl:0 (package-0)" in why
    # the default root is the module's (the tests point it elsewhere)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "absent")
    assert not energy.find_counters("cpu").readable


def test_nvml_counters_on_a_cuda_device_and_why_not_without_nvidia_ml_py(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    found = energy.find_counters("cuda", tmp_path / "absent")
    assert "nvidia-ml-py is not installed" in found.reason()
    state = {"mj": 1000}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetTotalEnergyConsumption=lambda h: state["mj"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    found = energy.find_counters("cuda:0", tmp_path / "absent")
    assert [c.name for c in found.counters] == ["gpu0"]
    assert found.source() == "NVML gpu0 (not verified on a GPU)"
    r = energy.Meter(found.counters).start()
    state["mj"] = 3500
    assert r.stop().joules == pytest.approx(2.5)
    assert not energy.find_counters("cpu", tmp_path / "absent").readable  # the CPU bench reads no GPU


def test_idle_power_is_the_counters_over_a_rest(tmp_path):
    class Ticking:
        name, source, max_uj = "package-0", "RAPL", None

        def __init__(self):
            self.uj = 0

        def read_uj(self):
            self.uj += 1_000_000  # 1 J between two readings
            return self.uj

    idle = energy.idle_power(energy.Meter([Ticking()]), seconds=0.05)
    assert idle.joules == pytest.approx(1.0) and idle.seconds >= 0.05 and idle.watts <= 1.0 / 0.05
