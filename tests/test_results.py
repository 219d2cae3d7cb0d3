"""Result files, typed: every file in benchmarks/results reads through ``read_result`` into its measurement's payload
type and gives back, through the one serialiser, every key it held (nulls included) and none it did not."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from breaknli_fast.bench.types import Diff, from_json, to_json
from breaknli_fast.suite.registry import payload_class
from breaknli_fast.suite.result import NotAResult, read_result

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
FILES = sorted(p.name for p in RESULTS.glob("*.json"))


def _same(a: object, b: object, where: str = "") -> list[str]:
    """Where two JSON values differ: a key one lacks, another value, another type (1 and 1.0 differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only in the file" for k in a if k not in b]
        out += [f"{where}/{k}: added" for k in b if k not in a]
        return out + [d for k in a if k in b for d in _same(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same(x, y, f"{where}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} != {b!r}"]


@pytest.mark.parametrize("name", FILES)
def test_every_result_file_reads_typed_and_round_trips(name: str) -> None:
    data = json.loads((RESULTS / name).read_text())
    doc = read_result(RESULTS / name)
    cls = payload_class(doc.kind)
    assert cls is not None, f"{name}: no measurement reads kind {doc.kind!r}"
    assert isinstance(doc.payload, cls) and dataclasses.is_dataclass(doc.payload)
    assert doc.name == name and doc.machine.cpu
    assert _same(data, to_json(doc)) == []


def test_a_null_the_file_holds_stays_and_a_key_it_lacks_is_not_added() -> None:
    """An ``omit_none`` field the file holds as null comes back as null; a field the file lacks comes back absent,
    unless the code gave it a value since (the reader of earlier versions dropped ``n_needed: null`` and added
    ``compliance: null`` to files written before the compliance tests)."""
    d = from_json(Diff, {"n": 10, "diff": 1.5, "ci": [0.1, 2.9], "n_needed": None})
    assert d.n_needed is None and to_json(d) == {"n": 10, "diff": 1.5, "ci": [0.1, 2.9], "n_needed": None}
    d.verdict = "different"
    assert to_json(d)["verdict"] == "different" and "method" not in to_json(d)
    from breaknli_fast.bench.loadgen.types import ScenarioRow

    row = {"engine": "ort:int8", "role": "classifier", "scenario": "offline", "metrics": {"result": "VALID"}}
    assert to_json(from_json(ScenarioRow, row)) == row
    assert "compliance" in to_json(ScenarioRow(engine="x"))  # built in code: every field, as before


def test_a_file_that_is_no_result_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text(json.dumps({"schema": "other"}))
    for name, why in (("a.json", "not readable JSON"), ("b.json", "not a result file")):
        with pytest.raises(NotAResult, match=why) as err:
            read_result(tmp_path / name)
        assert "\n" not in str(err.value)


def test_a_kind_no_measurement_writes_keeps_its_json(tmp_path: Path) -> None:
    doc = {"schema": "breaknli-fast-result/1", "kind": "someone_elses", "command": "x", "payload": {"a": [1, None]}}
    (tmp_path / "x.json").write_text(json.dumps(doc))
    r = read_result(tmp_path / "x.json")
    assert r.payload == {"a": [1, None]} and to_json(r) == doc
