"""Renderings of a bench result: bench.md, the rich table on stdout, the speed-up / breakage plot,
and the side-by-side comparison of two saved benches (``--compare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.plotting import pyplot

MODE_SHORT = {"contradictive": "contr.", "entailed": "ent."}


def _f(x: Any, fmt: str = ".2f", suffix: str = "") -> str:
    if x is None:
        return "–"
    try:
        return f"{x:{fmt}}{suffix}"
    except (TypeError, ValueError):
        return str(x)


def fmt_diff(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("diff") is None:
        return "–"
    lo, hi = entry["ci"]
    return f"{entry['diff']:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def overall_diffs(e: dict[str, Any], block: str, key: str = "inequality") -> str:
    parts = []
    for mode, table in (_get(e, "parity", block) or {}).items():
        cell = table.get("overall")
        if cell:
            parts.append(f"{MODE_SHORT.get(mode, mode)} {fmt_diff(cell.get(key))}")
    return "; ".join(parts) or "–"


def max_abs_breakage_diff(e: dict[str, Any], block: str = "fixed_triples") -> float | None:
    vals = [abs(cell[k]["diff"]) for table in (_get(e, "parity", block) or {}).values()
            for name, cell in table.items() if name == "overall"
            for k in ("inequality", "relaxed") if cell.get(k, {}).get("diff") is not None]
    return max(vals) if vals else None


def status_text(e: dict[str, Any]) -> str:
    if e["status"] != "ok":
        return f"{e['status']}: {e['reason']}"
    c = e.get("checks") or {}
    if e.get("reference"):
        return "reference"
    if not c.get("applied"):
        return "n/a (random weights)"
    return "pass" if c.get("passed") else "FAIL"


def summary_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    gpu = any(_get(e, "memory", "gpu_peak_allocated_mib") is not None for e in data["engines"])
    header = ["engine", "precision", "speed-up (workload)", "speed-up (workload, best)", "speed-up (e2e)", "clf pairs/s", "gen tokens/s",
              "examples/s", "clf batch p95 ms", "gen call p95 ms", "peak RSS (run) MiB"]
    if gpu:
        header.append("GPU peak MiB")
    header += ["label agreement %", "max |Δ logit|", "Δ Overall ineq. pp, fixed triples [95% CI]",
               "Δ Overall ineq. pp, end to end [95% CI]", "greedy token agreement %", "pass/fail"]
    rows = []
    for e in data["engines"]:
        if e["status"] != "ok":
            row = [e["label"], e["precision"]] + ["–"] * (len(header) - 3) + [status_text(e)]
            rows.append(row)
            continue
        sp, sm = e["speed"].get("speedup", {}), e["speed"].get("summary", {})
        row = [e["label"], e["precision"], _f(sp.get("workload"), ".2f", "×"), _f(sp.get("workload_best"), ".2f", "×"),
               _f(sp.get("end_to_end"), ".2f", "×"),
               _f(sm.get("classifier_pairs_per_s"), ".1f"), _f(sm.get("generated_tokens_per_s"), ".1f"),
               _f(sm.get("examples_per_s"), ".3f"), _f(sm.get("classifier_batch_p95_ms"), ".1f"),
               _f(sm.get("generator_call_p95_ms"), ".1f"), _f(_get(e, "memory", "peak_rss_mib"), ".0f")]
        if gpu:
            row.append(_f(_get(e, "memory", "gpu_peak_allocated_mib"), ".0f"))
        row += [_f(_get(e, "parity", "classifier", "all", "label_agreement_pct"), ".2f"),
                _f(_get(e, "parity", "classifier", "all", "max_abs_logit_diff"), ".2e"),
                overall_diffs(e, "fixed_triples"), overall_diffs(e, "end_to_end"),
                _f(_get(e, "parity", "generator", "greedy", "token_agreement_pct"), ".1f"), status_text(e)]
        rows.append(row)
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def bench_markdown(data: dict[str, Any]) -> str:
    env = data.get("environment", {})
    cfg = data.get("config", {})
    loop = cfg.get("loop", {})
    dec = loop.get("decoding", {})
    wl = data.get("workload", {})
    acc = env.get("accelerators", {})
    pk = env.get("packages", {})
    lines = ["# breaknli-fast bench", ""]
    if data.get("command"):
        lines += ["```", data["command"], "```", ""]
    lines += [
        f"- machine: {env.get('cpu')} ({env.get('cpu_count')} logical CPUs, torch threads {env.get('torch_threads')}, "
        f"{env.get('memory_gib')} GiB); GPU: {', '.join(acc.get('gpus', [])) if acc.get('cuda_available') else 'none visible'}",
        f"- versions: breaknli-fast {env.get('breaknli_fast')} ({env.get('git')}), torch {pk.get('torch')}, transformers "
        f"{pk.get('transformers')}, onnxruntime {pk.get('onnxruntime')}, optimum {pk.get('optimum')}, tensorrt {pk.get('tensorrt')}",
        f"- models: generator `{_get(data, 'models', 'generator')}`, classifier `{_get(data, 'models', 'classifier')}`; "
        f"dataset `{_get(data, 'data', 'name')}` ({_get(data, 'data', 'examples')} examples); device {cfg.get('device')}",
        f"- loop: modes {', '.join(loop.get('modes', []))}, K={loop.get('k')}, U={loop.get('u')}, S={loop.get('s')}, "
        f"decoding {dec.get('strategy')} (top_p {dec.get('top_p')}, top_k {dec.get('top_k')}, T {dec.get('temperature')}, "
        f"max_new_tokens {dec.get('max_new_tokens')}, min_new_tokens {dec.get('min_new_tokens')}), seed {loop.get('seed')}",
        f"- measurement: warm-up {cfg.get('warmup')} (excluded), stages ≥ {cfg.get('min_iterations')} iterations and "
        f"≥ {cfg.get('min_seconds')} s each (median reported), end to end × {cfg.get('repeats')} (median wall)",
        f"- fixed workload (identical for every engine): {wl.get('classify_ph_pairs')} (p, h) pairs, "
        f"{wl.get('generate_prompts')} prompts × K, {wl.get('relation_pairs')} relation pairs, {wl.get('evaluate_pairs')} "
        f"(p, h') pairs; fixed triples from the reference run: "
        + ", ".join(f"{m} {n}" for m, n in (wl.get("fixed_triples") or {}).items())
        + f"; greedy check on {wl.get('greedy_prompts')} prompts",
        f"- parity verdicts per cell (δ = {data.get('tolerance_pp')} pp): equivalent when the 95 % CI of the difference "
        f"lies inside ±δ, different when |Δ| > δ and the CI excludes 0, inconclusive otherwise; `--strict` fails on "
        f"different (and label agreement < {data.get('min_agreement_pct')} %), `--require-equivalence` on inconclusive "
        f"too; reference `{data.get('reference')}`",
        "",
    ]
    for n in data.get("notes", []):
        lines.append(f"> **Note:** {n}")
        lines.append("")
    header, rows = summary_rows(data)
    lines += ["## Summary", ""] + _md_table(header, rows) + [""]
    lines += ["Speed-up (workload) = reference time / engine time for the fixed workload (sum of the four stages' "
              "median iteration times); (workload, best) = the same with each stage's fastest iteration, the least "
              "disturbed estimate on a busy machine; speed-up (e2e) = ratio of the median end-to-end wall times. Δ = engine − "
              "reference in percentage points; fixed triples: paired bootstrap (same examples); end to end: each "
              "engine's own run, unpaired bootstrap.", ""]

    ok = [e for e in data["engines"] if e["status"] == "ok"]
    lines += ["## Stages (fixed workload): throughput, speed-up, latency", "",
              "| engine | stage | items | iterations | median s | min s | throughput (median) | speed-up median / best | latency median / p90 / p95 / p99 ms (unit) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for e in ok:
        for stage, st in e["speed"]["stages"].items():
            if not st.get("items"):
                lines.append(f"| {e['label']} | {stage} | 0 | – | – | – | – | – | – |")
                continue
            if stage == "generate":
                thr = f"{st['tokens_per_s']:.1f} tokens/s, {st['sequences_per_s']:.1f} seq/s"
                lat = st["call_latency"]
            else:
                thr = f"{st['pairs_per_s']:.1f} pairs/s"
                lat = st["batch_latency"]
            sp = _get(e, "speed", "speedup", "stages", stage)
            spb = _get(e, "speed", "speedup", "stages_best", stage)
            lines.append(f"| {e['label']} | {stage} | {st['items']} | {st['iterations']} | {st['median_s']:.3f} | "
                         f"{st['min_s']:.3f} | {thr} | {_f(sp, '.2f', '×')} / {_f(spb, '.2f', '×')} | "
                         f"{_f(lat['median_ms'], '.1f')} / {_f(lat['p90_ms'], '.1f')} / "
                         f"{_f(lat['p95_ms'], '.1f')} / {_f(lat['p99_ms'], '.1f')} ({st.get('latency_unit')}) |")
    lines += ["", "## End to end (each engine's own loop)", "",
              "| engine | examples | median wall s | examples/s | pairs/s | tokens/s | classify (p,h) s | generate s | relation s | evaluate s | accuracy (p,h) % | evaluated (per mode) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in ok:
        x = e["speed"]["end_to_end"]
        s = x["stage_seconds"]
        ev = ", ".join(f"{m} {f['evaluated']}" for m, f in x["funnel"].items())
        lines.append(f"| {e['label']} | {x['examples']} | {x['median_wall_s']:.2f} | {_f(x['examples_per_s'], '.3f')} | "
                     f"{_f(x['classifier_pairs_per_s'], '.1f')} | {_f(x['generated_tokens_per_s'], '.1f')} | "
                     f"{s['classify_ph']:.2f} | {s['generate']:.2f} | {s['relation']:.2f} | {s['evaluate']:.2f} | "
                     f"{_f(x.get('accuracy_ph'), '.2f')} | {ev} |")
    lines += ["", "## Memory and machine load", "",
              "| engine | load s (incl. export) | RSS before load MiB | peak RSS while loading MiB | RSS after load MiB | "
              "peak RSS while running MiB | GPU peak MiB | load average (1 min) start → end |",
              "|---|---|---|---|---|---|---|---|"]
    for e in ok:
        m = e.get("memory", {})
        la, lb = e.get("load_average_start"), e.get("load_average_end")
        lines.append(f"| {e['label']} | {_f(e.get('load_s'), '.1f')} | {_f(m.get('rss_before_load_mib'), '.0f')} | "
                     f"{_f(m.get('peak_rss_load_mib'), '.0f')} | {_f(m.get('rss_after_load_mib'), '.0f')} | "
                     f"{_f(m.get('peak_rss_mib'), '.0f')} | {_f(m.get('gpu_peak_allocated_mib'), '.0f')} | "
                     f"{_f(la[0] if la else None)} → {_f(lb[0] if lb else None)} |")
    if ok:
        m = ok[0].get("memory", {})
        lines += ["", f"Peak RSS: {m.get('rss_method')}; \"while loading\" covers loading and any export, \"while running\" "
                  "the measurements (end to end, stages, parity). RSS is process-wide: memory an earlier engine left "
                  "behind shows in \"RSS before load\"."]
        if m.get("shared"):
            lines += ["Engines ran interleaved (--interleave): \"peak RSS while running\" is the peak of all engines "
                      "loaded together, the same figure for each."]
        if m.get("gpu_note"):
            lines += [f"GPU memory: {m['gpu_note']}."]
    lines += ["", "## Parity with the reference", ""]
    if not data.get("parity_meaningful", True):
        lines += ["**Random weights: the parity figures below are not meaningful and are not checked.**", ""]
    lines += ["| engine | block | mode | cell | n | Δ inequality pp [95% CI] | Δ relaxed pp [95% CI] |", "|---|---|---|---|---|---|---|"]
    for e in ok[1:] if len(ok) > 1 else ok:
        for block in ("fixed_triples", "end_to_end"):
            for mode, table in (_get(e, "parity", block) or {}).items():
                for cell, entry in table.items():
                    lines.append(f"| {e['label']} | {block.replace('_', ' ')} | {mode} | {cell} | {entry['n']} | "
                                 f"{fmt_diff(entry.get('inequality'))} | {fmt_diff(entry.get('relaxed'))} |")
    lines += ["", "| engine | classifier agreement % (ph / relation / evaluate / triples) | max abs Δ logit | "
              "greedy tokens equal % | greedy sequences identical % | sampled candidates identical % |",
              "|---|---|---|---|---|---|"]
    for e in ok:
        c = _get(e, "parity", "classifier") or {}
        agr = " / ".join(_f(_get(c, k, "label_agreement_pct"), ".2f") for k in ("classify_ph", "relation", "evaluate", "fixed_triples"))
        g = _get(e, "parity", "generator") or {}
        lines.append(f"| {e['label']} | {agr} | {_f(_get(c, 'all', 'max_abs_logit_diff'), '.2e')} | "
                     f"{_f(_get(g, 'greedy', 'token_agreement_pct'), '.2f')} | {_f(_get(g, 'greedy', 'identical_sequences_pct'), '.2f')} | "
                     f"{_f(_get(g, 'sampled_candidates', 'identical_pct'), '.2f')} |")
    bad = [e for e in data["engines"] if e["status"] != "ok"]
    if bad:
        lines += ["", "## Skipped or failed engines", ""]
        lines += [f"- `{e['label']}`: {e['status']}: {e['reason']}" for e in bad]
    fails = [("bench", f) for f in data.get("failures", [])]
    fails += [(e["label"], f) for e in data["engines"] for f in (e.get("checks") or {}).get("failures", [])]
    if not data.get("parity_meaningful", True):
        verdict = "NOT CHECKED: random weights, parity is not meaningful" + ("" if data["passed"] else "; FAIL:")
    else:
        verdict = "PASS: every measured engine within tolerance" if data["passed"] else "FAIL:"
    lines += ["", "## Verdict", "", verdict]
    lines += [f"- `{lab}`: {f}" for lab, f in fails]
    if data.get("parity_meaningful", True):
        lines += ["", "## Has each engine been shown to match the reference?", ""]
        lines += [f"- `{e['label']}`: {shown_to_match(e)}" for e in data["engines"]
                  if e["status"] == "ok" and e["label"] != data.get("reference")]
        lines += _inconclusive_lines(data)
    return "\n".join(lines) + "\n"


def shown_to_match(e: dict[str, Any]) -> str:
    """One sentence per engine: shown to match (every cell equivalent), shown to differ, or not shown either way."""
    v = _get(e, "parity", "verdicts") or {}
    if not v:
        return "no parity verdicts recorded"
    n = sum(v.values())
    if v.get("different"):
        return f"no: {v['different']} of {n} cells differ beyond the tolerance"
    if v.get("inconclusive"):
        return (f"not shown: {v.get('equivalent', 0)} of {n} cells equivalent, {v['inconclusive']} inconclusive "
                "(no difference found, but the sample is too small to show a match)")
    return f"yes: all {n} cells equivalent within the tolerance"


def _inconclusive_lines(data: dict[str, Any]) -> list[str]:
    out = []
    for e in data["engines"]:
        for block in ("fixed_triples", "end_to_end"):
            for mode, table in (_get(e, "parity", block) or {}).items():
                for cell, entry in table.items():
                    for k in ("inequality", "relaxed"):
                        x = entry.get(k) or {}
                        if x.get("verdict") == "inconclusive" and x.get("n_needed"):
                            out.append(f"  - `{e['label']}` {block.replace('_', ' ')} {mode} {cell} {k}: "
                                       f"{x['diff']:+.2f} pp [{x['ci'][0]:+.2f}, {x['ci'][1]:+.2f}] on {x.get('n')} "
                                       f"examples; about {x['n_needed']} would decide")
    return (["", "Inconclusive cells and the examples a decision would need:", ""] + out) if out else []


def short_status(e: dict[str, Any]) -> str:
    t = status_text(e)
    return e["status"] if e["status"] != "ok" else t.split(" ")[0]


def rich_table(data: dict[str, Any]) -> Any:
    """A compact summary for the terminal (bench.md has every column)."""
    from rich.table import Table

    title = "breaknli-fast bench vs " + str(data.get("reference"))
    if not data.get("parity_meaningful", True):
        title += " (random weights: parity not meaningful)"
    t = Table(title=title)
    cols = [("engine", "left"), ("speed-up wl / best / e2e", "right"), ("pairs/s", "right"), ("tokens/s", "right"),
            ("p95 ms clf / gen", "right"), ("RSS MiB", "right"), ("agree %", "right"),
            ("Δ Overall ineq. pp (fixed triples)", "left"), ("result", "left")]
    for name, just in cols:
        t.add_column(name, justify=just, overflow="fold")
    for e in data["engines"]:
        st = short_status(e)
        st = {"FAIL": "[bold red]FAIL[/]", "pass": "[green]pass[/]", "skipped": "[yellow]skipped[/]",
              "failed": "[bold red]failed[/]"}.get(st, st)
        if e["status"] != "ok":
            t.add_row(e["label"], "–", "–", "–", "–", "–", "–", "–", st)
            continue
        sp, sm = e["speed"].get("speedup", {}), e["speed"].get("summary", {})
        t.add_row(e["label"], f"{_f(sp.get('workload'), '.2f', '×')} / {_f(sp.get('workload_best'), '.2f', '×')} / "
                  f"{_f(sp.get('end_to_end'), '.2f', '×')}",
                  _f(sm.get("classifier_pairs_per_s"), ".0f"), _f(sm.get("generated_tokens_per_s"), ".0f"),
                  f"{_f(sm.get('classifier_batch_p95_ms'), '.1f')} / {_f(sm.get('generator_call_p95_ms'), '.0f')}",
                  _f(_get(e, "memory", "peak_rss_mib"), ".0f"),
                  _f(_get(e, "parity", "classifier", "all", "label_agreement_pct"), ".2f"),
                  overall_diffs(e, "fixed_triples").replace("; ", "\n"), st)
    return t


def plot_speed_vs_breakage(data: dict[str, Any], path: str | Path) -> Path | None:
    """Speed-up (fixed workload) against the largest |Δ Overall| (inequality or relaxed, fixed
    triples) of each engine. Returns None when matplotlib is not installed."""
    plt = pyplot()
    if plt is None:
        return None
    pts = [(e["label"], max_abs_breakage_diff(e), _get(e, "speed", "speedup", "workload"), e.get("checks", {}).get("passed"))
           for e in data["engines"] if e["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for label, x, y, ok in pts:
        if y is None:
            continue
        x = x or 0.0
        ax.scatter([x], [y], s=50, color="tab:red" if ok is False else "tab:blue", zorder=3)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    tol = data.get("tolerance_pp")
    if tol is not None:
        ax.axvline(tol, color="grey", ls="--", lw=1, label=f"tolerance {tol} pp")
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.set_xlabel("max |Δ Overall breakage| vs torch:fp32 (pp, fixed triples)")
    ax.set_ylabel("speed-up over torch:fp32 (fixed workload)")
    title = "breaknli-fast bench"
    if not data.get("parity_meaningful", True):
        title += " (random weights: x axis not meaningful)"
    ax.set_title(title, fontsize=10)
    xmax = max([tol or 1.0] + [p[1] or 0.0 for p in pts])
    ymax = max([1.0] + [p[2] for p in pts if p[2] is not None])
    ax.set_xlim(-0.05 * xmax, 1.15 * xmax)
    ax.set_ylim(0, 1.15 * ymax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


# -- compare ----------------------------------------------------------------------------------------

COMPARE_METRICS = (
    ("speed-up (workload)", ("speed", "speedup", "workload"), ".2f", True),
    ("speed-up (workload, best)", ("speed", "speedup", "workload_best"), ".2f", True),
    ("speed-up (e2e)", ("speed", "speedup", "end_to_end"), ".2f", True),
    ("clf pairs/s", ("speed", "summary", "classifier_pairs_per_s"), ".1f", True),
    ("gen tokens/s", ("speed", "summary", "generated_tokens_per_s"), ".1f", True),
    ("examples/s", ("speed", "summary", "examples_per_s"), ".3f", True),
    ("clf batch p95 ms", ("speed", "summary", "classifier_batch_p95_ms"), ".1f", True),
    ("gen call p95 ms", ("speed", "summary", "generator_call_p95_ms"), ".1f", True),
    ("peak RSS MiB", ("memory", "peak_rss_mib"), ".0f", True),
    ("GPU peak MiB", ("memory", "gpu_peak_allocated_mib"), ".0f", True),
    ("label agreement %", ("parity", "classifier", "all", "label_agreement_pct"), ".2f", False),
    ("max |Δ Overall| pp", None, ".2f", False),
)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Each engine's speed and parity in two benches side by side, with ratios B / A."""
    ea = {e["label"]: e for e in a["engines"]}
    eb = {e["label"]: e for e in b["engines"]}
    labels = list(ea) + [x for x in eb if x not in ea]
    rows = []
    for lab in labels:
        x, y = ea.get(lab), eb.get(lab)
        row: dict[str, Any] = {"engine": lab, "status_a": status_text(x) if x else "absent",
                               "status_b": status_text(y) if y else "absent", "metrics": {}}
        for name, path, _, ratio in COMPARE_METRICS:
            va = (max_abs_breakage_diff(x) if path is None else _get(x, *path)) if x and x["status"] == "ok" else None
            vb = (max_abs_breakage_diff(y) if path is None else _get(y, *path)) if y and y["status"] == "ok" else None
            r = vb / va if ratio and va and vb is not None else None
            row["metrics"][name] = {"a": va, "b": vb, "ratio_b_over_a": r}
        rows.append(row)

    def who(d: dict[str, Any]) -> dict[str, Any]:
        env = d.get("environment", {})
        return {"command": d.get("command"), "started": d.get("started"), "cpu": env.get("cpu"),
                "gpus": env.get("accelerators", {}).get("gpus"), "git": env.get("git"),
                "models": d.get("models"), "parity_meaningful": d.get("parity_meaningful")}

    return {"a": who(a), "b": who(b), "rows": rows}


def compare_markdown(cmp: dict[str, Any], name_a: str = "A", name_b: str = "B") -> str:
    lines = ["# breaknli-fast bench comparison", "",
             f"- A: `{name_a}` ({cmp['a'].get('cpu')}, GPU {cmp['a'].get('gpus') or 'none'}, {cmp['a'].get('started')})",
             f"- B: `{name_b}` ({cmp['b'].get('cpu')}, GPU {cmp['b'].get('gpus') or 'none'}, {cmp['b'].get('started')})", ""]
    if not (cmp["a"].get("parity_meaningful", True) and cmp["b"].get("parity_meaningful", True)):
        lines += ["> **Note:** at least one bench used random weights: its parity figures are not meaningful.", ""]
    lines += _md_table(["engine", "metric", "A", "B", "B / A"], compare_rows(cmp))
    return "\n".join(lines) + "\n"


def compare_rows(cmp: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in cmp["rows"]:
        rows.append([r["engine"], "status", r["status_a"], r["status_b"], ""])
        for name, _, fmt, ratio in COMPARE_METRICS:
            m = r["metrics"][name]
            if m["a"] is None and m["b"] is None:
                continue
            rows.append(["", name, _f(m["a"], fmt), _f(m["b"], fmt), _f(m["ratio_b_over_a"], ".2f", "×") if ratio else ""])
    return rows


def compare_table(cmp: dict[str, Any], name_a: str = "A", name_b: str = "B") -> Any:
    from rich.table import Table

    t = Table(title=f"bench comparison: A = {name_a}, B = {name_b}")
    for name, just in (("engine", "left"), ("metric", "left"), ("A", "right"), ("B", "right"), ("B / A", "right")):
        t.add_column(name, justify=just, overflow="fold")
    for row in compare_rows(cmp):
        if row[1] == "status":
            row = [row[0], row[1], row[2].split(":")[0], row[3].split(":")[0], ""]
        t.add_row(*row, end_section=False)
    return t
