"""A check for annotation-artifact shortcuts in a generated corpus: a hypothesis-only baseline.

A bag-of-words logistic regression sees the hypothesis alone (never the premise), is trained on one half of
the pairs and scored on the other half. If it beats the majority class by more than a few points, some surface
cue of the hypothesis predicts the label and a model can score without reasoning (Gururangan et al. 2018,
Poliak et al. 2018). ``breaknli-fast generate`` prints the result for each corpus it writes, and
tests/test_synthetic.py requires both generators to stay within :data:`LIMIT_PP` of the majority class.
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
        self.vocab, self.features, self.rows = vocab, len(vocab) + 1, len(texts)
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


def fit_logistic(x: Bag, y: np.ndarray, classes: int, l2: float = 1.0, steps: int = 300,
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


def hypothesis_only(rows: Iterable[dict[str, Any]], seed: int = 0, max_rows: int = MAX_ROWS,
                    field: str = "hypothesis") -> dict[str, Any]:
    """The baseline on (at most ``max_rows`` of) ``rows``: a random half (seeded) trains, the other half scores.
    Returns accuracy and the majority-class accuracy on the scored half (percent), their gap in points, and
    whether the gap is within :data:`LIMIT_PP`. ``field`` picks the text (``premise`` gives the premise-only
    baseline)."""
    data = []
    for r in rows:
        data.append((r[field], r["label"]))
        if len(data) >= max_rows:
            break
    if len(data) < 4:
        return {"rows": len(data), "accuracy": None, "majority": None, "gap_pp": None, "within": None,
                "limit_pp": LIMIT_PP, "field": field}
    order = np.random.default_rng(seed).permutation(len(data))
    half = len(data) // 2
    train, test = [data[i] for i in order[:half]], [data[i] for i in order[half:]]
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


class Tee:
    """Pass rows through while keeping the first ``keep`` of them (for a check after a streamed write)."""

    def __init__(self, rows: Iterable[dict[str, Any]], keep: int = MAX_ROWS):
        self.rows, self.keep, self.kept = rows, keep, []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for r in self.rows:
            if len(self.kept) < self.keep:
                self.kept.append(r)
            yield r
