"""The run directory: config.json, samples.jsonl (appended, resumable), report.json / report.md.

``samples.jsonl`` gets one line per (mode, example) as examples finish. Each chunk of lines
is appended with a single ``write`` on an ``O_APPEND`` descriptor and fsync'ed, so a killed
process leaves whole chunks; a torn last line (power loss, full disk) is detected on the next
start and cut off, and those examples are recomputed. Re-running the same command resumes.

One process at a time: :meth:`RunDir.lock` takes an exclusive ``flock`` on ``.lock`` (which records the
holder's PID), so a second run into the same directory stops with a one-line error instead of appending
every record twice; :meth:`RunDir.unlock` removes ``.lock`` again (and the directory, when the lock created it
and a run that failed early left nothing in it). ``invocations.jsonl`` keeps one line of timings per invocation that did work, so the
report's throughput covers the runs that computed the records, not a resume that had nothing left to do.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from breaknli_fast.errors import UserError
from breaknli_fast.study.compare import setting_values


class RunDirError(UserError):
    """A run directory that cannot be used (one-line message)."""


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def _umask() -> int:
    """The process's umask (read from /proc where there is one: setting it to read it races with threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, with the permissions of a file the
    process creates (0666 less the umask, like samples.jsonl; a temporary file is owner-only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _reason(e: OSError) -> str:
    """The OS's words for an error (``Permission denied``, ``Not a directory``)."""
    return e.strerror or (os.strerror(e.errno) if e.errno else str(e))


class RunDir:
    CONFIG = "config.json"
    SAMPLES = "samples.jsonl"
    REPORT_JSON = "report.json"
    REPORT_MD = "report.md"
    INVOCATIONS = "invocations.jsonl"
    LOCK = ".lock"
    BREAKDOWN_PNG = "breakdown.png"
    OUTPUTS = (SAMPLES, REPORT_JSON, REPORT_MD, INVOCATIONS, BREAKDOWN_PNG, CONFIG)  # what --overwrite removes (with every stage_*.json)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.repaired_bytes = 0  # bytes of a torn tail cut off on load
        self._lock_fd: int | None = None
        self._created = False  # the lock created the directory

    # -- creation and the lock ----------------------------------------------------------------
    def create(self) -> None:
        """Make the directory (and its parents); an unusable path is a one-line RunDirError."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"cannot use {self.path} as the run directory: it exists and is not a directory")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create the run directory {self.path}: {_reason(e)}") from None

    def lock(self) -> None:
        """Create the directory and hold an exclusive lock on it until :meth:`unlock` or the process ends.
        A directory locked by another process raises RunDirError naming that process."""
        self._created = not self.path.exists()
        self.create()
        lock_path = self.path / self.LOCK
        while True:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as e:
                self._remove_if_empty()
                raise RunDirError(f"cannot write in the run directory {self.path}: {_reason(e)}") from None
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX: no lock
                self._lock_fd = fd
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
                finally:
                    os.close(fd)
                raise RunDirError(f"{self.path} is in use by another run (PID {holder}); wait for it to finish, "
                                  "or use another --out") from None
            try:  # the holder before us may have removed .lock between our open and our flock: lock the new one
                same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def __enter__(self) -> "RunDir":
        self.lock()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unlock()

    def unlock(self) -> None:
        """Release the lock and remove ``.lock`` (a finished run leaves none behind); a directory that the lock
        created and nothing was written into is removed too."""
        if self._lock_fd is not None:
            try:
                (self.path / self.LOCK).unlink(missing_ok=True)  # while still held: no one locks a file we remove
            except OSError:
                pass
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None
            self._remove_if_empty()

    def _remove_if_empty(self) -> None:
        if getattr(self, "_created", False):
            try:
                self.path.rmdir()  # only when empty
            except OSError:
                pass

    # -- config / identity -----------------------------------------------------------------
    def check(self, identity: dict[str, Any], overwrite: bool = False) -> tuple[bool, dict[str, Any] | None]:
        """Whether this directory can take the run ``identity``, before anything is computed or written.
        Returns (same run: resume, the old config or None). A directory holding finished examples of a run
        with other settings is refused unless ``overwrite``; one without finished examples (a run that stopped
        before its first chunk) is simply re-used."""
        cfg_path = self.path / self.CONFIG
        if overwrite:
            return False, None
        if not cfg_path.exists():
            if self.has_samples():  # finished records of a run whose settings are unknown: never replaced quietly
                raise RunDirError(f"{self.path} holds {self.SAMPLES} but no {self.CONFIG}, so its settings are "
                                  "unknown; use another --out, or --overwrite to replace it")
            return False, None
        try:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            if not self.has_samples():
                return False, None
            raise RunDirError(f"cannot read {cfg_path}: {e}; use --overwrite to start afresh") from None
        old_id = old.get("identity", {}) if isinstance(old, dict) else {}
        identity = json.loads(json.dumps(identity, default=str))  # as config.json holds it (lists, not tuples)
        if old_id == identity or _portable_identity(old_id) == identity:
            return True, old
        if self.has_samples() and old_id.get("probe") and old_id.get("probe") != identity.get("probe"):
            raise RunDirError(f"{self.path} holds a run of the {old_id['probe']} probe, not of "
                              f"{identity.get('probe')}; use another --out, or --overwrite to replace it")
        if self.has_samples():
            raise RunDirError(f"{self.path} holds a run with different settings (its vs this run's: "
                              f"{setting_values(old_id, identity)}); use another --out, or --overwrite to replace it")
        return False, None

    def prepare(self, config: dict[str, Any], identity: dict[str, Any], overwrite: bool = False) -> bool:
        """Create the directory, check it (:meth:`check`) and write config.json. Returns True when resuming
        (the directory holds this run's samples.jsonl). Starting afresh removes the earlier run's files."""
        self.create()
        same, old = self.check(identity, overwrite)
        self.other_code = None
        if same and old is not None:
            earlier = writers(old)
            now = _writer(config)
            config = dict(config, first_started=old.get("first_started", old.get("started")),
                          written_by=earlier + [now])
            if earlier and other_code(earlier[-1], now):
                self.other_code = earlier[-1]
        else:
            config = dict(config, written_by=[_writer(config)])
        if not (same and old is not None):
            for name in (*self.OUTPUTS, *(p.name for p in self.path.glob("stage_*.json"))):
                try:
                    (self.path / name).unlink(missing_ok=True)
                except OSError as e:
                    raise RunDirError(f"cannot replace {self.path / name}: {_reason(e)}") from None
        self._write_json(self.path / self.CONFIG, dict(config, identity=identity))
        return same and (self.path / self.SAMPLES).exists()

    def resume_warning(self) -> str | None:
        """After :meth:`prepare` resumed a run: a line when its earlier records came from other code (another
        version or commit of breaknli-fast, or other sources: :func:`other_code`; config.json's ``written_by`` lists
        every invocation's)."""
        if not getattr(self, "other_code", None):
            return None
        o, now = self.other_code, _writer({})
        return (f"the earlier records of {self.path} were written by other code, breaknli-fast "
                f"{o.get('breaknli_fast')} ({_code_words(o)}), not this {now.get('breaknli_fast')} "
                f"({_code_words(now)}): records of both are in one run (config.json's written_by lists each "
                "invocation's)")

    def has_samples(self) -> bool:
        p = self.path / self.SAMPLES
        return p.exists() and p.stat().st_size > 0

    def _write_json(self, path: Path, obj: Any) -> None:
        try:
            write_json_atomic(path, obj)
        except OSError as e:
            raise RunDirError(f"cannot write {path}: {_reason(e)}") from None

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

    def samples_end(self) -> int:
        """The size of samples.jsonl now (0 when there is none): where this invocation's records start."""
        p = self.path / self.SAMPLES
        return p.stat().st_size if p.exists() else 0

    def records_since(self, offset: int) -> int:
        """The whole lines of samples.jsonl after byte ``offset`` (:meth:`samples_end`): the records an invocation
        wrote, however it stopped."""
        try:
            with open(self.path / self.SAMPLES, "rb") as fh:
                fh.seek(offset)
                return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
        except OSError:  # none written (no file), or it cannot be read: nothing to count
            return 0

    def append_samples(self, records: Iterable[dict[str, Any]]) -> None:
        blob = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records).encode("utf-8")
        if not blob:
            return
        self._append(self.path / self.SAMPLES, blob)

    def _append(self, path: Path, blob: bytes) -> None:
        """One write on an O_APPEND descriptor, fsync'ed (whole lines or, at worst, a torn last line)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # less the umask
            try:
                view = memoryview(blob)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise RunDirError(f"cannot write {path}: {_reason(e)}") from None

    # -- timings of the invocations that did work ---------------------------------------------
    def append_invocation(self, timings: dict[str, Any]) -> None:
        self._append(self.path / self.INVOCATIONS, (json.dumps(timings, default=str) + "\n").encode("utf-8"))

    def load_invocations(self) -> list[dict[str, Any]]:
        p = self.path / self.INVOCATIONS
        if not p.exists():
            return []
        out = []
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line: that invocation's timings are lost, its records are not
            if isinstance(rec, dict):
                out.append(rec)
        return out

    # -- stage cache -------------------------------------------------------------------------
    def stage_path(self, name: str) -> Path:
        """The file of a probe's stage cache ``name`` (``stage_<name>.json``)."""
        return self.path / f"stage_{name}.json"

    def load_stage(self, name: str, key: str) -> dict[str, Any] | None:
        """What :meth:`save_stage` kept under ``name`` for ``key`` (a hash of the stage's inputs), else None."""
        p = self.stage_path(name)
        if not p.exists():
            return None
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return obj if obj.get("key") == key else None

    def save_stage(self, name: str, key: str, obj: dict[str, Any]) -> None:
        """Keep a probe's stage result ``obj`` for the inputs ``key`` (the last one only)."""
        self._write_json(self.stage_path(name), {**obj, "key": key})

    def write_report(self, report: dict[str, Any], markdown: str) -> None:
        self._write_json(self.path / self.REPORT_JSON, report)
        try:
            write_text_atomic(self.path / self.REPORT_MD, markdown)
        except OSError as e:
            raise RunDirError(f"cannot write {self.path / self.REPORT_MD}: {_reason(e)}") from None


class SharedStore:
    """A study's cache of classifier-independent results (:class:`~breaknli_fast.probes.base.SharedCache`): one
    JSONL file, one line per entry (``{"key": ..., **entry}``), appended and fsync'ed as the runs compute them, so
    a killed study keeps what it generated; a torn last line is cut off on open. Several runs may append to one
    file (each append is one ``write`` on an ``O_APPEND`` descriptor); the first entry of a key wins.

    ``reused`` / ``added`` count this process's hits and new entries."""

    def __init__(self, path: str | Path, header: dict[str, Any] | None = None):
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = {}
        self.reused = 0
        self.added = 0
        self.repaired_bytes = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create {self.path.parent}: {_reason(e)}") from None
        if self.path.exists():
            self._load()
        elif header is not None:  # what the entries were computed with, for a person reading the file
            self._append([{"key": "", "header": header}])

    def _load(self) -> None:
        data = self.path.read_bytes()
        good_end = pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            try:
                rec = json.loads(data[pos:nl])
            except json.JSONDecodeError:
                break  # a torn line: it and what follows are computed again
            if isinstance(rec, dict) and rec.get("key"):
                self.entries.setdefault(str(rec["key"]), rec)
            pos = good_end = nl + 1
        if good_end < len(data):
            self.repaired_bytes = len(data) - good_end
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self.entries.get(key)
        if hit is not None:
            self.reused += 1
        return hit

    def put(self, entries: dict[str, dict[str, Any]]) -> None:
        new = [{"key": k, **v} for k, v in entries.items() if k not in self.entries]
        if not new:
            return
        self._append(new)
        for rec in new:
            self.entries[rec["key"]] = rec
        self.added += len(new)

    def _append(self, recs: list[dict[str, Any]]) -> None:
        blob = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in recs).encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise RunDirError(f"cannot write {self.path}: {_reason(e)}") from None


def _portable_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """An identity recorded with the embedded dataset's absolute path (before the path was recorded relative to the
    package): as it is recorded now, so that such a run directory still resumes."""
    src = identity.get("dataset")
    if isinstance(src, dict) and src.get("type") == "embedded" and src.get("path"):
        from breaknli_fast.envinfo import package_relative

        return {**identity, "dataset": {**src, "path": package_relative(src["path"])}}
    return identity


def _writer(config: dict[str, Any]) -> dict[str, Any]:
    """Which code writes this invocation: breaknli-fast's version, git commit and source digest, and when it
    started."""
    from breaknli_fast import __version__
    from breaknli_fast.envinfo import code_digest, git_hash

    env = config.get("environment") or {}
    return {"breaknli_fast": env.get("breaknli_fast", __version__), "git": env.get("git", git_hash()),
            "code": env.get("code", code_digest()), "started": config.get("started")}


def other_code(earlier: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two writers ran different code: another version or commit, or other sources at the same commit
    (the digest, where both recorded one)."""
    keys = ("breaknli_fast", "git") + (("code",) if earlier.get("code") and now.get("code") else ())
    return any(earlier.get(k) != now.get(k) for k in keys)


def _code_words(w: dict[str, Any]) -> str:
    return ", ".join(x for x in (w.get("git") or "commit unknown", f"sources {w['code']}" if w.get("code") else "")
                     if x)


def writers(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The invocations that wrote a run directory's records, oldest first (from an older config.json: its one)."""
    got = config.get("written_by")
    if isinstance(got, list) and got:
        return [w for w in got if isinstance(w, dict)]
    env = config.get("environment") or {}
    if not env:
        return []
    return [{"breaknli_fast": env.get("breaknli_fast"), "git": env.get("git"), "started": config.get("started")}]
