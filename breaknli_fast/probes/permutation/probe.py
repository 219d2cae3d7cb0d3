"""The permutation probe: its options, the model calls per chunk, the records, the metrics (A, Ω_x, P^c, P^f),
report.md and the Ω_x / BLEU-2 plots."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.stats import rate_cell
from breaknli_fast.probes.base import Metric, Probe, StageTimes, StudyContext, option
from breaknli_fast.plotting import pyplot
from breaknli_fast.probes.permutation.draws import (BLEU_BUCKETS, _bucket, _movable_words, bleu2, count_derangements,
                                                    entropy, permutations, tokenize)

GROUP = "permutation"
SCHEMES = ("both", "hyp")
X_GRID = tuple(round(0.01 * i, 2) for i in range(101))
DROP_REASONS = ("too_short", "fewer_than_q")  # < 2 movable tokens; fewer than q distinct derangements
REFERENCE = {"MNLI matched dev, RoBERTa-large": {"A": 90.6, "omega_max": 98.7, "omega_rand": 79.4},
             "ANLI, RoBERTa-large": {"A": 45.6, "omega_max": 89.7}}


MAX_Q = 10_000  # permutations per example: q classifier pairs per example, all held in one chunk


@dataclass
class PermutationConfig:
    q: int = option(100, help=f"Permutations per example (at most {MAX_Q:,}).", min=1, max=MAX_Q)
    scheme: str = option("both", help="both (premise and hypothesis permuted) or hyp.")
    seed: int = 0
    chunk_size: int = 16  # examples per resumable chunk (q pairs each)
    save_permutations: bool = option(False, help="Keep every permuted pair in samples.jsonl.")

    def __post_init__(self) -> None:
        if not 1 <= self.q <= MAX_Q:
            raise ValueError(f"--q must be between 1 and {MAX_Q}, got {self.q}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown --scheme {self.scheme!r}; use both or hyp")
        if self.chunk_size < 1:
            raise ValueError("--chunk-size must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PermutationProbe(Probe):
    name = "permutation"
    record_fields = ("id", "premise", "hypothesis", "gold", "yhat", "status")
    summary = "word-order permutation acceptance, UNLI"
    config_class = PermutationConfig
    roles = ("classifier",)

    def __init__(self, config: PermutationConfig | None = None):
        self.cfg = self.config_of(config)  # None, a PermutationConfig or a dict of its fields
        self.chunk_size = self.cfg.chunk_size
        self.seed = self.cfg.seed

    def identity(self) -> dict[str, Any]:
        return {"permutation": self.cfg.to_dict()}

    def new_times(self) -> StageTimes:
        return StageTimes(seconds={"permute": 0.0, "classify": 0.0}, pairs={"classify": 0})

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        return [(GROUP, list(data.examples))]

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        import time

        t0 = time.perf_counter()
        records: list[dict[str, Any]] = []
        jobs: list[tuple[dict[str, Any], list[str], list[str]]] = []
        for ex in chunk:
            rec: dict[str, Any] = {"group": GROUP, "id": ex.id, "line": ex.line, "premise": ex.premise,
                                   "hypothesis": ex.hypothesis, "gold": ex.label}
            records.append(rec)
            hp, why_h = permutations(ex.hypothesis, self.cfg.q, self.cfg.seed)
            if self.cfg.scheme == "both":
                pp, why_p = permutations(ex.premise, self.cfg.q, self.cfg.seed)
            else:
                pp, why_p = [ex.premise] * self.cfg.q, None
            if hp is None or pp is None:
                rec["status"] = "dropped"
                rec["reason"] = why_p or why_h
                rec["dropped_sentence"] = "premise" if why_p else "hypothesis"
                rec["derangements"] = count_derangements(
                    _movable_words(tokenize(ex.premise if why_p else ex.hypothesis))[1])
                continue
            jobs.append((rec, pp, hp))
        ctx.times.add("permute", time.perf_counter() - t0)
        pairs = [(r["premise"], r["hypothesis"]) for r in records]  # unpermuted: A, and yhat for every example
        for _, pp, hp in jobs:
            pairs += list(zip(pp, hp))
        t0 = time.perf_counter()
        pred = ctx.models.classifier.classify(pairs)
        ctx.times.add("classify", time.perf_counter() - t0, len(pairs))
        labels, probs = pred.labels, pred.probs
        for i, rec in enumerate(records):
            rec["yhat"] = labels[i]
            rec["probs"] = {lab: round(float(probs[i, j]), 6) for j, lab in enumerate(LABELS)}
        pos = len(records)
        q = self.cfg.q
        for rec, pp, hp in jobs:
            lab, pr = labels[pos : pos + q], probs[pos : pos + q]
            pos += q
            hits = np.array([x == rec["gold"] for x in lab])
            ent = entropy(pr)
            rec["status"] = "kept"
            rec["c"] = round(float(hits.mean()), 6)
            rec["counts"] = {l2: int(sum(x == l2 for x in lab)) for l2 in LABELS}
            rec["labels"] = "".join(SHORT[x] for x in lab)  # M of permutation j, one letter each (E / N / C)
            rec["entropy_correct_sum"] = round(float(ent[hits].sum()), 6)
            rec["n_correct"] = int(hits.sum())
            h_tok, p_tok = tokenize(rec["hypothesis"]), tokenize(rec["premise"])
            buckets = [[0, 0] for _ in BLEU_BUCKETS]
            for j in range(q):
                b = bleu2(hp[j].split(), h_tok)
                if self.cfg.scheme == "both":
                    b = (b + bleu2(pp[j].split(), p_tok)) / 2
                k = _bucket(b)
                buckets[k][0] += 1
                buckets[k][1] += bool(hits[j])
            rec["bleu2_buckets"] = buckets  # [permutations, accepted] per BLEU-2 bucket
            if self.cfg.save_permutations:
                rec["permutations"] = [[a, b] for a, b in zip(pp, hp)] if self.cfg.scheme == "both" else hp
                rec["permutation_labels"] = list(lab)
        return records

    # -- summary ---------------------------------------------------------------------------------------
    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        kept = [r for r in records if r.get("status") == "kept"]
        dropped = {k: sum(r.get("reason") == k for r in records if r.get("status") == "dropped") for k in DROP_REASONS}
        out: dict[str, Any] = {"permutation": self.cfg.to_dict(), "examples": len(records), "kept": len(kept),
                               "dropped": dropped, "metrics": _metrics(kept), "reference": REFERENCE,
                               "skips": data.skips.to_dict()}
        c = np.array([r["c"] for r in kept], dtype=float)
        out["omega_curve"] = {"x": list(X_GRID), "omega": [omega(c, x) for x in X_GRID],
                              "rule": "c_i > x for x < 1; c_i = 1 at x = 1"}
        tot = np.zeros((len(BLEU_BUCKETS), 2))
        for r in kept:
            tot += np.asarray(r["bleu2_buckets"], dtype=float)
        out["bleu2"] = [{"bucket": f"{lo:.1f}" + (f"-{lo + 0.1:.1f}" if lo < 1 else ""), "permutations": int(n),
                         "acceptance": float(100 * a / n) if n else None} for lo, (n, a) in zip(BLEU_BUCKETS, tot)]
        return out

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        kept = [r for r in records if r.get("status") == "kept"]
        m = _metrics(kept)
        return {"rates": {k: m[k] for k in ("A", "omega_max", "omega_rand", "omega_1", "P_c", "P_f")},
                "counts": {"kept": len(kept), "dropped": len(records) - len(kept), "flips": m["flips"]}}

    def markdown(self, report: dict[str, Any]) -> str:
        m, cfg = report["metrics"], report["permutation"]
        lines = ["# Word-order permutation acceptance (UNLI)", "",
                 f"- classifier: `{report['models']['classifier']}`, engine `{report['engine']}`, dataset "
                 f"`{report['dataset']}`",
                 f"- q = {cfg['q']} permutations per example, scheme `{cfg['scheme']}`, seed {cfg['seed']}",
                 f"- examples: {report['examples']}, kept {report['kept']}, dropped "
                 + ", ".join(f"{k} {v}" for k, v in report["dropped"].items()), "",
                 "| metric | value % [95 % CI] | n |", "|---|---|---|"]
        for key, label in METRIC_LABELS.items():
            c = m[key]
            lines.append(f"| {label} | {_fmt(c)} | {c['n']} |")
        lines += [f"| flips (wrong unpermuted, some permutation gold) | {m['flips']} | {m['wrong']} |",
                  f"| mean entropy, permutations predicted correctly (originally correct), nats | "
                  f"{_num(m['entropy_correct_orig_correct'])} | |",
                  f"| mean entropy, permutations predicted correctly (originally wrong), nats | "
                  f"{_num(m['entropy_correct_orig_wrong'])} | |", "",
                  "Definitions (Sinha et al. 2021, UnNatural Language Inference): Ω_x = share of examples with "
                  "c_i > x (Ω_max: c_i > 0; Ω_rand: c_i > 1/3); Ω_1.0 = share with c_i = 1, every permutation "
                  "accepted (the Ω_x curve uses c_i > x below 1 and c_i = 1 at its endpoint); P^c = mean c_i over "
                  "all originally correct examples; P^f = mean c_i over the originally wrong examples with c_i > 0 "
                  "(the flips). A model that ignores word order has P^c = 100 and P^f = 0.", "",
                  "Reference (the study): " + "; ".join(
                      f"{k}: " + ", ".join(f"{REF_NAMES[a]} {b} %" for a, b in v.items())
                      for k, v in report["reference"].items()), "",
                  "## Acceptance by BLEU-2 of the permutation against its original", "",
                  "| BLEU-2 | permutations | accepted % |", "|---|---|---|"]
        for b in report["bleu2"]:
            if b["permutations"]:
                lines.append(f"| {b['bucket']} | {b['permutations']} | {b['acceptance']:.2f} |")
        lines.append("")
        return "\n".join(lines)

    def headline_metrics(self) -> list[Metric]:
        return [Metric("A", "share", METRIC_LABELS["A"]), Metric("omega_max", "share", METRIC_LABELS["omega_max"]),
                Metric("omega_rand", "share", METRIC_LABELS["omega_rand"]),
                Metric("P_c", "mean", "c_i over originally correct examples with c_i > 0"),
                Metric("P_f", "mean", "c_i over originally wrong examples with c_i > 0")]

    def predictions(self, record: dict[str, Any]) -> dict[str, str]:
        """M(p, h) and M of each permuted pair, keyed by its index j (permutation j is the same text for every
        engine: one generator seeded by (run seed, j))."""
        out = {"(p, h)": record["yhat"]} if "yhat" in record else {}
        long = {v: k for k, v in SHORT.items()}
        for j, x in enumerate(record.get("labels") or ""):
            out[f"permutation {j}"] = long[x]
        return out

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        kept = [r for r in records if r.get("status") == "kept"]
        return {"A": {r["id"]: float(r["yhat"] == r["gold"]) for r in kept},
                "omega_max": {r["id"]: float(r["c"] > 0) for r in kept},
                "omega_rand": {r["id"]: float(r["c"] > 1 / 3) for r in kept},
                "omega_1": {r["id"]: float(r["c"] >= 1) for r in kept},
                "P_c": {r["id"]: r["c"] for r in kept if r["yhat"] == r["gold"]},
                "P_f": {r["id"]: r["c"] for r in kept if r["yhat"] != r["gold"] and r["c"] > 0}}

    def console(self, report: dict[str, Any]) -> list[Any]:
        m = report["metrics"]
        t = self.rate_table(f"Permutation acceptance (q = {report['permutation']['q']}, scheme "
                            f"{report['permutation']['scheme']}): {report['kept']} of {report['examples']} examples "
                            "kept", m, METRIC_LABELS)
        dropped = ", ".join(f"{k} {v}" for k, v in report["dropped"].items() if v) or "none"
        ref = REFERENCE["MNLI matched dev, RoBERTa-large"]
        return [t, f"flips: {m['flips']} of {m['wrong']} wrong examples; dropped: {dropped}",
                f"[dim]the study, RoBERTa-large on MNLI matched dev: A {ref['A']} %, Ω_max {ref['omega_max']} %, "
                f"Ω_rand {ref['omega_rand']} %[/]"]

    def files(self, report: dict[str, Any], run_dir: Any) -> list[str]:
        return ["omega.png"] if plot(report, run_dir / "omega.png") else []

    @classmethod
    def comparison(cls, report: dict[str, Any]) -> dict[str, Any]:
        m = report.get("metrics", {})
        return {"accuracy": m.get("A"),
                "blocks": [("Word-order permutations", cls.metric_rows(m, METRIC_LABELS))]}

    @classmethod
    def example_view(cls, record: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        """p, h and M(p, h); the labels M gave the q permutations; the permutations with their labels (kept with
        --save-permutations; otherwise the first few, drawn again from the seed, without labels)."""
        cfg = report.get("permutation") or {}
        r, gold, yhat = record, record.get("gold"), record.get("yhat")
        probs = r.get("probs") or {}
        sections: list[dict[str, Any]] = [
            {"title": "M(p, h), unpermuted", "kind": "table", "columns": ["pair", "M", "P(E)", "P(N)", "P(C)", "gold"],
             "rows": [["(p, h)", yhat, *[probs.get(lab) for lab in LABELS], gold]],
             "marks": ["ok" if yhat == gold else "bad"]}]
        if r.get("status") != "kept":
            code = "dropped"
            why = f"dropped: {r.get('reason')} ({r.get('dropped_sentence')}): no set of q distinct permutations."
            return _view(r, code, f"dropped: {r.get('reason')}", why, sections)
        c, q = float(r.get("c", 0.0)), cfg.get("q") or sum((r.get("counts") or {}).values())
        counts = r.get("counts") or {}
        sections.append({"title": f"M's labels over the q = {q} permutations", "kind": "table",
                         "columns": ["label", "permutations", "share"],
                         "rows": [[lab, counts.get(lab, 0), round(counts.get(lab, 0) / q, 4) if q else None]
                                  for lab in LABELS],
                         "marks": ["bad" if lab == gold and counts.get(lab) else None for lab in LABELS]})
        if r.get("permutations") is not None:
            perms, labels = r["permutations"], r.get("permutation_labels") or [None] * len(r["permutations"])
            rows = [[*(x if isinstance(x, list) else [r.get("premise"), x]), lab] for x, lab in zip(perms, labels)]
            sections.append({"title": "the permutations (p', h') and M(p', h')", "kind": "table",
                             "columns": ["p'", "h'", "M"], "rows": rows,
                             "marks": ["bad" if lab == gold else None for lab in labels]})
        elif cfg:
            shown = min(SHOWN_PERMUTATIONS, int(q or 0))
            # permutation j is drawn by the generator of (seed, j) alone: the first few are those of the run
            hp, _ = permutations(r["hypothesis"], shown, int(cfg.get("seed", 0)))
            pp = (permutations(r["premise"], shown, int(cfg.get("seed", 0)))[0] if cfg.get("scheme") == "both"
                  else [r["premise"]] * shown)
            if hp and pp:
                sections.append({"title": f"the first {shown} permutations (p', h'), drawn again from the seed "
                                          "(their labels are kept with --save-permutations)", "kind": "table",
                                 "columns": ["p'", "h'"], "rows": [[a, b] for a, b in zip(pp[:shown], hp[:shown])],
                                 "marks": [None] * shown})
        n_gold = counts.get(gold, 0)
        code = "none" if c <= 0 else "some" if c <= 1 / 3 else "many"
        why = (f"c_i = {c:.2f}: {n_gold} of {q} permutations were predicted as the gold label {gold}"
               + (f" (M(p, h) = {yhat}, {'correct' if yhat == gold else 'wrong'}); " if yhat else "; ")
               + ("a model that reads word order accepts none." if c <= 0 else
                  "it accepts word salad: counted in Ω_max" + (" and Ω_rand (c_i > 1/3)." if c > 1 / 3 else ".")))
        return _view(r, code, PERMUTATION_VERDICTS[code], why, sections)


SHOWN_PERMUTATIONS = 5  # permutations drawn again for the example browser when they were not kept
PERMUTATION_VERDICTS = {"dropped": "dropped", "none": "no permutation accepted (c_i = 0)",
                        "some": "some accepted (0 < c_i ≤ 1/3)", "many": "many accepted (c_i > 1/3)"}


def _view(r: dict[str, Any], code: str, label: str, why: str, sections: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group": r.get("group"), "yhat": r.get("yhat"), "gold": r.get("gold"), "verdict": code,
            "verdict_label": label, "premise": r.get("premise", ""), "hypothesis": r.get("hypothesis", ""),
            "why": why, "sections": sections}


REF_NAMES = {"A": "A", "omega_max": "Ω_max", "omega_rand": "Ω_rand"}
METRIC_LABELS = {"A": "A: accuracy, unpermuted", "omega_max": "Ω_max: some permutation accepted",
                 "omega_rand": "Ω_rand: c_i > 1/3", "omega_1": "Ω_1.0: every permutation accepted",
                 "P_c": "P^c: mean c_i, originally correct", "P_f": "P^f: mean c_i, flips"}


def _fmt(c: dict[str, Any]) -> str:
    if c.get("rate") is None:
        return "–"
    return f"{c['rate']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def _metrics(kept: Sequence[dict[str, Any]]) -> dict[str, Any]:
    correct = [r for r in kept if r["yhat"] == r["gold"]]
    wrong = [r for r in kept if r["yhat"] != r["gold"]]
    flips = [r for r in wrong if r["c"] > 0]

    def ent(rs: Sequence[dict[str, Any]]) -> float | None:
        n = sum(r["n_correct"] for r in rs)
        return sum(r["entropy_correct_sum"] for r in rs) / n if n else None

    return {"A": rate_cell([r["yhat"] == r["gold"] for r in kept]),
            "omega_max": rate_cell([r["c"] > 0 for r in kept]),
            "omega_rand": rate_cell([r["c"] > 1 / 3 for r in kept]),
            "omega_1": rate_cell([r["c"] >= 1 for r in kept]),
            "P_c": rate_cell([r["c"] for r in correct]),
            "P_f": rate_cell([r["c"] for r in flips]),
            "flips": len(flips), "wrong": len(wrong), "correct": len(correct),
            "entropy_correct_orig_correct": ent(correct), "entropy_correct_orig_wrong": ent(wrong)}


def omega(c: np.ndarray, x: float) -> float | None:
    """Ω_x in percent over the shares ``c``: c_i > x (the thesis's definition) for x < 1, and at x = 1 the share
    with c_i = 1 (the thesis's Ω_1.0, every permutation accepted; c_i > 1 never holds)."""
    if not c.size:
        return None
    return float(100 * ((c >= 1) if x >= 1 else (c > x)).mean())


def plot(report: dict[str, Any], path: Any) -> bool:
    """omega.png: the Ω_x curve and acceptance by BLEU-2 bucket (needs matplotlib, the ``bench`` extra)."""
    plt = pyplot()
    if plt is None:
        return False
    curve = report["omega_curve"]
    if curve["omega"][0] is None:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(curve["x"], curve["omega"], lw=2)
    a.axvline(1 / 3, ls=":", c="grey")
    a.set_xlabel("x (share of permutations accepted)")
    a.set_ylabel("Ω_x: % of examples with c_i > x (c_i = 1 at x = 1)")
    a.set_ylim(0, 100)
    a.set_title(f"Ω_x curve ({report['kept']} examples, q = {report['permutation']['q']})")
    rows = [r for r in report["bleu2"] if r["permutations"]]
    b.bar([r["bucket"] for r in rows], [r["acceptance"] for r in rows])
    b.set_xlabel("BLEU-2 of the permutation against its original")
    b.set_ylabel("% of permutations accepted")
    b.set_ylim(0, 100)
    b.tick_params(axis="x", labelrotation=45)
    b.set_title("acceptance by BLEU-2")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
