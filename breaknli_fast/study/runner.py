"""The study entry point: :func:`run_study` runs any probe on any engine and writes its run directory.

It loads the data, loads the engines (exporting on first use), prepares the run directory (lock, identity,
resume, torn-line repair), runs the probe's units in resumable chunks with progress, and writes config.json,
samples.jsonl, report.json and report.md. ``breaknli-fast run``, ``bench``'s end-to-end stage and the library
all go through it; :func:`execute` is its chunk loop on engines that are already loaded.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.data import slicing
from breaknli_fast.data.loaders import SAMPLE_NAME, Columns, DataError, LoadedData
from breaknli_fast.engines import registry
from breaknli_fast.engines.roles import ROLES, Models, role
from breaknli_fast.study.loading import EngineConfig, check_models, load_models, mlm_names, role_engines
from breaknli_fast.engines.model_info import model_fingerprint
from breaknli_fast.study.rundir import RunDir, RunDirError, SharedStore
from breaknli_fast.probes import get_probe
from breaknli_fast.study.breakdown import breakdown, column_groups, default_columns, parse_by
from breaknli_fast.study.breakdown import markdown as breakdown_markdown
from breaknli_fast.study.breakdown import plot as plot_breakdown
from breaknli_fast.probes.base import Probe, SharedCache, StageTimes, StudyContext, pending_chunks
from breaknli_fast.progress import ProgressHook
from breaknli_fast.study.truncation import input_truncation, truncation_text
from breaknli_fast.study.throughput import throughput, throughput_markdown


@dataclass
class StudyResult:
    """What a study returns: every record of the run (earlier invocations' included), the report, this
    invocation's timings, the run directory (None for a study run in memory) and the engines it ran on."""

    probe: Probe
    records: list[dict[str, Any]]
    report: dict[str, Any]
    times: StageTimes
    run_dir: Path | None
    models: Models | None  # None when the engines ran on Ray actors
    data: LoadedData
    notes: list[str] = field(default_factory=list)
    shared: dict[str, Any] | None = None  # the study's shared cache: its file, entries reused and added here


def execute(probe: Probe, models: Models, data: LoadedData, run_dir: RunDir | None = None,
            hook: ProgressHook | None = None, stop_after: int | None = None,
            times: StageTimes | None = None, shared: SharedCache | None = None) -> tuple[list[dict[str, Any]], StageTimes]:
    """Run (or resume) the probe's units on loaded engines. Returns every record of the run (earlier ones
    included) and this invocation's timings. Units whose record the run directory already holds are skipped;
    each chunk's records are appended (fsync'ed) as it finishes. ``stop_after`` stops after that many new
    records (tests of resume). ``times``: filled as chunks finish, so a caller keeps the timings of an
    invocation that is interrupted. ``shared``: a study's cache of the probe's classifier-independent results."""
    hook = hook or ProgressHook()
    times = times if times is not None else probe.new_times()
    wall0 = time.perf_counter()
    records = run_dir.load_samples() if run_dir is not None else []
    done = {probe.key(r) for r in records}
    groups = probe.groups(data)
    todo = any((g, ex.id) not in done for g, exs in groups for ex in exs)
    ctx = StudyContext(models=models, stages=run_dir, times=times, hook=hook, shared=shared)
    probe.prepare(ctx, data, todo)
    written = 0
    chunks = pending_chunks(probe, groups, done)
    for group, selected in groups:
        hook.start(group, len(selected), sum((group, ex.id) in done for ex in selected))
    for group, chunk in chunks:
        if stop_after is not None and written >= stop_after:
            break
        recs = probe.process(ctx, group, chunk)
        if run_dir is not None:
            run_dir.append_samples(recs)
        records.extend(recs)
        written += len(recs)
        times.examples, times.wall = written, time.perf_counter() - wall0
        hook.advance(group, len(chunk))
    for group, _ in groups:
        hook.finish(group)
    times.examples, times.wall = written, time.perf_counter() - wall0
    return records, times


def role_requests(probe: Probe, classifier: str, generator: str, mlm: str | Sequence[str] | None) -> dict[str, Any]:
    """The models of the probe's roles (a role it does not need is left out; a role with many models: a list)."""
    named = {"classifier": classifier, "generator": generator, "mlm": mlm_names(mlm) or None}
    return {r.name: named.get(r.name) or ([r.default] if r.many else r.default) for r in ROLES if r.name in probe.roles}


def check_records(probe: Probe, run_dir: RunDir) -> None:
    """Refuse a run directory whose samples.jsonl holds a record that is not the probe's (hand-edited, or written
    by something else): one line naming the record, instead of a KeyError once the report is computed."""
    bad = probe.malformed(run_dir.load_samples())
    if bad is not None:
        raise RunDirError(f"{run_dir.path / RunDir.SAMPLES}: record {bad[0] + 1} is not a {probe.name} record "
                          f"({bad[1]}); remove its line to compute that example again, or use --overwrite")


def slug(text: str) -> str:
    """A file-name-safe short form of a dataset or model name (its last path part)."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(text).name if Path(text).exists() else text.split("/")[-1]).strip("-")
    return s[:40] or "x"


def default_run_path(root: Path, probe: Probe, dataset: str, classifier: str, engine: str, precision: str,
                     limit: int | None = None, sample: dict[str, Any] | None = None) -> Path:
    """``<root>/<dataset>-n<limit>-<classifier>-<engine>-<precision>-s<seed>`` (``all`` for no limit,
    ``n<N>-drawn<seed>`` for a drawn slice ``sample``; a probe other than BreakNLI first): runs that differ in their
    settings' usual suspects get directories of their own."""
    size = f"n{sample['n']}-drawn{sample['seed']}" if sample else f"n{limit}" if limit else "all"
    stem = f"{slug(dataset)}-{size}-{slug(classifier)}-{engine}-{precision}-s{probe.seed}{settings_tag(probe)}"
    return root / (stem if probe.name == "breaknli" else f"{probe.name}-{stem}")


def settings_tag(probe: Probe) -> str:
    """``-p<6 hex>`` of the probe's settings where they are not its defaults (K, --top-up, --mode, the seed, ...),
    else empty: the README's commands, run one after another, get directories of their own instead of one refused
    for holding "different settings"."""
    import hashlib
    import json

    mine = json.dumps(probe.identity(), sort_keys=True, default=str)
    try:
        default = json.dumps(type(probe)().identity(), sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - a probe that cannot be made without settings: always tagged
        default = None
    return "" if mine == default else "-p" + hashlib.sha1(mine.encode()).hexdigest()[:6]


def canonical_order(probe: Probe, records: Sequence[dict[str, Any]], data: LoadedData) -> list[dict[str, Any]]:
    """Records in the order one process writes them (groups in order, examples in data order), whatever order
    they were appended in (workers of a cluster finish chunks in any order); reports are computed on it."""
    rank = {(g, ex.id): (gi, ei) for gi, (g, exs) in enumerate(probe.groups(data)) for ei, ex in enumerate(exs)}
    big = (len(rank), 0)
    return sorted(records, key=lambda r: rank.get(probe.key(r), big))


def _report(probe: Probe, records: Sequence[dict[str, Any]], data: LoadedData, times: StageTimes,
            invocations: Sequence[dict[str, Any]] | None, meta: dict[str, Any], by: Sequence[str],
            pool: Any = None) -> dict[str, Any]:
    total = StageTimes.total(invocations) if invocations else times
    records = canonical_order(probe, records, data)
    report = {"probe": probe.name, **probe.summarise(records, data),
              "throughput": throughput(total, len(invocations) if invocations else 1, this_invocation=times), **meta}
    if pool is not None:
        report["throughput"]["workers"] = pool.workers()
    if by:
        report["breakdown"] = breakdown(probe, records, data, by)
    return report


def markdown(probe: Probe, report: dict[str, Any]) -> str:
    """report.md: the probe's sections, the breakdown by column, then throughput (and a note of the pairs cut to
    the classifier's input length, if any)."""
    parts = [probe.markdown(report).rstrip("\n"), ""]
    parts += slice_markdown(report.get("slice"))
    cut = report.get("truncation")
    if cut and cut["truncated"]:
        parts += [f"**Note:** {truncation_text(cut)}; the classifier reads only their first tokens.", ""]
    parts += breakdown_markdown(report.get("breakdown") or {})
    parts += throughput_markdown(report["throughput"])
    return "\n".join(parts)


def slice_markdown(info: dict[str, Any] | None) -> list[str]:
    """report.md's section on the data slice: how it was taken and its gold-label counts (with any warning)."""
    if not info:
        return []
    lines = ["## Data slice", "", f"- {info['words']}: {info['examples']} examples, gold labels "
             f"{slicing.show_counts(info['labels'])}"]
    lines += [f"- **warning**: {w}" for w in info.get("warnings") or []]
    return lines + [""]


def run_study(probe: Probe | str, config: Any = None, *, dataset: str = SAMPLE_NAME, split: str | None = None,
              limit: int | None = None, sample: int | None = None, sample_seed: int | None = None,
              columns: Columns | None = None, data: LoadedData | None = None,
              classifier: str = "mini-nli", generator: str = "mini-t5", engine: EngineConfig | str = "auto",
              precision: str = "fp32", device: str = "cpu", models: Models | None = None,
              out: str | Path | None = None, runs_root: str | Path | None = None, overwrite: bool = False,
              hook: ProgressHook | None = None, command: str = "run", by: str | Sequence[str] | None = None,
              ray: Any = None, mlm: str | Sequence[str] | None = None, shared_dir: str | Path | None = None,
              html: bool = True) -> StudyResult:
    """Run a probe (an instance, or a registered name with its ``config``) and return its records and report.

    - data: ``dataset`` (``split``, ``limit`` or ``sample`` / ``sample_seed``, ``columns``: :func:`load_data`), or
      ``data`` already loaded; ``by``: columns to break the headline metrics down by (default: the dataset's own);
    - engines: ``engine`` (a name, or an :class:`EngineConfig`) with ``precision`` and ``device``, or ``models``
      loaded; ``mlm``: a probe's masked LMs (``"a,b"``; default ``mini-mlm``); ``ray``: a
      :class:`~breaknli_fast.study.distributed.RayConfig` sharding the chunks over Ray actors (the same records);
    - run directory: ``out``, or one under ``runs_root`` (:func:`default_run_path`); neither: in memory. It is
      locked and checked before any model loads; the same run resumes, another's is refused unless ``overwrite``;
      ``shared_dir``: where a study over several classifiers keeps the classifier-independent results
      (:meth:`Probe.shared_identity`) computed once; ``html``: report.html too.

    The steps: :func:`load_data`, :func:`check_engines`, the run directory (:func:`open_run_dir`),
    :func:`load_engines`, :func:`run_chunks`, :func:`write_outputs`.
    """
    hook = hook or ProgressHook()
    if out is not None and not str(out).strip():  # Path("") is the working directory: never a run's by accident
        raise RunDirError("out is an empty path; name a folder for the run directory")
    probe = get_probe(probe, config) if isinstance(probe, str) else probe
    ecfg = engine if isinstance(engine, EngineConfig) else EngineConfig(engine=engine, precision=precision, device=device)
    data, data_slice, columns_by = load_data(probe, hook, data, dataset=dataset, split=split, limit=limit,
                                             sample=sample, sample_seed=sample_seed, columns=columns, by=by)
    requests = role_requests(probe, classifier, generator, mlm)
    mlms, needed = requests.get("mlm") or [], [name for name, m in requests.items() if m]
    ecfg = check_engines(ecfg, requests, needed, loaded=models is not None, ray=ray is not None)
    prec = ecfg.precision if ecfg.clf_precision == ecfg.gen_precision else f"c{ecfg.clf_precision}-g{ecfg.gen_precision}"
    roles = {name: m for name, m in requests.items() if not role(name).many}  # one model each
    fingerprints: dict[str, Any] = {}
    mlm_prints: dict[str, Any] = {}  # (both filled once a run directory is asked for)

    def identity_for(engine_name: str) -> dict[str, Any]:
        models_id = {name: fp.get("files_sha256") or roles[name] for name, fp in fingerprints.items()}
        return run_identity(probe, ecfg, engine_name, models_id, mlm_prints if mlms else None, data,
                            {"split": split, "limit": limit, "columns": vars(columns or Columns())})

    def path_for(engine_name: str) -> Path:
        return Path(out) if out is not None else default_run_path(
            Path(runs_root), probe, dataset, classifier, engine_name, prec, limit, slicing.identity(data.slice).get("sample"))

    rd: RunDir | None = None
    expected = models.engine if models is not None else ecfg.engine_label(needed)
    pool = None
    try:
        if out is not None or runs_root is not None:
            fingerprints = {name: model_fingerprint(m) for name, m in roles.items()}
            mlm_prints = {name: model_fingerprint(name) for name in mlms}
            rd = open_run_dir(path_for(expected), identity_for(expected), probe, overwrite)
        models, pool, engine_name, details, notes = load_engines(probe, ecfg, requests, models, ray, hook)
        meta = {"models": {"generator": requests.get("generator"), "classifier": classifier,
                           **({"mlm": mlms} if mlms else {})},
                "engine": f"{engine_name}:{ecfg.label}:{ecfg.device}", "dataset": dataset, "slice": data_slice}
        note_truncation(models, pool, data, meta, hook)
        if rd is None:  # in memory
            records, times = pool.execute(data, None, hook) if pool is not None else \
                execute(probe, models, data, None, hook)
            report = _report(probe, records, data, times, None, meta, columns_by, pool)
            return StudyResult(probe, records, report, times, None, models, data, notes)
        identity = identity_for(engine_name)
        if engine_name != expected:  # auto fell back to torch: that engine's directory, checked again
            if out is None:
                rd.unlock()
                rd = RunDir(path_for(engine_name))
                rd.lock()
            rd.check(identity, overwrite=overwrite)
        run_path = rd.path
        config_json = {
            "command": command, "probe": probe.name, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **roles, "models": fingerprints, **({"mlm": mlms, "mlm_models": mlm_prints} if mlms else {}),
            "roles": (roles_block := role_engines(ecfg, needed, models.by_role if models is not None else {})),
            "engine": engine_record(ecfg, engine_name, engine, details, notes, bool(mlms),
                                    {r: v["engine"] for r, v in roles_block.items()}),
            "dataset": {"name": dataset, "split": split, "limit": limit, "source": data.source,
                        "columns": vars(columns or Columns()), "skips": data.skips.to_dict(), "slice": data_slice},
            **probe.identity(), **settings_record(probe, ecfg, pool),
        }
        # config.json is written only once the engines have loaded: a study that fails earlier leaves none
        if rd.prepare(config_json, identity, overwrite=overwrite):
            say_resume(rd, hook)
        store = None
        if shared_dir is not None and pool is None and probe.shared_identity() is not None:
            store = open_shared(Path(shared_dir), probe, fingerprints, ecfg, engine_name, data, hook)
        records, times = run_chunks(probe, models, pool, data, rd, hook, store)
        report = _report(probe, records, data, times, rd.load_invocations(), meta, columns_by, pool)
        write_outputs(probe, report, rd, models, data, html)
    finally:
        if pool is not None:
            pool.close()
        if rd is not None:
            rd.unlock()
    shared_info = None if store is None else {"path": str(store.path), "reused": store.reused, "added": store.added}
    return StudyResult(probe, records, report, times, run_path, models, data, notes, shared=shared_info)


def open_run_dir(path: Path, identity: dict[str, Any], probe: Probe, overwrite: bool) -> RunDir:
    """The run directory locked and checked before any model loads: one in use, one that cannot be written and one
    holding another run stop here, in seconds; a resume's records must be the probe's."""
    rd = RunDir(path)
    rd.lock()
    try:
        if rd.check(identity, overwrite=overwrite)[0]:
            check_records(probe, rd)
    except BaseException:
        rd.unlock()
        raise
    return rd


def note_truncation(models: Models | None, pool: Any, data: LoadedData, meta: dict[str, Any],
                    hook: ProgressHook) -> None:
    """The pairs longer than the classifier reads (report.json's ``truncation``; a warning when there are any),
    from the loaded classifier or the Ray actors'."""
    cut = (input_truncation(models.classifier, data.examples) if models is not None
           else pool.truncation(data.examples) if pool is not None else None)
    if cut is not None:
        meta["truncation"] = cut
        if cut["truncated"]:
            hook.message(f"warning: {truncation_text(cut)}; the classifier reads only their first tokens (--max-length)")


def open_shared(root: Path, probe: Probe, fingerprints: dict[str, Any], ecfg: EngineConfig, engine_name: str,
                data: LoadedData, hook: ProgressHook) -> SharedStore:
    store = shared_store(root, probe, fingerprints, ecfg, engine_name, data)
    if store.repaired_bytes:
        hook.message(f"{store.path}: cut a torn last line of {store.repaired_bytes} bytes")
    return store


def run_identity(probe: Probe, ecfg: EngineConfig, engine_name: str, models_id: dict[str, Any],
                 mlm_prints: dict[str, Any] | None, data: LoadedData, slice_args: dict[str, Any]) -> dict[str, Any]:
    """The settings that define a run's records (config.json's ``identity``): a run directory holding another
    identity is refused, the same one resumed."""
    return {
        "probe": probe.name, **models_id,
        **({"mlm": {n: fp.get("files_sha256") or n for n, fp in mlm_prints.items()},
            "mlm_precision": ecfg.mlm_prec} if mlm_prints is not None else {}),
        "engine": engine_name, "precision": ecfg.precision, "device": ecfg.device.split(":")[0],
        **({"classifier_precision": ecfg.clf_precision, "generator_precision": ecfg.gen_precision}
           if ecfg.clf_precision != ecfg.gen_precision else {}),
        "dataset": data.source, **slice_args, **slicing.identity(data.slice), **probe.identity(),
        "label_map": ecfg.label_map, "nli_prompt": ecfg.nli_prompt, "nli_method": ecfg.nli_method,
        "max_length": ecfg.max_length,
    }


def load_engines(probe: Probe, ecfg: EngineConfig, requests: dict[str, Any], models: Models | None, ray: Any,
                 hook: ProgressHook) -> tuple[Models | None, Any, str, dict[str, Any], list[str]]:
    """Step 3, the engines (after the run directory is locked): the Ray actors, or the models loaded here unless
    given; (models, Ray pool, the engine's name, its details for config.json, notes)."""
    if ray is not None:
        from breaknli_fast.study.distributed import RayPool

        with hook.status("starting Ray workers"):
            pool = RayPool(probe, ecfg, requests, ray)
        details = pool.details()
        return None, pool, ecfg.engine, details, list(details.pop("notes", []))
    if models is None:
        if ecfg.threads:
            import torch

            torch.set_num_threads(ecfg.threads)
        with hook.status("loading models"):
            models = load_models(ecfg, requests, note=hook.message)
    details = {"max_batch": getattr(models.classifier, "max_batch", ecfg.max_batch),  # the engine's default
               **models.details()}
    return models, None, models.engine, details, list(models.notes)


def load_data(probe: Probe, hook: ProgressHook, data: LoadedData | None, *, dataset: str, split: str | None,
              limit: int | None, sample: int | None, sample_seed: int | None, columns: Columns | None,
              by: str | Sequence[str] | None) -> tuple[LoadedData, dict[str, Any], list[str]]:
    """Step 1, the data: the slice (loaded here unless given), its description and warnings (said before any model
    loads), and the breakdown's columns, each checked to exist. A slice without a valid example is one line."""
    if data is None:  # seed: generated data, and a drawn slice unless sample_seed says otherwise
        data = slicing.load_slice(dataset, split=split, limit=limit, cols=columns, seed=probe.seed, sample=sample,
                                  sample_seed=sample_seed)
    if not data.examples:
        counts = ", ".join(f"{k} {v}" for k, v in data.skips.counts.items() if v) or "none"
        raise DataError(f"no valid example in {dataset!r} ({data.skips.skipped} rows skipped: {counts})")
    data_slice = slicing.describe(data.slice, data.examples)
    for w in data_slice["warnings"]:
        hook.message(f"warning: {w}")
    if data.skips.renamed_ids:
        hook.message(f"warning: {data.skips.renamed_text()}")
    columns_by = parse_by(by) or default_columns(data)
    for column in columns_by:
        column_groups(data, column)  # a missing column is a one-line error before any model loads
    return data, data_slice, columns_by


def check_engines(ecfg: EngineConfig, requests: dict[str, Any], needed: list[str], loaded: bool,
                  ray: bool) -> EngineConfig:
    """Step 2, the engines, before any model loads: the settings, each role against its engine's declaration, each
    model's files and kind (unless the engines are ``loaded`` already); with Ray, ``auto`` resolved once so that
    every actor runs the same backends."""
    if not loaded:
        ecfg.check()  # precisions, workers, device, engine name: wrong ones stop here, before any model loads
        ecfg.check_roles(needed)  # each role on its engine's declaration (a missing role: one line, no export)
        check_models(ecfg, requests)  # each model's files, kind and labels, from its config
    if ray:
        ecfg = replace(ecfg, engine=registry.resolve_engine(ecfg.engine, ecfg.precision, ecfg.device),
                       **{f"{r}_engine": ecfg.engine_of(r) for r in needed if ecfg.per_role()})
    return ecfg


def settings_record(probe: Probe, ecfg: EngineConfig, pool: Any) -> dict[str, Any]:
    """config.json's classifier settings, seed, environment and (with Ray) the cluster's."""
    from breaknli_fast.envinfo import environment

    return {"label_map": ecfg.label_map, "nli_prompt": ecfg.nli_prompt, "nli_method": ecfg.nli_method,
            "seed": probe.seed, "environment": environment(registry.declared_packages()),
            **({"ray": pool.cfg.to_dict() | {"workers_started": len(pool.actors), "worker_nodes": pool.infos}}
               if pool is not None else {})}


def engine_record(ecfg: EngineConfig, engine_name: str, requested: Any, details: dict[str, Any], notes: list[str],
                  mlm: bool, by_role: dict[str, str] | None = None) -> dict[str, Any]:
    """config.json's ``engine``: what ran (one name, and the engine of each role: ``classifier_engine``, ...), what
    was asked for, the precisions and the engine's own details."""
    return {"name": engine_name, "requested": requested.engine if isinstance(requested, EngineConfig) else requested,
            **{f"{r}_engine": e for r, e in (by_role or {}).items()},
            "precision": ecfg.precision, "classifier_precision": ecfg.clf_precision,
            "generator_precision": ecfg.gen_precision, **({"mlm_precision": ecfg.mlm_prec} if mlm else {}),
            "device": ecfg.device, "threads": ecfg.threads, "workers": ecfg.workers,
            "token_budget": ecfg.token_budget, "max_length": ecfg.max_length, **details, "notes": notes}


def say_resume(rd: RunDir, hook: ProgressHook) -> None:
    """The resume's notice: the records already done, a torn last line cut, earlier records of other code."""
    msg = f"resuming {rd.path}: {len(rd.load_samples())} example records already done"
    if rd.repaired_bytes:
        msg += f" (cut a torn last line of {rd.repaired_bytes} bytes)"
    hook.message(msg)
    if rd.resume_warning():
        hook.message(f"warning: {rd.resume_warning()}")


def run_chunks(probe: Probe, models: Models | None, pool: Any, data: LoadedData, rd: RunDir, hook: ProgressHook,
               store: SharedStore | None) -> tuple[list[dict[str, Any]], StageTimes]:
    """Step 4, the chunks not yet in the run directory (in this process, or on the Ray actors); the invocation's
    timings are appended however it ends (a Ctrl-C, SIGTERM or error keeps what was written and counts it)."""
    times = probe.new_times()
    start = rd.samples_end()
    try:
        if pool is not None:
            return pool.execute(data, rd, hook, times=times)
        records, times = execute(probe, models, data, rd, hook, times=times, shared=store)
        return records, times
    except BaseException:  # Ctrl-C, SIGTERM, an error: the records written are what the file holds
        times.examples = rd.records_since(start)  # (a stop during a chunk's fsync: written, not yet counted)
        raise
    finally:  # an interrupted invocation's work counts too (a killed one loses only its timings)
        if times.examples:
            rd.append_invocation(times.to_dict())


def write_outputs(probe: Probe, report: dict[str, Any], rd: RunDir, models: Models | None, data: LoadedData,
                  html: bool) -> None:
    """Step 5, the reports: what the engines measured of themselves, report.json / report.md, the breakdown's plot,
    the probe's own files and report.html."""
    engines = models.engines if models is not None else {}  # (--ray: the engines live in the actors)
    runtime = {role: e.runtime_details() for role, e in engines.items() if hasattr(e, "runtime_details")}
    if runtime:  # what engines measured of themselves while they ran (the cudagraph engine's graph counters)
        report["engine_runtime"] = runtime
    rd.write_report(report, markdown(probe, report))
    if report.get("breakdown"):
        plot_breakdown(report["breakdown"], rd.path / "breakdown.png")
    probe.files(report, rd.path)
    if html:
        from breaknli_fast.study.html import write_html

        write_html([rd.path], rd.path / "report.html", data={str(rd.path): data})


def shared_store(root: Path, probe: Probe, fingerprints: dict[str, Any], ecfg: EngineConfig, engine_name: str,
                 data: LoadedData) -> SharedStore:
    """The shared cache of a probe's classifier-independent step for this model, engine, settings and data:
    ``<root>/<probe>-<model>-<data>-<key>.jsonl``, the key a hash of all of them (the model by its files)."""
    import hashlib
    import json

    role = probe.shared_role or "generator"
    fp = fingerprints.get(role) or {}
    precision = {"generator": ecfg.gen_precision, "classifier": ecfg.clf_precision}.get(role, ecfg.precision)
    h = hashlib.sha256()
    for ex in data.examples:
        h.update(json.dumps([ex.id, ex.premise, ex.hypothesis, ex.label]).encode())
    header = {"probe": probe.name, "settings": probe.shared_identity(), role: fp.get("files_sha256") or fp.get("id"),
              "engine": engine_name, "precision": precision, "device": ecfg.device.split(":")[0],
              "engine_options": ecfg.extra, "data": h.hexdigest()}
    key = hashlib.sha256(json.dumps(header, sort_keys=True, default=str).encode()).hexdigest()[:16]
    dname = data.source.get("name") or Path(str(data.source.get("path") or data.source.get("repo") or "data")).stem
    name = f"{probe.name}-{slug(str(fp.get('id') or role))}-{slug(str(dname))}-{key}.jsonl"
    return SharedStore(root / name, header={**header, "model": fp.get("id")})
