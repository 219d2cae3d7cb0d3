"""The triangle verdict table of the spec (one place, shared by every engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from breaknli_fast.data.labels import CONTRADICTION as C
from breaknli_fast.data.labels import ENTAILMENT as E
from breaknli_fast.data.labels import NEUTRAL as N

MODES = ("contradictive", "entailed")

# Target relation t of (h, h') per mode.
TARGET = {"contradictive": C, "entailed": E}

# Gold labels selected per mode.
SELECTED = {"contradictive": (E, C), "entailed": (E, N, C)}


@dataclass(frozen=True)
class Rule:
    expected: str  # expected M(p, h')
    inequality: frozenset[str]  # predictions that make an inequality
    relaxed: frozenset[str]  # predictions that make a relaxed inequality


RULES: dict[tuple[str, str], Rule] = {
    ("contradictive", E): Rule(C, frozenset({E}), frozenset({E, N})),
    ("contradictive", C): Rule(E, frozenset({C}), frozenset({C, N})),
    ("entailed", E): Rule(E, frozenset({C}), frozenset({C, N})),
    ("entailed", C): Rule(C, frozenset({E}), frozenset({E, N})),
    ("entailed", N): Rule(N, frozenset({E, C}), frozenset({E, C})),
}


@dataclass(frozen=True)
class Verdict:
    inequality: bool  # at least one of the S predictions is non-compliant (strict)
    relaxed: bool
    n_candidates: int
    n_inequality: int  # how many of the S predictions are strictly non-compliant
    n_relaxed: int

    def to_dict(self) -> dict:
        return {"inequality": self.inequality, "relaxed": self.relaxed, "n_candidates": self.n_candidates,
                "n_inequality": self.n_inequality, "n_relaxed": self.n_relaxed}


def rule(mode: str, yhat: str) -> Rule:
    try:
        return RULES[(mode, yhat)]
    except KeyError:
        raise ValueError(f"no triangle rule for mode {mode!r} and M(p,h) = {yhat!r}") from None


def verdict(mode: str, yhat: str, predictions: Sequence[str]) -> Verdict:
    r = rule(mode, yhat)
    n_ineq = sum(p in r.inequality for p in predictions)
    n_rel = sum(p in r.relaxed for p in predictions)
    return Verdict(n_ineq > 0, n_rel > 0, len(predictions), n_ineq, n_rel)
