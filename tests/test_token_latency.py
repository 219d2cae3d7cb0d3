"""What a generator's latency figures count: its tokens are the ids it generated, end-of-sequence tokens included
(not its texts tokenised again), and its first token is reported once every row of the call has one, also where a
call runs as several batches one after another."""

from __future__ import annotations

import pytest

import breaknli_fast.engines.generation as generation
from breaknli_fast.bench.loadgen.roles import GenSample, GeneratorRunner
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import COUNTED_IDS, COUNTED_TEXTS, Decoding, derive_seed, generate_counted
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
from breaknli_fast.prompts import CONTRADICT_PROMPT


@pytest.fixture(scope="module")
def prompts():
    return [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in load_examples("sample", limit=4).examples]


@pytest.mark.parametrize("engine", ["torch", "cudagraph"])
def test_tokens_are_the_generated_ids_with_their_end_of_sequence_token(engine, prompts):
    gen = registry.load_generator(engine, "mini-t5")
    d, seeds = Decoding(max_new_tokens=30), [3, 1, 4, 1]
    ids = gen.generate_ids(prompts, 5, d, seeds)
    texts, counts, how = generate_counted(gen, prompts, 5, d, seeds)
    assert how == COUNTED_IDS and texts == gen.generate(prompts, 5, d, seeds)
    assert counts == [sum(len(r) for r in rows) for rows in ids]
    eos = int(gen.config.eos_token_id)
    ended = sum(r[-1] == eos for rows in ids for r in rows)
    assert ended > 0  # rows that ended with eos: each counts one token more than its text tokenised again
    retok = [gen.count_tokens(c) for c in texts]
    assert sum(counts) >= sum(retok) + ended


class _TextsOnly:
    """A generator with texts and no ids (a plugin that implements the protocol only)."""

    def generate(self, prompts, n, decoding, seeds):
        return [[f"a b {i}"] * n for i, _ in enumerate(prompts)]

    def count_tokens(self, texts):
        return sum(len(t.split()) for t in texts)


def test_a_generator_without_ids_counts_its_texts():
    assert generate_counted(_TextsOnly(), ["x", "y"], 2, Decoding(), [0, 1]) == \
        ([["a b 0"] * 2, ["a b 1"] * 2], [6, 6], COUNTED_TEXTS)
    wrapped = registry.as_generator(_TextsOnly())
    assert generate_counted(wrapped, ["x"], 1, Decoding(), [0])[1:] == ([3], COUNTED_TEXTS)


def test_loadgen_samples_carry_the_generated_ids(prompts):
    gen = registry.load_generator("torch", "mini-t5")
    loop = BreakNLIConfig(k=4, u=2, s=1)
    ex = load_examples("sample", limit=2).examples
    samples = [GenSample("contradictive", e, p, derive_seed(0, "contradictive", e.id)) for e, p in zip(ex, prompts)]
    out = GeneratorRunner(gen, samples, loop).process([0, 1])
    ids = gen.generate_ids([s.prompt for s in samples], 4, loop.decoding, [s.seed for s in samples])
    assert [o.tokens for o in out] == [sum(len(r) for r in rows) for rows in ids]


def _events(monkeypatch, gen, batch_fn_name: str, target) -> list[str]:
    events: list[str] = []
    inner = getattr(target, batch_fn_name)

    def spy(*a, **k):
        events.append("batch")
        return inner(*a, **k)

    monkeypatch.setattr(target, batch_fn_name, spy)
    gen.first_token_callback = lambda first: events.append("first token")
    return events


def test_the_first_token_is_reported_after_the_last_batch_of_a_call_has_it(monkeypatch, prompts):
    """One prompt cut into two row batches that run one after another (one worker): the first token is the later
    batch's, reported once."""
    gen = registry.load_generator("torch", "mini-t5", workers=1)
    gen.min_batches = 2
    events = _events(monkeypatch, gen, "sample", generation)
    gen.generate_ids(prompts[:1], 6, Decoding(max_new_tokens=4), [0])
    assert events == ["batch", "batch", "first token"]
    events.clear()
    gen.min_batches = 1
    gen.generate_ids(prompts[:1], 6, Decoding(max_new_tokens=4), [0])  # one batch: as before
    assert events == ["batch", "first token"]


def test_the_cudagraph_generator_reports_the_first_token_after_its_last_batch(monkeypatch, prompts):
    gen = registry.load_generator("cudagraph", "mini-t5", prompt_batch=1)
    events = _events(monkeypatch, gen, "_decode", gen)
    gen.generate_ids(prompts[:3], 2, Decoding(max_new_tokens=4), [0, 1, 2])
    assert events == ["batch", "batch", "batch", "first token"]


@pytest.mark.parametrize("engine, batches", [("torch", 2), ("torch", 1), ("cudagraph", 1)])
def test_the_first_token_reported_is_each_rows_first_generated_token(engine, batches, prompts):
    """The first-token callback carries every row's first token (a call cut into row batches, a prompt's rows split
    over two of them, merged back in the call's prompts x n order): what LoadGen logs as the first-token response and
    TEST06 checks against the output."""
    gen = registry.load_generator(engine, "mini-t5", **({"workers": 1} if engine == "torch" else {"prompt_batch": 2}))
    if engine == "torch":
        gen.min_batches = batches
    got: list[list[int]] = []
    gen.first_token_callback = got.append
    ids = gen.generate_ids(prompts[:3], 5, Decoding(max_new_tokens=6), [7, 8, 9])
    assert len(got) == 1 and got[0] == [r[0] for rows in ids for r in rows]
