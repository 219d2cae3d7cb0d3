"""Measure the mini models after the fp16 round trip (loaded from their folders in fp32) and write the cards.

- mini-nli: accuracy on the held-out dev pairs;
- mini-t5 as an NLI classifier: first decoder step's logits over the first tokens of "yes" / "no" / "it";
- mini-t5 as the BreakNLI generator: the BreakNLI probe through the study entry point on the torch engines (K
  samples per hypothesis with the loop's sampler and seeds), the share of outputs labelled with the target
  relation by mini-nli, and the share of correctly classified examples that survive the default filters
  (U=10 distinct, S=5 of them on target in both directions).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, LABELS
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines.model_info import load_config, resolve_model
from breaknli_fast.mini.cards import write_cards as _write_cards
from breaknli_fast.mini.common import (LENGTH_BUCKETS, folder_size, hardware, length_bucket, log, make_progress,
                                       pad_batch, write_json)
from breaknli_fast.mini.data import Pair, SnliSplit
from breaknli_fast.data.loaders import Example, LoadedData, SkipStats, load_file
from breaknli_fast.engines.roles import Models
from breaknli_fast.study.loading import EngineConfig, load_models
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, dedup_candidates
from breaknli_fast.probes.breaknli.verdicts import SELECTED
from breaknli_fast.probes.breaknli import BreakNLIProbe
from breaknli_fast.study import run_study
from breaknli_fast.progress import ProgressHook
from breaknli_fast.prompts import NLI_ANSWERS, NLI_PROMPTS

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
def generator_check(t5: str | Path, judge: str | Path, examples: LoadedData, mode: str, n: int = 200, k: int = 20,
                    unique: int = 10, keep: int = 5, seed: int = 0, progress: bool = True,
                    models: Models | None = None) -> dict:
    """The BreakNLI probe up to its verdicts, through the study entry point (``run_study``, torch fp32 engines), on
    the first ``n`` correctly classified examples of ``examples`` that ``mode`` selects: the share of the K raw
    outputs that the judge labels with the target relation, the distinct candidates, and how many examples survive
    U = ``unique`` and S = ``keep`` (both directions, the full relation filter), overall and by length of h."""
    target = MODE_TARGET[mode]
    if models is None:
        models = load_models(EngineConfig(engine="torch"), {"classifier": str(judge), "generator": str(t5)})
    clf = models.classifier
    sel = [e for e in examples.examples if e.label in SELECTED[mode]]
    ph = clf.classify([(e.premise, e.hypothesis) for e in sel]).labels if sel else []
    correct = [e for e, p in zip(sel, ph) if p == e.label]
    chosen = correct[:n]
    loop = BreakNLIConfig(modes=(mode,), k=k, u=unique, s=keep, seed=seed, relation_filter="full")
    with make_progress(progress) as bar:
        hook = _BarHook(bar)
        res = run_study(BreakNLIProbe(loop), data=LoadedData(chosen, examples.skips, examples.source),
                        models=models, hook=hook)
    gen_secs = round(res.times.seconds.get("generate", 0.0), 1)
    by_id = {r["id"]: r for r in res.records}
    recs = [by_id[e.id] for e in chosen]
    # share of all raw outputs (normalised) labelled with the target relation, direction (h, h')
    flat = [(r["hypothesis"], normalize_text(c)) for r in recs for c in r.get("generated", [])]
    share_all = float(np.mean([p == target for p in clf.classify(flat).labels])) if flat else 0.0
    distinct = {r["id"]: dedup_candidates(r["hypothesis"], r.get("generated", []), k)[0] for r in recs}
    dist_pairs = [(r["hypothesis"], c) for r in recs for c in distinct[r["id"]]]
    share_distinct = float(np.mean([p == target for p in clf.classify(dist_pairs).labels])) if dist_pairs else 0.0
    by_length: dict[str, dict[str, int]] = {}
    fw_all, both_all = [], []
    for r in recs:
        b = by_length.setdefault(length_bucket(r["hypothesis"]), dict(
            checked=0, too_few_unique=0, too_few_on_target=0, survivors=0, candidates_checked=0, candidates_passed=0))
        b["checked"] += 1
        if r["status"] == "too_few_unique":
            b["too_few_unique"] += 1
            continue
        rels = r["relations"]
        passed = sum(all(x == target for x in rel) for rel in rels)
        fw_all += [rel[0] == target for rel in rels]
        both_all += [all(x == target for x in rel) for rel in rels]
        b["candidates_checked"] += len(rels)
        b["candidates_passed"] += passed
        b["survivors" if r["status"] == "evaluated" else "too_few_on_target"] += 1
    too_few_unique, too_few_target, survivors = (sum(b[key] for b in by_length.values())
                                                 for key in ("too_few_unique", "too_few_on_target", "survivors"))
    n_distinct = [r.get("n_distinct", 0) for r in recs]
    return {
        "mode": mode, "target": target, "selected": len(sel), "correct": len(correct), "checked": len(chosen),
        "k": k, "unique": unique, "keep": keep, "outputs": len(flat),
        "share_target_all_outputs": round(share_all, 4),
        "share_target_distinct_outputs": round(share_distinct, 4),
        "mean_distinct_candidates": round(float(np.mean(n_distinct)), 2) if n_distinct else 0.0,
        "too_few_unique": too_few_unique, "too_few_on_target": too_few_target, "survivors": survivors,
        "survival_rate": round(survivors / max(1, len(chosen)), 4),
        "forward_share_target_first10": round(float(np.mean(fw_all)), 4) if fw_all else None,
        "both_directions_share_target_first10": round(float(np.mean(both_all)), 4) if both_all else None,
        "by_hypothesis_length": {key: by_length[key] for key in LENGTH_BUCKETS if key in by_length},
        "generation_seconds": gen_secs,
        "examples": [{"hypothesis": r["hypothesis"], "candidates": distinct[r["id"]][:5]} for r in recs[:3]],
        "sampler": "the engines' fast sampler, one seed per (run seed, mode, example) (breaknli-fast run's)",
    }


class _BarHook(ProgressHook):
    """The study's progress on the trainer's progress bar."""

    def __init__(self, bar: Any):
        self.bar, self.tasks = bar, {}

    def start(self, stage: str, total: int, completed: int = 0) -> None:
        self.tasks[stage] = self.bar.add_task(stage, total=total, completed=completed, info="")

    def advance(self, stage: str, n: int = 1) -> None:
        self.bar.update(self.tasks[stage], advance=n)


def check_generator(t5: str, judge: str, sample: str | Path, n: int = 200,
                    modes: Sequence[str] = ("contradictive", "entailed"), k: int = 20, seed: int = 0,
                    progress: bool = True) -> dict[str, dict]:
    """:func:`generator_check` of the mini-t5 ``t5`` judged by the classifier ``judge`` (each a shipped mini model's
    name or a folder, as ``breaknli-fast run`` takes them), on the first ``n`` (0: every) correctly classified example
    of ``sample`` per mode; the per-example excerpts left out (``eval_results.json`` holds them with ``n=200``)."""
    bad = [m for m in modes if m not in MODE_TARGET]
    if bad:
        raise ValueError(f"unknown mode {bad[0]!r}; use contradictive, entailed or both")
    for name in (t5, judge):
        load_config(name)  # a missing folder, a folder without a model or an unreachable hub id: ModelLoadError
    models = load_models(EngineConfig(engine="torch"), {"classifier": resolve_model(judge), "generator": resolve_model(t5)})
    examples = load_file(sample)
    out = {}
    for mode in modes:
        r = generator_check(t5, judge, examples, mode, n=n or len(examples.examples), k=k, seed=seed,
                            progress=progress, models=models)
        out[mode] = {a: b for a, b in r.items() if a != "examples"}
    return out


def evaluate_models(out_dir: str | Path, split: SnliSplit, seed: int = 0, n_gen: int = 200, k: int = 20,
                    sample: str | Path | None = None, progress: bool = True, write_cards: bool = True) -> dict:
    """Evaluate whatever models exist in ``out_dir`` on the evaluation slice of the held-out pairs
    (:attr:`SnliSplit.evaluation`, which no training or tuning step reads); results go to
    ``out_dir/eval_results.json`` and the cards. ``sample``: the shipped evaluation slice file, whose first
    ``n_gen`` examples per mode the generator check uses (else the split's evaluation pairs)."""
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    out_dir = Path(out_dir)
    pairs = split.evaluation
    res: dict[str, Any] = {"seed": seed, "evaluation_pairs": len(pairs), "data": split.summary(),
                           "hardware": hardware()}
    t0 = time.perf_counter()
    clf = None
    if (out_dir / "mini-nli" / "config.json").exists():
        clf = NliClassifier(out_dir / "mini-nli")
        preds = clf.predict([(p.premise, p.hypothesis) for p in pairs])
        res["mini-nli"] = {"evaluation_accuracy": round(float(np.mean([a == p.label for a, p in zip(preds, pairs)])), 4),
                           "evaluation_pred_counts": {lab: preds.count(lab) for lab in LABELS},
                           "per_label_accuracy": {lab: round(float(np.mean(
                               [a == lab for a, p in zip(preds, pairs) if p.label == lab])), 4) for lab in LABELS}}
        log.info("eval mini-nli: %s", res["mini-nli"])
    if (out_dir / "mini-t5" / "config.json").exists():
        t5_tok = AutoTokenizer.from_pretrained(out_dir / "mini-t5")
        t5 = T5ForConditionalGeneration.from_pretrained(out_dir / "mini-t5", dtype=torch.float32).eval()
        acc, dist = t5_nli_accuracy(t5, t5_tok, pairs)
        res["mini-t5"] = {"evaluation_nli_accuracy": round(acc, 4), "evaluation_pred_counts": dist}
        log.info("eval mini-t5 NLI: %s", res["mini-t5"])
        if clf is not None and n_gen > 0:
            if sample is not None and Path(sample).exists():
                examples = load_file(sample)
                res["generator_examples_from"] = "embedded evaluation slice (snli_sample.jsonl)"
            else:
                examples = LoadedData([Example(p.pair_id, p.premise, p.hypothesis, p.label, i + 1)
                                       for i, p in enumerate(pairs)], SkipStats(), {"type": "evaluation slice"})
                res["generator_examples_from"] = "evaluation slice of the held-out pairs"
            models = load_models(EngineConfig(engine="torch"), {"classifier": str(out_dir / "mini-nli"), "generator": str(out_dir / "mini-t5")})
            for mode in ("contradictive", "entailed"):
                r = generator_check(out_dir / "mini-t5", out_dir / "mini-nli", examples, mode, n=n_gen, k=k, seed=seed,
                                    progress=progress, models=models)
                res["mini-t5"][mode] = r
                log.info("eval generator %s: %s", mode, {a: b for a, b in r.items() if a != "examples"})
    res["eval_seconds"] = round(time.perf_counter() - t0, 1)
    res["models_size_bytes"] = folder_size(out_dir)
    write_json(out_dir / EVAL_FILE, res)
    if write_cards:
        _write_cards(out_dir, res)
    return res
