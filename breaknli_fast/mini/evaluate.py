"""Measure the mini models after the fp16 round trip (loaded from their folders in fp32) and write the cards.

- mini-nli: accuracy on the held-out dev pairs;
- mini-t5 as an NLI classifier: first decoder step's logits over the first tokens of "yes" / "no" / "it";
- mini-t5 as the BreakNLI generator: K samples per dev hypothesis (top_p 0.95, top_k 50, temperature 1.0,
  max_new_tokens 40, fixed seed), the share labelled with the target relation by mini-nli, and the share of
  correctly classified examples that survive the default filters (U=10 distinct, S=5 of them on target in
  both directions).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, LABELS
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines.models import load_config, resolve_model
from breaknli_fast.mini.cards import write_cards as _write_cards
from breaknli_fast.mini.common import (LENGTH_BUCKETS, folder_size, hardware, length_bucket, log, make_progress,
                                       pad_batch, write_json)
from breaknli_fast.mini.data import Pair, SnliSplit
from breaknli_fast.pipeline.breaknli import dedup_candidates
from breaknli_fast.prompts import GEN_PROMPTS, NLI_ANSWERS, NLI_PROMPTS

EVAL_FILE = "eval_results.json"
GEN_SETTINGS = dict(do_sample=True, top_p=0.95, top_k=50, temperature=1.0, max_new_tokens=40)
MODE_TARGET = {"contradictive": CONTRADICTION, "entailed": ENTAILMENT}
MODE_LABELS = {"contradictive": (ENTAILMENT, CONTRADICTION), "entailed": LABELS}


class NliClassifier:
    """mini-nli (or any RoBERTa-style classifier folder) loaded in fp32."""

    def __init__(self, path: str | Path, max_length: int = 128, batch_size: int = 256):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
        self.labels = [self.model.config.id2label[i] for i in range(self.model.config.num_labels)]
        self.max_length, self.batch_size = max_length, batch_size

    @torch.inference_mode()
    def predict(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        enc = self.tok([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)
        ids_all = enc["input_ids"]
        order = sorted(range(len(ids_all)), key=lambda i: len(ids_all[i]))
        out = [""] * len(ids_all)
        for b in range(0, len(order), self.batch_size):
            idx = order[b:b + self.batch_size]
            ids, mask = pad_batch([ids_all[i] for i in idx], self.tok.pad_token_id)
            pred = self.model(input_ids=ids, attention_mask=mask).logits.argmax(-1).tolist()
            for i, p in zip(idx, pred):
                out[i] = self.labels[p]
        return out


def t5_answer_ids(tok: Any) -> list[int]:
    """First token of each answer word, LABELS order (entailment=yes, neutral=it, contradiction=no)."""
    ids = []
    for lab in LABELS:
        toks = [t for t in tok(NLI_ANSWERS[lab], add_special_tokens=False)["input_ids"] if tok.decode([t]).strip()]
        ids.append(int(toks[0]))
    return ids


@torch.inference_mode()
def t5_nli_accuracy(model: Any, tok: Any, pairs: Sequence[Pair], batch_size: int = 128,
                    max_length: int = 96) -> tuple[float, dict[str, int]]:
    ans = t5_answer_ids(tok)
    prompts = [NLI_PROMPTS["infer"].format(premise=p.premise, hypothesis=p.hypothesis) for p in pairs]
    preds: list[str] = []
    for b in range(0, len(prompts), batch_size):
        enc = tok(prompts[b:b + batch_size], padding=True, truncation=True, max_length=max_length,
                  return_tensors="pt")
        dec = torch.full((enc["input_ids"].shape[0], 1), model.config.decoder_start_token_id, dtype=torch.long)
        logits = model(**enc, decoder_input_ids=dec).logits[:, 0, :][:, ans]
        preds.extend(LABELS[i] for i in logits.argmax(-1).tolist())
    acc = float(np.mean([p == q.label for p, q in zip(preds, pairs)]))
    dist = {lab: preds.count(lab) for lab in LABELS}
    return acc, dist


@torch.inference_mode()
def generate(model: Any, tok: Any, prompts: Sequence[str], k: int, seed: int, batch_size: int = 10,
             progress=None, task=None) -> list[list[str]]:
    torch.manual_seed(seed)
    out: list[list[str]] = []
    for b in range(0, len(prompts), batch_size):
        enc = tok(list(prompts[b:b + batch_size]), padding=True, truncation=True, max_length=96, return_tensors="pt")
        seqs = model.generate(**enc, num_return_sequences=k, **GEN_SETTINGS)
        texts = tok.batch_decode(seqs, skip_special_tokens=True)
        out.extend(texts[i * k:(i + 1) * k] for i in range(len(texts) // k))
        if progress is not None:
            progress.update(task, advance=len(prompts[b:b + batch_size]))
    return out


def generator_check(t5: Any, t5_tok: Any, clf: NliClassifier, examples: Sequence[dict], mode: str, n: int = 200,
                    k: int = 20, unique: int = 10, keep: int = 5, seed: int = 0, progress: bool = True) -> dict:
    """The BreakNLI loop up to the relation filter, on the first ``n`` selected and correctly classified examples."""
    target = MODE_TARGET[mode]
    sel = [e for e in examples if e["label"] in MODE_LABELS[mode]]
    preds = clf.predict([(e["premise"], e["hypothesis"]) for e in sel])
    correct = [e for e, p in zip(sel, preds) if p == e["label"]]
    chosen = correct[:n]
    prompts = [GEN_PROMPTS[mode].format(h=e["hypothesis"]) for e in chosen]
    t0 = time.perf_counter()
    with make_progress(progress) as bar:
        task = bar.add_task(f"generate {mode}", total=len(prompts), info="")
        outs = generate(t5, t5_tok, prompts, k, seed, progress=bar, task=task)
    gen_secs = time.perf_counter() - t0
    # share of all raw outputs (normalised) labelled with the target relation, direction (h, h')
    flat = [(e["hypothesis"], normalize_text(c)) for e, cs in zip(chosen, outs) for c in cs]
    flat_pred = clf.predict(flat)
    share_all = float(np.mean([p == target for p in flat_pred]))
    # filters
    distinct_pairs: list[tuple[str, str]] = []
    per_example: list[list[str]] = []
    for e, cs in zip(chosen, outs):
        h = e["hypothesis"]
        seen = dedup_candidates(h, cs, len(cs))[0]  # the loop's own step 4, all distinct kept
        per_example.append(seen)
        distinct_pairs.extend((h, c) for c in seen)
    dist_pred = clf.predict(distinct_pairs)
    share_distinct = float(np.mean([p == target for p in dist_pred])) if dist_pred else 0.0
    n_distinct = [len(s) for s in per_example]
    fw, bw = [], []
    for e, seen in zip(chosen, per_example):
        if len(seen) >= unique:
            for c in seen[:unique]:
                fw.append((e["hypothesis"], c))
                bw.append((c, e["hypothesis"]))
    fwp, bwp = clf.predict(fw) if fw else [], clf.predict(bw) if bw else []
    j = 0
    by_length: dict[str, dict[str, int]] = {}
    for e, seen in zip(chosen, per_example):
        b = by_length.setdefault(length_bucket(e["hypothesis"]), dict(
            checked=0, too_few_unique=0, too_few_on_target=0, survivors=0, candidates_checked=0, candidates_passed=0))
        b["checked"] += 1
        if len(seen) < unique:
            b["too_few_unique"] += 1
            continue
        passed = sum(1 for i in range(unique) if fwp[j + i] == target and bwp[j + i] == target)
        j += unique
        b["candidates_checked"] += unique
        b["candidates_passed"] += passed
        if passed >= keep:
            b["survivors"] += 1
        else:
            b["too_few_on_target"] += 1
    too_few_unique, too_few_target, survivors = (sum(b[key] for b in by_length.values())
                                                 for key in ("too_few_unique", "too_few_on_target", "survivors"))
    examples_out = [{"hypothesis": e["hypothesis"], "candidates": cs[:5]} for e, cs in zip(chosen[:3], per_example)]
    return {
        "mode": mode, "target": target, "selected": len(sel), "correct": len(correct), "checked": len(chosen),
        "k": k, "unique": unique, "keep": keep, "outputs": len(flat),
        "share_target_all_outputs": round(share_all, 4),
        "share_target_distinct_outputs": round(share_distinct, 4),
        "mean_distinct_candidates": round(float(np.mean(n_distinct)), 2) if n_distinct else 0.0,
        "too_few_unique": too_few_unique, "too_few_on_target": too_few_target, "survivors": survivors,
        "survival_rate": round(survivors / max(1, len(chosen)), 4),
        "forward_share_target_first10": round(float(np.mean([p == target for p in fwp])), 4) if fwp else None,
        "both_directions_share_target_first10": round(float(np.mean(
            [a == target and b == target for a, b in zip(fwp, bwp)])), 4) if fwp else None,
        "by_hypothesis_length": {k: by_length[k] for k in LENGTH_BUCKETS if k in by_length},
        "generation_seconds": round(gen_secs, 1), "examples": examples_out,
    }


def check_generator(t5: str, judge: str, sample: str | Path, n: int = 200,
                    modes: Sequence[str] = ("contradictive", "entailed"), k: int = 20, seed: int = 0,
                    progress: bool = True) -> dict[str, dict]:
    """:func:`generator_check` of the mini-t5 ``t5`` judged by the classifier ``judge`` (each a shipped mini model's
    name or a folder, as ``breaknli-fast run`` takes them), on the first ``n`` (0: every) correctly classified example
    of ``sample`` per mode; the per-example excerpts left out. The numbers of ``eval_results.json`` with ``n=200``."""
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    bad = [m for m in modes if m not in MODE_TARGET]
    if bad:
        raise ValueError(f"unknown mode {bad[0]!r}; use contradictive, entailed or both")
    for name in (t5, judge):
        load_config(name)  # a missing folder, a folder without a model or an unreachable hub id: ModelLoadError
    t5_dir = resolve_model(t5)
    tok = AutoTokenizer.from_pretrained(t5_dir)
    model = T5ForConditionalGeneration.from_pretrained(t5_dir, dtype=torch.float32).eval()
    clf = NliClassifier(resolve_model(judge))
    examples = load_sample(sample)
    out = {}
    for mode in modes:
        r = generator_check(model, tok, clf, examples, mode, n=n or len(examples), k=k, seed=seed, progress=progress)
        out[mode] = {a: b for a, b in r.items() if a != "examples"}
    return out


def load_sample(path: str | Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                r["premise"], r["hypothesis"] = normalize_text(r["premise"]), normalize_text(r["hypothesis"])
                rows.append(r)
    return rows


def evaluate_models(out_dir: str | Path, split: SnliSplit, seed: int = 0, n_gen: int = 200, k: int = 20,
                    sample: str | Path | None = None, progress: bool = True, write_cards: bool = True) -> dict:
    """Evaluate whatever models exist in ``out_dir``; results go to ``out_dir/eval_results.json`` and the cards."""
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    out_dir = Path(out_dir)
    res: dict[str, Any] = {"seed": seed, "dev_pairs": len(split.dev), "hardware": hardware()}
    t0 = time.perf_counter()
    clf = None
    if (out_dir / "mini-nli" / "config.json").exists():
        clf = NliClassifier(out_dir / "mini-nli")
        preds = clf.predict([(p.premise, p.hypothesis) for p in split.dev])
        res["mini-nli"] = {"dev_accuracy": round(float(np.mean([a == p.label for a, p in zip(preds, split.dev)])), 4),
                           "dev_pred_counts": {lab: preds.count(lab) for lab in LABELS},
                           "per_label_accuracy": {lab: round(float(np.mean(
                               [a == lab for a, p in zip(preds, split.dev) if p.label == lab])), 4) for lab in LABELS}}
        log.info("eval mini-nli: %s", res["mini-nli"])
    if (out_dir / "mini-t5" / "config.json").exists():
        t5_tok = AutoTokenizer.from_pretrained(out_dir / "mini-t5")
        t5 = T5ForConditionalGeneration.from_pretrained(out_dir / "mini-t5", dtype=torch.float32).eval()
        acc, dist = t5_nli_accuracy(t5, t5_tok, split.dev)
        res["mini-t5"] = {"dev_nli_accuracy": round(acc, 4), "dev_pred_counts": dist}
        log.info("eval mini-t5 NLI: %s", res["mini-t5"])
        if clf is not None and n_gen > 0:
            if sample is not None and Path(sample).exists():
                examples = load_sample(sample)
                res["generator_examples_from"] = "embedded sample (held-out dev pairs)"
            else:
                examples = [{"premise": p.premise, "hypothesis": p.hypothesis, "label": p.label} for p in split.dev]
                res["generator_examples_from"] = "held-out dev pairs"
            for mode in ("contradictive", "entailed"):
                r = generator_check(t5, t5_tok, clf, examples, mode, n=n_gen, k=k, seed=seed, progress=progress)
                res["mini-t5"][mode] = r
                log.info("eval generator %s: %s", mode, {a: b for a, b in r.items() if a != "examples"})
    res["eval_seconds"] = round(time.perf_counter() - t0, 1)
    res["models_size_bytes"] = folder_size(out_dir)
    write_json(out_dir / EVAL_FILE, res)
    if write_cards:
        _write_cards(out_dir, res)
    return res
