"""Independent checks of the generated labels.

- ``aenli``: :func:`parse_sentence` reads a generated sentence back from its words; :func:`brute_force_label`
  turns the parse into a first-order formula of its own (:class:`Node`: quantifiers, negation, atoms, built
  from the surface order without :meth:`Clause.formula`) and evaluates it on every model of a larger domain
  (4 agents × 3 things by default) as numpy arrays, chunk by chunk. Clauses over different triples are
  independent, so a sentence's models are the product of its triples' models, as in the model checker. Under
  the unique reading of *the* it finds, from the parse, the nouns that take *the* anywhere in the pair and
  gives each of them one individual.
- ``kinship``: :func:`check_kinship` verifies an example against its family by graph search: every fact holds
  in the family under the words' dictionary definitions (:func:`definition`, written from the words, not
  from the composition table); an entailment holds in the family; a contradiction fails there and the facts
  fix the opposite gender or another generation difference; a neutral hypothesis holds in exactly one of two
  families where every fact holds: the family and the family with that person's gender flipped, or — for a
  person outside the chain — the family and one where that person has joined the chain's family.
  :func:`kinship_label_from_text` reads a premise and a hypothesis back from their words and labels them.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from breaknli_fast.data.synthetic import kinship, logic
from breaknli_fast.data.synthetic.aenli import Vocabulary, load_vocabulary

# -- aenli: sentences back from words ---------------------------------------------------------


@dataclass(frozen=True)
class ParsedClause:
    agent: str
    verb: str  # base form
    thing: str
    subj_det: str
    obj_det: str
    negated: bool
    passive: bool
    adverb: str | None  # the word
    position: str | None  # before_negation, before_verb, end

    def clause(self) -> logic.Clause:
        return logic.Clause(self.subj_det, self.obj_det, self.negated, self.passive, self.position)


@dataclass(frozen=True)
class ParsedSentence:
    connective: str
    clauses: tuple[ParsedClause, ...]

    def sentence(self) -> logic.Sentence:
        """The model checker's sentence of the parse."""
        return logic.Sentence(self.connective, tuple(((c.agent, c.verb, c.thing, c.adverb), c.clause())
                                                    for c in self.clauses))


class ParseError(ValueError):
    pass


def parse_sentence(text: str, vocab: Vocabulary | None = None) -> ParsedSentence:
    vocab = vocab or load_vocabulary()
    s = text.strip()
    if not s.endswith("."):
        raise ParseError(f"no final period: {text!r}")
    s = s[:-1]
    s = s[0].lower() + s[1:]
    m = re.fullmatch(r"if (.+), then (.+)", s)
    if m:
        return ParsedSentence("if", (_parse_clause(m.group(1), vocab), _parse_clause(m.group(2), vocab)))
    for conn in ("and", "or"):
        parts = s.split(f" {conn} ")
        if len(parts) == 2:
            return ParsedSentence(conn, tuple(_parse_clause(p, vocab) for p in parts))
    return ParsedSentence("none", (_parse_clause(s, vocab),))


def _parse_clause(text: str, vocab: Vocabulary) -> ParsedClause:
    w = text.split()
    adverbs = {a.word for a in vocab.adverbs}
    by_form = {"base": {v.base: v.base for v in vocab.verbs}, "past": {v.past: v.base for v in vocab.verbs},
               "participle": {v.participle: v.base for v in vocab.verbs}}
    pos = 0

    def take(expected: set[str] | dict[str, str] | None = None, optional: bool = False) -> str | None:
        nonlocal pos
        if pos < len(w) and (expected is None or w[pos] in expected):
            pos += 1
            return w[pos - 1]
        if optional:
            return None
        raise ParseError(f"unexpected {' '.join(w[pos:]) or 'end'!r} in {text!r}")

    def det() -> str:
        d = take({"every", "the", "a", "an"})
        return "a" if d == "an" else d

    d1 = det()
    noun1 = take()
    adverb = position = None
    if noun1 in vocab.agents:  # active
        subj_det, agent = d1, noun1
        if pos + 1 < len(w) and w[pos] in adverbs and w[pos + 1] == "did":
            adverb, position = take(), "before_negation"
        negated = take({"did"}, optional=True) is not None
        if negated:
            take({"not"})
        a = take(adverbs, optional=True)
        if a:
            adverb, position = a, "before_verb"
        verb = by_form["base" if negated else "past"].get(take())
        obj_det = det()
        thing = take(set(vocab.things))
        passive = False
    elif noun1 in vocab.things:  # passive
        obj_det, thing = d1, noun1
        take({"was"})
        negated = take({"not"}, optional=True) is not None
        a = take(adverbs, optional=True)
        if a:
            adverb, position = a, "before_verb"
        verb = by_form["participle"].get(take())
        take({"by"})
        subj_det = det()
        agent = take(set(vocab.agents))
        passive = True
    else:
        raise ParseError(f"{noun1!r} is neither an agent nor a thing in {text!r}")
    a = take(adverbs, optional=True)
    if a:
        adverb, position = a, "end"
    if verb is None or pos != len(w):
        raise ParseError(f"cannot read {text!r}")
    return ParsedClause(agent, verb, thing, subj_det, obj_det, negated, passive, adverb, position)


# -- aenli: formulas of their own and a brute-force evaluation -----------------------------------

@dataclass(frozen=True)
class Node:
    """``op``: forall / exists / the (``var`` of ``sort``: agent or thing), not, atom (``rel``: R, S or T;
    ``args``: the agent and thing variables)."""

    op: str
    var: str = ""
    sort: str = ""
    body: Any = None
    rel: str = ""
    args: tuple[str, str] = ("", "")


_Q = {"every": "forall", "a": "exists", "the": "the"}


def _quant(det: str, var: str, sort: str, body: Node) -> Node:
    return Node(_Q[det], var=var, sort=sort, body=body)


def _push_not(n: Node) -> Node:
    """¬φ with the negation moved to the atom (¬∀ = ∃¬, ¬∃ = ∀¬; the constant commutes)."""
    if n.op == "forall":
        return Node("exists", n.var, n.sort, _push_not(n.body))
    if n.op == "exists":
        return Node("forall", n.var, n.sort, _push_not(n.body))
    if n.op == "the":
        return Node("the", n.var, n.sort, _push_not(n.body))
    if n.op == "not":
        return n.body
    return Node("not", body=n)


def _adverb_over(n: Node) -> Node:
    """An adverb over a negated verb: ¬R(x, y) becomes T(x, y), the adverb's part of not-R."""
    if n.op in ("forall", "exists", "the"):
        return Node(n.op, n.var, n.sort, _adverb_over(n.body))
    if n.op == "not" and n.body.op == "atom" and n.body.rel == "R":
        return Node("atom", rel="T", args=n.body.args)
    raise ValueError("an adverb over negation needs a negated verb")


def formula_of(c: ParsedClause) -> Node:
    """The clause's formula, read off its words in surface order."""
    verb_rel = "S" if c.position in ("before_verb", "end") else "R"
    atom = Node("atom", rel=verb_rel, args=("x", "y"))
    if c.passive:  # thing NP > not > by-phrase
        inner: Node = _quant(c.subj_det, "x", "agent", atom)
        if c.negated:
            inner = Node("not", body=inner)
        return _quant(c.obj_det, "y", "thing", inner)
    vp: Node = _quant(c.obj_det, "y", "thing", atom)  # subject NP > [adverb] > not > [adverb] verb object
    if c.position == "before_negation":
        vp = _adverb_over(_push_not(vp))  # ADV (not (V Q y))
    elif c.negated:
        vp = Node("not", body=vp)
    return _quant(c.subj_det, "x", "agent", vp)


def _eval(n: Node, rels: dict[str, np.ndarray], env: dict[str, int], sizes: dict[str, int]) -> np.ndarray:
    """The models where ``n`` holds, as a packed bit array (one bit per model)."""
    if n.op == "atom":
        return rels[n.rel][env[n.args[0]], env[n.args[1]]]
    if n.op == "not":
        return np.bitwise_not(_eval(n.body, rels, env, sizes))
    if n.op == "the":
        return _eval(n.body, rels, {**env, n.var: 0}, sizes)
    vals = [_eval(n.body, rels, {**env, n.var: i}, sizes) for i in range(sizes[n.sort])]
    return np.bitwise_and.reduce(vals) if n.op == "forall" else np.bitwise_or.reduce(vals)


@lru_cache(maxsize=8)
def _models(agents: int, things: int, has_s: bool, has_t: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every model (R with S ⊆ R and T ⊆ ¬R where used): per relation an array (agents, things, bytes) whose
    bit m says whether the cell is in the relation in model m, and the mask of real models (the last byte's
    padding bits are none)."""
    states = [(0, 0, 0), (1, 0, 0)] + ([(1, 1, 0)] if has_s else []) + ([(0, 0, 1)] if has_t else [])
    table = np.array(states, dtype=bool)
    k, cells = len(states), agents * things
    total = k ** cells
    rels = {}
    for r, rel in enumerate("RST"):
        planes = []
        for c in range(cells):  # model m has cell c in state (m // k**c) % k
            column = np.tile(np.repeat(table[:, r], k ** c), k ** (cells - c - 1))
            planes.append(np.packbits(column, bitorder="little"))
        rels[rel] = np.stack(planes).reshape(agents, things, -1)
    valid = np.packbits(np.ones(total, dtype=bool), bitorder="little")
    return rels, valid


def brute_force_realised(formulas: Sequence[Node], agents: int, things: int) -> set[tuple[bool, ...]]:
    """The truth-value vectors of formulas over one triple that some model of the domain realises."""
    rels_used = set()

    def collect(n: Node) -> None:
        if n.op == "atom":
            rels_used.add(n.rel)
        elif n.body is not None:
            collect(n.body)

    for f in formulas:
        collect(f)
    rels, valid = _models(agents, things, "S" in rels_used, "T" in rels_used)
    sizes = {"agent": agents, "thing": things}
    truth = [_eval(f, rels, {}, sizes) for f in formulas]
    out = set()
    for vec in itertools.product((False, True), repeat=len(formulas)):
        m = valid
        for t, v in zip(truth, vec):
            m = m & (t if v else np.bitwise_not(t))
        if m.any():
            out.add(vec)
    return out


_CONN = {"none": lambda v: v[0], "and": lambda v: v[0] and v[1], "or": lambda v: v[0] or v[1],
         "if": lambda v: (not v[0]) or v[1]}


def brute_force_label(premise: ParsedSentence, hypothesis: ParsedSentence, agents: int = 4, things: int = 3,
                      cache: dict | None = None, the: str = "unique") -> str:
    """The label by evaluating the parses' own formulas on every model over ``agents`` × ``things`` (one
    individual for a noun that takes *the* in the pair, under ``the="unique"``). ``cache`` (a dict) keeps the
    realised sets of formula tuples between calls."""
    cache = {} if cache is None else cache
    leaves = list(premise.clauses) + list(hypothesis.clauses)
    unique = {("agent", c.agent) for c in leaves if c.subj_det == "the"} | \
             {("thing", c.thing) for c in leaves if c.obj_det == "the"} if the == "unique" else set()
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, c in enumerate(leaves):
        groups.setdefault((c.agent, c.verb, c.thing), []).append(i)
    parts = []
    for (agent, _, thing), idxs in groups.items():
        if len({leaves[i].adverb for i in idxs if leaves[i].adverb}) > 1:
            raise ValueError("one adverb per triple")
        fs = tuple(formula_of(leaves[i]) for i in idxs)
        size = (1 if ("agent", agent) in unique else agents, 1 if ("thing", thing) in unique else things)
        key = (fs, *size)
        if key not in cache:
            cache[key] = brute_force_realised(fs, *size)
        parts.append((idxs, cache[key]))
    n_p = len(premise.clauses)
    seen = set()
    for combo in itertools.product(*(vecs for _, vecs in parts)):
        val = [False] * len(leaves)
        for (idxs, _), vec in zip(parts, combo):
            for i, b in zip(idxs, vec):
                val[i] = b
        seen.add((_CONN[premise.connective](val[:n_p]), _CONN[hypothesis.connective](val[n_p:])))
    if not any(p for p, _ in seen):
        raise ValueError("the premise has no model")
    if (True, False) not in seen:
        return ENTAILMENT
    return CONTRADICTION if (True, True) not in seen else NEUTRAL


def checker_label(premise: str, hypothesis: str, vocab: Vocabulary | None = None, agents: int = logic.AGENTS,
                  things: int = logic.THINGS, the: str = "unique") -> str:
    """The model checker's label of two sentences in words."""
    return logic.label(parse_sentence(premise, vocab).sentence(), parse_sentence(hypothesis, vocab).sentence(),
                       agents, things, the)


# -- kinship: definitions of the words and graph search -----------------------------------------

_MALE = {"father", "son", "husband", "brother", "uncle", "nephew"}
_FEMALE = {"mother", "daughter", "wife", "sister", "aunt", "niece"}
_CORE = {"father": ["parent"], "mother": ["parent"], "parent": ["parent"], "son": ["child"], "daughter": ["child"],
         "child": ["child"], "husband": ["spouse"], "wife": ["spouse"], "spouse": ["spouse"], "brother": ["sibling"],
         "sister": ["sibling"], "sibling": ["sibling"]}


def definition(word: str) -> tuple[str | None, list[list[str]]]:
    """(gender of the person the word names or None, the alternative paths of base steps from the other person),
    from the word itself: great-… and grand- add generations, -in-law goes through a spouse."""
    if word.endswith("-in-law"):
        core = word[: -len("-in-law")]
        g, paths = definition(core)
        step = paths[0][0]
        if step == "parent":
            return g, [["spouse", "parent"]]
        if step == "child":
            return g, [["child", "spouse"]]
        return g, [["spouse", "sibling"], ["sibling", "spouse"]]
    greats = 0
    while word.startswith("great-"):
        word, greats = word[len("great-"):], greats + 1
    grand = 0
    if word.startswith("grand"):
        word, grand = word[len("grand"):], 1
    gender = "male" if word in _MALE else "female" if word in _FEMALE else None
    n = greats + grand
    if word in ("uncle", "aunt"):
        return gender, [["parent"] * (n + 1) + ["sibling"]]
    if word in ("nephew", "niece"):
        return gender, [["sibling"] + ["child"] * (n + 1)]
    if word == "cousin":
        return None, [["parent", "sibling", "child"]]
    step = _CORE[word][0]
    return gender, [[step] * (n + 1)]


def _offset(path: list[str]) -> int:
    return path.count("parent") - path.count("child")


def _neighbours(fam: kinship.Family, p: int, step: str) -> list[int]:
    if step == "parent":
        return list(fam.parents[p])
    if step == "child":
        return list(fam.children[p])
    if step == "spouse":
        return [] if fam.spouse[p] is None else [fam.spouse[p]]
    if not fam.parents[p]:
        return []
    return [c for c in fam.children[fam.parents[p][0]] if c != p and set(fam.parents[c]) == set(fam.parents[p])]


def holds(fam: kinship.Family, x: int, word: str, y: int) -> bool:
    """Is x y's ``word`` in the family (search along the word's paths from y)?"""
    gender, paths = definition(word)
    if gender is not None and fam.gender[x] != gender:
        return False
    for path in paths:
        frontier = {y}
        for step in path:
            frontier = {q for p in frontier for q in _neighbours(fam, p, step)}
        if x in frontier and x != y:
            return True
    return False


def _fact_offset(facts: Sequence[kinship.Fact], holder: int, of: int) -> int | None:
    """The generation difference holder − of that the facts fix, summed along the path of facts."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for f in facts:
        d = _offset(definition(f.word)[1][0])
        adj.setdefault(f.of, []).append((f.holder, d))
        adj.setdefault(f.holder, []).append((f.of, -d))
    dist = {of: 0}
    queue = [of]
    while queue:
        u = queue.pop(0)
        for v, d in adj.get(u, []):
            if v not in dist:
                dist[v] = dist[u] + d
                queue.append(v)
    return dist.get(holder)


def check_kinship(ex: kinship.Example) -> list[str]:
    """What is wrong with an example, by graph search over its family (empty: nothing)."""
    st, hyp, lab = ex.story, ex.hypothesis, ex.row["label"]
    fam, people = st.family, st.people
    problems = [f"fact {f} does not hold" for f in st.facts if not holds(fam, people[f.holder], f.word, people[f.of])]
    x, y = people[hyp.holder], people[hyp.of]
    truth = holds(fam, x, hyp.word, y)
    stated = {f.holder: definition(f.word)[0] for f in st.facts if definition(f.word)[0] is not None}
    h_gender, h_paths = definition(hyp.word)
    if lab == ENTAILMENT and not truth:
        problems.append("entailed hypothesis false in the family")
    elif lab == CONTRADICTION:
        if truth:
            problems.append("contradicted hypothesis true in the family")
        gender_clash = h_gender is not None and stated.get(hyp.holder) not in (None, h_gender)
        offset = _fact_offset(st.facts, hyp.holder, hyp.of)
        generation_clash = offset is not None and offset != _offset(h_paths[0])
        if not (gender_clash or generation_clash):
            problems.append("the facts fix neither another gender nor another generation")
    elif lab == NEUTRAL and st.alt_family is not None:  # a person outside the chain: two families disagree
        alt, alt_people = st.alt_family, st.alt_people
        if len(set(alt_people)) != len(alt_people):
            problems.append("two names are one person in the second family")
        if not all(holds(alt, alt_people[f.holder], f.word, alt_people[f.of]) for f in st.facts):
            problems.append("a fact fails in the second family")
        if holds(alt, alt_people[hyp.holder], hyp.word, alt_people[hyp.of]) == truth:
            problems.append("the hypothesis has the same truth in both families")
        if h_gender is not None and hyp.holder not in stated and hyp.holder in kinship.implied_genders(
                st.facts, {f: g for f, g in stated.items() if g is not None}):
            problems.append("a reader would infer the holder's gender from a spouse or co-parent")
    elif lab == NEUTRAL:
        if hyp.holder in stated:
            problems.append("a fact states the gender of the neutral hypothesis's person")
        other = fam.copy()
        other.gender[x] = kinship.OTHER[other.gender[x]]
        if not all(holds(other, people[f.holder], f.word, people[f.of]) for f in st.facts):
            problems.append("a fact fails once the person's gender is flipped")
        if holds(other, x, hyp.word, y) == truth:
            problems.append("flipping the person's gender does not change the hypothesis")
    return problems


_FACT = (re.compile(r"(\w+) is (\w+)'s ([\w/-]+)"), re.compile(r"(\w+)'s ([\w/-]+) is (\w+)"))


def _parse_fact(text: str) -> tuple[str, str, str]:
    """(holder, word, of) of "X is Y's W" or "Y's W is X"."""
    m = _FACT[0].fullmatch(text)
    if m:
        return m.group(1), m.group(3), m.group(2)
    m = _FACT[1].fullmatch(text)
    if m:
        return m.group(3), m.group(2), m.group(1)
    raise ParseError(f"not a kinship fact: {text!r}")


def kinship_label_from_text(premise: str, hypothesis: str) -> str | None:
    """The label of a story and a hypothesis in words (the composition table, :func:`kinship.label_of`)."""
    rel = kinship.load_relations()
    people: dict[str, int] = {}
    facts = []
    for sent in re.findall(r"[^.]+\.", premise):
        h, word, o = _parse_fact(sent.strip()[:-1])
        hi, oi = people.setdefault(h, len(people)), people.setdefault(o, len(people))
        facts.append(kinship.Fact(hi, oi, rel.words[word][0], word))
    h, word, o = _parse_fact(hypothesis.strip().rstrip("."))
    if h not in people or o not in people:
        return None
    return kinship.label_of(rel, facts, people[h], word, people[o])
