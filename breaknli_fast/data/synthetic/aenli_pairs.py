"""Clause shapes of the logic corpus and its pair-level balance: the premises whose surface features are shared by
the k-th pair of every label.

A clause *shape* is its determiners, negation, voice and adverb position (:class:`logic.Clause`); its
probability under the configured rates is :func:`clause_distribution`. With ``pair_balance`` the three pairs
of a rank share the hypothesis skeleton and the words, and :func:`choose` picks their premises so that the
surface features :func:`~.shortcut.pair_features` computes — counts of negations, quantifiers and words per
side, word types shared, only in the hypothesis, only in the premise — are the same for the three: every
premise the rates can draw on the skeleton is weighed (clause shapes grouped by what they make of the label and
of those features), a feature value that all three labels reach is drawn by its weight, and per label a
premise with that value by its weight. So no such feature, alone or with the others, tells the label.

A clause's features come from the clause put into words (:func:`~.aenli_text.clause_text`) with placeholder
words that keep what matters: whether a noun takes *an*, which of the verb's forms coincide, the adverb.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np

import breaknli_fast.data.synthetic.logic as logic
from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.synthetic.aenli_text import Verb, clause_text
from breaknli_fast.data.synthetic.logic import DETERMINERS, Clause
from breaknli_fast.data.synthetic.shortcut import side_counts, tokens

FUNCTION = ("every", "a", "an", "the", "did", "not", "was", "by")  # the function words a clause may hold
_BIT = {w: 1 << i for i, w in enumerate(FUNCTION)}
_CLAUSES: dict[tuple, Clause] = {}  # one Clause object per shape (draws compare them with `is`)
FORMULAS: dict[Clause, logic.Formula] = {}
Names = tuple[str, str, tuple[str, str, str]]  # placeholder agent, thing, verb forms (base, past, participle)


def shape(key: tuple) -> Clause:
    c = _CLAUSES.get(key)
    if c is None:
        c = _CLAUSES[key] = Clause(*key)
        FORMULAS[c] = c.formula()
    return c


@lru_cache(maxsize=None)
def clause_distribution(rates: tuple[float, float, float], over_negation: bool) -> tuple[tuple[Clause, float], ...]:
    """Every clause shape a clause draw can give with these (negation, passive, adverb) rates, and its
    probability (the draw of ``aenli._clause``, weighed instead of sampled): determiners uniform, negation and
    voice by their rates, the adverb by its rate at a position uniform among the valid ones (before *did not*
    too in a negated active clause whose adverb allows it)."""
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
                            c = shape((sd, od, neg, pas, pos))
                            out[c] = out.get(c, 0.0) + base * pw
    return tuple(out.items())


def names(agent: str, thing: str, verb: Verb, tag: str = "") -> Names:
    """Placeholders for a triple's words: a noun that takes *an* starts with a vowel, forms that coincide
    coincide; ``tag`` tells apart the words of two triples."""
    def noun(word: str, kind: str) -> str:
        return ("o" if word[0] in "aeiou" else "x") + kind + tag

    forms = (verb.base, verb.past, verb.participle)
    return noun(agent, "agent"), noun(thing, "thing"), tuple(f"v{tag}{forms.index(f)}" for f in forms)  # type: ignore[return-value]


@lru_cache(maxsize=None)
def surface(c: Clause, n: Names, adverb: str) -> tuple[tuple[int, ...], frozenset[str], int]:
    """A clause's side counts (as :func:`~.shortcut.side_counts`), its other words and its function words
    (bits of :data:`FUNCTION`)."""
    toks = tokens(clause_text(c, n[0], Verb(*n[2]), n[1], adverb))
    fmask = 0
    for t in toks:
        fmask |= _BIT.get(t, 0)
    return tuple(side_counts(toks)), frozenset(t for t in toks if t not in _BIT), fmask


_FIELDS = (0, 2, 3, 4, 6)  # the side counts that vary: negations, every, a/an, the, words (not quantifiers: 2 per clause)


def _additive(counts: Sequence[int], content: int, shared: int) -> int:
    """The additive part of a clause's features as one integer, 6 bits a field, so that the sum of two clauses'
    integers is the integer of their sums."""
    key = 0
    for j in _FIELDS:
        key = key * 64 + counts[j]
    return (key * 64 + content) * 64 + shared


SAME = 16  # the mask index of a premise clause that repeats its hypothesis clause word for word


def replaced(n: Names, slot: int) -> Names:
    """The names of a triple with the word of ``slot`` (agent, verb, thing) replaced by another of its kind."""
    if slot == 1:
        return n[0], n[1], tuple(f + "r" for f in n[2])  # type: ignore[return-value]
    return (n[0] + "r", n[1], n[2]) if slot == 0 else (n[0], n[1] + "r", n[2])


@lru_cache(maxsize=None)
def _surfaces(rates: tuple[float, float, float], over: bool, names: Names, adverb: str) -> dict[str, Any]:
    """:func:`surface` of every shape of :func:`clause_distribution` over the triple ``names``: the additive
    part of its key without the shared words, its function words, its other words (a set)."""
    feats = [surface(c, names, adverb) for c, _ in clause_distribution(rates, over)]
    return {"base": np.array([_additive(f[0], len(f[1]), 0) for f in feats], dtype=np.int64),
            "fmask": np.array([f[2] for f in feats], dtype=np.int64), "content": [f[1] for f in feats],
            "w": np.array([w for _, w in clause_distribution(rates, over)])}


@lru_cache(maxsize=None)
def _masks(rates: tuple[float, float, float], over: bool, h: Clause, same_triple: bool, the: str) -> np.ndarray:
    """The mask of every shape of :func:`clause_distribution` with the hypothesis clause ``h`` (:data:`SAME`
    for ``h`` itself over the same words)."""
    return np.array([SAME if same_triple and c is h else logic.pair_mask(FORMULAS[c], FORMULAS[h], same_triple, the)
                     for c, _ in clause_distribution(rates, over)], dtype=np.int64)


@lru_cache(maxsize=256)
def _options(rates: tuple[float, float, float], over: bool, h: Clause | None, p_names: Names, slot: int | None,
             adverb: str, the: str) -> dict[str, Any]:
    """The premise clause shapes of one clause pair — the hypothesis clause ``h`` over the same words, or with
    the word of ``slot`` replaced — or of the clause about other words (``h`` None), grouped by their features
    (rows: additive key, function words) and, within a row, by their mask with the hypothesis clause (17
    columns: the 16 masks, and :data:`SAME` for the clause that repeats it): the weight matrix, and the shapes
    of each cell (``cell``: per shape its row * 17 + column; ``shapes``: shape indices sorted by cell, and
    ``bounds``: each cell's slice of them)."""
    sf = _surfaces(rates, over, p_names, adverb)
    if h is None:
        key, masks = sf["base"], np.zeros(sf["base"].size, dtype=np.int64)
    else:
        h_names = p_names if slot is None else replaced(p_names, 0 if slot == 2 else slot)  # agent, thing: alike
        h_content = surface(h, h_names, adverb)[1]
        key = sf["base"] + np.array([len(c & h_content) for c in sf["content"]], dtype=np.int64)
        masks = _masks(rates, over, h, slot is None, the)
    rows, row_of = np.unique(np.stack([key, sf["fmask"]], axis=1), axis=0, return_inverse=True)
    row_of = row_of.ravel()
    matrix = np.zeros((rows.shape[0], 17))
    np.add.at(matrix, (row_of, masks), sf["w"])
    cell = row_of * 17 + masks
    order = np.argsort(cell, kind="stable")
    return {"key": rows[:, 0].copy(), "fmask": rows[:, 1].copy(), "matrix": matrix, "cell": cell,
            "shapes": order, "bounds": np.searchsorted(cell[order], np.arange(rows.shape[0] * 17 + 1)),
            "w": sf["w"]}


def _pick(cum: np.ndarray, u: float) -> int:
    """An index drawn by cumulative weights ``cum`` for a uniform ``u``."""
    return min(int(np.searchsorted(cum, u * cum[-1], side="right")), cum.size - 1)


@lru_cache(maxsize=None)
def _tables(p_conn: str, h_conn: str, n: int, same_mask: tuple[int, ...]) -> np.ndarray:
    """Per label, the 17 × 17 indicator of (first clause's mask index, second's) giving it: the label of the
    premise's two clauses against the hypothesis (the second clause about other words for a simple one; a
    clause that repeats its hypothesis clause counts with its mask, never both, never with a distractor)."""
    out = np.zeros((3, 17, 17))
    combine = logic.COMBINE2[p_conn, h_conn] if n == 2 else None
    for i in range(17):
        for j in range(17 if n == 2 else 1):
            if (n == 1 and i == SAME) or (i == SAME and j == SAME):
                continue
            m1 = same_mask[0] if i == SAME else i
            if n == 1:
                lab = logic.MASK_LABEL[m1]
            else:
                m2 = same_mask[1] if j == SAME else j
                lab = logic.MASK_LABEL[combine[m1][m2]]  # type: ignore[index]
            if lab is not None:
                out[LABELS.index(lab), i, j] = 1.0
    return out


@lru_cache(maxsize=1024)
def _side(rates: tuple[float, float, float], over: bool, h: Clause | None, names: Names, others: tuple[Names, ...],
          slots: tuple[int, ...], adverb: str, the: str) -> dict[str, Any]:
    """One premise clause's options under every variant of its clause pair — the hypothesis clause over the
    same words (variant 0), or with the word of a slot of ``slots`` replaced (``others``: the hypothesis
    triple's names then) — as one table
    of rows (:func:`_options`'s, stacked), with each row's variant, the hypothesis's function words, and the
    rows sorted by additive key for look-ups. ``h`` None: the premise clause about other words."""
    if h is None:
        opts, hfs = [_options(rates, over, None, names, None, adverb, the)], [0]
    else:
        opts = [_options(rates, over, h, names, None, adverb, the)] + \
            [_options(rates, over, h, names, s, adverb, the) for s in slots]
        hfs = [surface(h, names, adverb)[2]] + [surface(h, o, adverb)[2] for o in others]
    var = np.concatenate([np.full(o["key"].size, v) for v, o in enumerate(opts)])
    key = np.concatenate([o["key"] for o in opts])
    matrix = np.concatenate([o["matrix"] for o in opts])
    row_w = matrix.sum(axis=1)
    starts = np.cumsum([0] + [o["key"].size for o in opts])
    return {"opts": opts, "var": var, "start": starts, "key": key, "fmask": np.concatenate([o["fmask"] for o in opts]),
            "hf": np.array(hfs)[var], "matrix": matrix, "order": np.argsort(key, kind="stable"),
            "sorted": np.sort(key, kind="stable"),
            "row_cum": np.cumsum(row_w), "var_mass": np.array([row_w[starts[v]:starts[v + 1]].sum()
                                                              for v in range(len(opts))]),
            }


def choose(rng: Any, rates: tuple[float, float, float], the: str, p_conn: str, h_conn: str,
           parts: Sequence[dict[str, Any]], distractor: dict[str, Any] | None, other_vocab: float,
           slots: Sequence[int], tries: int = 4) -> dict[str, tuple[tuple[int, int] | None, list[Clause]]] | None:
    """The premises of the three pairs of one rank. ``parts``: per hypothesis clause its shape ``h``, ``over``
    (its adverb may stand before *did not*), ``adverb`` (placeholder), ``names`` of the premise triple and
    ``other`` (slot -> names of the hypothesis triple with that word replaced); ``distractor``: ``over``,
    ``adverb`` and ``names`` of the premise clause about other words (a simple hypothesis), else None. With
    probability ``other_vocab`` one hypothesis clause takes another word (part and slot of ``slots``
    uniform). The premise has two clauses: the two aligned ones, or the aligned one and the distractor.

    A premise is drawn from all of them by its weight (the rates' clause draws, the hypothesis's other word),
    kept where it has a label; its feature value is kept where every label has premises with it (found by
    look-up), and then per label one of those is drawn by its weight. So a value is drawn by its total weight
    among the values all three labels reach. At most ``tries`` draws; returns per label ((part, slot) of the
    other word or None, the premise clause shapes: the parts', then the distractor's), or None."""
    n = len(parts)
    if n + (distractor is not None) != 2:
        raise ValueError("a premise of two clauses")
    same_mask = tuple(logic.pair_mask(FORMULAS[p["h"]], FORMULAS[p["h"]], True, the) for p in parts)
    tables = _tables(p_conn, h_conn, n, same_mask)
    sides = [_side(rates, p["over"], p["h"], p["names"], tuple(p["other"][s] for s in slots), tuple(slots),
                   p["adverb"], the) for p in parts]
    if distractor is not None:
        sides.append(_side(rates, distractor["over"], None, distractor["names"], (), (), distractor["adverb"], the))
    a, b = sides
    # the weight of each pair of variants: no other word, or one in one clause pair
    va, vb = len(a["opts"]), len(b["opts"])
    factor = np.zeros((va, vb))
    factor[0, 0] = 1 - other_vocab
    share = other_vocab / (n * len(slots)) if slots else 0.0
    factor[1:, 0] = share
    factor[0, 1:] = share
    masses = factor * np.outer(a["var_mass"], b["var_mass"])
    mass_cum = np.cumsum(masses.ravel())
    col_a = np.stack([a["matrix"][a["start"][v]:a["start"][v + 1]].sum(axis=0) for v in range(va)])
    col_b = np.stack([b["matrix"][b["start"][v]:b["start"][v + 1]].sum(axis=0) for v in range(vb)])
    label_mass = np.einsum("ij,ik,lkm,jm->l", factor, col_a, tables, col_b)
    if mass_cum[-1] <= 0 or not (label_mass > 0).all():
        return None
    rare = int(label_mass.argmin())  # values are drawn from this label's premises: it binds most
    tried: set[tuple[int, int, int]] = set()

    def rows(side: dict[str, Any], var: np.ndarray, u: np.ndarray) -> np.ndarray:  # a row of each variant
        before = np.concatenate([[0.0], side["row_cum"]])[side["start"][var]]
        r = np.searchsorted(side["row_cum"], before + u * side["var_mass"][var], side="right")
        return np.minimum(np.maximum(r, side["start"][var]), side["start"][var + 1] - 1)

    def masks(side: dict[str, Any], r: np.ndarray, u: np.ndarray) -> np.ndarray:  # a mask of each row
        cum = np.cumsum(side["matrix"][r], axis=1)
        return np.minimum((cum <= (u * cum[:, -1])[:, None]).sum(axis=1), 16)

    uniform = np.random.default_rng(int(rng.random() * 2**53)).random  # seeded by the caller's draws
    for _ in range(tries):
        u = uniform((5, 32))
        ia, ib = np.divmod(np.minimum(np.searchsorted(mass_cum, u[0] * mass_cum[-1], side="right"),
                                      mass_cum.size - 1), vb)
        ra, rb = rows(a, ia, u[1]), rows(b, ib, u[2])
        ma, mb = masks(a, ra, u[3]), masks(b, rb, u[4])
        hits = np.flatnonzero(tables[rare, ma, mb] > 0)
        for h in hits:
            k_add, k_f = int(a["key"][ra[h]] + b["key"][rb[h]]), int(a["fmask"][ra[h]] | b["fmask"][rb[h]])
            k_h = int(a["hf"][ra[h]] | b["hf"][rb[h]])
            if (k_add, k_f, k_h) in tried:
                continue
            tried.add((k_add, k_f, k_h))
            found = _cells(a, b, factor, tables, k_add, k_f, k_h)
            if found is not None:
                return _draw_premises(rng, rates, parts, distractor, slots, sides, tables, *found)
    return None


def _cells(a: dict[str, Any], b: dict[str, Any], factor: np.ndarray, tables: np.ndarray, k_add: int, k_f: int,
           k_h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every pair of rows with the feature value (additive key, function words of the premise, of the
    hypothesis) and its weight per label; None unless every label has some."""
    need = k_add - a["key"]
    lo = np.searchsorted(b["sorted"], need, side="left")
    count = np.searchsorted(b["sorted"], need, side="right") - lo
    rows_a = np.repeat(np.arange(lo.size), count)
    rows_b = b["order"][np.repeat(lo, count) + np.arange(rows_a.size) - np.repeat(np.cumsum(count) - count, count)]
    ok = ((a["fmask"][rows_a] | b["fmask"][rows_b]) == k_f) & ((a["hf"][rows_a] | b["hf"][rows_b]) == k_h)
    rows_a, rows_b = rows_a[ok], rows_b[ok]
    f = factor[a["var"][rows_a], b["var"][rows_b]]
    w = f[:, None] * np.einsum("ck,lkm,cm->cl", a["matrix"][rows_a], tables, b["matrix"][rows_b])
    return (rows_a, rows_b, w) if (w.sum(axis=0) > 0).all() else None


def _draw_premises(rng: Any, rates: tuple[float, float, float], parts: Sequence[dict[str, Any]],
                   distractor: dict[str, Any] | None, slots: Sequence[int], sides: list[dict[str, Any]],
                   tables: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray, w: np.ndarray
                   ) -> dict[str, tuple[tuple[int, int] | None, list[Clause]]]:
    """Per label a premise among the rows with the chosen value, by its weight: the pair of rows, the masks of
    the two clauses, and a clause shape of each (row, mask) cell."""
    n = len(parts)
    a, b = sides
    out = {}
    for li, label in enumerate(LABELS):
        c = _pick(np.cumsum(w[:, li]), rng.random())
        ra, rb = int(rows_a[c]), int(rows_b[c])
        pair = np.outer(a["matrix"][ra], b["matrix"][rb]) * tables[li]  # the masks of the two clauses
        masks = divmod(_pick(np.cumsum(pair.ravel()), rng.random()), 17)
        shapes, other = [], None
        for k, (side, r, m) in enumerate(zip(sides, (ra, rb), masks)):
            v = int(side["var"][r])
            if v:
                other = (k, slots[v - 1])
            o = side["opts"][v]
            c = (r - int(side["start"][v])) * 17 + m
            idx = o["shapes"][o["bounds"][c]:o["bounds"][c + 1]]
            over = parts[k]["over"] if k < n else distractor["over"]  # type: ignore[index]
            shapes.append(clause_distribution(rates, over)[int(idx[_pick(np.cumsum(o["w"][idx]), rng.random())])][0])
        out[label] = (other, shapes)
    return out
