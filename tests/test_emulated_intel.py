"""Batch invariance on an Intel CPU, on any x86 machine: the torch engines' CPU paths run under QEMU's user-mode
emulator as an Intel Haswell (GenuineIntel, AVX2, no AVX-512 / BF16), where MKL takes its Intel code paths. There,
without MKL's strict reproducibility mode, a row's fp32 sums depend on how many rows share the product (the
engines' batch invariance fails); the package's default (``MKL_CBWR=AUTO,STRICT``, set at import) fixes it. ONNX
Runtime's and OpenVINO's int8 run there on their kernels for a CPU without VNNI.

Needs ``qemu-x86_64`` (Debian's ``qemu-user``; ``.ci/run`` installs it); skipped where absent."""

from __future__ import annotations

import importlib.util
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


class _Emulated:
    """One command under the emulated CPU, started now and awaited by :meth:`result` (QEMU's user mode runs this
    workload on about one host core, so the module's commands run side by side: the module takes about the time of
    its longest command instead of their sum).

    A command killed by a signal runs once more, alone: QEMU's user mode itself crashes now and then with a
    multi-threaded runtime inside (the OpenVINO command died of SIGSEGV in one CI run of this module, beside the
    three others, and passed in the other CI runs and in two runs alone). An answer the command checks is never retried:
    a failed assertion exits with a status, not a signal; a second crash fails the test, with both crashes' output."""

    def __init__(self, args: list[str], env: dict[str, str], timeout: float):
        self.timeout, self._args, self._env = timeout, args, env
        self.proc = self._start()
        self._done: subprocess.CompletedProcess | None = None

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([QEMU, "-cpu", CPU, sys.executable, *self._args], cwd=ROOT, env=self._env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _wait(self) -> subprocess.CompletedProcess:
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the emulated command ran past {self.timeout:.0f} s: {(out + err)[-2000:]}")
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def result(self) -> subprocess.CompletedProcess:
        if self._done is None:
            done = self._wait()
            if done.returncode < 0:  # killed by a signal: the emulator's crash (class notes)
                first = done
                self.proc = self._start()
                done = self._wait()
                if done.returncode < 0:
                    at = first.stderr.find("Fatal Python error")  # Python's own report, else the output's tail
                    fatal = first.stderr[at:][:1500] if at >= 0 else first.stderr[-1500:]
                    done.stderr += f"\n[the first run died of signal {-first.returncode} too:]\n{fatal}"
            self._done = done
        return self._done


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="2", **extra)
    return env


# the emulated commands of each test (started together by the ``emulated`` fixture)
NEEDS = {"test_the_emulated_intel_cpu_needs_strict_mode_and_the_package_sets_it": ("linear-loose", "linear-default"),
         "test_the_torch_engines_are_batch_invariant_on_the_emulated_intel_cpu": ("torch",),
         "test_openvino_int8_is_refused_or_invariant_on_the_emulated_avx2_cpu": ("openvino",),
         "test_ort_int8_is_exact_and_batch_invariant_on_the_emulated_avx2_cpu": ("ort",)}


@pytest.fixture(scope="module")
def emulated(request, tmp_path_factory):
    """The emulated commands of the module's selected tests, all started at once (each test awaits its own)."""
    base = tmp_path_factory.mktemp("emulated")
    selected = {item.originalname for item in request.session.items if item.module is request.module}
    wanted = {k for name in selected for k in NEEDS.get(name, ())}
    if importlib.util.find_spec("openvino") is None:
        wanted.discard("openvino")  # its test skips, saying why
    if importlib.util.find_spec("onnxruntime") is None:
        wanted.discard("ort")
    commands = {
        "linear-loose": lambda: _Emulated(["-c", LINEAR], _env(MKL_CBWR="AUTO"), 300),
        "linear-default": lambda: _Emulated(["-c", LINEAR], _env(), 300),
        "torch": lambda: _Emulated(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(base / "torch"),
                                    "tests/test_batch_independence.py", "-k",
                                    "(torch or cudagraph) and not compile and not sampling"], _env(), 900),
        "openvino": lambda: _Emulated(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--basetemp",
                                       str(base / "openvino"), "tests/test_batch_independence.py", "-k",
                                       "openvino and int8 and (pair or item)"],
                                      _env(BREAKNLI_FAST_CPU_FLAGS="avx2 fma"), 900),
        "ort": lambda: _Emulated(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(base / "ort"),
                                  "tests/test_batch_independence.py", "tests/test_ort.py", "-k",
                                  "(ort and int8) or per_row_int8_graph"],
                                 _env(BREAKNLI_FAST_CPU_FLAGS="avx2 fma"), 900),
    }
    runs = {k: start() for k, start in commands.items() if k in wanted}
    yield runs
    for r in runs.values():  # a test that failed early leaves nothing running
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.communicate()


def test_the_emulated_intel_cpu_needs_strict_mode_and_the_package_sets_it(emulated):
    """Without strict mode (``MKL_CBWR=AUTO`` kept by the package) rows of multiples of 8 differ alone and among
    1,280 (the Intel path); with the package's default they are equal to the bit."""
    loose = emulated["linear-loose"].result()
    assert loose.returncode == 0, loose.stderr[-2000:]
    capability, strict, rows = loose.stdout.split(maxsplit=2)
    assert capability == "AVX2" and strict == "False"
    if rows.strip() == "[]":
        pytest.skip("this MKL sums a row alike whatever the row count on the emulated Intel CPU: nothing to show")
    default = emulated["linear-default"].result()
    assert default.returncode == 0, default.stderr[-2000:]
    assert default.stdout.split(maxsplit=2)[1:] == ["True", "[]\n"], default.stdout


def test_the_torch_engines_are_batch_invariant_on_the_emulated_intel_cpu(emulated):
    """tests/test_batch_independence.py's torch and cudagraph cases (every precision on the CPU; the generators'
    greedy decoding, whose products sampling shares) under the emulated Intel CPU; not the cudagraph step compiled
    by torch.compile, whose C++ the host's compiler builds for the host's CPU, not the emulated one."""
    r = emulated["torch"].result()
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail


def test_openvino_int8_is_refused_or_invariant_on_the_emulated_avx2_cpu(emulated):
    """OpenVINO's int8 classifier and masked LM on the emulated AVX2 CPU (no VNNI): each export is judged there and
    refused where a pair's answer depends on its batch (the test then skips it, saying so), never used when it does.
    The package reads the CPU's flags from /proc/cpuinfo, which QEMU passes through from the host: the flags are
    given as the emulated CPU's."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed: pip install 'breaknli-fast[openvino]'")
    r = emulated["openvino"].result()
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert "failed" not in tail and ("passed" in tail or "skipped" in tail)
    for line in tail.splitlines():
        if line.startswith("SKIPPED"):
            assert "refused on this CPU without VNNI, as documented" in line, line


def test_ort_int8_is_exact_and_batch_invariant_on_the_emulated_avx2_cpu(emulated):
    """ONNX Runtime's per-row int8 on the emulated AVX2 CPU (no VNNI), where the engines' sessions take ONNX Runtime's
    u8 x u8 kernels (``session.x64quantprecision``, which rewrites every product's int8 weights, the
    ``MatMulIntegerToFloat`` ones included): the graph computes its scheme to the bit, and the classifier's, the
    generator's and the masked LM's answers do not depend on their batch."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install 'breaknli-fast[onnx]'")
    r = emulated["ort"].result()
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail and "skipped" not in tail
