"""The GPU check in one call, for a lent machine with a CUDA GPU and no network (kind ``gpu_check``; docs/stack.md,
"GPU"): many steps (tests, runs, benches, bounds) in one time budget, and their files collected.

    scripts/gpu_check.sh [--out DIR] [--device cuda|cuda:N|cpu] [--limit N] [--budget S] [--steps A,B,...]
                         [--order priority|listed] [--real-shapes SPEC|none] [--real-limit N]
                         [--bench-args "ARGS"] [--work DIR] [--cap-scale F] [--reference-background] [-- RUN_ARGS...]

(``breaknli-fast suite measure gpu-check ...`` where the package is installed; nothing needs to be: the machine's
own Python runs this checkout from PYTHONPATH.) The steps (:mod:`.gpu_steps`), each a function registered with
:func:`~.gpu_core.step` (its hard time cap, the least time worth starting it with, whether it is timed, whether it
needs the GPU and its place in the queue); each runs under its cap (its process group is stopped there) and is skipped, saying so, when less time is
left in ``budget`` than it needs. Built in, in the order ``--steps`` lists them:

  env                     versions, packages, the GPU, torch's TF32 defaults (env.json), nvidia-smi
  cpu-reference           torch fp32 on the CPU: the reference of the kernels; on CUDA it runs in the background on
                          the cores the GPU runs leave, and whatever it finished by its cap is compared
  cuda-tests              pytest -m cuda tests/test_cuda.py
  device-fp32             torch fp32 on --device: the reference of the precisions (TF32 off: engines/cuda.py)
  bench-mini              breaknli-fast bench --device D on the mini models: torch fp32 / bf16 / fp16 classifier
                          (generator fp32: T5 overflows in fp16) and the cudagraph engine at fp32 / bf16, parity
                          verdicts against torch fp32 on the device; its --limit is what the device-fp32 run's rate
                          fits into the step's cap (--limit as given where that run did not run)
  bench-real              random-weight real shapes (--real-shapes, default flan-t5-base + roberta-base; speed only):
                          torch fp32 eager against the cudagraph engine at fp32 and bf16 (--real-engines), the
                          end-to-end loop repeated (--real-repeats) and its median taken
  bench-large             the same on flan-t5-large + roberta-large (--large-shapes, --large-engines)
  bounds                  the gpu-bounds measurement: the cudagraph engine's largest classifier bucket against the
                          GPU's peak FLOP/s and its decoder step against its memory-bandwidth floor
  device-bf16             torch bf16 on --device
  device-fp16-classifier  the classifier at fp16, the generator at fp32, on --device
  parity                  the compare-runs measurement: device fp32 against the CPU reference (fp32 tolerances),
                          bf16 and fp16 against device fp32 (the bench's verdicts)
  fused-step, natural-eos, quantised
                          the cudagraph engine's own checks (breaknli_fast/backends/cudagraph/check.py, each one
                          JSON file): the decoder step written for fusion and compiled against the plain one (time,
                          kernels, bytes), generation ended by the end-of-sequence token at real shapes (torch fp32
                          against cudagraph fp32 / bf16, interleaved), the fp8 / int8 classifier against bf16
  parity-scale            breaknli-fast bench --probe accuracy --dataset taxinli on the mini models: torch fp32 against
                          cudagraph fp32, bf16 and fp8 on the device, every pair of TaxiNLI (10,071; --limit on the
                          CPU), the paired verdicts overall and per reasoning category (its 15 cells)

The timed steps (the benches) never run beside the background CPU reference: the untimed device runs go first while
it runs. At the end, whatever happened, at most 8 files are in ``out`` (default $OUT when set, else the scratch
folder's ``out``): gpu-check.json (the result file, unless ``--result`` names another), summary.md, gpu-check.log
and tarballs of the run directories and benches (runs-reference.tar.gz, runs-precisions.tar.gz, check.tar.gz), each
under 16 MiB. The work folder (``work``, default a new temporary folder) keeps everything.

``device = "cpu"`` runs every step on the CPU (a dry run; tests/test_gpu_check.py runs it with tiny limits). The
words after ``--`` go to every ``breaknli-fast run`` and ``bench`` (probe options such as --k 8); ``bench_args`` to
both benches only. The commit is BREAKNLI_FAST_COMMIT's where it is set, else git's. BREAKNLI_FAST_TF32=1 asks for
TF32 (recorded). Exit 0 when no step failed, 1 otherwise, 2 on a bad option.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from breaknli_fast.bench.types import BenchReport, to_json
from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, option
from breaknli_fast.suite.measurements.gpu_core import (
    _stop, Check, CUDAGRAPH_STEPS, DEFAULT_BUDGET, DEFAULT_LARGE_SHAPES, DEFAULT_REAL_SHAPES, LARGE_ENGINES,
    load_json, MAX_FILE, REAL_ENGINES, Record, RESERVE_S, run_rows, STEP_REGISTRY, Stopped)
# the built-in steps: importing the module registers them, in the order --steps lists them
from breaknli_fast.suite.measurements import gpu_steps  # noqa: F401
from breaknli_fast.suite.provenance import ROOT


def execute(c: Check) -> None:
    """The start steps in order, then the queue by priority (or as --steps lists them, ``--order listed``): a timed
    step never runs beside the background CPU reference (the untimed ones go first while it runs)."""
    wanted = set(c.args.steps)
    for name in STEP_REGISTRY:
        if name not in wanted:
            c.skip(name, "not in --steps")
    for s in STEP_REGISTRY.values():
        if s.start and s.name in wanted:
            s.run(c)
            if c.notes.get("no_gpu"):
                for g in STEP_REGISTRY.values():
                    if g.gpu and g.name in wanted:
                        wanted.discard(g.name)
                        c.skip(g.name, "torch sees no CUDA GPU")
    listed = {name: i for i, name in enumerate(c.args.steps)}
    rank = (lambda s: listed[s.name]) if c.args.order == "listed" else (lambda s: s.priority)
    queue = sorted((s for s in STEP_REGISTRY.values() if not s.start and s.name in wanted), key=rank)
    while queue:
        running = c.poll_background()
        pick = next((s for s in queue if not (running and s.timed)), None)
        if pick is None:  # only timed steps are left: wait for the CPU reference (its cap at most)
            c.say("waiting for the CPU reference before the timed steps")
            c.poll_background(wait=True)
            continue
        queue.remove(pick)
        if pick.after_reference and running:  # it compares the reference: wait for what it finished
            c.poll_background(wait=True)
        pick.run(c)
    c.poll_background(wait=True)


# -- the result -------------------------------------------------------------------------------------------------

def junit(path: Path) -> dict[str, Any] | None:
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    out: dict[str, Any] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    cases = []
    for case in suite.iter("testcase"):
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome, msg = tag, (el.get("message") or "")[:300]
                break
        cases.append({"name": case.get("name"), "outcome": outcome, "message": msg})
    out["cases"] = cases
    return out


def run_summary(run: Path) -> dict[str, Any]:
    cfg, rep = load_json(run / "config.json") or {}, load_json(run / "report.json") or {}
    eng = cfg.get("engine") or {}
    rows, records, done = run_rows(run)
    details = {role: (eng.get(f"{role}_details") or {}).get("details", {}) for role in ("classifier", "generator")}
    return {"engine": eng.get("name"), "device": eng.get("device"), "precision": eng.get("precision"),
            "classifier_precision": eng.get("classifier_precision"),
            "generator_precision": eng.get("generator_precision"),
            "threads": eng.get("threads"), "workers": eng.get("workers"), "examples": rows, "records": records,
            "finished": done, "throughput": rep.get("throughput"), "funnel": rep.get("funnel"),
            "tf32": {role: d.get("tf32") for role, d in details.items() if d.get("tf32") is not None} or None}


def _payload_of(path: Path) -> Any:
    """The payload of a measurement's result file in the work folder (None where it wrote none)."""
    doc = load_json(path)
    return doc.get("payload") if isinstance(doc, dict) else None


def payload(c: Check) -> dict[str, Any]:
    from breaknli_fast.engines.cuda import TF32_ENV  # torch-free module top
    from breaknli_fast.envinfo import COMMIT_ENV

    env = load_json(c.work / "env.json") or {}
    cuda = env.get("cuda") or {}
    runs = {d.name: run_summary(d) for d in sorted((c.work / "runs").glob("*")) if d.is_dir()}
    return {
        "device": c.args.device, "gpu": ", ".join(d["name"] for d in cuda.get("devices") or []) or None,
        "gpus": cuda.get("devices"), "torch": cuda.get("torch"), "torch_cuda_build": cuda.get("torch_cuda_build"),
        "limit": c.args.limit, "budget_s": c.args.budget, "took_s": round(c.elapsed(), 1),
        "steps_asked": list(c.args.steps), "real_shapes": c.args.real_shapes, "large_shapes": c.args.large_shapes,
        "run_args": list(c.args.run_args), "bench_args": c.args.bench_args,
        "commit_source": (COMMIT_ENV if os.environ.get(COMMIT_ENV, "").strip() else
                          "git" if (ROOT / ".git").exists() else None),
        "tf32": {"asked": os.environ.get(TF32_ENV), "as_found": cuda.get("tf32_as_found"),
                 "runs": {k: v["tf32"] for k, v in runs.items() if v.get("tf32")}},
        "package_path": env.get("package_path"),
        "optimum": env.get("optimum"),
        "steps": [to_json(r) for r in c.records],
        "environment": env.get("environment"), "distributions": env.get("distributions"),
        "cuda_tests": junit(c.work / "pytest-cuda.xml"),
        "runs": runs,
        "parity": {"kernels": _payload_of(c.work / "parity-cpu.json"),
                   "precisions": _payload_of(c.work / "parity-device.json")},
        "benches": {"mini": {"limit": c.notes.get("bench_mini_limit"), "bench": load_json(c.work / "bench-mini" /
                                                                                        "bench.json")},
                    "real": {"limit": c.args.real_limit, "bench": load_json(c.work / "bench-real" / "bench.json")},
                    "large": {"limit": c.args.real_limit, "bench": load_json(c.work / "bench-large" / "bench.json")}},
        "bounds": _payload_of(c.work / "bounds.json"),
        "cudagraph": {name: load_json(c.work / f"{name}.json") for name in CUDAGRAPH_STEPS},
        "parity_scale": load_json(c.work / "bench-parity" / "bench.json"),
        "work": str(c.work),
    }


BUNDLES = {  # tarball -> paths under the work folder
    "runs-reference.tar.gz": ["runs/reference-cpu-torch-fp32", "runs/device-*-torch-fp32"],
    "runs-precisions.tar.gz": ["runs/device-*-torch-bf16", "runs/device-*-torch-fp16-classifier"],
    "check.tar.gz": ["env.json", "nvidia-smi.txt", "pytest-cuda.xml", "parity-*.json", "logs", "bench-mini",
                     "bench-real", "bench-large", "bounds.json", "summary.md", "fused-step.json", "natural-eos.json",
                     "quantised.json", "bench-parity"],
}


def pack(work: Path, out: Path) -> dict[str, Any]:
    """Each bundle as one tar.gz under :data:`MAX_FILE`; where one is larger, its largest files are left out until
    it fits (named in the result)."""
    done: dict[str, Any] = {}
    for name, patterns in BUNDLES.items():
        members = sorted({p for pat in patterns for p in work.glob(pat)})
        files = sorted((f for m in members for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()),
                       key=lambda f: f.stat().st_size)
        if not files:
            continue
        left_out: list[str] = []
        while True:
            target = out / name
            with tarfile.open(target, "w:gz", compresslevel=6) as tar:
                for f in files:
                    tar.add(f, arcname=f.relative_to(work).as_posix())
            if target.stat().st_size <= MAX_FILE or not files:
                break
            left_out.append(files.pop().relative_to(work).as_posix())
        done[name] = {"bytes": target.stat().st_size, "files": len(files), "left_out": left_out}
    return done


def summary(c: Check, body: dict[str, Any], commit: str | None) -> str:
    from breaknli_fast.bench.types import from_json
    from breaknli_fast.suite.measurements.gpu_report import gpu_check_body

    lines = ["# GPU check", "",
             f"- device `{body['device']}` ({body.get('gpu') or 'no GPU'}), torch {body.get('torch')}; "
             f"examples per run: {body['limit'] or 'all'}; budget {body['budget_s']}s; took {body['took_s']:.0f}s",
             f"- commit {commit} (from {body.get('commit_source')})" if commit else
             "- commit unknown: no .git here and BREAKNLI_FAST_COMMIT is not set",
             f"- checkout `{ROOT}` (breaknli_fast imported from `{body.get('package_path')}`); work folder "
             f"`{c.work}`",
             f"- files in `{c.out}`: gpu-check.json (the result file), summary.md, gpu-check.log, "
             + ", ".join(BUNDLES), "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    for r in c.records:
        lines.append(f"| {r.step} | {r.status} | {r.seconds:.0f} | {r.detail.replace('|', '/')} |")
    lines += ["", gpu_check_body(from_json(GpuCheckPayload, body))]
    return "\n".join(lines).rstrip() + "\n"


def finish(c: Check, commit: str | None) -> tuple[dict[str, Any], bool]:
    """The payload, summary.md, the tarballs and the log in ``out``; and whether anything failed."""
    if c.bg is not None:
        c.poll_background(wait=True)
    failed = [r.step for r in c.records if r.status == "failed"]
    c.say(f"finished in {c.elapsed():.0f}s: " + (f"failed: {', '.join(failed)}" if failed else "no step failed"))
    # each part guarded: whatever breaks here, the result file and the log still come back
    problems: list[str] = []
    try:
        body = payload(c)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the payload: {type(e).__name__}: {e}")
        body = {"device": c.args.device, "steps": [to_json(r) for r in c.records]}
    try:
        text = summary(c, body, commit)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the summary: {type(e).__name__}: {e}")
        text = "# GPU check\n\n" + "\n".join(f"- {r.step}: {r.status} {r.detail}" for r in c.records) + "\n"
    (c.work / "summary.md").write_text(text)
    try:
        body["files"] = pack(c.work, c.out)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the tarballs: {type(e).__name__}: {e}")
    for p in problems:
        c.say(f"writing {p}")
    body["problems"] = problems
    for name in ("summary.md", "gpu-check.log"):
        (c.out / name).write_bytes((c.work / name).read_bytes())
    print(text)
    return body, bool(failed or problems)


# -- the measurement ----------------------------------------------------------------------------------------------

@dataclass
class GpuCheckConfig:
    out: Optional[str] = option(None, help="where the (at most 8) files go (default: $OUT when set, else the scratch "
                                           "folder's out)")
    work: Optional[str] = option(None, help="the run directories, benches and logs (default: a new temporary folder)")
    device: str = option("cuda", help="cuda, cuda:N or cpu (a dry run)")
    limit: int = option(0, min=0, help="examples of every run, and bench-mini's most (0 = all 2,724 of the embedded "
                                       "sample)")
    budget: int = option(DEFAULT_BUDGET, min=RESERVE_S + 10, max=86_400, why="a day",
                         help=f"seconds for the whole check ({RESERVE_S} of them kept for the files at the end)")
    steps: str = option("", help="the steps to run, comma-separated (default: all)")
    order: str = option("priority", help="the queue after the start steps: priority (each step's place, the "
                                         "default) or listed (the order --steps gives, so that what matters most "
                                         "runs first in a short budget)")
    real_shapes: Optional[str] = option(None, help=f"bench-real's --random-weights (default {DEFAULT_REAL_SHAPES} on "
                                                   "CUDA, none on the CPU)")
    real_limit: int = option(64, min=1, help="bench-real's and bench-large's --limit")
    real_engines: str = option(REAL_ENGINES, help="bench-real's --engines")
    real_repeats: int = option(3, min=1, max=100, why="docs/limits.md: more only lengthens the bench",
                               help="the real-shape benches' end-to-end --repeats")
    large_shapes: Optional[str] = option(None, help=f"bench-large's --random-weights (default {DEFAULT_LARGE_SHAPES} "
                                                    "on CUDA, none on the CPU)")
    large_engines: str = option(LARGE_ENGINES, help="bench-large's --engines")
    bound_shapes: Optional[str] = option(None, help="the bounds step's shapes: base, large, mini (default base,large "
                                                    "on CUDA, mini on the CPU)")
    bench_args: str = option("", help="more options for both benches, e.g. \"--warmup 0\"")
    cap_scale: float = option(1.0, min=0.0, max=100.0, why="a hundred times the GPU's caps",
                              help="multiply every step's cap by this (a slow or busy machine's dry run)")
    reference_background: bool = option(False, help="run the CPU reference in the background with --device cpu too "
                                                    "(as on CUDA; for the tests)")
    run_args: tuple[str, ...] = option((), flag="--run-arg",
                                       help="one more argument of every run and bench (repeatable; the words after "
                                            "-- on the command line)")


@dataclass
class GpuBench:
    """One bench of the check: its ``--limit`` (and why) and its bench.json."""

    limit: Any = None
    bench: BenchReport | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GpuCheckPayload:
    device: str | None = None
    gpu: str | None = None
    gpus: list[dict[str, Any]] | None = None
    torch: str | None = None
    torch_cuda_build: str | None = None
    limit: int | None = None
    budget_s: int | None = None
    took_s: float | None = None
    steps_asked: list[str] | None = None
    real_shapes: str | None = None
    large_shapes: str | None = None
    run_args: list[str] | None = None
    bench_args: str | None = None
    commit_source: str | None = None
    tf32: dict[str, Any] | None = None
    package_path: str | None = None
    optimum: bool | None = None
    steps: list[Record] | None = None
    environment: dict[str, Any] | None = None
    distributions: list[str] | None = None
    cuda_tests: dict[str, Any] | None = None  # the junit of tests/test_cuda.py: tests, failures, ..., cases
    runs: dict[str, dict[str, Any]] | None = None  # run directory -> run_summary()
    parity: dict[str, Any] | None = None  # kernels / precisions: the compare-runs payloads
    benches: dict[str, GpuBench] | None = None
    bounds: dict[str, Any] | None = None  # the gpu-bounds payload
    cudagraph: dict[str, Any] | None = None  # step -> the cudagraph engine's check's JSON (backends/cudagraph/check.py)
    parity_scale: BenchReport | None = None  # the parity-scale step's bench.json
    work: str | None = None
    files: dict[str, Any] | None = None
    problems: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class GpuCheck(Measurement):
    name = "gpu-check"
    summary = "the GPU check: CUDA tests, runs, benches and bounds in one time budget on a lent GPU"
    kind = "gpu_check"
    config_class = GpuCheckConfig
    payload_class = GpuCheckPayload
    legacy_scripts = ("gpu_check.sh",)
    scratch_flags = ("--out", "--work")
    remainder = "run_arg"

    def config(self, values: Any) -> GpuCheckConfig:
        c: GpuCheckConfig = super().config(values)
        if not re.fullmatch(r"cpu|cuda(:\d+)?", c.device):
            raise UserError(f"--device must be cpu or cuda[:N], not {c.device}")
        if c.cap_scale <= 0:
            raise UserError("--cap-scale must be > 0")
        if c.order not in ("priority", "listed"):
            raise UserError(f"--order must be priority or listed, not {c.order}")
        names = [s.strip() for s in c.steps.split(",") if s.strip()] if c.steps else list(STEP_REGISTRY)
        bad = [s for s in names if s not in STEP_REGISTRY]
        if bad or not names:
            raise UserError(f"unknown step {', '.join(bad) or '(none given)'}; the steps: {', '.join(STEP_REGISTRY)}")
        try:
            shlex.split(c.bench_args)
        except ValueError as e:
            raise UserError(f"--bench-args: {e}") from None
        c.steps = ",".join(names)
        if c.real_shapes is None:
            c.real_shapes = "none" if c.device == "cpu" else DEFAULT_REAL_SHAPES
        if c.large_shapes is None:
            c.large_shapes = "none" if c.device == "cpu" else DEFAULT_LARGE_SHAPES
        return c

    def requirements(self, config: GpuCheckConfig) -> tuple[list[str], list[str]]:
        return (["cuda"] if config.device.startswith("cuda") else []), []

    def default_result(self, config: GpuCheckConfig, work: Path) -> Path:
        return self._out(config, work) / "gpu-check.json"

    @staticmethod
    def _out(config: GpuCheckConfig, work: Path) -> Path:
        return Path(config.out or os.environ.get("OUT") or work / "out")

    def run(self, config: GpuCheckConfig, recorder: Any) -> GpuCheckPayload:
        from breaknli_fast.bench.types import from_json

        out = self._out(config, recorder.work)
        try:
            out.mkdir(parents=True, exist_ok=True)
            work = Path(config.work) if config.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
            (work / "logs").mkdir(parents=True, exist_ok=True)
            (work / "runs").mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the output folders: {e}") from None
        args = _Args(config)
        c = Check(args, out.resolve(), work.resolve(), sys.executable)
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        c.say(f"checkout {ROOT}, out {c.out}, work {c.work}, device {config.device}, limit {config.limit or 'all'}, "
              f"budget {config.budget}s, python {c.py}")
        try:
            execute(c)
        except Stopped as e:
            c.poll_background(stop_now=f"stopped by {e}")
            c.record(Record("check", "failed", f"stopped by {e}: the files hold what finished"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the files are written whatever comes now
        body, failed = finish(c, recorder.commit)
        recorder.exit_code = 1 if failed else 0
        return from_json(GpuCheckPayload, body)


class _Args:
    """The config as the check reads it (``steps`` a list)."""

    def __init__(self, config: GpuCheckConfig):
        self.__dict__.update(vars(config))
        self.steps = [s for s in config.steps.split(",") if s]
        self.run_args = list(config.run_args)


from breaknli_fast.suite.measurements.gpu_report import SECTIONS  # noqa: E402 - the renderers read the payload type

GpuCheck.sections = SECTIONS
