"""The permuted inputs: tokens, the exact number of distinct derangements of a sentence, q distinct derangements
drawn without replacement from a seeded generator, and BLEU-2 of a permutation against its original."""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from breaknli_fast.engines.base import derive_seed

ENUMERATE_MAX = 2_000  # sentences with at most max(this, 2q) derangements draw from the full list of them
MIN_ACCEPT = 1e-3  # below this share of derangements among arrangements, draws go position by position
TOKEN_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)
BLEU_BUCKETS = tuple(round(0.1 * i, 1) for i in range(11))  # lower edges 0.0 … 1.0 (the last holds 1.0 only)
# figures of the study (RoBERTa-large), printed next to the user's
def tokenize(text: str) -> list[str]:
    """Whitespace and punctuation split: words and each punctuation character are tokens."""
    return TOKEN_RE.findall(text)


def _movable(tok: str) -> bool:
    return bool(re.match(r"\w", tok, re.UNICODE))


def _movable_words(tokens: Sequence[str]) -> tuple[list[int], list[str]]:
    pos = [i for i, t in enumerate(tokens) if _movable(t)]
    return pos, [tokens[i] for i in pos]


def _derangement_poly(kinds: Sequence[tuple[int, int]]) -> list[int]:
    """Inclusion-exclusion over positions that keep their word: per word type with p positions and l copies
    left, Σ_k (-1)^k C(p, k) l!/(l-k)! z^k, multiplied over the types (exact integers)."""
    poly = [1]
    for p_t, l_t in kinds:
        term = [(-1) ** k * math.comb(p_t, k) * math.perm(l_t, k) for k in range(min(p_t, l_t) + 1)]
        out = [0] * (len(poly) + len(term) - 1)
        for i, a in enumerate(poly):
            if a:
                for j, b in enumerate(term):
                    out[i + j] += a * b
        poly = out
    return poly


def _count(kinds: Sequence[tuple[int, int]]) -> int:
    """Distinct arrangements of the remaining copies (l_t of word t) over the remaining positions (p_t whose
    original word is t; Σ p_t = Σ l_t) that put no word t at a position of word t."""
    m = sum(l_t for _, l_t in kinds)
    poly = _derangement_poly(kinds)
    total = sum(c * math.factorial(m - k) for k, c in enumerate(poly) if k <= m)
    denom = 1
    for _, l_t in kinds:
        denom *= math.factorial(l_t)
    return total // denom


def count_derangements(words: Sequence[str]) -> int:
    """The number of distinct sequences of ``words`` (a multiset: equal words are interchangeable) in which no
    position holds the word it holds in ``words``. Exact (inclusion-exclusion); 4 distinct words: 9, 5: 44,
    6: 265; ``a a b b``: 1 (``b b a a``); all words equal: 0."""
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return _count([(n, n) for n in counts.values()])


def _enumerate(words: Sequence[str]) -> list[tuple[str, ...]]:
    """Every distinct derangement of ``words``, in lexicographic order (only for sentences with few of them:
    a branch is cut as soon as the remaining copies of one word outnumber the positions left that may take it,
    so no branch dies late)."""
    types = sorted(set(words))
    left = {t: 0 for t in types}
    for w in words:
        left[w] += 1
    n = len(words)
    pos_left = dict(left)  # positions not yet filled, by their original word
    out: list[tuple[str, ...]] = []
    cur: list[str] = []

    def feasible(remaining: int) -> bool:
        return all(left[t] <= remaining - pos_left[t] for t in types)

    def rec(i: int) -> None:
        if i == n:
            out.append(tuple(cur))
            return
        orig = words[i]
        pos_left[orig] -= 1
        for t in types:
            if t != orig and left[t]:
                left[t] -= 1
                if feasible(n - i - 1):
                    cur.append(t)
                    rec(i + 1)
                    cur.pop()
                left[t] += 1
        pos_left[orig] += 1

    rec(0)
    return out


def _sequential(words: Sequence[str], rng: np.random.Generator) -> list[str]:
    """One derangement drawn uniformly, position by position, each word chosen with the exact number of
    derangements that complete it (for sentences where drawing whole arrangements rarely gives one)."""
    import random as _random

    r = _random.Random(int(rng.integers(1 << 62)))
    types = sorted(set(words))
    left = {t: 0 for t in types}
    for w in words:
        left[w] += 1
    pos_left = dict(left)
    out = []
    for orig in words:
        pos_left[orig] -= 1
        weights = []
        for t in types:
            if t == orig or not left[t]:
                weights.append(0)
                continue
            left[t] -= 1
            weights.append(_count([(pos_left[u], left[u]) for u in types if pos_left[u] or left[u]]))
            left[t] += 1
        pick = r.randrange(sum(weights))
        for t, wgt in zip(types, weights):
            if pick < wgt:
                break
            pick -= wgt
        out.append(t)
        left[t] -= 1
    return out


def permute(tokens: Sequence[str], rng: np.random.Generator, avoid: set[str] | frozenset[str] = frozenset(),
            max_tries: int = 1_000_000) -> list[str] | None:
    """One derangement of ``tokens``: punctuation in place, every other position given a different word, drawn
    uniformly (whole arrangements from ``rng`` until no position keeps its word) and re-drawn while its text
    is in ``avoid``. None when the sentence has fewer than 2 movable tokens or no derangement outside
    ``avoid`` turns up in ``max_tries`` arrangements (:func:`permutations` counts them first)."""
    pos, words = _movable_words(tokens)
    if len(pos) < 2:
        return None
    for _ in range(max_tries):
        order = rng.permutation(len(words))
        if all(words[o] != words[k] for k, o in enumerate(order)):
            out = list(tokens)
            for k, o in enumerate(order):
                out[pos[k]] = words[o]
            if " ".join(out) not in avoid:
                return out
    return None


def permutations(text: str, q: int, seed: int) -> tuple[list[str] | None, str | None]:
    """q distinct derangements of a sentence (permutation j drawn from the generator of (seed, j), re-drawn
    until new), or (None, reason): ``too_short`` (fewer than 2 movable tokens), ``fewer_than_q`` (fewer than
    q distinct derangements exist; :func:`count_derangements`)."""
    tokens = tokenize(text)
    pos, words = _movable_words(tokens)
    if len(pos) < 2:
        return None, "too_short"
    total = count_derangements(words)
    if total < q:
        return None, "fewer_than_q"

    def text_of(seq: Sequence[str]) -> str:
        out = list(tokens)
        for k, w in zip(pos, seq):
            out[k] = w
        return " ".join(out)

    out: list[str] = []
    seen: set[str] = set()
    if total <= max(ENUMERATE_MAX, 2 * q):  # draw without replacement from the full list
        pool = _enumerate(words)
        for j in range(q):
            rng = np.random.default_rng(derive_seed(seed, "permutation", j))
            out.append(text_of(pool.pop(int(rng.integers(len(pool))))))
        return out, None
    arrangements = math.factorial(len(words))
    for c in {w: words.count(w) for w in words}.values():
        arrangements //= math.factorial(c)
    accept = total / arrangements  # share of the distinct arrangements that are derangements
    for j in range(q):
        rng = np.random.default_rng(derive_seed(seed, "permutation", j))
        while True:
            if accept >= MIN_ACCEPT:
                perm = permute(tokens, rng, seen)
                cand = " ".join(perm) if perm is not None else None
            else:
                cand = text_of(_sequential(words, rng))
            if cand is not None and cand not in seen:
                break
        seen.add(cand)
        out.append(cand)
    return out, None


def bleu2(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """BLEU-2 of a permutation against its original (same length, same words: brevity penalty and unigram
    precision are 1), the geometric mean of unigram and clipped bigram precision."""
    if len(candidate) < 2:
        return 1.0
    ref: dict[tuple[str, str], int] = {}
    for bg in zip(reference, reference[1:]):
        ref[bg] = ref.get(bg, 0) + 1
    match = 0
    for bg in zip(candidate, candidate[1:]):
        if ref.get(bg, 0) > 0:
            ref[bg] -= 1
            match += 1
    uni_ref: dict[str, int] = {}
    for t in reference:
        uni_ref[t] = uni_ref.get(t, 0) + 1
    uni = sum(1 for t in candidate if uni_ref.get(t, 0) > 0 and not uni_ref.__setitem__(t, uni_ref[t] - 1))
    p1, p2 = uni / len(candidate), match / (len(candidate) - 1)
    return math.sqrt(p1 * p2)


def _bucket(b: float) -> int:
    return min(int(b * 10 + 1e-9), 10)


def entropy(probs: np.ndarray) -> np.ndarray:
    p = np.clip(probs, 1e-12, 1.0)
    return -(p * np.log(p)).sum(axis=1)
