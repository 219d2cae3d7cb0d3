"""How close the cudagraph engine's two hot paths run to the GPU's bounds (kind ``gpu_bounds``; the GPU check's
step ``bounds``), below the bench's level.

Per shape pair (``base``: flan-t5-base + roberta-base, ``large``: flan-t5-large + roberta-large; random weights
built from the configs, as the benches build them, on the device):

* **classifier**: the largest bucket (512 pairs x 128 tokens, 65,536 tokens) replayed as one CUDA graph, at bf16
  and fp32; its FLOPs counted from the shape (the products of every layer and the attention) over its median time:
  TFLOP/s and % of the GPU's dense peak at that precision; transformers' eager fp32 forward of the same batch
  beside it;
* **decoder step**: one step of 160 rows (8 prompts x K = 20, 64 encoder tokens, a 48-position cache) replayed as
  one CUDA graph, at bf16 and fp32, against its bandwidth floor: the bytes every step must read (the decoder's and
  output layer's weights, the self-attention cache, the prompts' cross-attention keys and values) over the GPU's
  memory bandwidth; the torch engine's eager step of the same rows beside it;
* the kernels of each (torch's profiler on the same step launched eagerly: how many, their summed GPU time, the
  ten that take the most), which tell a graph's time spent in kernels from the gaps between them.

Times are CUDA events around each replay, the median of ``reps`` after 3 warm-up replays. The peaks are the
datasheet figures of the GPU found (``breaknli_fast.bench.ceilings.DATASHEET``, dense, no sparsity); a plain bf16
product of 8192^3 and a device copy of 2 GiB are measured too, as the peaks this GPU reaches here. ``device =
"cpu"`` is the dry run (``shapes = "mini"``: the shipped mini models, perf_counter times, no peaks). The result file
is written after each part (``recorder.checkpoint``), so a step stopped at its cap keeps what it measured.

The operations and bytes are the package's analytic counts (``breaknli_fast.bench.roofline``: the same code the
bench's per-stage rooflines use), and each row carries the same ``roofline`` figures as a bench stage: operations,
bytes, operations per byte, which ceiling binds, the floor and the share of it reached.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from breaknli_fast.bench import roofline  # the package's analytic counts
from breaknli_fast.bench.ceilings import DATASHEET, datasheet  # noqa: F401 - the GPUs' peaks
from breaknli_fast.engines.timer import timer
from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, option

SHAPES = {"base": ("flan-t5-base", "roberta-base"), "large": ("flan-t5-large", "roberta-large"),
          "mini": ("mini-t5", "mini-nli")}
CLF_BUCKET = (512, 128)
DEC_ROWS = (8, 20, 64, 48)  # prompts, K, encoder tokens, cache positions


def measured_peaks(device: str, reps: int) -> dict[str, Any]:
    import torch

    if not device.startswith("cuda"):
        return {}
    t = timer(device)
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm = statistics.median(t(lambda: torch.mm(a, a), reps))
    x = torch.empty(2**30 // 2, dtype=torch.float32, device=device)  # 2 GiB
    y = torch.empty_like(x)
    cp = statistics.median(t(lambda: y.copy_(x), reps))
    return {"bf16_mm_8192_tflops": 2 * n**3 / mm / 1e12, "copy_2gib_tb_s": 2 * 2**31 / cp / 1e12}


def arch(model: str) -> roofline.Arch:
    a, why = roofline.arch_of(load_config(model))
    if a is None:
        raise ValueError(why)
    return a


def bound(name: str, counts: roofline.Counts, seconds: float, gpu: str | None, device: str,
          precision: str) -> dict[str, Any]:
    """The row's roofline, as a bench stage's (``breaknli_fast.bench.roofline.roofline_of``, the same JSON): the
    floor at the datasheet's peaks (``bench.ceilings.gpu_ceilings``: compute at the precision, HBM bandwidth),
    which binds, and the share of it reached; without a datasheet (the CPU dry run) the counts alone."""
    from breaknli_fast.bench.ceilings import gpu_ceilings
    from breaknli_fast.bench.types import to_json

    ceilings = gpu_ceilings(gpu, [(precision, m, k, n) for m, k, n, _ in counts.gemms], device) if gpu else None
    held = precision if ceilings is not None and ceilings.gemm else None
    return to_json(roofline.roofline_of([(name, counts)], precision, held, seconds, ceilings,
                                        None if held else "no datasheet peaks (a dry run)"))


def classifier_bound(model: str, device: str, precision: str, reps: int, peaks: dict[str, Any] | None,
                     bucket: tuple[int, int]) -> dict[str, Any]:
    import numpy as np
    import torch

    from breaknli_fast.engines import registry

    clf = registry.load_classifier("cudagraph", model, precision=precision, device=device)
    b, length = bucket
    length = min(length, clf.max_length)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, min(int(clf.net.word.shape[0]), 4000), size=(b, length)).astype(np.int64)
    ids[:, 0] = int(clf.tokenizer.cls_token_id or 0)
    feeds = {"ids": ids, "mask": np.ones((b, length), dtype=np.int64), "types": np.zeros((b, length), dtype=np.int64),
             "n": b, "key": (b, length), "ok": True}
    clf._run(feeds)  # captures the bucket's graph
    buf = clf.buffers[(b, length)]
    key = (b, length)

    def replay() -> None:
        clf.runner.run(key, lambda: buf["logits"].copy_(clf.net.forward(buf["ids"], buf["mask"], buf["types"])))

    secs = timer(device)(replay, reps)
    med = statistics.median(secs)
    counts = roofline.classifier_batch(arch(model), b, length, precision)
    flops = counts.flops
    try:
        with torch.inference_mode():
            profiled = kernel_profile(lambda: clf.net.forward(buf["ids"], buf["mask"], buf["types"]), device, reps=1)
    except Exception as e:  # noqa: BLE001 - informative only
        profiled = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    out = {"kernels": profiled, "bucket": [b, length], "precision": precision, "median_ms": med * 1000,
           "min_ms": min(secs) * 1000, "reps": len(secs), "tflop": flops / 1e12, "tflops": flops / med / 1e12,
           "graph": clf.info.details["graphs"]["captured"] > 0, "pairs_per_s": b / med,
           "roofline": bound("classifier batch", counts, med, peaks and peaks["gpu"], device, precision)}
    if peaks:
        peak = peaks["bf16_tflops"] if precision in ("bf16", "fp16") else peaks["fp32_tflops"]
        out["pct_of_peak"] = 100.0 * out["tflops"] / peak
    return out


def classifier_eager(model: str, device: str, reps: int, bucket: tuple[int, int]) -> dict[str, Any]:
    import torch

    from breaknli_fast.engines import registry

    ref = registry.load_classifier("torch", model, device=device)
    b, length = bucket
    length = min(length, ref.max_length)
    ids = torch.randint(5, 4000, (b, length), device=device)
    mask = torch.ones_like(ids)

    def fwd() -> None:
        with torch.inference_mode():
            ref.model(input_ids=ids, attention_mask=mask)

    secs = timer(device)(fwd, reps)
    med = statistics.median(secs)
    counts = roofline.classifier_batch(arch(model), b, length, "fp32")
    return {"bucket": [b, length], "precision": "fp32", "median_ms": med * 1000, "tflops": counts.flops / med / 1e12,
            "pairs_per_s": b / med}


def load_config(model: str) -> Any:
    from breaknli_fast.engines.model_info import load_config as lc

    return lc(model)


def kernel_profile(fn: Callable[[], None], device: str, reps: int = 3) -> dict[str, Any] | None:
    """The GPU kernels one call of ``fn`` runs (torch's profiler, CUDA activity): how many, their summed time, and
    the ten that take the most; None off CUDA or where the profiler records no kernel."""
    import torch

    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    if not kernels:
        return None
    by: dict[str, list[float]] = {}
    for e in kernels:
        by.setdefault(e.name[:80], []).append(e.time_range.elapsed_us())
    top = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:10]
    return {"kernels_per_call": len(kernels) / reps, "kernel_us_per_call": sum(sum(v) for v in by.values()) / reps,
            "top": [{"name": k, "calls": len(v) / reps, "us_per_call": sum(v) / reps} for k, v in top]}


def decoder_bound(model: str, device: str, precision: str, reps: int, peaks: dict[str, Any] | None) -> dict[str, Any]:
    import torch

    from breaknli_fast.backends.cudagraph.engine import span_of
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding

    gen = registry.load_generator("cudagraph", model, precision=precision, device=device)
    p, k, enc_len, steps = DEC_ROWS
    d = Decoding(max_new_tokens=steps, min_new_tokens=steps)
    ids = torch.randint(5, 4000, (p, enc_len))
    cfg = gen.config
    # the bucket's graph captured and its state filled by one whole call of these rows
    gen._decode(ids, torch.ones_like(ids), k, d, list(range(p)), False, int(cfg.decoder_start_token_id or 0),
                int(cfg.eos_token_id), int(gen.tokenizer.pad_token_id))
    state = gen._state(p, k, enc_len, steps)
    at = steps // 2  # a step half-way: it attends to the cache's first `span` positions
    span = span_of(at, steps)
    key = next((kk for kk in gen.runner.graphs if kk[:5] == (p, k, enc_len, span, steps)), None)

    def step() -> None:
        state.t.fill_(at)
        if key is not None:
            gen.runner.graphs[key].replay()
        else:
            gen.decoder.step(state, d, False, int(cfg.eos_token_id), int(gen.tokenizer.pad_token_id), span)

    with torch.inference_mode():
        secs = timer(device)(step, reps)
        eos, pad = int(cfg.eos_token_id), int(gen.tokenizer.pad_token_id)

        def eager() -> None:
            state.t.fill_(at)
            gen.decoder.step(state, d, False, eos, pad, span)

        try:  # the same step's kernels, launched one by one (a graph's replay runs the same kernels)
            profiled = kernel_profile(eager, device)
        except Exception as e:  # noqa: BLE001 - informative only
            profiled = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    med = statistics.median(secs)
    # what a step at position ``at`` must read (the cache positions up to it; the step reads its span's, the later
    # ones masked): the package's count from the model's sizes
    a = arch(model)
    nbytes = {k: v for k, v in roofline.decoder_step(a, state.rows, state.prompts, state.enc_len, at,
                                                     precision).items() if k != "flops"}
    step_counts = roofline.decoder_step_counts(a, state.rows, state.prompts, state.enc_len, at, precision)
    out = {"rows": p * k, "prompts": p, "k": k, "encoder_tokens": enc_len, "cache_positions": steps, "position": at,
           "span": span,
           "precision": precision, "median_ms": med * 1000, "min_ms": min(secs) * 1000, "reps": len(secs),
           "bytes": nbytes, "graph": key is not None, "kernels_note": "one replay = the whole step (decoder, output "
           "layer, top-k, warping, draw, bookkeeping)", "kernels": profiled,
           "roofline": bound("decoder step", step_counts, med, peaks and peaks["gpu"], device, precision)}
    if peaks:
        floor = nbytes["total"] / (peaks["hbm_tb_s"] * 1e12)
        out.update(floor_ms=floor * 1000, times_floor=med / floor)
    return out


def decoder_eager(model: str, device: str, reps: int) -> dict[str, Any]:
    import torch

    from breaknli_fast.engines import registry
    from breaknli_fast.engines.sampling import TorchStepper

    gen = registry.load_generator("torch", model, device=device)
    p, k, enc_len, steps = DEC_ROWS
    st = TorchStepper(gen.model)
    ids = torch.randint(5, 4000, (p, enc_len))
    st.start(ids, torch.ones_like(ids), k)
    tok = torch.full((p * k,), 5, dtype=torch.long)
    for _ in range(steps // 2):
        st.step(tok)
    past = st.past

    def step() -> None:
        st.past = past
        st.past.crop(steps // 2) if hasattr(st.past, "crop") else None
        st.step(tok)

    try:
        secs = timer(device)(step, max(5, reps // 2))
    except Exception as e:  # noqa: BLE001 - a cache without crop: the steps go on growing it
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    med = statistics.median(secs)
    return {"rows": p * k, "precision": "fp32", "median_ms": med * 1000, "reps": len(secs)}


@dataclass
class GpuBoundsConfig:
    device: str = option("cuda", help="cuda, cuda:N or cpu (a dry run)")
    shapes: Optional[str] = option(None, help="base, large and/or mini, comma-separated (default base,large on CUDA, "
                                              "mini on the CPU)")
    reps: int = option(20, min=1, max=10_000, why="replays of one step", help="timed replays (median)")
    cache_dir: Optional[str] = option(None, help="random-weight models (default: the bench's cache)")
    seed: int = option(0, help="the random weights' seed")


@dataclass
class GpuBoundsPayload:
    """Per shape pair, each hot path's figures (``classifier_bf16``, ``decoder_fp32``, ...: its time, rate or
    bound, kernels, or the error that stopped it), the datasheet's peaks and the peaks measured here."""

    device: str | None = None
    gpu: str | None = None
    datasheet: dict[str, Any] | None = None
    reps: int | None = None
    classifier_bucket: list[int] | None = None
    decoder_rows: list[int] | None = None
    shapes: dict[str, dict[str, Any]] | None = None
    measured_peaks: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class GpuBounds(Measurement):
    name = "gpu-bounds"
    summary = "the cudagraph engine's hot paths against the GPU's peak FLOP/s and memory bandwidth"
    kind = "gpu_bounds"
    config_class = GpuBoundsConfig
    payload_class = GpuBoundsPayload
    legacy_scripts = ("gpu_bounds.py",)

    def engines(self, config: GpuBoundsConfig) -> list[str]:
        return ["cudagraph", "torch"]

    def run(self, config: GpuBoundsConfig, recorder: Any) -> GpuBoundsPayload:
        import torch

        from breaknli_fast.bench.shapes import build_random_model
        from breaknli_fast.engines.cuda import prepare

        dev = config.device
        shapes = [s.strip() for s in (config.shapes or ("base,large" if dev.startswith("cuda") else "mini")).split(",")]
        bad = [s for s in shapes if s not in SHAPES]
        if bad:
            raise UserError(f"unknown shape {', '.join(bad)}; use {', '.join(SHAPES)}")
        prepare(dev)
        name = torch.cuda.get_device_name(0) if dev.startswith("cuda") else None
        peaks = datasheet(name)
        result = GpuBoundsPayload(device=dev, gpu=name, datasheet=peaks, reps=config.reps,
                                  classifier_bucket=list(CLF_BUCKET), decoder_rows=list(DEC_ROWS), shapes={})
        result.measured_peaks = measured_peaks(dev, config.reps)
        print(json.dumps({"gpu": name, "datasheet": peaks, "measured": result.measured_peaks}), flush=True)
        reps = config.reps if dev.startswith("cuda") else 2
        bucket = CLF_BUCKET if dev.startswith("cuda") else (8, 32)
        for shape in shapes:
            gen_name, clf_name = SHAPES[shape]
            if shape != "mini":
                gen_name = str(build_random_model(gen_name, config.cache_dir, seed=config.seed))
                clf_name = str(build_random_model(clf_name, config.cache_dir, seed=config.seed))
            part: dict[str, Any] = {"generator": SHAPES[shape][0], "classifier": SHAPES[shape][1]}
            result.shapes[shape] = part
            for what, fn in (("classifier_bf16", lambda: classifier_bound(clf_name, dev, "bf16", reps, peaks, bucket)),
                             # fp32 batches of 65,536 tokens take most of a second each: fewer replays
                             ("classifier_fp32", lambda: classifier_bound(clf_name, dev, "fp32", max(5, reps // 4),
                                                                          peaks, bucket)),
                             ("classifier_torch_fp32", lambda: classifier_eager(clf_name, dev, max(10, reps // 2),
                                                                                bucket)),
                             ("decoder_bf16", lambda: decoder_bound(gen_name, dev, "bf16", reps, peaks)),
                             ("decoder_fp32", lambda: decoder_bound(gen_name, dev, "fp32", reps, peaks)),
                             ("decoder_torch_fp32", lambda: decoder_eager(gen_name, dev, reps))):
                t0 = time.perf_counter()
                gc.collect()
                if dev.startswith("cuda"):
                    torch.cuda.empty_cache()
                try:
                    part[what] = fn()
                except Exception as e:  # noqa: BLE001 - recorded; the next measurement still runs
                    part[what] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"}
                part[what]["seconds"] = round(time.perf_counter() - t0, 2)
                print(json.dumps({"shape": shape, what: part[what]}), flush=True)
                recorder.checkpoint(result)
        return result
