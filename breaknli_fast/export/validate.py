"""Validation of an export against the PyTorch fp32 reference, before it is declared a success.

Classifiers: the same pairs, the same tokenization and padding, logits in the model's own label
order: max |Δ logit|, mean |Δ logit|, label (argmax) agreement %, non-finite outputs.

Text-to-text models: the first decoder step's logits over the whole vocabulary for NLI prompts
built from the pairs (max |Δ|, and the agreement of the seq2seq classifier's label, i.e. the argmax
over the answer words' first tokens), plus greedy generation on up to 8 generator prompts:
token agreement % (position by position) and identical sequences, and non-finite scores. Where the
export has the ort engine's sampling step graphs (``export.t5_step``), the same for them: the first
step's top-k logits on the NLI prompts (batched, padded) and greedy generation through them.

TensorRT plans: as classifiers.

Masked language models (the mask-filler role): on masked pairs (:func:`masked_items`: the longest word of
each hypothesis masked wherever it occurs in the pair), the top-10 whole-word suggestions of the export
against torch fp32's: top-1 agreement % (``agreement``), the share of torch's top 10 that the export's top 10
holds (``topk_agreement``), max |Δ log-probability| over the suggestions both give, and non-finite outputs.

The reference classifier is the torch engine at fp32 on the CPU, loaded through the engine registry; the
exported graphs run on the engines' runtimes (:mod:`breaknli_fast.engines.ort_runtime`,
:mod:`breaknli_fast.engines.tensorrt_runtime`). torch, transformers and onnx are imported on use (the
command line imports the exporters at start-up).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from breaknli_fast.engines import registry
from breaknli_fast.engines.base import MASK, ClassifierBase
from breaknli_fast.engines.compat import load_seq2seq
from breaknli_fast.engines.model_info import (ModelLoadError, answer_token_ids, effective_max_length, input_limit,
                                          label_permutation)
from breaknli_fast.engines.ort_runtime import (STEP_FILES, OrtSeq2SeqStepper, SessionMaskFiller, classifier_feeds,
                                               load_ort_seq2seq, make_session)
from breaknli_fast.engines.tensorrt_runtime import PLAN_FILE, TrtRunner
from breaknli_fast.prompts import CONTRADICT_PROMPT, DEFAULT_NLI_PROMPT, NLI_PROMPTS

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


def tolerances_for(kind: str, precision: str, overrides: Mapping[str, Any] | None = None) -> dict[str, float | None]:
    tol = dict(DEFAULT_TOLERANCES[(kind, precision)])
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


def _logit_figures(ref: np.ndarray, out: np.ndarray) -> dict[str, Any]:
    finite = np.isfinite(out)
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    return {
        "max_abs_logit": float(diff.max()) if diff.size else 0.0,
        "mean_abs_logit": float(diff.mean()) if diff.size else 0.0,
        "max_abs_ref_logit": float(np.abs(ref).max()) if ref.size else 0.0,  # the scale of the logits
        "nonfinite": int((~finite).sum()),
    }


def _reference_classifier(src_path: str, max_length: int) -> ClassifierBase:
    """The torch engine at fp32 on the CPU: the yardstick of every export."""
    return registry.load_classifier("torch", src_path, precision="fp32", device="cpu", max_length=max_length)


def _classifier_figures(ref: np.ndarray, out: np.ndarray, n: int, device: str, providers: Any) -> dict[str, Any]:
    figs = _logit_figures(ref, out)
    figs.update(n=n, agreement=float((ref.argmax(1) == out.argmax(1)).mean() * 100.0), device=device,
                providers=providers)
    return figs


def validate_classifier(folder: Any, src_path: str, pairs: Sequence[Pair], device: str = "cpu",
                        provider: str | None = None, max_length: int = 256, graph: str = "model.onnx") -> dict[str, Any]:
    """Figures of an exported classifier graph against the reference classifier, in the canonical label order
    (the graph's outputs mapped through the model's ``id2label``), ``BATCH`` pairs per call on both sides."""
    from transformers import AutoConfig, AutoTokenizer

    folder = Path(folder)
    ref_model = _reference_classifier(src_path, max_length)
    sess, details = make_session(folder / graph, device=device, provider=provider)
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = AutoConfig.from_pretrained(str(folder))
    perm = label_permutation(config)
    length = effective_max_length(max_length, config, tok)[0]  # as the reference caps its pairs
    inputs = sess.get_inputs()
    refs, outs = [], []
    for i in range(0, len(pairs), BATCH):
        chunk = list(pairs[i:i + BATCH])
        refs.append(ref_model.classify(chunk).logits)
        outs.append(np.asarray(sess.run(["logits"], classifier_feeds(tok, chunk, inputs, length))[0],
                               dtype=np.float32)[:, perm])
    return _classifier_figures(np.concatenate(refs), np.concatenate(outs), len(pairs), device, details.get("providers"))


def validate_plan(folder: Path, src_path: str, pairs: Sequence[Pair], device: str, max_length: int) -> dict[str, Any]:
    """Figures of a TensorRT plan against the reference classifier, as :func:`validate_classifier`."""
    import onnx
    from transformers import AutoConfig, AutoTokenizer

    runner = TrtRunner(folder / PLAN_FILE, device)
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = AutoConfig.from_pretrained(str(folder))
    perm = label_permutation(config)
    graph = next(p for p in sorted(folder.glob("*.onnx")))
    inputs = onnx.load(str(graph), load_external_data=False).graph.input
    max_length = min(max_length, runner.max_length or max_length)
    ref_model = _reference_classifier(src_path, max_length)
    length = effective_max_length(max_length, config, tok)[0]
    step = max(1, min(BATCH, runner.max_batch))
    refs, outs = [], []
    for i in range(0, len(pairs), step):
        chunk = list(pairs[i:i + step])
        refs.append(ref_model.classify(chunk).logits)
        outs.append(runner.run(classifier_feeds(tok, chunk, inputs, length))["logits"][:, perm])
    return _classifier_figures(np.concatenate(refs), np.concatenate(outs), len(pairs), device,
                               [f"TensorRT {runner.trt.__version__}"])


def _token_agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, int]:
    same = total = identical = 0
    for x, y in zip(a, b):
        n = max(len(x), len(y))
        total += n
        same += sum(1 for i in range(min(len(x), len(y))) if x[i] == y[i])
        identical += int(x == y)
    return (100.0 * same / total if total else 100.0), identical


def _on(enc: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """The tensors of ``enc`` on ``model``'s device: optimum's model on CUDA with IO binding takes every input's
    data pointer as device memory, so host tensors fed to it would be read as GPU addresses."""
    return {k: v.to(model.device) for k, v in enc.items()}


def validate_seq2seq(folder: Any, src_path: str, pairs: Sequence[Pair], device: str = "cpu",
                     provider: str | None = None, max_length: int = 256) -> dict[str, Any]:
    """Figures of an exported text-to-text model against the PyTorch fp32 model (CPU)."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    ref_model = load_seq2seq(src_path, torch.float32).eval()
    ort_model, details = load_ort_seq2seq(folder, device=device, provider=provider)
    max_length = min(max_length, input_limit(ref_model.config, tok)[0])  # as the engines cap their prompts
    try:
        answers: list[int] | None = answer_token_ids(tok)
    except ModelLoadError:
        answers = None
    start = int(ref_model.config.decoder_start_token_id or 0)
    template = NLI_PROMPTS[DEFAULT_NLI_PROMPT]
    refs, outs = [], []
    with torch.inference_mode():
        for i in range(0, len(pairs), BATCH):
            chunk = pairs[i:i + BATCH]
            enc = tok([template.format(premise=p, hypothesis=h) for p, h in chunk], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            dec = torch.full((len(chunk), 1), start, dtype=torch.long)
            refs.append(ref_model(**enc, decoder_input_ids=dec).logits[:, 0, :].float().numpy())
            outs.append(ort_model(**_on(enc, ort_model), decoder_input_ids=dec.to(ort_model.device))
                        .logits[:, 0, :].float().cpu().numpy())
    ref = np.concatenate(refs)
    out = np.concatenate(outs)
    figs = _logit_figures(ref, out)
    figs.update(n=len(pairs), device=device, providers=details.get("providers"))
    figs["agreement"] = (float((ref[:, answers].argmax(1) == out[:, answers].argmax(1)).mean() * 100.0)
                         if answers else None)
    # greedy generation on generator prompts
    prompts = [CONTRADICT_PROMPT.format(h=h) for _, h in list(pairs)[:GEN_PROMPTS_MAX]]
    kw = dict(max_new_tokens=GEN_MAX_NEW_TOKENS, do_sample=False, num_beams=1, output_scores=True,
              return_dict_in_generate=True)
    pad = tok.pad_token_id
    ref_rows, out_rows, bad = [], [], 0
    with torch.inference_mode():
        for prompt in prompts:
            enc = tok([prompt], return_tensors="pt", truncation=True, max_length=max_length)
            r = ref_model.generate(**enc, **kw)
            o = ort_model.generate(**_on(enc, ort_model), **kw)
            ref_rows.append([int(t) for t in r.sequences[0, 1:] if int(t) != pad])
            out_rows.append([int(t) for t in o.sequences[0, 1:].cpu() if int(t) != pad])
            # -inf is a legitimate mask from a logits processor; NaN and +inf are overflow
            bad += sum(int((torch.isnan(s) | torch.isposinf(s)).sum()) for s in o.scores)
    agree, identical = _token_agreement(ref_rows, out_rows)
    figs["nonfinite"] += bad
    figs["generation"] = {"prompts": len(prompts), "max_new_tokens": GEN_MAX_NEW_TOKENS, "token_agreement": agree,
                          "identical_sequences": identical}
    if device == "cpu" and all((Path(folder) / f).is_file() for f in STEP_FILES):
        figs["step_graphs"] = _validate_step_graphs(folder, tok, ref, pairs, template, prompts, ref_rows, start,
                                                    int(ref_model.config.eos_token_id), max_length)
    return figs


def _validate_step_graphs(folder: Any, tok: Any, ref: np.ndarray, pairs: Sequence[Pair], template: str,
                          prompts: list[str], ref_rows: list[list[int]], start: int, eos: int,
                          max_length: int) -> dict[str, Any]:
    """The sampling step graphs (``export.t5_step``) against the PyTorch model: the first step's top-k
    logits and ids on the NLI prompts, batched with padding as for ``ref`` (the PyTorch first-step
    logits of :func:`validate_seq2seq`; max |Δ|, share of identical ids), and greedy generation
    through ``step_topk(k=1)`` on the generator prompts against ``ref_rows``."""
    import torch

    stepper = OrtSeq2SeqStepper(folder, "cpu")
    k = min(50, stepper.vocab_size)
    diffs, same, total, bad = [], 0, 0, 0
    with torch.inference_mode():
        for i in range(0, len(pairs), BATCH):
            chunk = pairs[i:i + BATCH]
            enc = tok([template.format(premise=p, hypothesis=h) for p, h in chunk], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            first = torch.full((len(chunk),), start, dtype=torch.long)
            ref_vals, ref_ids = torch.topk(torch.from_numpy(ref[i:i + BATCH]), k)
            stepper.start(enc["input_ids"], enc["attention_mask"], 1)
            vals, ids = stepper.step_topk(first, k)
            bad += int((~torch.isfinite(vals)).sum())
            diffs.append(float((vals.double() - ref_vals.double()).abs().max()))
            same += int((ids == ref_ids).sum())
            total += ids.numel()
        rows = []
        for prompt in prompts:
            enc = tok([prompt], return_tensors="pt", truncation=True, max_length=max_length)
            stepper.start(enc["input_ids"], enc["attention_mask"], 1)
            last, row = torch.tensor([start]), []
            for _ in range(GEN_MAX_NEW_TOKENS):
                vals, ids = stepper.step_topk(last, 1)
                bad += int(torch.isnan(vals).sum() + torch.isposinf(vals).sum())
                row.append(int(ids[0, 0]))
                if row[-1] == eos:
                    break
                last = ids[:, 0]
            rows.append(row)
    agree, identical = _token_agreement(ref_rows, rows)
    return {"max_abs_top_logit": max(diffs) if diffs else 0.0, "top_ids_identical": 100.0 * same / max(total, 1),
            "k": k, "nonfinite": bad, "token_agreement": agree, "identical_sequences": identical,
            "prompts": len(prompts)}


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


def validate_masked_lm(folder: Any, src_path: str, pairs: Sequence[Pair], device: str = "cpu",
                       provider: str | None = None, max_length: int = 256, graph: str = "model.onnx") -> dict[str, Any]:
    """Figures of an exported masked LM against the torch engine at fp32 on the CPU (see the module's notes)."""
    from transformers import AutoConfig, AutoTokenizer

    folder = Path(folder)
    items = masked_items(pairs)
    ref_model = registry.load_mask_filler("torch", src_path, precision="fp32", device="cpu", max_length=max_length)
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = AutoConfig.from_pretrained(str(folder))
    length = effective_max_length(max_length, config, tok)[0]
    out_model = SessionMaskFiller(folder / graph, tok, int(config.vocab_size), length, device=device, provider=provider)
    ref = ref_model.fill_mask(items, MLM_TOP_K)
    out = out_model.fill_mask(items, MLM_TOP_K, [r.words[0] if r.words else None for r in ref])
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
            "nonfinite": bad, "device": device, "providers": out_model.info.details.get("providers"),
            "inputs": "masked pairs: the longest hypothesis word masked wherever it occurs"}
