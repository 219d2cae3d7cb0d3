"""Result files, typed: :class:`ResultFile` (the provenance around a payload) whose ``payload`` is the type of the
measurement that wrote it, found by the file's ``kind`` (:func:`breaknli_fast.suite.registry.payload_class`).

:func:`read_result` reads any result file, of this package's measurements or of the scripts that measured before
them (their kinds and payloads are the same), and :func:`~breaknli_fast.bench.types.to_json` of what it returns
gives back every key the file held, nulls included, and none it did not (:func:`breaknli_fast.bench.types.from_json`
remembers the keys). :func:`load_results` reads a folder of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from breaknli_fast.bench.types import OMIT, READ_KEYS, from_json
from breaknli_fast.errors import UserError
from breaknli_fast.suite.provenance import SCHEMA

SMOKE_KEY = "smoke"  # a result file written at the smoke sizes says so at its top level


@dataclass
class Machine:
    """Where a measurement ran (:func:`breaknli_fast.suite.provenance.machine`)."""

    cpu: str | None = None
    # family, model, the engines' instruction sets (engines.cpu_features.cpu_identity); None: not recorded
    cpu_id: dict[str, Any] | None = None
    cores: int | None = None
    usable_cores: int | None = None
    memory_gib: float | None = None
    python: str | None = None
    platform: str | None = None
    breaknli_fast: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    load_average_before: list[float] | None = None
    load_average_after: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MeasurementCall:
    """What measured a file: the measurement, its arguments (as a suite entry names them) and the suite entry."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    entry: str | None = field(default=None, metadata=OMIT)


@dataclass
class ResultFile:
    """One result file: its provenance and its typed payload (``payload``: the dataclass of its kind; a kind no
    registered measurement writes keeps its JSON). ``path`` is the file it was read from and ``entry`` the suite
    entry that writes it (set by the reader, never written)."""

    schema: str = SCHEMA
    kind: str = ""
    command: str | None = None
    measurement: MeasurementCall | None = field(default=None, metadata=OMIT)
    date: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    commit: str | None = None
    commit_note: str | None = field(default=None, metadata=OMIT)  # why the commit reads as it does (-dirty)
    machine: Machine = field(default_factory=Machine)
    payload: Any = None
    smoke: bool | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)

    path: ClassVar[Path | None] = None  # set per instance by the reader
    entry: ClassVar[Any] = None  # the suite entry (breaknli_fast.suite.spec.SuiteEntry) that writes it, or None

    @property
    def name(self) -> str:
        """The file's name (``bench-mini.json``)."""
        return self.path.name if self.path is not None else ""

    @property
    def stem(self) -> str:
        return self.path.stem if self.path is not None else ""


class NotAResult(UserError):
    """A file that is not a result file (not JSON, another schema)."""


def result_of(doc: dict[str, Any], path: Path | None = None) -> ResultFile:
    """The typed :class:`ResultFile` of a result document (``path``: where it was read)."""
    from breaknli_fast.suite.registry import payload_class

    payload = doc.get("payload")
    out = from_json(ResultFile, {k: v for k, v in doc.items() if k != "payload"})
    cls = payload_class(str(doc.get("kind")))
    out.payload = from_json(cls, payload) if cls is not None and isinstance(payload, dict) else payload
    if "payload" in doc:
        object.__setattr__(out, READ_KEYS, getattr(out, READ_KEYS) | {"payload"})
    out.path = path
    return out


def read_result(path: str | Path) -> ResultFile:
    """The typed result file at ``path``; a file that is not one is a one-line :class:`NotAResult`."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotAResult(f"{p}: not readable JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise NotAResult(f"{p}: not a result file (schema {SCHEMA})")
    return result_of(doc, p)


def load_results(folder: str | Path, smoke: bool = False) -> tuple[list[ResultFile], list[str]]:
    """Every result file of ``folder`` (sorted by name), typed; and one line per JSON file that is not a result
    file, or that holds smoke figures (``"smoke": true``, written at the suite's smoke sizes) unless ``smoke``."""
    results, problems = [], []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            doc = read_result(p)
        except NotAResult as e:
            problems.append(str(e))
            continue
        if doc.smoke and not smoke:  # written at the suite's smoke sizes: its figures mean nothing
            problems.append(f"{p}: smoke figures (suite run --smoke), not a measurement: not rendered")
            continue
        results.append(doc)
    return results, problems


def mark_smoke(path: Path) -> None:
    """Say in the result file ``path`` that its figures come from the smoke sizes (``"smoke": true``)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(doc, dict):
        doc[SMOKE_KEY] = True
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(path)
