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

With ``pair_balance`` (the default, with ``balanced``) the k-th pairs of the three labels also share every
surface feature of the *pair* that :func:`~.shortcut.pair_features` computes (:func:`matched`,
:mod:`.aenli_pairs`): a simple hypothesis gets a premise of two clauses, its own and one about other words, so
that the negations can sit in either (with one clause, the same number of *not* on both sides would mean
"never a contradiction"); the words are drawn afresh per label, of the same kinds.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator

import breaknli_fast.data.synthetic.logic as logic
from breaknli_fast.data.labels import LABELS
import breaknli_fast.data.synthetic.aenli_pairs as aenli_pairs
from breaknli_fast.data.synthetic.aenli_pairs import FORMULAS, clause_distribution, shape
from breaknli_fast.data.synthetic.aenli_text import (Verb, Vocabulary, clause_text, load_vocabulary,  # noqa: F401
                                                     sentence_text)
from breaknli_fast.data.synthetic.common import SyntheticError, check_rate, label_schedule, shared_skeletons
from breaknli_fast.data.synthetic.logic import DETERMINERS, Clause, Sentence

NAME = "aenli"
MAX_DRAWS = 2000  # hypothesis skeletons drawn before the rates are judged unable to give all three labels
SLOTS = ("other_agent", "other_verb", "other_thing")


@dataclass(frozen=True)
class AenliConfig:
    """Draw probabilities: a compound sentence, a hypothesis clause over other words, and per clause negation,
    passive voice and the adverb. ``balanced``: equal label counts and hypotheses that do not tell the label
    (else the draw's own distribution). ``the``: the reading of *the* (:data:`logic.THE_READINGS`).
    ``pair_balance`` (with ``balanced``): the k-th pairs of the three labels also share the surface features
    of the pair (:func:`~.shortcut.pair_features`), and a simple hypothesis gets a premise of two clauses, one
    about other words; False gives the corpus of generator version 2 (hypothesis skeletons only), whose
    pair-level shortcuts tests/test_synthetic.py shows the check finds."""

    compound: float = 0.5
    other_vocab: float = 0.2
    negation: float = 0.5
    passive: float = 0.5
    adverb: float = 0.5
    balanced: bool = True
    vocabulary: str | None = None
    the: str = "unique"
    pair_balance: bool = True

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
    # per clause pair: (premise triple, premise clause, hypothesis triple, hypothesis clause, adverb index, vocab);
    # a premise clause about other words (a distractor) has no hypothesis clause: (…, None, None, adverb, "distractor")
    parts: list[list[Any]] = field(default_factory=list)

    @property
    def connective(self) -> str:
        return self.h_connective

    def sentences(self) -> tuple[Sentence, Sentence]:
        p = tuple(((*c[0], c[4]), c[1]) for c in self.parts)
        h = tuple(((*c[2], c[4]), c[3]) for c in self.parts if c[3] is not None)
        return Sentence(self.p_connective, p), Sentence(self.h_connective, h)


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
    return shape((sd, od, neg, pas, pos))


@lru_cache(maxsize=None)
def _part_outcomes(h: Clause, rates: tuple[float, float, float], over: bool, the: str
                   ) -> tuple[tuple[tuple[int, bool], float, tuple[tuple[Clause, float], ...]], ...]:
    """For a hypothesis clause over the premise clause's triple: the premise clause shapes grouped by (mask of
    the clause pair, premise identical to the hypothesis), with their total probability."""
    groups: dict[tuple[int, bool], list[tuple[Clause, float]]] = {}
    for c, w in clause_distribution(rates, over):
        key = (logic.pair_mask(FORMULAS[c], FORMULAS[h], True, the), c is h)
        groups.setdefault(key, []).append((c, w))
    return tuple((k, sum(w for _, w in v), tuple(v)) for k, v in sorted(groups.items()))


_OTHER = (((15, False), 1.0, ()),)  # a clause pair over two triples that differ in a word: any values


def label(d: Draw, the: str = "unique") -> str | None:
    """The label of a draw from its clause pairs' masks (:func:`logic.pair_mask`); None where the premise has
    no model. Equal to ``logic.label(*d.sentences(), the=the)``."""
    masks = [logic.pair_mask(FORMULAS[part[1]], FORMULAS[part[3]], part[0] == part[2], the)
             for part in d.parts if part[3] is not None]
    if d.p_connective == "none" or len(masks) == 1:  # a conjunct about other words changes nothing (it has models)
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
    used = {p[0][slot] for p in d.parts} | {p[2][slot] for p in d.parts if p[2] is not None}
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


def connective(rng: random.Random, cfg: AenliConfig) -> str:
    """The hypothesis's connective by the rates: none, or and / or / if alike."""
    return "none" if rng.random() >= cfg.compound else ("and", "or", "if")[int(rng.random() * 3)]


def skeleton(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig, conn: str | None = None,
             check: bool = True) -> Skeleton:
    """A hypothesis skeleton with every label possible (drawn again where one is not); with ``conn``, one with
    that connective. ``check=False``: any skeleton, without the ways to complete it (the caller checks)."""
    for _ in range(MAX_DRAWS):
        h_conn = connective(rng, cfg) if conn is None else conn
        p_conn = "none" if h_conn == "none" else "and"
        clauses = []
        for _ in range(1 if h_conn == "none" else 2):
            over = vocab.adverbs[_adverb(rng, vocab)].before_negation
            clauses.append((_clause(rng, cfg, over), over))
        if not check:
            return Skeleton(p_conn, h_conn, tuple(clauses), {})
        sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
        ways = _ways(p_conn, h_conn, tuple(clauses), cfg, bool(_other_slots(sizes, len(clauses))))
        if all(ways[lab] for lab in LABELS):
            return Skeleton(p_conn, h_conn, tuple(clauses), ways)
    raise SyntheticError(f"no hypothesis in {MAX_DRAWS} draws allows all three labels with these rates; "
                         "use --natural or other rates")


def complete(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig, sk: Skeleton, target: str) -> Draw:
    """A pair of label ``target`` on the skeleton (generator version 2): words drawn afresh, then one way to
    complete it drawn by its weight, then the premise clause shapes within that way by theirs."""
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


def _distinct_adverb(rng: random.Random, vocab: Vocabulary, over: bool | None, used: set[int]) -> int:
    """An adverb (of the group ``over`` says, or any) that no other clause pair of the pair uses, where one is left."""
    a = _adverb(rng, vocab, over)
    for _ in range(100):
        if a not in used:
            break
        a = _adverb(rng, vocab, over)
    used.add(a)
    return a


def _replacement(rng: random.Random, vocab: Vocabulary, triples: list[tuple[int, int, int]], slot: int,
                 like: int) -> int:
    """Another word for ``slot``, one that none of the triples uses, and of the same kind as word ``like`` for
    the surface features where the vocabulary has one (a noun that takes *an* or not; a verb whose forms
    coincide as its forms do)."""
    kinds, groups = _word_kinds(vocab)
    used = {t[slot] for t in triples}
    pool = [i for i in groups[slot][kinds[slot][like]] if i not in used] or \
        [i for i in range(len(kinds[slot])) if i not in used]
    return pool[int(rng.random() * len(pool))]


def _like(rng: random.Random, vocab: Vocabulary, template: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Triples that share no word, each word of the kind of the template's (:func:`_word_kinds`)."""
    kinds, groups = _word_kinds(vocab)
    out: list[list[int]] = [[0, 0, 0] for _ in template]
    for slot in range(3):
        used: set[int] = set()
        for j, t in enumerate(template):
            pool = [i for i in groups[slot][kinds[slot][t[slot]]] if i not in used]
            w = pool[int(rng.random() * len(pool))] if pool else t[slot]
            used.add(w)
            out[j][slot] = w
    return [tuple(t) for t in out]  # type: ignore[misc]


_KINDS: dict[int, tuple[Vocabulary, Any]] = {}  # id of a vocabulary -> (it, its words' kinds): hashing one is slow


def _word_kinds(vocab: Vocabulary) -> Any:
    """Per slot (agent, verb, thing) each word's kind for the surface features — whether a noun starts with a
    vowel (*an*), which of a verb's forms coincide — and the words of each kind."""
    hit = _KINDS.get(id(vocab))
    if hit is not None and hit[0] is vocab:
        return hit[1]

    def verb(v: Verb) -> tuple[int, ...]:
        forms = (v.base, v.past, v.participle)
        return tuple(forms.index(f) for f in forms)

    kinds = ([w[0] in "aeiou" for w in vocab.agents], [verb(v) for v in vocab.verbs],
             [w[0] in "aeiou" for w in vocab.things])
    groups = []
    for ks in kinds:
        g: dict[Any, list[int]] = {}
        for i, k in enumerate(ks):
            g.setdefault(k, []).append(i)
        groups.append(g)
    _KINDS[id(vocab)] = (vocab, (kinds, groups))
    return kinds, groups


def matched(rng: random.Random, vocab: Vocabulary, cfg: AenliConfig) -> dict[str, Draw]:
    """The three pairs of one rank (``pair_balance``): one hypothesis skeleton and one set of words, and per
    label a premise drawn by :func:`aenli_pairs.choose` so that the pairs' surface features are the same. A
    simple hypothesis gets a premise of two clauses, its own and one about other words (which changes no label;
    without it the negation counts alone would tell entailment from contradiction). Skeletons on which no
    feature value has all three labels are drawn again."""
    sizes = (len(vocab.agents), len(vocab.verbs), len(vocab.things))
    conn = connective(rng, cfg)  # kept while the rest is drawn again: the connectives keep their rates
    for _ in range(MAX_DRAWS):
        sk = skeleton(rng, vocab, cfg, conn, check=False)  # choose() finds whether all three labels can be had
        n = len(sk.clauses)
        triples = _triples(rng, sizes, n + (n == 1))
        used: set[int] = set()
        advs = [_distinct_adverb(rng, vocab, over, used) for _, over in sk.clauses]
        slots = _other_slots(sizes, n + (n == 1))
        ov = cfg.other_vocab if slots else 0.0

        def names(t: tuple[int, int, int], tag: str = "") -> aenli_pairs.Names:
            return aenli_pairs.names(vocab.agents[t[0]], vocab.things[t[2]], vocab.verbs[t[1]], tag)

        parts = []
        for j, (h, over) in enumerate(sk.clauses):
            base = names(triples[j])
            other = {}
            for s in slots:  # the hypothesis triple with another word (of the same kind where there is one)
                t = list(triples[j])
                t[s] = _replacement(rng, vocab, triples, s, triples[j][s])
                alt = names(tuple(t), "r")  # type: ignore[arg-type]
                other[s] = (alt[0] if s == 0 else base[0], alt[1] if s == 2 else base[1], alt[2] if s == 1 else base[2])
            parts.append({"h": h, "over": over, "adverb": "adv", "names": base, "other": other})
        distractor = None
        if n == 1:
            a = _distinct_adverb(rng, vocab, None, used)
            advs.append(a)
            distractor = {"over": vocab.adverbs[a].before_negation, "adverb": "adv", "names": names(triples[1])}
        chosen = aenli_pairs.choose(rng, cfg.rates(), cfg.the, sk.p_connective, sk.h_connective, parts,
                                    distractor, ov, slots)
        if chosen is None:
            continue
        out = {}
        for lab, (other, shapes) in chosen.items():
            # words drawn afresh, each of the kind of the one it stands for (the features depend on kinds only)
            own = _like(rng, vocab, triples)
            used = set()
            own_advs = [_distinct_adverb(rng, vocab, vocab.adverbs[a].before_negation, used) for a in advs]
            d = Draw("and", sk.h_connective)
            for j, (h, _) in enumerate(sk.clauses):
                t = own[j]
                tag = "same"
                if other is not None and other[0] == j:
                    word = _replacement(rng, vocab, own, other[1], own[j][other[1]])
                    t = tuple(word if s == other[1] else t[s] for s in range(3))  # type: ignore[assignment]
                    tag = SLOTS[other[1]]
                d.parts.append([own[j], shapes[j], t, h, own_advs[j], tag])
            if distractor is not None:
                d.parts.insert(int(rng.random() * 2), [own[1], shapes[1], None, None, own_advs[1], "distractor"])
            if label(d, cfg.the) != lab:
                raise AssertionError(f"aenli: a pair built as {lab} is labelled {label(d, cfg.the)}")
            out[lab] = d
        return out
    raise SyntheticError(f"no hypothesis in {MAX_DRAWS} draws allows all three labels with the same surface "
                         "features; use --natural or other rates")


def _features(prefix: str, c: Clause | None) -> dict[str, Any]:
    if c is None:
        return {f"{prefix}_subj_det": None, f"{prefix}_obj_det": None, f"{prefix}_negation": None,
                f"{prefix}_passive": None, f"{prefix}_adverb": None}
    return {f"{prefix}_subj_det": c.subj_det, f"{prefix}_obj_det": c.obj_det, f"{prefix}_negation": int(c.negated),
            f"{prefix}_passive": int(c.passive), f"{prefix}_adverb": c.adverb or "none"}


def phenomenon(d: Draw) -> str:
    """What the pair tests: other words, a compound, or what differs between the two clauses of a simple pair
    (determiner, negation, voice, adverb; something always does, as identical pairs are drawn again)."""
    if any(part[5] not in ("same", "distractor") for part in d.parts):
        return "other_vocabulary"
    if d.connective != "none":
        return f"compound_{d.connective}"
    p, h = next((part[1], part[3]) for part in d.parts if part[3] is not None)
    diffs = [name for name, differs in (("determiner", (p.subj_det, p.obj_det) != (h.subj_det, h.obj_det)),
                                        ("negation", p.negated != h.negated), ("voice", p.passive != h.passive),
                                        ("adverb", p.adverb != h.adverb)) if differs]
    return "+".join(diffs)


def row(i: int, seed: int, d: Draw, lab: str, vocab: Vocabulary, group: int | None = None) -> dict[str, Any]:
    premise, hypothesis = texts(d, vocab)
    r: dict[str, Any] = {"id": f"{NAME}-{seed}-{i}", "premise": premise, "hypothesis": hypothesis, "label": lab,
                         **({"group": f"{NAME}-{seed}-g{group}"} if group is not None else {}),
                         "connective": d.h_connective, "p_connective": d.p_connective, "phenomenon": phenomenon(d)}
    aligned = [part for part in d.parts if part[3] is not None]
    p2 = d.parts[1] if len(d.parts) > 1 else None
    h2 = aligned[1] if len(aligned) > 1 else None
    r.update(_features("p", d.parts[0][1]))
    r.update(_features("h", aligned[0][3]))
    r["vocab"] = aligned[0][5]
    r.update(_features("p2", p2[1] if p2 else None))
    r.update(_features("h2", h2[3] if h2 else None))
    r["vocab2"] = h2[5] if h2 else None
    r["distractor"] = next((j + 1 for j, part in enumerate(d.parts) if part[3] is None), 0)
    return r


def texts(d: Draw, vocab: Vocabulary) -> tuple[str, str]:
    """The premise and the hypothesis of a draw in words."""
    def text(side: int, conn: str) -> str:
        out = []
        for part in d.parts:
            if part[2 * side + 1] is None:
                continue  # the distractor has no hypothesis clause
            (a, v, t), c = part[2 * side], part[2 * side + 1]
            out.append(clause_text(c, vocab.agents[a], vocab.verbs[v], vocab.things[t], vocab.adverbs[part[4]].word))
        return sentence_text(conn, out)

    return text(0, d.p_connective), text(1, d.h_connective)


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
    if not cfg.pair_balance:  # generator version 2
        for i, target, sk, k in shared_skeletons(schedule, n, LABELS, lambda: skeleton(skeleton_rng, vocab, cfg)):
            yield row(i, seed, complete(rng, vocab, cfg, sk, target), target, vocab, k)
        return

    for i, target, drawn, k in shared_skeletons(schedule, n, LABELS, lambda: matched(skeleton_rng, vocab, cfg)):
        yield row(i, seed, drawn[target], target, vocab, k)
