"""The probe contract: what a study of an NLI model does, apart from what every study shares.

A **probe** (BreakNLI, word-order permutations, minimal replacements, ...) says

- which **units** of work it has: named groups of examples, in order (BreakNLI: one group per mode); a record
  is keyed by (group, example id), which is what resume keys on;
- what it computes once per invocation before the chunks (:meth:`Probe.prepare`: e.g. M(p, h) of every
  example, cached in the run directory);
- which **model calls** a chunk needs and what it **records** per unit (:meth:`Probe.process`: the calls go
  through the engines' ``classify`` / ``generate`` contract, so batching and pair de-duplication stay in the
  engines);
- how it **summarises** its records (:meth:`Probe.summarise`) and renders them (:meth:`Probe.markdown`);
- how its results enter a table that compares models (:meth:`Probe.comparison`) and how one record reads in the
  HTML report's example browser (:meth:`Probe.example_view`); both work from report.json and samples.jsonl
  alone, so that any run directory can be reported on without the models or the probe's dependencies;
- for parity between engines (``breaknli-fast bench --probe``): its **headline metrics** (:meth:`Probe.headline_metrics`)
  with their per-example values (:meth:`Probe.per_example`, keyed by the record field :attr:`Probe.pair_key`), and the
  classifier's **predictions** in a record (:meth:`Probe.predictions`), keyed by input.

The study runner (:func:`breaknli_fast.study.run_study`) owns the rest: data, engines, the run directory and
resume, chunks, progress, throughput and report files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from typing import Any, Callable, ClassVar, Mapping, Protocol, Sequence

from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.errors import UserError
from breaknli_fast.options import CLI, UNSET, CliOption, option, options  # noqa: F401 - the probes' declarations
from breaknli_fast.progress import ProgressHook


class ProbeConfigError(UserError, TypeError):
    """A probe config of the wrong type, or a dict with a field the config does not have."""


def make_config(config_class: type, value: Any, what: str) -> Any:
    """``config_class`` from ``value``: None (the defaults), an instance, or a dict of its fields; a nested
    dataclass or dict field may be given in part as a dict (the rest keeps its defaults), a tuple field as a
    list. ``what`` names the config in errors."""
    if value is None:
        return config_class()
    if isinstance(value, config_class):
        return value
    if not isinstance(value, Mapping):
        raise ProbeConfigError(f"{what} must be a {config_class.__name__} or a dict of its fields, "
                               f"not {type(value).__name__}")
    known = {f.name: f for f in fields(config_class)}
    kwargs = {}
    for key, v in value.items():
        f = known.get(key)
        if f is None:
            raise ProbeConfigError(f"{what} has no field {key!r} (its fields: {', '.join(known)})")
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if is_dataclass(default) and isinstance(v, Mapping):
            v = make_config(type(default), v, f"{what}'s {key}")
        elif isinstance(default, dict) and isinstance(v, Mapping):
            v = {**default, **v}
        elif isinstance(default, tuple) and isinstance(v, list):
            v = tuple(v)
        kwargs[key] = v
    return config_class(**kwargs)


@dataclass
class StageTimes:
    """Seconds and model calls per stage of one invocation. Stages with ``pairs`` are classifier stages;
    ``generate`` counts sequences and new tokens."""

    seconds: dict[str, float] = field(default_factory=dict)
    pairs: dict[str, int] = field(default_factory=dict)
    sequences: int = 0
    new_tokens: int = 0
    examples: int = 0  # records written by this invocation
    wall: float = 0.0

    def add(self, stage: str, seconds: float, pairs: int | None = None) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        if pairs is not None:
            self.pairs[stage] = self.pairs.get(stage, 0) + pairs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def total(cls, invocations: Sequence[dict[str, Any]]) -> "StageTimes":
        """The sum of several invocations' timings (``to_dict`` records)."""
        t = cls()
        for inv in invocations:
            for k, v in (inv.get("seconds") or {}).items():
                t.seconds[k] = t.seconds.get(k, 0.0) + float(v)
            for k, v in (inv.get("pairs") or {}).items():
                t.pairs[k] = t.pairs.get(k, 0) + int(v)
            t.sequences += int(inv.get("sequences", 0))
            t.new_tokens += int(inv.get("new_tokens", 0))
            t.examples += int(inv.get("examples", 0))
            t.wall += float(inv.get("wall", 0.0))
        return t


METRIC_KINDS = ("share", "mean", "ratio")


@dataclass(frozen=True)
class Metric:
    """A headline metric, as a comparison of two engines on the same examples pairs it.

    ``kind``: ``share`` — 0/1 per example (accuracy, a break), the metric is their mean; ``mean`` — a fraction in
    [0, 1] per example (c_i, a share of draws), the metric is their mean; ``ratio`` — (numerator, denominator) per
    example, the metric is Σ numerator / Σ denominator (per-candidate rates, a pooled sample accuracy)."""

    name: str
    kind: str = "share"
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise ValueError(f"metric {self.name!r}: kind must be one of {', '.join(METRIC_KINDS)}")


class StageCache(Protocol):
    """Where a probe keeps a stage's result between invocations (the run directory: ``stage_<name>.json``), keyed by
    a hash of the stage's inputs, so a resumed run does not compute it again."""

    def load_stage(self, name: str, key: str) -> dict[str, Any] | None: ...

    def save_stage(self, name: str, key: str, obj: dict[str, Any]) -> None: ...


class SharedCache(Protocol):
    """Results of a probe's step that do not depend on the classifier (BreakNLI's generated candidates), kept for
    the other runs of a study over several classifiers. The study layer opens one per :meth:`Probe.shared_identity`,
    model fingerprint, engine and data; entries are keyed by the probe (e.g. mode and example id), and each entry
    holds what identifies its inputs (the prompt), checked on reuse."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, entries: dict[str, dict[str, Any]]) -> None: ...


@dataclass
class StudyContext:
    """What a probe's steps get: the loaded engines, the run directory (None in memory), timings, progress."""

    models: Any  # breaknli_fast.study.loading.Models
    stages: StageCache | None  # the run directory's stage cache; None for a study in memory
    times: StageTimes
    hook: ProgressHook
    state: dict[str, Any] = field(default_factory=dict)  # what prepare() leaves for process()
    shared: SharedCache | None = None  # the study's cache of classifier-independent results; None: not shared


class Probe(ABC):
    """One kind of study. Subclasses set ``name``, ``summary``, ``roles`` and ``config_class`` and implement the
    abstract methods. The config class is a dataclass; its fields made with :func:`option` / :func:`options` are
    the probe's command-line options, and ``seed`` / ``chunk_size`` fields take ``--seed`` / ``--chunk-size``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""  # one line for ``--probe``'s help
    config_class: ClassVar[type | None] = None  # the config the constructor takes (None: no options)
    roles: ClassVar[tuple[str, ...]] = ("classifier",)  # models it needs: "classifier", "generator"
    group_key: ClassVar[str] = "group"  # the record field that holds the unit's group
    pair_key: ClassVar[str] = "id"  # the record field that pairs an example's metric values between two runs
    # the fields every record of the probe holds (besides group_key): a resumed run whose samples.jsonl lacks one
    # (a hand-edited or foreign file) is refused, naming the record, instead of failing in summarise
    record_fields: ClassVar[tuple[str, ...]] = ("id",)
    chunk_size: int = 16  # units per resumable chunk
    seed: int = 0

    @classmethod
    def config_of(cls, config: Any = None) -> Any:
        """The probe's config from what a caller passed: None (the defaults), a :attr:`config_class` instance, or
        a dict of its fields (:func:`make_config`)."""
        return make_config(cls.config_class, config, f"the {cls.name} probe's config") if cls.config_class else config

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """The probe's settings that define its results (a run directory with other settings is refused)."""

    @abstractmethod
    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        """The units of work in order: (group name, its examples)."""

    def prepare(self, ctx: StudyContext, data: LoadedData, todo: bool) -> None:
        """Work done once per invocation before the chunks (``todo``: some unit is left to compute)."""

    @abstractmethod
    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        """The records of one chunk of a group, one per example, in order."""

    @abstractmethod
    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        """The probe's part of report.json (metrics, funnel, ...)."""

    @abstractmethod
    def markdown(self, report: dict[str, Any]) -> str:
        """report.md from report.json."""

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        """The headline metrics on a subset (records and examples of one group of a ``--by`` breakdown):
        ``{"rates": {name: {"n", "rate", "ci"}}, "counts": {name: int}}``, rates in percent."""
        return {"rates": {}, "counts": {}}

    def headline_metrics(self) -> list[Metric]:
        """The metrics a comparison of two engines reports (``bench --probe``), in order; :meth:`per_example`
        gives their values."""
        return []

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The headline metrics as per-example values, keyed by metric name, then by the record's
        :attr:`pair_key`: a 0/1 value (``share``), a fraction (``mean``) or a (numerator, denominator) pair
        (``ratio``). What a paired comparison of two engines on the same examples takes (parity). A metric defined
        on a subset of the examples (e.g. rates over evaluated examples) holds only those keys."""
        return {}

    def predictions(self, record: dict[str, Any]) -> dict[str, str]:
        """The labels the classifier gave in one record, keyed by what was classified (e.g. ``(p, h)``, or a
        candidate's text): two engines agree on a record when these are equal. Empty: the probe does not say."""
        return {}

    def console(self, report: dict[str, Any]) -> list[Any]:
        """What the command line prints of the report: rich renderables or markup strings."""
        return []

    def files(self, report: dict[str, Any], run_dir: Any) -> list[str]:
        """Extra files written into the run directory after the report (plots); returns their names."""
        return []

    def new_times(self) -> StageTimes:
        """Timings of one invocation, with the probe's stages at zero."""
        return StageTimes()

    def malformed(self, records: Sequence[Any]) -> tuple[int, str] | None:
        """The first record that is not one of this probe's (not an object, or without one of
        :attr:`record_fields`): (its index, what is wrong), or None when all are well-formed."""
        for i, r in enumerate(records):
            if not isinstance(r, dict):
                return i, f"it is not a JSON object but {type(r).__name__}"
            missing = [f for f in (self.group_key, *self.record_fields) if f not in r]
            if missing:
                return i, f"it lacks the field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
        return None

    def key(self, record: dict[str, Any]) -> tuple[str, str]:
        """The resume key of a record: (group, example id)."""
        return record[self.group_key], record["id"]

    def shared_identity(self) -> dict[str, Any] | None:
        """The settings of the probe's steps whose results do not depend on the classifier (with the model that
        computes them, named by its role in :attr:`shared_role`), so that a study over several classifiers computes
        them once per dataset (:class:`SharedCache`). None: the probe has no such step."""
        return None

    shared_role: ClassVar[str | None] = None  # the model role of the shared step (BreakNLI: the generator)

    # -- reading finished runs (report.json / samples.jsonl only: no models, no probe dependencies) ----------
    comparison_measures: ClassVar[tuple[str, ...]] = ("rate",)  # the rates of one comparison-table cell
    comparison_header: ClassVar[tuple[str, str]] = ("", "metric")  # names of the block and row columns
    comparison_note: ClassVar[str] = ""  # what a reader of the comparison table must know (definitions)

    @staticmethod
    def metric_rows(cells: dict[str, Any], labels: dict[str, str]) -> list[tuple[str, list[dict[str, Any]]]]:
        """Rows of a :meth:`comparison` block: one per ``labels`` key (in its order), the cell of ``cells`` under
        that key, or an empty cell (n 0) where the report has none."""
        return [(label, [cells.get(key) or {"n": 0, "rate": None, "ci": None}]) for key, label in labels.items()]

    @staticmethod
    def rate_table(title: str, cells: dict[str, Any], labels: dict[str, str]) -> Any:
        """A console table of rate cells (metric, %, 95 % CI, n): one row per ``labels`` key, in its order."""
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        for col, just in (("metric", "left"), ("%", "right"), ("95 % CI", "right"), ("n", "right")):
            t.add_column(col, justify=just, no_wrap=True)
        for key, label in labels.items():
            c = cells[key]
            ci = "–" if c["rate"] is None else f"[{c['ci'][0]:.1f}, {c['ci'][1]:.1f}]"
            t.add_row(label, "–" if c["rate"] is None else f"{c['rate']:.2f}", ci, str(c["n"]))
        return t

    @classmethod
    def comparison(cls, report: dict[str, Any]) -> dict[str, Any]:
        """The probe's part of a table comparing models (``breaknli-fast report``): ``{"accuracy": rate cell of
        M on (p, h) or None, "blocks": [(block, [(row label, [one rate cell per measure])])]}``, rate cells as
        :func:`~breaknli_fast.stats.rate_cell` makes them (percent, 95 % CI, n). Default: no table."""
        return {"accuracy": None, "blocks": []}

    @classmethod
    def example_view(cls, record: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        """How one record of samples.jsonl reads in the HTML report's example browser: a dict with ``group``,
        ``yhat`` (M(p, h) or None), ``gold``, ``verdict`` (a short code the browser filters on) and
        ``verdict_label``, ``premise``, ``hypothesis``, ``why`` (one sentence) and ``sections``: each
        ``{"title", "kind": "list", "items"}``, ``{"title", "kind": "table", "columns", "rows", "marks"}``
        (``marks``: per row ``bad``, ``warn``, ``ok``, ``muted`` or None) or ``{"title", "kind": "text", "text"}``.
        The default shows the record's other fields as they are."""
        skip = {"id", "line", "premise", "hypothesis", "gold", "yhat", "status", cls.group_key}
        rows = [[k, v if isinstance(v, (str, int, float, bool)) or v is None else _compact(v)]
                for k, v in record.items() if k not in skip]
        status = record.get("status")
        return {"group": record.get(cls.group_key), "yhat": record.get("yhat"), "gold": record.get("gold"),
                "verdict": str(status) if status is not None else "–", "verdict_label": str(status or "–"),
                "premise": record.get("premise", ""), "hypothesis": record.get("hypothesis", ""),
                "why": "", "sections": [{"title": "record", "kind": "table", "columns": ["field", "value"],
                                         "rows": rows, "marks": [None] * len(rows)}] if rows else []}


def _compact(value: Any, limit: int = 400) -> str:
    """A JSON value as one short line (the default example view)."""
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pending_chunks(probe: Probe, groups: Sequence[tuple[str, list[Example]]],
                   done: set[tuple[str, str]]) -> list[tuple[str, list[Example]]]:
    """The chunks still to compute, in order: each group cut into ``probe.chunk_size`` examples, then the
    examples already done taken out (so a chunk is the same chunk whether or not a run was resumed)."""
    size = max(1, int(probe.chunk_size))
    out = []
    for group, selected in groups:
        for i in range(0, len(selected), size):
            chunk = [ex for ex in selected[i : i + size] if (group, ex.id) not in done]
            if chunk:
                out.append((group, chunk))
    return out
