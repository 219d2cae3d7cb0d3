"""Each stage's share of the machine's ceilings: the analytic counts against hand counts, the engines' token
counters, the roofline arithmetic, the ceilings' cache (keyed, reused, bounded), the renderings with and without
ceilings, and the GPU check's bounds on the same code path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from breaknli_fast.bench import ceilings as ceil
from breaknli_fast.bench import roofline as rl
from breaknli_fast.bench.types import (Bandwidth, BenchReport, GemmCeiling, MachineCeilings, StageTiming, from_json,
                                      to_json)
from breaknli_fast.engines.base import BatchWork, DecodeWork

ROOT = Path(__file__).resolve().parent.parent
# a tiny encoder: 2 layers, hidden 4, feed-forward 8, 2 heads of 2, 3 labels
ENC = rl.Arch("encoder", layers=2, hidden=4, ffn=8, heads=2, head_dim=2, vocab=10)
# a tiny gated T5: 1 + 1 layers, d_model 4, d_ff 6, 1 head of 4, vocabulary 10
T5 = rl.Arch("t5", layers=1, hidden=4, ffn=6, heads=1, head_dim=4, vocab=10, decoder_layers=1, ffn_inputs=2)


# -- analytic counts against hand counts ----------------------------------------------------------------------------

def test_the_classifier_count_matches_a_hand_count():
    w = BatchWork()
    w.add_pairs([3, 5])
    w.add_batch(2, 8)  # two pairs padded to 8 tokens
    c = rl.classifier_batches(ENC, w, "int8")
    # per layer: q, k, v 3*4*4 = 48, output 16, feed-forward 4*8 + 8*4 = 64 -> 128 weights; 2 op each, 2 layers:
    # 512 op per token. Attention: 2 x 2 op x inner 4 x 2 layers = 32 per squared length. Head: 2 x (4*4 + 4*3) = 56
    # per pair.
    assert c.flops == 512 * 16 + 32 * (2 * 8 ** 2) + 56 * 2 == 12400
    assert c.useful_flops == 512 * 8 + 32 * (3 ** 2 + 5 ** 2) + 56 * 2 == 5296
    # int8: 1 byte per weight, (128 x 2 layers + 28 head) once for the batch; 16 tokens x hidden 4 x 4 bytes gathered
    assert c.bytes == (128 * 2 + 28) * 1 + 16 * 4 * 4 == 540
    assert c.rows == 16 and (16, 4, 12, 1.0) in c.gemms and (16, 8, 4, 1.0) in c.gemms


def test_bart_and_deberta_classifiers_count_their_own_parts():
    w = BatchWork()
    w.add_pairs([2])
    w.add_batch(1, 2)
    bart = rl.Arch("bart", layers=1, hidden=4, ffn=8, heads=2, head_dim=2, vocab=10, decoder_layers=1)
    c = rl.classifier_batches(bart, w, "fp32")
    # encoder 2 x 128 op per token; decoder 2 x (128 + cross q, k, v, output 4 x 4 x 4) = 384 per token; attention:
    # encoder 4 x 4 x 2 ** 2, decoder self and cross 2 x 4 x 4 x 2 ** 2; head 2 x 28
    assert c.flops == (256 + 384) * 2 + 16 * 4 + 32 * 4 + 56 == 1528
    assert c.bytes == (128 * 2 + 28 + 64) * 4 + 2 * 4 * 4 == 1424
    deberta = rl.Arch("deberta", layers=2, hidden=4, ffn=8, heads=2, head_dim=2, vocab=10, relative_span=512)
    # DeBERTa v1: content-to-position and position-to-content over 2 x length positions: 2 x 2 x 4 x 2 layers x
    # (2 x 2 ** 2) more than the encoder
    assert rl.classifier_batches(deberta, w, "fp32").flops == rl.classifier_batches(ENC, w, "fp32").flops + 16 * 2 * 8


def test_the_decoder_step_count_matches_a_hand_count():
    step = rl.decoder_step(T5, rows=3, prompts=1, enc_len=5, position=2, precision="fp32")
    # weights per step: self q, k, v 48 + output 16, cross q 16 + output 16, gated feed-forward 2*4*6 + 6*4 = 72
    # -> 168; output layer 4*10 = 40. Operations: 2 x 208 per row x 3 rows, plus attention 2 x 2 x inner 4 x
    # (3 rows x 3 positions + 3 rows x 5 encoder tokens)
    assert step["flops"] == 2 * 208 * 3 + 16 * (9 + 15) == 1632
    # fp32: 208 x 4 bytes, four norms of 4 at 4 bytes; self cache 3 rows x 3 positions x (k, v) 2 x 4 x 4 bytes;
    # cross keys and values 1 prompt x 5 tokens x 2 x 4 x 4 bytes
    assert step["weights"] == 208 * 4 + 4 * 4 * 4 == 896
    assert step["self_cache_needed"] == 9 * 2 * 4 * 4 == 288 and step["cross_kv"] == 5 * 2 * 4 * 4 == 160
    assert step["total"] == 1344


def test_the_generate_stage_counts_padding_as_waste():
    w = DecodeWork()
    w.add_encoder(2, 6)  # two prompts of 4 and 6 tokens, padded to 6
    for t in range(3):
        w.add_step(4, t, 6, 2)  # 4 rows for 3 steps
    w.add_outputs([4, 6], [[[1, 2, 3], [1, 2]], [[1, 2, 3], [1]]])  # 9 tokens generated of the 12 row-steps
    enc, dec = rl.generator_encoder(T5, w, "fp32"), rl.decoder_steps(T5, w, "fp32")
    per_token = 2 * (48 + 16 + 72) + 2 * 2 * 4 * 4  # encoder layer + the decoder layer's cross keys and values
    assert enc.flops == per_token * 12 + 16 * 2 * 36 and enc.useful_flops == per_token * 10 + 16 * (16 + 36)
    assert dec.flops == 2 * 208 * 12 + 16 * (4 * (1 + 2 + 3) + 12 * 6)
    assert dec.useful_flops == 2 * 208 * 9 + 16 * ((6 + 3 + 6 + 1) + (3 * 4 + 2 * 4 + 3 * 6 + 1 * 6))
    assert dec.bytes == 3 * 896 + 4 * 6 * 2 * 4 * 4 + 2 * 6 * 3 * 2 * 4 * 4


def test_arch_of_reads_the_configs_it_counts_and_says_why_not():
    from breaknli_fast.engines.model_info import load_config

    a, why = rl.arch_of(load_config("mini-nli"))
    assert why is None and (a.family, a.layers, a.hidden, a.ffn, a.heads) == ("encoder", 5, 256, 1024, 4)
    t, _ = rl.arch_of(load_config("mini-t5"))
    assert (t.family, t.ffn_inputs, t.inner, t.decoder_layers, t.vocab) == ("t5", 2, 192, 3, 6000)
    d, _ = rl.arch_of({"model_type": "deberta-v2", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "intermediate_size": 16, "vocab_size": 10, "relative_attention": True, "position_buckets": 4})
    assert d.family == "deberta" and d.relative_span == 4 and d.relative_fixed
    none, why = rl.arch_of({"model_type": "gpt2"})
    assert none is None and "gpt2" in why


# -- the roofline ------------------------------------------------------------------------------------------------

def test_the_binding_ceiling_is_the_slower_one():
    assert rl.against(1000.0, 100.0, 1e3, 10.0) == (10.0, "memory")  # 1 s of compute, 10 s of memory
    assert rl.against(1000.0, 100.0, 10.0, 1e3) == (100.0, "compute")
    assert rl.against(1000.0, 100.0, None, 10.0) == (None, None)
    # two shapes, 2 and 4 operations, at 100 and 400 op/s: 6 operations in 0.02 + 0.01 s
    rate = rl.compute_ceiling([(1, 1, 1, 1.0), (1, 1, 2, 1.0)], lambda m, k, n: 100.0 if n == 1 else 400.0)
    assert rate == pytest.approx(6.0 / (2 / 100 + 4 / 400))


def _ceilings(rate: float, bw: float, precision: str = "int8") -> MachineCeilings:
    c = MachineCeilings(threads=2, precisions={precision: "measured"}, bandwidth=Bandwidth(bytes_per_s=bw))
    for m, k, n, _ in rl._encoder_gemms(ENC, 16):
        c.gemm.append(GemmCeiling(precision, m, k, n, kernel="k", ops_per_s=rate))
    return c


def test_a_stage_share_is_its_floor_over_its_median_time():
    w = BatchWork()
    w.add_pairs([3, 5])
    w.add_batch(2, 8)
    r = rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, _ceilings(1e5, 1e9))
    assert r.binding == "compute" and r.floor_s == pytest.approx(12400 / 1e5)
    assert r.pct_of_ceiling == pytest.approx(100 * 12400 / 1e5) and r.attained_ops_per_s == 12400
    assert r.padding_pct == pytest.approx(100 * (1 - 5296 / 12400))
    slow_memory = rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, _ceilings(1e9, 100.0))
    assert slow_memory.binding == "memory" and slow_memory.floor_s == pytest.approx(540 / 100.0)
    none = rl.stage_roofline("classify_ph", ENC, "bf16", None, 1.0, w, None, None, note="not native")
    assert none.pct_of_ceiling is None and none.note == "not native" and none.attained_ops_per_s == 12400


def test_the_largest_bucket_is_held_to_the_ceilings_alone():
    """The width whose batches hold the most tokens per batch, timed by its batches' own seconds over the workers
    that ran side by side: here 2 batches of 2 rows at width 8 (16 tokens each) beat 4 rows at width 2 in one batch
    (8 tokens), took 0.4 s on their workers, so 0.2 s of the stage's time with 2 workers."""
    w = BatchWork(workers=2)
    w.add_pairs([3, 5, 8, 8, 1, 1, 2, 2])
    w.add_batch(2, 8, 0.1)
    w.add_batch(2, 8, 0.3)
    w.add_batch(4, 2, 0.5)
    assert w.by_width == {"8": [2, 4, pytest.approx(0.4)], "2": [1, 4, pytest.approx(0.5)]}
    r = rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, _ceilings(1e5, 1e9))
    b = r.largest_bucket
    assert (b.width, b.batches, b.rows) == (8, 2, 2.0) and b.seconds == pytest.approx(0.2)
    one = BatchWork()
    one.add_pairs([8, 8])
    one.add_batch(2, 8)
    flops = rl.classifier_batches(ENC, one, "int8").flops * 2  # two such batches
    assert b.flops == pytest.approx(flops) and b.attained_ops_per_s == pytest.approx(flops / 0.2)
    assert b.binding == "compute" and b.pct_of_ceiling == pytest.approx(100 * flops / 1e5 / 0.2)
    # its shapes are among those the ceilings are measured at; a bucket alone at a shape without a figure has none
    needed = set(rl.needed_gemms("classify_ph", ENC, "int8", w, None))
    assert {(m, k, n) for m, k, n, _ in rl._encoder_gemms(ENC, 16)} <= needed
    assert rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, None).largest_bucket.pct_of_ceiling is None
    # an engine that timed no batch by width (an earlier file, a stage without batches): no bucket
    w.by_width = {}
    assert rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, _ceilings(1e5, 1e9)).largest_bucket is None


# -- the engines count what they ran ------------------------------------------------------------------------------

def test_the_classifier_counts_its_pairs_and_padded_batches(tiny_roberta):
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.batching import padded_width

    clf = registry.load_classifier("torch", tiny_roberta, max_batch=2)
    pairs = [("A man sleeps.", "A man rests."), ("A dog runs in a park with a red ball today.", "An animal plays."),
             ("x", "y"), ("A woman reads.", "Someone reads a book in the morning light.")]
    clf.classify(pairs)
    lengths = [len(x) for x in clf.tokenizer([p for p, _ in pairs], [h for _, h in pairs])["input_ids"]]
    w = clf.stats.work
    assert (w.pairs, w.tokens, w.token_squares) == (4, sum(lengths), sum(n * n for n in lengths))
    widths = sorted(padded_width(n) for n in lengths)
    assert w.batches == clf.stats.batches and w.rows == 4
    assert w.padded_tokens == sum(widths) and w.padded_token_squares == sum(x * x for x in widths)
    assert w.padded_tokens > w.tokens  # padding to a multiple of 8 is waste
    assert sum(b[0] for b in w.by_width.values()) == w.batches and sum(b[1] for b in w.by_width.values()) == 4
    assert all(b[2] > 0 for b in w.by_width.values())  # each width's batches timed


def test_the_workers_side_by_side_are_those_a_call_used(tiny_roberta):
    """Two workers: a call of several batches runs them side by side (2), a call of one batch on the calling thread
    (1): the largest bucket's time is divided by what really ran."""
    from breaknli_fast.engines import registry

    clf = registry.load_classifier("torch", tiny_roberta, max_batch=2, workers=2, threads=2)
    if clf.workers.n != 2:
        pytest.skip("the torch engine runs one worker here")
    pairs = [("A man sleeps.", "A man rests."), ("A dog runs.", "An animal plays."), ("x", "y"), ("A cat.", "A dog.")]
    clf.reset_stats()
    clf.classify(pairs[:1])
    assert clf.stats.work.workers == 1
    clf.reset_stats()
    clf.clear_cache()
    clf.classify(pairs)
    assert clf.stats.batches >= 2 and clf.stats.work.workers == 2


def test_the_cudagraph_classifier_counts_its_buckets(tiny_roberta):
    from breaknli_fast.engines import registry

    clf = registry.load_classifier("cudagraph", tiny_roberta, device="cpu")
    pairs = [("x", "y"), ("A cat.", "A dog."), ("A man sleeps.", "A man rests.")]
    lengths = [len(x) for x in clf.tokenizer([p for p, _ in pairs], [h for _, h in pairs])["input_ids"]]
    clf.classify(pairs)
    w = clf.stats.work
    # each pair in its own length bucket (the engine's ladder), each bucket's batch padded to 8 pairs (the smallest
    # batch bucket on the CPU)
    from breaknli_fast.backends.cudagraph.engine import bucket

    widths = sorted({bucket(n, clf.length_ladder)[0] for n in lengths})
    assert len(widths) >= 2
    assert (w.batches, w.rows, w.padded_tokens, w.padded_token_squares) == (
        len(widths), 8 * len(widths), sum(8 * x for x in widths), sum(8 * x ** 2 for x in widths))
    assert w.pairs == 3 and w.tokens == sum(lengths)


def test_the_sampler_counts_every_row_it_stepped(tiny_t5):
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding

    gen = registry.load_generator("torch", tiny_t5)
    gen.compact_share = None  # finished rows stay in the batch: every row runs every step
    out = gen.generate_ids(["A man sleeps.", "Two dogs run in the park."], 3,
                           Decoding(max_new_tokens=6, top_k=0, top_p=1.0), [1, 2])
    w = gen.stats.work
    enc = gen.tokenizer(["A man sleeps.", "Two dogs run in the park."], padding=True)["attention_mask"]
    assert w.computed and w.prompts == 2 and w.prompt_tokens == sum(map(sum, enc))
    assert w.encoder_padded == 2 * len(enc[0]) and w.batches >= 1
    assert w.row_steps == 6 * w.steps and w.steps <= 6  # 6 rows each step, until every row has finished
    assert w.tokens == gen.stats.new_tokens == sum(len(s) for seqs in out for s in seqs) <= w.row_steps
    assert w.token_positions == sum(len(s) * (len(s) + 1) // 2 for seqs in out for s in seqs)


# -- the ceilings' cache --------------------------------------------------------------------------------------------

SHAPE = ("fp32", 16, 32, 48)


def test_ceilings_are_cached_per_key_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    first = ceil.measure_ceilings([SHAPE], threads=1, mode="quick")
    assert first.measured_now == 1 and Path(first.file).exists() and first.bandwidth.bytes_per_s > 0
    g = first.gemm_at(*SHAPE)
    assert g.ops_per_s > 0 and g.kernel in [k.kernel for k in g.kernels] and not g.reused
    assert first.key["cpu"] and first.key["threads"] == 1 and first.key["torch"]
    again = ceil.measure_ceilings([SHAPE], threads=1, mode="quick")
    assert again.measured_now == 0 and again.file == first.file
    assert again.gemm_at(*SHAPE).reused and again.gemm_at(*SHAPE).ops_per_s == g.ops_per_s
    assert again.bandwidth.reused and again.bandwidth.bytes_per_s == first.bandwidth.bytes_per_s
    # another key (threads; the CPU's flags) is another file, measured anew
    other = ceil.measure_ceilings([SHAPE], threads=2, mode="quick")
    monkeypatch.setenv("BREAKNLI_FAST_CPU_FLAGS", "avx2 fma")
    flags = ceil.measure_ceilings([SHAPE], threads=1, mode="quick")
    assert len({first.file, other.file, flags.file}) == 3 and other.measured_now == flags.measured_now == 1
    # fresh: measured again, and the cache keeps the shapes it did not measure
    monkeypatch.delenv("BREAKNLI_FAST_CPU_FLAGS")
    ceil.measure_ceilings([("fp32", 16, 48, 32)], threads=1, mode="quick")
    fresh = ceil.measure_ceilings([SHAPE], threads=1, mode="quick", refresh=True)
    assert fresh.measured_now == 1 and not fresh.gemm_at(*SHAPE).reused
    assert set(json.loads(Path(fresh.file).read_text())["gemm"]) == {"fp32 16x32x48", "fp32 16x48x32"}


def test_a_product_is_also_measured_on_one_thread_counted_per_thread(tmp_path, monkeypatch):
    """Engines that run batches side by side on one thread each can pass what one product reaches on all the
    threads: each kernel's one-thread rate, counted once per thread, stands beside it, and the faster is the
    ceiling (so no stage is above the machine's own figure because of how the products were timed)."""
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    calls = []
    real = ceil._time

    def timed(fn, b):
        import torch

        calls.append(torch.get_num_threads())
        return real(fn, b)

    monkeypatch.setattr(ceil, "_time", timed)
    g = ceil.measure_ceilings([SHAPE], threads=2, mode="quick").gemm_at(*SHAPE)
    names = [k.kernel for k in g.kernels]
    one = [k for k in g.kernels if k.kernel.endswith(", 1 thread x 2")]
    assert len(one) == len(names) // 2 and 1 in calls and 2 in calls
    for k in one:
        assert k.ops_per_s == pytest.approx(2.0 * 16 * 32 * 48 / k.seconds)
    assert g.ops_per_s == max(k.ops_per_s for k in g.kernels if k.ops_per_s)


def test_the_measuring_is_bounded_by_its_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    c = ceil.measure_ceilings([SHAPE, ("int8", 16, 32, 48)], threads=1, mode="quick", budget_s=0.0)
    assert c.measured_now == 0 and c.gemm == [] and c.bandwidth is None
    assert c.not_measured == ["fp32 16x32x48", "int8 16x32x48"] and "time budget" in c.notes[0]
    assert not Path(c.file).exists()  # nothing measured, nothing cached


def test_bf16_has_no_ceiling_where_the_cpu_emulates_it(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    monkeypatch.setenv("BREAKNLI_FAST_CPU_FLAGS", "avx2 avx512f avx512_vnni")
    c = ceil.measure_ceilings([("bf16", 16, 32, 48)], threads=1, mode="quick")
    assert c.gemm == [] and c.precisions["bf16"].startswith("not computed natively")
    monkeypatch.setenv("BREAKNLI_FAST_CPU_FLAGS", "avx2 avx512f avx512_bf16")
    assert ceil.precision_status("bf16") == "measured"


def test_the_gpu_datasheet_gives_every_shape_its_precision_peak():
    c = ceil.gpu_ceilings("NVIDIA H100 80GB HBM3", [("bf16", 512, 768, 768), ("int8", 512, 768, 768)], "cuda")
    assert c.source == "datasheet" and c.bandwidth.bytes_per_s == 3.35e12
    assert c.gemm_at("bf16", 512, 768, 768).ops_per_s == 989.4e12 and c.gemm_at("int8", 512, 768, 768).ops_per_s == 1979e12
    assert ceil.gpu_ceilings("Some GPU", [("bf16", 1, 1, 1)], "cuda").gemm == []


# -- renderings --------------------------------------------------------------------------------------------------

def _report_with_rooflines() -> BenchReport:
    w = BatchWork()
    w.add_pairs([3, 5])
    w.add_batch(2, 8)
    st = StageTiming(2, "pairs", iterations=3, median_s=1.0, min_s=0.9, classifier_work=w,
                     extra={"pairs_per_s": 2.0, "batch_latency": {"median_ms": 1.0, "p90_ms": 1.0, "p95_ms": 1.0,
                                                                  "p99_ms": 1.0}, "latency_unit": "batch"})
    c = _ceilings(1e5, 1e9)
    st.roofline = rl.stage_roofline("classify_ph", ENC, "int8", "int8", 1.0, w, None, c)
    off = StageTiming(2, "pairs", iterations=3, median_s=1.0, min_s=1.0,
                      extra={"pairs_per_s": 2.0, "batch_latency": {"median_ms": 1.0, "p90_ms": 1.0, "p95_ms": 1.0,
                                                                   "p99_ms": 1.0}, "latency_unit": "batch"})
    engines = [{"label": "ort:int8", "precision": "int8", "status": "ok", "reference": True,
                "speed": {"stages": {"classify_ph": to_json(st), "relation": to_json(off)}}}]
    report = from_json(BenchReport, {"probe": "breaknli", "reference": "ort:int8", "engines": engines})
    report.ceilings = c
    return report


def test_bench_md_and_the_terminal_show_each_stage_share():
    from rich.console import Console

    from breaknli_fast.bench.report import bench_markdown
    from breaknli_fast.bench.result import BenchResult

    report = _report_with_rooflines()
    md = bench_markdown(report)
    assert "## Stages against this machine's ceilings" in md
    row = next(line for line in md.splitlines() if line.startswith("| ort:int8 | classify_ph | int8 |"))
    assert "| 8 / 16 |" in row and row.endswith("| 57.3 | 0.0 (0.0) | 23 | compute | 0.0 | 12 % |")
    assert "2 threads" in md and "relation" not in md.split("## Stages against")[1].split("##")[0]
    report.engines[0].label = "gen=ort:fp32/clf=ort:int8:quantization=dynamic-batch"  # a long name, at 80 columns
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(BenchResult(report).table())
    text = console.export_text()
    assert "each stage: % of this CPU's measured ceiling" in text
    assert any(line.startswith("│ gen=ort:fp32/clf=ort:") and line.rstrip().endswith("12 % │")
               for line in text.splitlines()), text
    # the same report read back from its JSON renders the same
    assert bench_markdown(BenchResult(json.loads(json.dumps(to_json(report)))).report) == bench_markdown(report)


def test_results_without_ceilings_render_as_before():
    from rich.console import Console

    from breaknli_fast.bench.report import bench_markdown, roofline_rich_table
    from breaknli_fast.bench.result import BenchResult

    # a bench written before the ceilings existed: a committed file with them taken out
    payload = json.loads((ROOT / "benchmarks" / "results" / "bench-mini.json").read_text())["payload"]
    payload.pop("ceilings", None)
    payload.get("config", {}).pop("ceilings", None)
    for e in payload["engines"]:
        for stage in ((e.get("speed") or {}).get("stages") or {}).values():
            if isinstance(stage, dict):
                stage.pop("roofline", None)
    res = BenchResult(payload)
    md = res.to_markdown()
    assert "## Stages (fixed workload)" in md and "ceilings" not in md
    assert roofline_rich_table(res.report) is None
    Console(width=80, file=io.StringIO()).print(res.table())
    assert bench_markdown(res.report) == md


# -- the GPU check's bounds: the same counts -------------------------------------------------------------------------

def test_the_gpu_bounds_decoder_bytes_are_the_decoders_own_tensors():
    """The package's count from the config gives the bytes of the cudagraph decoder's own weights and state."""
    import torch

    from breaknli_fast.engines import registry

    gen = registry.load_generator("cudagraph", "mini-t5", precision="fp32", device="cpu")
    dec, state, at = gen.decoder, gen.decoder.new_state(2, 3, 16, 8), 4
    tensors = [t for group in (dec.w_qkv, dec.w_o, dec.w_q_cross, dec.w_o_cross, dec.w_in, dec.w_out, dec.ln_self,
                               dec.ln_cross, dec.ln_ff) for t in group] + [dec.lm_head, dec.ln_final]
    weights = sum(t.numel() * t.element_size() for t in tensors)
    cache = state.self_kv.numel() * state.self_kv.element_size() * (at + 1) / state.steps
    cross = state.cross.numel() * state.cross.element_size()
    a, _ = rl.arch_of(gen.config)
    step = rl.decoder_step(a, state.rows, state.prompts, state.enc_len, at, "fp32")
    assert (step["weights"], step["self_cache_needed"], step["cross_kv"]) == (weights, cache, cross)
    assert isinstance(dec.lm_head, torch.Tensor)


def test_the_gpu_bounds_rows_carry_a_bench_stage_roofline():
    """The gpu-bounds measurement's dry run (the CPU, the mini models): its decoder row holds the package's counts
    and the same roofline JSON as a bench stage; with a datasheet the row is held to its peaks."""
    from breaknli_fast.suite.measurements import gpu_bounds

    row = gpu_bounds.decoder_bound("mini-t5", "cpu", "fp32", 1, None)
    a, _ = rl.arch_of(gpu_bounds.load_config("mini-t5"))
    step = rl.decoder_step(a, row["rows"], row["prompts"], row["encoder_tokens"], row["position"], "fp32")
    assert row["bytes"]["total"] == step["total"] and row["roofline"]["flops"] == step["flops"]
    assert row["roofline"]["bytes"] == step["total"] and row["roofline"]["note"] == "no datasheet peaks (a dry run)"
    assert set(row["roofline"]) == set(to_json(rl.StageRoofline("fp32", note="x")))
    counts = rl.decoder_step_counts(a, 160, 8, 64, 24, "bf16")
    held = gpu_bounds.bound("decoder step", counts, 1e-4, "NVIDIA H100 80GB HBM3", "cuda", "bf16")
    floor = max(counts.flops / 989.4e12, counts.bytes / 3.35e12)
    assert held["binding"] == "memory" and held["floor_s"] == pytest.approx(floor)
    assert held["pct_of_ceiling"] == pytest.approx(100 * floor / 1e-4)
