"""The cudagraph engine's steps of the GPU check, as functions of the package: the GPU check runs them in one
call on a lent GPU (``python -m`` style through :func:`main`), and ``--device cpu`` on the shipped mini models is
their dry run (tests/test_gpu_check.py).

* ``fused-step``: one decoder step of 160 rows (8 prompts x K = 20, 64 encoder tokens, a 48-position cache: the
  bounds step's shape) replayed as one CUDA graph, the plain step (``fused=off``) beside the step written for
  fusion and compiled (``fused=compile``, :mod:`.fused`): its median time, the kernels it launches (torch's
  profiler on CUDA; on the CPU the compiled layer's kernels counted from the compiler's code), the bytes it must
  read and the time that takes at the measured copy bandwidth, the compile and capture seconds, and whether the
  two give the same tokens on the same call.
* ``natural-eos``: generation that stops at the end-of-sequence token (not forced to ``max_new_tokens`` as the
  real-shape benches force it): the torch engine at fp32 against the cudagraph engine at fp32 and bf16, rounds
  interleaved (A B C A B C ...), the median of each; lengths, the share of candidates ended by the token, and the
  candidates identical to torch fp32's. A random-weight T5 almost never draws its end-of-sequence token, so such a
  model's output row of that token is scaled first (:func:`eos_model`: the smallest factor whose greedy
  candidates average ``eos_target`` tokens, found by bisection on the device), which the result records; a
  trained model (the mini models) runs as it is.
* ``quantised``: the classifier at bf16 against ``fp8`` and ``int8`` (:mod:`.quant`) at the largest bucket
  (pairs per second, graph replays) and on the sample's pairs (logits against torch fp32, labels agreeing, a
  pair's logits alone against in the call, to the bit).

Each writes one JSON file (``--out``); models are names or folders, or shapes (``base``, ``large``) that the
caller's ``build`` turns into random-weight folders (the GPU check passes the bench's builder).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from breaknli_fast.engines.timer import timer

STEP_ROWS = (8, 20, 64, 48)  # prompts, K, encoder tokens, cache positions (the bounds step's decoder step)
SHAPES = {"mini": ("mini-t5", "mini-nli"), "base": ("flan-t5-base", "roberta-base"),
          "large": ("flan-t5-large", "roberta-large")}
CLF_BUCKET_CUDA, CLF_BUCKET_CPU = (512, 128), (16, 32)


# -- timing and kernels ------------------------------------------------------------------------------------------


def cuda_kernels(fn: Callable[[], Any], reps: int = 3) -> dict[str, Any] | None:
    """The CUDA kernels one call of ``fn`` launches (torch's profiler): how many, their summed time, the ten that
    take the most; None where the profiler records none."""
    import torch
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


def copy_bandwidth(device: str, reps: int = 10) -> float | None:
    """Bytes per second of a device-to-device copy of 1 GiB (read and written), the bandwidth a memory-bound
    step can reach here; None off CUDA."""
    import torch

    if not device.startswith("cuda"):
        return None
    x = torch.empty(2**28, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    sec = statistics.median(timer(device)(lambda: y.copy_(x), reps))
    del x, y
    return 2 * 2**30 / sec


def _error(e: BaseException) -> dict[str, str]:
    return {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"}


def _release(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# -- fused-step ------------------------------------------------------------------------------------------------

def step_bytes(dec: Any, state: Any, at: int) -> dict[str, float]:
    """Bytes one decoder step at position ``at`` must read: the decoder's weights and output layer, the
    self-attention cache up to that position, the prompts' cross-attention keys and values."""
    groups = (dec.w_qkv, dec.w_o, dec.w_q_cross, dec.w_o_cross, dec.w_in, dec.w_out, dec.ln_self, dec.ln_cross,
              dec.ln_ff, [dec.lm_head, dec.ln_final])
    weights = sum(t.numel() * t.element_size() for group in groups for t in group)
    cache = state.self_kv.numel() * state.self_kv.element_size() * (at + 1) / state.steps
    cross = state.cross.numel() * state.cross.element_size()
    return {"weights": float(weights), "self_cache_needed": float(cache), "cross_kv": float(cross),
            "total": float(weights + cache + cross)}


def fused_step(model: str, device: str, precision: str, fused: str, reps: int,
               rows: Sequence[int] = STEP_ROWS) -> dict[str, Any]:
    """One decoder step of the cudagraph generator (``fused`` mode) at ``rows`` (module notes), after one whole
    call of those rows (which captures the bucket's graphs); the call's tokens are returned for comparison."""
    import torch

    from breaknli_fast.backends.cudagraph.engine import span_of
    from breaknli_fast.backends.cudagraph.fused import step_kernels
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding

    t0 = time.perf_counter()
    gen = registry.load_generator("cudagraph", model, precision=precision, device=device, fused=fused)
    p, k, enc_len, steps = rows
    d = Decoding(max_new_tokens=steps, min_new_tokens=steps)
    ids = torch.randint(5, min(4000, gen.decoder.vocab), (p, enc_len), generator=torch.Generator().manual_seed(0))
    cfg = gen.config
    eos, pad = int(cfg.eos_token_id), int(gen.tokenizer.pad_token_id)
    t1 = time.perf_counter()
    tokens = gen._decode(ids, torch.ones_like(ids), k, d, list(range(p)), False, int(cfg.decoder_start_token_id or 0),
                         eos, pad)
    first_call = time.perf_counter() - t1
    state = gen._state(p, k, enc_len, math.ceil(steps / 16) * 16)
    at = steps // 2
    span = span_of(at, state.steps)
    key = next((kk for kk in gen.runner.graphs if kk[:5] == (p, k, enc_len, span, state.steps)), None)

    def eager() -> None:
        state.t.fill_(at)
        gen.decoder.step(state, d, False, eos, pad, span)

    def step() -> None:
        if key is None:
            eager()
        else:
            state.t.fill_(at)
            gen.runner.graphs[key].replay()

    with torch.inference_mode():
        secs = timer(device)(step, reps)
        if device.startswith("cuda"):
            try:  # the same step's kernels, launched one by one (a replay runs the same kernels)
                kernels = cuda_kernels(eager)
            except Exception as e:  # noqa: BLE001 - informative only
                kernels = _error(e)
        elif fused == "compile":
            kernels = step_kernels(gen.decoder, state, span)
        else:
            kernels = None
    med = statistics.median(secs)
    nbytes = step_bytes(gen.decoder, state, at)
    out = {"model": model, "precision": precision, "fused": gen.decoder.fused_state(), "rows": p * k, "prompts": p,
           "k": k, "encoder_tokens": enc_len, "cache_positions": steps, "position": at, "span": span,
           "graph": key is not None, "median_ms": med * 1000, "min_ms": min(secs) * 1000, "reps": len(secs),
           "bytes": nbytes, "kernels": kernels, "load_s": round(t1 - t0, 2),
           "first_call_s": round(first_call, 2), "capture_s": gen.runner.stats.capture_seconds,
           "tokens": tokens}
    del gen, state
    _release(device)
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Tokens two candidates share from their start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def run_fused_step(models: dict[str, str], device: str, precisions: Sequence[str], modes: Sequence[str],
                   reps: int, out: Path) -> dict[str, Any]:
    """:func:`fused_step` for every shape, precision and mode (``off`` first: the others' tokens are compared with
    its), the result file rewritten after each (a stopped step keeps what finished)."""
    bw = copy_bandwidth(device)
    result: dict[str, Any] = {"step": "fused-step", "device": device, "rows": list(STEP_ROWS), "reps": reps,
                              "copy_bytes_per_s": bw, "shapes": {}}
    for shape, model in models.items():
        part: dict[str, Any] = result["shapes"].setdefault(shape, {"generator": model})
        for precision in precisions:
            ref_tokens = None
            for mode in modes:
                name = f"{precision}_{mode}"
                t0 = time.perf_counter()
                try:
                    got = fused_step(model, device, precision, mode, reps)
                except Exception as e:  # noqa: BLE001 - recorded; the next measurement still runs
                    got = _error(e)
                    _release(device)
                tokens = got.pop("tokens", None)
                if tokens is not None:
                    if ref_tokens is None:
                        ref_tokens = tokens
                    flat = [r for rows in tokens for r in rows]
                    ref = [r for rows in ref_tokens for r in rows]
                    got["rows_identical_to_off_pct"] = 100.0 * sum(a == b for a, b in zip(flat, ref)) / max(1, len(ref))
                    got["mean_common_prefix_with_off"] = sum(common_prefix(a, b) for a, b in zip(flat, ref)) / max(1, len(ref))
                if bw and "bytes" in got:
                    got["floor_ms_at_copy_bandwidth"] = got["bytes"]["total"] / bw * 1000
                    got["times_floor_at_copy_bandwidth"] = got["median_ms"] / got["floor_ms_at_copy_bandwidth"]
                got["seconds"] = round(time.perf_counter() - t0, 2)
                part[name] = got
                print(json.dumps({"shape": shape, name: {k: v for k, v in got.items() if k != "kernels"}}), flush=True)
                out.write_text(json.dumps(result, indent=2) + "\n")
    return result


# -- natural-eos -----------------------------------------------------------------------------------------------

def eos_model(src: str, out_dir: Path, device: str, prompts: Sequence[str], target: float, max_new_tokens: int,
              iterations: int = 7) -> dict[str, Any]:
    """A copy of the T5 ``src`` in ``out_dir`` whose output row of the end-of-sequence token is scaled by the
    smallest factor (bisection over powers, ``iterations`` greedy generations of ``prompts`` on ``device``) whose
    greedy candidates average about ``target`` tokens of at most ``max_new_tokens``. Returns the factor and the
    lengths found."""
    import torch
    from transformers import AutoTokenizer

    from breaknli_fast.engines.compat import load_seq2seq
    from breaknli_fast.engines.model_info import load_config, resolve_model

    path = resolve_model(src)
    model = load_seq2seq(path, torch.float32, load_config(src)).to(device).eval()
    tok = AutoTokenizer.from_pretrained(path)
    eos = int(model.config.eos_token_id)
    row = model.lm_head.weight.data[eos].clone()
    enc = tok(list(prompts), return_tensors="pt", padding=True).to(device)

    def mean_length(factor: float) -> float:
        model.lm_head.weight.data[eos] = row * factor
        with torch.inference_mode():
            out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, num_beams=1)
        lengths = [(int((r[1:] == eos).nonzero()[0]) + 1) if bool((r[1:] == eos).any()) else max_new_tokens
                   for r in out]
        return sum(lengths) / len(lengths)

    tried: list[dict[str, float]] = []
    lo, hi = 0.0, 6.0  # log2 of the factor: 1x ... 64x
    for _ in range(iterations):
        mid = (lo + hi) / 2
        length = mean_length(2.0 ** mid)
        tried.append({"factor": 2.0 ** mid, "mean_greedy_length": length})
        if length > target:
            lo = mid
        else:
            hi = mid
    factor = 2.0 ** hi
    final = mean_length(factor)
    tried.append({"factor": factor, "mean_greedy_length": final})
    model.lm_head.weight.data[eos] = row * factor
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.to("cpu").save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    del model
    _release(device)
    return {"source": str(src), "factor": factor, "mean_greedy_length": final, "tried": tried, "target": target}


def natural_eos(model: str, device: str, engines: Sequence[str], prompts: Sequence[str], k: int,
                max_new_tokens: int, rounds: int, work: Path | None, biased: bool,
                eos_target: float = 20.0) -> dict[str, Any]:
    """The generators of ``engines`` (``engine:precision[:key=value]``) on ``prompts`` x ``k`` candidates,
    sampling with the project's defaults and ``max_new_tokens``, no minimum: ``rounds`` interleaved rounds after
    one warm-up call each (module notes)."""
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding

    result: dict[str, Any] = {"model": model, "prompts": len(prompts), "k": k, "max_new_tokens": max_new_tokens,
                              "rounds": rounds, "engines": {}}
    if biased:
        folder = (work or Path.cwd()) / "eos-model"
        result["eos_bias"] = eos_model(model, folder, device, list(prompts)[:8], eos_target, max_new_tokens)
        model = str(folder)
    d = Decoding(max_new_tokens=max_new_tokens)
    seeds = list(range(len(prompts)))
    gens: dict[str, Any] = {}
    for spec in engines:
        engine, precision, *opts = spec.split(":")
        kw = dict(o.split("=", 1) for o in opts)
        try:
            gens[spec] = registry.load_generator(engine, model, precision=precision, device=device, **kw)
            gens[spec].generate_ids(list(prompts), k, d, seeds)  # warm-up: graphs captured, kernels compiled
        except Exception as e:  # noqa: BLE001 - recorded; the other engines still run
            result["engines"][spec] = _error(e)
    times: dict[str, list[float]] = {s: [] for s in gens}
    outs: dict[str, Any] = {}
    for _ in range(rounds):
        for spec, gen in gens.items():
            sync = getattr(gen, "_synchronize", None)
            t0 = time.perf_counter()
            outs[spec] = gen.generate_ids(list(prompts), k, d, seeds)
            if sync:
                sync()
            times[spec].append(time.perf_counter() - t0)
    eos_id = None
    ref = outs.get(engines[0]) if engines else None
    for spec, ids in outs.items():
        gen = gens[spec]
        eos_id = int(gen.config.eos_token_id)
        rows = [r for per in ids for r in per]
        lengths = [len(r) for r in rows]
        ended = sum(1 for r in rows if r and r[-1] == eos_id)
        entry = {"median_s": statistics.median(times[spec]), "seconds": times[spec],
                 "candidates": len(rows), "mean_length": sum(lengths) / max(1, len(rows)),
                 "ended_by_eos_pct": 100.0 * ended / max(1, len(rows)),
                 "at_max_new_tokens_pct": 100.0 * sum(n >= max_new_tokens for n in lengths) / max(1, len(rows)),
                 "tokens_per_s": sum(lengths) / statistics.median(times[spec])}
        if ref is not None:
            flat_ref = [r for per in ref for r in per]
            entry["identical_to_first_pct"] = 100.0 * sum(a == b for a, b in zip(rows, flat_ref)) / max(1, len(rows))
        if ref is not None and spec != engines[0] and engines[0] in times:
            entry["speedup_vs_first"] = statistics.median(times[engines[0]]) / entry["median_s"]
        details = getattr(gen, "info", None)
        if details is not None and "graphs" in details.details:
            entry["graphs"] = {k_: details.details["graphs"][k_] for k_ in ("captured", "replays", "eager_runs")}
        result["engines"][spec] = entry
    result["reference"] = engines[0] if engines else None
    return result


# -- quantised -------------------------------------------------------------------------------------------------

def bucket_speed(clf: Any, device: str, bucket: tuple[int, int], reps: int) -> dict[str, Any]:
    """Pairs per second of the classifier's ``bucket`` (pairs, tokens), its graph replayed (random token ids,
    every position real)."""
    import numpy as np

    b, length = bucket
    length = min(length, clf.max_length)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, min(int(clf.net.word.shape[0]), 4000), size=(b, length)).astype(np.int64)
    feeds = {"ids": ids, "mask": np.ones((b, length), dtype=np.int64), "types": np.zeros((b, length), dtype=np.int64),
             "n": b, "key": (b, length), "ok": True}
    clf._run(feeds)  # captures the bucket's graph
    buf = clf.buffers[(b, length)]

    def replay() -> None:
        clf.runner.run((b, length), lambda: buf["logits"].copy_(clf.net.forward(buf["ids"], buf["mask"], buf["types"])))

    secs = timer(device)(replay, reps)
    med = statistics.median(secs)
    return {"bucket": [b, length], "median_ms": med * 1000, "pairs_per_s": b / med, "reps": len(secs),
            "graph": (b, length) in clf.runner.graphs}


def quantised_check(model: str, device: str, precisions: Sequence[str], reps: int, bucket: tuple[int, int],
                    n_pairs: int) -> dict[str, Any]:
    """The cudagraph classifier at each of ``precisions`` against torch fp32 on ``device``: on the sample's first
    ``n_pairs`` pairs, the largest logit difference and the labels agreeing; a pair's logits alone (the first 32)
    against in the call; the largest bucket's pairs per second. Each precision is loaded, measured and freed in
    turn."""
    import numpy as np

    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines import registry

    pairs = [(e.premise, e.hypothesis) for e in load_examples("sample", limit=n_pairs).examples]
    ref = registry.load_classifier("torch", model, device=device).classify(pairs)
    _release(device)
    result: dict[str, Any] = {"model": model, "pairs": len(pairs), "bucket": list(bucket), "precisions": {}}
    for precision in precisions:
        t0 = time.perf_counter()
        try:
            clf = registry.load_classifier("cudagraph", model, precision=precision, device=device)
            clf.set_reuse(False)
            got = clf.classify(pairs)
            alone = np.concatenate([clf.classify([p]).logits for p in pairs[:32]])
            entry = {"max_abs_logit_diff_vs_torch_fp32": float(np.abs(got.logits - ref.logits).max()),
                     "labels_agree_pct": 100.0 * float(np.mean(np.array(got.labels) == np.array(ref.labels))),
                     "alone_vs_call_max_abs_diff": float(np.abs(alone - got.logits[:32]).max()),
                     "compute": clf.info.details.get("compute"),
                     "speed": bucket_speed(clf, device, bucket, reps)}
            del clf
        except Exception as e:  # noqa: BLE001 - recorded; the next precision still runs
            entry = _error(e)
        _release(device)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        result["precisions"][precision] = entry
        print(json.dumps({precision: {k: v for k, v in entry.items() if k != "compute"}}), flush=True)
    speeds = {p: e["speed"]["pairs_per_s"] for p, e in result["precisions"].items() if "speed" in e}
    if "bf16" in speeds:
        result["speedup_vs_bf16"] = {p: v / speeds["bf16"] for p, v in speeds.items() if p != "bf16"}
    return result


# -- the command line ------------------------------------------------------------------------------------------

def _models(shapes: str, role: int, build: Callable[..., Any] | None, cache_dir: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for shape in (s.strip() for s in shapes.split(",") if s.strip()):
        if shape not in SHAPES:
            out[shape] = shape  # a model name or folder
            continue
        name = SHAPES[shape][role]
        if shape == "mini":
            out[shape] = name
        elif build is None:
            raise SystemExit(f"error: shape {shape!r} needs the random-weight builder (the GPU check passes "
                             "it); name a model folder instead")
        else:
            out[shape] = str(build(name, cache_dir, seed=0))
    return out


def _prompts(n: int) -> list[str]:
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.prompts import CONTRADICT_PROMPT

    return [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in load_examples("sample", limit=n).examples]


def main(argv: Sequence[str] | None = None, build: Callable[..., Any] | None = None) -> int:
    """``STEP --out FILE [--device D] [--shapes S] ...`` (module notes); exit 0 when the file was written."""
    ap = argparse.ArgumentParser(prog="cudagraph-check", description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=("fused-step", "natural-eos", "quantised"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default=None, help="base, large, mini or model folders, comma-separated (default: "
                    "base,large on CUDA, mini on the CPU; natural-eos and quantised: the first)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--precisions", default=None)
    ap.add_argument("--modes", default="off,compile")
    ap.add_argument("--engines", default="torch:fp32,cudagraph:fp32,cudagraph:bf16")
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eos-target", type=float, default=20.0)
    ap.add_argument("--pairs", type=int, default=512)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args(argv)
    cuda = a.device.startswith("cuda")
    shapes = a.shapes or ("base,large" if cuda else "mini")
    reps = a.reps if cuda else min(a.reps, 3)
    from breaknli_fast.engines.cuda import prepare

    prepare(a.device)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.step == "fused-step":
        models = _models(shapes, 0, build, a.cache_dir)
        precisions = [p for p in (a.precisions or "bf16").split(",") if p]
        run_fused_step(models, a.device, precisions, [m for m in a.modes.split(",") if m], reps, a.out)
    elif a.step == "natural-eos":
        shape, model = next(iter(_models(shapes.split(",")[0], 0, build, a.cache_dir).items()))
        n = a.prompts or (64 if cuda else 4)
        res = natural_eos(model, a.device, [e for e in a.engines.split(",") if e], _prompts(n),
                          a.k if cuda else min(a.k, 4), a.max_new_tokens, a.rounds, a.work or a.out.parent,
                          biased=shape not in ("mini",) and shape in SHAPES, eos_target=a.eos_target)
        res.update(step="natural-eos", device=a.device, shape=shape)
        a.out.write_text(json.dumps(res, indent=2) + "\n")
    else:
        shape, model = next(iter(_models(shapes.split(",")[0], 1, build, a.cache_dir).items()))
        precisions = [p for p in (a.precisions or "bf16,fp8,int8").split(",") if p]
        res = quantised_check(model, a.device, precisions, reps, CLF_BUCKET_CUDA if cuda else CLF_BUCKET_CPU,
                              a.pairs if cuda else min(a.pairs, 48))
        res.update(step="quantised", device=a.device, shape=shape)
        a.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
