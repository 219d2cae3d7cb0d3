"""What the exporters of the project's T5 step graphs (the ort and openvino backends') measure of a T5 export beyond
the engine contract's figures.

* The first decoder step's logits over the whole vocabulary for NLI prompts built from the pairs (batched,
  padded), against transformers' T5 at fp32: max |Δ|, and the agreement of the NLI label (the argmax over the
  answer words' first tokens).
* Greedy decoding of up to 8 generator prompts through the generator contract (the torch engine's
  ``generate`` against this export's :func:`~breaknli_fast.engines.decoding.greedy_search`): token agreement and
  identical sequences (:func:`breaknli_fast.export.validate.greedy_figures`).
* The decoder graph's own top-k (what the fast sampler reads, ``step_graphs``): the first step's top-k logits and
  ids against transformers', and greedy decoding through ``step_topk(k=1)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines import registry
from breaknli_fast.engines.compat import load_seq2seq
from breaknli_fast.engines.model_info import ModelLoadError, answer_token_ids, input_limit
from breaknli_fast.engines.stepgraph import StepGraphStepper
from breaknli_fast.export import validate as val
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS

Pair = tuple[str, str]


def t5_figures(folder: Path, src: str, pairs: Sequence[Pair], device: str, max_length: int,
               generator: Any) -> dict[str, Any]:
    """Figures of a T5 export (``generator``: the engine's generator over it, with its step-graph ``stepper``) against transformers' model at fp32."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    ref_model = load_seq2seq(src, torch.float32).eval()
    stepper: StepGraphStepper = generator.stepper
    max_length = min(max_length, input_limit(ref_model.config, tok)[0])  # as the engines cap their prompts
    try:
        answers: list[int] | None = answer_token_ids(tok)
    except ModelLoadError:
        answers = None
    start = int(ref_model.config.decoder_start_token_id or 0)
    template = NLI_PROMPTS[DEFAULT_NLI_PROMPT]
    refs, outs = [], []
    with torch.inference_mode():
        for i in range(0, len(pairs), val.BATCH):
            chunk = pairs[i:i + val.BATCH]
            enc = tok([template.format(premise=p, hypothesis=h) for p, h in chunk], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            first = torch.full((len(chunk),), start, dtype=torch.long)
            refs.append(ref_model(**enc, decoder_input_ids=first[:, None]).logits[:, 0, :].float().numpy())
            stepper.start(enc["input_ids"], enc["attention_mask"], 1)
            outs.append(stepper.step(first).numpy())
    ref, out = np.concatenate(refs), np.concatenate(outs)
    figs = val.logit_figures(ref, out)
    figs.update(n=len(pairs), device=device, providers=stepper.details.get("providers"))
    figs["agreement"] = (float((ref[:, answers].argmax(1) == out[:, answers].argmax(1)).mean() * 100.0)
                         if answers else None)
    prompts = val.generator_prompts(pairs)
    reference = registry.load_generator(registry.REFERENCE, src, precision="fp32", device="cpu",
                                        max_input_length=max_length)
    greedy = val.greedy_figures(generator, reference, prompts)
    figs["generation"] = greedy["generation"]
    figs["step_graphs"] = _topk_figures(stepper, tok, ref, pairs, template, prompts, greedy["ref_rows"], start,
                                        int(ref_model.config.eos_token_id), max_length)
    return figs


def _topk_figures(stepper: StepGraphStepper, tok: Any, ref: np.ndarray, pairs: Sequence[Pair], template: str,
                  prompts: list[str], ref_rows: list[list[int]], start: int, eos: int,
                  max_length: int) -> dict[str, Any]:
    """The decoder graph's top-k against the PyTorch model: the first step's top-k logits and ids on the NLI
    prompts, batched with padding as for ``ref`` (max |Δ|, share of identical ids), and greedy generation through
    ``step_topk(k=1)`` on the generator prompts against ``ref_rows``."""
    import torch

    k = min(50, stepper.vocab_size)
    diffs, same, total, bad = [], 0, 0, 0
    with torch.inference_mode():
        for i in range(0, len(pairs), val.BATCH):
            chunk = pairs[i:i + val.BATCH]
            enc = tok([template.format(premise=p, hypothesis=h) for p, h in chunk], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            first = torch.full((len(chunk),), start, dtype=torch.long)
            ref_vals, ref_ids = torch.topk(torch.from_numpy(ref[i:i + val.BATCH]), k)
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
            for _ in range(val.GEN_MAX_NEW_TOKENS):
                vals, ids = stepper.step_topk(last, 1)
                bad += int(torch.isnan(vals).sum() + torch.isposinf(vals).sum())
                row.append(int(ids[0, 0]))
                if row[-1] == eos:
                    break
                last = ids[:, 0]
            rows.append(row)
    agree, identical = val.token_agreement(ref_rows, rows)
    return {"max_abs_top_logit": max(diffs) if diffs else 0.0, "top_ids_identical": 100.0 * same / max(total, 1),
            "k": k, "nonfinite": bad, "token_agreement": agree, "identical_sequences": identical,
            "prompts": len(prompts)}
