"""What every section of BENCHMARKS.md shares: figures and tables in Markdown, the provenance lines under a table,
"not measured", and the selections of result files (by kind, by what their suite entry feeds).

Reads typed result files (:class:`~breaknli_fast.suite.result.ResultFile`) only: no model, no torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence

from breaknli_fast.bench.types import READ_KEYS
from breaknli_fast.engines.cpu_features import REPORTED
from breaknli_fast.suite.provenance import portable_command
from breaknli_fast.suite.result import Machine, ResultFile

STAGES = ("classify_ph", "generate", "relation", "evaluate")
MODE_SHORT = {"contradictive": "contr.", "entailed": "ent."}
DIRTY = "-dirty"
# the engine ``--engine auto --precision int8`` runs a classifier on (batch-invariant int8), where installed, and
# the int8 engines that answer the same whatever the batch (ort's per-tensor form does not: the comparison only)
DEFAULT_INT8 = ("openvino:int8", "ort:int8")
PER_TENSOR = ("ort:int8:quantization=dynamic-batch", "ort-int8-batch")
PROJECT = "breaknli-fast "  # the label prefix of the project's engines among other runtimes


# -- figures --------------------------------------------------------------------------------------------------

def f(x: Any, spec: str = ".2f", suffix: str = "") -> str:
    if x is None:
        return "–"
    try:
        return f"{x:{spec}}{suffix}"
    except (TypeError, ValueError):
        return str(x)


_MISSING = object()


def dig(obj: Any, *keys: Any, default: Any = None) -> Any:
    """``obj``'s key ``keys[0]``, then that one's ``keys[1]``, ...: a dataclass's field, a dict's key or a list's
    index, as the JSON it was read from held it: a field the JSON lacked reads as missing (``default``), as does
    any level that is missing or None on the way; a key a dataclass does not declare is looked up in its
    ``extra``. The optional chain of a figure that any level of a file may lack, read as the file holds it."""
    for k in keys:
        if obj is None:
            return default
        if isinstance(obj, dict):
            obj = obj.get(k, _MISSING)
        elif isinstance(obj, list):
            obj = obj[k] if isinstance(k, int) and -len(obj) <= k < len(obj) else _MISSING
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fld = obj.__dataclass_fields__.get(k)
            if fld is None:
                obj = (getattr(obj, "extra", None) or {}).get(k, _MISSING)
            else:
                read = getattr(obj, READ_KEYS, None)
                flat = fld.metadata.get("flatten")
                obj = getattr(obj, k) if read is None or flat or k in read or getattr(obj, k) is not None \
                    and getattr(obj, k) != _field_default(fld) else _MISSING
        else:
            return default
        if obj is _MISSING:
            return default
    return obj


def _field_default(fld: Any) -> Any:
    if fld.default is not dataclasses.MISSING:
        return fld.default
    if fld.default_factory is not dataclasses.MISSING:
        return fld.default_factory()
    return None


def blank(obj: Any) -> bool:
    """Whether ``obj`` holds nothing: None, an empty container, or an object read from an empty JSON object (what a
    renderer treats as "not there")."""
    if obj is None:
        return True
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        keys = getattr(obj, READ_KEYS, None)
        return keys is not None and not keys and not getattr(obj, "extra", None)
    try:
        return not obj
    except Exception:  # noqa: BLE001 - an object without truth value holds something
        return False


def yes_no(x: bool | None) -> str:
    return "–" if x is None else ("yes" if x else "**no**")


def table(header: list[str], rows: list[list[Any]]) -> str:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def model_label(name: Any) -> str:
    """A model as the reader can name it: a random-weight model built in one machine's cache by its architecture
    (``flan-t5-base (random weights)``), another absolute path by its folder's name."""
    text = str(name)
    if not text.startswith("/"):
        return text
    folder = Path(text).name
    if "random-weights" in text:
        return f"{folder.rsplit('-', 1)[0]} (random weights)"
    return folder


def base_label(label: Any) -> str:
    """An engine's label without the options a random-weight run adds (``validate=false``)."""
    return ":".join(x for x in str(label).split(":") if not x.startswith("validate="))


# -- provenance -----------------------------------------------------------------------------------------------

def load_pair(values: Any) -> str:
    return f(values[0], ".2f") if isinstance(values, list) and values else "–"


def commit_text(doc: ResultFile) -> str:
    """The commit a file was measured at; one whose tree git found changed (``-dirty``) is not cited as a commit:
    it is marked as measured on a tree that differs from every commit, with the file's note on why, and as not
    re-measured since."""
    c, note = str(doc.commit), doc.commit_note
    if not c.endswith(DIRTY):
        return f"commit `{c}`" + (f" ({note})" if note else "")
    return (f"**no clean commit**: measured on a tree git found changed from `{c[:-len(DIRTY)][:12]}`"
            + (f" ({note})" if note else "") + "; not re-measured since at a clean commit")


# bench files of the first schema were judged with percentile-bootstrap intervals, which are [0, 0] where no example
# differs: their verdicts overstate a match (stats.py's intervals replace them; run the entry again to update it)
OLD_BENCH_SCHEMA = "breaknli-fast-bench/1"
OLD_BENCH_NOTE = ("- **measured before the current parity statistics**: its intervals are percentile bootstraps, [0, 0] "
                  "where no example differs, so its *equivalent* verdicts are not supported; re-run its step of "
                  "`scripts/run_benchmarks.sh` for Tango / floored Student-t intervals")


def cpu_short(m: Machine | None, isa: bool = False) -> str:
    """The CPU's name with its family / model where recorded (``AMD EPYC (family 26 model 2)``: the targets'
    machine column, where two generations of one name must not read alike); ``isa``: its instruction sets too
    (the machine line)."""
    if m is None:
        return "None"
    cid = m.cpu_id or {}
    if not cid:
        return str(m.cpu)
    sets = (f"; {', '.join(cid.get('isa') or []) or 'none of ' + '/'.join(REPORTED)}") if isa else ""
    return f"{m.cpu} (family {cid.get('family')} model {cid.get('model')}{sets})"


def provenance(doc: ResultFile, label: str) -> str:
    """The lines under a table: command, date, commit, machine, file."""
    m = doc.machine or Machine()
    pk = m.packages or {}
    cores = f"{m.cores} cores" + (f" ({m.usable_cores} usable)" if m.usable_cores not in (None, m.cores) else "")
    env = ", ".join(f"{k}={v}" for k, v in (m.env or {}).items())
    machine = (f"{cpu_short(m, isa=True)}, {cores}, {f(m.memory_gib, '.1f')} GiB; Python {m.python}, "
               f"torch {pk.get('torch')}, onnxruntime {pk.get('onnxruntime')}, transformers {pk.get('transformers')}"
               + (f", ctranslate2 {pk['ctranslate2']}" if pk.get("ctranslate2") else "")
               + (f"; {env}" if env else "")
               + f"; load average (1 min) {load_pair(m.load_average_before)} before, "
                 f"{load_pair(m.load_average_after)} after")
    lines = [
        f"- command: `{portable_command(str(doc.command))}`",
        f"- measured {doc.date} ({f(doc.duration_s, '.0f')} s), {commit_text(doc)}, file `{label}/{doc.name}`",
        f"- machine: {machine}",
    ]
    if doc.kind == "bench" and getattr(doc.payload, "schema", None) == OLD_BENCH_SCHEMA:
        lines.append(OLD_BENCH_NOTE)
    return "\n".join(lines)


def not_measured(what: str, measurement: str, label: str) -> str:
    return (f"Not measured: no result file in `{label}` holds {what} "
            f"(`breaknli-fast suite measure {measurement}` measures it; `scripts/run_benchmarks.sh` runs it).")


# -- selections -----------------------------------------------------------------------------------------------

Select = Callable[[Sequence[ResultFile]], list[ResultFile]]


def feeds(key: str) -> Callable[[ResultFile], bool]:
    """Whether a file's suite entry feeds the subsection ``key``."""
    def pred(r: ResultFile) -> bool:
        return r.entry is not None and key in r.entry.feeds
    return pred


def entry_name(r: ResultFile) -> str:
    """The name of the suite entry that writes ``r`` (the file's stem where no entry names it)."""
    return r.entry.name if r.entry is not None else r.stem


def of_kind(kind: str, pred: Callable[[ResultFile], bool] | None = None) -> Select:
    return lambda rs: [r for r in rs if r.kind == kind and (pred is None or pred(r))]
