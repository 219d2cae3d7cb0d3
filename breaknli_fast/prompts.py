"""Prompt templates of the BreakNLI spec (shared by the loop, the engines and mini-model training)."""

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
