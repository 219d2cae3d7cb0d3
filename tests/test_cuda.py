"""CUDA: device placement, fp32 on the GPU against fp32 on the CPU, bf16 parity, the sampler's host
synchronisations, and ONNX Runtime's CUDA provider. Every test here is marked ``cuda`` and skips, saying why,
where torch sees no CUDA GPU (``scripts/gpu_check.sh`` runs them on a GPU machine: ``pytest -m cuda``). The CPU
tests at the end check the CUDA code paths that run without a GPU (provider options, the ONNX Runtime build that
is recorded).

Tolerances (docs/stack.md, "GPU"): fp32 on CUDA against fp32 on the CPU differ by kernel rounding only (the torch
engine switches TF32 off where it loads on CUDA, engines/cuda.py, and ONNX Runtime's CUDA provider gets
``use_tf32=0``): classifier logits within 1e-4, first-step generator logits within 1e-3, labels identical except
near ties (the reference's two largest probabilities within ``compare_runs.TIE``, as the compare-runs measurement
allows); a sampled token can only change where a uniform number falls within that distance of a boundary of the
cumulative distribution, so at most one prompt of the 16 here may differ. bf16 keeps 8 bits of mantissa: labels
agree on at least 90 % of the sample pairs, and its effect on the study is judged by the bench's verdicts
(``bench --engines torch:bf16``).

The generator's CUDA paths are checked where a CPU run cannot reach them: the fast sampler's pinned, non-blocking
copy of its uniform numbers and its look at the device every ``CUDA_SYNC_EVERY`` steps (the same tokens whatever
the cadence, and as on the CPU), 64 prompts x 20 rows in each decoder step (the CUDA default batch), and the
per-prompt cross-attention keys and values against per-row copies of the encoder output, and a prompt's rows split
over two batches (the fast sampler's batches of near-equal rows) against one batch. Their helpers also run
on the CPU at small sizes (the tests without the mark), so the checks themselves are exercised everywhere."""

from __future__ import annotations

import importlib.util
import types

import numpy as np
import pytest
import torch

import legacy_sampling as legacy
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry, sampling
from breaknli_fast.engines.base import Decoding, NonFiniteError, Predictions
from breaknli_fast.engines.sampling import TorchStepper
from breaknli_fast.prompts import CONTRADICT_PROMPT

from breaknli_fast.suite.measurements.compare_runs import TIE  # the near-tie gap the GPU check's comparison allows

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason=f"no CUDA GPU visible to torch {torch.__version__} (built for CUDA "
                                                 f"{torch.version.cuda or 'none: a CPU build'})")


def _ort_cuda() -> bool:
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


needs_ort_cuda = pytest.mark.skipif(not (CUDA and _ort_cuda()),
                                    reason="needs a CUDA GPU and onnxruntime-gpu (the CUDA execution provider)")


@pytest.fixture(scope="module")
def sample():
    ex = load_examples("sample", limit=64).examples
    return [(e.premise, e.hypothesis) for e in ex], [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in ex[:16]]


def clear_label_flips(ref: Predictions, other: Predictions, tie: float = TIE) -> list[int]:
    """Rows whose labels differ although the reference's two largest probabilities lie more than ``tie`` apart:
    a near tie may flip under another device's rounding (the compare-runs measurement leaves them out too)."""
    top2 = np.sort(ref.probs, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > tie
    return [int(i) for i in np.flatnonzero(clear) if ref.label_ids[i] != other.label_ids[i]]


def _gen_ids(gen, prompts, n, seeds, batch):
    old = gen.prompt_batch
    gen.prompt_batch = batch
    try:
        return gen.generate_ids(prompts, n, Decoding(), seeds)
    finally:
        gen.prompt_batch = old


class _FirstStepWidths:
    """Spies on TorchStepper: (prompts, n) of every batch it starts, and the rows of each batch's first step."""

    def __init__(self, monkeypatch):
        self.batches, self.first_rows, self._fresh = [], [], False
        start, step = TorchStepper.start, TorchStepper.step

        def spy_start(stepper, input_ids, attention_mask, n):
            self.batches.append((int(input_ids.shape[0]), n))
            self._fresh = True
            return start(stepper, input_ids, attention_mask, n)

        def spy_step(stepper, tokens):
            if self._fresh:
                self.first_rows.append(int(tokens.shape[0]))
                self._fresh = False
            return step(stepper, tokens)

        monkeypatch.setattr(TorchStepper, "start", spy_start)
        monkeypatch.setattr(TorchStepper, "step", spy_step)


def check_rows_per_step(monkeypatch, device, prompts, n, batch, small_batch, cpu_ids=None):
    """``batch`` prompts x ``n`` rows go through each decoder step of the first batch; the tokens equal those of
    ``small_batch`` prompts per batch (on CUDA another batch shape may pick other kernels: one prompt may differ by
    rounding) and, when given, the CPU's (two prompts of 64 may differ)."""
    gen = registry.load_generator("torch", "mini-t5", device=device)
    spy = _FirstStepWidths(monkeypatch)
    seeds = list(range(len(prompts)))
    big = _gen_ids(gen, prompts, n, seeds, batch)
    assert spy.batches[0] == (batch, n) and spy.first_rows[0] == batch * n
    small = _gen_ids(gen, prompts, n, seeds, small_batch)
    assert len(spy.batches) == -(-len(prompts) // batch) + -(-len(prompts) // small_batch)
    allowed = 1 if device.startswith("cuda") else 0
    assert sum(a != b for a, b in zip(big, small)) <= allowed
    assert sum(len(r) for rows in big for r in rows) > 5 * len(prompts) * n  # sentences, not empty rows
    if cpu_ids is not None:
        assert sum(a != b for a, b in zip(big, cpu_ids)) <= 2
    return big


def check_sampler_cadence(monkeypatch, device, prompts):
    """The fast sampler on ``device``: its uniform numbers go through pinned memory once per batch on CUDA, and
    the tokens do not depend on how often the host looks (``sync_every``) or on compaction; returns them."""
    gen = registry.load_generator("torch", "mini-t5", device=device)
    cfg, tok = gen.config, gen.tokenizer
    enc = tok(prompts, return_tensors="pt", padding=True)
    args = (enc["input_ids"], enc["attention_mask"], 5, Decoding(), list(range(len(prompts))),
            int(cfg.decoder_start_token_id), int(cfg.eos_token_id), int(tok.pad_token_id))
    pinned = []
    pin = torch.Tensor.pin_memory

    def spy_pin(t, *a, **k):
        out = pin(t, *a, **k)
        pinned.append(out.is_pinned())
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", spy_pin)
    base = sampling.sample(TorchStepper(gen.model), *args)  # the device's own cadence
    assert pinned == ([True] if device.startswith("cuda") else [])
    for every, share in ((1, 0.25), (3, 0.25), (8, None), (40, 0.5)):
        assert sampling.sample(TorchStepper(gen.model), *args, compact_share=share, sync_every=every) == base, every
    return base


def check_row_split(device, prompts):
    """A prompt's rows split over two batches (the fast sampler's batches of near-equal rows) get the tokens they
    get in one batch: ``sample(rows=...)`` on subsets of the rows against the whole batch, on the device's
    stepper (on CUDA another batch shape may pick other kernels: one row may differ by rounding)."""
    gen = registry.load_generator("torch", "mini-t5", device=device)
    cfg, tok = gen.config, gen.tokenizer
    enc = tok(prompts, return_tensors="pt", padding=True)
    n = 5
    args = (enc["input_ids"], enc["attention_mask"], n, Decoding(), list(range(len(prompts))),
            int(cfg.decoder_start_token_id), int(cfg.eos_token_id), int(tok.pad_token_id))
    whole = sampling.sample(TorchStepper(gen.model), *args)
    flat = [r for rows in whole for r in rows]
    total = len(prompts) * n
    allowed = 1 if device.startswith("cuda") else 0
    for subset in (list(range(total // 2 + 2)), list(range(total // 2 + 2, total)), list(range(3, total, 4))):
        got = sampling.sample(TorchStepper(gen.model), *args, rows=subset)
        assert [len(rows) for rows in got] == [sum(1 for i in subset if i // n == e) for e in range(len(prompts))]
        assert sum(a != flat[i] for a, i in zip((r for rows in got for r in rows), subset)) <= allowed
    assert sum(len(r) for r in flat) > 5 * total  # sentences, not empty rows
    return whole


def check_cross_attention(device, prompts):
    """The per-prompt cross-attention keys / values (given to each prompt's rows) against every row's own copy of
    the encoder output (the former stepper), also after rows are dropped."""
    gen = registry.load_generator("torch", "mini-t5", device=device)
    enc = gen.tokenizer(prompts, return_tensors="pt", padding=True)
    new, old = TorchStepper(gen.model), legacy.TorchStepper(gen.model)
    assert new.shared_cross and new.device.type == torch.device(device).type
    n = 5
    new.start(enc["input_ids"], enc["attention_mask"], n)
    old.start(enc["input_ids"], enc["attention_mask"], n)
    tokens = torch.zeros(len(prompts) * n, dtype=torch.long)
    for t in range(4):
        a, b = new.step(tokens), old.step(tokens)
        assert a.device.type == torch.device(device).type
        assert float((a - b).abs().max()) <= 1e-4, t
        tokens = a.argmax(-1).cpu()
        if t == 1:
            keep = torch.arange(0, len(tokens), 3)
            new.keep(keep)
            old.keep(keep)
            tokens = tokens[keep]


def check_graph_engine(device, pairs, prompts):
    """The cudagraph engine against the torch engine on ``device`` (fp32, TF32 off on both): classifier logits
    within 1e-4 and no clear label flip; sampled and greedy tokens equal for all but at most one prompt on CUDA (a
    uniform number within rounding of a boundary of the distribution), all on the CPU. On CUDA its steps run as
    captured graphs (none failed to capture); on the CPU through the graphs' stand-in."""
    graphs = "auto" if device.startswith("cuda") else "standin"
    ref_c = registry.load_classifier("torch", "mini-nli", device=device).classify(pairs)
    clf = registry.load_classifier("cudagraph", "mini-nli", device=device, graphs=graphs)
    got_c = clf.classify(pairs)
    assert float(np.abs(ref_c.logits - got_c.logits).max()) <= 1e-4
    assert clear_label_flips(ref_c, got_c) == []
    ref_g = registry.load_generator("torch", "mini-t5", device=device)
    gen = registry.load_generator("cudagraph", "mini-t5", device=device, graphs=graphs)
    seeds = list(range(len(prompts)))
    allowed = 1 if device.startswith("cuda") else 0
    for d, n in ((Decoding(), 20), (Decoding(strategy="greedy", max_new_tokens=24), 1)):
        a, b = ref_g.generate_ids(prompts, n, d, seeds), gen.generate_ids(prompts, n, d, seeds)
        assert sum(x != y for x, y in zip(a, b)) <= allowed, d.strategy
    for stats in (clf.info.details["graphs"], gen.info.details["graphs"]):
        assert stats["captured"] > 0 and stats["replays"] > 0 and not stats["capture_failures"], stats
        assert stats["eager_runs"] == 0
    return clf, gen


def check_graph_batches(device, pairs, precision="fp32"):
    """A pair's logits with the cudagraph classifier on ``device``: in one call and in reversed order (the same
    buckets: the same numbers), alone and in chunks of 5 (other batch sizes: within 1e-4 at fp32, the same labels
    but for near ties). Returns the largest difference alone against the call."""
    clf = registry.load_classifier("cudagraph", "mini-nli", device=device, precision=precision,
                                   graphs="auto" if device.startswith("cuda") else "standin")
    clf.set_reuse(False)
    whole = clf.classify(pairs)
    rev = clf.classify(pairs[::-1]).logits[::-1]
    assert np.array_equal(rev, whole.logits)
    worst = 0.0
    for other in (np.concatenate([clf.classify(pairs[i:i + 5]).logits for i in range(0, len(pairs), 5)]),
                  np.concatenate([clf.classify([p]).logits for p in pairs])):
        worst = max(worst, float(np.abs(other - whole.logits).max()))
        assert clear_label_flips(whole, Predictions(other)) == []
    assert worst <= (1e-4 if precision == "fp32" else 5e-2)
    return worst


def test_near_ties_may_flip_and_clear_labels_may_not():
    ref = Predictions(np.array([[0.0, 0.0004, -6.0], [2.0, 0.0, -1.0]], dtype=np.float32))
    tie_flipped = Predictions(np.array([[0.0004, 0.0, -6.0], [2.0, 0.0, -1.0]], dtype=np.float32))
    clear_flipped = Predictions(np.array([[0.0, 0.0004, -6.0], [0.0, 2.0, -1.0]], dtype=np.float32))
    assert clear_label_flips(ref, tie_flipped) == [] and clear_label_flips(ref, clear_flipped) == [1]


def test_the_cuda_checks_hold_on_the_cpu_at_small_sizes(monkeypatch, sample):
    """The helpers of the CUDA tests below, on the CPU (exact there): so they are exercised without a GPU too."""
    _, prompts = sample
    check_rows_per_step(monkeypatch, "cpu", prompts[:6], 3, batch=6, small_batch=4)
    check_sampler_cadence(monkeypatch, "cpu", prompts[:4])
    check_cross_attention("cpu", prompts[:3])
    check_row_split("cpu", prompts[:4])
    pairs, _ = sample
    check_graph_engine("cpu", pairs[:24], prompts[:3])
    check_graph_batches("cpu", pairs[:24])


@pytest.mark.cuda
@needs_cuda
def test_models_and_outputs_are_on_the_device(sample):
    pairs, prompts = sample
    clf = registry.load_classifier("torch", "mini-nli", device="cuda")
    gen = registry.load_generator("torch", "mini-t5", device="cuda")
    assert next(clf.model.parameters()).device.type == "cuda"
    assert next(gen.model.parameters()).device.type == "cuda"
    assert gen.prompt_batch == 64 and gen.info.details["gen_batch"] == 64  # the CUDA default
    res = clf.classify(pairs[:8])
    assert res.logits.shape == (8, 3) and np.isfinite(res.logits).all()
    out = gen.generate_ids(prompts[:2], 3, Decoding(max_new_tokens=8), [0, 1])
    assert len(out) == 2 and all(len(rows) == 3 for rows in out)
    assert gen._stepper().device.type == "cuda" and gen._stepper().shared_cross


@pytest.mark.cuda
@needs_cuda
def test_fp32_on_cuda_matches_fp32_on_the_cpu(sample):
    pairs, prompts = sample
    cpu = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    gpu = registry.load_classifier("torch", "mini-nli", device="cuda").classify(pairs)
    assert float(np.abs(cpu.logits - gpu.logits).max()) <= 1e-4
    assert clear_label_flips(cpu, gpu) == []
    g_cpu = registry.load_generator("torch", "mini-t5", device="cpu")
    g_gpu = registry.load_generator("torch", "mini-t5", device="cuda")
    enc = g_cpu.tokenizer(prompts, return_tensors="pt", padding=True)
    start = torch.zeros((len(prompts), 1), dtype=torch.long)
    with torch.inference_mode():
        a = g_cpu.model(**enc, decoder_input_ids=start).logits
        b = g_gpu.model(**{k: v.cuda() for k, v in enc.items()}, decoder_input_ids=start.cuda()).logits.cpu()
    assert float((a - b).abs().max()) <= 1e-3
    seeds = list(range(len(prompts)))
    ids_cpu = g_cpu.generate_ids(prompts, 8, Decoding(), seeds)
    ids_gpu = g_gpu.generate_ids(prompts, 8, Decoding(), seeds)
    assert sum(x != y for x, y in zip(ids_cpu, ids_gpu)) <= 1


@pytest.mark.cuda
@needs_cuda
def test_bf16_on_cuda_agrees_with_fp32(sample):
    pairs, prompts = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    bf = registry.load_classifier("torch", "mini-nli", precision="bf16", device="cuda").classify(pairs)
    assert np.isfinite(bf.logits).all()
    assert np.mean(np.array(ref.labels) == np.array(bf.labels)) >= 0.9
    gen = registry.load_generator("torch", "mini-t5", precision="bf16", device="cuda")
    rows = gen.generate(prompts[:4], 4, Decoding(), [0, 1, 2, 3])
    assert all(len(r) == 4 for r in rows) and any(t for r in rows for t in r)


@pytest.mark.cuda
@needs_cuda
def test_the_fast_sampler_waits_for_the_gpu_only_every_few_steps(monkeypatch):
    """From the first decoder step to the host's first look (``sync_every`` steps later) the sampler queues its work
    without a synchronising call: torch's sync debug mode, on for exactly that stretch, raises on any."""
    looks = []

    class DeviceStepper:
        device = torch.device("cuda")

        def start(self, input_ids, attention_mask, n):
            g = torch.Generator(device="cuda").manual_seed(0)
            self.table = torch.randn((50, 64), device="cuda", generator=g)
            self.table[:, 0] = float("-inf")  # never the padding id (0): the output leaves padding out
            self.first = True

        def step(self, tokens):
            if self.first:
                self.first = False
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            return self.table.index_select(0, tokens % 50)

        def keep(self, positions):
            pass

    real = sampling._check_steps

    def look(bad, width, start, end):
        torch.cuda.set_sync_debug_mode("default")
        looks.append((start, end))
        return real(bad, width, start, end)

    monkeypatch.setattr(sampling, "_check_steps", look)
    ids = torch.ones((3, 4), dtype=torch.long)
    dec = Decoding(max_new_tokens=12, min_new_tokens=12)  # no row stops early
    try:
        out = sampling.sample(DeviceStepper(), ids, ids, 5, dec, [1, 2, 3], 0, 1, 0, sync_every=6)
        assert looks == [(0, 6), (6, 12), (12, 12)] and all(len(r) == 12 for rows in out for r in rows)
        looks.clear()
        again = sampling.sample(DeviceStepper(), ids, ids, 5, dec, [1, 2, 3], 0, 1, 0)  # CUDA's own cadence
    finally:
        torch.cuda.set_sync_debug_mode("default")
    every = sampling.CUDA_SYNC_EVERY
    assert looks[0] == (0, every) and looks[-1] == (12, 12) and again == out


@pytest.mark.cuda
@needs_cuda
def test_the_fast_sampler_on_cuda_copies_its_draws_once_and_gives_the_cpu_tokens(monkeypatch, sample):
    """Pinned, non-blocking copy of the uniform numbers; the same tokens whatever the cadence of the host's looks
    and compaction, and (but for a rounding flip) the CPU's."""
    _, prompts = sample
    gpu = check_sampler_cadence(monkeypatch, "cuda", prompts[:8])
    monkeypatch.undo()
    cpu = check_sampler_cadence(monkeypatch, "cpu", prompts[:8])
    assert sum(a != b for a, b in zip(gpu, cpu)) <= 1


@pytest.mark.cuda
@needs_cuda
def test_64_prompts_of_20_rows_go_through_each_decoder_step_on_cuda(monkeypatch):
    prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in load_examples("sample", limit=64).examples]
    cpu = registry.load_generator("torch", "mini-t5", device="cpu").generate_ids(prompts, 20, Decoding(),
                                                                                list(range(64)))
    assert registry.load_generator("torch", "mini-t5", device="cuda").prompt_batch == 64  # the CUDA default
    check_rows_per_step(monkeypatch, "cuda", prompts, 20, batch=64, small_batch=8, cpu_ids=cpu)


@pytest.mark.cuda
@needs_cuda
def test_rows_split_over_batches_get_their_tokens_on_cuda(sample):
    check_row_split("cuda", sample[1][:8])


@pytest.mark.cuda
@needs_cuda
def test_per_prompt_cross_attention_matches_per_row_copies_on_cuda(sample):
    check_cross_attention("cuda", sample[1][:6])


@pytest.mark.cuda
@needs_cuda
def test_nonfinite_scores_on_cuda_are_refused_at_their_step_when_the_host_looks_late():
    from test_gen_batch import NaNAtStep3

    ids = torch.ones((2, 3), dtype=torch.long)
    with pytest.raises(NonFiniteError, match="1 of 4 sequences at decoding step 3"):  # looked at after step 8
        sampling.sample(NaNAtStep3("cuda"), ids, ids, 2, Decoding(max_new_tokens=10), [0, 1], 0, 1, 0)


@pytest.mark.cuda
@needs_cuda
def test_the_torch_engine_switches_tf32_off_on_cuda_and_records_it(monkeypatch):
    monkeypatch.delenv("BREAKNLI_FAST_TF32", raising=False)
    torch.backends.cuda.matmul.allow_tf32 = True
    clf = registry.load_classifier("torch", "mini-nli", device="cuda")
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    assert clf.info.details["tf32"]["matmul_allow_tf32"] is False
    monkeypatch.setenv("BREAKNLI_FAST_TF32", "1")
    gen = registry.load_generator("torch", "mini-t5", device="cuda")
    assert gen.info.details["tf32"]["requested"] and torch.backends.cuda.matmul.allow_tf32 is True
    monkeypatch.delenv("BREAKNLI_FAST_TF32")
    registry.load_classifier("torch", "mini-nli", device="cuda")  # off again for the tests after this one
    assert torch.backends.cuda.matmul.allow_tf32 is False


@pytest.mark.cuda
@needs_ort_cuda
def test_ort_cuda_provider_classifier_matches_torch(sample, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    pairs, _ = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    clf = registry.load_classifier("ort", "mini-nli", device="cuda")
    assert clf.info.details["providers"][0] == "CUDAExecutionProvider"
    opts = clf.session.get_provider_options()["CUDAExecutionProvider"]
    assert opts.get("use_tf32") == "0"
    out = clf.classify(pairs)
    assert float(np.abs(ref.logits - out.logits).max()) <= 1e-4 and clear_label_flips(ref, out) == []


@pytest.mark.cuda
@needs_ort_cuda
def test_t5_export_validates_on_cuda(tiny_t5, tmp_path):
    from breaknli_fast.export import export_model

    res = export_model(tiny_t5, precision="fp32", device="cuda", cache_dir=str(tmp_path), progress=False)
    assert res.manifest["validation"]["passed"] and res.manifest["validation"]["device"] == "cuda"


# -- without a GPU: the CUDA code paths that run on the CPU -----------------------------------------------------

@pytest.mark.cuda
@needs_cuda
def test_the_cudagraph_engine_on_cuda_keeps_the_torch_answers(sample):
    pairs, prompts = sample
    clf, gen = check_graph_engine("cuda", pairs, prompts)
    assert clf.info.details["graph_mode"] == "cuda" and gen.info.details["graph_mode"] == "cuda"
    assert gen.info.details["tf32"]["matmul_allow_tf32"] is False


@pytest.mark.cuda
@needs_cuda
def test_cudagraph_replays_equal_its_eager_steps_on_cuda(sample):
    """A captured graph runs the kernels the eager step runs: the same tokens and logits, bit for bit."""
    pairs, prompts = sample
    out = {}
    for mode in ("cuda", "eager"):
        clf = registry.load_classifier("cudagraph", "mini-nli", device="cuda", graphs=mode)
        gen = registry.load_generator("cudagraph", "mini-t5", device="cuda", graphs=mode)
        out[mode] = (clf.classify(pairs).logits, gen.generate_ids(prompts, 8, Decoding(), list(range(len(prompts)))))
    assert np.array_equal(out["cuda"][0], out["eager"][0]) and out["cuda"][1] == out["eager"][1]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_pairs_answer_does_not_depend_on_its_batch_on_cuda(sample, precision):
    pairs, _ = sample
    worst = check_graph_batches("cuda", pairs, precision)
    print(f"cudagraph {precision} on cuda: largest |logit difference| alone / in chunks against one call: {worst:.3g}")


@pytest.mark.cuda
@needs_cuda
def test_cudagraph_bf16_on_cuda_agrees_with_fp32_and_keeps_fp32_logits(sample):
    pairs, prompts = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cuda").classify(pairs)
    bf = registry.load_classifier("cudagraph", "mini-nli", precision="bf16", device="cuda")
    got = bf.classify(pairs)
    assert got.logits.dtype == np.float32 and np.isfinite(got.logits).all()
    assert np.mean(np.array(ref.labels) == np.array(got.labels)) >= 0.9
    gen = registry.load_generator("cudagraph", "mini-t5", precision="bf16", device="cuda")
    rows = gen.generate(prompts[:4], 4, Decoding(), [0, 1, 2, 3])
    assert all(len(r) == 4 for r in rows) and any(t for r in rows for t in r)
    assert gen.info.details["compute"]["logits"] in ("mm out_dtype=fp32", "fp32 copy of the output layer")
    assert not gen.info.details["graphs"]["capture_failures"]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_compiled_fused_step_on_cuda_keeps_the_plain_steps_tokens(sample, precision):
    """fused=compile (Triton kernels captured in the graphs) against the plain step on the same GPU: at fp32 the
    same candidates but for one prompt (a draw within rounding of a boundary); at bf16 the same first tokens on
    most rows; no capture failure, the compiler's code run (not its fallback)."""
    _, prompts = sample
    seeds = list(range(len(prompts)))
    plain = registry.load_generator("cudagraph", "mini-t5", precision=precision, device="cuda")
    fused = registry.load_generator("cudagraph", "mini-t5", precision=precision, device="cuda", fused="compile")
    a, b = plain.generate_ids(prompts, 8, Decoding(), seeds), fused.generate_ids(prompts, 8, Decoding(), seeds)
    assert fused.info.details["compute"]["fused"] == "compile", fused.info.details["compute"]["fused"]
    stats = fused.info.details["graphs"]
    assert stats["captured"] > 0 and not stats["capture_failures"] and stats["eager_runs"] == 0
    if precision == "fp32":
        assert sum(x != y for x, y in zip(a, b)) <= 1
    else:
        first = [(r[0] if r else None) for rows in a for r in rows], [(r[0] if r else None) for rows in b for r in rows]
        assert np.mean(np.array(first[0]) == np.array(first[1])) >= 0.9


@pytest.mark.cuda
@needs_cuda
def test_a_non_finite_call_leaves_the_next_replay_of_its_bucket_correct_on_cuda(sample):
    """A NaN in one call's cache (a layer's q/k/v weights NaN for that call, replayed graphs) raises for that call;
    the next call of the bucket, the weights restored, gives the tokens of a fresh engine."""
    _, prompts = sample
    d, seeds = Decoding(max_new_tokens=16), [1, 2, 3, 4]
    want = registry.load_generator("cudagraph", "mini-t5", device="cuda").generate_ids(prompts[:4], 4, d, seeds)
    gen = registry.load_generator("cudagraph", "mini-t5", device="cuda")
    assert gen.generate_ids(prompts[:4], 4, d, seeds) == want  # the bucket's graphs captured
    w = gen.decoder.w_qkv[0]
    keep = w.clone()
    w.fill_(float("nan"))
    with pytest.raises(NonFiniteError):
        gen.generate_ids(prompts[:4], 4, d, seeds)
    w.copy_(keep)
    assert gen.generate_ids(prompts[:4], 4, d, seeds) == want
    assert gen.info.details["caches_cleaned"] == 1 and gen.info.details["graphs"]["replays"] > 0


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_the_quantised_classifier_on_cuda_runs_the_gpu_kernels_and_keeps_the_labels(sample, fmt):
    """torch._scaled_mm / torch._int_mm on the GPU: the engine's products run them (not the emulation), their
    numbers equal the CPU's exact emulation of the same quantised values (int8 to the bit; fp8 within one bf16
    rounding), the labels agree with torch fp32 on at least 95 % of the pairs, and a pair alone gives its logits
    in the call but for the last bits (another row count may pick another kernel)."""
    from breaknli_fast.backends.cudagraph import quant

    reason = quant.precision_gate(fmt, "cuda")
    if reason:
        pytest.skip(reason)
    pairs, _ = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cuda").classify(pairs)
    clf = registry.load_classifier("cudagraph", "mini-nli", precision=fmt, device="cuda")
    clf.set_reuse(False)
    kernel = "scaled_mm" if fmt == "fp8" else "int_mm"
    assert clf.info.details["compute"]["product_kernels"] == {kernel: 20}
    got = clf.classify(pairs)
    assert np.mean(np.array(got.labels) == np.array(ref.labels)) >= 0.95
    alone = np.concatenate([clf.classify([p]).logits for p in pairs[:16]])
    print(f"cudagraph:{fmt} on cuda: alone against the call, max |Δlogit| {np.abs(alone - got.logits[:16]).max():.3g}")
    assert clear_label_flips(got, Predictions(np.concatenate([alone, got.logits[16:]]))) == []
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(40, 256, generator=g), torch.randn(64, 256, generator=g)
    gpu = quant.QuantLinear.of(w, None, fmt, torch.bfloat16, "cuda")
    cpu = quant.QuantLinear.of(w, None, fmt, torch.bfloat16, "cpu")
    a, b = gpu(x.cuda()).float().cpu(), cpu(x).float()
    if fmt == "int8":
        assert torch.equal(a, b)
    else:
        assert torch.allclose(a, b, rtol=2 ** -7, atol=1e-3 * float(b.abs().max()))


def test_cuda_provider_options_switch_tf32_off(monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    from breaknli_fast.backends.ort import runtime as ort_runtime

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    providers = ort_runtime.providers_for("cuda:1")
    assert providers[0] == ("CUDAExecutionProvider", {"device_id": 1, "use_tf32": 0})


def test_the_gpu_build_is_recorded_when_both_onnxruntime_packages_are_installed(monkeypatch):
    import importlib.metadata as md

    from breaknli_fast import envinfo
    from breaknli_fast.export import manifest

    versions = {"onnxruntime": "1.30.0", "onnxruntime-gpu": "1.31.1"}

    def version(name):
        if name in versions:
            return versions[name]
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", version)
    fake = types.SimpleNamespace(get_available_providers=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(envinfo.importlib, "import_module", lambda name: fake)
    assert envinfo.onnxruntime_distribution() == ("onnxruntime-gpu", "1.31.1")
    assert envinfo.package_version("onnxruntime") == "1.31.1"
    assert manifest.library_versions()["onnxruntime"] == "1.31.1 (onnxruntime-gpu)"
    fake.get_available_providers = lambda: ["CPUExecutionProvider"]  # the CPU package installed last
    assert envinfo.onnxruntime_distribution() == ("onnxruntime", "1.30.0")
    del versions["onnxruntime-gpu"]
    assert envinfo.onnxruntime_distribution() == ("onnxruntime", "1.30.0")

def test_the_tf32_switches_are_set_for_cuda_only_and_recorded_for_torch_on_cuda(monkeypatch):
    """engines/cuda.py on any torch build (the switches can be set without a GPU): off for a CUDA device unless
    BREAKNLI_FAST_TF32 asks, nothing on the CPU, and EngineInfo records them for the torch engine on CUDA only."""
    from breaknli_fast.engines import cuda
    from breaknli_fast.engines.base import EngineInfo

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    sdp_before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        monkeypatch.delenv(cuda.TF32_ENV, raising=False)
        monkeypatch.delenv(cuda.CUDNN_SDPA_ENV, raising=False)
        torch.backends.cuda.enable_cudnn_sdp(True)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        assert cuda.prepare("cpu") is None and torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cuda.cudnn_sdp_enabled()  # the CPU leaves torch's attention backends alone
        state = cuda.prepare("cuda:0")
        assert not torch.backends.cuda.cudnn_sdp_enabled() and cuda.sdpa_state() == {"cudnn_requested": False,
                                                                                      "cudnn_enabled": False}
        assert state["matmul_allow_tf32"] is False and state["cudnn_allow_tf32"] is False and not state["requested"]
        monkeypatch.setenv(cuda.TF32_ENV, "on")
        assert cuda.prepare("cuda")["matmul_allow_tf32"] is True and torch.backends.cudnn.allow_tf32 is True
        assert EngineInfo("torch", "classifier", "m", "fp32", "cuda:1").details["tf32"]["requested"] is True
        monkeypatch.setenv(cuda.CUDNN_SDPA_ENV, "1")
        cuda.prepare("cuda")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        assert EngineInfo("torch", "classifier", "m", "bf16", "cuda").details["sdpa"] == {"cudnn_requested": True,
                                                                                          "cudnn_enabled": True}
        assert not {"tf32", "sdpa"} & set(EngineInfo("torch", "classifier", "m", "fp32", "cpu").details)
        assert not {"tf32", "sdpa"} & set(EngineInfo("ort", "classifier", "m", "fp32", "cuda").details)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
        torch.backends.cuda.enable_cudnn_sdp(sdp_before)
