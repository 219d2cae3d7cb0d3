"""Rule-based rewrites of short caption-like sentences, used as *candidate* training paraphrases for mini-t5.

SNLI's entailed hypotheses are mostly generalisations of the premise ("A man is drinking juice." ->
"A man is outside."), which hold in one direction only; the entailed mode's relation filter asks for
entailment both ways. These rules make small meaning-preserving edits instead -- common synonyms
("man" / "guy", "outside" / "outdoors"), the progressive and the simple present ("is sleeping" /
"sleeps"), and the existential form ("A man is sleeping." / "There is a man sleeping.") -- so that
mini-t5 sees true paraphrases. They are candidates only: :func:`breaknli_fast.mini.train.bi_entailed_examples`
keeps the ones that mini-nli labels entailment in both directions, like every other paraphrase it trains on.

Deterministic for a given ``random.Random``; never returns the input itself.
"""
from __future__ import annotations

import random
import re

# symmetric word (or short phrase) synonyms; matched on whole words, case of the first letter kept
_SYNONYM_PAIRS = [
    ("man", "guy"), ("men", "guys"), ("woman", "lady"), ("women", "ladies"), ("child", "kid"),
    ("children", "kids"), ("little", "small"), ("large", "big"), ("outside", "outdoors"),
    ("picture", "photo"), ("pictures", "photos"), ("couch", "sofa"), ("bike", "bicycle"),
    ("bikes", "bicycles"), ("next to", "beside"), ("someone", "somebody"), ("street", "road"),
    ("person", "individual"), ("near", "close to"), ("shirt", "top"), ("talking", "speaking"),
    ("looking at", "watching"), ("photograph", "photo"), ("cap", "hat"),
    ("ocean", "sea"), ("stone", "rock"), ("quickly", "fast"), ("begins", "starts"),
]
_SYNONYMS: dict[str, list[str]] = {}
for _a, _b in _SYNONYM_PAIRS:
    _SYNONYMS.setdefault(_a, []).append(_b)
    _SYNONYMS.setdefault(_b, []).append(_a)

# progressive <-> simple present (third person singular / plural) for common regular verbs
_VERBS = {
    "sleeping": ("sleeps", "sleep"), "sitting": ("sits", "sit"), "standing": ("stands", "stand"),
    "walking": ("walks", "walk"), "running": ("runs", "run"), "playing": ("plays", "play"),
    "eating": ("eats", "eat"), "swimming": ("swims", "swim"), "riding": ("rides", "ride"),
    "jumping": ("jumps", "jump"), "dancing": ("dances", "dance"), "smiling": ("smiles", "smile"),
    "reading": ("reads", "read"), "singing": ("sings", "sing"), "talking": ("talks", "talk"),
    "looking": ("looks", "look"), "holding": ("holds", "hold"), "wearing": ("wears", "wear"),
    "watching": ("watches", "watch"), "waiting": ("waits", "wait"), "working": ("works", "work"),
    "climbing": ("climbs", "climb"), "cooking": ("cooks", "cook"), "drinking": ("drinks", "drink"),
    "laughing": ("laughs", "laugh"), "painting": ("paints", "paint"), "driving": ("drives", "drive"),
    "cleaning": ("cleans", "clean"), "carrying": ("carries", "carry"), "pushing": ("pushes", "push"),
    "pulling": ("pulls", "pull"), "throwing": ("throws", "throw"), "catching": ("catches", "catch"),
    "kicking": ("kicks", "kick"), "skiing": ("skis", "ski"), "surfing": ("surfs", "surf"),
    "cutting": ("cuts", "cut"), "selling": ("sells", "sell"),
    "lying": ("lies", "lie"), "laying": ("lays", "lay"), "using": ("uses", "use"),
    "crossing": ("crosses", "cross"), "leaning": ("leans", "lean"), "posing": ("poses", "pose"),
    "performing": ("performs", "perform"), "resting": ("rests", "rest"), "hiking": ("hikes", "hike"),
    "skating": ("skates", "skate"), "writing": ("writes", "write"), "sweeping": ("sweeps", "sweep"),
    "hugging": ("hugs", "hug"),
}
_THIRD = {third: ing for ing, (third, _) in _VERBS.items()}

_SYNONYM_RE = re.compile(r"\b(" + "|".join(sorted((re.escape(k) for k in _SYNONYMS), key=len, reverse=True)) + r")\b",
                         re.IGNORECASE)
_PROGRESSIVE = re.compile(r"\b(is|are) (\w+ing)\b", re.IGNORECASE)
_THIRD_RE = re.compile(r"\b(" + "|".join(sorted(_THIRD, key=len, reverse=True)) + r")\b")
_DETS = "a|an|one|two|three|four|some|several|many"
_BARE = "people|men|women|kids|children|dogs|boys|girls"  # plural subjects without a determiner
_EXISTENTIAL = re.compile(rf"^(?:({_DETS}) ((?:\w+ ){{0,3}}?\w+)|({_BARE})) (is|are) (\w+ing\b.*)$", re.IGNORECASE)
_THERE = re.compile(rf"^There (is|are) (?:({_DETS}) ((?:\w+ ){{0,3}}?\w+)|({_BARE})) (\w+ing\b.*)$", re.IGNORECASE)


def _case_like(src: str, word: str) -> str:
    return word[:1].upper() + word[1:] if src[:1].isupper() else word


def _synonym_edits(s: str) -> list[str]:
    out = []
    for m in _SYNONYM_RE.finditer(s):
        for alt in _SYNONYMS[m.group(1).lower()]:
            out.append(s[:m.start()] + _case_like(m.group(1), alt) + s[m.end():])
    return out


def _tense_edits(s: str) -> list[str]:
    out = []
    for m in _PROGRESSIVE.finditer(s):
        aux, ing = m.group(1).lower(), m.group(2).lower()
        if ing in _VERBS:
            third, plain = _VERBS[ing]
            out.append(s[:m.start()] + _case_like(m.group(1), third if aux == "is" else plain) + s[m.end():])
    for m in _THIRD_RE.finditer(s):
        before = s[:m.start()].rstrip().split(" ")[-1].lower() if s[:m.start()].strip() else ""
        if before in ("is", "are", "the", "a", "an", "to", "his", "her", "their", "its"):
            continue  # "is sleeps", "the runs", "to works": not a finite verb here
        out.append(s[:m.start()] + "is " + _THIRD[m.group(1)] + s[m.end():])
    return out


def _existential_edits(s: str) -> list[str]:
    out = []
    m = _EXISTENTIAL.match(s)
    if m:
        det, np_, bare, aux, rest = m.groups()
        subject = f"{det.lower()} {np_}" if det else bare.lower()
        out.append(f"{_case_like(s, 'there')} {aux.lower()} {subject} {rest}")
    m = _THERE.match(s)
    if m:
        aux, det, np_, bare, rest = m.groups()
        subject = f"{det.lower()} {np_}" if det else bare.lower()
        out.append(f"{_case_like(s, subject)} {aux.lower()} {rest}")
    return out


def single_edits(sentence: str) -> list[str]:
    """Every one-edit rewrite of ``sentence`` (distinct, in a fixed order, never the sentence itself)."""
    s = sentence.strip()
    seen, out = {s}, []
    for cand in _synonym_edits(s) + _tense_edits(s) + _existential_edits(s):
        cand = re.sub(r"\s+", " ", cand).strip()
        if cand not in seen:
            seen.add(cand)
            out.append(cand)
    return out


def rule_paraphrases(sentence: str, rng: random.Random, n: int = 3, max_edits: int = 2) -> list[str]:
    """Up to ``n`` distinct rewrites of ``sentence``, each made of 1..``max_edits`` random edits applied in turn."""
    s = sentence.strip()
    out: list[str] = []
    for _ in range(4 * n):
        if len(out) >= n:
            break
        cur = s
        for _ in range(rng.randint(1, max_edits)):
            edits = single_edits(cur)
            if not edits:
                break
            cur = rng.choice(edits)
        if cur != s and cur not in out:
            out.append(cur)
    return out
