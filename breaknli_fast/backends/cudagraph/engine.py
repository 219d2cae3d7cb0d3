"""The cudagraph engine's loaders: a T5 generator whose decode loop runs its own step (:mod:`.t5`) and a BERT /
RoBERTa classifier whose batches run its own forward pass (:mod:`.encoder`), each captured as one CUDA graph per
bucket and replayed (:mod:`.graphs`). The options are :class:`GraphOptions`.

Buckets. A generator call's prompts go in batches of at most ``gen_batch`` prompts (64 on CUDA); a batch of ``P``
prompts of at most ``L`` tokens runs in the bucket of the smallest ladder values ``P_b >= P`` (:data:`PROMPT_LADDER`)
and ``L_b >= L`` (:data:`ENCODER_LADDER`), ``P_b x K`` rows (the bucket's extra prompts are copies of the first,
their rows computed and dropped), with the self-attention cache as long as ``max_new_tokens`` rounded up to 16, and
one graph per 16 positions of it that a step attends to (``span``: steps 1-16 read 16 positions, 17-32 read 32). A
classifier pair of ``n`` tokens runs at the smallest length ``L_b >= n`` of :data:`PAIR_LADDER` -- its own length
decides it, never its neighbours' -- and a call's pairs of one length go in batches of the largest
:data:`BATCH_LADDER` size whose padded tokens fit ``batch_tokens`` (the last one at the smallest size that holds
it). A pair's or a prompt's result therefore never depends on its batch's padding length; on a GPU a batch's row
count may still change a matrix product's kernel, hence the last bits (tests/test_cuda.py measures it).

On the CPU the same steps run eagerly (the tests and dry runs); CUDA graphs are captured on CUDA only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from breaknli_fast.backends.cudagraph.encoder import BertFamilyEncoder, supported
from breaknli_fast.backends.cudagraph.fused import FUSED_MODES
from breaknli_fast.backends.cudagraph.graphs import MAX_GRAPHS, GraphRunner
from breaknli_fast.backends.cudagraph.quant import kernels_used
from breaknli_fast.backends.cudagraph.states import StateCache
from breaknli_fast.backends.cudagraph.t5 import DecodeState, T5GraphDecoder
from breaknli_fast.engines.blas import check_reproducible_blas
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, Decoding, DecodeWork, EngineInfo, NonFiniteError
from breaknli_fast.engines.batching import BatchedClassifier, clip_text
from breaknli_fast.engines.compat import load_seq2seq
from breaknli_fast.engines.cuda import prepare as prepare_cuda, sdpa_state, tf32_state
from breaknli_fast.engines.generation import GenerationOptions, HFGenerator, batched_sampling_supported
from breaknli_fast.engines.model_info import (ModelLoadError, effective_max_length, label_permutation, load_config,
                                              load_tokenizer, model_kind, resolve_model)
from breaknli_fast.engines.options import option
from breaknli_fast.engines.sampling import CUDA_SYNC_EVERY, T5_FAMILIES, uniforms

ENGINE = "cudagraph"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
          "fp8": torch.bfloat16, "int8": torch.bfloat16}  # fp8 / int8: quantised products, the rest as at bf16
QUANTISED = ("fp8", "int8")
PROMPT_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # prompts per generator bucket (capped at gen_batch)
ENCODER_LADDER = (16, 32, 64, 128, 256, 512)  # prompt tokens per generator bucket
# tokens of a classifier pair's bucket: multiples of 8 to 128 (the torch engine's own padded widths there, where
# NLI pairs lie), of 16 to 256, of 32 to 512: a pair pads at most 7 tokens below 128 (the former ladder, 16 / 32 /
# 48 / 64 / 96 / 128 / ..., padded SNLI pairs 1.36-1.67x)
PAIR_LADDER = tuple(range(8, 129, 8)) + tuple(range(144, 257, 16)) + tuple(range(288, 513, 32))
BATCH_LADDER = (8, 16, 32, 64, 128, 256, 512)  # pairs per classifier bucket
# ... and below 8 on CUDA: a length group's last pairs pad fewer rows (a GPU's products may change their last bits
# with the row count anyway; on the CPU, batches of at least 8 rows keep a pair's logits the same bits whatever
# its batch, tests/test_batch_independence.py)
CUDA_SMALL_BATCHES = (1, 2, 4)
MIN_PIECE = 8  # a length group's last pairs below this many go in one batch of the next ladder size (padded rows)
CLASSIFIER_MAX_GRAPHS = 256  # the classifier's graphs by default (a graph's intermediates share one pool)
STEP_MULTIPLE = 16  # the self-attention cache's length: max_new_tokens rounded up to this (aligned attention masks)
GPU_BATCH_TOKENS = 65536  # padded tokens of a classifier batch on CUDA (512 pairs of 128 tokens)
GRAPH_MODES = ("auto", "cuda", "eager", "standin")
CPU_STATE_MIB = 2048  # decode states held on the CPU by default (state_mib)
CUDA_STATE_SHARE = 0.25  # ... on CUDA: this share of the GPU's memory


@dataclass
class GraphOptions(GenerationOptions):
    """The options of the cudagraph engine's loaders. ``graphs``: ``auto`` (CUDA graphs on CUDA, eager steps on
    the CPU), ``cuda``, ``eager`` (the same steps without graphs, to compare) or ``standin`` (the CPU stand-in of
    the graphs, for tests). ``max_graphs``: graphs one engine keeps (further buckets run eagerly, counted; default
    :data:`~.graphs.MAX_GRAPHS` for the generator, :data:`CLASSIFIER_MAX_GRAPHS` for the classifier).
    ``sync_every``: generator steps between the host's looks at the device (all rows finished?).
    ``batch_tokens``: a classifier batch's padded tokens at most (default: 65,536 on CUDA, ``token_budget`` on the
    CPU). ``state_mib``: the generator's decode states held at most, in MiB (least recently used evicted first,
    :mod:`.states`; default: a quarter of the GPU's memory on CUDA, :data:`CPU_STATE_MIB` on the CPU). ``fused``:
    the generator's decoder step as written (``off``), written for fusion and run as plain torch operations
    (``eager``) or compiled by ``torch.compile`` (``compile``; :mod:`.fused`)."""

    engine = ENGINE

    graphs: str = option("auto")
    max_graphs: int | None = option(None)
    sync_every: int = option(CUDA_SYNC_EVERY, roles=(GENERATOR,))
    batch_tokens: int | None = option(None, roles=(CLASSIFIER,))
    state_mib: float | None = option(None, roles=(GENERATOR,))
    fused: str = option("off", roles=(GENERATOR,))


OPTIONS = GraphOptions


def _check(device: str, o: GraphOptions) -> str:
    """The graph mode of ``o.graphs`` on ``device``, after the device's checks (one line each)."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError("--device cuda was requested but no CUDA GPU is visible to torch")
        prepare_cuda(device)  # TF32 off unless BREAKNLI_FAST_TF32=1, cuDNN attention off (engines/cuda.py)
    mode = str(o.graphs).lower()
    if mode not in GRAPH_MODES:
        raise ModelLoadError(f"cudagraph option graphs={o.graphs!r}: use {', '.join(GRAPH_MODES)}")
    if mode == "auto":
        mode = "cuda" if device.startswith("cuda") else "eager"
    if mode == "cuda" and not device.startswith("cuda"):
        raise ModelLoadError("cudagraph option graphs=cuda needs --device cuda (on the CPU: graphs=eager or standin)")
    for name in ("max_graphs", "sync_every"):
        if getattr(o, name) is not None and int(getattr(o, name)) < 1:
            raise ModelLoadError(f"cudagraph option {name} must be at least 1, not {getattr(o, name)}")
    fused = getattr(o, "fused", "off")
    if fused not in FUSED_MODES:
        raise ModelLoadError(f"cudagraph option fused={fused!r}: use {', '.join(FUSED_MODES)}")
    mib = getattr(o, "state_mib", None)
    if mib is not None and not (isinstance(mib, (int, float)) and 0 < float(mib) < float("inf")):
        raise ModelLoadError(f"cudagraph option state_mib must be a positive number of MiB, not {mib!r}")
    return mode


def bucket(n: int, ladder: Sequence[int]) -> tuple[int, bool]:
    """The smallest ladder value >= ``n``, and whether there is one (else ``n`` itself: a shape off the ladder)."""
    for b in ladder:
        if b >= n:
            return int(b), True
    return int(n), False


def split_rows(n: int, most: int, ladder: Sequence[int]) -> list[int]:
    """Batch sizes for ``n`` rows of one length bucket: ``most`` (the largest ladder size that fits the token
    budget) while that many are left, then the largest ladder size that fits what is left, down to fewer than
    :data:`MIN_PIECE` rows, which go in one batch of the smallest ladder size that holds them (its padded rows)."""
    sizes: list[int] = []
    left = int(n)
    while left > 0:
        if left < MIN_PIECE and bucket(left, ladder)[0] <= most:
            sizes.append(left)  # one batch, padded to the ladder size that holds it
            break
        sizes.append(max([b for b in ladder if b <= min(left, most)] or [min(left, most)]))
        left -= sizes[-1]
    return sizes


def _copy_in(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A host tensor into a static buffer: through pinned memory without a wait on CUDA, plainly on the CPU."""
    dst.copy_(src.pin_memory() if dst.device.type == "cuda" else src, non_blocking=True)


def span_of(step: int, cache: int) -> int:
    """The cache positions the step at index ``step`` attends to: a multiple of 16 that holds it, at most ``cache``."""
    return min(cache, math.ceil((step + 1) / STEP_MULTIPLE) * STEP_MULTIPLE)


class _GraphCounters:
    """Both roles' counters of their graph runner."""

    runner: GraphRunner

    def runtime_details(self) -> dict[str, Any]:
        """The graph counters as they stand (a study's report.json keeps them: captures happen while it runs)."""
        return {"graphs": self.runner.stats.to_dict()}


def _cuda_details(device: str) -> dict[str, Any]:
    """TF32 and SDPA on a GPU; on the CPU, the BLAS's reproducibility mode (:mod:`breaknli_fast.engines.blas`)."""
    if device.startswith("cuda"):
        return {"tf32": tf32_state(), "sdpa": sdpa_state()}
    return {"blas": check_reproducible_blas()}


class GraphGenerator(_GraphCounters, HFGenerator):
    """The shared :class:`~breaknli_fast.engines.generation.HFGenerator` whose sampling (``fast`` sampler) and
    greedy decoding run the engine's own decode loop (module notes); beam search, diverse beam and the
    ``transformers`` sampler run transformers' code on the same model, eagerly (``details["own_loop"]`` says
    which ran)."""

    def __init__(self, model: Any, tokenizer: Any, info: EngineInfo, device: str, o: GraphOptions, mode: str):
        super().__init__(model, tokenizer, info, device=device, max_input_length=o.max_input_length,
                         prompt_batch=o.prompt_batch)
        quant = info.precision if info.precision in QUANTISED else None
        self.decoder = T5GraphDecoder(model, model.dtype, device, fused=o.fused, quant=quant)
        self.runner = GraphRunner(device, mode, o.max_graphs or MAX_GRAPHS, name=f"{ENGINE} generator")
        self.sync_every = int(o.sync_every)
        self.prompt_ladder = tuple(b for b in PROMPT_LADDER if b < self.prompt_batch) + (self.prompt_batch,)
        self.states = StateCache(_state_budget(device, o.state_mib), self._drop_graphs)
        self.state_graphs: dict[tuple[int, int, int, int], set[Any]] = {}  # a state's key -> its graphs' keys
        self.cleaned = 0  # calls after which a state's caches were cleaned (a non-finite score)
        self.fallbacks: dict[str, int] = {}
        info.details.update({
            "graphs": self.runner.stats.to_dict(), "graph_mode": mode, "sync_every": self.sync_every,
            "buckets": {"prompts": list(self.prompt_ladder), "encoder_tokens": list(ENCODER_LADDER),
                        "cache_multiple": STEP_MULTIPLE},
            "compute": {"weights": str(self.decoder.dtype).replace("torch.", ""), "norms": "rms_norm, fp32 statistics",
                        "softmax": "fp32", "logits": self.decoder.logits_via, "sampling": "fp32",
                        "activation": self.decoder.act_name, "fused": o.fused,
                        **_quant_details(quant, self.decoder.quantised(), GENERATOR)},
            "own_loop": {"sampling (fast sampler)": 0, "greedy": 0}, "transformers_fallback": self.fallbacks,
            "states": self.states.stats.to_dict(), "caches_cleaned": 0})

    def _own(self, decoding: Decoding) -> str | None:
        if decoding.strategy == "greedy":
            return "greedy"
        if (decoding.strategy == "sampling" and decoding.sampler == "fast"
                and batched_sampling_supported(self.generation_config)):
            return "sampling (fast sampler)"
        return None

    def _generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                      seeds: Sequence[int]) -> list[list[list[int]]]:
        path = self._own(decoding)
        if path is None:  # beam, diverse beam, the transformers sampler: transformers' code on this model
            why = decoding.strategy if decoding.strategy != "sampling" else f"sampler {decoding.sampler}"
            self.fallbacks[why] = self.fallbacks.get(why, 0) + len(prompts)
            return super()._generate_ids(prompts, n, decoding, seeds)
        greedy = path == "greedy"
        if greedy:
            decoding.hf_kwargs(n)  # one sequence per prompt, with the torch engine's one-line error
        prompts = [clip_text(self.tokenizer, p, self.max_input_length) for p in prompts]
        cfg = self.config
        ids = (int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(self.tokenizer.pad_token_id))
        out: list[list[list[int]]] = []
        plan = self._batches(len(prompts), self.prompt_batch)
        on_first = self._first_token_hook(len(plan), len(prompts), n, ids[2])  # once: the call's last batch's first token
        lengths: dict[int, int] = {}
        for i, j in plan:
            t0 = time.perf_counter()
            enc = self.tokenizer(list(prompts[i:j]), return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_input_length)
            lengths.update({i + e: int(m) for e, m in enumerate(enc["attention_mask"].sum(1).tolist())})
            work = DecodeWork()
            res = self._decode(enc["input_ids"], enc["attention_mask"], n, decoding, list(seeds[i:j]), greedy, *ids,
                               on_first=on_first(i, None), work=work)
            self._count(res, j - i, time.perf_counter() - t0, work)
            out.extend(res)
        self._count_outputs(lengths, out)
        self.info.details["own_loop"][path] += len(prompts)
        self._record()
        return out

    def _record(self) -> None:
        self.info.details["graphs"] = self.runner.stats.to_dict()
        self.info.details["states"] = self.states.stats.to_dict()
        self.info.details["caches_cleaned"] = self.cleaned
        self.info.details["compute"]["fused"] = self.decoder.fused_state()

    def _state(self, prompts: int, k: int, enc_len: int, steps: int) -> DecodeState:
        """The bucket's decode state, from the budgeted cache (:mod:`.states`)."""
        key = (prompts, k, enc_len, steps)

        def build() -> DecodeState:
            self.decoder.self_bias(steps)  # the bias table exists before any capture reads it
            return self.decoder.new_state(prompts, k, enc_len, steps)

        return self.states.get(key, build, self.decoder.state_bytes(prompts, k, enc_len, steps))

    def _drop_graphs(self, key: Any) -> None:
        """An evicted state's graphs go with it (captured on its buffers)."""
        self.runner.drop(self.state_graphs.pop(key, set()))

    def _decode(self, input_ids: torch.Tensor, mask: torch.Tensor, n: int, decoding: Decoding, seeds: list[int],
                greedy: bool, start_id: int, eos_id: int, pad_id: int,
                on_first: Any = None, work: DecodeWork | None = None) -> list[list[list[int]]]:
        """``n`` sequences of each of these prompts (one batch), through the bucket's step; ``on_first`` is called
        when the batch's every row has its first token, with those tokens (prompts x n). ``work``: the bucket's
        encoder and steps are added to it (every row of the bucket, the cache span each step attends)."""
        p, length = (int(x) for x in input_ids.shape)
        pb, ok_p = bucket(p, self.prompt_ladder)
        lb, ok_l = bucket(length, ENCODER_LADDER)
        steps = decoding.max_new_tokens
        tb = math.ceil(steps / STEP_MULTIPLE) * STEP_MULTIPLE
        s = self._state(pb, n, lb, tb)
        graphs = self.state_graphs.setdefault((pb, n, lb, tb), set())
        sig = (greedy, decoding.top_k, decoding.top_p, decoding.temperature, decoding.min_new_tokens)
        spans = sorted({span_of(t, tb) for t in range(steps)})
        steps_of = {span: (lambda span=span: self.decoder.step(s, decoding, greedy, eos_id, pad_id, span))
                    for span in spans}

        def key(span: int) -> tuple[Any, ...]:
            return (pb, n, lb, span, tb, sig)

        dev = self.decoder.device

        def encode() -> None:
            self.decoder.encode(s)

        enc_key = ("encoder", pb, n, lb, tb)
        graphs.update([enc_key] + [key(span) for span in spans])
        with torch.inference_mode():
            self.runner.ensure(enc_key, encode, in_ladder=ok_p and ok_l)
            for span in spans:
                s.t.zero_()  # a capture's warm-up runs the step: its index must lie inside the span
                self.runner.ensure(key(span), steps_of[span], in_ladder=ok_p and ok_l)  # inputs are set after it
            ids_b = torch.full((pb, lb), pad_id, dtype=torch.long)
            mask_b = torch.zeros((pb, lb), dtype=torch.long)
            ids_b[:p, :length], mask_b[:p, :length] = input_ids, mask
            ids_b[p:], mask_b[p:] = ids_b[0], mask_b[0]  # the bucket's extra prompts: copies of the first
            _copy_in(s.enc_ids, ids_b)
            _copy_in(s.enc_mask, mask_b)
            self.runner.run(enc_key, encode)
            real = torch.zeros(pb * n, dtype=torch.bool)
            real[:p * n] = True
            s.real.copy_(real)
            s.unfinished.copy_(real)
            s.last.fill_(start_id)
            s.t.zero_()
            s.tokens.fill_(pad_id)
            s.bad.zero_()
            if not greedy:
                u = torch.full((tb, pb * n), 0.5, dtype=torch.float32)
                u[:steps, :p * n] = torch.from_numpy(uniforms(seeds, steps, n)).to(torch.float32)
                _copy_in(s.u, u)
            done = steps
            if work is not None:
                work.add_encoder(pb, lb)
            for t in range(steps):
                span = span_of(t, tb)
                self.runner.run(key(span), steps_of[span])
                if work is not None:
                    work.add_step(pb * n, span - 1, lb, pb)
                if t == 0 and on_first is not None:
                    if dev.type == "cuda":
                        torch.cuda.synchronize(dev)
                    on_first(s.tokens[:p * n, 0].cpu().tolist())
                if (t + 1) % self.sync_every == 0 and t + 1 < steps and not bool(s.unfinished.any()):
                    done = t + 1
                    break
            tokens = s.tokens[:p * n, :done].cpu().tolist()
            bad = s.bad[:done].cpu().tolist()
            if bool(s.dirty):  # a non-finite score in any row: its cache positions must not reach a later call
                self.decoder.clean(s)
                self.cleaned += 1
                self._record()
        for t, c in enumerate(bad):
            if c:
                raise NonFiniteError(f"next-token scores of {c} of {p * n} sequences at decoding step {t + 1}")
        flat = [[tok for tok in row if tok != pad_id] for row in tokens]
        return [flat[e * n:(e + 1) * n] for e in range(p)]


def _quant_details(quant: str | None, layers: Sequence[Any], role: str) -> dict[str, Any]:
    """What a quantised engine records: its scheme, which kernel its products run (:mod:`.quant`) and whether those
    kernels have run in this role on a lent GPU (the classifier's: on an H200; the generator's: not)."""
    if quant is None:
        return {}
    ran = ("ran on a lent H200 (benchmarks/results/gpu-check-h200-cudagraph-steps.json)" if role == CLASSIFIER
           else "not verified on a GPU")
    return {"products": f"{quant}: weights per output channel, activations per row (fp32 scales)",
            "product_kernels": kernels_used(layers), "gpu_kernels": f"torch._scaled_mm / torch._int_mm: {ran}"}


def _state_budget(device: str, mib: float | None) -> int:
    """Bytes of decode states a generator holds (``state_mib``, else the device's default)."""
    if mib is not None:
        return max(1, int(float(mib) * 2**20))
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory * CUDA_STATE_SHARE)
    return CPU_STATE_MIB * 2**20


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> GraphGenerator:
    """A T5-family text-to-text model (Flan-T5) on the engine's own decode loop; ``opts``: :class:`GraphOptions` of
    the generator role."""
    o = GraphOptions.build(GENERATOR, opts)
    mode = _check(device, o)
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    if config.model_type not in T5_FAMILIES:
        raise ModelLoadError(f"the {ENGINE} generator runs T5-family models (Flan-T5), not {config.model_type!r}; "
                             "use --engine torch")
    if precision not in ("fp32", "bf16") + QUANTISED:
        raise ModelLoadError(f"the {ENGINE} generator runs fp32, bf16, fp8 or int8, not {precision!r} (T5 overflows "
                             "in fp16)")
    if precision in QUANTISED and o.fused != "off":
        raise ModelLoadError(f"cudagraph option fused={o.fused}: the fused step runs unquantised products; "
                             f"use fused=off at {precision}")
    path = resolve_model(model)
    tok = load_tokenizer(path)
    m = load_seq2seq(path, DTYPES[precision], config).to(device).eval()
    info = EngineInfo(ENGINE, "generator", model, precision, device, {"workers": 1, **_cuda_details(device)})
    return GraphGenerator(m, tok, info, device, o, mode)


class GraphClassifier(_GraphCounters, BatchedClassifier):
    """A BERT / RoBERTa-family sequence classifier on the engine's own forward pass, batched in buckets (module
    notes); ``id2label`` maps its outputs to the canonical label columns."""

    def __init__(self, model: str, precision: str, device: str, o: GraphOptions):
        mode = _check(device, o)
        if precision not in DTYPES:
            raise ModelLoadError(f"the {ENGINE} classifier runs fp32, bf16, fp16, fp8 or int8, not {precision!r}")
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=1, device=device)
        self.device = device
        config = load_config(model)
        if model_kind(config) != "seq-cls":
            raise ModelLoadError(f"the {ENGINE} classifier runs sequence classifiers (BERT / RoBERTa family); "
                                 f"{model!r} is not one: use --engine torch")
        why = supported(config)
        if why is not None:
            raise ModelLoadError(f"the {ENGINE} classifier cannot run {model!r}: {why}; use --engine torch")
        self.perm = label_permutation(config, o.label_map)
        path = resolve_model(model)
        self.tokenizer = load_tokenizer(path)
        from transformers import AutoModelForSequenceClassification

        hf = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
        quant = precision if precision in QUANTISED else None
        self.net = BertFamilyEncoder(hf, DTYPES[precision], device, quant=quant)
        del hf
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.length_ladder = tuple(b for b in PAIR_LADDER if b < self.max_length) + (self.max_length,)
        cap = o.max_batch or max(BATCH_LADDER)
        self.batch_tokens = int(o.batch_tokens or (GPU_BATCH_TOKENS if device.startswith("cuda") else o.token_budget))
        small = CUDA_SMALL_BATCHES if device.startswith("cuda") else ()
        self.batch_ladder = tuple(b for b in small + BATCH_LADDER if b <= cap) or (int(cap),)
        self.runner = GraphRunner(device, mode, o.max_graphs or CLASSIFIER_MAX_GRAPHS, name=f"{ENGINE} classifier")
        self.buffers: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self.info = EngineInfo(ENGINE, "classifier", model, precision, device, {
            "kind": "seq-cls", "family": config.model_type, "workers": 1, "graph_mode": mode,
            "graphs": self.runner.stats.to_dict(),
            "buckets": {"pair_tokens": list(self.length_ladder), "pairs": list(self.batch_ladder),
                        "batch_tokens": self.batch_tokens},
            "compute": {"weights": precision, "norms": "layer_norm, fp32 statistics", "softmax": "fp32",
                        "logits": "fp32 (head in fp32)",
                        **_quant_details(quant, [v for p in self.net.layers for v in p.values()], CLASSIFIER)},
            "token_budget": "not used: batches are the buckets (batch_tokens)", **limits, **_cuda_details(device)})

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def _tokenize(self, pairs: Sequence[tuple[str, str]]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True,
                              max_length=self.max_length)

    def _max_rows(self, length: int) -> int:
        fits = [b for b in self.batch_ladder if b * length <= self.batch_tokens]
        return max(fits) if fits else min(self.batch_ladder)

    def _plan(self, lengths: Sequence[int], tokens: Mapping[str, Sequence[Sequence[int]]] | None = None
              ) -> list[list[int]]:
        """Pairs grouped by their own length bucket (shortest first), each group cut into batches of ladder sizes
        (:func:`split_rows`: the largest that fits ``batch_tokens`` first, then smaller ones, so a group's padded
        rows are fewer than :data:`MIN_PIECE`). With the call's ``tokens`` a group is ordered by its pairs' tokens,
        not by their place in the call: the same pairs in any order make the same batches. On a GPU a product's
        rows can differ with the batch's row count (the library picks its kernel by the shape), so a pair that
        moved from a batch of 128 rows to one of 16 when the call was reversed could get other bits."""
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            groups.setdefault(bucket(max(1, int(n)), self.length_ladder)[0], []).append(i)
        out: list[list[int]] = []
        for lb in sorted(groups):
            idx, a = groups[lb], 0
            if tokens is not None:
                types = tokens.get("token_type_ids")
                idx = sorted(idx, key=lambda i: (list(tokens["input_ids"][i]), list(types[i]) if types else []))
            for size in split_rows(len(idx), self._max_rows(lb), self.batch_ladder):
                out.append(idx[a:a + size])
                a += size
        return out

    def _batch_shape(self, lengths: Sequence[int]) -> tuple[int, int]:
        """The bucket a batch of pairs of these lengths runs in (what :meth:`_feeds` pads it to)."""
        return (bucket(len(lengths), self.batch_ladder)[0],
                bucket(max(1, max(lengths, default=1)), self.length_ladder)[0])

    def padding(self, lengths: Sequence[int]) -> tuple[int, int]:
        """(real tokens, padded tokens) of one call's pairs of these token lengths: what the buckets compute."""
        padded = 0
        for rows in self._plan(lengths):
            width = bucket(max(max(1, int(lengths[r])) for r in rows), self.length_ladder)[0]
            padded += bucket(len(rows), self.batch_ladder)[0] * width
        return sum(max(1, int(n)) for n in lengths), padded

    def _feeds(self, tokens: Mapping[str, Sequence[Sequence[int]]], rows: Sequence[int]) -> dict[str, Any]:
        rows = list(rows)
        width = max(len(tokens["input_ids"][r]) for r in rows)
        lb, ok_l = bucket(width, self.length_ladder)
        bb, ok_b = bucket(len(rows), self.batch_ladder)
        ids = np.full((bb, lb), self.pad_id, dtype=np.int64)
        mask = np.zeros((bb, lb), dtype=np.int64)
        types = np.zeros((bb, lb), dtype=np.int64)
        for i, r in enumerate(rows):
            seq = tokens["input_ids"][r]
            ids[i, :len(seq)] = seq
            mask[i, :len(seq)] = 1
            if "token_type_ids" in tokens:
                types[i, :len(seq)] = tokens["token_type_ids"][r]
        ids[len(rows):], mask[len(rows):], types[len(rows):] = ids[0], mask[0], types[0]  # copies of the first
        return {"ids": ids, "mask": mask, "types": types, "n": len(rows), "key": (bb, lb), "ok": ok_l and ok_b}

    def _run(self, feeds: dict[str, Any]) -> np.ndarray:
        key = feeds["key"]
        dev = torch.device(self.device)
        buf = self.buffers.get(key)
        if buf is None:
            bb, lb = key
            buf = {name: torch.zeros((bb, lb), dtype=torch.long, device=dev) for name in ("ids", "mask", "types")}
            buf["mask"][:, 0] = 1
            buf["logits"] = torch.zeros((bb, self.net.num_labels), dtype=torch.float32, device=dev)
            self.buffers[key] = buf

        def step() -> None:
            buf["logits"].copy_(self.net.forward(buf["ids"], buf["mask"], buf["types"]))

        with torch.inference_mode():
            self.runner.ensure(key, step, feeds["ok"])  # a capture runs the step: the inputs come after
            for name in ("ids", "mask", "types"):
                _copy_in(buf[name], torch.from_numpy(feeds[name]))
            self.runner.run(key, step)
            out = buf["logits"][:feeds["n"]].cpu().numpy()
        self.info.details["graphs"] = self.runner.stats.to_dict()
        return out[:, self.perm]


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> GraphClassifier:
    """A BERT / RoBERTa-family sequence classifier on the engine's own forward pass; ``opts``: :class:`GraphOptions`
    of the classifier role."""
    return GraphClassifier(model, precision, device, GraphOptions.build(CLASSIFIER, opts))
