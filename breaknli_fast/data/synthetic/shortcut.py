"""A check for annotation-artifact shortcuts in a generated corpus: a hypothesis-only baseline.

A bag-of-words logistic regression sees the hypothesis alone (never the premise), is trained on one half of
the pairs and scored on the other half. If it beats the majority class by more than a few points, some surface
cue of the hypothesis predicts the label and a model can score without reasoning (Gururangan et al. 2018,
Poliak et al. 2018). ``breaknli-fast generate`` prints the result for each corpus it writes, and
tests/test_synthetic.py requires both generators to stay within :data:`LIMIT_PP` of the majority class.

Every baseline here splits by the rows' ``group`` (:func:`split_halves`): the generators' pairs of one group share
their surface, one per label, so a split that put some of a group on each side would let a test pair's label be
guessed by elimination (:func:`elimination` with ``by_group=False`` measures that leak).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

LIMIT_PP = 5.0  # the baseline may beat the majority class by at most this many percentage points
MAX_ROWS = 10_000  # rows the check uses (the first ones; generated rows are independent draws)
_TOKEN = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")


class Bag:
    """Binary bag-of-words features of a list of texts, stored sparsely: the feature indices of every row (the
    lower-cased words in ``vocab``, plus a bias feature) in one array, rows in order."""

    def __init__(self, texts: Sequence[str], vocab: dict[str, int] | None = None):
        toks = [sorted(set(_TOKEN.findall(t.lower()))) for t in texts]
        if vocab is None:
            vocab = {w: i for i, w in enumerate(sorted({w for ws in toks for w in ws}))}
        self._index(toks, vocab)

    def _index(self, toks: list[list[str]], vocab: dict[str, int]) -> None:
        self.vocab, self.features, self.rows = vocab, len(vocab) + 1, len(toks)
        idx = [[vocab[w] for w in ws if w in vocab] + [len(vocab)] for ws in toks]
        self.indices = np.array([j for row in idx for j in row], dtype=np.int64)
        self.row_of = np.repeat(np.arange(len(idx)), [len(row) for row in idx])
        self.starts = np.cumsum([0] + [len(row) for row in idx[:-1]]).astype(np.int64)

    def scores(self, w: np.ndarray) -> np.ndarray:
        """x @ w, (rows, classes)."""
        return np.add.reduceat(w[self.indices], self.starts, axis=0)

    def grad(self, d: np.ndarray) -> np.ndarray:
        """x.T @ d, (features, classes)."""
        per = d[self.row_of]
        return np.stack([np.bincount(self.indices, weights=per[:, c], minlength=self.features)
                         for c in range(d.shape[1])], axis=1)


class OneHot:
    """Dense one-hot features of integer columns (one feature per value seen in training, plus a bias): the
    :class:`Bag` interface for :func:`fit_logistic`."""

    def __init__(self, x: np.ndarray, values: list[np.ndarray] | None = None):
        self.values = values if values is not None else [np.unique(col) for col in x.T]
        cols = [(x[:, j:j + 1] == v[None, :]) for j, v in enumerate(self.values)]
        self.x = np.concatenate(cols + [np.ones((x.shape[0], 1), dtype=bool)], axis=1).astype(float)
        self.rows, self.features = self.x.shape

    def scores(self, w: np.ndarray) -> np.ndarray:
        return self.x @ w

    def grad(self, d: np.ndarray) -> np.ndarray:
        return self.x.T @ d


def fit_logistic(x: Bag | OneHot, y: np.ndarray, classes: int, l2: float = 1.0, steps: int = 300,
                 lr: float = 0.1) -> np.ndarray:
    """Multinomial logistic regression: mean cross-entropy + ``l2`` / (2 n) ||W||² (the bias unpenalised),
    minimised by full-batch Adam. Returns the weights (features, classes)."""
    n, d = x.rows, x.features
    w = np.zeros((d, classes))
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    onehot = np.eye(classes)[y]
    penal = np.ones((d, 1))
    penal[-1] = 0.0
    for t in range(1, steps + 1):
        z = x.scores(w)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = x.grad(p - onehot) / n + l2 / n * penal * w
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


def split_halves(groups: Sequence[Any], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test) of a seeded random half: half of the *groups* train and the rest score, rows
    without a group (None) each a group of their own. A generated corpus's pairs of one group share their surface
    (one premise skeleton, one hypothesis per label), so a row split would let a test pair's label be guessed by
    elimination from its training twins; a group split leaves no group on both sides."""
    keys = [g if g is not None else ("row", i) for i, g in enumerate(groups)]
    uniq = list(dict.fromkeys(keys))
    order = np.random.default_rng(seed).permutation(len(uniq))
    train = {uniq[j] for j in order[: len(uniq) // 2]}
    tr = np.array([i for i, k in enumerate(keys) if k in train], dtype=np.int64)
    te = np.array([i for i, k in enumerate(keys) if k not in train], dtype=np.int64)
    return tr, te


def elimination(rows: Iterable[dict[str, Any]], seed: int = 0, max_rows: int = MAX_ROWS,
                by_group: bool = True) -> dict[str, Any]:
    """The elimination baseline: a test pair's label guessed as a label its group's training pairs lack (the one
    they lack where they have all but one; else the training half's majority among those left). With the group
    split (``by_group``) no test pair has training twins and it is the majority class; with a row split
    (``by_group=False``, what the check must not do) it shows how much a matched corpus leaks."""
    data = []
    for r in rows:
        data.append((r.get("group"), r["label"]))
        if len(data) >= max_rows:
            break
    if len(data) < 4:
        return {"rows": len(data), "accuracy": None, "within": None, "limit_pp": LIMIT_PP}
    groups = [g for g, _ in data] if by_group else [None] * len(data)
    tr, te = split_halves(groups, seed)
    labels = sorted({lab for _, lab in data})
    counts = {lab: 0 for lab in labels}
    twins: dict[Any, set[str]] = {}
    for i in tr:
        g, lab = data[i]
        counts[lab] += 1
        if g is not None:
            twins.setdefault(g, set()).add(lab)
    majority = max(labels, key=lambda lab: (counts[lab], lab))
    hits = maj_hits = 0
    for i in te:
        g, lab = data[i]
        left = [x for x in labels if x not in twins.get(g, set())] or labels
        guess = max(left, key=lambda x: (counts[x], x))
        hits += guess == lab
        maj_hits += majority == lab
    acc, maj = 100.0 * hits / len(te), 100.0 * maj_hits / len(te)
    return {"rows": len(data), "split": "by group" if by_group else "by row", "accuracy": acc, "majority": maj,
            "gap_pp": acc - maj, "within": acc - maj <= LIMIT_PP, "limit_pp": LIMIT_PP}


def hypothesis_only(rows: Iterable[dict[str, Any]], seed: int = 0, max_rows: int = MAX_ROWS,
                    field: str = "hypothesis") -> dict[str, Any]:
    """The baseline on (at most ``max_rows`` of) ``rows``: a random half of the groups (seeded, :func:`split_halves`) trains, the rest scores.
    Returns accuracy and the majority-class accuracy on the scored half (percent), their gap in points, and
    whether the gap is within :data:`LIMIT_PP`. ``field`` picks the text (``premise`` gives the premise-only
    baseline)."""
    data, groups = [], []
    for r in rows:
        data.append((r[field], r["label"]))
        groups.append(r.get("group"))
        if len(data) >= max_rows:
            break
    if len(data) < 4:
        return {"rows": len(data), "accuracy": None, "majority": None, "gap_pp": None, "within": None,
                "limit_pp": LIMIT_PP, "field": field}
    tr, te = split_halves(groups, seed)
    train, test = [data[i] for i in tr], [data[i] for i in te]
    labels = sorted({lab for _, lab in data})
    index = {lab: i for i, lab in enumerate(labels)}
    x_tr = Bag([t for t, _ in train])
    y_tr = np.array([index[lab] for _, lab in train])
    x_te = Bag([t for t, _ in test], x_tr.vocab)
    y_te = np.array([index[lab] for _, lab in test])
    w = fit_logistic(x_tr, y_tr, len(labels))
    acc = float(100 * (x_te.scores(w).argmax(axis=1) == y_te).mean())
    majority = int(np.bincount(y_tr, minlength=len(labels)).argmax())
    maj = float(100 * (y_te == majority).mean())
    gap = acc - maj
    return {"rows": len(data), "train": len(train), "test": len(test), "field": field, "accuracy": acc,
            "majority": maj, "majority_label": labels[majority], "gap_pp": gap, "within": gap <= LIMIT_PP,
            "limit_pp": LIMIT_PP}


def describe(res: dict[str, Any]) -> str:
    """One line for the console."""
    if res.get("accuracy") is None:
        return f"{res['field']}-only baseline: too few pairs ({res['rows']})"
    verdict = "within" if res["within"] else "OVER"
    return (f"{res['field']}-only baseline (bag of words + logistic regression, trained on {res['train']} of the "
            f"first {res['rows']} pairs, scored on the other {res['test']}): {res['accuracy']:.1f} % against "
            f"{res['majority']:.1f} % for the majority class ({res['gap_pp']:+.1f} pp; {verdict} the "
            f"{res['limit_pp']:g} pp limit)")


# -- pair-level baselines: surface features of the premise and the hypothesis together --------------------

PAIR_ROWS = 4000  # rows the pair-level check uses (the first ones)
NEGATIONS = frozenset({"not", "no", "never", "n't", "nobody", "nothing", "none", "neither", "nor", "nowhere"})
QUANTIFIERS = frozenset({"every", "all", "each", "some", "any", "a", "an", "the", "no", "most", "many", "few"})
_SIDE = ("negations", "quantifiers", "every", "a", "the", "possessives", "words")


def tokens(text: str) -> list[str]:
    """The lower-cased words of a text, as the baselines read them (*Sam's* and *great-grandson* are one)."""
    return _TOKEN.findall(text.lower())


def side_counts(toks: list[str]) -> list[int]:
    """Counts of one side of a pair: negation words, quantifiers, *every*, *a*/*an*, *the*, possessives, words."""
    return [sum(t in NEGATIONS for t in toks), sum(t in QUANTIFIERS for t in toks), toks.count("every"),
            toks.count("a") + toks.count("an"), toks.count("the"), sum(t.endswith("'s") for t in toks), len(toks)]


PAIR_FEATURES = tuple([f"p_{f}" for f in _SIDE] + [f"h_{f}" for f in _SIDE] + [f"diff_{f}" for f in _SIDE]
                      + ["shared_words", "h_only_words", "p_only_words", "overlap_tenths",
                         "h_possessives_in_p", "h_words_possessive_in_p"])


def pair_features(premise: str, hypothesis: str) -> list[int]:
    """The surface features of a pair, all small integers (names in :data:`PAIR_FEATURES`): per side the counts
    of negation words, quantifiers (all, and *every*, *a*/*an*, *the* each), possessives ('s) and words; their
    differences (hypothesis minus premise; the words' is the length difference); the word types shared, only in
    the hypothesis, only in the premise, the hypothesis's share in the premise (tenths); the hypothesis's
    possessive tokens that the premise also has (*Sam's* in both), and its other words that the premise has in
    possessive form (*Sam* in the hypothesis, *Sam's* in the premise)."""
    p, h = tokens(premise), tokens(hypothesis)
    cp, ch = side_counts(p), side_counts(h)
    sp, sh = set(p), set(h)
    poss_h = {t for t in sh if t.endswith("'s")}
    shared = len(sp & sh)
    return (cp + ch + [b - a for a, b in zip(cp, ch)]
            + [shared, len(sh - sp), len(sp - sh), (10 * shared) // max(1, len(sh)), len(poss_h & sp),
               sum(t + "'s" in sp for t in sh - poss_h)])


def _bins(train: np.ndarray, max_bins: int = 32) -> list[np.ndarray]:
    """Per feature the split points: its distinct training values, or quantiles where there are more."""
    out = []
    for col in train.T:
        vals = np.unique(col)
        if vals.size > max_bins:
            vals = np.unique(np.quantile(col, np.linspace(0, 1, max_bins)))
        out.append(vals)
    return out


def _binned(x: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    return np.stack([np.searchsorted(e, x[:, j], side="right") - 1 for j, e in enumerate(edges)], axis=1).clip(0)


def _fit_tree(xb: np.ndarray, g: np.ndarray, h: np.ndarray, depth: int, min_leaf: int, nbins: int,
              lam: float = 1.0) -> list[tuple[int, int, int, int, float]]:
    """One regression tree on the gradients (second order, XGBoost's gain) over binned features: nodes
    (feature, bin threshold (left: bin <= it), left, right, value), -1 for a leaf; node 0 the root."""
    nodes: list[list[Any]] = []

    def grow(idx: np.ndarray, d: int) -> int:
        me = len(nodes)
        gs, hs = g[idx].sum(), h[idx].sum()
        nodes.append([-1, 0, -1, -1, float(-gs / (hs + lam))])
        if d == depth or idx.size < 2 * min_leaf:
            return me
        parent = gs * gs / (hs + lam)
        n_f = xb.shape[1]
        flat = (xb[idx] + np.arange(n_f) * nbins).ravel()  # every feature's histogram in one bincount
        size = n_f * nbins
        gl = np.cumsum(np.bincount(flat, weights=np.repeat(g[idx], n_f), minlength=size).reshape(n_f, nbins), 1)
        hl = np.cumsum(np.bincount(flat, weights=np.repeat(h[idx], n_f), minlength=size).reshape(n_f, nbins), 1)
        cl = np.cumsum(np.bincount(flat, minlength=size).reshape(n_f, nbins), 1)
        ok = (cl >= min_leaf) & (idx.size - cl >= min_leaf)
        gain = np.where(ok, gl ** 2 / (hl + lam) + (gs - gl) ** 2 / (hs - hl + lam) - parent, -np.inf)
        j, b = (int(v) for v in np.unravel_index(int(gain.argmax()), gain.shape))
        if not gain[j, b] > 1e-9:
            return me
        left = idx[xb[idx, j] <= b]
        right = idx[xb[idx, j] > b]
        nodes[me][0], nodes[me][1] = j, b
        nodes[me][2] = grow(left, d + 1)
        nodes[me][3] = grow(right, d + 1)
        return me

    grow(np.arange(xb.shape[0]), 0)
    return [tuple(n) for n in nodes]  # type: ignore[misc]


def _tree_predict(tree: list[tuple[int, int, int, int, float]], xb: np.ndarray) -> np.ndarray:
    node = np.zeros(xb.shape[0], dtype=np.int64)
    feat = np.array([t[0] for t in tree])
    thr = np.array([t[1] for t in tree])
    left = np.array([t[2] for t in tree])
    right = np.array([t[3] for t in tree])
    value = np.array([t[4] for t in tree])
    while True:
        inner = feat[node] >= 0
        if not inner.any():
            return value[node]
        j = np.where(inner, feat[node], 0)
        go_left = xb[np.arange(xb.shape[0]), j] <= thr[node]
        node = np.where(inner, np.where(go_left, left[node], right[node]), node)


def fit_boosted(x: np.ndarray, y: np.ndarray, classes: int, rounds: int = 60, depth: int = 3,
                rate: float = 0.2, min_leaf: int = 10) -> Any:
    """Gradient-boosted trees (softmax over ``classes``; ``rounds`` x ``classes`` trees of depth at most
    ``depth``, each leaf at least ``min_leaf`` rows): a bounded tree ensemble in numpy. Returns a predictor of
    class scores."""
    edges = _bins(x)
    xb = _binned(x, edges)
    nbins = max(e.size for e in edges) + 1
    onehot = np.eye(classes)[y]
    prior = np.log(onehot.mean(axis=0) + 1e-9)
    f = np.tile(prior, (x.shape[0], 1))
    trees = []
    for _ in range(rounds):
        p = np.exp(f - f.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        step = []
        for c in range(classes):
            t = _fit_tree(xb, p[:, c] - onehot[:, c], np.maximum(p[:, c] * (1 - p[:, c]), 1e-6), depth,
                          min_leaf, nbins)
            step.append(t)
            f[:, c] += rate * _tree_predict(t, xb)
        trees.append(step)

    def predict(x_new: np.ndarray) -> np.ndarray:
        xn = _binned(x_new, edges)
        out = np.tile(prior, (x_new.shape[0], 1))
        for step in trees:
            for c, t in enumerate(step):
                out[:, c] += rate * _tree_predict(t, xn)
        return out

    return predict


def pair_baselines(rows: Iterable[dict[str, Any]], seed: int = 0, max_rows: int = PAIR_ROWS) -> dict[str, Any]:
    """Pair-level baselines on (at most ``max_rows`` of) ``rows``, a random half of the groups (seeded, :func:`split_halves`) training and the rest
    half scored: each feature of :func:`pair_features` alone as a decision rule (the training half's majority
    label for each of its values), a logistic regression on all of them (one-hot values: a linear model of
    every value's effect) and gradient-boosted trees on them. Accuracies in percent against the majority
    class's on the scored half; ``within``: every one at most :data:`LIMIT_PP` above it."""
    data, groups = [], []
    for r in rows:
        data.append((pair_features(r["premise"], r["hypothesis"]), r["label"]))
        groups.append(r.get("group"))
        if len(data) >= max_rows:
            break
    if len(data) < 4:
        return {"rows": len(data), "within": None, "limit_pp": LIMIT_PP}
    labels = sorted({lab for _, lab in data})
    x = np.array([f for f, _ in data], dtype=np.int64)
    y = np.array([labels.index(lab) for _, lab in data])
    tr, te = split_halves(groups, seed)
    half = len(tr)
    k = len(labels)
    majority = int(np.bincount(y[tr], minlength=k).argmax())
    maj = float(100 * (y[te] == majority).mean())
    single = {}
    for j, name in enumerate(PAIR_FEATURES):
        rule: dict[int, int] = {}
        for v in np.unique(x[tr, j]):
            rule[int(v)] = int(np.bincount(y[tr][x[tr, j] == v], minlength=k).argmax())
        pred = np.array([rule.get(int(v), majority) for v in x[te, j]])
        single[name] = float(100 * (pred == y[te]).mean())
    hot = OneHot(x[tr])
    w = fit_logistic(hot, y[tr], k)
    linear = float(100 * (OneHot(x[te], hot.values).scores(w).argmax(axis=1) == y[te]).mean())
    trees = float(100 * (fit_boosted(x[tr], y[tr], k)(x[te]).argmax(axis=1) == y[te]).mean())
    best = max(single, key=lambda n: single[n])
    top = max(single[best], linear, trees)
    return {"rows": len(data), "train": int(half), "test": len(data) - half, "majority": maj,
            "majority_label": labels[majority], "single": single, "best_feature": best,
            "best_single": single[best], "linear": linear, "trees": trees, "gap_pp": top - maj,
            "within": top - maj <= LIMIT_PP, "limit_pp": LIMIT_PP}


def describe_pairs(res: dict[str, Any]) -> list[str]:
    """Console lines of :func:`pair_baselines`: each baseline against the majority class, flagged over the
    limit."""
    if res.get("within") is None:
        return [f"pair-level baselines: too few pairs ({res['rows']})"]
    maj, lim = res["majority"], res["limit_pp"]

    def line(what: str, acc: float) -> str:
        return f"{what}: {acc:.1f} % ({acc - maj:+.1f} pp; {'within' if acc - maj <= lim else 'OVER'} the {lim:g} pp limit)"

    return [f"pair-level baselines (surface features of premise and hypothesis: counts of negations, quantifiers, "
            f"possessives and words, shared words; trained on {res['train']} of the first {res['rows']} pairs, "
            f"scored on the other {res['test']}; majority class {maj:.1f} %):",
            "  " + line(f"best single feature ({res['best_feature']})", res["best_single"]),
            "  " + line("logistic regression on all features", res["linear"]),
            "  " + line("gradient-boosted trees on all features", res["trees"])]


class Tee:
    """Pass rows through while keeping the first ``keep`` of them (for a check after a streamed write)."""

    def __init__(self, rows: Iterable[dict[str, Any]], keep: int = MAX_ROWS):
        self.rows, self.keep, self.kept = rows, keep, []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for r in self.rows:
            if len(self.kept) < self.keep:
                self.kept.append(r)
            yield r
