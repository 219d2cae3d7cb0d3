"""A study over classifiers × datasets: one command, one study directory, the publication's table at the end.

BreakNLI's results are one table over nine NLI models and two datasets. :func:`run_grid` runs a probe for every
(dataset, classifier) cell, each into a run directory of its own inside the study directory (so each cell is an
ordinary run directory: resumable, reportable alone), with the generator and the engine options shared. The
candidates of BreakNLI's generate step do not depend on the classifier, so they are computed once per dataset:
the cells share a cache (``shared/``, :meth:`~breaknli_fast.probes.base.Probe.shared_identity`) keyed by the
generator's files, engine, precision, the generation settings and the data, and a cell generates only the
candidates that no earlier cell needed. Since every example's candidates come from its own seed, a cell's records
are those of the same run made alone.

Layout::

    <study>/study.json                 the cells, in order (datasets × classifiers), and the shared settings
    <study>/<dataset>-<classifier>/    one run directory per cell (config.json, samples.jsonl, report.*, ...)
    <study>/shared/*.jsonl             the shared generation cache
    <study>/table.md|csv|tex|png       the comparison table (:mod:`breaknli_fast.study.compare`)
    <study>/report.html                the table, the plots and the example browser of every cell

Re-running the same command resumes the study as a whole: finished cells are read back, the interrupted one
resumes from its last whole chunk, and the cache keeps what was generated. Adding a classifier or a dataset to
the command adds its cells and leaves the others as they are.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from breaknli_fast.data.loaders import Columns, DataError
from breaknli_fast.data.slicing import load_slice
from breaknli_fast.study.loading import EngineConfig, check_models
from breaknli_fast.errors import UserError
from breaknli_fast.progress import ProgressHook
from breaknli_fast.study.compare import STUDY_FILE, Comparison, compare, load_runs
from breaknli_fast.study.table_files import write_table
from breaknli_fast.study.rundir import RunDir, write_json_atomic
from breaknli_fast.study.runner import StudyResult, role_requests, run_study, slug

SHARED_DIR = "shared"


class GridError(UserError):
    """A study that cannot be set up (one-line message)."""


def split_names(text: str | Sequence[str], what: str = "--classifier") -> list[str]:
    """``"a,b"`` (or a list) as names, blanks dropped, in order; a name given twice is a one-line error (it would
    be one cell twice: a slip, said rather than dropped)."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for p in (str(x).strip() for x in parts):
        if p in out:
            raise GridError(f"{what}: {p!r} is given twice")
        if p:
            out.append(p)
    if not out:
        raise GridError(f"{what}: no name given")
    return out


@dataclass
class Cell:
    dataset: str
    classifier: str
    dir: str  # the run directory's name inside the study directory


@dataclass
class GridResult:
    """A finished study: its directory, its cells with their results (engines released), the table."""

    study_dir: Path
    cells: list[tuple[Cell, StudyResult]]
    comparison: Comparison | None
    files: list[Path] = field(default_factory=list)


def cells_of(datasets: Sequence[str], classifiers: Sequence[str]) -> list[Cell]:
    """The cells in table order (datasets, then classifiers), each with a directory name of its own."""
    cells: list[Cell] = []
    used: set[str] = set()
    for ds in datasets:
        for clf in classifiers:
            base = name = f"{slug(ds)}-{slug(clf)}"
            i = 2
            while name in used:
                name = f"{base}-{i}"
                i += 1
            used.add(name)
            cells.append(Cell(ds, clf, name))
    return cells


def default_study_path(root: Path, probe: str, datasets: Sequence[str], classifiers: Sequence[str], engine: str,
                       precision: str, seed: int) -> Path:
    """``<root>/study-<probe>-<datasets>-x-<classifiers>-<engine>-<precision>-s<seed>`` (long names shortened with
    a hash)."""
    body = f"{'-'.join(slug(d) for d in datasets)}-x-{'-'.join(slug(c) for c in classifiers)}"
    if len(body) > 80:
        body = body[:64] + "-" + hashlib.sha256(body.encode()).hexdigest()[:8]
    return root / f"study-{probe}-{body}-{engine}-{precision}-s{seed}"


class CellHook(ProgressHook):
    """One progress display for the whole study: an overall bar of cells, and the current cell's stages (named
    after the cell), taken off the display when the cell is done."""

    def __init__(self, parent: ProgressHook, prefix: str):
        self.parent, self.prefix = parent, prefix
        self.stages: list[str] = []

    def start(self, stage: str, total: int, completed: int = 0) -> None:
        self.stages.append(self.prefix + stage)
        self.parent.start(self.prefix + stage, total, completed)

    def advance(self, stage: str, n: int = 1) -> None:
        self.parent.advance(self.prefix + stage, n)

    def finish(self, stage: str) -> None:
        self.parent.finish(self.prefix + stage)

    def message(self, text: str) -> None:
        self.parent.message(text)

    def status(self, text: str) -> Any:
        return self.parent.status(f"{self.prefix}{text}")

    def close(self) -> None:
        for s in self.stages:
            self.parent.remove(s)
        self.stages.clear()


def run_grid(probe: str, config: Any = None, *, classifiers: Sequence[str], datasets: Sequence[str],
             split: str | None = None, limit: int | None | Mapping[str, int | None] = None,
             sample: int | None = None, sample_seed: int | None = None,
             columns: Columns | None = None, generator: str = "mini-t5", engine: EngineConfig | None = None,
             out: str | Path | None = None, runs_root: str | Path = "runs", overwrite: bool = False,
             hook: ProgressHook | None = None, by: str | Sequence[str] | None = None, ray: Any = None,
             mlm: str | Sequence[str] | None = None, html: bool = True, command: str = "run") -> GridResult:
    """Run ``probe`` (a registered name with its ``config``) on every (dataset, classifier) cell into one study
    directory (``out``, or one named after the cells under ``runs_root``), then write the comparison table and
    report.html of the whole study. ``limit``: one for every dataset, or per dataset name; ``sample`` /
    ``sample_seed``: a drawn slice of every dataset instead (:func:`~breaknli_fast.data.slicing.load_slice`). The
    other arguments are
    :func:`~breaknli_fast.study.run_study`'s, shared by every cell."""
    from breaknli_fast.probes import get_probe

    hook = hook or ProgressHook()
    ecfg = engine or EngineConfig()
    classifiers, datasets = split_names(classifiers), split_names(datasets, "--dataset")
    the_probe = get_probe(probe, config) if isinstance(probe, str) else probe
    for name in classifiers:  # a missing model, a masked LM or a 2-label classifier: one line before any cell runs
        check_models(ecfg, role_requests(the_probe, name, generator, mlm))
    limits = {d: (limit.get(d) if isinstance(limit, Mapping) else limit) for d in datasets}
    data = {}
    for d in datasets:  # every dataset loaded once, and a bad one reported before the first cell runs
        data[d] = load_slice(d, split=split, limit=limits[d], cols=columns, seed=the_probe.seed, sample=sample,
                             sample_seed=sample_seed)
        if not data[d].examples:
            raise DataError(f"no valid example in {d!r}")
    study = Path(out) if out is not None else default_study_path(Path(runs_root), the_probe.name, datasets,
                                                                 classifiers, ecfg.engine, ecfg.precision,
                                                                 the_probe.seed)
    cells = cells_of(datasets, classifiers)
    results: list[tuple[Cell, StudyResult]] = []
    with ExitStack() as stack:
        lock = RunDir(study)
        lock.lock()  # one process per study (each cell also locks its own directory)
        stack.callback(lock.unlock)
        write_json_atomic(study / STUDY_FILE, {
            "probe": the_probe.name, "command": command, "classifiers": classifiers, "datasets": datasets,
            "generator": generator if "generator" in the_probe.roles else None,
            "cells": [vars(c) for c in cells], "shared": SHARED_DIR})
        hook.start("study (cells)", len(cells))
        for i, cell in enumerate(cells, start=1):
            cell_hook = CellHook(hook, f"{i}/{len(cells)} ")
            hook.message(f"cell {i}/{len(cells)}: {cell.classifier} on {cell.dataset} -> {study / cell.dir}")
            try:
                res = run_study(the_probe, dataset=cell.dataset, split=split, limit=limits[cell.dataset],
                                columns=columns, data=data[cell.dataset], classifier=cell.classifier,
                                generator=generator, engine=ecfg, out=study / cell.dir, overwrite=overwrite,
                                hook=cell_hook, command=command, by=by, ray=ray, mlm=mlm,
                                shared_dir=study / SHARED_DIR, html=html)
            finally:
                cell_hook.close()
            res.models = None  # release the cell's engines before the next cell loads its own
            if res.shared:
                hook.message(f"cell {i}/{len(cells)} done: {res.shared['added']} examples' candidates generated, "
                             f"{res.shared['reused']} reused from earlier cells")
            results.append((cell, res))
            hook.advance("study (cells)", 1)
        hook.finish("study (cells)")
        runs = load_runs([study])
        comp = compare(runs)
        files = write_table(comp, study)
        if html:
            from breaknli_fast.study.html import write_html

            files.append(write_html([study], study / "report.html", data={str(study / c.dir): data[c.dataset]
                                                                            for c in cells}))
    return GridResult(study, results, comp, files)
