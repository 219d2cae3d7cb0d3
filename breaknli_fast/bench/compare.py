"""``--compare``: two saved benches side by side (each engine's speed and parity, with ratios B / A)."""

from __future__ import annotations

from typing import Any

from breaknli_fast.bench.report import _f, _get, _md_table, max_abs_breakage_diff, status_text

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
    ("records with identical predictions %", ("parity", "headline", "records", "identical_pct"), ".2f", False),
    ("labels changed by batching", ("batch_invariance", "labels_changed"), "d", False),
    ("max |Δ Overall| pp", None, ".2f", False),
)


def _who(d: dict[str, Any]) -> dict[str, Any]:
    env = d.get("environment", {})
    return {"command": d.get("command"), "started": d.get("started"), "cpu": env.get("cpu"),
            "gpus": env.get("accelerators", {}).get("gpus"), "git": env.get("git"),
            "models": d.get("models"), "parity_meaningful": d.get("parity_meaningful")}


def _scenarios(d: dict[str, Any]) -> bool:
    return d.get("kind") == "scenarios"


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Each engine's speed and parity in two benches side by side, with ratios B / A; for two ``--scenario``
    benches, each engine x role x scenario's LoadGen figures (:func:`breaknli_fast.bench.loadgen.report.compare_rows`)."""
    if _scenarios(a) or _scenarios(b):
        from breaknli_fast.bench.loadgen.report import compare_rows as scenario_rows

        return {"kind": "scenarios", "a": _who(a), "b": _who(b), "rows": scenario_rows(a, b)}
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
    return {"a": _who(a), "b": _who(b), "rows": rows}


def compare_markdown(cmp: dict[str, Any], name_a: str = "A", name_b: str = "B") -> str:
    lines = ["# breaknli-fast bench comparison", "",
             f"- A: `{name_a}` ({cmp['a'].get('cpu')}, GPU {cmp['a'].get('gpus') or 'none'}, {cmp['a'].get('started')})",
             f"- B: `{name_b}` ({cmp['b'].get('cpu')}, GPU {cmp['b'].get('gpus') or 'none'}, {cmp['b'].get('started')})", ""]
    if not (cmp["a"].get("parity_meaningful", True) and cmp["b"].get("parity_meaningful", True)):
        lines += ["> **Note:** at least one bench used random weights: its parity figures are not meaningful.", ""]
    lines += _md_table(["engine", "metric", "A", "B", "B / A"], compare_rows(cmp))
    return "\n".join(lines) + "\n"


def compare_rows(cmp: dict[str, Any]) -> list[list[str]]:
    if cmp.get("kind") == "scenarios":
        from breaknli_fast.bench.loadgen.report import compare_table_rows

        return compare_table_rows(cmp)
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

    from breaknli_fast.console import name_width

    t = Table(title=f"bench comparison: A = {name_a}, B = {name_b}")
    rows = compare_rows(cmp)
    widths = {"engine": name_width(r[0] for r in rows), "metric": name_width(r[1] for r in rows)}
    for name, just in (("engine", "left"), ("metric", "left"), ("A", "right"), ("B", "right"), ("B / A", "right")):
        t.add_column(name, justify=just, overflow="fold", min_width=widths.get(name))
    for row in rows:
        if row[1] == "status" and cmp.get("kind") != "scenarios":
            row = [row[0], row[1], row[2].split(":")[0], row[3].split(":")[0], ""]
        t.add_row(*row, end_section=False)
    return t
