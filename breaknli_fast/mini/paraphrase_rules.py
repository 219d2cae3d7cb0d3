"""Rule-based rewrites of short caption-like sentences, used as *candidate* training paraphrases for mini-t5.

SNLI's entailed hypotheses are mostly generalisations of the premise ("A man is drinking juice." ->
"A man is outside."), which hold in one direction only; the entailed mode's relation filter asks for
entailment both ways. These rules make small meaning-preserving edits instead -- common synonyms
("man" / "guy", "outside" / "outdoors"), the progressive and the simple present ("is sleeping" /
"sleeps"), and the existential form ("A man is sleeping." / "There is a man sleeping."); the extended and
rich variants add more synonyms, "a" / "the" and a place phrase moved to the front -- so that mini-t5 sees true
paraphrases. They are candidates only: :func:`breaknli_fast.mini.train.bi_entailed_examples`
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
# more of them, used by the ``extended`` rules only (the first three paraphrase rounds of mini-t5 used the table above
# alone, and must stay reproducible)
_MORE_SYNONYM_PAIRS = [
    ("man", "gentleman"), ("man", "male"), ("woman", "female"), ("people", "persons"), ("person", "human"),
    ("child", "youngster"), ("children", "youngsters"), ("kids", "youngsters"), ("dog", "canine"),
    ("dogs", "canines"), ("inside", "indoors"), ("picture", "image"), ("pictures", "images"), ("car", "automobile"),
    ("cars", "automobiles"), ("store", "shop"), ("friends", "pals"), ("mother", "mom"), ("father", "dad"),
    ("baby", "infant"), ("talking", "chatting"), ("smiling", "grinning"), ("happy", "glad"), ("sad", "unhappy"),
    ("beach", "shore"), ("sidewalk", "pavement"), ("jacket", "coat"), ("game", "match"), ("dinner", "supper"),
    ("sleeping", "asleep"), ("wearing", "dressed in"), ("nobody", "no one"), ("several", "a few"),
    ("restaurant", "eatery"), ("cat", "kitty"), ("photo", "snapshot"),
]


# and more again, used by the ``rich`` rules only (rounds 8-10 used the two tables above)
_RICH_SYNONYM_PAIRS = [
    ("jumping", "leaping"), ("yelling", "shouting"), ("teenager", "teen"), ("teenagers", "teens"),
    ("motorcycle", "motorbike"), ("phone", "telephone"), ("stairs", "steps"), ("fixing", "repairing"),
    ("buying", "purchasing"), ("grass", "lawn"), ("pants", "trousers"), ("cold", "chilly"), ("walking", "strolling"),
    ("building", "structure"), ("puppy", "pup"), ("boat", "vessel"), ("people", "individuals"),
    ("looking at", "viewing"), ("tv", "television"), ("sofa", "settee"), ("middle", "center"),
    ("speaking", "chatting"), ("photographs", "photos"), ("rocks", "stones"), ("automobile", "vehicle"),
]


def _synonym_table(pairs) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}
    for a, b in pairs:
        table.setdefault(a, []).append(b)
        table.setdefault(b, []).append(a)
    return table


_SYNONYMS = _synonym_table(_SYNONYM_PAIRS)
_SYNONYMS_EXT = _synonym_table(_SYNONYM_PAIRS + _MORE_SYNONYM_PAIRS)
_SYNONYMS_RICH = _synonym_table(_SYNONYM_PAIRS + _MORE_SYNONYM_PAIRS + _RICH_SYNONYM_PAIRS)

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


def _words_re(words) -> re.Pattern:
    return re.compile(r"\b(" + "|".join(sorted((re.escape(k) for k in words), key=len, reverse=True)) + r")\b",
                      re.IGNORECASE)


_SYNONYM_RE, _SYNONYM_EXT_RE, _SYNONYM_RICH_RE = (_words_re(_SYNONYMS), _words_re(_SYNONYMS_EXT),
                                                   _words_re(_SYNONYMS_RICH))
_PROGRESSIVE = re.compile(r"\b(is|are) (\w+ing)\b", re.IGNORECASE)
_THIRD_RE = re.compile(r"\b(" + "|".join(sorted(_THIRD, key=len, reverse=True)) + r")\b")
_DETS = "a|an|one|two|three|four|some|several|many"
_BARE = "people|men|women|kids|children|dogs|boys|girls"  # plural subjects without a determiner
_EXISTENTIAL = re.compile(rf"^(?:({_DETS}) ((?:\w+ ){{0,3}}?\w+)|({_BARE})) (is|are) (\w+ing\b.*)$", re.IGNORECASE)
_THERE = re.compile(rf"^There (is|are) (?:({_DETS}) ((?:\w+ ){{0,3}}?\w+)|({_BARE})) (\w+ing\b.*)$", re.IGNORECASE)


def _case_like(src: str, word: str) -> str:
    return word[:1].upper() + word[1:] if src[:1].isupper() else word


def _synonym_edits(s: str, extended: bool = False, rich: bool = False) -> list[str]:
    out = []
    table, pattern = ((_SYNONYMS_RICH, _SYNONYM_RICH_RE) if rich else (_SYNONYMS_EXT, _SYNONYM_EXT_RE) if extended
                      else (_SYNONYMS, _SYNONYM_RE))
    for m in pattern.finditer(s):
        for alt in table[m.group(1).lower()]:
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


_LEADING_DET = re.compile(r"^(The|A|An) (\w+)")
_PLURALS = {"men", "women", "people", "children", "kids", "persons", "police"}


def _plural_looking(word: str) -> bool:
    """Whether ``word`` looks like a plural noun (ends in -s and is not a known verb like "runs" or "this")."""
    word = word.lower()
    return word in _PLURALS or (word.endswith("s") and not word.endswith("ss") and len(word) > 3
                                and word not in _THIRD and word not in ("this", "does", "goes", "plus"))


def _determiner_edits(s: str, strict: bool = False) -> list[str]:
    """"The dog ..." <-> "A dog ..." at the start of a sentence whose subject looks singular (``strict``: the word
    after it must not look plural either, so that "The red cars" is left alone)."""
    m = _LEADING_DET.match(s)
    if not m:
        return []
    noun = m.group(2)
    if noun.lower() in _PLURALS or (noun.endswith("s") and not noun.endswith("ss")):
        return []
    if strict:
        after = s[m.end():].split()
        if after and _plural_looking(after[0].strip(".,")):
            return []
    det = ("An" if noun[:1].lower() in "aeiou" else "A") if m.group(1) == "The" else "The"
    return [det + s[len(m.group(1)):]]


_INNER_DET = re.compile(r"(?<=\w )(a|an|the) (\w+)(?: (\w+))?")


def _inner_determiner_edits(s: str) -> list[str]:
    """"... on a field." <-> "... on the field." inside a sentence, where neither of the next two words looks
    plural ("the red cars", "the dog runs" are left alone)."""
    out = []
    for m in _INNER_DET.finditer(s):
        det, w1, w2 = m.group(1), m.group(2), m.group(3) or ""
        if _plural_looking(w1) or (w2 and _plural_looking(w2)):
            continue
        alt = ("an" if w1[:1].lower() in "aeiou" else "a") if det == "the" else "the"
        out.append(s[:m.start(1)] + alt + s[m.end(1):])
    return out


_PREPS = "in|on|at|near|by|under|behind|beside|inside|outside|across|along|through|next to|in front of"
_TRAILING_PP = re.compile(rf"^(\S+(?: \S+){{2,}}) ((?:{_PREPS}) (?:a|an|the) [^,]+?)(\.?)$")
_LEADING_PP = re.compile(rf"^((?:{_PREPS}) (?:a|an|the) [^,]+), (.+?)(\.?)$", re.IGNORECASE)
_AUX = ("is", "are", "was", "were", "be")
_LOWER_FIRST = set(_DETS.split("|")) | set(_BARE.split("|")) | {"the", "there"}


def _fronting_edits(s: str) -> list[str]:
    """"A cat plays in the kitchen." <-> "In the kitchen, a cat plays." (a final place phrase moved to the front
    or back)."""
    out = []
    m = _TRAILING_PP.match(s)
    if m:
        clause, pp, stop = m.groups()
        first, _, rest = clause.partition(" ")
        if first.lower() in _LOWER_FIRST and clause.split()[-1].lower() not in _AUX:  # not "..., a couple is."
            out.append(f"{pp[:1].upper()}{pp[1:]}, {first.lower()} {rest}{stop}")
    m = _LEADING_PP.match(s)
    if m:
        pp, clause, stop = m.groups()
        out.append(f"{clause[:1].upper()}{clause[1:]} {pp[:1].lower()}{pp[1:]}{stop}")
    return out


_COORDINATION = re.compile(r"^((?:a|an|the|one|two|three) \w+) and ((?:a|an|the|one|two|three) \w+)\b", re.IGNORECASE)


def _coordination_edits(s: str) -> list[str]:
    """"A man and a woman ..." <-> "A woman and a man ..." at the start of a sentence."""
    m = _COORDINATION.match(s)
    if not m:
        return []
    a, b = m.groups()
    return [f"{b[:1].upper()}{b[1:]} and {a[:1].lower()}{a[1:]}{s[m.end():]}"]


def single_edits(sentence: str, extended: bool = False, rich: bool = False) -> list[str]:
    """Every one-edit rewrite of ``sentence`` (distinct, in a fixed order, never the sentence itself).
    ``extended`` adds the larger synonym table and the leading "The" / "A" swap; ``rich`` (which implies it) adds
    a third synonym table, "a" / "the" inside the sentence, a final place phrase moved to the front (and back)
    and "A man and a woman" / "A woman and a man"."""
    s = sentence.strip()
    seen, out = {s}, []
    more = _determiner_edits(s, strict=rich) if extended or rich else []
    if rich:
        more += _inner_determiner_edits(s) + _fronting_edits(s) + _coordination_edits(s)
    for cand in _synonym_edits(s, extended, rich) + _tense_edits(s) + _existential_edits(s) + more:
        cand = re.sub(r"\s+", " ", cand).strip()
        if cand not in seen:
            seen.add(cand)
            out.append(cand)
    return out


def rule_paraphrases(sentence: str, rng: random.Random, n: int = 3, max_edits: int = 2,
                     extended: bool = False, rich: bool = False) -> list[str]:
    """Up to ``n`` distinct rewrites of ``sentence``, each made of 1..``max_edits`` random edits applied in turn
    (:func:`single_edits`, ``extended`` / ``rich`` or not)."""
    s = sentence.strip()
    out: list[str] = []
    for _ in range(4 * n):
        if len(out) >= n:
            break
        cur = s
        for _ in range(rng.randint(1, max_edits)):
            edits = single_edits(cur, extended, rich)
            if not edits:
                break
            cur = rng.choice(edits)
        if cur != s and cur not in out:
            out.append(cur)
    return out


# ----------------------------------------------------------------------------------------------- content check

# function words a paraphrase may add, drop or change freely
_FUNCTION_WORDS = frozenset(
    "a an the one is are was were be being been am of in on at to with and or for by from into onto his her "
    "their its it he she they them this that these those there some while as up down out over under near next "
    "who which what than then very".split())
_VERB_FORMS = {form: ing for ing, forms in _VERBS.items() for form in forms}


def _content_word(word: str) -> str:
    """``word`` reduced for comparison: verb forms to the progressive, a plural -s dropped."""
    word = _VERB_FORMS.get(word, word)
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word


def _words(sentence: str) -> list[str]:
    """The lower-cased words of ``sentence``."""
    return re.findall(r"[a-z']+", sentence.lower())


def content_words(sentence: str) -> list[str]:
    """The words of ``sentence`` that carry its content (lower-cased, reduced), function words left out."""
    return [_content_word(w) for w in _words(sentence) if w not in _FUNCTION_WORDS]


def keeps_content(source: str, candidate: str, max_new: int = 1) -> bool:
    """Whether ``candidate`` keeps every content word of ``source`` (itself, another form of it, or a synonym from
    the extended rules' table) and adds at most ``max_new`` content words of its own: the mark of a faithful rephrasing
    rather than a rewrite that swaps "juice" for "wine"."""
    tokens = _words(candidate)
    have = {_content_word(w) for w in tokens if w not in _FUNCTION_WORDS}
    words = f" {' '.join(tokens)} "
    raw = [w for w in _words(source) if w not in _FUNCTION_WORDS]
    allowed = {_content_word(w) for w in raw}
    for r in raw:
        w = _content_word(r)
        alts = _SYNONYMS_EXT.get(r, []) + _SYNONYMS_EXT.get(w, [])
        allowed.update(_content_word(a) for a in alts)
        if w not in have and not any(f" {a} " in words or _content_word(a) in have for a in alts):
            return False
    return len(have - allowed) <= max_new
