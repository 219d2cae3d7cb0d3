"""The words of the exhaustive logic corpus (``aenli``): its vocabulary (agents, things, transitive verbs with
their forms, adverbs; the shipped file or one of the same shape) and clauses and sentences put into words."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from breaknli_fast.data.synthetic.common import SyntheticError, asset_path, load_json
from breaknli_fast.data.synthetic.logic import Clause

RESERVED = frozenset({"every", "a", "an", "the", "did", "not", "was", "by", "and", "or", "if", "then"})


@dataclass(frozen=True)
class Verb:
    base: str
    past: str
    participle: str


@dataclass(frozen=True)
class Adverb:
    word: str
    before_negation: bool


@dataclass(frozen=True)
class Vocabulary:
    agents: tuple[str, ...]
    things: tuple[str, ...]
    verbs: tuple[Verb, ...]
    adverbs: tuple[Adverb, ...]


def vocabulary_path() -> Path:
    return asset_path("aenli_vocabulary.json")


_WORD = re.compile(r"[a-z][a-z-]*")


def load_vocabulary(path: str | Path | None = None) -> Vocabulary:
    """The shipped vocabulary (100 agents, 100 things, 100 verbs, 50 adverbs) or a JSON file of the same shape."""
    if path is None:
        return _shipped_vocabulary()
    return _parse_vocabulary(load_json(Path(path).expanduser()), Path(path))


@lru_cache(maxsize=1)
def _shipped_vocabulary() -> Vocabulary:
    return _parse_vocabulary(load_json(vocabulary_path()), vocabulary_path())


def _parse_vocabulary(data: Any, path: Path) -> Vocabulary:
    def fail(msg: str) -> SyntheticError:
        return SyntheticError(f"vocabulary {path}: {msg}")

    if not isinstance(data, dict):
        raise fail("expected an object with agents, things, verbs and adverbs")
    try:
        agents = tuple(data["agents"])
        things = tuple(data["things"])
        verbs = tuple(Verb(v["base"], v["past"], v["participle"]) for v in data["verbs"])
        adverbs = tuple(Adverb(a["word"], bool(a.get("before_negation", False))) for a in data["adverbs"])
    except (KeyError, TypeError) as e:
        raise fail(f"missing or malformed entry ({e})") from None
    words: dict[str, str] = {}
    forms = [f for v in verbs for f in (v.base, v.past, v.participle)]
    for kind, items in (("agents", agents), ("things", things), ("verbs", forms),
                        ("adverbs", [a.word for a in adverbs])):
        for w in items:
            if not isinstance(w, str) or not _WORD.fullmatch(w) or w in RESERVED:
                raise fail(f"{kind}: {w!r} is not one lower-case word outside {', '.join(sorted(RESERVED))}")
            if words.get(w, kind) != kind:
                raise fail(f"{w!r} is in both {words[w]} and {kind}")
            words[w] = kind
    for kind, items in (("agents", agents), ("things", things), ("verbs", [v.base for v in verbs]),
                        ("adverbs", [a.word for a in adverbs])):
        if len(items) < 2:
            raise fail(f"{kind} needs at least two entries")
        if len(set(items)) != len(items):
            raise fail(f"{kind} has duplicates")
    return Vocabulary(agents, things, verbs, adverbs)


def _np(det: str, noun: str) -> str:
    return f"{'an' if det == 'a' and noun[0] in 'aeiou' else det} {noun}"


def clause_text(c: Clause, agent: str, verb: Verb, thing: str, adverb: str) -> str:
    """The clause in words (lower case)."""
    subj, obj = _np(c.subj_det, agent), _np(c.obj_det, thing)
    pre = [adverb] if c.adverb == "before_verb" else []
    end = [adverb] if c.adverb == "end" else []
    if c.passive:
        words = [obj, "was"] + (["not"] if c.negated else []) + pre + [verb.participle, "by", subj] + end
    elif c.negated:
        over = [adverb] if c.adverb == "before_negation" else []
        words = [subj] + over + ["did not"] + pre + [verb.base, obj] + end
    else:
        words = [subj] + pre + [verb.past, obj] + end
    return " ".join(words)


def sentence_text(connective: str, clauses: list[str]) -> str:
    if connective == "none":
        s = clauses[0]
    elif connective == "if":
        s = f"if {clauses[0]}, then {clauses[1]}"
    else:
        s = f"{clauses[0]} {connective} {clauses[1]}"
    return s[0].upper() + s[1:] + "."
