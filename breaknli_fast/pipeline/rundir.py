"""The run directory: config.json, samples.jsonl (appended, resumable), report.json / report.md.

``samples.jsonl`` gets one line per (mode, example) as examples finish. Each chunk of lines
is appended with a single ``write`` on an ``O_APPEND`` descriptor and fsync'ed, so a killed
process leaves whole chunks; a torn last line (power loss, full disk) is detected on the next
start and cut off, and those examples are recomputed. Re-running the same command resumes.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from breaknli_fast.errors import UserError


class RunDirError(UserError):
    """A run directory that cannot be used (one-line message)."""


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    CONFIG = "config.json"
    SAMPLES = "samples.jsonl"
    STAGE_PH = "stage_premise_hypothesis.json"
    REPORT_JSON = "report.json"
    REPORT_MD = "report.md"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.repaired_bytes = 0  # bytes of a torn tail cut off on load

    # -- config / identity -----------------------------------------------------------------
    def prepare(self, config: dict[str, Any], identity: dict[str, Any], overwrite: bool = False) -> bool:
        """Create the directory or check that it holds the same run. Returns True when resuming."""
        cfg_path = self.path / self.CONFIG
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"{self.path} exists and is not a directory")
        resuming = False
        if cfg_path.exists():
            if overwrite:
                for name in (self.SAMPLES, self.STAGE_PH, self.REPORT_JSON, self.REPORT_MD, self.CONFIG):
                    (self.path / name).unlink(missing_ok=True)
            else:
                try:
                    old = json.loads(cfg_path.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as e:
                    raise RunDirError(f"cannot read {cfg_path}: {e}; use --overwrite to start afresh") from None
                old_id = old.get("identity", {})
                if old_id != identity:
                    diff = sorted(k for k in set(old_id) | set(identity) if old_id.get(k) != identity.get(k))
                    raise RunDirError(
                        f"{self.path} holds a run with different settings ({', '.join(diff)}); "
                        "use another --out/--name, or --overwrite to replace it"
                    )
                resuming = (self.path / self.SAMPLES).exists()
                config = dict(config, first_started=old.get("first_started", old.get("started")))
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cfg_path, dict(config, identity=identity))
        return resuming

    # -- samples ------------------------------------------------------------------------------
    def load_samples(self) -> list[dict[str, Any]]:
        """All complete records; a torn or unparsable last line is cut off the file."""
        p = self.path / self.SAMPLES
        if not p.exists():
            return []
        data = p.read_bytes()
        records: list[dict[str, Any]] = []
        good_end = 0
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # no newline: torn tail
                break
            line = data[pos:nl]
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    if data.find(b"\n", nl + 1) >= 0 and data[nl + 1 :].strip():
                        raise RunDirError(f"{p} is corrupt at byte {pos} (not the last line); use --overwrite") from None
                    break
                records.append(rec)
            pos = nl + 1
            good_end = pos
        if good_end < len(data):
            self.repaired_bytes = len(data) - good_end
            with open(p, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())
        return records

    def append_samples(self, records: Iterable[dict[str, Any]]) -> None:
        blob = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records).encode("utf-8")
        if not blob:
            return
        fd = os.open(self.path / self.SAMPLES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(blob)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- stage cache -------------------------------------------------------------------------
    def load_stage(self, key: str) -> dict[str, Any] | None:
        p = self.path / self.STAGE_PH
        if not p.exists():
            return None
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return obj if obj.get("key") == key else None

    def save_stage(self, obj: dict[str, Any]) -> None:
        write_json_atomic(self.path / self.STAGE_PH, obj)

    def write_report(self, report: dict[str, Any], markdown: str) -> None:
        write_json_atomic(self.path / self.REPORT_JSON, report)
        write_text_atomic(self.path / self.REPORT_MD, markdown)
