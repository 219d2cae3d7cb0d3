"""Prompt templates of the BreakNLI spec (shared by the loop, the engines and mini-model training)."""

import string
from typing import Sequence

CONTRADICT_PROMPT = "Generate a statement that contradicts the following statement: {h}"
ENTAIL_PROMPT = "Rephrase the following sentence while preserving its original meaning: {h}"

GEN_PROMPTS = {"contradictive": CONTRADICT_PROMPT, "entailed": ENTAIL_PROMPT}

# Flan-T5 as the NLI model (spec "Flan-T5 as the NLI model").
NLI_PROMPTS = {
    "infer": "Read the following and determine if the hypothesis can be inferred from the premise: "
    "Premise: {premise} Hypothesis: {hypothesis}",
    "conclude": "{premise} Based on the paragraph above, can we conclude that {hypothesis}?",
    "can-infer": "{premise} Can we infer the following? {hypothesis}",
}
DEFAULT_NLI_PROMPT = "infer"

# Answer words of the seq2seq NLI classifier: yes -> entailment, no -> contradiction,
# anything else -> neutral. Training targets for the neutral class use this phrase.
NLI_ANSWERS = {"entailment": "yes", "contradiction": "no", "neutral": "it is not possible to tell"}


def check_template(template: str, fields: Sequence[str], what: str) -> None:
    """Raise a one-line ValueError unless ``str.format`` fills ``template`` with the named ``fields`` alone and
    each of them appears: an unknown field ``{x}``, a positional ``{}`` / ``{0}``, an attribute or index
    (``{h.x}``, ``{h[0]}``) or an unbalanced brace is named before any model runs. ``what`` names the template
    in the message (e.g. ``the contradictive generation prompt (--contradict-prompt)``)."""
    allowed = ", ".join("{" + f + "}" for f in fields)
    hint = f"use {allowed} (a literal brace is written {{{{ or }}}})"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:  # "Single '}' encountered in format string", "expected '}' before end of string"
        raise ValueError(f"{what}: {e}; {hint}") from None
    seen = set()
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise ValueError(f"{what} has a positional field {{{name}}}; {hint}")
        if name not in fields:
            raise ValueError(f"{what} has an unknown field {{{name}}}; {hint}")
        seen.add(name)
    missing = [f for f in fields if f not in seen]
    if missing:
        raise ValueError(f"{what} must contain {', '.join('{' + f + '}' for f in missing)}")
    try:
        template.format(**{f: "x" for f in fields})
    except (ValueError, KeyError, IndexError) as e:  # a format spec or conversion str.format refuses
        raise ValueError(f"{what}: {e}; {hint}") from None
