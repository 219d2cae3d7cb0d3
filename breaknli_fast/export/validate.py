"""Judging an export against the torch fp32 reference, before it is declared a success: the tolerances, the check
of the figures against them, and the figures every backend measures the same way, through the engine contract.

* Classifiers (:func:`classifier_figures`): the backend's classifier over the export and the torch engine at fp32
  on the CPU classify the same pairs (each in batches of :data:`BATCH`): max / mean |Δ logit| in the canonical
  label order, label (argmax) agreement %, non-finite outputs.
* Masked language models (:func:`masked_lm_figures`): on masked pairs (:func:`masked_items`: the longest word of
  each hypothesis masked wherever it occurs in the pair), the top-10 whole-word suggestions against torch fp32's:
  top-1 agreement % (``agreement``), the share of torch's top 10 that the export's top 10 holds
  (``topk_agreement``), max |Δ log-probability| over the suggestions both give, non-finite outputs.
* Generators (:func:`greedy_figures`): greedy decoding of generator prompts through the contract
  (``generate_ids``), token agreement % position by position and identical sequences.

A backend's exporter adds what only it can measure (the ort backend: a text-to-text model's first-step logits
over the whole vocabulary). The reference is loaded through the engine registry; nothing here imports a backend.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from breaknli_fast.engines import registry
from breaknli_fast.engines.base import MASK, Decoding, derive_seed
from breaknli_fast.export.errors import ExportError
from breaknli_fast.prompts import CONTRADICT_PROMPT

Pair = tuple[str, str]

TOLERANCE_KEYS = ("max_abs_logit", "min_agreement", "min_token_agreement", "min_topk_agreement", "max_nonfinite")

# (kind, precision) -> defaults; None disables a check (the figure is still reported).
DEFAULT_TOLERANCES: dict[tuple[str, str], dict[str, float | None]] = {
    ("seq-cls", "fp32"): {"max_abs_logit": 1e-4, "min_agreement": 100.0, "max_nonfinite": 0},
    ("seq-cls", "fp16"): {"max_abs_logit": 2e-2, "min_agreement": 99.0, "max_nonfinite": 0},
    ("seq-cls", "int8"): {"max_abs_logit": None, "min_agreement": 95.0, "max_nonfinite": 0},
    ("seq2seq", "fp32"): {"max_abs_logit": 1e-3, "min_agreement": 100.0, "min_token_agreement": 100.0, "max_nonfinite": 0},
    ("seq2seq", "fp16"): {"max_abs_logit": None, "min_agreement": 95.0, "min_token_agreement": 90.0, "max_nonfinite": 0},
    ("seq2seq", "int8"): {"max_abs_logit": None, "min_agreement": 90.0, "min_token_agreement": 70.0, "max_nonfinite": 0},
    # masked LMs: max_abs_logit is in log-probability units; min_agreement is top-1 agreement, min_topk_agreement
    # the share of torch's top MLM_TOP_K suggestions found in the export's
    ("mlm", "fp32"): {"max_abs_logit": 1e-3, "min_agreement": 98.0, "min_topk_agreement": 95.0, "max_nonfinite": 0},
    ("mlm", "fp16"): {"max_abs_logit": None, "min_agreement": 90.0, "min_topk_agreement": 85.0, "max_nonfinite": 0},
    ("mlm", "int8"): {"max_abs_logit": None, "min_agreement": 85.0, "min_topk_agreement": 80.0, "max_nonfinite": 0},
}
MLM_TOP_K = 10
GEN_PROMPTS_MAX = 8
GEN_MAX_NEW_TOKENS = 20
BATCH = 16


def check_tolerance_values(overrides: Mapping[str, Any] | None) -> None:
    """One line for a tolerance that would judge nothing: not a number, ``nan`` / ``inf`` (``nan`` compares false,
    so "≤ nan" would pass every export), a negative max |Δ logit| or an agreement outside 0-100 %."""
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ExportError(f"tolerance {k} must be a number, not {v!r}") from None
        if not math.isfinite(x):
            raise ExportError(f"tolerance {k} must be a finite number, not {v}")
        if k == "max_abs_logit" and x < 0:
            raise ExportError(f"tolerance {k} must be at least 0, not {x:g}")
        if k != "max_abs_logit" and not 0 <= x <= 100:
            raise ExportError(f"tolerance {k} is a percentage: between 0 and 100, not {x:g}")


def tolerances_for(kind: str, precision: str, overrides: Mapping[str, Any] | None = None,
                   defaults: Mapping[str, Any] | None = None) -> dict[str, float | None]:
    """The tolerances of a (kind, precision): ``defaults`` (an exporter's own) or :data:`DEFAULT_TOLERANCES`, with
    ``overrides``."""
    base = defaults if defaults is not None else DEFAULT_TOLERANCES.get((kind, precision))
    if base is None:
        raise ValueError(f"no validation tolerances for a {kind} model at {precision}")
    tol = dict(base)
    for k, v in (overrides or {}).items():
        if k not in TOLERANCE_KEYS:
            raise ValueError(f"unknown tolerance {k!r}; use {', '.join(TOLERANCE_KEYS)}")
        tol[k] = None if v is None else float(v)
    if kind == "seq-cls":
        tol.pop("min_token_agreement", None)
    if kind != "mlm":
        tol.pop("min_topk_agreement", None)
    return tol


def check(figures: Mapping[str, Any], tol: Mapping[str, Any]) -> list[str]:
    """Failed checks, one short phrase each (empty: passed). The step graphs of a text-to-text export
    (``figures["step_graphs"]``) are judged like its decoder graphs."""
    out = []
    judged = [("", figures, "max_abs_logit", "max|Δlogit|", (figures.get("generation") or {}).get("token_agreement"))]
    step = figures.get("step_graphs") or {}
    if step:
        judged.append(("step graphs: ", step, "max_abs_top_logit", "max|Δ top logit|", step.get("token_agreement")))
    for prefix, figs, key, name, tokens in judged:
        v, limit = figs.get(key), tol.get("max_abs_logit")
        if limit is not None and (v is None or not math.isfinite(v) or v > limit):
            out.append(prefix + (f"{name} {v:.3g} > {limit:.3g}" if v is not None else f"{name} missing"))
        v, limit = (figs.get("agreement") if figs is figures else None), tol.get("min_agreement")
        if limit is not None and v is not None and v < limit:
            out.append(f"label agreement {v:.2f}% < {limit:.2f}%")
        limit = tol.get("min_token_agreement")
        if limit is not None and tokens is not None and tokens < limit:
            out.append(f"{prefix}greedy token agreement {tokens:.2f}% < {limit:.2f}%")
        v, limit = (figs.get("topk_agreement") if figs is figures else None), tol.get("min_topk_agreement")
        if limit is not None and v is not None and v < limit:
            out.append(f"top-{figs.get('k', MLM_TOP_K)} suggestion agreement {v:.2f}% < {limit:.2f}%")
        v, limit = figs.get("nonfinite", 0), tol.get("max_nonfinite")
        if limit is not None and v > limit:
            out.append(f"{prefix}{v} non-finite outputs (NaN/inf)")
    return out


def logit_figures(ref: np.ndarray, out: np.ndarray) -> dict[str, Any]:
    """max / mean |Δ| of two arrays of scores, the reference's scale, and the non-finite entries of ``out``."""
    finite = np.isfinite(out)
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    return {
        "max_abs_logit": float(diff.max()) if diff.size else 0.0,
        "mean_abs_logit": float(diff.mean()) if diff.size else 0.0,
        "max_abs_ref_logit": float(np.abs(ref).max()) if ref.size else 0.0,  # the scale of the logits
        "nonfinite": int((~finite).sum()),
    }


def reference_classifier(src_path: str, max_length: int, **opts: Any) -> Any:
    """The torch engine at fp32 on the CPU: the yardstick of every export."""
    return registry.load_classifier(registry.REFERENCE, src_path, precision="fp32", device="cpu",
                                    max_length=max_length, **opts)


def classifier_figures(candidate: Any, src_path: str, pairs: Sequence[Pair], max_length: int,
                       label_map: Mapping[str, str] | None = None, device: str = "cpu",
                       batch: int = BATCH) -> dict[str, Any]:
    """Figures of ``candidate`` (any classifier of the contract over an export) against the reference classifier,
    both in the canonical label order, ``batch`` pairs per call on both sides."""
    ref_model = reference_classifier(src_path, max_length, label_map=label_map)
    refs, outs = [], []
    for i in range(0, len(pairs), batch):
        chunk = list(pairs[i:i + batch])
        refs.append(ref_model.classify(chunk).logits)
        outs.append(np.asarray(candidate.classify(chunk).logits, dtype=np.float32))
    ref, out = np.concatenate(refs), np.concatenate(outs)
    figs = logit_figures(ref, out)
    figs.update(n=len(pairs), agreement=float((ref.argmax(1) == out.argmax(1)).mean() * 100.0), device=device,
                providers=(getattr(candidate, "info", None) and candidate.info.details.get("providers")))
    return figs


def token_agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[float, int]:
    """(% of positions with the same token, over the longer of each pair of rows; identical rows)."""
    same = total = identical = 0
    for x, y in zip(a, b):
        n = max(len(x), len(y))
        total += n
        same += sum(1 for i in range(min(len(x), len(y))) if x[i] == y[i])
        identical += int(list(x) == list(y))
    return (100.0 * same / total if total else 100.0), identical


def generator_prompts(pairs: Sequence[Pair], n: int = GEN_PROMPTS_MAX) -> list[str]:
    return [CONTRADICT_PROMPT.format(h=h) for _, h in list(pairs)[:n]]


def greedy_figures(candidate: Any, reference: Any, prompts: Sequence[str],
                   max_new_tokens: int = GEN_MAX_NEW_TOKENS) -> dict[str, Any]:
    """Greedy decoding of ``prompts`` by two generators of the contract, one prompt per call (no padding):
    token agreement and identical sequences (``generation``), and the reference's rows (``ref_rows``)."""
    d = Decoding(strategy="greedy", max_new_tokens=max_new_tokens)
    ref_rows, rows = [], []
    for i, p in enumerate(prompts):
        seed = [derive_seed("validate", i)]
        ref_rows.append(reference.generate_ids([p], 1, d, seed)[0][0])
        rows.append(candidate.generate_ids([p], 1, d, seed)[0][0])
    agree, identical = token_agreement(ref_rows, rows)
    return {"generation": {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "token_agreement": agree,
                           "identical_sequences": identical}, "ref_rows": ref_rows}


_WORD = re.compile(r"[A-Za-z]{3,}")


def masked_items(pairs: Sequence[Pair]) -> list[tuple[str, str]]:
    """Validation inputs of a masked LM: each pair with the longest word of its hypothesis (3 letters or more;
    the first of equals) replaced by :data:`~breaknli_fast.engines.base.MASK` wherever it occurs as a word in
    the pair (a hypothesis without such a word masks its first word)."""
    out = []
    for p, h in pairs:
        words = _WORD.findall(h)
        w = max(words, key=len) if words else (h.split() or ["x"])[0]
        pat = re.compile(r"(?<!\w)" + re.escape(w) + r"(?!\w)")
        hm = pat.sub(MASK, h)
        out.append((pat.sub(MASK, p), hm if MASK in hm else MASK + " " + h))
    return out


def masked_lm_figures(candidate: Any, src_path: str, pairs: Sequence[Pair], max_length: int,
                      device: str = "cpu") -> dict[str, Any]:
    """Figures of ``candidate`` (any mask filler of the contract over an export) against the torch engine at fp32
    on the CPU (see the module's notes)."""
    items = masked_items(pairs)
    ref_model = registry.load_mask_filler(registry.REFERENCE, src_path, precision="fp32", device="cpu",
                                          max_length=max_length)
    ref = ref_model.fill_mask(items, MLM_TOP_K)
    out = candidate.fill_mask(items, MLM_TOP_K, [r.words[0] if r.words else None for r in ref])
    top1 = same = total = 0
    diffs: list[float] = []
    bad = 0
    n = 0
    for r, o in zip(ref, out):
        if not r.words:
            continue
        n += 1
        bad += int((~np.isfinite(o.logprobs)).sum()) + int(o.score is not None and not math.isfinite(o.score))
        top1 += int(bool(o.words) and o.words[0] == r.words[0])
        common = set(r.words) & set(o.words)
        same += len(common)
        total += len(r.words)
        rv, ov = dict(zip(r.words, r.logprobs.tolist())), dict(zip(o.words, o.logprobs.tolist()))
        diffs += [abs(rv[w] - ov[w]) for w in common]
        if o.score is not None:
            diffs.append(abs(float(r.logprobs[0]) - o.score))
    return {"n": n, "k": MLM_TOP_K, "agreement": 100.0 * top1 / max(n, 1),
            "topk_agreement": 100.0 * same / max(total, 1),
            "max_abs_logit": max(diffs) if diffs else 0.0, "mean_abs_logit": float(np.mean(diffs)) if diffs else 0.0,
            "nonfinite": bad, "device": device, "providers": candidate.info.details.get("providers"),
            "inputs": "masked pairs: the longest hypothesis word masked wherever it occurs"}


def on_device(fn: Callable[[str], dict[str, Any]], device: str, unavailable: type[Exception]) -> dict[str, Any]:
    """``fn(device)``; where this machine cannot run the target device (``unavailable`` raised), ``fn("cpu")``,
    recorded in the figures' ``note``."""
    if device != "cpu":
        try:
            return fn(device)
        except unavailable as e:
            figs = fn("cpu")
            figs["note"] = f"validated on the CPU provider: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            return figs
    return fn("cpu")
