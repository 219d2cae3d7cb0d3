"""The exhaustive logic corpus (``aenli``, after Geiger and Tran's automated and exhaustive NLI corpus): pairs of
sentences over a vocabulary of agents, things, transitive verbs and adverbs, labelled by the model checker of
:mod:`breaknli_fast.data.synthetic.logic`.

A pair is drawn from one triple ⟨agent, verb, thing⟩ (two for a compound, sharing no word): premise and
hypothesis clauses are built from it (determiners of agent and thing from every / a / the, negation, passive,
the triple's adverb at a valid position or none), a compound joins its clauses by a connective, and with
probability ``other_vocab`` one hypothesis clause takes another agent, verb or thing (never one of the pair's
other words). A pair whose hypothesis would repeat its premise word for word is never made. ``the`` is read
as the poster reads it by default (:data:`logic.THE_READINGS`).

With ``balanced`` (the default) no surface form of the hypothesis tells the label: target labels follow
:func:`~breaknli_fast.data.synthetic.common.label_schedule`, and the k-th pair of every label shares one
hypothesis *skeleton* — the connectives, and per clause its determiners, negation, voice, adverb position —
drawn from the configured rates before any label is known; the premise is then drawn from its own rates
conditioned on the target label, exactly (every premise clause shape is weighed, not re-drawn). So each
connective, quantifier pattern and clause shape of the hypothesis carries the three labels equally often. A
compound premise is a conjunction in this mode: with *or* or *if … then* between the premise's clauses one of
the three labels cannot occur for clause-by-clause pairs (*A or B* never contradicts *C or D*), so the
connective would give it away. ``balanced=False`` draws premise and hypothesis independently (the same
connective in both) and keeps the draw's label distribution.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import breaknli_fast.data.synthetic.logic as logic
from breaknli_fast.data.synthetic.common import (SyntheticError, asset_path, check_rate, label_schedule, load_json,
                                                shared_skeletons)
from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.synthetic.logic import DETERMINERS, Clause, Sentence

NAME = "aenli"
RESERVED = frozenset({"every", "a", "an", "the", "did", "not", "was", "by", "and", "or", "if", "then"})
MAX_DRAWS = 2000  # hypothesis skeletons drawn before the rates are judged unable to give all three labels
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
    passive voice and the adverb. ``balanced``: equal label counts and hypotheses that do not tell the label
    (else the draw's own distribution). ``the``: the reading of *the* (:data:`logic.THE_READINGS`)."""

    compound: float = 0.5
    other_vocab: float = 0.2
    negation: float = 0.5
    passive: float = 0.5
    adverb: float = 0.5
    balanced: bool = True
    vocabulary: str | None = None
    the: str = "unique"

    def __post_init__(self) -> None:
        for name in ("compound", "other_vocab", "negation", "passive", "adverb"):
            check_rate(name.replace("_", "-"), getattr(self, name))
        if self.the not in logic.THE_READINGS:
            raise SyntheticError(f"--the must be {' or '.join(logic.THE_READINGS)} (got {self.the!r})")

    def rates(self) -> tuple[float, float, float]:
        return (self.negation, self.passive, self.adverb)


@dataclass
class Draw:
    """One pair before it is put into words (vocabulary indices and clause shapes)."""

    p_connective: str
    h_connective: str
    # per clause pair: (premise triple, premise clause, hypothesis triple, hypothesis clause, adverb index, vocab)
    parts: list[list[Any]] = field(default_factory=list)

    @property
    def connective(self) -> str:
        return self.h_connective

    def sentences(self) -> tuple[Sentence, Sentence]:
        p = tuple(((*c[0], c[4]), c[1]) for c in self.parts)
        h = tuple(((*c[2], c[4]), c[3]) for c in self.parts)
        return Sentence(self.p_connective, p), Sentence(self.h_connective, h)


_CLAUSES: dict[tuple, Clause] = {}  # one Clause object per shape (draws compare them with `is`)
_FORMULAS: dict[Clause, logic.Formula] = {}


def _shape(key: tuple) -> Clause:
    c = _CLAUSES.get(key)
    if c is None:
        c = _CLAUSES[key] = Clause(*key)
        _FORMULAS[c] = c.formula()
    return c


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
    return _shape((sd, od, neg, pas, pos))


@lru_cache(maxsize=None)
def clause_distribution(rates: tuple[float, float, float], over_negation: bool) -> tuple[tuple[Clause, float], ...]:
    """Every clause shape :func:`_clause` can draw with these (negation, passive, adverb) rates, and its
    probability (the same draw, weighed instead of sampled)."""
    neg_r, pas_r, adv_r = rates
    out: dict[Clause, float] = {}
    for sd in DETERMINERS:
        for od in DETERMINERS:
            for neg, pn in ((True, neg_r), (False, 1 - neg_r)):
                for pas, pp in ((True, pas_r), (False, 1 - pas_r)):
                    base = pn * pp / 9
                    positions = [(None, 1 - adv_r)]
                    if neg and not pas and over_negation:
                        positions += [(pos, adv_r / 3) for pos in ("before_verb", "end", "before_negation")]
                    else:
                        positions += [(pos, adv_r / 2) for pos in ("before_verb", "end")]
                    for pos, pw in positions:
                        if base * pw > 0:
                            c = _shape((sd, od, neg, pas, pos))
                            out[c] = out.get(c, 0.0) + base * pw
    return tuple(out.items())


@lru_cache(maxsize=None)
def _part_outcomes(h: Clause, rates: tuple[float, float, float], over: bool, the: str
                   ) -> tuple[tuple[tuple[int, bool], float, tuple[tuple[Clause, float], ...]], ...]:
    """For a hypothesis clause over the premise clause's triple: the premise clause shapes grouped by (mask of
    the clause pair, premise identical to the hypothesis), with their total probability."""
    groups: dict[tuple[int, bool], list[tuple[Clause, float]]] = {}
    for c, w in clause_distribution(rates, over):
        key = (logic.pair_mask(_FORMULAS[c], _FORMULAS[h], True, the), c is h)
        groups.setdefault(key, []).append((c, w))
    return tuple((k, sum(w for _, w in v), tuple(v)) for k, v in sorted(groups.items()))


_OTHER = (((15, False), 1.0, ()),)  # a clause pair over two triples that differ in a word: any values


def label(d: Draw, the: str = "unique") -> str | None:
    """The label of a draw from its clause pairs' masks (:func:`logic.pair_mask`); None where the premise has
    no model. Equal to ``logic.label(*d.sentences(), the=the)``."""
    masks = [logic.pair_mask(_FORMULAS[part[1]], _FORMULAS[part[3]], part[0] == part[2], the) for part in d.parts]
    if d.p_connective == "none":
        return logic.MASK_LABEL[masks[0]]
    return logic.MASK_LABEL[logic.COMBINE2[d.p_connective, d.h_connective][masks[0]][masks[1]]]


def _triples(rng: random.Random, sizes: tuple[int, int, int], n: int) -> list[tuple[int, int, int]]:
    """``n`` triples that share no agent, verb or thing."""
    r = rng.random
    out: list[tuple[int, int, int]] = []
    while len(out) < n:
        t = (int(r() * sizes[0]), int(r() * sizes[1]), int(r() * sizes[2]))
        if all(t[i] != u[i] for u in out for i in range(3)):
            out.append(t)
    return out


def _other_word(rng: random.Random, d: Draw, part: list[Any], sizes: tuple[int, int, int]) -> None:
    """Give the part's hypothesis clause another agent, verb or thing, one that no clause of the pair uses."""
    r = rng.random
    slots = _other_slots(sizes, len(d.parts))
    if not slots:
        return
    slot = slots[int(r() * len(slots))]
    used = {p[0][slot] for p in d.parts}
    t = list(part[0])
    while t[slot] in used:
        t[slot] = int(r() * sizes[slot])
    part[2], part[5] = tuple(t), SLOTS[slot]


def _other_slots(sizes: tuple[int, int, int], parts: int) -> list[int]:
    """The slots (agent, verb, thing) with a word left over for another hypothesis word."""
    return [slot for slot in range(3) if sizes[slot] > parts]


def _adverb(rng: random.Random, vocab: Vocabulary, over: bool | None = None) -> int:
    """An adverb index, uniform (or uniform among those that do / do not go before *did not*)."""
    if over is None:
        return int(rng.random() * len(vocab.adverbs))
    group = _adverb_groups(vocab)[over]
    return group[int(rng.random() * len(group))]


@lru_cache(maxsize=4)
def _adverb_groups(vocab: Vocabulary) -> dict[bool, tuple[int, ...]]:
    return {flag: tuple(i for i, a in enumerate(vocab.adverbs) if a.before_negation == flag) for flag in (True, False)}


def draw(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig) -> Draw:
    """One pair of the configured distribution, premise and hypothesis drawn independently (not yet
    labelled; the ``balanced=False`` corpus)."""
    r = rng.random
    conn = "none" if r() >= cfg.compound else ("and", "or", "if")[int(r() * 3)]
    sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
    d = Draw(conn, conn)
    for t in _triples(rng, sizes, 1 if conn == "none" else 2):
        a = _adverb(rng, vocab)
        over = vocab.adverbs[a].before_negation
        d.parts.append([t, _clause(rng, cfg, over), t, _clause(rng, cfg, over), a, "same"])
    if r() < cfg.other_vocab:
        _other_word(rng, d, d.parts[int(r() * len(d.parts))], sizes)
    return d


@dataclass(frozen=True)
class Skeleton:
    """What the k-th pairs of all three labels share: the connectives and each hypothesis clause's shape (with
    whether its adverb may stand before *did not*); and, per label, the weighed ways to complete it."""

    p_connective: str
    h_connective: str
    clauses: tuple[tuple[Clause, bool], ...]
    ways: dict[str, tuple[tuple[float, int, tuple[Any, ...]], ...]]


def _ways(p_conn: str, h_conn: str, clauses: tuple[tuple[Clause, bool], ...], cfg: AenliConfig,
          other_possible: bool = True) -> dict[str, tuple[tuple[float, int, tuple[Any, ...]], ...]]:
    """Per label, every (weight, part given other words or -1, outcome per part) that completes the skeleton:
    the premise clause shapes are grouped by the mask they make with the hypothesis clause."""
    parts = [_part_outcomes(h, cfg.rates(), over, cfg.the) for h, over in clauses]
    n = len(parts)
    ov = cfg.other_vocab if other_possible else 0.0
    configs = [(-1, 1 - ov)] + [(j, ov / n) for j in range(n)]
    out: dict[str, list[tuple[float, int, tuple[Any, ...]]]] = {lab: [] for lab in LABELS}
    for other, w_conf in configs:
        if w_conf <= 0:
            continue
        options = [_OTHER if j == other else parts[j] for j in range(n)]
        for combo in itertools.product(*options):
            if all(o[0][1] for o in combo):
                continue  # the hypothesis would repeat the premise word for word
            w = w_conf
            for o in combo:
                w *= o[1]
            masks = [o[0][0] for o in combo]
            m = masks[0] if n == 1 else logic.COMBINE2[p_conn, h_conn][masks[0]][masks[1]]
            lab = logic.MASK_LABEL[m]
            if w > 0 and lab is not None:
                out[lab].append((w, other, combo))
    return {lab: tuple(v) for lab, v in out.items()}


def skeleton(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig) -> Skeleton:
    """A hypothesis skeleton with every label possible (drawn again where one is not)."""
    r = rng.random
    for _ in range(MAX_DRAWS):
        if r() >= cfg.compound:
            p_conn = h_conn = "none"
        else:
            p_conn, h_conn = "and", ("and", "or", "if")[int(r() * 3)]
        clauses = []
        for _ in range(1 if h_conn == "none" else 2):
            over = vocab.adverbs[_adverb(rng, vocab)].before_negation
            clauses.append((_clause(rng, cfg, over), over))
        sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
        ways = _ways(p_conn, h_conn, tuple(clauses), cfg, bool(_other_slots(sizes, len(clauses))))
        if all(ways[lab] for lab in LABELS):
            return Skeleton(p_conn, h_conn, tuple(clauses), ways)
    raise SyntheticError(f"no hypothesis in {MAX_DRAWS} draws allows all three labels with these rates; "
                         "use --natural or other rates")


def complete(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig, sk: Skeleton, target: str) -> Draw:
    """A pair of label ``target`` on the skeleton: words drawn afresh, then one way to complete it drawn by its
    weight, then the premise clause shapes within that way by theirs."""
    r = rng.random
    sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
    ways = sk.ways[target]
    pick = r() * sum(w for w, _, _ in ways)
    for w, other, combo in ways:
        if pick < w:
            break
        pick -= w
    d = Draw(sk.p_connective, sk.h_connective)
    for j, (t, (h, over)) in enumerate(zip(_triples(rng, sizes, len(sk.clauses)), sk.clauses)):
        a = _adverb(rng, vocab, over)
        shapes = combo[j][2]
        if shapes:
            x = r() * sum(pw for _, pw in shapes)
            for c, pw in shapes:
                if x < pw:
                    break
                x -= pw
        else:  # the clause pair over other words: the premise clause from its own rates
            c = _clause(rng, cfg, over)
        d.parts.append([t, c, t, h, a, "same"])
    if other >= 0:
        _other_word(rng, d, d.parts[other], sizes)
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
    def text(side: int, conn: str) -> str:
        out = []
        for part in d.parts:
            (a, v, t), c = part[2 * side], part[2 * side + 1]
            out.append(clause_text(c, vocab.agents[a], vocab.verbs[v], vocab.things[t], vocab.adverbs[part[4]].word))
        return sentence_text(conn, out)

    r: dict[str, Any] = {"id": f"{NAME}-{seed}-{i}", "premise": text(0, d.p_connective),
                         "hypothesis": text(1, d.h_connective), "label": lab, "connective": d.h_connective,
                         "p_connective": d.p_connective, "phenomenon": phenomenon(d)}
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
    if not cfg.balanced:
        for i in range(n):
            for _ in range(MAX_DRAWS):
                d = draw(rng, vocab, cfg)
                if not all(part[1] is part[3] and part[0] == part[2] for part in d.parts):
                    break  # else the hypothesis would be the premise word for word
            yield row(i, seed, d, label(d, cfg.the), vocab)
        return
    skeleton_rng = random.Random(f"{NAME}-{seed}-skeleton")
    schedule = label_schedule(rng)
    for i, target, sk in shared_skeletons(schedule, n, LABELS, lambda: skeleton(skeleton_rng, vocab, cfg)):
        d = complete(rng, vocab, cfg, sk, target)
        yield row(i, seed, d, target, vocab)
