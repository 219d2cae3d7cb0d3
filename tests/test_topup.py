"""BreakNLI's top-up (--top-up N) on the shipped mini models (trained: the same records on transformers 4.57 and 5.x,
where random tiny models draw other weights per version and rarely reach a top-up): it keeps examples the drop at
< S would lose, each draw is seeded per example (same records whatever the chunking, and after a resume), one
generator call per round, and the lazy relation filter gives the full one's verdicts."""

import json

import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding, derive_seed
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, funnel
from breaknli_fast.probes.breaknli.topup import DRAW
from breaknli_fast.probes.breaknli.verdicts import TARGET
from breaknli_fast.study.rundir import RunDir
from study_helpers import run_loop

WIDE = Decoding(max_new_tokens=16)
N = 4


@pytest.fixture(scope="module")
def models():
    return registry.load_classifier("torch", "mini-nli"), registry.load_generator("torch", "mini-t5")


@pytest.fixture(scope="module")
def data():
    return load_examples("sample", limit=24)


def _cfg(**kw):
    return BreakNLIConfig(**{**dict(k=8, u=4, s=4, decoding=WIDE, seed=3, chunk_size=5, top_up=N), **kw})


def _key(records):
    return {(r["mode"], r["id"]): r for r in records}


def _lines(records):
    return sorted(json.dumps(r, sort_keys=True) for r in records)


def test_top_up_keeps_examples_that_the_drop_loses(models, data):
    clf, gen = models
    cfg = _cfg()
    without, _ = run_loop(data, clf, gen, _cfg(top_up=0))
    with_, _ = run_loop(data, clf, gen, cfg)
    a, b = _key(without), _key(with_)
    assert a.keys() == b.keys()
    assert not any("top_up_draws" in r for r in without)  # off: the records are the project's as they were
    rescued = 0
    for k, r0 in a.items():
        r1 = b[k]
        if r0["status"] != "too_few_on_target":  # nothing to top up: the same record, 0 draws where it was filtered
            extra = {"top_up_draws": 0} if "relations" in r0 else {}
            assert r1 == {**r0, **extra}, k
            continue
        target = TARGET[r1["mode"]]
        assert 1 <= r1["top_up_draws"] == len(r1["top_up_generated"]) == len(r1["top_up_relations"]) <= N
        kept = [c for c, rel in zip(r1["candidates"], r1["relations"]) if rel == [target, target]]
        drawn = [x for x, rel in zip(r1["top_up_generated"], r1["top_up_relations"]) if rel == [target, target]]
        if r1["status"] == "evaluated":  # the kept ones that pass first, then the passing draws, S in all
            rescued += 1
            assert len(r1["evaluated"]) == cfg.s and r1["evaluated"][: len(kept)] == kept
            assert r1["evaluated"][len(kept):] == [normalize_text(x) for x in drawn]
            assert r1["top_up_relations"][-1] == [target, target]  # it stops at the draw that reaches S
        else:
            assert r1["status"] == "too_few_on_target" and r1["top_up_draws"] == N and len(kept) + len(drawn) < cfg.s
    assert rescued > 0, "the tiny run should keep some example by topping it up"
    f = funnel(with_, data, cfg.modes)
    assert sum(f[m]["top_up"]["evaluated"] for m in cfg.modes) == rescued
    assert sum(f[m]["top_up"]["draws"] for m in cfg.modes) == sum(r.get("top_up_draws", 0) for r in with_)
    assert "top_up" not in funnel(without, data, cfg.modes)["entailed"]
    # draw j of an example is the generator's one sample under its own seed, whatever its batch
    r = next(r for r in with_ if r.get("top_up_draws"))
    j = r["top_up_draws"]
    prompt = cfg.prompts[r["mode"]].format(h=r["hypothesis"])
    assert gen.generate([prompt], 1, WIDE, [derive_seed(cfg.seed, r["mode"], r["id"], DRAW, j)])[0][0] \
        == r["top_up_generated"][j - 1]


def test_top_up_records_depend_on_neither_chunking_nor_resume(models, data, tmp_path):
    clf, gen = models
    full, _ = run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "full"))
    assert any(r.get("top_up_draws") for r in full)
    other, _ = run_loop(data, clf, gen, _cfg(chunk_size=3))
    assert _lines(other) == _lines(full)
    run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "part"), stop_after=15)
    rest, t = run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "part"))
    assert t.examples == len(full) - 15 and _lines(rest) == _lines(full)


class Counting:
    """A generator that records the prompts and samples of each call."""

    def __init__(self, inner):
        self.inner, self.info, self.calls = inner, inner.info, []

    def generate(self, prompts, n, decoding, seeds):
        self.calls.append((len(prompts), n))
        return self.inner.generate(prompts, n, decoding, seeds)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_one_generator_call_per_round_for_every_example_short(models, data):
    clf, gen = models
    counting = Counting(gen)
    records, _ = run_loop(data, clf, counting, _cfg(chunk_size=64, modes=("entailed",)))  # one chunk
    draws = [r.get("top_up_draws", 0) for r in records]
    top = [p for p, n in counting.calls if n == 1]
    assert len(top) == max(draws) <= N  # one call per round
    assert top[0] == sum(d > 0 for d in draws)  # the first round: every example short of S, in one call
    assert sum(top) == sum(draws)


def test_lazy_and_full_relation_filters_agree_with_top_up(models, data):
    clf, gen = models
    lazy, _ = run_loop(data, clf, gen, _cfg())
    full, _ = run_loop(data, clf, gen, _cfg(relation_filter="full"))

    def verdicts(rs):
        return [(r["id"], r["status"], r.get("evaluated"), r.get("verdict"), r.get("top_up_generated")) for r in rs]

    assert verdicts(lazy) == verdicts(full)
    assert sum(r.get("relation_pairs", 0) for r in lazy) < sum(r.get("relation_pairs", 0) for r in full)


def test_top_up_settings_are_checked():
    with pytest.raises(ValueError, match="sampling"):
        BreakNLIConfig(top_up=3, decoding=Decoding(strategy="beam"))
    with pytest.raises(ValueError, match="--top-up"):
        BreakNLIConfig(top_up=-1)
    assert "top_up" not in BreakNLIConfig().to_dict()  # 0: the identity of runs made before the option
    assert BreakNLIConfig(top_up=15).to_dict()["top_up"] == 15


def test_top_up_on_the_command_line(tmp_path):
    r = CliRunner().invoke(app, ["run", "-h"], terminal_width=200)
    assert r.exit_code == 0 and "--top-up" in r.output and "--one-direction" in r.output
    r = CliRunner().invoke(app, ["run", "--top-up", "3", "--decoding", "greedy", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "error:" in r.output and "sampling" in r.output
    assert not (tmp_path / "x").exists()  # refused before any model loads or a directory is made

