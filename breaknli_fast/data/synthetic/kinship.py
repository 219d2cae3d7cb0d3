"""Kinship chains (``kinship``, after CLUTRR): a story of k kinship facts linking x0 to xk through a random
family, and a hypothesis about x0 and xk whose label follows from the facts by the composition table of
``assets/synthetic/kinship_relations.json``.

The family grows along a random walk of base relations (parent, child, spouse, sibling) in which every prefix
composes to a relation of the table; it holds the chain's people and the co-parents and spouses they need
(every child has two parents who are each other's only spouse). A fact states one step, forwards (``B is A's
father``) or backwards (``A is B's son``), with a gendered word or a neutral one (``parent``); names are given
names of both genders, so a person's gender is known only where a fact's word states it.

Labels (:func:`label_of`), with T the relation the facts compose to:

- entailment: the hypothesis states T, with a word of the stated gender or a neutral word;
- contradiction: a word of T for the other gender than the stated one, or a relation whose generation offset
  differs from T's (the reversed relation, a grandparent for a parent, ...);
- neutral: T with a gendered word where the facts state no gender for that person.

A relation other than T at the same generation (a cousin for a sibling) is never a hypothesis: only
assumptions about marriages between relatives, which the corpus does not make, would exclude it. Neutral
hypotheses are also kept off people whose gender a reader would infer from a spouse or co-parent of stated
gender, which the logic (no assumption on couples) leaves open.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from breaknli_fast.data.synthetic.common import SyntheticError, asset_path, check_rate, label_schedule, load_json

NAME = "kinship"
GENDERS = ("male", "female")
OTHER = {"male": "female", "female": "male"}
MAX_K = 10
MAX_TRIES = 1000


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
    """Chain lengths ``min_k``..``max_k`` (uniform); per story the chance of a shuffled fact order; per fact the
    chances of a neutral word and of the backwards direction."""

    min_k: int = 2
    max_k: int = 6
    shuffle: float = 0.5
    neutral_words: float = 0.25
    inverse_facts: float = 0.3

    def __post_init__(self) -> None:
        if not 1 <= self.min_k <= self.max_k <= MAX_K:
            raise SyntheticError(f"chain lengths need 1 <= --min-k <= --max-k <= {MAX_K} "
                                 f"(got {self.min_k} and {self.max_k})")
        for name in ("shuffle", "neutral_words", "inverse_facts"):
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
    people: list[int]  # family index of chain position i
    steps: list[str]  # base relation of step i: position i+1 is position i's steps[i]
    target: str  # who position k is to position 0
    facts: list[Fact]  # in story order
    order: str  # chain or shuffled
    family: Family
    names: list[str]


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


def make_story(rng: random.Random, rel: Relations, cfg: KinshipConfig, k: int) -> Story:
    fam, people, steps, target = _walk(rng, rel, k)
    r = rng.random
    facts = []
    for i, b in enumerate(steps):
        holder, of, tid = (i, i + 1, rel.types[b].inverse) if r() < cfg.inverse_facts else (i + 1, i, b)
        gender = None if r() < cfg.neutral_words else fam.gender[people[holder]]
        facts.append(Fact(holder, of, tid, rel.types[tid].word(gender), int(r() * 2)))
    order = "chain"
    if k > 1 and r() < cfg.shuffle:
        order = "shuffled"
        idx = list(range(k))
        while idx == sorted(idx):
            rng.shuffle(idx)
        facts = [facts[i] for i in idx]
    names = rng.sample(load_names(), k + 1)
    return Story(k, people, steps, target, facts, order, fam, names)


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


def label_of(rel: Relations, facts: list[Fact], holder: int, word: str, of: int) -> str | None:
    """The label of "``holder`` is ``of``'s ``word``" given the facts; None where the facts and the corpus'
    assumptions leave a relation other than the hypothesis's open at the same generation (never generated)."""
    proven = relation_between(rel, facts, holder, of)
    if proven is None:
        return None
    hyp, hyp_gender = rel.words[word]
    if rel.types[hyp].offset != rel.types[proven].offset:
        return CONTRADICTION
    if hyp != proven:
        return None
    if hyp_gender is None:
        return ENTAILMENT
    stated = stated_genders(rel, facts).get(holder)
    if stated is None:
        return NEUTRAL
    return ENTAILMENT if stated == hyp_gender else CONTRADICTION


# hypotheses: (phenomenon, holder position, of position, word)
Candidate = tuple[str, int, int, str]


def candidates(rng: random.Random, rel: Relations, story: Story) -> dict[str, list[Candidate]]:
    """Hypotheses about positions 0 and k, by label."""
    k = story.k
    stated = stated_genders(rel, story.facts)
    implied = implied_genders(story.facts, stated)
    out: dict[str, list[Candidate]] = {ENTAILMENT: [], CONTRADICTION: [], NEUTRAL: []}
    t_fwd = rel.types[story.target]
    for holder, of, t in ((k, 0, t_fwd), (0, k, rel.types[t_fwd.inverse])):
        g = stated.get(holder)
        if not t.gendered:
            out[ENTAILMENT].append(("stated_relation", holder, of, t.male))
        elif g is not None:
            out[ENTAILMENT].append(("stated_relation", holder, of, t.word(g)))
            out[CONTRADICTION].append(("gender_conflict", holder, of, t.word(OTHER[g])))
        elif holder not in implied:
            out[NEUTRAL].append(("gender_unstated", holder, of, t.word(GENDERS[int(rng.random() * 2)])))
        if t.gendered and t.neutral is not None:
            out[ENTAILMENT].append(("gender_neutral_word", holder, of, t.neutral))
        for u in rel.types.values():
            if u.offset != t.offset and (abs(u.offset - t.offset) <= 2 or u.id == t.inverse):
                if g is not None:
                    w = u.word(g)
                else:
                    ws = [x for x in (u.male, u.female, u.neutral) if x is not None]
                    w = ws[int(rng.random() * len(ws))]
                out[CONTRADICTION].append(("reversed_relation" if u.id == t.inverse else "generation_conflict",
                                           holder, of, w))
    return out


def fact_text(f: Fact, names: list[str]) -> str:
    h, o = names[f.holder], names[f.of]
    return f"{h} is {o}'s {f.word}." if f.template == 0 else f"{o}'s {f.word} is {h}."


@dataclass
class Example:
    row: dict[str, Any]
    story: Story
    hypothesis: Fact


def examples(n: int, seed: int = 0, config: KinshipConfig | None = None) -> Iterator[Example]:
    """``n`` labelled examples with their stories (families included), deterministic in ``seed``; the first m of
    any n ≥ m are the same."""
    cfg = config or KinshipConfig()
    rel = load_relations()
    rng = random.Random(f"{NAME}-{seed}")
    schedule = label_schedule(rng)
    for i in range(n):
        target = next(schedule)
        k = cfg.min_k + int(rng.random() * (cfg.max_k - cfg.min_k + 1))
        for _ in range(MAX_TRIES):
            story = make_story(rng, rel, cfg, k)
            cands = candidates(rng, rel, story)[target]
            if cands:
                break
        else:
            raise SyntheticError(f"no {target} hypothesis in {MAX_TRIES} stories of {k} facts with these rates")
        kinds = sorted({c[0] for c in cands})
        kind = kinds[int(rng.random() * len(kinds))]
        pick = [c for c in cands if c[0] == kind]
        phen, holder, of, word = pick[int(rng.random() * len(pick))]
        hyp = Fact(holder, of, rel.words[word][0], word, int(rng.random() * 2))
        lab = label_of(rel, story.facts, holder, word, of)
        if lab != target:  # the candidates are built for their label; label_of decides from the facts alone
            raise AssertionError(f"kinship: {phen} hypothesis labelled {lab}, built as {target}")
        row = {
            "id": f"{NAME}-{seed}-{i}",
            "premise": " ".join(fact_text(f, story.names) for f in story.facts),
            "hypothesis": fact_text(hyp, story.names),
            "label": lab,
            "k": k,
            "relation": story.target,
            "hypothesis_relation": hyp.rel,
            "hypothesis_direction": "forward" if holder == k else "inverse",
            "phenomenon": phen,
            "story_order": story.order,
            "inverse_facts": sum(f.holder < f.of for f in story.facts),  # "A is B's son" for B, A's parent
            "neutral_words": sum(rel.words[f.word][1] is None and rel.types[f.rel].gendered for f in story.facts),
        }
        yield Example(row, story, hyp)


def generate(n: int, seed: int = 0, config: KinshipConfig | None = None) -> Iterator[dict[str, Any]]:
    """``n`` labelled rows (:func:`examples` without the stories)."""
    for ex in examples(n, seed, config):
        yield ex.row
