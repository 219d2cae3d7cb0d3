"""``breaknli-fast generate aenli|kinship``: write a synthetic NLI dataset (JSONL, optionally gzipped) with
computed labels and feature columns for ``--by``. Registered by the CLI with
``app.add_typer(generate_app, name="generate")``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator, Optional

import typer

generate_app = typer.Typer(help="Write synthetic NLI datasets whose labels are computed (docs/synthetic.md).",
                           add_completion=False, no_args_is_help=True)

N = typer.Option(10000, "--n", "-n", help="Pairs to write (streamed: a million fit in memory).")
SEED = typer.Option(0, "--seed", help="Seed; the same seed and options give the same file.")
OUT = typer.Option(..., "--out", "-o", help="Output file: .jsonl or .jsonl.gz.")
PROGRESS = typer.Option(True, "--progress/--no-progress", help="Show a progress bar.")
FORCE = typer.Option(False, "--force", help="Replace the --out file when it exists (refused otherwise).")
PAIR_BALANCE = typer.Option(True, "--pair-balance/--no-pair-balance", help="The k-th pairs of the three labels share every surface feature of the pair that the pair-level check computes (default); --no-pair-balance writes the pairs of generator version 2 (hypothesis skeletons only), whose pair-level shortcuts the check reports.")


def _write(name: str, rows: Iterator[dict[str, Any]], n: int, out: Path, progress: bool, force: bool) -> None:
    from breaknli_fast.console import console, literal, make_progress
    from breaknli_fast.data.synthetic import shortcut
    from breaknli_fast.data.synthetic.common import write_jsonl

    _check_new(out, force)  # the options were checked before: this is the last check before writing
    start = time.perf_counter()
    tee = shortcut.Tee(rows)
    if progress:
        with make_progress() as bar:
            task = bar.add_task(name, total=n)
            counts = write_jsonl(tee, out, advance=lambda k: bar.advance(task, k))
    else:
        counts = write_jsonl(tee, out)
    secs = time.perf_counter() - start
    labels = ", ".join(f"{lab} {c}" for lab, c in counts.items())
    console.print(f"wrote {n} {name} pairs to {literal(out)} in {secs:.1f} s ({n / max(secs, 1e-9):,.0f} pairs/s): {labels}")
    res = shortcut.hypothesis_only(tee.kept)
    style = "" if res["within"] is not False else "[bold yellow]warning:[/] "
    console.print(style + literal(shortcut.describe(res)))
    pairs = shortcut.pair_baselines(tee.kept[:shortcut.PAIR_ROWS])
    lines = shortcut.describe_pairs(pairs)
    style = "" if pairs["within"] is not False else "[bold yellow]warning:[/] "
    console.print(style + literal(lines[0]))
    for line in lines[1:]:
        console.print(literal(line))
    elim = shortcut.elimination(tee.kept)
    if elim.get("accuracy") is not None:
        style = "" if elim["within"] is not False else "[bold yellow]warning:[/] "
        console.print(style + literal(f"elimination baseline (split {elim['split']}: a test pair's label guessed as "
                                      f"one its group's training pairs lack): {elim['accuracy']:.1f} % against "
                                      f"the majority class's {elim['majority']:.1f} %"))


def _check_n(n: int) -> None:
    from breaknli_fast.data.synthetic.common import SyntheticError

    if n < 1:
        raise SyntheticError(f"--n must be at least 1 (got {n})")


def _check_new(out: Path, force: bool) -> None:
    """An --out file that exists is replaced only with --force (it may hold another corpus, or anything else)."""
    from breaknli_fast.data.synthetic.common import SyntheticError, check_out

    if check_out(out).exists() and not force:
        raise SyntheticError(f"{out} exists; use --force to replace it, or another --out")


@generate_app.command("aenli")
def aenli(
    n: int = N,
    seed: int = SEED,
    out: Path = OUT,
    compound: float = typer.Option(0.5, "--compound", help="Chance of a compound pair (two clauses joined by and / or / if…then)."),
    other_vocab: float = typer.Option(0.2, "--other-vocab", help="Chance that one hypothesis clause takes another agent, verb or thing."),
    negation: float = typer.Option(0.5, "--negation", help="Chance of 'not' in each clause."),
    passive: float = typer.Option(0.5, "--passive", help="Chance of the passive voice in each clause."),
    adverb: float = typer.Option(0.5, "--adverb", help="Chance of the triple's adverb in each clause."),
    balanced: bool = typer.Option(True, "--balanced/--natural", help="Equal label counts, each hypothesis skeleton (connectives, determiners, negation, voice, adverb) once per label; or premise and hypothesis drawn independently, with the draw's own label distribution."),
    the: str = typer.Option("unique", "--the", help="Reading of 'the': unique (a noun with 'the' in the pair denotes one individual: the poster's reading, 'A man happily did not kick the ball.' entails 'The ball was not kicked by the man.') or fixed (one fixed individual of a set that may hold others)."),
    vocabulary: Optional[Path] = typer.Option(None, "--vocabulary", help="A vocabulary JSON of the shipped file's shape (default: the shipped 100 agents, 100 things, 100 verbs, 50 adverbs)."),
    pair_balance: bool = PAIR_BALANCE,
    progress: bool = PROGRESS,
    force: bool = FORCE,
) -> None:
    """The exhaustive logic corpus: labels by a model checker over every model of a 3 x 3 domain."""
    from breaknli_fast.console import user_errors
    from breaknli_fast.data.synthetic import aenli as gen

    with user_errors():
        _check_n(n)
        cfg = gen.AenliConfig(compound=compound, other_vocab=other_vocab, negation=negation, passive=passive,
                              adverb=adverb, balanced=balanced, vocabulary=str(vocabulary) if vocabulary else None,
                              the=the, pair_balance=pair_balance)
        gen.load_vocabulary(cfg.vocabulary)  # a bad vocabulary is one line before anything is written
        _write("aenli", gen.generate(n, seed, cfg), n, out, progress, force)


@generate_app.command("kinship")
def kinship(
    n: int = N,
    seed: int = SEED,
    out: Path = OUT,
    min_k: int = typer.Option(2, "--min-k", help="Shortest chain (facts in the story)."),
    max_k: int = typer.Option(6, "--max-k", help="Longest chain (at most 10)."),
    shuffle: float = typer.Option(0.5, "--shuffle", help="Chance that a story's facts are out of chain order."),
    neutral_words: float = typer.Option(0.25, "--neutral-words", help="Chance that a fact, or a hypothesis, uses a word without gender (parent, child, spouse, sibling, grandparent, ...)."),
    inverse_facts: float = typer.Option(0.3, "--inverse-facts", help="Chance that a fact is stated backwards ('A is B's son' for 'B is A's parent')."),
    outside: float = typer.Option(0.3, "--outside", help="Chance that a story also states a fact about two people outside the chain (a hypothesis about one of them is neutral, or a contradiction where a fact gives that person the other gender)."),
    pair_balance: bool = PAIR_BALANCE,
    progress: bool = PROGRESS,
    force: bool = FORCE,
) -> None:
    """Kinship chains: labels through the relation composition table (balanced; each hypothesis word once per label)."""
    from breaknli_fast.console import user_errors
    from breaknli_fast.data.synthetic import kinship as gen

    with user_errors():
        _check_n(n)
        cfg = gen.KinshipConfig(min_k=min_k, max_k=max_k, shuffle=shuffle, neutral_words=neutral_words,
                                inverse_facts=inverse_facts, outside=outside, pair_balance=pair_balance)
        _write("kinship", gen.generate(n, seed, cfg), n, out, progress, force)
