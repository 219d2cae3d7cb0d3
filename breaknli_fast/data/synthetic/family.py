"""The kinship logic of the ``kinship`` corpus: the composition table of base relations
(``assets/synthetic/kinship_relations.json``), families grown along walks of base relations, facts and stories, and
what a story determines between two of its people (:func:`label_of`). :mod:`.kinship` builds the corpus on it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from breaknli_fast.data.synthetic.common import SyntheticError, asset_path, check_rate, load_json

NAME = "kinship"
GENDERS = ("male", "female")
OTHER = {"male": "female", "female": "male"}
MAX_K = 10
MAX_TRIES = 1000
OUTSIDE_BASE = ("parent", "sibling", "spouse")  # what the person outside the chain is to the other one


@dataclass(frozen=True)
class RelType:
    id: str
    offset: int
    inverse: str
    male: str
    female: str
    neutral: str | None

    def word(self, gender: str | None) -> str | None:
        return self.neutral if gender is None else getattr(self, gender)

    @property
    def gendered(self) -> bool:
        return self.male != self.female


@dataclass(frozen=True)
class Relations:
    base: tuple[str, ...]
    types: dict[str, RelType]
    compose: dict[str, dict[str, str]]
    words: dict[str, tuple[str, str | None]]  # word -> (type, gender of the person it names; None: any)


def relations_path():
    return asset_path("kinship_relations.json")


@lru_cache(maxsize=1)
def load_relations() -> Relations:
    data = load_json(relations_path())
    types = {tid: RelType(tid, t["offset"], t["inverse"], t["male"], t["female"], t["neutral"])
             for tid, t in data["types"].items()}
    words: dict[str, tuple[str, str | None]] = {}
    for t in types.values():
        for g in ("male", "female", None):
            w = t.word(g)
            if w is not None:
                words[w] = (t.id, g if t.gendered else None)
    return Relations(tuple(data["base"]), types, {k: dict(v) for k, v in data["compose"].items()}, words)


@lru_cache(maxsize=1)
def load_names() -> tuple[str, ...]:
    return tuple(load_json(asset_path("kinship_names.json"))["names"])


@dataclass(frozen=True)
class KinshipConfig:
    """Chain lengths ``min_k``..``max_k`` (uniform); per story the chance of a shuffled fact order and of a fact
    about two people outside the chain; per fact (and per hypothesis word) the chance of a neutral word, per
    fact of the backwards direction. ``pair_balance``: the k-th pairs of the three labels also share the
    surface features of the pair (:func:`~.shortcut.pair_features`); False gives the corpus of generator
    version 2 (hypothesis skeletons only), whose pair-level shortcuts tests/test_synthetic.py shows the check
    finds."""

    min_k: int = 2
    max_k: int = 6
    shuffle: float = 0.5
    neutral_words: float = 0.25
    inverse_facts: float = 0.3
    outside: float = 0.3
    pair_balance: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.min_k <= self.max_k <= MAX_K:
            raise SyntheticError(f"chain lengths need 1 <= --min-k <= --max-k <= {MAX_K} "
                                 f"(got {self.min_k} and {self.max_k})")
        for name in ("shuffle", "neutral_words", "inverse_facts", "outside"):
            check_rate(name.replace("_", "-"), getattr(self, name))


# -- families ---------------------------------------------------------------------------------

@dataclass
class Family:
    """People (by index) with a gender, two parents or none, at most one spouse, and children."""

    gender: list[str] = field(default_factory=list)
    parents: list[tuple[int, ...]] = field(default_factory=list)
    spouse: list[int | None] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)

    def add(self, gender: str) -> int:
        self.gender.append(gender)
        self.parents.append(())
        self.spouse.append(None)
        self.children.append([])
        return len(self.gender) - 1

    def ensure_spouse(self, x: int) -> int:
        s = self.spouse[x]
        if s is None:
            s = self.add(OTHER[self.gender[x]])
            self.spouse[x], self.spouse[s] = s, x
        return s

    def ensure_parents(self, x: int) -> tuple[int, ...]:
        if not self.parents[x]:
            f = self.add("male")
            m = self.ensure_spouse(f)
            self.parents[x] = (f, m)
            self.children[f].append(x)
            self.children[m].append(x)
        return self.parents[x]

    def new_child(self, a: int, b: int, gender: str) -> int:
        c = self.add(gender)
        self.parents[c] = (a, b)
        self.children[a].append(c)
        self.children[b].append(c)
        return c

    def step(self, x: int, b: str, rng: random.Random, taken: set[int]) -> int | None:
        """A person who is x's ``b`` and not in ``taken`` (created where needed); None where there is none."""
        if b == "parent":
            free = [p for p in self.ensure_parents(x) if p not in taken]
            return free[int(rng.random() * len(free))] if free else None
        if b == "child":
            return self.new_child(x, self.ensure_spouse(x), GENDERS[int(rng.random() * 2)])
        if b == "spouse":
            s = self.ensure_spouse(x)
            return None if s in taken else s
        ps = self.ensure_parents(x)  # sibling
        return self.new_child(ps[0], ps[1], GENDERS[int(rng.random() * 2)])

    def copy(self) -> Family:
        return Family(list(self.gender), list(self.parents), list(self.spouse), [list(c) for c in self.children])


# -- stories ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fact:
    """``holder`` is ``of``'s ``word`` (chain positions 0..k); ``rel``: the word's relation type."""

    holder: int
    of: int
    rel: str
    word: str
    template: int = 0


@dataclass
class Story:
    k: int
    people: list[int]  # family index of position i: the chain 0..k, then the pair outside it (k+1, k+2)
    steps: list[str]  # base relation of step i: position i+1 is position i's steps[i]
    target: str  # who position k is to position 0
    facts: list[Fact]  # in story order
    order: str  # chain or shuffled (the chain's facts)
    family: Family
    names: list[str]
    outside: tuple[int, int] | None = None  # positions (Q, R) of the pair outside the chain
    outside_base: str | None = None  # Q is R's parent / sibling / spouse
    # a second family where every fact holds too and the hypothesis about Q does (neutral witness)
    alt_family: Family | None = None
    alt_people: list[int] | None = None


def compose_path(rel: Relations, steps: list[str]) -> str | None:
    """The relation a chain of base steps composes to; None where the table leaves a step open."""
    t = steps[0]
    for b in steps[1:]:
        t = rel.compose.get(t, {}).get(b)
        if t is None:
            return None
    return t


def _walk(rng: random.Random, rel: Relations, k: int) -> tuple[Family, list[int], list[str], str]:
    while True:
        fam = Family()
        people = [fam.add(GENDERS[int(rng.random() * 2)])]
        steps: list[str] = []
        t: str | None = None
        for _ in range(k):
            options = list(rel.base) if t is None else [b for b in rel.base if b in rel.compose.get(t, {})]
            if steps and steps[-1] == "spouse":  # a spouse's spouse is the person before
                options = [b for b in options if b != "spouse"]
            if not options:
                break
            b = options[int(rng.random() * len(options))]
            nxt = fam.step(people[-1], b, rng, set(people))
            if nxt is None:
                break
            people.append(nxt)
            steps.append(b)
            t = b if t is None else rel.compose[t][b]
        if len(steps) == k and t is not None:
            return fam, people, steps, t


def _facts(rng: random.Random, rel: Relations, cfg: KinshipConfig, fam: Family, people: list[int],
           steps: list[str], force: dict[int, str] | None = None) -> list[Fact]:
    """One fact per step, forwards or backwards, gendered or neutral, per the rates; ``force`` maps a step i to
    what its fact says of the gender of the step's end (position i+1: ``end_stated`` / ``end_unstated``) or of
    its start (position i: ``start_stated`` / ``start_unstated``); an unstated one keeps the rates' own
    mixture of the other forms."""
    r = rng.random
    force = force or {}
    facts = []
    for i, b in enumerate(steps):
        backwards = r() < cfg.inverse_facts
        neutral = r() < cfg.neutral_words
        want = force.get(i)
        if want == "end_stated":
            backwards, neutral = False, False
        elif want == "start_stated":
            backwards, neutral = True, False
        elif want in ("end_unstated", "start_unstated"):
            stating = want == "start_unstated"  # the direction in which a gendered word would state it
            for _ in range(100):
                if neutral or backwards != stating:
                    break
                backwards, neutral = r() < cfg.inverse_facts, r() < cfg.neutral_words
            else:  # rates that never give another form (no backwards facts, no neutral words)
                neutral = True
        holder, of, tid = (i, i + 1, rel.types[b].inverse) if backwards else (i + 1, i, b)
        gender = None if neutral else fam.gender[people[holder]]
        facts.append(Fact(holder, of, tid, rel.types[tid].word(gender), int(r() * 2)))
    return facts


def _order(rng: random.Random, cfg: KinshipConfig, facts: list[Fact]) -> tuple[str, list[Fact]]:
    k = len(facts)
    if k > 1 and rng.random() < cfg.shuffle:
        idx = list(range(k))
        while idx == sorted(idx):
            rng.shuffle(idx)
        return "shuffled", [facts[i] for i in idx]
    return "chain", facts


# -- walks to a given relation ------------------------------------------------------------------

_COUNTS: dict[tuple[int, str | None], list[dict[tuple[str | None, str | None], int]]] = {}


def _moves(rel: Relations, t: str | None, last: str | None) -> list[tuple[str, str]]:
    """(base step, relation after it) from a walk at relation ``t`` whose last step was ``last``."""
    out = []
    for b in rel.base:
        if last == "spouse" and b == "spouse":
            continue  # a spouse's spouse is the person before
        nxt = b if t is None else rel.compose.get(t, {}).get(b)
        if nxt is not None:
            out.append((b, nxt))
    return out


def _counts(rel: Relations, k: int, target: str | None) -> list[dict[tuple[str | None, str | None], int]]:
    """counts[r][(t, last)]: walks of r more steps from relation t (last step ``last``) that end at
    ``target`` (any relation when None)."""
    key = (k, target)
    if key not in _COUNTS:
        states = [(None, None)] + [(t, b) for t in rel.types for b in rel.base]
        table = [{st: int(st[0] is not None and (target is None or st[0] == target)) for st in states}]
        for r in range(1, k + 1):
            prev = table[-1]
            table.append({st: sum(prev[(nxt, b)] for b, nxt in _moves(rel, *st)) for st in states})
        _COUNTS[key] = table
    return _COUNTS[key]


def reachable(rel: Relations, k: int, target: str) -> bool:
    """Whether some walk of k steps composes to ``target``."""
    return _counts(rel, k, target)[k][(None, None)] > 0


def walk_to(rng: random.Random, rel: Relations, k: int, target: str | None) -> list[str]:
    """Base steps of a walk of k steps composing to ``target``, uniform over all such walks."""
    counts = _counts(rel, k, target)
    if not counts[k][(None, None)]:
        raise ValueError(f"no walk of {k} steps composes to {target}")
    t: str | None = None
    last: str | None = None
    steps = []
    for r in range(k, 0, -1):
        moves = [(b, nxt, counts[r - 1][(nxt, b)]) for b, nxt in _moves(rel, t, last)]
        pick = int(rng.random() * sum(c for _, _, c in moves))
        for b, nxt, c in moves:
            if pick < c:
                break
            pick -= c
        steps.append(b)
        t, last = nxt, b
    return steps


def realise(rng: random.Random, steps: list[str], first_gender: str | None = None) -> tuple[Family, list[int]] | None:
    """A family grown along ``steps`` (None where a step finds no free person)."""
    fam = Family()
    people = [fam.add(first_gender or GENDERS[int(rng.random() * 2)])]
    for b in steps:
        nxt = fam.step(people[-1], b, rng, set(people))
        if nxt is None:
            return None
        people.append(nxt)
    return fam, people


def stated_genders(rel: Relations, facts: list[Fact]) -> dict[int, str]:
    """The people whose gender a fact's word states."""
    out = {}
    for f in facts:
        g = rel.words[f.word][1]
        if g is not None:
            out[f.holder] = g
    return out


def implied_genders(facts: list[Fact], stated: dict[int, str]) -> set[int]:
    """People whose gender a reader would infer from a spouse or a co-parent of stated gender."""
    out = set()
    parents: dict[int, list[int]] = {}
    for f in facts:
        if f.rel == "spouse":
            for a, b in ((f.holder, f.of), (f.of, f.holder)):
                if b in stated:
                    out.add(a)
        elif f.rel == "parent":
            parents.setdefault(f.of, []).append(f.holder)
        elif f.rel == "child":
            parents.setdefault(f.holder, []).append(f.of)
    for ps in parents.values():
        for a in ps:
            if any(b in stated for b in ps if b != a):
                out.add(a)
    return out - set(stated)


def _path(rel: Relations, facts: list[Fact], holder: int, of: int) -> list[str] | None:
    """The base steps from ``of`` to ``holder`` through the facts (None where they are not linked)."""
    adj: dict[int, list[tuple[int, str]]] = {}
    for f in facts:  # f.holder is f.of's f.rel; f.of is f.holder's inverse
        adj.setdefault(f.of, []).append((f.holder, f.rel))
        adj.setdefault(f.holder, []).append((f.of, rel.types[f.rel].inverse))
    prev: dict[int, tuple[int, str] | None] = {of: None}
    queue = [of]
    while queue:
        u = queue.pop(0)
        for v, b in adj.get(u, []):
            if v not in prev:
                prev[v] = (u, b)
                queue.append(v)
    if holder not in prev or holder == of:
        return None
    steps = []
    node = holder
    while (p := prev[node]) is not None:
        node, b = p
        steps.append(b)
    return steps[::-1]


def relation_between(rel: Relations, facts: list[Fact], holder: int, of: int) -> str | None:
    """Who ``holder`` is to ``of`` by the facts: the composition of the path from ``of``, or the inverse of the
    composition of the path from ``holder`` (the table composes some paths in one direction only)."""
    steps = _path(rel, facts, holder, of)
    if steps is None:
        return None
    fwd = compose_path(rel, steps)
    if fwd is not None:
        return fwd
    back = compose_path(rel, [rel.types[b].inverse for b in steps[::-1]])
    return rel.types[back].inverse if back is not None else None


def many(t: RelType) -> bool:
    """Whether a person may have any number of relatives of type ``t`` (a new one can always join): not for
    parents, grandparents (and greater), parents-in-law and the spouse."""
    return not (t.id in ("parent", "spouse", "parent-in-law") or t.id.endswith("grandparent"))


def linked(rel: Relations, facts: list[Fact], a: int, b: int) -> bool:
    return _path(rel, facts, a, b) is not None


def _outside_person(rel: Relations, facts: list[Fact], x: int) -> bool:
    """Whether the facts say of ``x`` only that x is one other person's parent, sibling or spouse (the only
    people the corpus puts outside its chains; such a person can join any family as a new relative of a kind a
    person may have any number of)."""
    mine = [f for f in facts if x in (f.holder, f.of)]
    if len(mine) != 1:
        return False
    f = mine[0]
    other = f.of if f.holder == x else f.holder
    if any(other in (g.holder, g.of) for g in facts if g is not f):
        return False
    return relation_between(rel, facts, x, other) in OUTSIDE_BASE


def label_of(rel: Relations, facts: list[Fact], holder: int, word: str, of: int) -> str | None:
    """The label of "``holder`` is ``of``'s ``word``" given the facts; None where the facts and the corpus'
    assumptions leave a relation other than the hypothesis's open at the same generation, or the two people
    are not linked and neither is an outside person (never generated)."""
    hyp, hyp_gender = rel.words[word]
    stated = stated_genders(rel, facts).get(holder)
    if not linked(rel, facts, holder, of):
        # unrelated people: the hypothesis holds in some family where every fact does (the outside person
        # joins as a new relative), unless a fact gives the holder the other gender
        if hyp_gender is not None and stated is not None and stated != hyp_gender:
            return CONTRADICTION
        t = rel.types[hyp]
        if (many(t) and _outside_person(rel, facts, holder)) or \
                (many(rel.types[t.inverse]) and _outside_person(rel, facts, of)):
            return NEUTRAL
        return None
    proven = relation_between(rel, facts, holder, of)
    if proven is None:
        return None
    if rel.types[hyp].offset != rel.types[proven].offset:
        return CONTRADICTION
    if hyp != proven:
        return None
    if hyp_gender is None:
        return ENTAILMENT
    if stated is None:
        return NEUTRAL
    return ENTAILMENT if stated == hyp_gender else CONTRADICTION


# -- hypothesis skeletons and the stories built for them ---------------------------------------------
