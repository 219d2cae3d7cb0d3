"""A study sharded over a local Ray instance with 2 CPU workers gives the single process's records (as a set)
and report figures; a driver interrupted mid-run, a worker killed with SIGKILL and a driver killed with SIGKILL
all end with every record exactly once."""

from __future__ import annotations

import json
import re

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (the optional 'ray' extra)")

from breaknli_fast.probes.breaknli.loop import BreakNLIConfig  # noqa: E402
from breaknli_fast.study import run_study  # noqa: E402
from breaknli_fast.progress import ProgressHook
from breaknli_fast.study.distributed import RayConfig  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


class StopAfter(ProgressHook):
    def __init__(self, n: int):
        self.n = n

    def advance(self, stage: str, n: int = 1) -> None:
        self.n -= 1
        if self.n <= 0:
            raise KeyboardInterrupt


def _key(r):
    return json.dumps({k: v for k, v in r.items() if k != "line"}, sort_keys=True)


PROB_KEYS = ("ph_probs", "eval_probs")


def _same_records_up_to_rounding(a, b, tol=1e-4):
    """Every record exactly once on both sides, equal in every field but the probabilities, which may differ by
    ``tol``: runs on different thread counts (the killed run's Ray workers on one thread each, the reference in
    this process on all of them) give fp32 logits that differ by about 1e-6, which can move the sixth decimal a
    record stores."""
    def strip(r):
        return json.dumps({k: v for k, v in r.items() if k != "line" and k not in PROB_KEYS}, sort_keys=True)

    def probs(r):
        out = []
        for k in PROB_KEYS:
            v = r.get(k)
            for d in (v if isinstance(v, list) else [v] if v else []):
                out += [d[x] for x in sorted(d)]
        return out

    a, b = sorted(a, key=strip), sorted(b, key=strip)
    assert [strip(r) for r in a] == [strip(r) for r in b]
    for x, y in zip(a, b):
        px, py = probs(x), probs(y)
        assert len(px) == len(py) and all(abs(u - v) <= tol for u, v in zip(px, py)), (x.get("id"), px, py)


def test_ray_equals_one_process_and_resumes(local_ray, tiny_t5, tiny_roberta, tiny_tsv, tmp_path):
    loop = BreakNLIConfig(k=8, u=3, s=1, seed=2, chunk_size=4)
    common = dict(dataset=str(tiny_tsv), limit=24, classifier=tiny_roberta, generator=tiny_t5, engine="torch")
    single = run_study("breaknli", loop, **common, out=tmp_path / "single")
    cfg = RayConfig(workers=2, threads_per_worker=1)
    sharded = run_study("breaknli", loop, **common, out=tmp_path / "ray", ray=cfg)
    assert sorted(map(_key, sharded.records)) == sorted(map(_key, single.records))
    for key in ("funnel", "metrics", "truncation"):  # the input-length check too, made by an actor's classifier
        assert sharded.report[key] == single.report[key]
    assert single.report["truncation"]["pairs"] == 24
    workers = sharded.report["throughput"]["workers"]
    assert len(workers) == 2 and sum(w["examples"] for w in workers) == len(single.records)
    conf = json.loads((tmp_path / "ray" / "config.json").read_text())
    assert conf["ray"]["workers_started"] == 2 and conf["ray"]["cluster"]["nodes"] == 1

    # the driver stops after 3 chunks; the same call again finishes: nothing lost, nothing repeated
    with pytest.raises(KeyboardInterrupt):
        run_study("breaknli", loop, **common, out=tmp_path / "cut", ray=RayConfig(workers=2), hook=StopAfter(3))
    lines = (tmp_path / "cut" / "samples.jsonl").read_text().splitlines()
    assert 0 < len(lines) < len(single.records)
    resumed = run_study("breaknli", loop, **common, out=tmp_path / "cut", ray=RayConfig(workers=2))
    on_disk = [json.loads(x) for x in (tmp_path / "cut" / "samples.jsonl").read_text().splitlines()]
    assert sorted(map(_key, on_disk)) == sorted(map(_key, single.records))  # every record exactly once
    assert resumed.report["metrics"] == single.report["metrics"]


def test_top_up_sharded_over_ray_gives_the_single_process_records(local_ray, tiny_t5, tiny_roberta, tiny_tsv):
    """--top-up's draws are seeded per example and draw, so the actors make the single process's draws."""
    from breaknli_fast.engines.base import Decoding

    loop = BreakNLIConfig(k=12, u=4, s=2, seed=3, chunk_size=4, top_up=4,
                          decoding=Decoding(top_p=1.0, top_k=0, max_new_tokens=12))
    common = dict(dataset=str(tiny_tsv), limit=24, classifier=tiny_roberta, generator=tiny_t5, engine="torch")
    single = run_study("breaknli", loop, **common)
    assert any(r.get("top_up_draws") for r in single.records)
    sharded = run_study("breaknli", loop, **common, ray=RayConfig(workers=2, threads_per_worker=1))
    assert sorted(map(_key, sharded.records)) == sorted(map(_key, single.records))
    assert sharded.report["funnel"] == single.report["funnel"]


def test_ray_missing_is_one_line(monkeypatch, tmp_path, tiny_roberta, tiny_tsv):
    import builtins

    from breaknli_fast.study.distributed import RayUnavailable, connect

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)

    from breaknli_fast.errors import install_hint

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(RayUnavailable, match=re.escape(install_hint("ray"))):
        connect(RayConfig())



class KillOneWorker(ProgressHook):
    """SIGKILLs one Ray worker process after the first finished chunk (as a crash would)."""

    def __init__(self, pids):
        self.pids, self.done = pids, False

    def advance(self, stage: str, n: int = 1) -> None:
        import os
        import signal

        if not self.done and self.pids:
            os.kill(self.pids[0], signal.SIGKILL)
            self.done = True


def test_a_killed_worker_loses_and_repeats_nothing(local_ray, tiny_t5, tiny_roberta, tiny_tsv, tmp_path):
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.study.loading import EngineConfig
    from breaknli_fast.study.rundir import RunDir
    from breaknli_fast.probes.breaknli import BreakNLIProbe
    from breaknli_fast.study.distributed import RayPool

    loop = BreakNLIConfig(k=8, u=3, s=1, seed=2, chunk_size=2)
    data = load_examples(str(tiny_tsv), limit=24)
    single = run_study("breaknli", loop, data=data, classifier=tiny_roberta, generator=tiny_t5, engine="torch")
    pool = RayPool(BreakNLIProbe(loop), EngineConfig(engine="torch"), {"classifier": tiny_roberta, "generator": tiny_t5},
                   RayConfig(workers=2))
    try:
        pids = [info["pid"] for info in pool.infos]
        with RunDir(tmp_path / "run") as rd:
            records, _ = pool.execute(data, rd, KillOneWorker(pids))
        assert sum(w.get("restarts", 0) for w in pool.workers()) == 1  # the dead actor was replaced
    finally:
        pool.close()
    on_disk = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert sorted(map(_key, on_disk)) == sorted(map(_key, single.records))  # every record exactly once
    assert sorted(map(_key, records)) == sorted(map(_key, single.records))


def test_kill_minus_9_of_the_driver_then_rerun_resumes(tiny_t5, tiny_roberta, tiny_tsv, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "breaknli_fast.cli", "run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv),
            "--engine", "torch", "--limit", "40", "--k", "8", "--u", "3", "--s", "1", "--seed", "2", "--chunk-size", "2",
            "--ray", "--ray-workers", "2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = tmp_path / "killed"
    proc = subprocess.Popen(args + ["--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group: the local Ray instance dies with it
    samples = out / "samples.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if samples.exists() and samples.read_bytes().count(b"\n") >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    n_at_kill = samples.read_bytes().count(b"\n")
    r = subprocess.run(args + ["--out", str(out)], env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming" in r.stderr
    full = run_study("breaknli", BreakNLIConfig(k=8, u=3, s=1, seed=2, chunk_size=2), dataset=str(tiny_tsv), limit=40,
                     classifier=tiny_roberta, generator=tiny_t5, engine="torch")
    on_disk = [json.loads(x) for x in samples.read_text().splitlines()]
    assert len(on_disk) == len(full.records) > n_at_kill
    _same_records_up_to_rounding(on_disk, full.records)
