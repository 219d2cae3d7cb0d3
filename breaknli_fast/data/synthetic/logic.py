"""Model checker of the exhaustive logic corpus (``aenli``): each clause is a first-order formula, and the label of
a pair is decided by enumerating every model over a small domain.

Semantics (docs/synthetic.md has the examples):

- a clause is built from a triple ⟨agent noun, verb, thing noun⟩. Each noun denotes its own non-empty set
  (:data:`AGENTS` agents and :data:`THINGS` things in the enumeration); the verb denotes a relation R between
  them; ``every`` is ∀, ``a`` is ∃. ``the`` has two readings (``the``, :data:`THE_READINGS`): ``unique`` (the
  default, the poster's: "A man happily did not kick the ball." entails "The ball was not kicked by the man.")
  — a noun that takes ``the`` anywhere in the pair denotes exactly one individual, so ``every``, ``a`` and
  ``the`` coincide on it; ``fixed`` — ``the`` is one fixed individual of a set that may hold others, the same
  in both sentences;
- quantifier scope follows the surface order: the grammatical subject scopes over ``not``, which scopes over the
  object (active) or the by-phrase (passive). The passive expresses the same relation (``y was kicked by x`` ⇔
  ``x kicked y``), so an active and a passive clause state the same proposition whenever the order of their
  quantifiers does not matter;
- an adverb after ``did not`` or without negation (``did not happily kick``, ``kicked the ball happily``) is a
  sub-relation S ⊆ R of its verb; an adverb in front of ``did not`` (``happily did not kick``) modifies the
  negated verb, a sub-relation T ⊆ ¬R: ``x happily did not kick Q y`` = ``Q* y. T(x, y)`` where Q* is the dual
  of Q (``did not kick a ball`` = no ball was kicked). One adverb per triple;
- ``and``, ``or`` and ``if … then`` (material implication) join two clauses. Clauses over different triples use
  disjoint parts of the vocabulary (another noun is another set, another verb another relation), so their
  models combine freely: the checker enumerates each triple's models on its own and takes the product.

A model over a domain assigns each cell ⟨agent i, thing j⟩ a state: outside R (and in T or not, where T is
used), in R (and in S or not, where S is used). A set of models is a Python int used as a bitset over
the ``states ** cells`` models of the space. Entailment: every model of the premise satisfies the hypothesis;
contradiction: no model satisfies both; neutral otherwise. A premise without a model is refused.

The domain is large enough: the sets of truth-value combinations a pair of clauses realises are the same at
3 × 3, 4 × 3 and 3 × 4 for every pair of clause formulas (:func:`domain_check`; docs/synthetic.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache, reduce
from typing import Hashable, Iterable, Sequence

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL

DETERMINERS = ("every", "a", "the")
THE_READINGS = ("unique", "fixed")
POSITIONS = ("before_negation", "before_verb", "end")
CONNECTIVES = ("none", "and", "or", "if")
DUAL = {"every": "a", "a": "every", "the": "the"}
QUANTIFIER = {"every": "∀", "a": "∃"}
AGENTS, THINGS = 3, 3  # the domain of the labels: 3 individuals of each noun (non-empty, as 'every' needs)


@dataclass(frozen=True)
class Formula:
    """``Q1 v1. [¬] Q2 v2. atom(agent, thing)``, the shape of every clause. ``outer``: the sort bound first
    (``agent`` or ``thing``); ``atom``: ``R`` (the verb), ``S`` (adverb + verb, S ⊆ R) or ``T`` (adverb over
    negation, T ⊆ ¬R); a ``the`` quantifier is the constant of its noun."""

    outer: str
    q1: str
    negated: bool
    q2: str
    atom: str

    def the_sorts(self) -> frozenset[str]:
        """The sorts (agent, thing) this formula names with ``the``."""
        inner = "thing" if self.outer == "agent" else "agent"
        return frozenset(s for s, q in ((self.outer, self.q1), (inner, self.q2)) if q == "the")

    def __str__(self) -> str:
        inner = "thing" if self.outer == "agent" else "agent"
        names = {"agent": "x", "thing": "y"}
        consts = {"agent": "m", "thing": "b"}
        arg = {s: consts[s] if q == "the" else names[s] for s, q in ((self.outer, self.q1), (inner, self.q2))}
        body = f"{self.atom}({arg['agent']}, {arg['thing']})"
        if self.q2 != "the":
            body = f"{QUANTIFIER[self.q2]}{names[inner]}. {body}"
        if self.negated:
            body = f"¬{body}"
        if self.q1 != "the":
            body = f"{QUANTIFIER[self.q1]}{names[self.outer]}. {body}"
        return body


@dataclass(frozen=True)
class Clause:
    """The logical shape of one clause: determiners of the agent (subject of the active) and the thing,
    negation, voice, and where its adverb is (None: no adverb)."""

    subj_det: str
    obj_det: str
    negated: bool = False
    passive: bool = False
    adverb: str | None = None

    def __post_init__(self) -> None:
        if self.subj_det not in DETERMINERS or self.obj_det not in DETERMINERS:
            raise ValueError(f"determiners are {', '.join(DETERMINERS)}")
        if self.adverb is not None and self.adverb not in POSITIONS:
            raise ValueError(f"adverb positions are {', '.join(POSITIONS)}")
        if self.adverb == "before_negation" and (not self.negated or self.passive):
            raise ValueError("an adverb before 'did not' needs a negated active clause")

    def formula(self) -> Formula:
        if self.passive:
            outer, q1, q2 = "thing", self.obj_det, self.subj_det
        else:
            outer, q1, q2 = "agent", self.subj_det, self.obj_det
        if self.adverb == "before_negation":  # ADV (not (V Q y)) = Q* y. ADV-not-V(x, y)
            return Formula(outer, q1, False, DUAL[q2], "T")
        return Formula(outer, q1, self.negated, q2, "S" if self.adverb else "R")


def all_clauses() -> list[Clause]:
    """Every clause shape the generator can build."""
    out = []
    for sd, od, neg, pas in itertools.product(DETERMINERS, DETERMINERS, (False, True), (False, True)):
        for pos in (None, *POSITIONS):
            if pos == "before_negation" and (not neg or pas):
                continue
            out.append(Clause(sd, od, neg, pas, pos))
    return out


def all_formulas() -> list[Formula]:
    """The distinct formulas of :func:`all_clauses` (several surface forms share one)."""
    return list(dict.fromkeys(c.formula() for c in all_clauses()))


# -- model spaces -----------------------------------------------------------------------------

def _periodic(pattern: int, period: int, total: int) -> int:
    """``pattern`` (``period`` bits) repeated over ``total`` bits."""
    x, length = pattern, period
    while length < total:
        x |= x << length
        length *= 2
    return x & ((1 << total) - 1)


class Space:
    """Every model over ``agents`` × ``things`` of R and the sub-relations in ``atoms`` (``S``, ``T``).

    Cell c = agent * things + thing is digit c of the model's number in base ``len(states)``."""

    def __init__(self, agents: int, things: int, atoms: str):
        if agents < 1 or things < 1:
            raise ValueError("domains are non-empty")
        self.agents, self.things = agents, things
        states = [(False, False, False), (True, False, False)]  # (in R, in S, in T)
        if "S" in atoms:
            states.append((True, True, False))
        if "T" in atoms:
            states.append((False, False, True))
        self.k, self.cells = len(states), agents * things
        self.n_models = self.k ** self.cells
        self.all = (1 << self.n_models) - 1
        self.atoms: dict[tuple[str, int], int] = {}
        for c in range(self.cells):
            block = self.k ** c  # digit c is constant over runs of k**c models and repeats every k**(c+1)
            for r, rel in enumerate("RST"):
                wanted = [s for s, st in enumerate(states) if st[r]]
                if wanted:
                    pattern = sum(((1 << block) - 1) << (d * block) for d in wanted)
                    self.atoms[rel, c] = _periodic(pattern, block * self.k, self.n_models)
        self._truth: dict[Formula, int] = {}

    def atom(self, rel: str, agent: int, thing: int) -> int:
        return self.atoms[rel, agent * self.things + thing]

    def truth(self, f: Formula) -> int:
        """The models where ``f`` holds."""
        hit = self._truth.get(f)
        if hit is not None:
            return hit
        sizes = {"agent": self.agents, "thing": self.things}
        inner = "thing" if f.outer == "agent" else "agent"
        outs = [0] if f.q1 == "the" else range(sizes[f.outer])
        ins = [0] if f.q2 == "the" else range(sizes[inner])
        values = []
        for i in outs:
            cells = [self.atom(f.atom, i, j) if f.outer == "agent" else self.atom(f.atom, j, i) for j in ins]
            v = _all(cells) if f.q2 == "every" else _any(cells)
            values.append(v ^ self.all if f.negated else v)
        out = _all(values) if f.q1 == "every" else _any(values)
        self._truth[f] = out
        return out


def _all(xs: Sequence[int]) -> int:
    return reduce(lambda a, b: a & b, xs)


def _any(xs: Sequence[int]) -> int:
    return reduce(lambda a, b: a | b, xs)


@lru_cache(maxsize=None)
def space(agents: int, things: int, atoms: str) -> Space:
    return Space(agents, things, atoms)


@lru_cache(maxsize=None)
def realised(formulas: tuple[Formula, ...], agents: int = AGENTS, things: int = THINGS) -> frozenset[tuple[bool, ...]]:
    """The truth-value vectors of ``formulas`` (over one triple) that some model realises."""
    atoms = "R" + "".join(sorted({f.atom for f in formulas} - {"R"}))
    sp = space(agents, things, atoms)
    bits = [sp.truth(f) for f in formulas]
    out = set()
    for vec in itertools.product((False, True), repeat=len(bits)):
        m = sp.all
        for b, v in zip(bits, vec):
            m &= b if v else ~b
            if not m:
                break
        if m:
            out.add(vec)
    return frozenset(out)


# -- sentences and labels ---------------------------------------------------------------------

Key = tuple[Hashable, Hashable, Hashable, Hashable]  # (agent noun, verb, thing noun, adverb or None)


@dataclass(frozen=True)
class Sentence:
    """One clause (``connective`` none) or two joined by and / or / if. Each clause carries the key of its
    words: (agent noun, verb, thing noun, adverb)."""

    connective: str
    clauses: tuple[tuple[Key, Clause], ...]

    def __post_init__(self) -> None:
        if self.connective not in CONNECTIVES:
            raise ValueError(f"connectives are {', '.join(CONNECTIVES)}")
        if len(self.clauses) != (1 if self.connective == "none" else 2):
            raise ValueError("a simple sentence has one clause, a compound two")

    def value(self, v: Sequence[bool]) -> bool:
        if self.connective == "none":
            return v[0]
        if self.connective == "and":
            return v[0] and v[1]
        if self.connective == "or":
            return v[0] or v[1]
        return (not v[0]) or v[1]


def check_reading(the: str) -> str:
    if the not in THE_READINGS:
        raise ValueError(f"readings of 'the' are {', '.join(THE_READINGS)}")
    return the


def realised_pairs(premise: Sentence, hypothesis: Sentence, agents: int = AGENTS, things: int = THINGS,
                   the: str = "unique") -> frozenset[tuple[bool, bool]]:
    """The (premise, hypothesis) truth values some model realises. With ``the="unique"`` a noun that takes
    ``the`` in any clause of the pair has one individual (a domain of 1 for that noun in every triple)."""
    check_reading(the)
    leaves = list(premise.clauses) + list(hypothesis.clauses)
    groups: dict[tuple[Hashable, Hashable, Hashable], list[int]] = {}
    for i, (key, _) in enumerate(leaves):
        groups.setdefault(tuple(key[:3]), []).append(i)
    single_agents = {key[0] for key, c in leaves if the == "unique" and c.subj_det == "the"}
    single_things = {key[2] for key, c in leaves if the == "unique" and c.obj_det == "the"}
    parts = []
    for (agent, _, thing), idxs in groups.items():
        adverbs = {leaves[i][0][3] for i in idxs if leaves[i][1].adverb}
        if len(adverbs) > 1:
            raise ValueError("one adverb per ⟨agent, verb, thing⟩ triple")
        size = (1 if agent in single_agents else agents, 1 if thing in single_things else things)
        parts.append((idxs, realised(tuple(leaves[i][1].formula() for i in idxs), *size)))
    n_p = len(premise.clauses)
    out = set()
    for combo in itertools.product(*(vecs for _, vecs in parts)):
        val = [False] * len(leaves)
        for (idxs, _), vec in zip(parts, combo):
            for i, b in zip(idxs, vec):
                val[i] = b
        out.add((premise.value(val[:n_p]), hypothesis.value(val[n_p:])))
    return frozenset(out)


def label_of(realised_set: Iterable[tuple[bool, bool]]) -> str:
    r = set(realised_set)
    if not any(p for p, _ in r):
        raise ValueError("the premise has no model")
    if (True, False) not in r:
        return ENTAILMENT
    if (True, True) not in r:
        return CONTRADICTION
    return NEUTRAL


def label(premise: Sentence, hypothesis: Sentence, agents: int = AGENTS, things: int = THINGS,
          the: str = "unique") -> str:
    """Entailment, contradiction or neutral, by enumerating every model (:func:`realised_pairs`)."""
    return label_of(realised_pairs(premise, hypothesis, agents, things, the))


# -- the generator's fast path ----------------------------------------------------------------
# A pair whose clauses pair up (premise clause i with hypothesis clause i, each pair over one triple, or over two
# triples that differ in a word; clause pairs share no word with each other) is decided by 4-bit masks: bit
# 2p + h is set when some model gives the premise clause truth value p and the hypothesis clause h. A compound's
# mask is the product of its clause pairs' masks through the connectives (the premise's and the hypothesis's
# may differ); :func:`label` of the same sentences gives the same label (tests/test_synthetic.py).


def _mask(pairs: Iterable[tuple[bool, bool]]) -> int:
    return sum(1 << (2 * p + h) for p, h in set(pairs))


def domain_of(formulas: Iterable[Formula], the: str = "unique") -> tuple[int, int]:
    """The enumeration domain of formulas over one triple: a sort some formula names with ``the`` has one
    individual under the unique reading; otherwise :data:`AGENTS` × :data:`THINGS`."""
    sorts = frozenset().union(*(f.the_sorts() for f in formulas)) if the == "unique" else frozenset()
    return (1 if "agent" in sorts else AGENTS, 1 if "thing" in sorts else THINGS)


@lru_cache(maxsize=None)
def pair_mask(p: Formula, h: Formula, same_triple: bool, the: str = "unique") -> int:
    """The realised (p, h) values of two clauses over one triple, or over two triples that differ in a word
    (their cells are distinct, so the values combine freely)."""
    if same_triple:
        return _mask(realised((p, h), *domain_of((p, h), the)))
    return _mask((vp[0], vh[0]) for vp in realised((p,), *domain_of((p,), the))
                 for vh in realised((h,), *domain_of((h,), the)))


_OPS = {"and": lambda a, b: a and b, "or": lambda a, b: a or b, "if": lambda a, b: (not a) or b}


def _combine_table(p_op, h_op) -> list[list[int]]:
    values = [(bool(b >> 1), bool(b & 1)) for b in range(4)]  # bit b = (p, h)
    return [[_mask((p_op(p1, p2), h_op(h1, h2)) for i, (p1, h1) in enumerate(values) if m1 >> i & 1
                   for j, (p2, h2) in enumerate(values) if m2 >> j & 1) for m2 in range(16)] for m1 in range(16)]


# COMBINE2[premise connective, hypothesis connective][m1][m2]: the mask of a compound pair; COMBINE[c]: both c
COMBINE2 = {(a, b): _combine_table(_OPS[a], _OPS[b]) for a in _OPS for b in _OPS}
COMBINE = {c: COMBINE2[c, c] for c in _OPS}
# bit 2 = (p, not h) realised, bit 3 = (p, h) realised; None: the premise has no model
MASK_LABEL = [None if not m & 0b1100 else ENTAILMENT if not m & 0b0100 else CONTRADICTION if not m & 0b1000
              else NEUTRAL for m in range(16)]


def domain_check(pairs: Iterable[tuple[Formula, Formula]] | None = None, base: tuple[int, int] = (AGENTS, THINGS),
                 larger: Sequence[tuple[int, int]] = ((AGENTS + 1, THINGS), (AGENTS, THINGS + 1))) -> dict:
    """Compare, for each pair of formulas over one triple (default: all pairs of :func:`all_formulas`), the
    realised truth-value combinations at ``base`` and at each ``larger`` domain: the labels of every generated
    pair are functions of these sets, so equal sets mean labels that do not change with the domain."""
    pairs = list(pairs) if pairs is not None else list(itertools.product(all_formulas(), repeat=2))
    differ: dict[str, list[tuple[str, str]]] = {}
    for size in larger:
        bad = [(str(p), str(h)) for p, h in pairs if realised((p, h), *base) != realised((p, h), *size)]
        differ[f"{size[0]}x{size[1]}"] = bad
    return {"base": f"{base[0]}x{base[1]}", "pairs": len(pairs), "differ": differ}
