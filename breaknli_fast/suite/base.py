"""The measurement contract: what one benchmark of the suite is, shaped like the probe contract
(:mod:`breaknli_fast.probes.base`).

A **measurement** (``bench``, ``run-loop``, ``real-shapes``, the GPU check, ...) says

- its **config**: a dataclass whose fields are declared with :func:`breaknli_fast.options.option` (and
  :func:`~breaknli_fast.options.options`), so that a suite entry's ``args``, the command line of ``breaknli-fast
  suite measure NAME`` and their checks come from that one declaration (:mod:`breaknli_fast.suite.args`);
- its **payload**: the dataclass it measures into (:attr:`Measurement.payload_class`), written by the one typed
  serialiser (:func:`breaknli_fast.bench.types.to_json`) under the result file's ``kind``
  (:attr:`Measurement.kind`), and read back by :func:`breaknli_fast.suite.result.read_result`;
- :meth:`Measurement.run` ``(config, recorder)``: measures and returns the payload (the recorder holds the
  provenance and the scratch folder ``recorder.work``);
- the **sections** of BENCHMARKS.md it renders (:class:`Section`: functions of typed result files), and new
  top-level chapters where it needs one (:class:`Chapter`);
- what it **requires** (:meth:`Measurement.requirements`: its own requirement names, and the libraries of the
  backends its config names, read from their declarations) and whether it times whole processes
  (:attr:`Measurement.whole_process`: nothing else may run beside it).

Measurements join by entry point (group ``breaknli_fast.measurements``: :mod:`breaknli_fast.suite.registry`); a new
one is a module and a suite entry (docs/benchmarks.md shows one written from scratch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from breaknli_fast.options import CLI, CliOption, option, options  # noqa: F401 - the measurements' declarations
from breaknli_fast.suite.args import Arg, arguments, build_config
from breaknli_fast.suite.result import ResultFile

Results = Sequence[ResultFile]


@dataclass(frozen=True)
class Chapter:
    """A top-level section of BENCHMARKS.md (``## {title}``), in the order of ``order``; its subsections are the
    :class:`Section` objects whose key starts with ``{key}/``."""

    key: str
    title: str
    lead: str = ""
    order: float = 100.0


@dataclass(frozen=True)
class Section:
    """A subsection of BENCHMARKS.md (``### {title}``): the files it reads (``select``) and how it renders them.

    ``key`` (``"1/run-loop"``) names it in a suite entry's ``feeds`` and places it under the chapter ``"1"``, in
    the order of ``order``. Either ``render`` (one file's markdown, its provenance lines added below it, each file
    under ``file_title`` where given) or ``summary`` (once over all the files and the results folder's label;
    with ``summary_always`` it runs without files too and says itself what is not measured). Without files:
    "not measured", naming ``what`` and the measurement (``not_measured`` overrides the sentence)."""

    key: str
    title: str
    what: str
    select: Callable[[Results], list[ResultFile]]
    order: float
    render: Callable[[ResultFile], str] | None = None
    summary: Callable[[Results, str], str] | None = None
    summary_always: bool = True
    file_title: Callable[[ResultFile], str] | None = None
    before_files: Callable[[Results, str], str] | None = None  # a table over the files, above each file's details
    not_measured: Callable[[str], str] | None = None
    measured_by: str = ""  # the measurement named in "not measured" (default: the section's own)


@dataclass(frozen=True)
class Requirement:
    """What a measurement needs: a module of an extra (``module``, ``install``), a CUDA device, the transformers 5
    virtual environment, or a git checkout with its history."""

    name: str
    module: str | None = None
    install: str = ""


class Measurement(ABC):
    """One kind of benchmark. Subclasses set ``name``, ``summary``, ``kind``, ``config_class`` and
    ``payload_class``, implement :meth:`run`, and list the ``sections`` they render."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    kind: ClassVar[str]  # the result file's kind (what a reader types its payload by)
    config_class: ClassVar[type | None] = None
    payload_class: ClassVar[type | None] = None
    requires: ClassVar[tuple[str, ...]] = ()  # requirement names (breaknli_fast.suite.requirements)
    whole_process: ClassVar[bool] = False  # it times whole processes: nothing else may run beside it
    sections: ClassVar[tuple[Section, ...]] = ()
    chapters: ClassVar[tuple[Chapter, ...]] = ()
    # files written before the measurements joined the package: the scripts that wrote this kind, and their options
    # that named a scratch folder or the result file (left out when such a file's command is read as arguments)
    legacy_scripts: ClassVar[tuple[str, ...]] = ()
    scratch_flags: ClassVar[tuple[str, ...]] = ("--result", "--out", "--work", "--work-dir")
    # the argument (a list) that takes the words after ``--`` on the command line (None: no such words)
    remainder: ClassVar[str | None] = None

    # -- arguments ------------------------------------------------------------------------------------------------

    def arguments(self, values: Mapping[str, Any] | None = None) -> list[Arg]:
        """The arguments it takes (``values``: those already known, for a measurement whose arguments depend on
        one, e.g. the bench's probe)."""
        return arguments(self.config_class)

    def config(self, values: Mapping[str, Any]) -> Any:
        """The config object of checked ``values`` (the rest at their defaults); a thread count beyond what this
        machine may run (:func:`breaknli_fast.limits.check_threads`) is a one-line error."""
        from breaknli_fast.limits import check_threads

        if self.config_class is None:
            return None
        config = build_config(self.config_class, self.arguments(values), values)
        check_threads(getattr(config, "threads", None), "--threads")
        return config

    def engines(self, config: Any) -> list[str]:
        """The engine names its config asks for (``ort``, ``openvino``, ...): their backends' libraries are what
        it may need (:meth:`requirements`). Default: the engines of a field ``engines`` (comma-separated
        ``ENGINE:PRECISION[:...]`` entries, per-role ``gen=A/clf=B`` entries too)."""
        text = getattr(config, "engines", None)
        if not isinstance(text, str):
            return []
        out: list[str] = []
        for entry in (x.strip() for x in text.split(",")):
            for part in entry.split("/"):
                name = part.split("=", 1)[1] if part[:4] in ("gen=", "clf=", "mlm=") else part
                name = name.split(":")[0].strip()
                if name and not name.startswith("peer") and name not in out:
                    out.append(name)
        return out

    def requirements(self, config: Any) -> tuple[list[str], list[str]]:
        """(what it requires: skipped without; what it may use: the contenders reported as skipped without), as
        requirement names (:mod:`breaknli_fast.suite.requirements`). Default: :attr:`requires`, and the backends
        its :meth:`engines` name as optional (their libraries read from their declarations)."""
        from breaknli_fast.engines import registry

        backends = set(registry.names())
        return list(self.requires), [e for e in self.engines(config) if e in backends and e not in self.requires]

    def default_result(self, config: Any, work: Path) -> Path | None:
        """Where its result file goes when the command line names none (None: ``--result`` is needed)."""
        return None

    def legacy_argv(self, values: Mapping[str, Any], result: str) -> list[str]:
        """The command of this measurement's script at a commit from before the measurements joined the package
        (a suite entry's ``at_commit``): the same options (the scripts had these flags), and ``--result``."""
        from breaknli_fast.errors import UserError
        from breaknli_fast.suite.args import argv_of

        if not self.legacy_scripts:
            raise UserError(f"the {self.name} measurement had no script of its own before it joined the package")
        return [f"scripts/{self.legacy_scripts[0]}", *argv_of(self.arguments(values), values), "--result", result]

    # -- measuring ------------------------------------------------------------------------------------------------

    @abstractmethod
    def run(self, config: Any, recorder: Any) -> Any:
        """Measure, and return the payload (:attr:`payload_class`); ``recorder``
        (:class:`~breaknli_fast.suite.provenance.Recorder`) holds the provenance and ``recorder.work``, a scratch
        folder. A measurement that cannot run raises :class:`~breaknli_fast.errors.UserError` (one line)."""
