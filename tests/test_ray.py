"""A study sharded over a local Ray instance with 2 CPU workers gives the single process's records (as a set)
and report figures; a driver interrupted mid-run resumes without losing or repeating a record."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (the optional 'ray' extra)")

from breaknli_fast.pipeline.breaknli import LoopConfig  # noqa: E402
from breaknli_fast.study import ProgressHook, run_study  # noqa: E402
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


def test_ray_equals_one_process_and_resumes(local_ray, tiny_t5, tiny_roberta, tiny_tsv, tmp_path):
    loop = LoopConfig(k=8, u=3, s=1, seed=2, chunk_size=4)
    common = dict(dataset=str(tiny_tsv), limit=24, classifier=tiny_roberta, generator=tiny_t5, engine="torch")
    single = run_study("breaknli", loop, **common, out=tmp_path / "single")
    cfg = RayConfig(workers=2, threads_per_worker=1)
    sharded = run_study("breaknli", loop, **common, out=tmp_path / "ray", ray=cfg)
    assert sorted(map(_key, sharded.records)) == sorted(map(_key, single.records))
    for key in ("funnel", "metrics"):
        assert sharded.report[key] == single.report[key]
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


def test_ray_missing_is_one_line(monkeypatch, tmp_path, tiny_roberta, tiny_tsv):
    import builtins

    from breaknli_fast.study.distributed import RayUnavailable, connect

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(RayUnavailable, match=r"pip install 'breaknli-fast\[ray\]'"):
        connect(RayConfig())
