"""Throughput over the invocations that did a study's work, and its Markdown (every study's report has it)."""

from __future__ import annotations

from typing import Any

from breaknli_fast.probes.base import StageTimes


def throughput(times: StageTimes, invocations: int = 1, this_invocation: StageTimes | None = None) -> dict[str, Any]:
    """Throughput of ``times``: the sum over the ``invocations`` that computed the run's records (a resume
    with nothing left to do adds none). ``this_invocation``: the current invocation's own timings.
    Classifier stages are the stages that count pairs; ``generate`` is the generator's."""
    s = times.seconds
    pairs = sum(times.pairs.values())
    cls_s = sum(s.get(k, 0.0) for k in times.pairs)
    gen_s = s.get("generate", 0.0)
    cur = this_invocation if this_invocation is not None else times
    return {
        "invocations": invocations,
        "wall_seconds": round(times.wall, 3),
        "examples": times.examples,
        "examples_this_invocation": cur.examples,
        "wall_seconds_this_invocation": round(cur.wall, 3),
        "examples_per_s": round(times.examples / times.wall, 3) if times.wall > 0 and times.examples else None,
        "classifier_pairs": pairs,
        "classifier_pairs_per_s": round(pairs / cls_s, 2) if cls_s > 0 else None,
        "generated_sequences": times.sequences,
        "generated_tokens": times.new_tokens,
        "generated_tokens_per_s": round(times.new_tokens / gen_s, 2) if gen_s > 0 else None,
        "stage_seconds": {k: round(v, 3) for k, v in s.items()},
    }


def throughput_markdown(t: dict[str, Any]) -> list[str]:
    """The report.md section of :func:`throughput`."""
    n_inv = t.get("invocations", 1)
    scope = "one invocation" if n_inv == 1 else f"summed over the {n_inv} invocations that computed the records"
    lines = ["## Throughput (" + scope + ")", "",
             f"- wall: {t['wall_seconds']} s for {t.get('examples', t['examples_this_invocation'])} examples"
             + (f" ({t['examples_per_s']} examples/s)" if t["examples_per_s"] else ""),
             f"- classifier: {t['classifier_pairs']} pairs"
             + (f", {t['classifier_pairs_per_s']} pairs/s" if t["classifier_pairs_per_s"] else "")]
    if t["generated_sequences"]:
        lines.append(f"- generator: {t['generated_sequences']} sequences, {t['generated_tokens']} tokens"
                     + (f", {t['generated_tokens_per_s']} tokens/s" if t["generated_tokens_per_s"] else ""))
    lines += ["- stage seconds: " + ", ".join(f"{k} {v}" for k, v in t["stage_seconds"].items()), ""]
    return lines
