"""The exhaustive logic corpus (``aenli``, after Geiger and Tran's automated and exhaustive NLI corpus): pairs of
sentences over a vocabulary of agents, things, transitive verbs and adverbs, labelled by the model checker of
:mod:`breaknli_fast.data.synthetic.logic`.

A pair is drawn from one triple ⟨agent, verb, thing⟩ (two triples for a compound): the premise's and the
hypothesis's clauses are built independently (determiners of agent and thing from every / a / the, negation,
passive, the triple's adverb at a valid position or none), the same connective joins the clauses of a compound,
and with probability ``other_vocab`` one hypothesis clause takes another agent, verb or thing; a pair whose
hypothesis would repeat its premise word for word is drawn again. With
``balanced`` (the default) the labels follow :func:`~breaknli_fast.data.synthetic.common.label_schedule` and a
drawn pair whose label is not the next one is drawn again, so each label's pairs keep the draw's distribution.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import breaknli_fast.data.synthetic.logic as logic
from breaknli_fast.data.synthetic.common import SyntheticError, asset_path, check_rate, label_schedule, load_json
from breaknli_fast.data.synthetic.logic import DETERMINERS, Clause, Sentence

NAME = "aenli"
RESERVED = frozenset({"every", "a", "an", "the", "did", "not", "was", "by", "and", "or", "if", "then"})
MAX_DRAWS = 2000  # draws for one pair of the scheduled label before the options are judged unable to give it
SLOTS = ("other_agent", "other_verb", "other_thing")


@dataclass(frozen=True)
class Verb:
    base: str
    past: str
    participle: str


@dataclass(frozen=True)
class Adverb:
    word: str
    before_negation: bool


@dataclass(frozen=True)
class Vocabulary:
    agents: tuple[str, ...]
    things: tuple[str, ...]
    verbs: tuple[Verb, ...]
    adverbs: tuple[Adverb, ...]


def vocabulary_path() -> Path:
    return asset_path("aenli_vocabulary.json")


_WORD = re.compile(r"[a-z][a-z-]*")


def load_vocabulary(path: str | Path | None = None) -> Vocabulary:
    """The shipped vocabulary (100 agents, 100 things, 100 verbs, 50 adverbs) or a JSON file of the same shape."""
    if path is None:
        return _shipped_vocabulary()
    return _parse_vocabulary(load_json(Path(path).expanduser()), Path(path))


@lru_cache(maxsize=1)
def _shipped_vocabulary() -> Vocabulary:
    return _parse_vocabulary(load_json(vocabulary_path()), vocabulary_path())


def _parse_vocabulary(data: Any, path: Path) -> Vocabulary:
    def fail(msg: str) -> SyntheticError:
        return SyntheticError(f"vocabulary {path}: {msg}")

    if not isinstance(data, dict):
        raise fail("expected an object with agents, things, verbs and adverbs")
    try:
        agents = tuple(data["agents"])
        things = tuple(data["things"])
        verbs = tuple(Verb(v["base"], v["past"], v["participle"]) for v in data["verbs"])
        adverbs = tuple(Adverb(a["word"], bool(a.get("before_negation", False))) for a in data["adverbs"])
    except (KeyError, TypeError) as e:
        raise fail(f"missing or malformed entry ({e})") from None
    words: dict[str, str] = {}
    forms = [f for v in verbs for f in (v.base, v.past, v.participle)]
    for kind, items in (("agents", agents), ("things", things), ("verbs", forms),
                        ("adverbs", [a.word for a in adverbs])):
        for w in items:
            if not isinstance(w, str) or not _WORD.fullmatch(w) or w in RESERVED:
                raise fail(f"{kind}: {w!r} is not one lower-case word outside {', '.join(sorted(RESERVED))}")
            if words.get(w, kind) != kind:
                raise fail(f"{w!r} is in both {words[w]} and {kind}")
            words[w] = kind
    for kind, items in (("agents", agents), ("things", things), ("verbs", [v.base for v in verbs]),
                        ("adverbs", [a.word for a in adverbs])):
        if len(items) < 2:
            raise fail(f"{kind} needs at least two entries")
        if len(set(items)) != len(items):
            raise fail(f"{kind} has duplicates")
    return Vocabulary(agents, things, verbs, adverbs)


@dataclass(frozen=True)
class AenliConfig:
    """Draw probabilities: a compound sentence, a hypothesis clause over other words, and per clause negation,
    passive voice and the adverb. ``balanced``: equal label counts (else the draw's own distribution)."""

    compound: float = 0.5
    other_vocab: float = 0.2
    negation: float = 0.5
    passive: float = 0.5
    adverb: float = 0.5
    balanced: bool = True
    vocabulary: str | None = None

    def __post_init__(self) -> None:
        for name in ("compound", "other_vocab", "negation", "passive", "adverb"):
            check_rate(name.replace("_", "-"), getattr(self, name))


@dataclass
class Draw:
    """One pair before it is labelled and put into words (vocabulary indices and clause shapes)."""

    connective: str
    # per clause pair: (premise triple, premise clause, hypothesis triple, hypothesis clause, adverb index, vocab)
    parts: list[list[Any]] = field(default_factory=list)

    def sentences(self) -> tuple[Sentence, Sentence]:
        p = tuple(((*c[0], c[4]), c[1]) for c in self.parts)
        h = tuple(((*c[2], c[4]), c[3]) for c in self.parts)
        return Sentence(self.connective, p), Sentence(self.connective, h)


_CLAUSES: dict[tuple, Clause] = {}  # one Clause object per shape (draws compare them with `is`)
_FORMULAS: dict[Clause, logic.Formula] = {}


def _clause(rng: random.Random, cfg: AenliConfig, over_negation: bool) -> Clause:
    r = rng.random
    sd, od = DETERMINERS[int(r() * 3)], DETERMINERS[int(r() * 3)]
    neg = r() < cfg.negation
    pas = r() < cfg.passive
    pos = None
    if r() < cfg.adverb:
        if neg and not pas and over_negation:
            pos = ("before_verb", "end", "before_negation")[int(r() * 3)]
        else:
            pos = "before_verb" if r() < 0.5 else "end"
    key = (sd, od, neg, pas, pos)
    c = _CLAUSES.get(key)
    if c is None:
        c = _CLAUSES[key] = Clause(*key)
        _FORMULAS[c] = c.formula()
    return c


def label(d: Draw) -> str | None:
    """The label of a draw from its clause pairs' masks (:func:`logic.pair_mask`); None where the premise has
    no model. Equal to ``logic.label(*d.sentences())``."""
    masks = [logic.pair_mask(_FORMULAS[part[1]], _FORMULAS[part[3]], part[0] == part[2]) for part in d.parts]
    m = masks[0] if d.connective == "none" else logic.COMBINE[d.connective][masks[0]][masks[1]]
    return logic.MASK_LABEL[m]


def draw(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig) -> Draw:
    """One pair of the configured distribution (not yet labelled)."""
    r = rng.random
    conn = "none" if r() >= cfg.compound else ("and", "or", "if")[int(r() * 3)]
    sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
    triples: list[tuple[int, int, int]] = []
    while len(triples) < (1 if conn == "none" else 2):
        t = (int(r() * sizes[0]), int(r() * sizes[1]), int(r() * sizes[2]))
        if t not in triples:
            triples.append(t)
    d = Draw(conn)
    for t in triples:
        a = int(r() * len(vocab.adverbs))
        over = vocab.adverbs[a].before_negation
        d.parts.append([t, _clause(rng, cfg, over), t, _clause(rng, cfg, over), a, "same"])
    if r() < cfg.other_vocab:
        part = d.parts[int(r() * len(d.parts))]
        slot = int(r() * 3)
        for _ in range(20):
            t = list(part[0])
            t[slot] = (t[slot] + 1 + int(r() * (sizes[slot] - 1))) % sizes[slot]
            if tuple(t) not in triples:
                part[2], part[5] = tuple(t), SLOTS[slot]
                break
    return d


def _np(det: str, noun: str) -> str:
    return f"{'an' if det == 'a' and noun[0] in 'aeiou' else det} {noun}"


def clause_text(c: Clause, agent: str, verb: Verb, thing: str, adverb: str) -> str:
    """The clause in words (lower case)."""
    subj, obj = _np(c.subj_det, agent), _np(c.obj_det, thing)
    pre = [adverb] if c.adverb == "before_verb" else []
    end = [adverb] if c.adverb == "end" else []
    if c.passive:
        words = [obj, "was"] + (["not"] if c.negated else []) + pre + [verb.participle, "by", subj] + end
    elif c.negated:
        over = [adverb] if c.adverb == "before_negation" else []
        words = [subj] + over + ["did not"] + pre + [verb.base, obj] + end
    else:
        words = [subj] + pre + [verb.past, obj] + end
    return " ".join(words)


def sentence_text(connective: str, clauses: list[str]) -> str:
    if connective == "none":
        s = clauses[0]
    elif connective == "if":
        s = f"if {clauses[0]}, then {clauses[1]}"
    else:
        s = f"{clauses[0]} {connective} {clauses[1]}"
    return s[0].upper() + s[1:] + "."


def _features(prefix: str, c: Clause | None) -> dict[str, Any]:
    if c is None:
        return {f"{prefix}_subj_det": None, f"{prefix}_obj_det": None, f"{prefix}_negation": None,
                f"{prefix}_passive": None, f"{prefix}_adverb": None}
    return {f"{prefix}_subj_det": c.subj_det, f"{prefix}_obj_det": c.obj_det, f"{prefix}_negation": int(c.negated),
            f"{prefix}_passive": int(c.passive), f"{prefix}_adverb": c.adverb or "none"}


def phenomenon(d: Draw) -> str:
    """What the pair tests: other words, a compound, or what differs between the two clauses of a simple pair
    (determiner, negation, voice, adverb; something always does, as identical pairs are drawn again)."""
    if any(part[5] != "same" for part in d.parts):
        return "other_vocabulary"
    if d.connective != "none":
        return f"compound_{d.connective}"
    p, h = d.parts[0][1], d.parts[0][3]
    diffs = [name for name, differs in (("determiner", (p.subj_det, p.obj_det) != (h.subj_det, h.obj_det)),
                                        ("negation", p.negated != h.negated), ("voice", p.passive != h.passive),
                                        ("adverb", p.adverb != h.adverb)) if differs]
    return "+".join(diffs)


def row(i: int, seed: int, d: Draw, lab: str, vocab: Vocabulary) -> dict[str, Any]:
    def text(side: int) -> str:
        out = []
        for part in d.parts:
            (a, v, t), c = part[2 * side], part[2 * side + 1]
            out.append(clause_text(c, vocab.agents[a], vocab.verbs[v], vocab.things[t], vocab.adverbs[part[4]].word))
        return sentence_text(d.connective, out)

    r: dict[str, Any] = {"id": f"{NAME}-{seed}-{i}", "premise": text(0), "hypothesis": text(1), "label": lab,
                         "connective": d.connective, "phenomenon": phenomenon(d)}
    second = d.parts[1] if len(d.parts) > 1 else None
    r.update(_features("p", d.parts[0][1]))
    r.update(_features("h", d.parts[0][3]))
    r["vocab"] = d.parts[0][5]
    r.update(_features("p2", second[1] if second else None))
    r.update(_features("h2", second[3] if second else None))
    r["vocab2"] = second[5] if second else None
    return r


def generate(n: int, seed: int = 0, config: AenliConfig | None = None) -> Iterator[dict[str, Any]]:
    """``n`` labelled rows, deterministic in ``seed``; the first m rows of any n ≥ m are the same."""
    cfg = config or AenliConfig()
    vocab = load_vocabulary(cfg.vocabulary)
    rng = random.Random(f"{NAME}-{seed}")
    schedule = label_schedule(rng) if cfg.balanced else None
    for i in range(n):
        target = next(schedule) if schedule is not None else None
        for _ in range(MAX_DRAWS):
            d = draw(rng, vocab, cfg)
            if all(part[1] is part[3] and part[0] == part[2] for part in d.parts):
                continue  # the hypothesis would be the premise word for word
            lab = label(d)
            if target is None or lab == target:
                break
        else:
            raise SyntheticError(f"no {target} pair in {MAX_DRAWS} draws with these rates; "
                                 "use --natural or other rates")
        yield row(i, seed, d, lab, vocab)
