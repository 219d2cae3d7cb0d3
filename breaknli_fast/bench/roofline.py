"""Analytic operation and byte counts of the models' stages, and a stage's share of the machine's ceilings (a
roofline). One code path for the CPU bench (:func:`stage_roofline`) and the GPU check's bounds
(the gpu-bounds measurement, ``breaknli_fast.suite.measurements.gpu_bounds``: :func:`classifier_batch`, :func:`decoder_step`, :func:`against`).

**Operations** are counted from the model's configuration (:class:`Arch`: layers, hidden size, feed-forward size,
heads, vocabulary) and the tokens the engine counted (:class:`~breaknli_fast.engines.base.BatchWork`,
:class:`~breaknli_fast.engines.base.DecodeWork`): 2 operations (a multiply and an add) per weight per token for
every matrix product with a weight (the attention's projections, the feed-forward, a classifier's head, a
generator's output layer), and 2 x 2 per attended position per head dimension for the attention's two products
(scores and the weighted sum). Element-wise work (norms, activations, softmax) is not counted: it is a few percent
at these sizes and runs on other units. *Computed* operations use the shapes the engine ran (every pair padded to
its batch's width, every row a decoder step ran, finished rows not yet dropped included); *useful* ones the real
tokens alone (each pair at its own length, each generated token once); the difference is the padding's share.

**Bytes** are the least a part must read from memory: the weight matrices once per batch (classifier, encoder) or
per step (decoder), the embedding rows of the batch's tokens, the self-attention cache up to each step's position
and the prompts' cross-attention keys and values per step (all at the engine's precision: 1 byte per weight at
int8, 2 at bf16 / fp16, 4 at fp32; caches and activations at 4, or 2 at bf16 / fp16). A model whose weights fit in
the last-level cache can beat this floor.

**The roofline**: a part's time at the ceilings is the larger of its operations over the compute ceiling of its
precision at its product shapes and its bytes over the memory bandwidth; its *binding* ceiling is whichever gives
the larger time (arithmetic intensity, operations per byte, below the ratio of the two ceilings: memory).
A stage's floor is the sum of its parts' (a generate stage: the encoder, then the decoder steps); its share of
the ceiling is that floor over its measured median time, the attained rate over the rate the ceilings allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from breaknli_fast.bench.types import BucketRoofline, MachineCeilings, RooflinePart, StageRoofline
from breaknli_fast.engines.base import BatchWork, DecodeWork

ENCODER_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet")
T5_TYPES = ("t5", "mt5", "umt5")
# the rows of the products measured for a ceiling: a part's typical rows snapped to the nearest of these (log scale)
ROW_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}
ACT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 4}


@dataclass(frozen=True)
class Arch:
    """A transformer's sizes as the counts need them. ``family``: ``encoder`` (BERT / RoBERTa and kin), ``deberta``
    (disentangled attention over ``2 x relative_span`` relative positions), ``bart`` (a classifier running its
    encoder and decoder over the same tokens) or ``t5`` (a generator: encoder, and decoder steps over
    ``decoder_layers``). ``ffn_inputs``: 2 for a gated feed-forward (T5 v1.1's two input projections)."""

    family: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    head_dim: int
    vocab: int
    labels: int = 3
    decoder_layers: int = 0
    ffn_inputs: int = 1
    relative_span: int = 0
    relative_fixed: bool = False  # DeBERTa v2's buckets: 2 x span positions whatever the length

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        v = config.get(n) if isinstance(config, dict) else getattr(config, n, None)
        if v is not None:
            return v
    return default


def arch_of(config: Any) -> tuple[Arch | None, str | None]:
    """The :class:`Arch` of a transformers configuration (or its dict), or None and why it is not counted."""
    mt = str(_get(config, "model_type", default="") or "")
    labels = int(_get(config, "num_labels", default=3) or 3)
    if mt in ENCODER_TYPES or mt in ("deberta", "deberta-v2"):
        if mt == "distilbert":
            d, layers, heads, ff = (int(_get(config, k)) for k in ("dim", "n_layers", "n_heads", "hidden_dim"))
        else:
            d, layers, heads, ff = (int(_get(config, k)) for k in
                                    ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"))
        span, fixed = 0, False
        if mt.startswith("deberta") and _get(config, "relative_attention", default=False):
            buckets = int(_get(config, "position_buckets", default=-1) or -1)
            max_rel = int(_get(config, "max_relative_positions", default=-1) or -1)
            if max_rel < 1:
                max_rel = int(_get(config, "max_position_embeddings", default=512))
            span, fixed = (buckets, True) if mt == "deberta-v2" and buckets > 0 else (max_rel, False)
        return Arch("deberta" if mt.startswith("deberta") else "encoder", layers, d, ff, heads, d // heads,
                    int(_get(config, "vocab_size")), labels, relative_span=span, relative_fixed=fixed), None
    if mt in ("bart", "mbart"):
        d = int(_get(config, "d_model"))
        heads = int(_get(config, "encoder_attention_heads"))
        return Arch("bart", int(_get(config, "encoder_layers")), d, int(_get(config, "encoder_ffn_dim")), heads,
                    d // heads, int(_get(config, "vocab_size")), labels,
                    decoder_layers=int(_get(config, "decoder_layers"))), None
    if mt in T5_TYPES:
        gated = bool(_get(config, "is_gated_act", default=None)
                     if _get(config, "is_gated_act", default=None) is not None
                     else str(_get(config, "feed_forward_proj", default="relu")).startswith("gated"))
        layers = int(_get(config, "num_layers"))
        return Arch("t5", layers, int(_get(config, "d_model")), int(_get(config, "d_ff")),
                    int(_get(config, "num_heads")), int(_get(config, "d_kv")), int(_get(config, "vocab_size")),
                    decoder_layers=int(_get(config, "num_decoder_layers", default=layers) or layers),
                    ffn_inputs=2 if gated else 1), None
    return None, f"operations of model type {mt or '?'!r} are not counted (counted: BERT / RoBERTa, DeBERTa, BART, T5)"


# -- per-token and per-call counts -----------------------------------------------------------------------------------

def _layer_weights(a: Arch) -> int:
    """Weights of one encoder layer's products: the attention's q, k, v and output, the feed-forward."""
    return 3 * a.hidden * a.inner + a.inner * a.hidden + a.ffn_inputs * a.hidden * a.ffn + a.ffn * a.hidden


def _decoder_layer_weights(a: Arch) -> int:
    """Weights one decoder step multiplies per layer: self-attention q, k, v, output; cross-attention q, output
    (its keys and values are computed once per prompt); the feed-forward."""
    return _layer_weights(a) + 2 * a.hidden * a.inner


def _head_weights(a: Arch) -> int:
    return a.hidden * a.hidden + a.hidden * a.labels


@dataclass
class Counts:
    """A part's counts: operations (computed, useful), bytes, and its products as (m, k, n, times per pass)."""

    flops: float
    useful_flops: float
    bytes: float
    gemms: list[tuple[int, int, int, float]]
    rows: int


def snap_rows(m: float) -> int:
    """``m`` rows snapped to :data:`ROW_LADDER` (the nearest in log scale; ties up)."""
    import math

    m = max(1.0, float(m))
    return min(ROW_LADDER, key=lambda r: (abs(math.log2(r) - math.log2(m)), -r))


def _encoder_gemms(a: Arch, rows: int) -> list[tuple[int, int, int, float]]:
    d, i, f = a.hidden, a.inner, a.ffn
    return [(rows, d, 3 * i, 1.0), (rows, i, d, 1.0), (rows, d, f, float(a.ffn_inputs)), (rows, f, d, 1.0)]


def _classifier_flops(a: Arch, tokens: float, squares: float, rows: float) -> float:
    """Operations of a sequence classifier over ``tokens`` tokens whose sequences' squared lengths sum to
    ``squares`` in ``rows`` sequences."""
    per_token = 2 * _layer_weights(a) * a.layers
    attention = 4 * a.inner * a.layers * squares
    flops = per_token * tokens + attention + 2 * _head_weights(a) * rows
    if a.family == "deberta" and a.relative_span:
        # content-to-position and position-to-content scores: each token against 2 x span relative positions;
        # DeBERTa v1 takes span = min(length, max_relative_positions) = length (the engines cap lengths at 512),
        # v2 its position buckets whatever the length
        positions = 2 * a.relative_span * tokens if a.relative_fixed else 2 * squares
        flops += 2 * 2 * a.inner * a.layers * positions
    if a.family == "bart":
        dec = a.decoder_layers
        flops += 2 * (_layer_weights(a) + 4 * a.hidden * a.inner) * dec * tokens  # self + cross projections
        flops += 2 * 4 * a.inner * dec * squares  # self and cross attention over the same length
    return float(flops)


def classifier_batches(a: Arch, work: BatchWork, precision: str) -> Counts:
    """A classifier's batches: computed operations from the padded batches, useful ones from the pairs' own
    lengths, bytes from the batches' weights and tokens."""
    flops = _classifier_flops(a, work.padded_tokens, work.padded_token_squares, work.rows)
    useful = _classifier_flops(a, work.tokens, work.token_squares, work.pairs)
    layers = a.layers + (a.decoder_layers if a.family == "bart" else 0)
    weights = _layer_weights(a) * layers + _head_weights(a) + (
        4 * a.hidden * a.inner * a.decoder_layers if a.family == "bart" else 0)  # BART: cross q, k, v, output
    nbytes = work.batches * weights * WEIGHT_BYTES[precision] + work.padded_tokens * a.hidden * ACT_BYTES[precision]
    rows = snap_rows(work.padded_tokens / max(1, work.batches))
    return Counts(flops, useful, float(nbytes), _encoder_gemms(a, rows), rows)


def classifier_batch(a: Arch, rows: int, width: int, precision: str = "fp32") -> Counts:
    """One batch of ``rows`` pairs at ``width`` tokens (the GPU check's largest bucket)."""
    return classifier_batches(a, _bucket_work(width, 1, rows), precision)


def _bucket_work(width: int, batches: int, rows: int) -> BatchWork:
    """The token work of ``batches`` batches of ``rows`` rows in all at ``width`` (every row counted as useful: the
    pairs' own lengths are not kept by width)."""
    return BatchWork(pairs=rows, tokens=rows * width, token_squares=rows * width ** 2, batches=batches, rows=rows,
                     padded_tokens=rows * width, padded_token_squares=rows * width ** 2)


def _encoder_flops(a: Arch, tokens: float, squares: float) -> float:
    """A T5 encoder over ``tokens`` tokens (``squares``: their sequences' squared lengths), with every decoder
    layer's cross-attention keys and values of its output."""
    return float(2 * _layer_weights(a) * a.layers * tokens + 4 * a.inner * a.layers * squares
                 + 2 * 2 * a.hidden * a.inner * a.decoder_layers * tokens)


def generator_encoder(a: Arch, work: DecodeWork, precision: str) -> Counts:
    weights = _layer_weights(a) * a.layers + 2 * a.hidden * a.inner * a.decoder_layers
    nbytes = (work.batches * weights * WEIGHT_BYTES[precision]
              + work.encoder_padded * a.hidden * ACT_BYTES[precision])
    rows = snap_rows(work.encoder_padded / max(1, work.batches))
    gemms = _encoder_gemms(a, rows) + [(rows, a.hidden, 2 * a.inner * a.decoder_layers, 1.0 / max(1, a.layers))]
    return Counts(_encoder_flops(a, work.encoder_padded, work.encoder_padded_squares),
                  _encoder_flops(a, work.prompt_tokens, work.prompt_token_squares), float(nbytes), gemms, rows)


def _decoder_flops(a: Arch, row_steps: float, positions: float, cross: float) -> float:
    per_row = 2 * (_decoder_layer_weights(a) * a.decoder_layers + a.hidden * a.vocab)
    return float(per_row * row_steps + 4 * a.inner * a.decoder_layers * (positions + cross))


def decoder_weight_bytes(a: Arch, precision: str) -> float:
    """The weights one decoder step reads: every layer's products, its three norms, the final norm, the output
    layer (at the precision's bytes per weight; the norms at its activation bytes)."""
    return float((_decoder_layer_weights(a) * a.decoder_layers + a.hidden * a.vocab) * WEIGHT_BYTES[precision]
                 + (3 * a.decoder_layers + 1) * a.hidden * ACT_BYTES[precision])


def _cache_bytes(a: Arch, positions: float, precision: str) -> float:
    """Keys and values of ``positions`` row-positions in every decoder layer."""
    return float(positions * 2 * a.inner * a.decoder_layers * ACT_BYTES[precision])


def decoder_steps(a: Arch, work: DecodeWork, precision: str) -> Counts:
    nbytes = (work.steps * decoder_weight_bytes(a, precision) + _cache_bytes(a, work.row_positions, precision)
              + _cache_bytes(a, work.prompt_cross, precision))
    rows = snap_rows(work.row_steps / max(1, work.steps))
    d, i, f = a.hidden, a.inner, a.ffn
    gemms = [(rows, d, 3 * i, 1.0), (rows, i, d, 2.0), (rows, d, i, 1.0), (rows, d, f, float(a.ffn_inputs)),
             (rows, f, d, 1.0), (rows, d, a.vocab, 1.0 / max(1, a.decoder_layers))]
    return Counts(_decoder_flops(a, work.row_steps, work.row_positions, work.row_cross),
                  _decoder_flops(a, work.tokens, work.token_positions, work.token_cross), nbytes, gemms, rows)


def decoder_step(a: Arch, rows: int, prompts: int, enc_len: int, position: int,
                 precision: str = "fp32") -> dict[str, float]:
    """One decoder step of ``rows`` rows at ``position`` (0: the first token) over ``prompts`` prompts of
    ``enc_len`` encoder tokens: its operations and the bytes it must read, by kind (the GPU check's bandwidth
    floor)."""
    weights = decoder_weight_bytes(a, precision)
    cache = _cache_bytes(a, rows * (position + 1), precision)
    cross = _cache_bytes(a, prompts * enc_len, precision)
    return {"flops": _decoder_flops(a, rows, rows * (position + 1), rows * enc_len), "weights": weights,
            "self_cache_needed": cache, "cross_kv": cross, "total": weights + cache + cross}


def decoder_step_counts(a: Arch, rows: int, prompts: int, enc_len: int, position: int,
                        precision: str = "fp32") -> Counts:
    """:func:`decoder_step` as the counts of a part (every row useful)."""
    w = DecodeWork()
    w.add_step(rows, position, enc_len, prompts)
    w.tokens, w.token_positions, w.token_cross = w.row_steps, w.row_positions, w.row_cross
    return decoder_steps(a, w, precision)


# -- against the ceilings -----------------------------------------------------------------------------------------

def against(flops: float, nbytes: float, compute_ops_per_s: float | None,
            bytes_per_s: float | None) -> tuple[float | None, str | None]:
    """The least time ``flops`` operations reading ``nbytes`` bytes take at these ceilings, and which binds
    (``compute`` or ``memory``); (None, None) without a compute ceiling. Without a bandwidth, compute binds."""
    if not compute_ops_per_s:
        return None, None
    t_compute = flops / compute_ops_per_s
    t_memory = nbytes / bytes_per_s if bytes_per_s else 0.0
    return (t_memory, "memory") if t_memory > t_compute else (t_compute, "compute")


def compute_ceiling(gemms: Sequence[tuple[int, int, int, float]],
                    peak: Callable[[int, int, int], float | None]) -> float | None:
    """The compute rate of a mix of products at their measured rates (``peak(m, k, n)``, operations per second):
    their operations over the time each takes at its rate, weighted by how often each runs; None where a shape
    has no figure."""
    ops = t = 0.0
    for m, k, n, times in gemms:
        rate = peak(m, k, n)
        if not rate:
            return None
        ops += times * 2 * m * k * n
        t += times * 2 * m * k * n / rate
    return ops / t if t > 0 else None


def parts_of(stage: str, a: Arch, precision: str, clf: BatchWork | None,
             gen: DecodeWork | None) -> list[tuple[str, Counts]]:
    """A stage's parts and their counts: a classify stage's batches; the generate stage's encoder and decoder
    steps (none where the engine counted no computed work)."""
    if stage == "generate":
        if gen is None or not gen.computed or not gen.steps:
            return []
        return [("encoder", generator_encoder(a, gen, precision)), ("decoder steps", decoder_steps(a, gen, precision))]
    if clf is None or not clf.batches:
        return []
    return [("classifier batches", classifier_batches(a, clf, precision))]


def stage_roofline(stage: str, a: Arch, precision: str, ceiling: str | None, median_s: float,
                   clf: BatchWork | None, gen: DecodeWork | None, ceilings: MachineCeilings | None,
                   note: str | None = None) -> StageRoofline | None:
    """A stage against the ceilings of ``ceiling`` (the precision it is held to; None: none, ``note`` says why);
    None where the engine counted no work."""
    parts = parts_of(stage, a, precision, clf, gen)
    if not parts or not median_s:
        return None
    out = roofline_of(parts, precision, ceiling, median_s, ceilings, note)
    if stage != "generate" and clf is not None:
        out.largest_bucket = largest_bucket(a, clf, precision, ceiling, ceilings)
    return out


def _largest(a: Arch, work: BatchWork, precision: str) -> tuple[int, int, int, float, Counts] | None:
    """(width, batches, rows, seconds, counts) of the width whose batches hold the most padded tokens per batch (the
    wider on a tie), among the widths the engine timed; None where it timed none."""
    timed = {int(w): b for w, b in (work.by_width or {}).items() if b[0] and b[2] > 0}
    if not timed:
        return None
    width = max(timed, key=lambda w: (timed[w][1] * w / timed[w][0], w))
    batches, rows = int(timed[width][0]), int(timed[width][1])
    return width, batches, rows, float(timed[width][2]), classifier_batches(a, _bucket_work(width, batches, rows),
                                                                            precision)


def largest_bucket(a: Arch, work: BatchWork, precision: str, ceiling: str | None,
                   ceilings: MachineCeilings | None) -> BucketRoofline | None:
    """The classifier's largest bucket (:func:`_largest`) against the ceilings, timed by its batches' own seconds
    over the workers that ran side by side; None where the engine timed no batch by width."""
    bucket = _largest(a, work, precision)
    if bucket is None:
        return None
    width, batches, rows, seconds, c = bucket
    t = seconds / max(1, int(work.workers or 1))
    out = BucketRoofline(width=width, batches=batches, rows=rows / batches, flops=c.flops, seconds=t,
                         attained_ops_per_s=c.flops / t if t > 0 else None)
    part = roofline_of([("largest bucket", c)], precision, ceiling, t, ceilings).parts[0]
    out.compute_ops_per_s, out.binding, out.floor_s = part.compute_ops_per_s, part.binding, part.floor_s
    if part.floor_s is not None and t > 0:
        out.pct_of_ceiling = 100.0 * part.floor_s / t
    return out


def roofline_of(parts: Sequence[tuple[str, Counts]], precision: str, ceiling: str | None, median_s: float,
                ceilings: MachineCeilings | None, note: str | None = None) -> StageRoofline:
    """Parts that took ``median_s`` seconds in all, against the ceilings of ``ceiling`` (a bench stage; a row of
    the GPU check's bounds)."""
    bw = ceilings.bandwidth.bytes_per_s if ceilings is not None and ceilings.bandwidth is not None else None
    out = StageRoofline(precision=precision, ceiling=ceiling, note=note)
    floors: list[tuple[float, str]] = []
    for name, c in parts:
        compute = None
        if ceiling is not None and ceilings is not None:
            def peak(m: int, k: int, n: int) -> float | None:
                g = ceilings.gemm_at(ceiling, m, k, n)
                return g.ops_per_s if g is not None else None

            compute = compute_ceiling(c.gemms, peak)
        floor, binding = against(c.flops, c.bytes, compute, bw)
        out.parts.append(RooflinePart(name, c.flops, c.useful_flops, c.bytes, c.flops / c.bytes if c.bytes else None,
                                      c.rows, compute, binding, floor))
        if floor is not None and binding is not None:
            floors.append((floor, binding))
        out.flops += c.flops
        out.useful_flops += c.useful_flops
        out.bytes += c.bytes
    out.padding_pct = 100.0 * (1.0 - out.useful_flops / out.flops) if out.flops else None
    out.attained_ops_per_s = out.flops / median_s
    out.useful_ops_per_s = out.useful_flops / median_s
    if floors and len(floors) == len(parts):
        out.floor_s = sum(f for f, _ in floors)
        by: dict[str, float] = {}
        for f, b in floors:
            by[b] = by.get(b, 0.0) + f
        out.binding = max(by, key=lambda b: by[b])
        out.ceiling_ops_per_s = out.flops / out.floor_s if out.floor_s else None
        out.pct_of_ceiling = 100.0 * out.floor_s / median_s
    elif out.note is None and ceiling is not None:
        out.note = ("no ceiling at this stage's product shapes (not measured within the time budget, or no kernel ran "
                    "them here: the ceilings' kernels say which)")
    return out


def needed_gemms(stage: str, a: Arch, precision: str, clf: BatchWork | None,
                 gen: DecodeWork | None) -> list[tuple[int, int, int]]:
    """The product shapes (m, k, n) a stage's ceiling is measured at (a classify stage's largest bucket's too)."""
    shapes = [(m, k, n) for _, c in parts_of(stage, a, precision, clf, gen) for m, k, n, _ in c.gemms]
    bucket = _largest(a, clf, precision) if stage != "generate" and clf is not None else None
    if bucket is not None:
        shapes += [(m, k, n) for m, k, n, _ in bucket[4].gemms if (m, k, n) not in shapes]
    return shapes


# -- a bench's stages -----------------------------------------------------------------------------------------------

CEILING_MODES = ("cached", "fresh", "quick", "off")
CEILINGS_ENV = "BREAKNLI_FAST_CEILINGS"  # the default of bench --ceilings (the test suite sets quick)


def default_ceilings_mode() -> str:
    import os

    return os.environ.get(CEILINGS_ENV) or "cached"


def _arch_of_model(model: str | None) -> tuple[Arch | None, str | None]:
    from breaknli_fast.engines.model_info import load_config

    if not model:
        return None, "no model"
    try:
        return arch_of(load_config(model))
    except Exception as e:  # noqa: BLE001 - a model whose configuration cannot be read is not counted, said why
        return None, f"the configuration of {model!r} cannot be read ({type(e).__name__})"


def add_rooflines(engines: Sequence[Any], device: str, threads: int, mode: str,
                  log: Callable[[str], None] | None = None) -> MachineCeilings | None:
    """Every timed stage of ``engines`` (:class:`~breaknli_fast.bench.types.EngineResult`) against the machine's
    ceilings: its :class:`~breaknli_fast.bench.types.StageRoofline` set in place; returns the ceilings held to
    (None with ``mode`` off). ``mode``: ``cached`` (the cache's figures, measuring what it lacks), ``fresh``
    (measure again), ``quick`` (the smoke form), ``off``."""
    from breaknli_fast.bench.ceilings import gpu_ceilings, measure_ceilings, precision_status

    if mode not in CEILING_MODES:
        raise ValueError(f"ceilings mode {mode!r}: use {', '.join(CEILING_MODES)}")
    if mode == "off":
        return None
    archs: dict[str, tuple[Arch | None, str | None]] = {}
    jobs: list[tuple[Any, str, Arch, str, str | None, str | None]] = []
    shapes: list[tuple[str, int, int, int]] = []
    cuda = device.startswith("cuda")
    for e in engines:
        if not e.ran or e.speed is None or not e.speed.stages:
            continue
        for stage, st in e.speed.stages.items():
            if not st.ran:
                continue
            role = "generator" if stage == "generate" else "classifier"
            precision = getattr(e, f"{role}_precision", None) or e.precision
            model = (e.models or {}).get(role)
            if model not in archs:
                archs[model] = _arch_of_model(model)
            arch, why = archs[model]
            if arch is not None and role == "classifier" and arch.family == "t5":
                arch, why = None, "a text-to-text classifier's operations are not counted"
            if arch is None:
                st.roofline = StageRoofline(precision=precision, note=why)
                continue
            status = "datasheet" if cuda else precision_status(precision)
            ceiling = precision if status in ("measured", "datasheet") else None
            jobs.append((st, stage, arch, precision, ceiling, None if ceiling else status))
            if ceiling:
                shapes += [(ceiling, m, k, n)
                           for m, k, n in needed_gemms(stage, arch, precision, st.classifier_work, st.generator_work)]
    if not jobs:
        return None
    if cuda:
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        ceilings = gpu_ceilings(name, shapes, device)
    else:
        ceilings = measure_ceilings(shapes, threads, "quick" if mode == "quick" else "full", refresh=mode == "fresh",
                                    log=log)
    for st, stage, arch, precision, ceiling, note in jobs:
        uncounted = ("the engine's own decoding: what it computed (padding, steps) is not known, so its operations "
                     "are not counted" if st.generator_work is not None and not st.generator_work.computed
                     else "the engine counted no token work for this stage")
        st.roofline = stage_roofline(stage, arch, precision, ceiling, st.median_s or 0.0, st.classifier_work,
                                     st.generator_work, ceilings, note) or StageRoofline(precision=precision,
                                                                                         note=uncounted)
    return ceilings
