"""Kinship chains (``kinship``, after CLUTRR): a story of k kinship facts linking x0 to xk through a random
family, and a hypothesis whose label follows from the facts by the composition table of
``assets/synthetic/kinship_relations.json``.

The family grows along a random walk of base relations (parent, child, spouse, sibling) in which every prefix
composes to a relation of the table; it holds the chain's people and the co-parents and spouses they need
(every child has two parents who are each other's only spouse). A fact states one step, forwards (``B is A's
father``) or backwards (``A is B's son``), with a gendered word or a neutral one (``parent``); names are given
names of both genders, so a person's gender is known only where a fact's word states it. With probability
``outside`` the story also states one fact about two people outside the chain (``Quinn is Robin's sister``).

Labels (:func:`label_of`), with T the relation the facts compose to between the hypothesis's two people:

- entailment: the hypothesis states T, with a word of the stated gender or a neutral word;
- contradiction: a word of T for the other gender than the stated one, or a relation whose generation offset
  differs from T's (the reversed relation, a grandparent for a parent, ...), or — for a person outside the
  chain — a word for the other gender than the one a fact states;
- neutral: T with a gendered word where the facts state no gender for that person, or a relation between a
  chain person and a person outside the chain that the facts leave open (one of the relations a person can
  have any number of: a sibling, a child, a cousin, an uncle, ...).

No surface form of the hypothesis tells the label: the k-th pair of every label shares one hypothesis
*skeleton* (chain length, relation word, sentence template, whether the story has an outside pair), drawn
before the label is known, and the story is then built for that word and label. With ``pair_balance`` (the
default) the three stories of a rank also share every surface feature of the pair that
:func:`~.shortcut.pair_features` computes — which of the hypothesis's names the story has in possessive form,
whether it uses the hypothesis's word, its distinct words: stories are built for each label in turn until a
feature value has one of every label (:func:`~.common.matched_triple`).

A relation other than T at the same generation (a cousin for a sibling) is never a hypothesis: only
assumptions about marriages between relatives, which the corpus does not make, would exclude it. Neutral
hypotheses are also kept off people whose gender a reader would infer from a spouse or co-parent of stated
gender, which the logic (no assumption on couples) leaves open.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterator

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from breaknli_fast.data.synthetic.common import SyntheticError, label_schedule, matched_triple, shared_skeletons
from breaknli_fast.data.synthetic.family import (Fact, Family, GENDERS, KinshipConfig, MAX_TRIES, NAME, OTHER,
                                                OUTSIDE_BASE, RelType, Relations, Story, _facts, _order, _walk,
                                                compose_path, implied_genders, label_of, load_names, load_relations,
                                                many, reachable, realise, stated_genders, walk_to)
from breaknli_fast.data.synthetic.shortcut import pair_features


@dataclass(frozen=True)
class Skeleton:
    """What the k-th pairs of all three labels share: the chain length, the hypothesis's relation word and
    sentence template, and whether the story states a fact about two people outside the chain."""

    k: int
    word: str
    template: int
    outside: bool


KINDS = {ENTAILMENT: ("stated_relation", "gender_neutral_word"),
         CONTRADICTION: ("gender_conflict", "reversed_relation", "generation_conflict", "outside_gender_conflict"),
         NEUTRAL: ("gender_unstated", "unrelated_person")}


def _conflicting(rel: Relations, t: RelType) -> list[str]:
    """Types whose generation offset differs from ``t``'s by 1 or 2 (the inverse aside)."""
    return [u.id for u in rel.types.values() if u.id != t.inverse and 1 <= abs(u.offset - t.offset) <= 2]


def kinds(rel: Relations, sk: Skeleton, label: str) -> list[str]:
    """The kinds of pair of ``label`` that can be built on the skeleton."""
    tid, g = rel.words[sk.word]
    t = rel.types[tid]
    inv = rel.types[t.inverse]
    on_chain = reachable(rel, sk.k, t.id) or reachable(rel, sk.k, inv.id)  # forwards or backwards
    outside = sk.outside and (many(t) or many(inv))
    out = []
    for kind in KINDS[label]:
        ok = {"stated_relation": on_chain and (g is not None or not t.gendered),
              "gender_neutral_word": on_chain and g is None and t.gendered,
              "gender_conflict": on_chain and g is not None,
              "reversed_relation": t.offset != 0 and on_chain,
              "generation_conflict": any(reachable(rel, sk.k, u) for u in _conflicting(rel, t)),
              "outside_gender_conflict": outside and g is not None,
              # one spouse fact states one spouse's gender and so lets a reader infer the other's
              "gender_unstated": on_chain and g is not None and not (sk.k == 1 and t.id == "spouse"),
              "unrelated_person": outside}[kind]
        if ok:
            out.append(kind)
    return out


def skeleton(rng: random.Random, rel: Relations, cfg: KinshipConfig) -> Skeleton:
    """A skeleton on which all three labels can be built: the relation of a natural walk (either way round),
    its neutral word with the ``neutral_words`` rate where it has one, else a gendered word at random."""
    r = rng.random
    for _ in range(MAX_TRIES):
        k = cfg.min_k + int(r() * (cfg.max_k - cfg.min_k + 1))
        t = rel.types[_walk(rng, rel, k)[3]]
        if r() < 0.5:
            t = rel.types[t.inverse]
        if t.gendered and t.neutral is not None and r() < cfg.neutral_words:
            word = t.neutral
        else:
            word = t.word(GENDERS[int(r() * 2)]) if t.gendered else t.male
        sk = Skeleton(k, word, int(r() * 2), r() < cfg.outside)
        if all(kinds(rel, sk, lab) for lab in KINDS):
            return sk
    raise SyntheticError(f"no kinship hypothesis in {MAX_TRIES} draws allows all three labels with these rates")


def _chain(rng: random.Random, rel: Relations, cfg: KinshipConfig, k: int, who: str | None,
           holder_at_end: bool, gender: str | None, stated_end: int | None = None
           ) -> tuple[Family, list[int], list[str], str, list[Fact]] | None:
    """A chain of k steps whose end (position k) is ``who`` to its start (any relation when None), with the
    hypothesis holder (position k, or 0) of family ``gender`` (any when None). Of the two ends, exactly one has
    its gender stated by its fact: ``stated_end`` (0 or k; at random when None), and the other is not implied by
    a spouse or co-parent either (where that can be had). Every story has this shape whatever its label, so the facts at the chain's
    ends do not tell the label; which end is the hypothesis's person is what matters."""
    target = who if who is None or holder_at_end else rel.types[who].inverse
    if target is not None and not reachable(rel, k, target):
        return None
    holder = k if holder_at_end else 0
    for attempt in range(50):
        end = stated_end if stated_end is not None else (k if rng.random() < 0.5 else 0)
        other = 0 if end == k else k
        steps = walk_to(rng, rel, k, target)
        made = realise(rng, steps, gender if holder == 0 else None)
        if made is None:
            continue
        fam, people = made
        if gender is not None and fam.gender[people[holder]] != gender:
            continue
        force = {0: "start_stated"} if end == 0 else {k - 1: "end_stated"}
        if k > 1:  # with one fact, the fact that states one end's gender states no other
            force.update({0: "start_unstated"} if other == 0 else {k - 1: "end_unstated"})
        facts = _facts(rng, rel, cfg, fam, people, steps, force)
        stated = stated_genders(rel, facts)
        if other in stated:
            continue
        # a reader would infer the other end's gender from a spouse or co-parent: never for a hypothesis about
        # it (a neutral), and for the others only where no other story turns up (one spouse fact, k = 1)
        if other in implied_genders(facts, stated) and (other == holder or attempt < 40):
            continue
        return fam, people, steps, compose_path(rel, steps), facts
    return None


def _attach(rng: random.Random, rel: Relations, fam: Family, y: int, tid: str) -> int:
    """A new person who is y's ``tid`` (a type a person may have any number of), grown along a shortest walk
    of base steps to it."""
    steps = _shortest_walks()[tid]
    x = y
    for b in steps:
        x = fam.step(x, b, rng, set())  # the last step always makes a new person (child, sibling, spouse)
    return x


@lru_cache(maxsize=1)
def _shortest_walks() -> dict[str, list[str]]:
    """For each relation type, a shortest walk of base steps that composes to it."""
    rel = load_relations()
    chains = {b: [b] for b in rel.base}
    queue = list(rel.base)
    while queue:
        t = queue.pop(0)
        for b, result in rel.compose.get(t, {}).items():
            if result not in chains:
                chains[result] = chains[t] + [b]
                queue.append(result)
    return chains


def _relate(rng: random.Random, fam: Family, q: int, base: str, gender: str) -> int:
    """R, who Q is the ``base`` of (Q is R's parent / sibling / spouse), made where needed, of ``gender``."""
    if base == "parent":
        r = fam.new_child(q, fam.ensure_spouse(q), gender)
    elif base == "sibling":
        ps = fam.ensure_parents(q)
        r = fam.new_child(ps[0], ps[1], gender)
    else:
        r = fam.ensure_spouse(q)
    fam.gender[r] = gender
    return r


def build(rng: random.Random, rel: Relations, cfg: KinshipConfig, sk: Skeleton, kind: str
          ) -> tuple[Story, Fact, str] | None:
    """A story and hypothesis of ``kind`` on the skeleton (None where this draw fails), and its phenomenon."""
    r = rng.random
    tid, g = rel.words[sk.word]
    t = rel.types[tid]
    k = sk.k
    if kind in ("unrelated_person", "outside_gender_conflict"):
        return _build_outside(rng, rel, cfg, sk, kind)
    at_end = r() < 0.5
    holder, of = (k, 0) if at_end else (0, k)
    if kind in ("stated_relation", "gender_neutral_word"):
        made = _chain(rng, rel, cfg, k, tid, at_end, g, holder if g else None)
    elif kind == "gender_conflict":
        made = _chain(rng, rel, cfg, k, tid, at_end, OTHER[g], holder)
    elif kind == "gender_unstated":
        made = _chain(rng, rel, cfg, k, tid, at_end, None, of)
    elif kind == "reversed_relation":
        made = _chain(rng, rel, cfg, k, t.inverse, at_end, g, None)
    else:  # generation_conflict
        options = [u for u in _conflicting(rel, t) if reachable(rel, k, u) or reachable(rel, k, rel.types[u].inverse)]
        made = _chain(rng, rel, cfg, k, options[int(r() * len(options))], at_end, g, None) if options else None
    if made is None:
        return None
    fam, people, steps, target, facts = made
    order, facts = _order(rng, cfg, facts)
    names = rng.sample(load_names(), k + 1)
    story = Story(k, people, steps, target, facts, order, fam, names)
    if sk.outside:
        _add_outside(rng, rel, cfg, story, None)
    return story, Fact(holder, of, tid, sk.word, sk.template), kind


def _add_outside(rng: random.Random, rel: Relations, cfg: KinshipConfig, story: Story, q_gender: str | None,
                 statement: str | None = None) -> None:
    """The fact about two people outside the chain, Q (position k+1) and R (k+2), at a random place in the
    story: Q is R's parent, sibling or spouse, forwards or backwards. ``statement``: the fact states Q's gender
    (``stated``) or not (``unstated``), else either by the rates."""
    r = rng.random
    k = story.k
    fam = story.family
    base = OUTSIDE_BASE[int(r() * len(OUTSIDE_BASE))]
    q = fam.add(q_gender or GENDERS[int(r() * 2)])
    rr = _relate(rng, fam, q, base, GENDERS[int(r() * 2)])
    story.people += [q, rr]
    story.outside, story.outside_base = (k + 1, k + 2), base
    backwards = r() < cfg.inverse_facts
    neutral = r() < cfg.neutral_words
    if statement == "stated":
        backwards, neutral = False, False
    elif statement == "unstated" and not backwards:
        neutral = True
    holder, of_, tid = (k + 2, k + 1, rel.types[base].inverse) if backwards else (k + 1, k + 2, base)
    word = rel.types[tid].word(None if neutral else fam.gender[story.people[holder]])
    fact = Fact(holder, of_, tid, word, int(r() * 2))
    at = int(r() * (len(story.facts) + 1))
    story.facts.insert(at, fact)
    taken = set(story.names)
    story.names += [n for n in rng.sample(load_names(), k + 3) if n not in taken][:2]


def _build_outside(rng: random.Random, rel: Relations, cfg: KinshipConfig, sk: Skeleton, kind: str
                   ) -> tuple[Story, Fact, str] | None:
    """A hypothesis between a chain end and Q, the outside person: Q as the holder (a type Q may join as) or as
    the other person (the chain end is Q's ``word``, Q joining as the inverse type)."""
    r = rng.random
    tid, g = rel.words[sk.word]
    t = rel.types[tid]
    k = sk.k
    sides = [side for side, ok in (("q_holder", many(t)), ("q_of", many(rel.types[t.inverse]))) if ok]
    side = sides[int(r() * len(sides))]
    end = k if r() < 0.5 else 0
    conflict = kind == "outside_gender_conflict"
    if side == "q_holder":
        made = _chain(rng, rel, cfg, k, None, True, None, None)
    else:  # the chain end holds the word: its gender is g (or the other one, stated, for a conflict)
        want = OTHER[g] if conflict else g
        made = _chain(rng, rel, cfg, k, None, end == k, want, end if conflict else None)
    if made is None:
        return None
    fam, people, steps, target, facts = made
    order, facts = _order(rng, cfg, facts)
    story = Story(k, people, steps, target, facts, order, fam, rng.sample(load_names(), k + 1))
    base_family = fam.copy()
    if side == "q_holder":
        q_gender = (OTHER[g] if conflict else g) if g else None
        _add_outside(rng, rel, cfg, story, q_gender, "stated" if conflict else None)
        hyp = Fact(k + 1, end, tid, sk.word, sk.template)
    else:
        _add_outside(rng, rel, cfg, story, None)
        hyp = Fact(end, k + 1, tid, sk.word, sk.template)
    stated = stated_genders(rel, story.facts)
    if not conflict and g is not None and hyp.holder not in stated and \
            hyp.holder in implied_genders(story.facts, stated):
        return None  # a reader would take the holder's gender from a spouse or co-parent
    if not conflict:  # the witness: a family where Q has joined the chain's as the hypothesis says
        alt = base_family
        q_pos, y_pos, joins = (k + 1, end, tid) if side == "q_holder" else (k + 1, end, t.inverse)
        q = _attach(rng, rel, alt, people[y_pos], joins)
        alt.gender[q] = fam.gender[story.people[q_pos]]
        rr = _relate(rng, alt, q, story.outside_base, fam.gender[story.people[k + 2]])
        story.alt_family, story.alt_people = alt, list(story.people[: k + 1]) + [q, rr]
    return story, hyp, kind


OUTSIDE_KINDS = ("unrelated_person", "outside_gender_conflict")


def _pick(rng: random.Random, options: list[str]) -> str:
    """A kind: one about the outside pair half the time where both sorts are possible (so that a hypothesis
    about an outside person is as often a contradiction as neutral), else uniform."""
    outside = [o for o in options if o in OUTSIDE_KINDS]
    rest = [o for o in options if o not in OUTSIDE_KINDS]
    group = outside if outside and (not rest or rng.random() < 0.5) else rest
    return group[int(rng.random() * len(group))]


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
    any n ≥ m are the same. The k-th example of every label shares one :class:`Skeleton`."""
    cfg = config or KinshipConfig()
    rel = load_relations()
    rng = random.Random(f"{NAME}-{seed}")
    skeleton_rng = random.Random(f"{NAME}-{seed}-skeleton")
    schedule = label_schedule(rng)

    def story_for(sk: Skeleton, target: str, options: list[str] | None = None) -> tuple[Story, Fact, str]:
        options = options or kinds(rel, sk, target)
        for _ in range(MAX_TRIES):
            made = build(rng, rel, cfg, sk, _pick(rng, options))
            if made is not None:
                return made
        raise SyntheticError(f"no {target} story for {sk.word!r} in {MAX_TRIES} tries with these rates")

    def signature(made: tuple[Story, Fact, str]) -> tuple[int, ...]:
        story, hyp, _ = made
        return tuple(pair_features(" ".join(fact_text(f, story.names) for f in story.facts),
                                   fact_text(hyp, story.names)))

    def draw() -> Any:
        sk = skeleton(skeleton_rng, rel, cfg)
        if not cfg.pair_balance:  # generator version 2: the story is built when its label comes
            return sk
        options = {lab: kinds(rel, sk, lab) for lab in KINDS}
        return matched_triple(lambda lab: story_for(sk, lab, options[lab]), signature, KINDS, rng)[0]

    for i, target, drawn, group in shared_skeletons(schedule, n, KINDS, draw):
        made = story_for(drawn, target) if isinstance(drawn, Skeleton) else drawn[target]
        story, hyp, phen = made
        lab = label_of(rel, story.facts, hyp.holder, hyp.word, hyp.of)
        if lab != target:  # built for the label; label_of decides from the facts alone
            raise AssertionError(f"kinship: {phen} hypothesis labelled {lab}, built as {target}")
        k = story.k
        chain_facts = [f for f in story.facts if f.holder <= k and f.of <= k]
        row = {
            "id": f"{NAME}-{seed}-{i}",
            "premise": " ".join(fact_text(f, story.names) for f in story.facts),
            "hypothesis": fact_text(hyp, story.names),
            "label": lab,
            "group": f"{NAME}-{seed}-g{group}",
            "k": k,
            "relation": story.target,
            "hypothesis_relation": hyp.rel,
            "hypothesis_direction": "outside" if max(hyp.holder, hyp.of) > k else
                                    "forward" if hyp.holder == k else "inverse",
            "phenomenon": phen,
            "story_order": story.order,
            "outside_fact": int(story.outside is not None),
            "inverse_facts": sum(f.holder < f.of for f in chain_facts),  # "A is B's son" for B, A's parent
            "neutral_words": sum(rel.words[f.word][1] is None and rel.types[f.rel].gendered for f in chain_facts),
        }
        yield Example(row, story, hyp)


def generate(n: int, seed: int = 0, config: KinshipConfig | None = None) -> Iterator[dict[str, Any]]:
    """``n`` labelled rows (:func:`examples` without the stories)."""
    for ex in examples(n, seed, config):
        yield ex.row
