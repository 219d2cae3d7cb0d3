"""What the commands print fits an 80-column terminal: help wraps without splitting a word, a group's help gives
each command's whole first sentence, bench's options come in panels, and the result tables (the comparison of
several models, the --by breakdown) show every cell whole, in several tables where one would be too wide."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from breaknli_fast.cli import app, breakdown_tables
from breaknli_fast.cli_help import BREAK_AFTER, wrap_words
from breaknli_fast.cli_report import comparison_tables
from breaknli_fast.study.compare import Comparison

runner = CliRunner()
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
WIDTH = 80
COMMANDS = [[], ["run"], ["bench"], ["export"], ["env"], ["report"], ["mini"], ["mini", "train"], ["mini", "check"],
            ["generate"], ["generate", "aenli"], ["generate", "kinship"]]
BORDERS = "│╭╮╰╯─┃┏┓┗┛━┡┩╇┳┻┃└┘┌┐├┤┼┬┴"


def _help(args: list[str]) -> str:
    r = runner.invoke(app, [*args, "-h"], env={"COLUMNS": str(WIDTH)})
    assert r.exit_code == 0, r.output
    return r.output


def _lines(text: str) -> list[str]:
    """The printed lines without the boxes' borders."""
    return [ln.strip(BORDERS + " ") for ln in text.splitlines()]


def _sources(args: list[str]) -> list[str]:
    """Every text the help of ``args`` shows: the description and each option's help record."""
    import typer.main

    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("breaknli-fast", [], resilient_parsing=True)
    for name in args:
        cmd = cmd.get_command(ctx, name)
        ctx = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
    texts = [cmd.help or ""]
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx)
        if rec:
            texts += list(rec)
    return texts


def _pieces(word: str) -> list[str]:
    """A word cut after each character where wrap_words may break a long word."""
    return [p for p in re.split(f"(?<=[{re.escape(BREAK_AFTER)}])", word) if p]


@pytest.mark.parametrize("text,width", [
    ("Model label names to canonical, e.g. LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment.", 44),
    ("a bb ccc dddd eeeee ffffff", 7),
    ("x" * 30 + " tail", 8),
    ("ENGINE:PRECISION[:key=value...] (torch:fp32 is the reference, always measured first).", 20),
    ("", 10),
])
def test_wrap_words_breaks_at_spaces_and_a_long_word_only_after_punctuation(text, width):
    lines = wrap_words(text, width)
    assert all(cell_len(ln) <= width for ln in lines), lines
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost, nothing added
    words = text.split()
    pieces = [p for ln in lines for p in ln.split(" ")]
    for w in words:
        if cell_len(w) <= width:
            assert w in pieces, (w, lines)  # a word that fits a line is never split
    for p in pieces:
        if p not in words:  # a piece of a word longer than a line ends after punctuation or at the full width
            assert p[-1] in BREAK_AFTER or cell_len(p) == width or any(w.endswith(p) for w in words), (p, lines)


def test_a_long_word_breaks_after_its_comma_not_inside_entailment():
    assert wrap_words("LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment.", 44) == \
        ["LABEL_0=contradiction,LABEL_1=neutral,", "LABEL_2=entailment."]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "root")
def test_help_at_80_columns_splits_no_word(args):
    out = _help(args)
    assert max(cell_len(ln) for ln in out.splitlines()) <= WIDTH
    lines = _lines(out)
    for text in _sources(args):
        for word in text.split():
            if word in ("\b",):
                continue
            for piece in ([word] if cell_len(word) <= 40 else _pieces(word)):
                if cell_len(piece) <= 40:
                    assert any(piece in ln for ln in lines), f"{piece!r} of {word!r} is split in {' '.join(args)} -h"


@pytest.mark.parametrize("group", [[], ["mini"], ["generate"]], ids=lambda a: " ".join(a) or "root")
def test_group_help_gives_each_command_s_whole_first_sentence(group):
    import typer.main

    listing = "\n".join(_panels(_help(group))["Commands"])
    assert "..." not in listing  # click's cut of a long first sentence
    flat = " ".join(" ".join(_lines(listing)).split())
    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("breaknli-fast", [], resilient_parsing=True)
    for name in group:
        cmd = cmd.get_command(ctx, name)
        ctx = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
    for name in cmd.list_commands(ctx):
        first = " ".join(cmd.get_command(ctx, name).help.split("\n\n")[0].split())
        sentence = re.match(r"(.+?\.)(\s|$)", first).group(1)
        assert f"{name} {sentence}" in flat, (name, sentence)


def _panels(out: str) -> dict[str, list[str]]:
    panels: dict[str, list[str]] = {}
    title = None
    for ln in out.splitlines():
        m = re.match(r"╭─ (.+?) ─", ln)
        if m:
            title = m.group(1)
            panels[title] = []
        elif ln.startswith("╰"):
            title = None
        elif title is not None:
            panels[title].append(ln)
    return panels


@pytest.mark.parametrize("command", ["bench", "run"])
def test_every_option_of_bench_and_run_is_in_a_panel_of_its_group(command):
    panels = _panels(_help([command]))
    assert [ln for ln in panels["Options"] if "--" in ln] == [ln for ln in panels["Options"] if "--help" in ln]
    assert max(len(rows) for rows in panels.values()) <= 35, {t: len(r) for t, r in panels.items()}
    if command == "bench":
        assert {"Study", "Data", "Engines compared", "Timing", "Parity checks", "Output"} <= set(panels)


# -- result tables ------------------------------------------------------------------------------------------

MODELS = ["roberta-large-mnli", "deberta-v3-large-mnli-fever-anli", "bart-large-mnli"]


def _cell(rate: float | None, n: int) -> dict:
    return {"n": n, "rate": rate, "ci": None if rate is None else [max(0.0, rate - 9.5), min(100.0, rate + 9.5)]}


def _comparison(probe: str, datasets: list[str], blocks: dict[str, list[str]], measures: tuple[str, ...],
                header: tuple[str, str]) -> Comparison:
    rows = [(ds, b, lab) for ds in datasets for b, labels in blocks.items() for lab in labels]
    cells, accuracy = {}, {}
    for i, (ds, b, lab) in enumerate(rows):
        for j, m in enumerate(MODELS):
            rates = [100.0, 100.0] if (i + j) % 3 == 0 else [None, None] if (i + j) % 5 == 1 else [12.5, 37.25]
            cells[(ds, b, lab, m)] = [_cell(r, 1000 + i) for r in rates[:len(measures)]]
    for ds in datasets:
        for j, m in enumerate(MODELS):
            accuracy[(ds, m)] = _cell(80.0 + j, 2724)
    return Comparison(probe=probe, measures=measures, header=header, note="", models=MODELS, datasets=datasets,
                      rows=rows, cells=cells, accuracy=accuracy, runs=[], settings=[])


def _render(tables) -> list[str]:
    con = Console(width=WIDTH, record=True)
    for t in tables:
        con.print(t)
    text = con.export_text()
    assert "…" not in text  # rich crops a cell with an ellipsis
    lines = text.splitlines()
    assert max(cell_len(ln) for ln in lines) <= WIDTH
    return lines


@pytest.mark.parametrize("layout", ["breaknli", "permutation"])
def test_a_comparison_of_three_models_shows_every_cell_whole_at_80_columns(layout):
    from breaknli_fast.study.table_files import cell_text

    if layout == "breaknli":
        comp = _comparison("breaknli", ["taxinli", "my_pairs.tsv"],
                           {"Contradictive generation": ["Entailment", "Contradiction", "Overall"],
                            "Entailed generation": ["Entailment", "Neutral", "Contradiction", "Overall"]},
                           ("inequality", "relaxed"), ("generation", "ŷ = M(p, h)"))
    else:
        comp = _comparison("permutation", ["sample"],
                           {"Word-order permutations": ["A: accuracy, unpermuted", "Ω_max: some permutation accepted",
                                                        "P^c: mean c_i, originally correct"]},
                           ("rate",), ("", "metric"))
    lines = _render(comparison_tables(comp, WIDTH))
    for m in MODELS:
        assert any(m in ln for ln in lines), m
    for (ds, block, label, m), cells in comp.cells.items():
        rates, _, n = cell_text(cells)
        if rates != "–":
            assert any(f"{rates} ({n})" in ln for ln in lines), (rates, n)
        for word in label.split():
            if label in ("Entailment", "Neutral", "Contradiction"):
                continue  # shortened to E / N / C
            assert any(word in ln for ln in lines), word
    for ds in comp.datasets:
        assert any(ds in ln for ln in lines), ds
    # each table repeats the row labels beside the models that fit; together they hold every model once
    heads = [ln for ln in lines if any(m in ln for m in MODELS)]
    assert sum(ln.count(m) for ln in heads for m in MODELS) == len(MODELS)


def test_one_model_that_fits_keeps_one_table():
    comp = _comparison("breaknli", ["sample"], {"Entailed generation": ["Entailment", "Overall"]},
                       ("inequality", "relaxed"), ("generation", "ŷ = M(p, h)"))
    comp.models = MODELS[:1]
    assert len(comparison_tables(comp, WIDTH)) == 1


def test_the_breakdown_shows_every_rate_whole_at_80_columns():
    keys = ["A", "omega_max", "omega_rand", "omega_1", "P_c", "P_f", "contradictive inequality",
            "entailed inequality"]
    groups = [{"group": g, "value": g, "examples": 100 + i,
               "rates": {k: _cell(100.0 - j, 30 + i) for j, k in enumerate(keys)}}
              for i, g in enumerate(["genre=fiction", "genre=government", "coreference_reasoning"])]
    bd = {"genre": {"kind": "categorical", "groups": groups[:2]},
          "coreference_reasoning": {"kind": "category", "groups": groups[2:]}}
    lines = _render(breakdown_tables(bd, WIDTH))
    for g in groups:
        assert any(g["group"] in ln for ln in lines)
        row = " ".join(ln for ln in lines if g["group"] in ln)
        cells = re.findall(r"\d+\.\d\*?", " ".join(ln for ln in lines if ln.lstrip("│ ").startswith(g["group"])))
        assert len(cells) == len(keys), (g["group"], row, cells)


def _render_at(table, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_bench_tables_keep_engine_names_whole_at_80_columns():
    """At 80 columns the numbers wrap, not the names (``torch:fp3`` / ``2``, ``classif`` / ``ier`` were cut)."""
    from breaknli_fast.bench.compare import Comparison, compare_table
    from breaknli_fast.bench.loadgen.report import compliance_rich_table, scenario_rich_table
    from breaknli_fast.bench.report import rich_table
    from breaknli_fast.bench.types import BenchReport, from_json

    labels = ["torch:fp32", "ort:int8:quantization=static", "ort:fp32:clf.precision=int8", "cudagraph:bf16"]
    engines = [{"label": lab, "status": "ok", "reference": i == 0, "speed": {"speedup": {"end_to_end": 1.5},
                                                                           "summary": {"classifier_pairs_per_s": 1234}},
                "memory": {"peak_rss_mib": 2048}, "parity": {}} for i, lab in enumerate(labels)]
    report = from_json(BenchReport, {"probe": "accuracy", "reference": "torch:fp32", "engines": engines})
    bench = _render_at(rich_table(report, width=80))
    rows = [{"engine": lab, "role": role, "scenario": "single-stream", "metrics": {"result": "VALID", "p90_ms": 12.345,
             "samples_per_s": 81.0, "of_reference_pct": 99.95, "tier": "99.9 %", "ttft_p90_ms": 3.2,
             "tpot_p90_ms": 1.234}, "compliance": {"TEST01": {"result": "PASS", "speed_ratio": 1.02,
                                                           "outputs": {"equal": 64, "compared": 64}}}}
            for lab in labels for role in ("classifier", "study")]
    data = {"reference": "torch:fp32", "scenarios": rows, "engines": []}
    scen = _render_at(scenario_rich_table(data)) + _render_at(compliance_rich_table(data))
    for text in (bench, scen):
        cells = " ".join(line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 2)
        for lab in labels:  # whole, or broken after a ':' only
            assert lab in cells.replace(": ", ":"), text
        assert "torch:fp3 " not in cells and "classif " not in cells
    cmp = Comparison({}, {}, [], kind="scenarios")
    assert _render_at(compare_table(cmp)) is not None


def _whole(text: str, width: int) -> bool:
    """Every line of a rendered table ends with its right border: nothing cropped."""
    rows = [ln.rstrip() for ln in text.splitlines() if ln.strip() and ln.lstrip()[:1] in "┏┃┡│└"]
    return bool(rows) and all(ln[-1] in "┓┃┩│┘" and len(ln) <= width for ln in rows)


@pytest.mark.parametrize("width", [80, 100])
def test_compare_compliance_and_bench_tables_keep_every_column_at_80_and_100(width):
    """``bench --compare`` of two LoadGen benches kept its B / A column; the compliance table its last test; the
    bench table its result column beside an engine whose role ran on another engine (``ct2:int8 (classifier on
    ort)``), whose words stay whole."""
    from breaknli_fast.bench.compare import compare, compare_table
    from breaknli_fast.bench.loadgen.report import compliance_rich_table
    from breaknli_fast.bench.report import rich_table
    from breaknli_fast.bench.result import BenchResult
    from breaknli_fast.bench.types import BenchReport, from_json

    data = __import__("json").loads((ROOT / "tests" / "data" / "loadgen" / "loadgen-roberta-base.payload.json").read_text())
    text = _render_at(compare_table(compare(BenchResult(data), BenchResult(data)), width=width), width)
    assert "B / A" in text and _whole(text, width), text
    rows = [{"engine": lab, "role": "classifier", "scenario": sc, "metrics": {"result": "VALID"}, "compliance": {
        t: {"result": "PASS", "speed_ratio": 1.02, "outputs": {"equal": 64, "compared": 64}}
        for t in ("TEST01", "TEST04", "TEST05")}} for lab in ("torch:fp32", "ort:int8:quantization=static")
        for sc in ("offline", "single-stream")]
    text = _render_at(compliance_rich_table({"reference": "torch:fp32", "scenarios": rows, "engines": []}, width),
                      width)
    assert all(t in text for t in ("TEST01", "TEST04", "TEST05")) and _whole(text, width), text
    engines = [{"label": "torch:fp32", "status": "ok", "reference": True, "speed": {"speedup": {"end_to_end": 1.0}}},
               {"label": "ct2:int8", "engine": "ct2", "status": "ok", "spec": {"config": {"engine": "ct2"}},
                "info": {"classifier": {"engine": "ort"}}, "speed": {"speedup": {"end_to_end": 2.1}}, "parity": {}}]
    report = from_json(BenchReport, {"probe": "accuracy", "reference": "torch:fp32", "engines": engines})
    text = _render_at(rich_table(report, width=width), width)
    assert _whole(text, width) and "result" in text, text
    cells = " ".join(ln.split("│")[1].strip() for ln in text.splitlines() if ln.count("│") > 2)
    assert "ct2:int8 (classifier on ort)" in cells.replace(": ", ":"), text
