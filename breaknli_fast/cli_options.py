"""Command-line options shared by ``run`` and ``bench`` (one definition each, so the two commands
cannot drift apart)."""

from __future__ import annotations

import typer

from breaknli_fast.data.loaders import SAMPLE_NAME
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS

GENERATOR = typer.Option("mini-t5", "--generator", "-g", help="Generator: hub id, local folder, or a shipped mini model.")
CLASSIFIER = typer.Option("mini-nli", "--classifier", "-c", help="NLI model: sequence classifier or Flan-T5-style seq2seq.")
DATASET = typer.Option(SAMPLE_NAME, "--dataset", "-d",
    help="'sample' (embedded SNLI evaluation slice: 2,724 held-out pairs no mini model was trained or tuned on), 'sample-tuning' (the 2,002 held-out pairs mini-nli was tuned on), 'taxinli' (embedded TaxiNLI, 10,071 MNLI pairs with 15 reasoning categories), "
         "aenli[:N] / kinship[:N] (generated from --seed, labels computed by logic), mnli[:mismatched], snli[:test], "
         "anli[:r1|r2|r3], or a .jsonl/.csv/.tsv file (its other columns work with --by).")
SPLIT = typer.Option(None, "--split", help="Split of a hub dataset (e.g. mismatched, test, r2).")
MODE = typer.Option("both", "--mode", help="contradictive, entailed or both.")
DEVICE = typer.Option("cpu", "--device", help="cpu or cuda[:N].")
K = typer.Option(20, "--k", min=1, help="Candidates generated per hypothesis.")
U = typer.Option(10, "--u", min=1, help="Distinct candidates kept (examples with fewer are dropped).")
S = typer.Option(5, "--s", min=1, help="On-target candidates evaluated (examples with fewer are dropped).")
BIDIRECTIONAL = typer.Option(True, "--bidirectional/--one-direction", help="Relation filter on (h,h') and (h',h), or (h,h') only.")
DECODING = typer.Option("sampling", "--decoding", help="sampling, beam, diverse-beam or greedy.")
TOP_P = typer.Option(0.95, "--top-p", help="Sampling: nucleus probability mass.")
TOP_K = typer.Option(50, "--top-k", help="Sampling: most likely tokens kept (0 = all).")
TEMPERATURE = typer.Option(1.0, "--temperature", help="Sampling temperature.")
SAMPLER = typer.Option("fast", "--sampler", help="Sampling draws: fast (top-k first, seeded per prompt) or transformers (token-identical to transformers' generate; slower).")
MAX_NEW_TOKENS = typer.Option(40, "--max-new-tokens", help="Longest candidate, in tokens.")
GEN_BATCH = typer.Option(None, "--gen-batch", min=1,
                         help="Prompts per generator batch, each with its K samples (default: 8 on the CPU, 64 on CUDA). "
                              "The candidates do not depend on it.", show_default=False)
NLI_PROMPT = typer.Option(DEFAULT_NLI_PROMPT, "--nli-prompt", help=f"Seq2seq classifier prompt: {', '.join(NLI_PROMPTS)}.")
NLI_METHOD = typer.Option("score", "--nli-method", help="Seq2seq classifier: score (first-step logits) or generate.")
LABEL_MAP = typer.Option(None, "--label-map", help="Model label names to canonical, e.g. LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment.")
MAX_LENGTH = typer.Option(256, "--max-length", help="Truncate classifier inputs to this many tokens, or to the model's own limit when lower (its position table; recorded in config.json).")
TOKEN_BUDGET = typer.Option(8192, "--token-budget", help="Classifier batch bound: batch size x longest sequence.")
MAX_BATCH = typer.Option(None, "--max-batch", help="Classifier batch bound: pairs per batch (default: the engine's: on the CPU 16 for ort, 32 for torch sequence classifiers; else 64).", show_default=False)
PREMISE_COL = typer.Option(None, "--premise-col", help="Column of the premise in a dataset file (default: premise, then sentence1).")
HYPOTHESIS_COL = typer.Option(None, "--hypothesis-col", help="Column of the hypothesis (default: hypothesis, then sentence2).")
LABEL_COL = typer.Option(None, "--label-col", help="Column of the gold label (default: label, then gold_label).")
ID_COL = typer.Option(None, "--id-col", help="Column of a unique example id (default: id, pairID, uid or idx; else the line number).")
BY = typer.Option(None, "--by", help="Break the headline metrics down by dataset columns, e.g. genre or negation_logic,quantifier_logic "
                 "(0/1 columns: the examples where it is 1 and the rest; others: per value). Default: TaxiNLI's categories on taxinli.")
RELATION_FILTER = typer.Option("lazy", "--relation-filter",
                               help="lazy: (h', h) only for candidates whose (h, h') is on target, until S pass (same verdicts, "
                                    "about half the relation pairs); full: both directions of every kept candidate (audits).")
