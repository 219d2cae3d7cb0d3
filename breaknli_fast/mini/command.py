"""``breaknli-fast mini train``: the options of
:func:`breaknli_fast.mini.train.train_all`, read like every other command's. The training code is imported
only when the command runs, so the help and bad input answer at once."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Literal, Optional

import typer

from breaknli_fast.mini.recipe import DEFAULT_OUT, load_recipe

IO, RUN, MLM, NLI, T5 = "Data and output", "Run", "mini-mlm", "mini-nli", "mini-t5"
_FIRST = {stage: load_recipe()[stage] for stage in ("mlm", "nli", "t5")}  # the first round of each stage
EPILOG = ("A stage started afresh (--mlm-init scratch, --nli-init mlm, --t5-init scratch) goes on with the further "
          "rounds of the recipe (breaknli_fast/mini/recipe.json) unless --no-*-round2 is given; a stage's options set "
          "its first round (--nli-ema: every mini-nli round).")


def train(
    data: str = typer.Option(..., "--data", metavar="FILE", rich_help_panel=IO, show_default=False,
                             help="SNLI training pairs: JSONL(.gz) with pairID, premise/sentence1, hypothesis/sentence2, "
                                  "label/gold_label (e.g. snli_1.0_train.jsonl from https://nlp.stanford.edu/projects/snli/)"),
    out: str = typer.Option(DEFAULT_OUT, "--out", metavar="DIR", rich_help_panel=IO,
                            help="models folder, relative to the working directory (a round with --*-init continues from "
                                 "the models in it); the shipped models are replaced only with --into-package"),
    sample_out: Optional[str] = typer.Option(None, "--sample-out", metavar="DIR", rich_help_panel=IO,
                                             help="where to write snli_sample.jsonl + DATA_CARD.md (default: OUT/data; '' to skip)"),
    into_package: bool = typer.Option(False, "--into-package", rich_help_panel=IO,
                                      help="write the models and the sample into the installed package's assets, replacing "
                                           "the shipped ones (and continue from those with --*-init)"),
    seed: int = typer.Option(0, "--seed", metavar="N", rich_help_panel=RUN, help="seed of every random draw of training"),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", rich_help_panel=RUN, help="torch CPU threads"),
    only: Optional[Literal["sample", "tokenizers", "mlm", "nli", "t5", "eval"]] = typer.Option(
        None, "--only", rich_help_panel=RUN, help="run this stage alone"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", metavar="N", rich_help_panel=RUN,
                                            help="cap every training stage (smoke test)"),
    n_gen: int = typer.Option(200, "--n-gen", metavar="N", rich_help_panel=RUN,
                              help="dev hypotheses per mode for the generator check"),
    no_eval: bool = typer.Option(False, "--no-eval", rich_help_panel=RUN, help="skip the evaluation and the model cards"),
    no_progress: bool = typer.Option(False, "--no-progress", rich_help_panel=RUN, help="no progress bars"),
    mlm_epochs: Optional[float] = typer.Option(None, "--mlm-epochs", metavar="EPOCHS", rich_help_panel=MLM,
                                               help=f"epochs of the first round (recipe: {_FIRST['mlm']['epochs']})"),
    mlm_init: Literal["scratch", "mlm"] = typer.Option("scratch", "--mlm-init", rich_help_panel=MLM,
                                 help="mlm: continue from the saved mini-mlm (a further round, with --only mlm)"),
    mlm_add_layers: int = typer.Option(0, "--mlm-add-layers", metavar="N", rich_help_panel=MLM,
                                       help="with --mlm-init mlm: first append N copies of mini-mlm's top layer"),
    no_mlm_round2: bool = typer.Option(False, "--no-mlm-round2", rich_help_panel=MLM,
                                       help="skip the further mini-mlm rounds (continuations from the saved mini-mlm) of a "
                                            "run from scratch"),
    nli_epochs: Optional[float] = typer.Option(None, "--nli-epochs", metavar="EPOCHS", rich_help_panel=NLI,
                                               help=f"epochs of the first round (recipe: {_FIRST['nli']['epochs']})"),
    nli_init: Literal["mlm", "nli"] = typer.Option("mlm", "--nli-init", rich_help_panel=NLI,
                                 help="nli: continue from the saved mini-nli (a second round, with --only nli)"),
    nli_lr: Optional[float] = typer.Option(None, "--nli-lr", metavar="LR", rich_help_panel=NLI,
                                           help=f"peak learning rate of the first round (recipe: {_FIRST['nli']['lr']})"),
    nli_dropout: Optional[float] = typer.Option(None, "--nli-dropout", metavar="P", rich_help_panel=NLI,
                                                help="hidden and attention dropout of the first round (recipe: "
                                                     f"{_FIRST['nli']['dropout']})"),
    nli_ema: Optional[float] = typer.Option(None, "--nli-ema", metavar="DECAY", rich_help_panel=NLI,
                                            help="decay of the moving average of mini-nli's weights that is judged on dev "
                                                 "beside the weights themselves, the better kept (default 0.999; 0 turns "
                                                 "it off)"),
    nli_swap_contradictions: bool = typer.Option(False, "--nli-swap-contradictions", rich_help_panel=NLI,
                                                 help="also train on (hypothesis, premise) of every contradiction pair"),
    no_nli_round2: bool = typer.Option(False, "--no-nli-round2", rich_help_panel=NLI,
                                       help="skip the further mini-nli rounds (continuations from the best mini-nli) of a "
                                            "run from mini-mlm"),
    t5_epochs: Optional[float] = typer.Option(None, "--t5-epochs", metavar="EPOCHS", rich_help_panel=T5,
                                              help=f"epochs of the first round's task mix (recipe: {_FIRST['t5']['epochs']})"),
    t5_init: Literal["scratch", "t5"] = typer.Option("scratch", "--t5-init", rich_help_panel=T5,
                                help="t5: continue from the saved mini-t5 (a further round, with --only t5)"),
    t5_nli_fraction: Optional[float] = typer.Option(None, "--t5-nli-fraction", metavar="F", rich_help_panel=T5,
                                                    help="share of train pairs used as NLI examples (recipe, first round: "
                                                         f"{_FIRST['t5']['nli_fraction']})"),
    t5_gen_fraction: Optional[float] = typer.Option(None, "--t5-gen-fraction", metavar="F", rich_help_panel=T5,
                                                    help="share of the generation examples kept (recipe, first round: "
                                                         f"{_FIRST['t5']['gen_fraction']})"),
    t5_lr: Optional[float] = typer.Option(None, "--t5-lr", metavar="LR", rich_help_panel=T5,
                                          help=f"peak learning rate of the first round (recipe: {_FIRST['t5']['lr']})"),
    t5_save_every: Optional[int] = typer.Option(None, "--t5-save-every", metavar="N", rich_help_panel=T5,
                                                help="checkpoint every N steps (0: only at the end; recipe, first round: "
                                                     f"{_FIRST['t5']['save_every']})"),
    t5_bi_entailed_human: bool = typer.Option(False, "--t5-bi-entailed-human", rich_help_panel=T5,
                                              help="add the SNLI paraphrase examples that mini-nli labels entailment both "
                                                   "ways (needs mini-nli)"),
    t5_self_paraphrases: int = typer.Option(0, "--t5-self-paraphrases", metavar="N", rich_help_panel=T5,
                                            help="add mini-t5's own rephrasings of N training hypotheses that mini-nli "
                                                 "labels entailment both ways"),
    t5_self_per_hypothesis: int = typer.Option(3, "--t5-self-per-hypothesis", metavar="N", rich_help_panel=T5,
                                               help="with --t5-self-paraphrases: keep up to N distinct rephrasings per "
                                                    "hypothesis"),
    t5_self_temperature: float = typer.Option(1.0, "--t5-self-temperature", metavar="T", rich_help_panel=T5,
                                              help="with --t5-self-paraphrases: sampling temperature of the rephrasings "
                                                   "(the loop's is 1.0)"),
    t5_faithful_paraphrases: bool = typer.Option(False, "--t5-faithful-paraphrases", rich_help_panel=T5,
                                                 help="SNLI's and mini-t5's own paraphrase candidates must also keep every "
                                                      "content word of their source (rules keep them by construction)"),
    t5_rule_paraphrases: int = typer.Option(0, "--t5-rule-paraphrases", metavar="N", rich_help_panel=T5,
                                            help="add rule-based rewrites (synonyms, tense, 'there is') of N training "
                                                 "hypotheses that mini-nli labels entailment both ways"),
    t5_rules_per_hypothesis: int = typer.Option(2, "--t5-rules-per-hypothesis", metavar="N", rich_help_panel=T5,
                                                help="with --t5-rule-paraphrases: rewrites per hypothesis"),
    t5_rules_max_edits: int = typer.Option(2, "--t5-rules-max-edits", metavar="N", rich_help_panel=T5,
                                           help="with --t5-rule-paraphrases: at most N edits per rewrite"),
    t5_rules_extended: bool = typer.Option(False, "--t5-rules-extended", rich_help_panel=T5,
                                           help="with --t5-rule-paraphrases: a larger synonym table and the leading "
                                                "'The' / 'A' swap"),
    t5_rules_rich: bool = typer.Option(False, "--t5-rules-rich", rich_help_panel=T5,
                                       help="with --t5-rule-paraphrases: the extended rules, a third synonym table, 'a' / "
                                            "'the' inside the sentence, a final place phrase moved to the front, 'A man "
                                            "and a woman' swapped"),
    t5_denoise: Optional[int] = typer.Option(None, "--t5-denoise", metavar="N", rich_help_panel=T5,
                                             help="add N reconstruction examples (a training sentence with words hidden "
                                                  "-> the sentence)"),
    no_t5_round2: bool = typer.Option(False, "--no-t5-round2", rich_help_panel=T5,
                                      help="skip the further T5 rounds (continuations: more NLI, generation, paraphrases) "
                                           "of a run from scratch"),
) -> None:
    """Train the shipped mini models on SNLI (CPU, seeded, reproducible)."""
    from breaknli_fast.console import user_errors
    from breaknli_fast.data.loaders import DataError
    from breaknli_fast.mini import DATA_DIR, MODELS_DIR

    with user_errors():
        path = Path(data).expanduser()
        if not path.is_file():
            raise DataError(f"training data {path} {'is not a file' if path.exists() else 'does not exist'}; "
                            "download SNLI 1.0 from https://nlp.stanford.edu/projects/snli/ and pass its "
                            "snli_1.0_train.jsonl with --data")
        if into_package:
            out = str(MODELS_DIR)
            if sample_out is None:
                sample_out = str(DATA_DIR)
        elif Path(out).expanduser().resolve() == MODELS_DIR.resolve():
            raise DataError(f"--out {out} is the package's shipped models; add --into-package to replace them")
        if sample_out is None:
            sample_out = str(Path(out) / "data")
        from breaknli_fast.mini.train import log, train_all

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
        bi_entailed = (dict(human=t5_bi_entailed_human, hypotheses=t5_self_paraphrases, rules=t5_rule_paraphrases,
                            per_hypothesis=t5_self_per_hypothesis, faithful=t5_faithful_paraphrases,
                            self_temperature=t5_self_temperature, rules_per_hypothesis=t5_rules_per_hypothesis,
                            rules_max_edits=t5_rules_max_edits, rules_extended=t5_rules_extended,
                            rules_rich=t5_rules_rich)
                       if t5_bi_entailed_human or t5_self_paraphrases or t5_rule_paraphrases else None)
        res = train_all(data, out, seed=seed, threads=threads, mlm_epochs=mlm_epochs, nli_epochs=nli_epochs,
                        t5_epochs=t5_epochs, only=only, mlm_init=mlm_init, mlm_add_layers=mlm_add_layers,
                        nli_ema=nli_ema, mlm_round2=not no_mlm_round2, max_steps=max_steps,
                        sample_dir=sample_out or None, evaluate=not no_eval, n_gen=n_gen, progress=not no_progress,
                        nli_init=nli_init, nli_lr=nli_lr, nli_dropout=nli_dropout, nli_swap=nli_swap_contradictions,
                        t5_init=t5_init, t5_nli_fraction=t5_nli_fraction, t5_gen_fraction=t5_gen_fraction, t5_lr=t5_lr,
                        t5_round2=not no_t5_round2, t5_save_every=t5_save_every, nli_round2=not no_nli_round2,
                        t5_denoise=t5_denoise, t5_bi_entailed=bi_entailed)
        log.info("result: %s", {k: v for k, v in res.items() if k in ("total_seconds", "models_size_bytes")})

