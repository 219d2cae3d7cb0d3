"""The MERGE probe: its options, the variants of each seed problem, the model calls per chunk and the records."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.engines.base import derive_seed
from breaknli_fast.errors import UserError
from breaknli_fast.probes.base import Metric, Probe, StageTimes, StudyContext, option

from breaknli_fast.probes.merge.words import (CATEGORIES, CATEGORY_NAMES, FILTER_STAGES, GROUP, PATTERN_FORMS,
                                              PROB_FILTERS, REFERENCE, REFERENCE_COUNTS, SpacyTagger, Tagger,
                                              derivational_variant, find_candidates, is_word, mask_spans,
                                              replace_spans, source_label, spacy_model, spacy_tagger_name,
                                              variant_texts)
from breaknli_fast.probes.merge.report import (MERGE_VERDICTS, METRIC_LABELS, PATTERN_TEXT, _counts, _examples,
                                               _markdown, _metrics, _mlms, _pa_curve, _problem_draws, _problem_pooled,
                                               plot)


@dataclass
class MergeConfig:
    seeds: int = option(10, help="Random draws of the variants (ALLVar: 10).", flag="--merge-seeds", min=1)
    per_pos: int = option(20, help="(word, suggestion) variants per POS category and problem in each draw.",
                          flag="--merge-per-pos", min=1)
    min_suggestions: int = option(20, help="A word with fewer surviving suggestions is dropped.",
                                  flag="--merge-min-suggestions", min=1)
    top_k: int = option(200, help="Suggestions asked of each masked LM.", flag="--merge-top-k", min=1)
    pos_filter: bool = option(True, help="Keep a suggestion only with the original's POS tag in context.",
                              flag="--merge-pos-filter/--no-merge-pos-filter")
    prob_filter: str = option("below", help="Keep suggestions no more probable than the original (below), more "
                                            "probable (reversed), or any (off).", flag="--merge-prob-filter")
    pattern: str = option("draws", help="Pattern accuracy PA(x) per draw and averaged over the draws (draws), or over "
                                        "all distinct variants of a problem at once (pooled).", flag="--merge-pattern")
    seed: int = 0
    chunk_size: int = 16  # examples per resumable chunk

    def __post_init__(self) -> None:
        for name in ("seeds", "per_pos", "min_suggestions", "top_k", "chunk_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"--merge-{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
                                 if name != "chunk_size" else "--chunk-size must be at least 1")
        if self.prob_filter not in PROB_FILTERS:
            raise ValueError(f"unknown --merge-prob-filter {self.prob_filter!r}; use {', '.join(PROB_FILTERS)}")
        if self.pattern not in PATTERN_FORMS:
            raise ValueError(f"unknown --merge-pattern {self.pattern!r}; use {', '.join(PATTERN_FORMS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the tagger ----------------------------------------------------------------------------------------


class MergeProbe(Probe):
    name = "merge"
    record_fields = ("id", "premise", "hypothesis", "gold", "yhat", "status", "words", "dropped_words", "variants")
    summary = "minimal word replacement, MERGE: the 'merge' extra, --mlm"
    config_class = MergeConfig
    roles = ("classifier", "mlm")

    def __init__(self, config: MergeConfig | None = None, tagger: Tagger | None = None):
        self.cfg = self.config_of(config)  # None, a MergeConfig or a dict of its fields
        self.chunk_size = self.cfg.chunk_size
        self.seed = self.cfg.seed
        self.tagger = tagger
        # without an injected tagger, spaCy must be there: a one-line error before any model loads
        self.tagger_name = tagger.name if tagger is not None else spacy_tagger_name(spacy_model())

    def identity(self) -> dict[str, Any]:
        return {"merge": {**self.cfg.to_dict(), "tagger": self.tagger_name}}

    def new_times(self) -> StageTimes:
        return StageTimes(seconds={"tag": 0.0, "fill_mask": 0.0, "filter": 0.0, "classify": 0.0},
                          pairs={"classify": 0})

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        return [(GROUP, list(data.examples))]

    def prepare(self, ctx: StudyContext, data: LoadedData, todo: bool) -> None:
        if todo and self.tagger is None:
            with ctx.hook.status("loading spaCy"):
                self.tagger = SpacyTagger()
        if todo and not ctx.models.mlm:
            raise UserError("the merge probe needs a masked language model (--mlm mini-mlm)")

    # -- suggestions --------------------------------------------------------------------------------
    def _suggest(self, ctx: StudyContext, jobs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Fill ``word["suggestions"]`` (word -> {mlm: log-probability}) and ``word["scores"]`` of every
        candidate of ``jobs`` ((record, word) pairs)."""
        items = [(mask_spans(rec["premise"], [s[:2] for s in w["p"]]),
                  mask_spans(rec["hypothesis"], [s[:2] for s in w["h"]])) for rec, w in jobs]
        forms = [w["form"] for _, w in jobs]
        for _, w in jobs:
            w["scores"], w["proposed"], w["_sugg"] = {}, {}, {}
        for name, filler in ctx.models.mlm.items():
            fills = filler.fill_mask(items, self.cfg.top_k, forms)
            for (_, w), f in zip(jobs, fills):
                w["scores"][name] = None if f.score is None else round(float(f.score), 6)
                w["proposed"][name] = len(f.words)
                for word, lp in zip(f.words, f.logprobs.tolist()):
                    w["_sugg"].setdefault(word, {})[name] = float(lp)

    def _filter(self, rec: dict[str, Any], w: dict[str, Any], mlms: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The suggestions of one word that pass the word, derivational and probability filters:
        word -> {"src": [masked LMs that keep it]}; counts what each filter removed into ``w["removed"]``."""
        removed = dict.fromkeys(FILTER_STAGES, 0)
        no_score = [m for m in mlms if w["scores"].get(m) is None]
        w["original_not_one_token"] = no_score
        keep: dict[str, dict[str, Any]] = {}
        for word, per in w["_sugg"].items():
            n = len(per)
            if not is_word(word):
                removed["not_word"] += n
                continue
            if derivational_variant(word, w["form"], None, w["lemma"]):
                removed["derivational"] += n
                continue
            src = []
            for m, lp in per.items():
                orig = w["scores"].get(m)
                if self.cfg.prob_filter == "off":
                    src.append(m)
                elif orig is None:
                    removed["probability"] += 1
                elif (lp <= orig + 1e-9) if self.cfg.prob_filter == "below" else (lp > orig + 1e-9):
                    src.append(m)
                else:
                    removed["probability"] += 1
            if src:
                keep[word] = {"src": [m for m in mlms if m in src]}
        w["removed"] = removed
        return keep

    def _pos_check(self, jobs: list[tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]]) -> None:
        """Drop, in place, the suggestions whose tag in context differs from the original's at some replaced
        position, or whose lemma in context is the original's (derivational)."""
        texts: list[str] = []
        plan = []
        for rec, w, keep in jobs:
            for word in keep:
                entries = []
                for side, text in (("p", rec["premise"]), ("h", rec["hypothesis"])):
                    if not w[side]:
                        continue
                    new_text, spans = replace_spans(text, [s[:2] for s in w[side]], word)
                    entries.append((len(texts), spans, [s[2] for s in sorted(w[side], key=lambda s: s[0])]))
                    texts.append(new_text)
                plan.append((w, keep, word, entries))
        tagged = self.tagger.tag(texts) if texts else []
        for w, keep, word, entries in plan:
            ok, lemma_same = True, False
            for ti, spans, tags in entries:
                starts = {t.start: t for t in tagged[ti]}
                for (s, e), tag in zip(spans, tags):
                    tok = starts.get(s)
                    if tok is None or tok.start + len(tok.text) != e:
                        ok = False
                    else:
                        if self.cfg.pos_filter and tok.tag != tag:
                            ok = False
                        if tok.lemma.lower() == w["lemma"]:
                            lemma_same = True
            n = len(keep[word]["src"])
            if lemma_same:
                w["removed"]["derivational"] += n
                del keep[word]
            elif not ok:
                w["removed"]["pos"] += n
                del keep[word]

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        cfg = self.cfg
        mlms = list(ctx.models.mlm)
        if self.tagger is None:  # a Ray worker gets the probe before any prepare() ran in its process
            self.tagger = SpacyTagger()
        t0 = time.perf_counter()
        tagged = self.tagger.tag([t for ex in chunk for t in (ex.premise, ex.hypothesis)])
        ctx.times.add("tag", time.perf_counter() - t0)
        records: list[dict[str, Any]] = []
        jobs: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for i, ex in enumerate(chunk):
            rec: dict[str, Any] = {"group": GROUP, "id": ex.id, "line": ex.line, "premise": ex.premise,
                                   "hypothesis": ex.hypothesis, "gold": ex.label}
            cands, dropped = find_candidates(tagged[2 * i], tagged[2 * i + 1])
            rec["words"], rec["dropped_words"] = cands, dropped
            records.append(rec)
            jobs += [(rec, w) for w in cands]
        t0 = time.perf_counter()
        if jobs:
            self._suggest(ctx, jobs)
        ctx.times.add("fill_mask", time.perf_counter() - t0)
        t0 = time.perf_counter()
        kept = [(rec, w, self._filter(rec, w, mlms)) for rec, w in jobs]
        if kept:
            self._pos_check(kept)
        for rec, w, keep in kept:
            w.pop("_sugg", None)
            w["survivors"] = len(keep)
            if len(keep) < cfg.min_suggestions:
                w["status"], w["reason"] = "dropped", "too_few_suggestions"
            else:
                w["status"] = "kept"
                w["suggestions"] = [[word, v["src"]] for word, v in keep.items()]
        ctx.times.add("filter", time.perf_counter() - t0)
        # variants: per problem and category, per_pos (word, suggestion) pairs per draw
        pairs: list[tuple[str, str]] = [(r["premise"], r["hypothesis"]) for r in records]
        owners: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for rec in records:
            variants: dict[tuple[int, str], dict[str, Any]] = {}
            for cat in CATEGORIES.values():
                pool = [(wi, s[0], s[1]) for wi, w in enumerate(rec["words"]) if w.get("status") == "kept"
                        and w["category"] == cat for s in w["suggestions"]]
                if not pool:
                    continue
                for d in range(cfg.seeds):
                    rng = np.random.default_rng(derive_seed(cfg.seed, "merge", rec["id"], cat, d))
                    for j in sorted(rng.choice(len(pool), size=min(cfg.per_pos, len(pool)), replace=False)):
                        wi, sub, src = pool[int(j)]
                        v = variants.setdefault((wi, sub), {"cat": cat, "w": wi, "sub": sub,
                                                            "src": source_label(src, mlms), "draws": []})
                        v["draws"].append(d)
            rec["variants"] = list(variants.values())
            for v in rec["variants"]:
                pairs.append(variant_texts(rec["premise"], rec["hypothesis"], rec["words"][v["w"]], v["sub"]))
                owners.append((rec, v))
        t0 = time.perf_counter()
        pred = ctx.models.classifier.classify(pairs)
        ctx.times.add("classify", time.perf_counter() - t0, len(pairs))
        labels, probs = pred.labels, pred.probs
        for i, rec in enumerate(records):
            rec["yhat"] = labels[i]
            rec["probs"] = {lab: round(float(probs[i, j]), 6) for j, lab in enumerate(LABELS)}
        for k, (rec, v) in enumerate(owners):
            v["yhat"] = labels[len(records) + k]
            v["ok"] = v["yhat"] == rec["gold"]
        for rec in records:
            n_kept = sum(w.get("status") == "kept" for w in rec["words"])
            rec["status"] = ("kept" if rec["variants"] else "no_word_kept" if rec["words"] or rec["dropped_words"]
                             else "no_candidate")
            rec["words_kept"] = n_kept
        return records

    # -- summary ------------------------------------------------------------------------------------
    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        seeds = [r for r in records if r.get("status") == "kept"]
        mlms = _mlms(records)
        out: dict[str, Any] = {"merge": self.cfg.to_dict(), "tagger": self.tagger_name, "examples": len(records),
                               "counts": _counts(records, mlms, self.cfg.seeds),
                               "metrics": _metrics(seeds, self.cfg.seeds, form=self.cfg.pattern, other_form=True),
                               "reference": {"models": REFERENCE, "counts": REFERENCE_COUNTS},
                               "skips": data.skips.to_dict(), "mlms": mlms}
        out["pa_curve"] = _pa_curve(seeds, self.cfg.seeds, self.cfg.pattern)
        out["by_pos"] = {cat: _metrics(seeds, self.cfg.seeds, lambda v, c=cat: v["cat"] == c, pa_curve=True,
                                       form=self.cfg.pattern) for cat in CATEGORIES.values()}
        labels = sorted({v["src"] for r in seeds for v in r["variants"]}, key=lambda s: (s.count("+") + (s == "both"), s))
        out["by_mlm"] = {lab: _metrics(seeds, self.cfg.seeds, lambda v, x=lab: v["src"] == x, form=self.cfg.pattern)
                         for lab in labels}
        if len(mlms) > 1:
            for m in mlms:
                out["by_mlm"][f"{m} (alone or shared)"] = _metrics(
                    seeds, self.cfg.seeds, lambda v, x=m: v["src"] == x or v["src"] == "both" or x in v["src"].split("+"),
                    form=self.cfg.pattern)
        out["examples_of_variants"] = _examples(seeds)
        return out

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        seeds = [r for r in records if r.get("status") == "kept"]
        m = _metrics(seeds, self.cfg.seeds, form=self.cfg.pattern)
        return {"rates": {k: m[k] for k in ("seed_accuracy", "sample_accuracy", "pa_0.9")},
                "counts": {"seed_problems": len(seeds), "variants": int(m["variants"])}}

    def headline_metrics(self) -> list[Metric]:
        return [Metric("seed_accuracy", "share", METRIC_LABELS["seed_accuracy"]),
                Metric("sample_accuracy", "ratio", "correct variant evaluations / all, pooled over problems"),
                Metric("pa_0.9", "mean", "share of draws with >= 90 % of the problem's variants correct")]

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        seeds = [r for r in records if r.get("status") == "kept"]
        out: dict[str, dict[str, Any]] = {"seed_accuracy": {}, "sample_accuracy": {}, "pa_0.9": {}}
        for r in seeds:
            ok, n, c = _problem_draws(r, self.cfg.seeds)
            out["seed_accuracy"][r["id"]] = float(r["yhat"] == r["gold"])
            out["sample_accuracy"][r["id"]] = (float(ok.sum()), float(n.sum()))
            if self.cfg.pattern == "pooled":
                out["pa_0.9"][r["id"]] = float(_problem_pooled(r, self.cfg.seeds) >= 0.9 - 1e-9)
            else:
                out["pa_0.9"][r["id"]] = float((c[n > 0] >= 0.9 - 1e-9).mean())
        return out

    def predictions(self, record: dict[str, Any]) -> dict[str, str]:
        """M(p, h) and M of each variant, keyed by the replaced word, its replacement and its category."""
        out = {"(p, h)": record["yhat"]} if "yhat" in record else {}
        words = record.get("words") or []
        for v in record.get("variants") or []:
            if "yhat" in v and v["w"] < len(words):
                out[f"{words[v['w']]['form']} -> {v['sub']} ({v['cat']})"] = v["yhat"]
        return out

    def markdown(self, report: dict[str, Any]) -> str:
        return _markdown(report)

    def console(self, report: dict[str, Any]) -> list[Any]:
        m, c = report["metrics"], report["counts"]
        t = self.rate_table(f"MERGE: {c['seed_problems']} seed problems, {c['variants']:g} variants per draw "
                            f"({report['examples']} examples; PA {PATTERN_TEXT[report['merge'].get('pattern', 'draws')]})",
                            m, METRIC_LABELS)
        pos = ", ".join(f"{CATEGORY_NAMES[k]} {v['sample_accuracy']['rate']:.1f} %" for k, v in report["by_pos"].items()
                        if v["sample_accuracy"]["rate"] is not None) or "none"
        ref = REFERENCE["RoBERTa"]
        return [t, f"sample accuracy by POS: {pos}",
                f"[dim]the study, RoBERTa on SNLI test: {ref[0]} % on seed problems, {ref[1]} % on variants[/]"]

    def files(self, report: dict[str, Any], run_dir: Any) -> list[str]:
        return ["pa_curve.png"] if plot(report, run_dir / "pa_curve.png") else []

    @classmethod
    def comparison(cls, report: dict[str, Any]) -> dict[str, Any]:
        m = report.get("metrics", {})
        return {"accuracy": m.get("seed_accuracy"),
                "blocks": [("Minimal expression replacement", cls.metric_rows(m, METRIC_LABELS))]}

    @classmethod
    def example_view(cls, record: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        """p, h and M(p, h); the candidate words and what became of them; every variant (p', h') with the word it
        replaces, the masked LM(s) that proposed the replacement, the draws it is in, and M's label on it."""
        r, gold, yhat = record, record.get("gold"), record.get("yhat")
        probs = r.get("probs") or {}
        sections: list[dict[str, Any]] = [
            {"title": "M(p, h), the seed problem", "kind": "table",
             "columns": ["pair", "M", "P(E)", "P(N)", "P(C)", "gold"],
             "rows": [["(p, h)", yhat, *[probs.get(lab) for lab in LABELS], gold]],
             "marks": ["ok" if yhat == gold else "bad"]}]
        words = r.get("words") or []
        wrows = [[w.get("form"), w.get("category"), w.get("status"), w.get("reason") or "", w.get("survivors")]
                 for w in words]
        wrows += [["/".join(w.get("forms") or [w.get("lemma", "")]), w.get("category"), "dropped", w.get("reason"), None]
                  for w in r.get("dropped_words") or []]
        if wrows:
            sections.append({"title": "candidate words (shared by p and h)", "kind": "table",
                             "columns": ["word", "category", "status", "reason", "suggestions kept"], "rows": wrows,
                             "marks": ["muted" if row[2] != "kept" else None for row in wrows]})
        variants = r.get("variants") or []
        if variants:
            rows, marks = [], []
            for v in variants:
                w = words[v["w"]]
                p2, h2 = variant_texts(r["premise"], r["hypothesis"], w, v["sub"])
                rows.append([f"{w.get('form')} → {v['sub']}", v.get("cat"), v.get("src"), len(v.get("draws", [])),
                             p2, h2, v.get("yhat")])
                marks.append("ok" if v.get("ok") else "bad")
            sections.append({"title": f"the {len(variants)} distinct variants (over the draws) and M's label",
                             "kind": "table", "columns": ["replacement", "category", "masked LM", "draws", "p'", "h'",
                                                          "M"], "rows": rows, "marks": marks})
        if r.get("status") != "kept":
            code = str(r.get("status"))
            why = ("no open-class word shared by p and h" if code == "no_candidate" else
                   "no candidate word kept enough suggestions") + ": not a seed problem."
        else:
            wrong = sum(not v.get("ok") for v in variants)
            code = "all_correct" if wrong == 0 else "some_wrong"
            why = (f"M(p, h) = {yhat} ({'correct' if yhat == gold else 'wrong'}, gold {gold}); {wrong} of "
                   f"{len(variants)} variants are not classified as {gold}"
                   + (": the answer does not survive a minimal replacement." if wrong else "."))
        return {"group": r.get("group"), "yhat": yhat, "gold": gold, "verdict": code,
                "verdict_label": MERGE_VERDICTS.get(code, code), "premise": r.get("premise", ""),
                "hypothesis": r.get("hypothesis", ""), "why": why, "sections": sections}
