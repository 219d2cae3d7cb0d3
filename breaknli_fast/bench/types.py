"""What a bench measures, as types: built once by the runners, serialised by one function (:func:`to_json`), read
back by one (:func:`from_json`, which also reads the earlier schemas), and rendered -- JSON, Markdown, the terminal,
``--compare``, the recommendation -- from the same objects.

The layout of ``bench.json`` is these classes' fields, in order (schema ``breaknli-fast-bench/3``); a field marked
``omit_none`` is left out while it is None (a stage that did not run has only ``items``), and the keys a class does
not declare are kept in its ``extra`` (what an earlier or later schema wrote). An object read by :func:`from_json`
remembers which of its fields the JSON held: written again, it gives back exactly those keys (a ``null`` an
``omit_none`` field held included) and no field the JSON lacked unless the code has since given it a value, so a
file read and written again keeps every key and gains none.

- :class:`BenchReport`: the whole bench (data, models, workload, engines, notes, failures, the recommendation);
- :class:`EngineResult`: one engine (its spec, status, speed, memory, parity, checks);
- :class:`Speed` (:class:`EndToEnd`, :class:`StageTiming` per stage with its :class:`StageRoofline`,
  :class:`Speedup`, :class:`SpeedSummary`), :class:`Memory`, :class:`Checks`;
- :class:`MachineCeilings` (:class:`GemmCeiling` per precision and product shape, :class:`Bandwidth`): what the
  stages' rooflines were held to;
- :class:`Parity` (:class:`Diff`: one paired difference with its interval and verdict; :class:`TripleCell`,
  :class:`ClassifierParity`, :class:`GeneratorParity`, :class:`HeadlineParity`, :class:`VerdictCounts`) and
  :class:`BatchInvariance`;
- :class:`Recommendation` (:class:`EngineView` for the pick and the fastest): computed from the same
  :class:`EngineResult` objects the checks judged, so a pick never fails a check shown beside it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from breaknli_fast.engines.base import BatchWork, DecodeWork  # the engines' own counters, as they count

SCHEMA = "breaknli-fast-bench/3"
READABLE = ("breaknli-fast-bench/1", "breaknli-fast-bench/2", SCHEMA)  # --compare and from_json read them all

OMIT = {"omit_none": True}  # a field's metadata: left out of the JSON while None
FLAT = {"flatten": True}  # a field's metadata: a dataclass whose fields stand among its parent's in the JSON

JSON = typing.Union[dict, list, str, int, float, bool, None]


# -- the one serialiser, the one reader -------------------------------------------------------------------------

def to_json(obj: Any) -> JSON:
    """``obj`` as JSON values: dataclasses by their fields in order (``extra`` merged in, ``omit_none`` fields left
    out while None), numpy scalars and arrays as numbers and lists, paths as strings, tuples as lists."""
    if is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, JSON] = {}
        read = getattr(obj, READ_KEYS, None)  # the keys the JSON it was read from held (None: built in code)
        for f in fields(obj):
            v = getattr(obj, f.name)
            if f.name == "extra":
                out.update({k: to_json(x) for k, x in v.items()})
            elif f.metadata.get("flatten"):
                out.update(to_json(v))  # type: ignore[arg-type]
            elif read is not None and f.name in read:
                out[f.name] = to_json(v)
            elif read is not None:  # a key the JSON lacked: written once the code gave it a value of its own
                if v is not None and v != _default(f):
                    out[f.name] = to_json(v)
            elif not (v is None and f.metadata.get("omit_none")):
                out[f.name] = to_json(v)
        return out
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


READ_KEYS = "_json_keys"  # the attribute in which an object read by from_json keeps the keys its JSON held


def _default(f: Any) -> Any:
    """A field's default (None where it has none)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _optional_of(hint: Any) -> Any:
    """``X`` of ``X | None`` or ``Optional[X]``; any other hint as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _read(hint: Any, value: Any) -> Any:
    """``value`` (JSON) as ``hint`` says: a dataclass, or a list / dict of them (nested), else as it is."""
    if value is None:
        return None
    hint = _optional_of(hint)
    if is_dataclass(hint):
        return from_json(hint, value) if isinstance(value, dict) else value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and isinstance(value, list):
        return [_read(args[0], v) for v in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _read(args[1], v) for k, v in value.items()}
    return value


def from_json(cls: Any, data: dict[str, JSON]) -> Any:
    """``cls`` from the JSON ``to_json`` wrote (or an earlier schema's): declared keys by their types, missing ones
    at their defaults (None for a field without one: a partial file still reads), the rest into ``extra``. The
    object remembers which keys the JSON held (:func:`to_json` gives back exactly those)."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    kwargs = {k: _read(hints[k], v) for k, v in data.items() if k in known and k != "extra"}
    present = frozenset(kwargs)
    taken = set(kwargs)
    for f in fields(cls):
        if f.metadata.get("flatten"):
            inner = _optional_of(hints[f.name])
            names = {g.name for g in fields(inner)}
            kwargs[f.name] = from_json(inner, {k: v for k, v in data.items() if k in names})
            taken |= names
        elif f.name not in kwargs and f.name != "extra" and f.default is MISSING and f.default_factory is MISSING:
            kwargs[f.name] = None
    if "extra" in known:
        kwargs["extra"] = {k: v for k, v in data.items() if k not in known and k not in taken}
    obj = cls(**kwargs)
    object.__setattr__(obj, READ_KEYS, present)  # frozen dataclasses too
    return obj


# -- the machine's ceilings and each stage's share of them -------------------------------------------------------

@dataclass
class KernelTiming:
    """One kernel's best time for one matrix product (``m`` x ``k`` by ``k`` x ``n``) at the engines' threads."""

    kernel: str  # e.g. "torch F.linear (MKL)", "onnxruntime MatMulInteger u8 x s8 (MLAS)", "torch._int_mm s8 x s8"
    seconds: float | None = None  # the fastest of the timed calls
    ops_per_s: float | None = None  # 2 m k n / seconds
    reps: int = 0
    error: str | None = field(default=None, metadata=OMIT)  # the kernel did not run at this shape


@dataclass
class GemmCeiling:
    """A precision's peak at one product shape: the fastest kernel found (``kernel``, ``ops_per_s``), every kernel
    tried beside it, when it was measured and the machine's load then."""

    precision: str
    m: int
    k: int
    n: int
    kernel: str | None = None
    ops_per_s: float | None = None
    seconds: float | None = None
    kernels: list[KernelTiming] = field(default_factory=list)
    measured_at: str | None = None
    load_average: list[float] | None = None
    reused: bool = False  # read from the cache (not measured by this bench)


@dataclass
class Bandwidth:
    """The memory bandwidth reached by a large copy and a STREAM triad (``a = b + s c``; bytes counted as STREAM
    counts them: 2 arrays for the copy, 3 for the triad) on ``array_bytes`` per array, the best of ``reps``."""

    bytes_per_s: float | None = None  # the better of the two: the bandwidth ceiling
    copy_bytes_per_s: float | None = None
    triad_bytes_per_s: float | None = None
    array_bytes: int = 0
    reps: int = 0
    kernel: str = ""
    measured_at: str | None = None
    load_average: list[float] | None = None
    reused: bool = False


@dataclass
class MachineCeilings:
    """The ceilings a bench's stages were held to: on the CPU measured (``source`` measured; micro-benchmarks at the
    stages' product shapes, at the engines' threads, cached per CPU in ``file`` under ``key``), on a GPU the
    datasheet's (``source`` datasheet). ``precisions``: per precision, ``measured`` or why it has no ceiling."""

    source: str = "measured"
    mode: str = "full"  # full or quick (the smoke form: one call per kernel, small arrays)
    device: str = "cpu"
    threads: int | None = None
    key: dict[str, Any] = field(default_factory=dict)
    file: str | None = None
    precisions: dict[str, str] = field(default_factory=dict)
    bandwidth: Bandwidth | None = None
    gemm: list[GemmCeiling] = field(default_factory=list)
    measured_now: int = 0  # products measured by this bench (the others came from the cache)
    seconds: float = 0.0  # time this bench spent measuring
    budget_s: float | None = None
    not_measured: list[str] = field(default_factory=list)  # shapes left out when the time budget ran out
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def gemm_at(self, precision: str, m: int, k: int, n: int) -> GemmCeiling | None:
        return next((g for g in self.gemm if (g.precision, g.m, g.k, g.n) == (precision, m, k, n)), None)


@dataclass
class RooflinePart:
    """One part of a stage's work (the classifier's batches; the generator's encoder, its decoder steps): operations
    from the model's sizes and the tokens counted (``flops``: as computed, padding included; ``useful_flops``: the
    real tokens' alone), the bytes it must read at least (``bytes``: weights once per batch or step, the attention
    caches), their ratio, the compute ceiling at its product shapes (``rows``: the typical rows of its products),
    and whichever of compute and bandwidth binds it; ``floor_s``: its time at that ceiling."""

    name: str
    flops: float = 0.0
    useful_flops: float = 0.0
    bytes: float = 0.0
    intensity: float | None = None  # flops / byte
    rows: int | None = None
    compute_ops_per_s: float | None = None
    binding: str | None = None  # compute or memory
    floor_s: float | None = None


@dataclass
class BucketRoofline:
    """A classify stage's largest bucket against the ceilings: the width whose batches hold the most padded tokens
    per batch, its ``batches`` of ``rows`` rows on average, their operations (padding included) and ``seconds`` (the
    batches' own seconds, each on its worker, over the workers that ran side by side: its share of the stage's
    time), the compute ceiling at its product shapes, what binds, and its ``pct_of_ceiling``."""

    width: int = 0
    batches: int = 0
    rows: float = 0.0
    flops: float = 0.0
    seconds: float = 0.0
    attained_ops_per_s: float | None = None
    compute_ops_per_s: float | None = None
    binding: str | None = None
    floor_s: float | None = None
    pct_of_ceiling: float | None = None


@dataclass
class StageRoofline:
    """A stage's share of the machine's ceilings, per iteration: ``attained_ops_per_s`` (operations computed,
    padding included, over the median iteration), ``useful_ops_per_s`` (the real tokens' operations), the share of
    the computed operations spent on padding, and ``pct_of_ceiling``: the time the stage would take at the ceilings
    that bind each part (``floor_s``) over its median time, in percent. ``ceiling`` names the precision held to;
    None, with ``note``, where there is none (bf16 on a CPU that does not compute it natively, ...)."""

    precision: str
    ceiling: str | None = None
    parts: list[RooflinePart] = field(default_factory=list)
    flops: float = 0.0
    useful_flops: float = 0.0
    bytes: float = 0.0
    padding_pct: float | None = None
    attained_ops_per_s: float | None = None
    useful_ops_per_s: float | None = None
    binding: str | None = None
    floor_s: float | None = None
    ceiling_ops_per_s: float | None = None  # the rate the floor stands for: flops / floor_s
    pct_of_ceiling: float | None = None
    note: str | None = field(default=None, metadata=OMIT)
    largest_bucket: BucketRoofline | None = field(default=None, metadata=OMIT)  # a classify stage's


# -- speed ------------------------------------------------------------------------------------------------------

@dataclass
class StageTiming:
    """One stage of the fixed workload, timed: ``items`` (0: the stage had nothing to do, and nothing else is set),
    the iterations' seconds, throughput and latency; the classify stages' and the generate stage's own figures; the
    token work one iteration computed, as the engine counted it (``classifier_work`` / ``generator_work``), and the
    stage against the machine's ceilings (``roofline``)."""

    items: int
    unit: str | None = field(default=None, metadata=OMIT)
    iterations: int | None = field(default=None, metadata=OMIT)
    warmup: int | None = field(default=None, metadata=OMIT)
    total_s: float | None = field(default=None, metadata=OMIT)
    median_s: float | None = field(default=None, metadata=OMIT)
    mean_s: float | None = field(default=None, metadata=OMIT)
    min_s: float | None = field(default=None, metadata=OMIT)
    std_s: float | None = field(default=None, metadata=OMIT)
    classifier_work: BatchWork | None = field(default=None, metadata=OMIT)
    generator_work: DecodeWork | None = field(default=None, metadata=OMIT)
    roofline: StageRoofline | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)  # pairs_per_s, batch_latency; tokens_per_s, call_latency, ...

    @property
    def ran(self) -> bool:
        return bool(self.items) and bool(self.median_s)

    def get(self, key: str) -> Any:
        """A stage-specific figure (``pairs_per_s``, ``tokens_per_s``, ``batch_latency``, ...) or a field."""
        return getattr(self, key) if key in self.__dataclass_fields__ else self.extra.get(key)


@dataclass
class MetricValue:
    """A headline metric over one engine's own examples: n, the rate and its 95 % interval (percent)."""

    n: int = 0
    rate: float | None = None
    ci: list[float] | None = None
    kind: str | None = None  # share, mean or ratio


@dataclass
class RunFigures:
    """One end-to-end run of the probe: examples, the study's seconds and pairs per stage, the classifier's and the
    generator's throughput and latencies."""

    examples: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_pairs: dict[str, int] = field(default_factory=dict)
    classifier_pairs: int = 0
    classifier_pairs_computed: int | None = None
    classifier_pairs_per_s: float | None = None
    generated_sequences: int = 0
    generated_tokens: int = 0
    generated_tokens_per_s: float | None = None
    classifier_batch_latency: dict[str, float | None] | None = None  # measure.latency_stats
    generator_call_latency: dict[str, float | None] | None = None


@dataclass
class Funnel:
    """BreakNLI's examples of one mode, stage by stage: selected, processed, classified correctly, generated for,
    dropped (too few unique candidates, too few on target), evaluated (and by the reference's label)."""

    selected: int = 0
    processed: int = 0
    correct: int = 0
    generated: int = 0
    too_few_unique: int = 0
    too_few_on_target: int = 0
    evaluated: int = 0
    by_label: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EndToEnd:
    """The probe run end to end on the whole data, ``repeats`` times: the walls, their median, and the figures of
    the median run."""

    repeats: int = 1
    warmup_runs: int = 0
    warmup_examples: int = 0
    wall_s: list[float] = field(default_factory=list)
    median_wall_s: float = 0.0
    examples_per_s: float | None = None
    run: RunFigures = field(default_factory=RunFigures, metadata=FLAT)
    stage_figures_of_run: int = 1
    repeats_identical: bool | None = None
    headline: dict[str, MetricValue] = field(default_factory=dict)  # the probe's headline metrics
    accuracy_ph: float | None = field(default=None, metadata=OMIT)  # BreakNLI
    funnel: dict[str, Funnel] | None = field(default=None, metadata=OMIT)  # per mode
    metrics: dict[str, dict[str, dict[str, float | list[float] | None]]] | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Speedup:
    """The reference's time over the engine's: end to end, and (BreakNLI) on the fixed workload in all and per stage,
    by median and by best iteration."""

    workload: float | None = field(default=None, metadata=OMIT)
    workload_best: float | None = field(default=None, metadata=OMIT)
    stages: dict[str, float | None] | None = field(default=None, metadata=OMIT)
    stages_best: dict[str, float | None] | None = field(default=None, metadata=OMIT)
    end_to_end: float | None = None


@dataclass
class SpeedSummary:
    classifier_pairs_per_s: float | None = None
    generated_tokens_per_s: float | None = None
    classifier_batch_p95_ms: float | None = None
    generator_call_p95_ms: float | None = None
    examples_per_s: float | None = None


@dataclass
class Speed:
    end_to_end: EndToEnd = field(default_factory=EndToEnd)
    stages: dict[str, StageTiming] | None = field(default=None, metadata=OMIT)
    classifier_batch_latency: dict[str, Any] | None = field(default=None, metadata=OMIT)
    workload_s: float | None = field(default=None, metadata=OMIT)
    speedup: Speedup | None = field(default=None, metadata=OMIT)
    summary: SpeedSummary | None = field(default=None, metadata=OMIT)


@dataclass
class Memory:
    """Peak resident memory of the engine's run (``peak_rss_mib``; with ``shared``, of all the interleaved engines
    together) and of its loading, in MiB, and torch's peak GPU allocation where there is a GPU."""

    peak_rss_mib: float | None = None
    rss_before_load_mib: float | None = None
    rss_now_mib: float | None = None
    rss_method: str = ""
    gpu_peak_allocated_mib: float | None = None
    gpu_note: str | None = None
    shared: bool | None = field(default=None, metadata=OMIT)
    note: str | None = field(default=None, metadata=OMIT)
    rss_after_load_mib: float | None = None
    peak_rss_load_mib: float | None = None
    gpu_peak_allocated_load_mib: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# -- parity and checks -------------------------------------------------------------------------------------------

@dataclass
class Familywise:
    """A *different* cell judged with all ``cells`` of its engine (Bonferroni): its interval at ``confidence``,
    and whether it still excludes 0 (:func:`breaknli_fast.stats.familywise_different`)."""

    cells: int
    confidence: float
    ci: list[float] | None
    confirmed: bool


@dataclass
class Diff:
    """One paired difference, engine - reference, in percentage points over the examples both scored
    (:func:`breaknli_fast.stats.paired_diff`), with its 95 % interval and -- once judged
    (:func:`breaknli_fast.bench.parity.add_verdicts`) -- its verdict: equivalent, different or inconclusive."""

    n: int = 0
    diff: float | None = None
    ci: list[float] | None = None
    method: str | None = None  # tango (0/1 per example) or t
    a: float | None = field(default=None, metadata=OMIT)  # the engine's rate
    b: float | None = field(default=None, metadata=OMIT)  # the reference's
    verdict: str | None = field(default=None, metadata=OMIT)
    n_needed: int | None = field(default=None, metadata=OMIT)  # examples a decision would take
    too_small: bool | None = field(default=None, metadata=OMIT)  # no outcome on n examples could show equivalence
    familywise: Familywise | None = field(default=None, metadata=OMIT)  # the cell judged with all the engine's
    only_reference: int | None = field(default=None, metadata=OMIT)  # examples scored by one run only
    only_engine: int | None = field(default=None, metadata=OMIT)
    kind: str | None = field(default=None, metadata=OMIT)  # a headline metric's kind and description
    description: str | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)  # the interval's own figures: up / down, sd, changed

    @classmethod
    def of(cls, entry: dict[str, Any]) -> "Diff":
        """From what :mod:`breaknli_fast.stats` returns."""
        return from_json(cls, entry)

    def entry(self) -> dict[str, Any]:
        """As :mod:`breaknli_fast.stats` takes it (equivalence, familywise_different)."""
        return to_json(self)  # type: ignore[return-value]

    def text(self) -> str:
        """``+0.50 pp [-0.25, +1.25]``."""
        if self.diff is None:
            return "?"
        lo, hi = self.ci or (None, None)
        return f"{self.diff:+.2f} pp" + (f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else "")


@dataclass
class ClassifierParity:
    """The engine's logits against the reference's on identical pairs."""

    n: int = 0
    label_agreement_pct: float | None = None
    max_abs_logit_diff: float | None = None
    mean_abs_logit_diff: float | None = None


@dataclass
class TripleCell:
    """One cell (a mode x the reference's label, or overall) of BreakNLI's breakage parity."""

    n: int = 0
    rates: dict[str, Any] | None = field(default=None, metadata=OMIT)  # the engine's rates (fixed triples)
    only_reference: int | None = field(default=None, metadata=OMIT)  # end to end: evaluated by one run only
    only_engine: int | None = field(default=None, metadata=OMIT)
    inequality: Diff | None = None
    relaxed: Diff | None = None
    examples_changed: int | None = field(default=None, metadata=OMIT)


@dataclass
class TokenAgreement:
    """Greedy decoding of the same prompts: equal tokens and identical sequences."""

    n: int = 0
    positions: int | None = field(default=None, metadata=OMIT)
    token_agreement_pct: float | None = None
    identical_sequences_pct: float | None = None
    unit: str | None = field(default=None, metadata=OMIT)  # token ids, or whitespace words
    max_new_tokens: int | None = field(default=None, metadata=OMIT)


@dataclass
class SampledIdentity:
    """Examples both runs generated for whose kept candidates are identical."""

    n: int = 0
    identical_pct: float | None = None


@dataclass
class GeneratorParity:
    greedy: TokenAgreement = field(default_factory=TokenAgreement)
    sampled_candidates: SampledIdentity = field(default_factory=SampledIdentity)


@dataclass
class RecordAgreement:
    """Records (paired by the probe's key) with identical predictions, and labels equal input by input."""

    records: int = 0
    only_reference: int = 0
    only_engine: int = 0
    available: bool = False  # the probe's records hold predictions
    identical: int | None = field(default=None, metadata=OMIT)
    identical_pct: float | None = field(default=None, metadata=OMIT)
    identical_ci: list[float] | None = field(default=None, metadata=OMIT)
    labels_compared: int | None = field(default=None, metadata=OMIT)
    labels_equal: int | None = field(default=None, metadata=OMIT)
    label_agreement_pct: float | None = field(default=None, metadata=OMIT)
    inputs_in_one_run_only: int | None = field(default=None, metadata=OMIT)


@dataclass
class GroupParity:
    """The headline differences on one group of a ``--by`` column."""

    group: str
    value: str
    examples: int
    metrics: dict[str, Diff] = field(default_factory=dict)


@dataclass
class ColumnParity:
    kind: str  # category (0/1) or value
    groups: list[GroupParity] = field(default_factory=list)


@dataclass
class HeadlineParity:
    """Any probe's parity: record agreement, and each headline metric's paired difference (and per ``--by``
    group, informative only)."""

    records: RecordAgreement = field(default_factory=RecordAgreement)
    metrics: dict[str, Diff] = field(default_factory=dict)
    by: dict[str, ColumnParity] | None = field(default=None, metadata=OMIT)


@dataclass
class VerdictCounts:
    equivalent: int = 0
    different: int = 0
    inconclusive: int = 0
    too_small: int = 0
    different_confirmed: int = 0  # different cells that stay different with all the engine's cells judged together


@dataclass
class Parity:
    """An engine's parity with the reference: any probe's headline parity and, for BreakNLI, the classifier on the
    fixed workload, the breakage cells on fixed triples and end to end, the generator; the verdicts' counts."""

    meaningful: bool = True
    classifier: dict[str, ClassifierParity] | None = field(default=None, metadata=OMIT)
    fixed_triples: dict[str, dict[str, TripleCell]] | None = field(default=None, metadata=OMIT)
    end_to_end: dict[str, dict[str, TripleCell]] | None = field(default=None, metadata=OMIT)
    generator: GeneratorParity | None = field(default=None, metadata=OMIT)
    headline: HeadlineParity | None = field(default=None, metadata=OMIT)
    verdicts: VerdictCounts | None = field(default=None, metadata=OMIT)

    def cells(self) -> list[tuple[str, Diff]]:
        """Every difference with its place: ("fixed triples: contradictive overall inequality", diff), ..., then the
        probe's headline metrics ("headline: <metric>", diff)."""
        out = []
        for block, name in ((self.fixed_triples, "fixed triples"), (self.end_to_end, "end to end")):
            for mode, table in (block or {}).items():
                for cell, entry in table.items():
                    for k in ("inequality", "relaxed"):
                        d = getattr(entry, k)
                        if d is not None:
                            out.append((f"{name}: {mode} {cell} {k}", d))
        for metric, d in (self.headline.metrics if self.headline is not None else {}).items():
            out.append((f"headline: {metric}", d))
        return out


@dataclass
class BatchInvariance:
    """Labels of the same pairs in the engine's batches against one pair per call; the logits of the reversed call
    and of chunks of 7 pairs against the one call (where measured)."""

    pairs: int = 0
    labels_changed: int | None = None
    changed_pct: float | None = None
    max_abs_logit_diff: float | None = None
    max_batch: int | None = field(default=None, metadata=OMIT)
    token_budget: int | None = field(default=None, metadata=OMIT)
    reversed_max_abs_logit_diff: float | None = field(default=None, metadata=OMIT)
    chunked_max_abs_logit_diff: float | None = field(default=None, metadata=OMIT)

    @property
    def bit_equal(self) -> bool | None:
        """Every arrangement gave the one call's logits to the bit (None: not measured)."""
        diffs = (self.max_abs_logit_diff, self.reversed_max_abs_logit_diff, self.chunked_max_abs_logit_diff)
        if not self.pairs or any(d is None for d in diffs):
            return None
        return all(d == 0.0 for d in diffs)


@dataclass
class Checks:
    """The bench's judgement of one engine: ``applied`` (False where parity means nothing), the failures, passed."""

    applied: bool
    failures: list[str]
    passed: bool


# -- one engine, the whole bench ------------------------------------------------------------------------------------

@dataclass
class EngineResult:
    """One engine of a bench, as it was asked for and as it ran (``status`` ok, skipped or failed)."""

    label: str
    engine: str = ""
    precision: str = ""
    classifier_precision: str | None = field(default=None, metadata=OMIT)
    generator_precision: str | None = field(default=None, metadata=OMIT)
    mlm_precision: str | None = field(default=None, metadata=OMIT)
    component_of: str | None = None
    device: str = "cpu"
    reference: bool = False
    spec: dict[str, Any] = field(default_factory=dict)  # the --engines entry (BenchEngine.to_dict)
    models: dict[str, str | list[str] | None] = field(default_factory=dict)  # role -> model (mlm: several)
    status: str = "ok"
    reason: str | None = None
    load_average_start: list[float] | None = field(default=None, metadata=OMIT)
    load_s: float | None = field(default=None, metadata=OMIT)
    info: dict[str, Any] | None = field(default=None, metadata=OMIT)  # what each loaded engine says about itself
    speed: Speed | None = field(default=None, metadata=OMIT)
    batch_invariance: BatchInvariance | None = field(default=None, metadata=OMIT)
    parity: Parity | None = field(default=None, metadata=OMIT)
    memory: Memory | None = field(default=None, metadata=OMIT)
    load_average_end: list[float] | None = field(default=None, metadata=OMIT)
    checks: Checks | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.status == "ok"

    @property
    def speedup(self) -> float | None:
        """The end-to-end speed-up over the reference."""
        return self.speed.speedup.end_to_end if self.speed is not None and self.speed.speedup is not None else None

    @property
    def passed_checks(self) -> bool:
        """Whether the engine passed every check of the bench (not judged counts as passed)."""
        return self.checks is None or self.checks.passed is not False

    def cells(self) -> list[tuple[str, Diff]]:
        """Every paired difference of the engine's parity with its place, e.g. ``fixed triples: contradictive
        overall inequality``."""
        return self.parity.cells() if self.parity is not None else []

    @property
    def delegated(self) -> dict[str, str]:
        """Role -> the engine that ran it, for each role this entry's engine handed to another (``ct2:int8``'s
        classifier ran on ort: CTranslate2 has none), from what each loaded engine said about itself."""
        cfg = (self.spec or {}).get("config") or {}
        out: dict[str, str] = {}
        for role, info in (self.info or {}).items():
            infos = [info] if "engine" in info else [x for x in info.values() if isinstance(x, dict)]
            ran = sorted({str(x.get("engine")) for x in infos if x.get("engine")})
            asked = cfg.get(f"{role}_engine") or cfg.get("engine") or self.engine
            if asked and asked != "auto" and ran and ran != [asked]:
                out[role] = "/".join(ran)
        return out

    @property
    def did_the_work(self) -> bool:
        """Whether the engine asked for ran at least one of the bench's models itself (an entry whose every role
        was handed to another engine measured that engine, not its own)."""
        return not self.info or len(self.delegated) < len(self.info)

    @property
    def shown_label(self) -> str:
        """The label, with each role run by another engine said: ``ct2:int8 (classifier on ort)``."""
        d = self.delegated
        return self.label + (f" ({', '.join(f'{r} on {e}' for r, e in d.items())})" if d else "")

    @property
    def verdicts(self) -> VerdictCounts | None:
        return self.parity.verdicts if self.parity is not None else None


@dataclass
class EngineView:
    """An engine as the recommendation describes it."""

    label: str
    speedup: float | None
    confirmed: list[str]  # cells that stay different with all the engine's cells judged together
    different_at_95: list[str]  # cells different at 95 % each, most different first
    identical_candidates: bool  # every sampled candidate is the reference's
    failed_checks: list[str]


@dataclass
class Recommendation:
    """The fastest engine not shown to differ from the reference and passing every check (``pick``; None where
    parity means nothing or no engine qualifies), beside the fastest overall."""

    meaningful: bool
    reference: str | None
    pick: EngineView | None
    fastest: EngineView


@dataclass
class Seeds:
    probe: int | None = None
    random_weights: int | None = None  # the random-weight models' seed
    per_example: str | None = None  # how each example's seed is derived
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataSummary:
    """The data every engine ran on: the dataset, the slice taken and why rows were skipped."""

    name: str | None = None
    split: str | None = None
    limit: int | None = None
    source: dict[str, str | None] | None = None  # where it was read (embedded, a file, the hub)
    slice: dict[str, Any] | None = field(default=None, metadata=OMIT)  # data.slicing.describe
    examples: int = 0
    skips: dict[str, Any] | None = None  # data.loaders.Skips.to_dict
    by: list[str] | None = field(default=None, metadata=OMIT)  # the --by columns
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelsSummary:
    """The models of the probe's roles, random-weight shapes where used, and each model's fingerprint before and
    whether any changed while the bench ran."""

    generator: str | None = None
    classifier: str | None = None
    mlm: list[str] | None = None
    random_weights: dict[str, RandomModel] | None = None
    fingerprints: dict[str, Any] = field(default_factory=dict)  # engines.model_info.model_fingerprint per model
    changed_during_bench: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RandomModel:
    """A real architecture with random weights (``bench --random-weights``), built in the cache."""

    shape: str
    path: str
    parameters: int
    tokenizer_size: int


@dataclass
class WorkloadSummary:
    """The fixed inputs of every engine (BreakNLI's stages), counted."""

    classify_ph_pairs: int = 0
    generate_prompts: int = 0
    relation_pairs: int = 0
    evaluate_pairs: int = 0
    fixed_triples: dict[str, int] = field(default_factory=dict)  # per mode
    greedy_prompts: int = 0
    invariance_pairs: int = 0
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchReport:
    """A whole bench: what ran, on what, and every engine's figures (``bench.json``)."""

    schema: str = SCHEMA
    command: str | None = None
    started: str | None = None
    finished: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    probe: str = "breaknli"
    probe_identity: dict[str, Any] | None = None
    headline_metrics: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    seeds: Seeds = field(default_factory=Seeds)
    data: DataSummary = field(default_factory=DataSummary)
    models: ModelsSummary = field(default_factory=ModelsSummary)
    workload: WorkloadSummary = field(default_factory=WorkloadSummary)
    reference: str | None = None
    parity_meaningful: bool = True
    tolerance_pp: float | None = None
    min_agreement_pct: float | None = None
    notes: list[str] = field(default_factory=list)
    engines: list[EngineResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    passed: bool = False
    recommendation: Recommendation | None = field(default=None, metadata=OMIT)
    ceilings: MachineCeilings | None = field(default=None, metadata=OMIT)  # what the stages' rooflines were held to
    extra: dict[str, Any] = field(default_factory=dict)  # a LoadGen bench's scenarios, settings, cold starts, ...

    def engine(self, label: str) -> EngineResult:
        for e in self.engines:
            if e.label == label:
                return e
        raise KeyError(label)

    def ran(self) -> Iterator[EngineResult]:
        return (e for e in self.engines if e.ran)
