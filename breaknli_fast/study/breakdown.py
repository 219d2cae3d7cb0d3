"""Breakdown of any probe's headline metrics by dataset columns (``--by``): TaxiNLI's reasoning categories, a
genre, any column of a local file.

A column whose values are all 0/1 (missing values aside) is a **category**: its metrics are reported for the
examples where it is 1 and for the complement. Any other column is **categorical**: one group per value. Each
group gets the probe's headline rates with 95 % CIs (:meth:`Probe.headline`) and its counts; a group
with fewer than :data:`MIN_N` examples behind a rate is flagged, never dropped.
"""

from __future__ import annotations

from typing import Any, Sequence

from breaknli_fast.data.loaders import DataError, Example, LoadedData, TAXINLI_CATEGORIES
from breaknli_fast.plotting import marker_handles, pyplot, rate_bars, wrap_to_width

MIN_N = 30  # fewer examples behind a rate than this: flagged as too few for a meaningful rate
MAX_VALUES = 50  # a categorical column with more distinct values is refused (an id or a text, not a category)
MISSING = (None, "", "-")
TRUE, FALSE = ("1", "1.0", "true", "True"), ("0", "0.0", "false", "False")


def default_columns(data: LoadedData) -> list[str]:
    """The breakdown a dataset asks for by itself: TaxiNLI's categories (shipped, or a file with its columns)."""
    named = data.source.get("breakdown")
    if named:
        return list(named)
    if data.examples and all(c in data.examples[0].meta for c in TAXINLI_CATEGORIES):
        return list(TAXINLI_CATEGORIES)
    return []


def parse_by(by: str | Sequence[str] | None) -> list[str]:
    if by is None:
        return []
    items = by.split(",") if isinstance(by, str) else list(by)
    return [c.strip() for c in items if c.strip()]


def _value(ex: Example, column: str) -> str | None:
    v = ex.meta.get(column)
    if v is None or (isinstance(v, str) and v.strip() in MISSING):
        return None
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip()


def column_groups(data: LoadedData, column: str) -> dict[str, Any]:
    """The groups of one column: kind (category / categorical), and per group its label and example ids."""
    if not any(column in ex.meta for ex in data.examples):
        cols = sorted({k for ex in data.examples[:50] for k in ex.meta})
        raise DataError(f"--by {column}: the dataset has no column {column!r}"
                        + (f" (its other columns: {', '.join(cols)})" if cols else " (it has no other columns)"))
    values = {ex.id: _value(ex, column) for ex in data.examples}
    present = {v for v in values.values() if v is not None}
    if not present:
        raise DataError(f"--by {column}: the column has no value in any of the {len(values)} examples "
                        f"(all empty or {' / '.join(repr(m) for m in MISSING if m)})")
    missing = sum(v is None for v in values.values())
    binary = sum(v in TRUE + FALSE for v in values.values())
    other = len(values) - missing - binary
    if present and (other == 0 or (column in TAXINLI_CATEGORIES or other <= 0.01 * (binary + other)) and binary):
        # a 0/1 column; a few other values in it (a data error) are counted and left out of both groups
        ones = {i for i, v in values.items() if v in TRUE}
        zeros = {i for i, v in values.items() if v in FALSE}
        groups = [(f"{column}", "1", ones), (f"not {column}", "0", zeros)]
        kind = "category"
        missing += other
    else:
        if len(present) > MAX_VALUES:
            raise DataError(f"--by {column}: {len(present)} distinct values; --by takes 0/1 columns or columns "
                            f"of at most {MAX_VALUES} values")
        groups = [(f"{column}={v}", v, {i for i, x in values.items() if x == v}) for v in sorted(present)]
        kind = "categorical"
    return {"kind": kind, "missing": missing, "non_binary": other if kind == "category" else 0, "groups": groups}


def breakdown(probe: Any, records: Sequence[dict[str, Any]], data: LoadedData, columns: Sequence[str]) -> dict[str, Any]:
    """Per column, per group: the probe's headline rates (point, 95 % CI, n) and counts on that group's
    examples. Groups with n < MIN_N behind a rate are flagged ``small``."""
    out: dict[str, Any] = {}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    for column in columns:
        spec = column_groups(data, column)
        rows = []
        for label, value, ids in spec["groups"]:
            exs = [ex for ex in data.examples if ex.id in ids]
            recs = [r for i in ids for r in by_id.get(i, ())]
            head = probe.headline(recs, exs)
            rates = head.get("rates", {})
            rows.append({"group": label, "value": value, "examples": len(exs), "rates": rates,
                         "counts": head.get("counts", {}),
                         "small": sorted(k for k, c in rates.items() if c["n"] < MIN_N)})
        out[column] = {"kind": spec["kind"], "missing": spec["missing"], "non_binary": spec["non_binary"], "groups": rows}
    return out


def _cell(c: dict[str, Any]) -> str:
    if c.get("rate") is None:
        return f"– (n={c['n']})"
    lo, hi = c["ci"]
    return f"{c['rate']:.1f} [{lo:.1f}, {hi:.1f}] (n={c['n']}{', few' if c['n'] < MIN_N else ''})"


def markdown(bd: dict[str, Any]) -> list[str]:
    """report.md lines: one table per column (groups x headline rates and counts)."""
    if not bd:
        return []
    lines = ["## Breakdown by column", "",
             f"Rates in % with 95 % CIs (Wilson for a share of examples, a Student-t interval over examples for a "
             f"mean of shares or a ratio, never narrower than z²/(n + z²)); \"few\" marks a rate over fewer than "
             f"{MIN_N} examples (shown, not meaningful on its own).", ""]
    for column, spec in bd.items():
        groups = spec["groups"]
        rate_keys = list(dict.fromkeys(k for g in groups for k in g["rates"]))
        count_keys = list(dict.fromkeys(k for g in groups for k in g["counts"]))
        note = f"; {spec['missing']} examples without a 0/1 value" if spec["missing"] else ""
        if spec.get("non_binary"):
            note += f" ({spec['non_binary']} with another value, left out)"
        lines += [f"### {column} ({spec['kind']}{note})", ""]
        lines.append("| group | examples | " + " | ".join(rate_keys + count_keys) + " |")
        lines.append("|---|---|" + "---|" * (len(rate_keys) + len(count_keys)))
        for g in groups:
            cells = [_cell(g["rates"][k]) if k in g["rates"] else "–" for k in rate_keys]
            cells += [str(g["counts"].get(k, "–")) for k in count_keys]
            lines.append(f"| {g['group']} | {g['examples']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def figure(bd: dict[str, Any]) -> Any:
    """breakdown.png's figure: per column set, groups x headline rates as bars with CI whiskers (groups with too
    few examples hatched, a rate of 0 % and a rate not evaluated marked apart: :func:`rate_bars`); only the rates
    a panel has a value of are its series and legend entries. None without matplotlib (the ``bench`` extra) or
    without a group to draw."""
    plt = pyplot()
    if plt is None:
        return None
    # one panel for all 0/1 categories (their "= 1" groups), one per categorical column
    panels: list[tuple[str, list[dict[str, Any]]]] = []
    cats = [g for spec in bd.values() if spec["kind"] == "category" for g in spec["groups"] if g["value"] == "1"]
    if cats:
        panels.append(("0/1 columns: the examples where the column is 1", cats))
    panels += [(col, spec["groups"]) for col, spec in bd.items() if spec["kind"] == "categorical"]
    if not panels:
        return None
    from matplotlib.patches import Patch

    fig_w = max(8, 0.7 * max(len(p[1]) for p in panels) + 3)
    fig, axes = plt.subplots(len(panels), 1, figsize=(fig_w, 4.2 * len(panels) + 0.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, groups) in zip(axes[:, 0], panels):
        marks = {"na": False, "zeros": False, "small": False}
        keys = list(dict.fromkeys(k for g in groups for k, c in g["rates"].items() if c and c.get("rate") is not None))
        width = 0.8 / max(1, len(keys))
        handles = []
        for j, key in enumerate(keys):
            color = colors[j % len(colors)]
            xs = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(groups))]
            cells = [g["rates"].get(key) for g in groups]
            small = [bool(c) and c.get("rate") is not None and c["n"] < MIN_N for c in cells]
            drawn = rate_bars(ax, xs, cells, width, color, hatched=small)
            marks["na"] |= drawn["na"] > 0
            marks["zeros"] |= drawn["zeros"] > 0
            marks["small"] |= any(small)
            handles.append(Patch(color=color, label=key))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{g['group']}\n(n={g['examples']})" for g in groups], rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("%")
        ax.set_ylim(0, 105)
        ax.set_title(wrap_to_width(title, fig_w - 3, 11), fontsize=11)
        handles += marker_handles(marks["na"], marks["zeros"],
                                  f"hatched: fewer than {MIN_N} examples" if marks["small"] else None)
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.text(0.01, 0.005, "whiskers: 95 % CI", fontsize=9, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.3 / (4.2 * len(panels) + 0.6), 1, 1))
    return fig


def plot(bd: dict[str, Any], path: Any) -> bool:
    """breakdown.png (:func:`figure`) into ``path``; False without matplotlib or without a group to draw."""
    fig = figure(bd)
    if fig is None:
        return False
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return True
