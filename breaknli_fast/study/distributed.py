"""A study sharded over a Ray cluster (the ``ray`` extra): same chunks, same seeds, same records as one process.

Each worker is a Ray actor that loads the engines once (one per GPU with ``gpus_per_worker=1``, or one per few
CPU threads) and computes whole chunks of the probe's units. The driver alone appends finished chunks to the
run directory, so a crash of the driver or of a worker loses nothing and repeats nothing on resume: a chunk is
either in samples.jsonl whole or computed again. A chunk whose actor dies is queued again on a new actor.

Results do not depend on the sharding: every unit's randomness comes from its own seed (run seed, group,
example id), the probe's one-off step (:meth:`Probe.prepare`, e.g. M(p, h) of every example) runs once on one
worker in a single call as in one process, and chunks are formed exactly as :func:`execute` forms them.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.errors import UserError, install_hint
from breaknli_fast.study.rundir import RunDir
from breaknli_fast.probes.base import Probe, StageTimes, pending_chunks
from breaknli_fast.progress import ProgressHook

IN_FLIGHT_PER_WORKER = 2  # chunks queued on each actor, so none waits for the driver between chunks


class RayUnavailable(UserError):
    """Ray is not installed, or the cluster cannot be reached (one line)."""


@dataclass
class RayConfig:
    """Where and how wide: ``address`` None or "local" starts a local instance; else joins that cluster."""

    address: str | None = None
    workers: int | None = None  # actors; default: one per GPU, else one per `threads_per_worker` CPU threads
    gpus_per_worker: float = 0.0
    threads_per_worker: int = 1
    cluster: dict[str, Any] = field(default_factory=dict)  # filled when connected: nodes, CPUs, GPUs

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address or "local", "workers": self.workers, "gpus_per_worker": self.gpus_per_worker,
                "threads_per_worker": self.threads_per_worker, "cluster": self.cluster}


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(f"--ray needs Ray: {install_hint('ray')}") from None
    return ray


RAY_PORT = 6379  # the head node's port when an address names none (Ray's default)
PROBE_SECONDS = 3.0


def probe_address(address: str, timeout: float = PROBE_SECONDS) -> None:
    """A one-line :class:`RayUnavailable` within ``timeout`` seconds unless something accepts connections at
    ``address`` (``host[:port]`` or ``ray://host[:port]``): Ray itself retries an address where nothing listens
    for minutes. ``auto`` and ``local`` are left to Ray."""
    if address in ("", "auto", "local"):
        return
    rest = address.split("://", 1)[-1].rstrip("/")
    if rest.startswith("["):  # [IPv6]:port
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    elif rest.count(":") == 1:  # host:port
        host, _, port = rest.partition(":")
    else:  # a host name, or an IPv6 address without a port
        host, port = rest, ""
    host = host or "127.0.0.1"
    try:
        port_n = int(port) if port else (10001 if address.startswith("ray://") else RAY_PORT)
    except ValueError:
        raise RayUnavailable(f"--ray-address {address!r}: the port {port!r} is not a number") from None
    try:
        with socket.create_connection((host, port_n), timeout=timeout):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
        raise RayUnavailable(f"cannot connect to Ray at {address}: nothing answers on {host}:{port_n} ({reason}); "
                             "start the cluster (ray start --head) or check --ray-address") from None


def connect(cfg: RayConfig) -> Any:
    """Start or join Ray; record the cluster's size in ``cfg.cluster`` and settle ``cfg.workers``."""
    ray = _ray()
    if not ray.is_initialized():
        if cfg.address not in (None, "", "local"):
            probe_address(cfg.address)
        try:
            if cfg.address in (None, "", "local"):
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=cfg.address, log_to_driver=False, configure_logging=False)
        except Exception as e:  # an unreachable address, a version mismatch: one line
            raise RayUnavailable(f"cannot connect to Ray at {cfg.address or 'a new local instance'}: "
                                 f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cfg.cluster = {"nodes": len(nodes), "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0)}
    if cfg.workers is None:
        if cfg.gpus_per_worker > 0:
            cfg.workers = max(1, int(res.get("GPU", 0) // cfg.gpus_per_worker))
        else:
            cfg.workers = max(1, int(res.get("CPU", 1) // max(1, cfg.threads_per_worker)))
    if cfg.workers < 1:
        raise RayUnavailable("--ray-workers must be at least 1")
    # actors the cluster cannot place would wait for resources without end: refused before any starts
    for what, per, have in (("CPUs", cfg.threads_per_worker, res.get("CPU", 0)),
                            ("GPUs", cfg.gpus_per_worker, res.get("GPU", 0))):
        if per and cfg.workers * per > have:
            flag = "--ray-threads" if what == "CPUs" else "--ray-gpus-per-worker"
            raise RayUnavailable(f"--ray-workers {cfg.workers} x {flag} {per:g} need {cfg.workers * per:g} {what}; "
                                 f"the Ray cluster has {have:g}")
    return ray


class _Worker:
    """The actor: loads the engines once, then runs the probe's steps on what the driver sends."""

    def __init__(self, probe: Probe, engine: EngineConfig, requests: dict[str, Any], threads: int):
        import torch

        from breaknli_fast.study.loading import load_models

        torch.set_num_threads(max(1, threads))
        engine = EngineConfig(**{**engine.to_dict(), "threads": threads})
        self.probe = probe
        self.models = load_models(engine, requests)
        self.state: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        import socket

        return {"node": socket.gethostname(), "pid": os.getpid(), "engine": self.models.engine}

    def details(self) -> dict[str, Any]:
        return {"max_batch": getattr(self.models.classifier, "max_batch", None), **self.models.details(),
                "notes": self.models.notes}

    def truncation(self, examples: list) -> dict[str, Any] | None:
        from breaknli_fast.study.truncation import input_truncation

        return input_truncation(self.models.classifier, examples)

    def prepare(self, data: LoadedData, todo: bool) -> dict[str, Any]:
        from breaknli_fast.probes.base import StudyContext

        ctx = StudyContext(models=self.models, stages=None, times=self.probe.new_times(), hook=ProgressHook())
        self.probe.prepare(ctx, data, todo)
        return {"state": ctx.state, "times": ctx.times.to_dict()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.state = state

    def process(self, group: str, chunk: list) -> dict[str, Any]:
        from breaknli_fast.probes.base import StudyContext

        ctx = StudyContext(models=self.models, stages=None, times=self.probe.new_times(), hook=ProgressHook(),
                           state=self.state)
        t0 = time.perf_counter()
        records = self.probe.process(ctx, group, chunk)
        return {"records": records, "times": ctx.times.to_dict(), "seconds": time.perf_counter() - t0}


def _merge(into: StageTimes, d: dict[str, Any]) -> None:
    for k, v in d.get("seconds", {}).items():
        into.seconds[k] = into.seconds.get(k, 0.0) + v
    for k, v in d.get("pairs", {}).items():
        into.pairs[k] = into.pairs.get(k, 0) + v
    into.sequences += d.get("sequences", 0)
    into.new_tokens += d.get("new_tokens", 0)


class RayPool:
    """The actors of one study: started and loaded once (:attr:`infos` tells what each loaded), then
    :meth:`execute` runs the probe's chunks on them."""

    def __init__(self, probe: Probe, engine: EngineConfig, requests: dict[str, Any], cfg: RayConfig,
                 n_chunks_hint: int | None = None):
        self.ray = ray = connect(cfg)
        self.probe, self.cfg = probe, cfg
        n = max(1, int(cfg.workers or 1))
        if n_chunks_hint is not None:
            n = max(1, min(n, n_chunks_hint))
        self._cls = ray.remote(num_cpus=cfg.threads_per_worker, num_gpus=cfg.gpus_per_worker)(_Worker)
        self._args = (probe, engine, requests, cfg.threads_per_worker)
        self.actors = [self._cls.remote(*self._args) for _ in range(n)]
        try:
            self.infos = ray.get([a.info.remote() for a in self.actors])
        except Exception as e:  # a model that does not load: the actor's own error
            self.close()
            raise _actor_error(e) from None
        self.stats = {i: {"worker": i, "node": inf["node"], "engine": inf["engine"], "chunks": 0, "examples": 0,
                          "seconds": 0.0} for i, inf in enumerate(self.infos)}

    def details(self) -> dict[str, Any]:
        return self.ray.get(self.actors[0].details.remote())

    def truncation(self, examples: list) -> dict[str, Any] | None:
        """The input-length check of the study's pairs (``study.truncation``), made by one actor's classifier."""
        return self.ray.get(self.actors[0].truncation.remote(list(examples)))

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            try:
                self.ray.kill(a)
            except Exception:  # already gone
                pass

    def workers(self) -> list[dict[str, Any]]:
        return [dict(s, seconds=round(s["seconds"], 3),
                     examples_per_s=round(s["examples"] / s["seconds"], 3) if s["seconds"] else None)
                for s in self.stats.values()]

    def execute(self, data: LoadedData, run_dir: RunDir | None, hook: ProgressHook | None,
                times: StageTimes | None = None) -> tuple[list[dict[str, Any]], StageTimes]:
        """:func:`~breaknli_fast.study.runner.execute` over the actors: every record of the run and this
        invocation's timings."""
        ray, probe = self.ray, self.probe
        hook = hook or ProgressHook()
        times = times if times is not None else probe.new_times()
        wall0 = time.perf_counter()
        records = run_dir.load_samples() if run_dir is not None else []
        done = {probe.key(r) for r in records}
        groups = probe.groups(data)
        chunks = pending_chunks(probe, groups, done)
        prep = ray.get(self.actors[0].prepare.remote(data, bool(chunks)))
        _merge(times, prep["times"])
        state_ref = ray.put(prep["state"])
        ray.get([a.set_state.remote(state_ref) for a in self.actors])
        for group, selected in groups:
            hook.start(group, len(selected), sum((group, ex.id) in done for ex in selected))
        queue = list(range(len(chunks)))
        pending: dict[Any, tuple[int, int]] = {}  # future -> (actor index, chunk index)
        written = 0

        def submit(ai: int) -> None:
            while queue and sum(1 for a, _ in pending.values() if a == ai) < IN_FLIGHT_PER_WORKER:
                ci = queue.pop(0)
                g, ch = chunks[ci]
                pending[self.actors[ai].process.remote(g, ch)] = (ai, ci)

        for ai in range(len(self.actors)):
            submit(ai)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ai, ci = pending.pop(ready[0])
            try:
                out = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                # the actor died: its chunks go back to the front of the queue, a new actor takes its place
                lost = [f for f, (a, _) in pending.items() if a == ai]
                queue[:0] = [ci] + [pending.pop(f)[1] for f in lost]
                self.actors[ai] = self._cls.remote(*self._args)
                ray.get(self.actors[ai].set_state.remote(state_ref))
                self.stats[ai]["restarts"] = self.stats[ai].get("restarts", 0) + 1
                submit(ai)
                continue
            except Exception as e:
                raise _actor_error(e) from None
            group, chunk = chunks[ci]
            recs = out["records"]
            if run_dir is not None:
                run_dir.append_samples(recs)  # the driver alone writes: whole chunks, fsync'ed
            records.extend(recs)
            written += len(recs)
            _merge(times, out["times"])
            st = self.stats[ai]
            st["chunks"] += 1
            st["examples"] += len(recs)
            st["seconds"] += out["seconds"]
            times.examples, times.wall = written, time.perf_counter() - wall0
            hook.advance(group, len(chunk))
            submit(ai)
        for group, _ in groups:
            hook.finish(group)
        times.examples, times.wall = written, time.perf_counter() - wall0
        return records, times


def _actor_error(e: BaseException) -> BaseException:
    """What failed inside an actor: its UserError (one line for the CLI), else the Ray error itself."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e
