"""Batch invariance on an Intel CPU, on any x86 machine: the torch engines' CPU paths run under QEMU's user-mode
emulator as an Intel Haswell (GenuineIntel, AVX2, no AVX-512 / BF16), where MKL takes its Intel code paths. There,
without MKL's strict reproducibility mode, a row's fp32 sums depend on how many rows share the product (the
engines' batch invariance fails); the package's default (``MKL_CBWR=AUTO,STRICT``, set at import) fixes it.

Needs ``qemu-x86_64`` (Debian's ``qemu-user``; ``.ci/run`` installs it); skipped where absent."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

QEMU = shutil.which("qemu-x86_64")
CPU = "Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid"  # features QEMU's TCG lacks, dropped (no warnings)
ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the emulated Intel CPU is an x86_64 one"),
    pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 is not installed (Debian: apt-get install qemu-user): "
                                            "an Intel CPU's MKL paths cannot be emulated here"),
]

LINEAR = textwrap.dedent("""
    import sys
    import breaknli_fast  # sets MKL_CBWR unless the environment has it
    import torch
    import torch.nn.functional as F
    from breaknli_fast.engines.blas import mkl_reproducibility
    torch.set_num_threads(2)
    torch.manual_seed(0)
    x, w, b = torch.randn(1280, 1024), torch.randn(256, 1024), torch.randn(256)
    full = F.linear(x, w, b)
    rows = [m for m in (8, 16, 24, 32, 64, 128) if not torch.equal(F.linear(x[:m], w, b), full[:m])]
    print(torch.backends.cpu.get_cpu_capability(), mkl_reproducibility()["strict"], rows)
""")


def _emulated(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([QEMU, "-cpu", CPU, sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="2", **extra)
    return env


def test_the_emulated_intel_cpu_needs_strict_mode_and_the_package_sets_it():
    """Without strict mode (``MKL_CBWR=AUTO`` kept by the package) rows of multiples of 8 differ alone and among
    1,280 (the Intel path); with the package's default they are equal to the bit."""
    loose = _emulated(["-c", LINEAR], _env(MKL_CBWR="AUTO"), 300)
    assert loose.returncode == 0, loose.stderr[-2000:]
    capability, strict, rows = loose.stdout.split(maxsplit=2)
    assert capability == "AVX2" and strict == "False"
    if rows.strip() == "[]":
        pytest.skip("this MKL sums a row alike whatever the row count on the emulated Intel CPU: nothing to show")
    default = _emulated(["-c", LINEAR], _env(), 300)
    assert default.returncode == 0, default.stderr[-2000:]
    assert default.stdout.split(maxsplit=2)[1:] == ["True", "[]\n"], default.stdout


def test_the_torch_engines_are_batch_invariant_on_the_emulated_intel_cpu(tmp_path):
    """tests/test_batch_independence.py's torch and cudagraph cases (every precision on the CPU; the generators'
    greedy decoding, whose products sampling shares) under the emulated Intel CPU; not the cudagraph step compiled
    by torch.compile, whose C++ the host's compiler builds for the host's CPU, not the emulated one."""
    r = _emulated(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
                   "tests/test_batch_independence.py", "-k", "(torch or cudagraph) and not compile and not sampling"],
                  _env(), 900)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail


def test_openvino_int8_is_refused_or_invariant_on_the_emulated_avx2_cpu(tmp_path):
    """OpenVINO's int8 classifier and masked LM on the emulated AVX2 CPU (no VNNI): each export is judged there and
    refused where a pair's answer depends on its batch (the test then skips it, saying so), never used when it does.
    The package reads the CPU's flags from /proc/cpuinfo, which QEMU passes through from the host: the flags are
    given as the emulated CPU's."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed: pip install 'breaknli-fast[openvino]'")
    r = _emulated(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
                   "tests/test_batch_independence.py", "-k", "openvino and int8 and (pair or item)"],
                  _env(BREAKNLI_FAST_CPU_FLAGS="avx2 fma"), 900)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert "failed" not in tail and ("passed" in tail or "skipped" in tail)
    for line in tail.splitlines():
        if line.startswith("SKIPPED"):
            assert "refused on this CPU without VNNI, as documented" in line, line
