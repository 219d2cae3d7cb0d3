"""Speed and parity of the MERGE probe's two workloads on each engine: batched fill-mask suggestions (the masked
LM) and classification of the variant pairs (the NLI model), torch fp32 against ort fp32 / int8.

A script, not a bench option: it times MERGE's two workloads apart (fill-mask suggestions, variant pairs); bench
--probe merge times them together.

    python scripts/bench_merge.py --limit 100 --out /tmp/merge_bench.json

1. Data: the first ``--limit`` examples of the embedded SNLI sample, tagged with spaCy (the ``merge`` extra);
   the candidate words of the probe, each masked wherever it occurs in (p, h): the fill-mask inputs.
2. Suggestions/s per engine: ``fill_mask(inputs, top_k)`` with the original word scored in the same pass, on
   the shipped mini-mlm and on a random-weight masked LM of roberta-base's shape (mini-mlm's tokenizer, the real
   vocabulary size and layers; ``--big-items`` inputs; its int8 export is not gated by the validation, since
   random weights give near-tied suggestions). Median of ``--repeat`` timed calls after one warm-up, the
   engine's cache cleared before each.
3. Variants: the probe on torch fp32 (mini-mlm suggestions, POS filter, draws) gives the variant pairs once;
   variant pairs/s of mini-nli on each engine over exactly those pairs.
4. Parity on the same variants (spec: paired per seed problem, 95 % interval of breaknli_fast.stats, verdict against
   δ = 1 point): sample accuracy and PA(0.9) of each engine's classifier minus torch fp32's. (The whole probe on
   each engine, masked LM included, is ``breaknli-fast bench --probe merge``.)

Writes one JSON result file (``--out``) with its provenance: command, UTC date, commit, machine (through
scripts/provenance.py where it is there).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KIND = "merge"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def provenance_fields() -> dict[str, Any]:
    """command, commit and machine as scripts/provenance.py records them (its helpers when it is there)."""
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import provenance as pv  # type: ignore[import-not-found]

        return {"schema": pv.SCHEMA, "command": pv.script_command(__file__), "commit": pv.commit(),
                "_machine": lambda before: pv.machine(before, pv.load_average()), "_load": pv.load_average(),
                "_portable": pv.portable_strings}
    except ImportError:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                   text=True).stdout.strip()
            commit += "-dirty" if dirty else ""
        except (OSError, subprocess.CalledProcessError):
            commit = None
        return {"schema": "breaknli-fast-result/1", "command": shlex.join(["python", "scripts/bench_merge.py",
                                                                           *sys.argv[1:]]),
                "commit": commit, "_load": None,
                "_machine": lambda before: {"cpu": platform.processor(), "cores": os.cpu_count(),
                                            "python": platform.python_version(), "platform": platform.platform()}}


def timed(fn: Any, repeat: int, before: Any = None) -> tuple[float, Any]:
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


def parse_engines(text: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        engine, _, prec = item.strip().partition(":")
        out.append((engine, prec or "fp32"))
    return out


def random_mlm(folder: Path) -> str:
    """A random-weight RobertaForMaskedLM of roberta-base's shape with mini-mlm's tokenizer (built once)."""
    if (folder / "config.json").exists():
        return str(folder)
    import shutil

    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    from breaknli_fast.bench.shapes import SHAPES
    from breaknli_fast.engines.model_info import assets_models_dir

    shape = {k: v for k, v in SHAPES["roberta-base"].items() if k != "family"}
    src = assets_models_dir() / "mini-mlm"
    folder.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        shutil.copy2(src / f, folder / f)
    cfg = RobertaConfig(**shape, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    cfg.architectures = ["RobertaForMaskedLM"]
    torch.manual_seed(0)
    RobertaForMaskedLM(cfg).save_pretrained(folder, safe_serialization=True)
    return str(folder)


def load_filler(engine: str, model: str, prec: str, cache_dir: str | None) -> Any:
    from breaknli_fast.engines import registry

    opts: dict[str, Any] = {}
    if engine == "ort" and cache_dir:  # random weights: near-tied suggestions, validated (figures kept), not gated
        opts["tolerances"] = {"max_abs_logit": None, "min_agreement": None, "min_topk_agreement": None}
        opts["cache_dir"] = cache_dir
    return registry.load_mask_filler(engine, model, precision=prec, **opts)


def fill_bench(engine: str, prec: str, model: str, items: list, forms: list, top_k: int, repeat: int,
               cache_dir: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    filler = load_filler(engine, model, prec, cache_dir)
    load_s = time.perf_counter() - t0
    secs, fills = timed(lambda: filler.fill_mask(items, top_k, forms), repeat, before=filler.clear_cache)
    n_sugg = sum(len(f.words) for f in fills)
    details = filler.info.details
    return {"engine": engine, "precision": prec, "model": model, "items": len(items), "top_k": top_k,
            "masks": sum(f.masks for f in fills), "seconds": round(secs, 4), "load_seconds": round(load_s, 2),
            "items_per_s": round(len(items) / secs, 2), "suggestions_per_s": round(n_sugg / secs, 1),
            "validation": details.get("validation"), "workers": details.get("workers"),
            "torch_threads": details.get("torch_threads"), "max_batch": details.get("max_batch"),
            "_fills": fills}


def agreement(ref: list, fills: list) -> dict[str, Any]:
    top1 = sum(bool(a.words and b.words and a.words[0] == b.words[0]) for a, b in zip(fills, ref))
    k = max((len(r.words) for r in ref), default=0)
    overlap = [len(set(a.words[:10]) & set(b.words[:10])) / max(len(b.words[:10]), 1) for a, b in zip(fills, ref)]
    return {"top1_agreement": round(100 * top1 / max(len(ref), 1), 2),
            "top10_overlap": round(100 * sum(overlap) / max(len(overlap), 1), 2),
            f"top{k}_overlap": round(100 * sum(len(set(a.words) & set(b.words)) / max(len(b.words), 1)
                                               for a, b in zip(fills, ref)) / max(len(ref), 1), 2)}


def paired(records_a: list, records_b: list, n_draws: int, tolerance: float) -> dict[str, Any]:
    """Engine minus reference on the same seed problems and variants: sample accuracy (pooled over variants and
    draws: a ratio per problem), PA(0.9) (a share of draws per problem) and seed accuracy (0/1), each with its
    paired 95 % interval (breaknli_fast.stats: Tango's for 0/1, a floored Student-t for fractions and ratios) and
    the spec's verdict."""
    import numpy as np

    from breaknli_fast.stats import equivalence, paired_diff, paired_ratio_diff
    from breaknli_fast.probes.merge.report import _problem_draws, pattern_accuracy

    def per_problem(recs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=100, help="sample examples (default 100)")
    ap.add_argument("--engines", default="torch:fp32,ort:fp32,ort:int8")
    ap.add_argument("--top-k", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--per-pos", type=int, default=20)
    ap.add_argument("--min-suggestions", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", default="roberta-base", help="random-weight MLM shape ('none' to skip)")
    ap.add_argument("--big-items", type=int, default=64, help="fill-mask inputs for the random-weight MLM")
    ap.add_argument("--tolerance", type=float, default=1.0, help="δ of the parity verdicts (percentage points)")
    ap.add_argument("--out", required=True, help="the JSON result file")
    args = ap.parse_args()

    prov = provenance_fields()
    date, t_start = utc_now(), time.perf_counter()

    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines import registry
    from breaknli_fast.probes.merge import MergeConfig, MergeProbe
    from breaknli_fast.probes.merge.words import SpacyTagger, find_candidates, mask_spans, variant_texts
    from breaknli_fast.study import run_study

    engines = parse_engines(args.engines)
    data = load_examples("sample", limit=args.limit)
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

    payload: dict[str, Any] = {"limit": args.limit, "examples": len(data.examples), "fill_mask_inputs": len(items),
                               "top_k": args.top_k, "repeat": args.repeat, "tagger": tagger.name,
                               "tag_sentences_per_s": round(2 * len(data.examples) / tag_s, 1),
                               "fill_mask": {}, "classify": {}, "parity": {}}
    # 2. suggestions/s
    ref_fills = None
    for engine, prec in engines:
        r = fill_bench(engine, prec, "mini-mlm", items, forms, args.top_k, args.repeat)
        fills = r.pop("_fills")
        if ref_fills is None:
            ref_fills = fills
        else:
            r["agreement_with_first"] = agreement(ref_fills, fills)
        payload["fill_mask"][f"mini-mlm {engine}:{prec}"] = r
        print(f"mini-mlm {engine}:{prec}: {r['suggestions_per_s']} suggestions/s", file=sys.stderr)
    if args.big != "none":
        with tempfile.TemporaryDirectory() as tmp:
            big = random_mlm(Path(tmp) / "mlm")
            sub_items, sub_forms = items[: args.big_items], forms[: args.big_items]
            for engine, prec in engines:
                r = fill_bench(engine, prec, big, sub_items, sub_forms, args.top_k, max(1, args.repeat - 1),
                               cache_dir=str(Path(tmp) / "exports"))
                r.pop("_fills")
                r["model"] = f"random-weight {args.big} shape (mini-mlm tokenizer)"
                payload["fill_mask"][f"{args.big} (random) {engine}:{prec}"] = r
                print(f"{args.big} {engine}:{prec}: {r['suggestions_per_s']} suggestions/s", file=sys.stderr)
    # 3. the variants, once, from the torch fp32 probe
    cfg = MergeConfig(seeds=args.seeds, per_pos=args.per_pos, min_suggestions=args.min_suggestions, top_k=args.top_k)
    t0 = time.perf_counter()
    study = run_study(MergeProbe(cfg, tagger=tagger), data=data, classifier="mini-nli", engine="torch", mlm="mini-mlm")
    payload["probe_torch_fp32_seconds"] = round(time.perf_counter() - t0, 2)
    payload["probe_stage_seconds"] = study.report["throughput"]["stage_seconds"]
    payload["counts"] = study.report["counts"]
    seeds = [r for r in study.records if r["status"] == "kept"]
    pairs = [variant_texts(r["premise"], r["hypothesis"], r["words"][v["w"]], v["sub"])
             for r in seeds for v in r["variants"]]
    payload["variant_pairs"] = len(pairs)
    preds: dict[str, list[str]] = {}
    for engine, prec in engines:
        clf = registry.load_classifier(engine, "mini-nli", precision=prec)
        secs, pred = timed(lambda: clf.classify(pairs), args.repeat, before=clf.clear_cache)
        preds[f"{engine}:{prec}"] = pred.labels
        payload["classify"][f"mini-nli {engine}:{prec}"] = {
            "pairs": len(pairs), "seconds": round(secs, 4), "pairs_per_s": round(len(pairs) / secs, 1),
            "workers": clf.info.details.get("workers"), "max_batch": clf.info.details.get("max_batch")}
        print(f"mini-nli {engine}:{prec}: {len(pairs) / secs:.0f} variant pairs/s", file=sys.stderr)
    # 4. parity on the same variants
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
        payload["parity"][f"{key} vs {ref_key}"] = {
            "variant_label_agreement": round(100 * agree, 3),
            **paired(with_labels(labels), ref_recs, args.seeds, args.tolerance)}
    payload["note"] = ("parity: the classifier on the same variant pairs (built once by torch fp32); seed accuracy "
                       "there compares the classifiers on the seed problems; the masked LM's own agreement is under "
                       "fill_mask (agreement_with_first)")
    doc = {"schema": prov["schema"], "kind": KIND, "command": prov["command"], "date": date, "finished": utc_now(),
           "duration_s": round(time.perf_counter() - t_start, 1), "commit": prov["commit"],
           "machine": prov["_machine"](prov["_load"]), "payload": payload}
    doc = prov.get("_portable", lambda d: d)(doc)  # no path of this checkout in the file
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"result written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
