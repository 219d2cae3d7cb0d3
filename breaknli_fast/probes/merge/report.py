"""MERGE's metrics (seed and sample accuracy, pattern accuracy PA(x) per draw or pooled), report.md and the PA
curve."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from breaknli_fast.plotting import pyplot
from breaknli_fast.stats import rate_cell
from breaknli_fast.stats import ratio_ci as pooled_ratio_ci

from breaknli_fast.probes.merge.words import (CATEGORIES, CATEGORY_NAMES, EXAMPLES_IN_REPORT, FILTER_STAGES, PA_TABLE,
                                              REFERENCE, REFERENCE_COUNTS, X_GRID, tagger_note, variant_texts)

MERGE_VERDICTS = {"all_correct": "every variant correct", "some_wrong": "some variant wrong",
                  "no_candidate": "no candidate word", "no_word_kept": "no word kept"}
METRIC_LABELS = {"seed_accuracy": "accuracy on the seed problems", "sample_accuracy": "sample accuracy (variants)",
                 "pa_0.5": "PA(0.5)", "pa_0.8": "PA(0.8)", "pa_0.9": "PA(0.9)", "pa_1.0": "PA(1.0)"}


def _mlms(records: Sequence[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for r in records:
        for w in r.get("words", []):
            for m in w.get("scores", {}):
                if m not in out:
                    out.append(m)
    return out


def _problem_draws(rec: dict[str, Any], seeds: int, keep: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per draw: correct variants, variants, and their share (nan where the draw has none) of one problem."""
    ok, n = np.zeros(seeds), np.zeros(seeds)
    for v in rec["variants"]:
        if keep is not None and not keep(v):
            continue
        for d in v["draws"]:
            if d < seeds:
                n[d] += 1
                ok[d] += bool(v["ok"])
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, ok / np.maximum(n, 1), np.nan)
    return ok, n, share


def _problem_pooled(rec: dict[str, Any], seeds: int, keep: Any = None) -> float:
    """The share of a problem's distinct variants (those in some draw) classified correctly, all at once."""
    vs = [v for v in rec["variants"] if (keep is None or keep(v)) and any(d < seeds for d in v["draws"])]
    return float(np.mean([bool(v["ok"]) for v in vs])) if vs else float("nan")


def pattern_accuracy(shares: np.ndarray, x: float) -> np.ndarray:
    """Per problem, the share of draws in which at least a share ``x`` of its variants is correct (``shares``:
    (problems, draws) share of correct variants per draw, nan where a draw has no variant of the problem)."""
    hit = np.where(np.isnan(shares), np.nan, (shares >= x - 1e-9).astype(float))
    with np.errstate(invalid="ignore"):
        return np.nanmean(hit, axis=1)


def ratio_ci(num: np.ndarray, den: np.ndarray) -> dict[str, Any]:
    """A pooled rate Σ num / Σ den (percent) with a 95 % CI over problems (clusters of variants: the ratio
    linearised, a Student-t interval never narrower than z²/(n + z²); :func:`breaknli_fast.stats.ratio_ci`)."""
    keep = den > 0
    num, den = num[keep].astype(float), den[keep].astype(float)
    if den.size == 0:
        return {"n": 0, "rate": None, "ci": None, "variants": 0}
    return {"n": int(den.size), "rate": float(100 * num.sum() / den.sum()), "ci": pooled_ratio_ci(num, den),
            "variants": int(den.sum())}


def _shares(seeds: Sequence[dict[str, Any]], n_draws: int, keep: Any, form: str) -> np.ndarray:
    """Per problem: its share of correct variants per draw (problems, draws), or, pooled, over all its distinct
    variants at once (problems, 1); :func:`pattern_accuracy` reads either."""
    if form == "pooled":
        return np.array([[_problem_pooled(r, n_draws, keep)] for r in seeds]).reshape(len(seeds), 1)
    return np.array([_problem_draws(r, n_draws, keep)[2] for r in seeds]) if seeds else np.zeros((0, n_draws))


def _metrics(seeds: Sequence[dict[str, Any]], n_draws: int, keep: Any = None, pa_curve: bool = False,
             form: str = "draws", other_form: bool = False) -> dict[str, Any]:
    rows = [(r, *_problem_draws(r, n_draws, keep)) for r in seeds]
    rows = [x for x in rows if x[2].sum() > 0]
    ok = np.array([x[1].sum() for x in rows])
    n = np.array([x[2].sum() for x in rows])
    shares = _shares([x[0] for x in rows], n_draws, keep, form)
    out: dict[str, Any] = {"seed_accuracy": rate_cell([float(r["yhat"] == r["gold"]) for r, *_ in rows]),
                           "sample_accuracy": ratio_ci(ok, n),
                           # variants per draw (the study's count), and distinct variants over the draws
                           "variants": round(float(n.sum()) / max(n_draws, 1), 1) if rows else 0,
                           "variants_distinct": int(sum(sum(1 for v in r["variants"] if keep is None or keep(v))
                                                        for r, *_ in rows))}
    for x in PA_TABLE:
        out[f"pa_{x}"] = rate_cell(pattern_accuracy(shares, x).tolist() if rows else [])
    # spread over the draws: the sample accuracy of each draw
    per = [float(100 * sum(x[1][d] for x in rows) / s) for d in range(n_draws)
           if (s := sum(x[2][d] for x in rows)) > 0]
    out["sample_accuracy_by_draw"] = {"mean": float(np.mean(per)) if per else None,
                                      "sd": float(np.std(per, ddof=1)) if len(per) > 1 else None}
    sa, acc = out["sample_accuracy"]["rate"], out["seed_accuracy"]["rate"]
    out["drop"] = None if sa is None or acc is None else acc - sa
    out["pattern"] = form
    if other_form:
        alt = "pooled" if form == "draws" else "draws"
        alt_shares = _shares([x[0] for x in rows], n_draws, keep, alt)
        out["pa_other_form"] = {"pattern": alt, **{f"pa_{x}": rate_cell(pattern_accuracy(alt_shares, x).tolist()
                                                                        if rows else []) for x in (0.9, 1.0)}}
    if pa_curve:
        out["pa_curve"] = [float(100 * np.mean(pattern_accuracy(shares, x))) if rows else None for x in X_GRID]
    return out


def _pa_curve(seeds: Sequence[dict[str, Any]], n_draws: int, form: str = "draws") -> dict[str, Any]:
    shares = _shares(list(seeds), n_draws, None, form)
    return {"x": list(X_GRID), "pattern": form,
            "pa": [float(100 * np.mean(pattern_accuracy(shares, x))) if len(seeds) else None for x in X_GRID]}


def _counts(records: Sequence[dict[str, Any]], mlms: Sequence[str], n_draws: int) -> dict[str, Any]:
    words = [w for r in records for w in r.get("words", [])]
    dropped = [w for r in records for w in r.get("dropped_words", [])]
    seeds = [r for r in records if r.get("status") == "kept"]
    c: dict[str, Any] = {
        "problems": len(records),
        "problems_with_candidates": sum(bool(r.get("words") or r.get("dropped_words")) for r in records),
        "candidate_words": len(words) + len(dropped),
        "words_dropped": {"inflection_mismatch": len(dropped),
                          "too_few_suggestions": sum(w.get("reason") == "too_few_suggestions" for w in words)},
        "words_kept": sum(w.get("status") == "kept" for w in words),
        "words_kept_by_pos": {cat: sum(w.get("status") == "kept" and w["category"] == cat for w in words)
                              for cat in CATEGORIES.values()},
        "original_not_one_token": {m: sum(m in w.get("original_not_one_token", []) for w in words) for m in mlms},
        "suggestions_proposed": {m: sum(w.get("proposed", {}).get(m, 0) for w in words) for m in mlms},
        "suggestions_removed": {k: sum(w.get("removed", {}).get(k, 0) for w in words) for k in FILTER_STAGES},
        "suggestions_kept": sum(w.get("survivors", 0) for w in words),
        "seed_problems": len(seeds),
        "seed_problems_by_pos": {cat: sum(any(v["cat"] == cat for v in r["variants"]) for r in seeds)
                                 for cat in CATEGORIES.values()},
        "variants_distinct": sum(len(r["variants"]) for r in seeds),
        "variants_distinct_by_pos": {cat: sum(v["cat"] == cat for r in seeds for v in r["variants"])
                                     for cat in CATEGORIES.values()},
        "variant_evaluations": sum(len(v["draws"]) for r in seeds for v in r["variants"]),
        "fill_mask_items": {m: sum(m in w.get("proposed", {}) for w in words) for m in mlms},
    }
    c["variants"] = round(c["variant_evaluations"] / n_draws, 1)
    c["variants_by_pos"] = {cat: round(sum(len(v["draws"]) for r in seeds for v in r["variants"] if v["cat"] == cat)
                                       / n_draws, 1) for cat in CATEGORIES.values()}
    return c


def _examples(seeds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in seeds[:EXAMPLES_IN_REPORT]:
        v = next((v for v in r["variants"] if not v["ok"]), r["variants"][0])
        w = r["words"][v["w"]]
        p2, h2 = variant_texts(r["premise"], r["hypothesis"], w, v["sub"])
        out.append({"id": r["id"], "gold": r["gold"], "yhat": r["yhat"], "word": w["form"], "category": v["cat"],
                    "replacement": v["sub"], "source": v["src"], "premise": p2, "hypothesis": h2,
                    "variant_yhat": v["yhat"], "correct_variants": sum(x["ok"] for x in r["variants"]),
                    "variants": len(r["variants"])})
    return out


def _fmt(c: dict[str, Any]) -> str:
    if c.get("rate") is None:
        return "–"
    return f"{c['rate']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]"


def _markdown(report: dict[str, Any]) -> str:
    cfg, c, m = report["merge"], report["counts"], report["metrics"]
    mlms = report.get("mlms") or report["models"].get("mlm") or []
    lines = ["# Minimal expression replacement (MERGE)", "",
             f"- classifier: `{report['models']['classifier']}`, masked LMs: "
             + ", ".join(f"`{x}`" for x in (report["models"].get("mlm") or mlms)) + f", engine `{report['engine']}`, "
             f"dataset `{report['dataset']}`, tagger {tagger_note(report['tagger'])}",
             f"- top-k {cfg['top_k']} per masked LM, at least {cfg['min_suggestions']} suggestions per word, "
             f"{cfg['per_pos']} per POS category and draw, {cfg['seeds']} draws, seed {cfg['seed']}; POS filter "
             f"{'on' if cfg['pos_filter'] else 'off'}, probability filter `{cfg['prob_filter']}`", "",
             "| metric | value % [95 % CI] | n |", "|---|---|---|"]
    for key, label in METRIC_LABELS.items():
        lines.append(f"| {label} | {_fmt(m[key])} | {m[key]['n']} |")
    sd = m["sample_accuracy_by_draw"]["sd"]
    drop = "–" if m["drop"] is None else f"{m['drop']:.2f}"
    sd_text = "–" if sd is None else f"{sd:.2f}"
    lines += ["", f"Variants: {c['variants']:g} per draw (the study's count), {c['variant_evaluations']} evaluations "
              f"over {cfg['seeds']} draws of {c['variants_distinct']} distinct variants; accuracy drop seed → variants "
              f"{drop} points; sample accuracy across draws: sd {sd_text} points.",
              _pattern_text(cfg.get("pattern", "draws"), m), "",
              "Reference (the study, SNLI test, models trained on SNLI; seed problems → variants): "
              + "; ".join(f"{k} {a} → {b} %" for k, (a, b) in REFERENCE.items())
              + f"; {REFERENCE_COUNTS['seed_problems']:,} seed problems, {REFERENCE_COUNTS['variants']:,} variants "
              f"(nouns {REFERENCE_COUNTS['noun']:,}, verbs {REFERENCE_COUNTS['verb']:,}, adjectives "
              f"{REFERENCE_COUNTS['adjective']:,}).", "",
              "## By POS category", "",
              "| category | seed problems | variants per draw | seed accuracy | sample accuracy | PA(0.9) |",
              "|---|---|---|---|---|---|"]
    for cat, x in report["by_pos"].items():
        lines.append(f"| {CATEGORY_NAMES[cat]} | {x['seed_accuracy']['n']} | {x['variants']:g} | {_fmt(x['seed_accuracy'])} | "
                     f"{_fmt(x['sample_accuracy'])} | {_fmt(x['pa_0.9'])} |")
    lines += ["", "## By the masked LM that proposed the suggestion", "",
              "| proposed by | seed problems | variants per draw | sample accuracy | PA(0.9) |", "|---|---|---|---|---|"]
    for lab, x in report["by_mlm"].items():
        lines.append(f"| {lab} | {x['sample_accuracy']['n']} | {x['variants']:g} | {_fmt(x['sample_accuracy'])} | "
                     f"{_fmt(x['pa_0.9'])} |")
    lines += ["", "## Counts per stage", "", "| stage | count |", "|---|---|",
              f"| problems | {c['problems']} |", f"| problems with a candidate word | {c['problems_with_candidates']} |",
              f"| candidate words | {c['candidate_words']} |",
              f"| dropped: occurrences inflected differently | {c['words_dropped']['inflection_mismatch']} |",
              f"| dropped: fewer than {cfg['min_suggestions']} suggestions kept | {c['words_dropped']['too_few_suggestions']} |",
              f"| words kept | {c['words_kept']} ("
              + ", ".join(f"{CATEGORY_NAMES[k]} {v}" for k, v in c["words_kept_by_pos"].items()) + ") |"]
    for mname in c["suggestions_proposed"]:
        lines.append(f"| suggestions proposed by {mname} | {c['suggestions_proposed'][mname]} "
                     f"({c['fill_mask_items'][mname]} masked inputs; original not one token: "
                     f"{c['original_not_one_token'][mname]}) |")
    lines += [f"| suggestions removed: not a word | {c['suggestions_removed']['not_word']} |",
              f"| suggestions removed: derivational variant | {c['suggestions_removed']['derivational']} |",
              f"| suggestions removed: probability ({cfg['prob_filter']}) | {c['suggestions_removed']['probability']} |",
              f"| suggestions removed: POS tag in context | {c['suggestions_removed']['pos']} |",
              f"| suggestions kept (distinct per word) | {c['suggestions_kept']} |",
              f"| seed problems | {c['seed_problems']} ("
              + ", ".join(f"{CATEGORY_NAMES[k]} {v}" for k, v in c["seed_problems_by_pos"].items()) + ") |",
              f"| variants per draw | {c['variants']:g} ("
              + ", ".join(f"{CATEGORY_NAMES[k]} {v:g}" for k, v in c["variants_by_pos"].items()) + ") |",
              f"| distinct variants over the draws | {c['variants_distinct']} ("
              + ", ".join(f"{CATEGORY_NAMES[k]} {v}" for k, v in c["variants_distinct_by_pos"].items()) + ") |",
              f"| variant evaluations over the draws | {c['variant_evaluations']} |", ""]
    t = report.get("throughput") or {}
    st = t.get("stage_seconds") or {}
    sugg = sum(c["suggestions_proposed"].values())
    if st.get("fill_mask"):
        lines += [f"Suggestions: {sugg} in {st['fill_mask']:.2f} s of fill-mask ({sugg / st['fill_mask']:.0f} "
                  f"suggestions/s, {sum(c['fill_mask_items'].values()) / st['fill_mask']:.1f} masked inputs/s); "
                  f"filters and POS tags {st.get('filter', 0):.2f} s; variant pairs: "
                  f"{t.get('classifier_pairs_per_s') or '–'} pairs/s.", ""]
    lines += ["## Examples of variants", ""]
    for e in report["examples_of_variants"]:
        lines += [f"- `{e['id']}` ({e['category']} `{e['word']}` → `{e['replacement']}`, from {e['source']}; gold "
                  f"{e['gold']}, seed prediction {e['yhat']}, variant prediction {e['variant_yhat']}; "
                  f"{e['correct_variants']} of {e['variants']} variants correct)",
                  f"  - p': {e['premise']}", f"  - h': {e['hypothesis']}"]
    lines.append("")
    return "\n".join(lines)


PATTERN_TEXT = {"draws": "per draw, averaged over the draws", "pooled": "pooled over all variants"}


def _pattern_text(form: str, m: dict[str, Any]) -> str:
    """The report's sentence on which PA(x) is shown, with the other form's PA(0.9) and PA(1.0)."""
    if form == "pooled":
        text = ("PA(x), pooled (shown): a seed problem counts as correct at x when at least a share x of all its "
                "distinct variants, over every draw at once, is classified correctly; PA(x) is the share of such "
                "problems (curve: pa_curve.png).")
    else:
        text = ("PA(x), per draw (shown): in one draw a seed problem counts as correct at x when at least a share x "
                "of its variants is classified correctly; PA(x) is the share of such problems, averaged over the "
                "draws (curve: pa_curve.png).")
    alt = m.get("pa_other_form")
    if alt:
        text += (f" The other form ({PATTERN_TEXT[alt['pattern']]}; --merge-pattern {alt['pattern']}): PA(0.9) "
                 f"{_fmt(alt['pa_0.9'])}, PA(1.0) {_fmt(alt['pa_1.0'])}.")
    return text


def plot(report: dict[str, Any], path: Any) -> bool:
    """pa_curve.png: PA(x) over x, all seed problems and per POS category (needs matplotlib)."""
    plt = pyplot()
    if plt is None:
        return False
    curve = report["pa_curve"]
    if not curve["pa"] or curve["pa"][0] is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(curve["x"], curve["pa"], lw=2.5, label=f"all ({report['counts']['seed_problems']} problems)")
    for cat, x in report["by_pos"].items():
        if x.get("pa_curve") and x["pa_curve"][0] is not None:
            ax.plot(curve["x"], x["pa_curve"], lw=1.2, ls="--", label=f"{CATEGORY_NAMES[cat]} ({x['seed_accuracy']['n']})")
    ax.axvline(0.9, ls=":", c="grey")
    ax.set_xlabel("x (share of a problem's variants classified correctly)")
    ax.set_ylabel("PA(x): % of seed problems")
    ax.set_ylim(0, 100)
    ax.set_title(f"MERGE pattern accuracy ({PATTERN_TEXT[curve.get('pattern', 'draws')]})")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
