"""The comparison table of several run directories: models side by side, as in BreakNLI's result table.

BreakNLI's publication reports one table: rows dataset × generation mode × ŷ = M(p, h) (and Overall, pooled over
the labels), one column per NLI model with the model's accuracy in its header, each cell "inequality % / relaxed
%". :func:`compare` builds that table from any run directories (a study's cells, or runs made by separate
commands, here or on other machines) through the probe's :meth:`~breaknli_fast.probes.base.Probe.comparison`, so
the other probes get their own rows the same way. Each cell carries n and the 95 % intervals of its rates.

Runs are only put side by side when they measure the same thing: every setting but the model (and the settings
that belong to it: label map, seq2seq prompt and method) and the dataset must agree, and runs of one dataset must
hold the same examples; otherwise :class:`CompareError` names the first setting that differs. The table's files (Markdown, CSV, LaTeX, a
plot): :mod:`breaknli_fast.study.table_files`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.errors import UserError

STUDY_FILE = "study.json"
# identity keys that belong to the model of a column, and to the data of a row; every other key is shared
MODEL_KEYS = ("classifier", "label_map", "nli_prompt", "nli_method")
DATA_KEYS = ("dataset", "split", "limit", "sample", "columns")


class CompareError(UserError):
    """Run directories that cannot be put in one table (one-line message)."""


@dataclass
class Run:
    """One finished run directory: its config.json, report.json and (read on demand) samples.jsonl."""

    path: Path
    config: dict[str, Any]
    report: dict[str, Any]
    model: str = ""  # column label
    dataset: str = ""  # row label
    _records: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def probe(self) -> str:
        return str(self.config.get("probe") or self.report.get("probe"))

    @property
    def identity(self) -> dict[str, Any]:
        return self.config.get("identity") or {}

    @property
    def records(self) -> list[dict[str, Any]]:
        """samples.jsonl's complete records (read only: a torn last line is skipped, not cut off)."""
        if self._records is None:
            self._records = read_records(self.path / "samples.jsonl")
        return self._records


def read_records(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CompareError(f"cannot read {path}: {e.strerror or e}") from None
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is a torn line or empty
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CompareError(f"cannot read {path}: {e}") from None
    if not isinstance(obj, dict):
        raise CompareError(f"cannot read {path}: not a JSON object")
    return obj


def study_cells(path: Path) -> list[Path] | None:
    """The run directories of a study directory (study.json), in the study's order; None for another directory."""
    p = path / STUDY_FILE
    if not p.exists():
        return None
    study = _read_json(p)
    return [path / c["dir"] for c in study.get("cells", [])]


def load_run(path: str | Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"{path} is not a directory")
    try:
        config = _read_json(path / "config.json")
    except FileNotFoundError:
        raise CompareError(f"{path} is not a run directory (no config.json)") from None
    try:
        report = _read_json(path / "report.json")
    except FileNotFoundError:
        raise CompareError(f"{path} has no report.json: the run has not finished (re-run its command to "
                           "resume it)") from None
    return Run(path, config, report)


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """The runs of ``paths`` in order (a study directory stands for its cells), labelled for the table."""
    if not paths:
        raise CompareError("give at least one run directory (or a study directory)")
    dirs: list[Path] = []
    for p in map(Path, paths):
        cells = study_cells(p) if p.is_dir() else None
        dirs.extend(cells if cells is not None else [p])
    seen: set[Path] = set()
    runs = []
    for d in dirs:
        key = d.resolve()
        if key in seen:  # the same run twice would be one column twice: a slip, said rather than dropped
            raise CompareError(f"{d} is given twice (directly, or as a cell of a study directory also given)")
        seen.add(key)
        runs.append(load_run(d))
    label_runs(runs)
    return runs


def _short(name: str) -> str:
    return str(name).rstrip("/").split("/")[-1] or str(name)


def _model_key(run: Run) -> str:
    """What makes two runs' classifiers the same column: the model files' hashes (a hub id where there are none)."""
    return json.dumps(run.identity.get("classifier", run.config.get("classifier")), sort_keys=True)


def label_runs(runs: Sequence[Run]) -> None:
    """Column labels (the classifier's last path part, the full name where two models would share it) and row
    labels (the dataset as given; a file by its name)."""
    names: dict[str, str] = {}
    for r in runs:
        names.setdefault(_model_key(r), str(r.config.get("classifier")))
    shorts: dict[str, set[str]] = {}
    for k, n in names.items():
        shorts.setdefault(_short(n), set()).add(k)
    for r in runs:
        full = names[_model_key(r)]
        r.model = _short(full) if len(shorts[_short(full)]) == 1 else full
        ds = r.config.get("dataset") or {}
        name = str(ds.get("name") if isinstance(ds, dict) else ds)
        r.dataset = _short(name) if Path(name).suffix else name


# -- settings ----------------------------------------------------------------------------------------------

def differences(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Every difference between two JSON values as (dotted path, value in ``a``, value in ``b``), in key order
    (empty when equal)."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, a, b)]


def _diff_path(a: Any, b: Any, prefix: str) -> str | None:
    """The dotted path of the first difference between two JSON values (None when equal)."""
    return next((d for d, _, _ in differences(a, b, prefix)), None)


def setting_values(a: Any, b: Any, most: int = 3) -> str:
    """The settings that differ between two JSON values with both values, for a one-line message:
    ``loop.seed 0 vs 3; limit 4 vs 5`` (``most`` of them, then how many more)."""
    diffs = differences(a, b)
    text = "; ".join(f"{d} {_show(va)} vs {_show(vb)}" for d, va, vb in diffs[:most])
    return text + (f"; {len(diffs) - most} more" if len(diffs) > most else "")


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _refuse(what: str, a: Run, b: Run, va: Any, vb: Any, hint: str = "") -> CompareError:
    return CompareError(f"cannot compare these runs: {what} differs ({a.path}: {_show(va)}; {b.path}: {_show(vb)})"
                        + (f"; {hint}" if hint else ""))


def _data_identity(run: Run) -> dict[str, Any]:
    """The data of a run wherever it was made: the dataset's source without its local path, split, limit, columns."""
    ident = run.identity
    src = dict(ident.get("dataset") or {}) if isinstance(ident.get("dataset"), dict) else {"name": ident.get("dataset")}
    if src.get("type") in ("embedded", "file"):
        src.pop("path", None)  # where the package or the file lies on that machine
    return {"dataset": src, **{k: ident.get(k) for k in DATA_KEYS if k != "dataset"}}


def records_digest(run: Run) -> str:
    """The examples a run holds (group, id, premise, hypothesis, gold of every record), whatever the model."""
    h = hashlib.sha256()
    for key in sorted((str(r.get("mode", r.get("group"))), str(r.get("id")), str(r.get("premise")),
                       str(r.get("hypothesis")), str(r.get("gold"))) for r in run.records):
        h.update(json.dumps(key).encode())
    return h.hexdigest()


def auto_fp32(run: Run) -> bool:
    """A run of ``--engine auto`` at fp32 for every role: ONNX Runtime where a model's export validated against the
    torch fp32 reference, torch where it did not (a note in config.json), i.e. the reference's results either way."""
    eng = run.config.get("engine") or {}
    return (eng.get("requested") == "auto" and run.identity.get("precision") == "fp32"
            and "classifier_precision" not in run.identity and run.identity.get("mlm_precision") in (None, "fp32"))


def check_compatible(runs: Sequence[Run]) -> None:
    """Refuse (CompareError, naming the setting) runs that do not measure the same thing: another probe, any
    shared setting (generator, engine, precision, the probe's settings, ...), for one dataset other data, for one
    model other model settings, or two runs of the same model on the same dataset. The engine may differ between
    runs of ``--engine auto`` at fp32 (:func:`auto_fp32`), where it is a speed choice, not a setting."""
    first = runs[0]
    free = MODEL_KEYS + DATA_KEYS + (("engine",) if all(auto_fp32(r) for r in runs) else ())
    for r in runs[1:]:
        if r.probe != first.probe:
            raise _refuse("the probe", first, r, first.probe, r.probe)
        a = {k: v for k, v in first.identity.items() if k not in free}
        b = {k: v for k, v in r.identity.items() if k not in free}
        d = _diff_path(a, b, "")
        if d is not None:
            raise _refuse(f"the setting {d}", first, r, _get(a, d), _get(b, d),
                          "only the classifier and the dataset may differ")
    by_data: dict[str, Run] = {}
    by_model: dict[str, Run] = {}
    cells: dict[tuple[str, str], Run] = {}
    for r in runs:
        other = by_data.setdefault(r.dataset, r)
        if other is not r:
            d = _diff_path(_data_identity(other), _data_identity(r), "")
            if d is not None:
                raise _refuse(f"for dataset {r.dataset}, {d}", other, r, _get(_data_identity(other), d),
                              _get(_data_identity(r), d))
            if records_digest(other) != records_digest(r):
                raise CompareError(f"cannot compare these runs: {other.path} and {r.path} hold different examples "
                                   f"of dataset {r.dataset} (another file under the same name, or an unfinished run)")
        mk = _model_key(r)
        other = by_model.setdefault(mk, r)
        if other is not r:
            for k in MODEL_KEYS[1:]:
                if other.identity.get(k) != r.identity.get(k):
                    raise _refuse(f"for classifier {r.model}, the setting {k}", other, r, other.identity.get(k),
                                  r.identity.get(k))
        prev = cells.setdefault((r.dataset, mk), r)
        if prev is not r:
            raise CompareError(f"cannot compare these runs: {prev.path} and {r.path} are both {r.model} on "
                               f"{r.dataset}; give one of them")


# -- the table ---------------------------------------------------------------------------------------------

@dataclass
class Comparison:
    """The table: ``rows`` (dataset, block, row label) in order, ``models`` in column order, per (row, model)
    one rate cell per measure, and per (dataset, model) the accuracy of M on (p, h)."""

    probe: str
    measures: tuple[str, ...]
    header: tuple[str, str]
    note: str
    models: list[str]
    datasets: list[str]
    rows: list[tuple[str, str, str]]
    cells: dict[tuple[str, str, str, str], list[dict[str, Any]]]
    accuracy: dict[tuple[str, str], dict[str, Any] | None]
    runs: list[Run]
    settings: list[str]


def probe_type(name: str) -> Any:
    from breaknli_fast.probes import probe_class

    return probe_class(name)


def compare(runs: Sequence[Run]) -> Comparison:
    """The comparison table of ``runs`` (checked with :func:`check_compatible`), columns in the order the models
    first appear, rows in the order the datasets first appear."""
    runs = list(runs)
    if not runs:
        raise CompareError("no run to compare")
    check_compatible(runs)
    cls = probe_type(runs[0].probe)
    models = list(dict.fromkeys(r.model for r in runs))
    datasets = list(dict.fromkeys(r.dataset for r in runs))
    rows: list[tuple[str, str, str]] = []
    cells: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    accuracy: dict[tuple[str, str], dict[str, Any] | None] = {}
    for ds in datasets:
        for r in (x for x in runs if x.dataset == ds):
            comp = cls.comparison(r.report)
            accuracy[(ds, r.model)] = comp.get("accuracy")
            for block, block_rows in comp.get("blocks", []):
                for label, row_cells in block_rows:
                    if (ds, block, label) not in rows:
                        rows.append((ds, block, label))
                    cells[(ds, block, label, r.model)] = list(row_cells)
    return Comparison(probe=runs[0].probe, measures=tuple(cls.comparison_measures),
                      header=tuple(getattr(cls, "comparison_header", ("", "metric"))),  # type: ignore[arg-type]
                      note=str(getattr(cls, "comparison_note", "")), models=models, datasets=datasets, rows=rows,
                      cells=cells, accuracy=accuracy, runs=runs, settings=settings_lines(runs))


def settings_lines(runs: Sequence[Run]) -> list[str]:
    """The settings every column shares, one line each (for the table's caption)."""
    run = runs[0]
    c, ident = run.config, run.identity
    eng = c.get("engine") or {}
    engines = list(dict.fromkeys(str(r.identity.get("engine")) for r in runs))
    if len(engines) > 1:
        per = "; ".join(f"{e}: " + ", ".join(f"{r.model} on {r.dataset}" for r in runs if r.identity.get("engine") == e)
                        for e in engines)
        engine = (f"engine auto {ident.get('precision')} on {ident.get('device')} (ONNX Runtime where a model's export "
                  f"validated against torch fp32, else torch; {per})")
    else:
        engine = f"engine {ident.get('engine')} {ident.get('precision')} on {ident.get('device')}"
    out = [f"probe {run.probe}; {engine}"
           + (f" (classifier {eng.get('classifier_precision')}, generator {eng.get('generator_precision')})"
              if ident.get("classifier_precision") else "")]
    if c.get("generator"):
        out.append(f"generator {c['generator']}")
    if c.get("mlm"):
        out.append("masked LMs " + ", ".join(map(str, c["mlm"])))
    for key in ("loop", "permutation", "merge", "accuracy"):
        if isinstance(ident.get(key), dict):
            parts = [p for k, v in ident[key].items() for p in [setting_text(k, v, ident[key])] if p]
            if parts:
                out.append(f"{SECTION_NAMES.get(key, key)}: " + "; ".join(parts))
    return out


SECTION_NAMES = {"loop": "BreakNLI loop", "permutation": "permutations", "merge": "MERGE", "accuracy": "accuracy"}
DECODING_NAMES = {"sampling": "sampling", "beam": "beam search", "diverse-beam": "diverse beam search",
                  "greedy": "greedy decoding"}


def _plain(value: Any) -> str:
    """A setting's value as words: yes / no, lists joined with "and", a dict as "key value" pairs."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "default"
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return " and ".join(items) if len(items) <= 2 else ", ".join(items[:-1]) + " and " + items[-1]
    if isinstance(value, dict):
        return ", ".join(f"{str(k).replace('_', ' ')} {_plain(v)}" for k, v in value.items() if v is not None)
    return str(value)


def _decoding_text(d: dict[str, Any], k: Any) -> str:
    strategy = str(d.get("strategy"))
    text = DECODING_NAMES.get(strategy, strategy)
    if strategy == "sampling":
        text += (f" (top-p {d.get('top_p')}, top-k {d.get('top_k') or 'off'}, temperature {d.get('temperature')}, "
                 f"{d.get('sampler')} sampler)")
    elif strategy == "beam":
        text += f" ({d.get('num_beams') or k} beams)"
    elif strategy == "diverse-beam":
        text += (f" ({d.get('num_beams') or k} beams in {d.get('num_beam_groups') or d.get('num_beams') or k} groups, "
                 f"diversity penalty {d.get('diversity_penalty')})")
    tokens = f"at most {d.get('max_new_tokens')} new tokens"
    if d.get("min_new_tokens"):
        tokens = f"{d['min_new_tokens']} to {d.get('max_new_tokens')} new tokens"
    return f"decoding: {text}, {tokens}"


def setting_text(key: str, value: Any, section: dict[str, Any]) -> str | None:
    """One setting of a probe's identity (``key``: ``value``, ``section``: the probe's other settings) as a reader
    says it ("relation filter: both directions"); None for what does not change a result (chunk size, prompts:
    config.json holds them). A setting this table does not know reads "key words: value"."""
    bidirectional = section.get("bidirectional", True)
    if key in ("chunk_size", "prompts"):
        return None
    text = {
        "modes": lambda v: f"{_plain(v)} mode{'s' * (isinstance(v, (list, tuple)) and len(v) != 1)}",
        "k": lambda v: f"K = {v} candidates per hypothesis",
        "u": lambda v: f"U = {v} distinct kept",
        "s": lambda v: f"S = {v} on target evaluated",
        "bidirectional": lambda v: ("relation filter: both directions ((h, h′) and (h′, h))" if v else
                                    "relation filter: one direction ((h, h′) only)"),
        "relation_filter": lambda v: None if not bidirectional else (
            "(h′, h) asked only where it can change the verdict" if v == "lazy" else
            "both directions asked of every kept candidate" if v == "full" else f"relation checks: {v}"),
        "decoding": lambda v: _decoding_text(v, section.get("k")) if isinstance(v, dict) else f"decoding: {v}",
        "q": lambda v: f"q = {v} permutations per example",
        "scheme": lambda v: {"both": "premise and hypothesis permuted", "hyp": "hypothesis permuted"}.get(v, f"scheme: {v}"),
        "save_permutations": lambda v: "every permuted pair kept in samples.jsonl" if v else None,
        "seeds": lambda v: f"{v} random draws of the variants",
        "per_pos": lambda v: f"{v} variants per POS category and problem in each draw",
        "min_suggestions": lambda v: f"words with fewer than {v} suggestions dropped",
        "top_k": lambda v: f"{v} suggestions asked of each masked LM",
        "pos_filter": lambda v: "POS filter: on" if v else "POS filter: off",
        "prob_filter": lambda v: {"below": "suggestions no more probable than the original",
                                  "reversed": "suggestions more probable than the original",
                                  "off": "suggestions of any probability"}.get(v, f"probability filter: {v}"),
        "pattern": lambda v: {"draws": "pattern accuracy per draw, averaged over the draws",
                              "pooled": "pattern accuracy over all distinct variants at once"}.get(v, f"pattern: {v}"),
        "seed": lambda v: f"seed {v}",
    }.get(key)
    return text(value) if text is not None else f"{key.replace('_', ' ')}: {_plain(value)}"
