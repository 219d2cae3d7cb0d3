#!/usr/bin/env python
"""Compact markdown tables of saved benches: a bench.json (or its folder), or a result file of
scripts/bench_save.py (benchmarks/results/*.json).

A script, not a bench option: it formats saved benches and result files; it measures nothing.

    python scripts/bench_tables.py runs/bench-x/bench.json benchmarks/results/bench-mini.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from breaknli_fast.bench.report import _f, _get, overall_diffs, status_text
from breaknli_fast.bench.result import BenchResult
from breaknli_fast.bench.types import EngineResult, from_json
from breaknli_fast.bench.stages import STAGES


def typed(e: dict) -> EngineResult:
    """An engine entry of bench.json as the renderers take it."""
    return from_json(EngineResult, e)


def best_speedup(data: dict, e: dict) -> float | None:
    """Ratio of the summed fastest stage iterations (recomputed, so older bench.json files work too)."""
    ref = data["engines"][0]["speed"]["stages"]
    st = e["speed"]["stages"]
    keys = [k for k in STAGES if ref.get(k, {}).get("items") and st.get(k, {}).get("items")]
    b = sum(st[k]["min_s"] for k in keys)
    return sum(ref[k]["min_s"] for k in keys) / b if b > 0 else None


def tables(data: dict) -> str:
    loop = data["config"].get("probe_config") or data["config"].get("loop") or {}  # the loop's settings (older: "loop")
    dec = loop.get("decoding") or {}
    out = [f"Command: `{data['command']}`", "",
           f"Started {data['started']}; dataset `{data['data']['name']}` ({data['data']['examples']} examples); "
           f"fixed workload: {data['workload']['classify_ph_pairs']} (p, h) pairs, {data['workload']['generate_prompts']} prompts × "
           f"K={loop.get('k')} (max_new_tokens {dec.get('max_new_tokens')}, "
           f"min_new_tokens {dec.get('min_new_tokens')}), {data['workload']['relation_pairs']} relation pairs, "
           f"{data['workload']['evaluate_pairs']} (p, h') pairs.", ""]
    out += ["| engine | speed-up (workload, median) | speed-up (workload, best) | speed-up (e2e) | clf pairs/s | gen tokens/s | examples/s | clf batch p95 ms | "
            "gen call p95 ms | peak RSS load / run MiB | label agreement % | max abs Δ logit | greedy tokens equal % | "
            "Δ Overall ineq. pp, fixed triples [95% CI] | result | load avg (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in data["engines"]:
        if e["status"] != "ok":
            out.append(f"| {typed(e).shown_label} | " + " | ".join(["–"] * 13) + f" | {status_text(typed(e))} | – |")
            continue
        sp, sm, m = e["speed"]["speedup"], e["speed"]["summary"], e.get("memory", {})
        la = e.get("load_average_start")
        out.append(
            f"| {typed(e).shown_label} | {_f(sp['workload'], '.2f', '×')} | {_f(best_speedup(data, e), '.2f', '×')} | "
            f"{_f(sp['end_to_end'], '.2f', '×')} | "
            f"{_f(sm['classifier_pairs_per_s'], '.1f')} | {_f(sm['generated_tokens_per_s'], '.1f')} | {_f(sm['examples_per_s'], '.3f')} | "
            f"{_f(sm['classifier_batch_p95_ms'], '.0f')} | {_f(sm['generator_call_p95_ms'], '.0f')} | "
            f"{_f(m.get('peak_rss_load_mib'), '.0f')} / {_f(m.get('peak_rss_mib'), '.0f')} | "
            f"{_f(_get(e, 'parity', 'classifier', 'all', 'label_agreement_pct'), '.2f')} | "
            f"{_f(_get(e, 'parity', 'classifier', 'all', 'max_abs_logit_diff'), '.1e')} | "
            f"{_f(_get(e, 'parity', 'generator', 'greedy', 'token_agreement_pct'), '.1f')} | {overall_diffs(typed(e), 'fixed_triples')} | "
            f"{status_text(typed(e))} | {_f(la[0] if la else None)} |")
    out += ["", "Per stage: throughput at the median iteration (speed-up over the reference: median, best).", "",
            "| engine | " + " | ".join(STAGES) + " |", "|---|" + "---|" * len(STAGES)]
    for e in data["engines"]:
        if e["status"] != "ok":
            continue
        cells = []
        for k in STAGES:
            st = e["speed"]["stages"].get(k, {})
            if not st.get("items"):
                cells.append("–")
                continue
            thr = f"{st['tokens_per_s']:.1f} tok/s" if k == "generate" else f"{st['pairs_per_s']:.1f} pairs/s"
            r = data["engines"][0]["speed"]["stages"][k]
            cells.append(f"{thr} ({_f(e['speed']['speedup']['stages'].get(k), '.2f', '×')} median, "
                         f"{_f(r['min_s'] / st['min_s'], '.2f', '×')} best)")
        out.append(f"| {typed(e).shown_label} | " + " | ".join(cells) + " |")
    for n in data.get("notes", []):
        out += ["", f"Note (from the bench): {n}"]
    return "\n".join(out) + "\n"


def load(path: Path) -> dict:
    p = path / "bench.json" if path.is_dir() else path
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        data = None
    if isinstance(data, dict) and data.get("schema") == "breaknli-fast-result/1" and data.get("kind") == "bench":
        return data["payload"]
    return BenchResult.load(path).data


def main(argv: list[str]) -> int:
    for p in argv:
        print(tables(load(Path(p))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
