"""CUDA graphs captured by hand, one per bucket, and replayed (the way gpt-fast and vLLM run their decode steps).

A *step* is a function of no arguments that reads and writes only tensors allocated before it runs (its static
buffers): a call copies its inputs into them, replays the step's graph, and copies the outputs out. Capturing
records the step's kernels once; a replay launches all of them with one call, so a step of a thousand small
kernels costs the GPU's time for them and not a thousand launches from Python.

:class:`GraphRunner` keeps one graph per key (a bucket: the shapes of the static buffers) and replays it. It runs
the step eagerly instead, counting and saying so once per reason, where

* the device is not CUDA (``graphs`` off: the CPU tests and dry runs run exactly the same step functions),
* the key is not one of the engine's buckets (``in_ladder=False``: a shape the ladder does not hold),
* ``max_graphs`` graphs are already held,
* capturing failed (the step uses an operation CUDA graphs cannot record): the error's first line is recorded and
  that key runs eagerly from then on.

Graphs share one memory pool: a step's intermediate tensors live in it, and steps never run concurrently, so a
later replay may reuse what an earlier one left (every step writes its results into its own static buffers).
:class:`StandInGraph` is the CPU stand-in of ``torch.cuda.CUDAGraph`` for the tests: it runs the function at
capture and replays it on the same tensors, so copy-in / copy-out through the static buffers is exercised without
a GPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import torch

from breaknli_fast.console import warn

WARMUP_RUNS = 2  # eager runs of a step on a side stream before its capture (cuBLAS workspaces, lazy inits)
MAX_GRAPHS = 96  # graphs one engine keeps (each holds its kernels' parameters; memory is in the shared pool)


class StandInGraph:
    """``torch.cuda.CUDAGraph``'s interface on the CPU: ``capture(fn)`` runs ``fn`` once (as a capture would record
    it), ``replay()`` runs it again on the same tensors."""

    def __init__(self) -> None:
        self.fn: Callable[[], None] | None = None
        self.replays = 0

    def capture(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        fn()

    def replay(self) -> None:
        if self.fn is None:
            raise RuntimeError("replay before capture")
        self.replays += 1
        self.fn()


class _CudaGraph:
    """One captured CUDA graph (the capture follows torch's documented recipe: warm-up on a side stream first)."""

    def __init__(self, device: torch.device, pool: Any) -> None:
        self.device, self.pool = device, pool
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, fn: Callable[[], None]) -> None:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        with torch.cuda.graph(self.graph, pool=self.pool):
            fn()

    def replay(self) -> None:
        self.graph.replay()


@dataclass
class GraphStats:
    """What a runner did, for the engine's details (config.json, bench.json)."""

    captured: int = 0
    capture_seconds: float = 0.0
    replays: int = 0
    eager_runs: int = 0  # steps run eagerly (every step where graphs are off)
    misses: dict[str, int] = field(default_factory=dict)  # why a bucket has no graph -> how many times
    failures: dict[str, str] = field(default_factory=dict)  # key -> the first line of its capture's error
    keys: list[str] = field(default_factory=list)  # the captured buckets, in capture order
    dropped: int = 0  # graphs dropped with their buffers (an evicted decode state)
    held: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"captured": self.captured, "capture_seconds": round(self.capture_seconds, 4),
                "replays": self.replays, "eager_runs": self.eager_runs, "misses": dict(self.misses),
                "capture_failures": dict(self.failures), "buckets": list(self.keys), "dropped": self.dropped,
                "held": self.held}


class GraphRunner:
    """One graph per key, captured on first use and replayed after (module notes).

    ``mode``: ``cuda`` (CUDA graphs), ``standin`` (:class:`StandInGraph`: the same bookkeeping on the CPU, for the
    tests) or ``eager`` (every step runs as plain torch calls). ``name`` says whose steps these are in the
    one-line notices."""

    def __init__(self, device: str | torch.device, mode: str = "cuda", max_graphs: int = MAX_GRAPHS,
                 name: str = "cudagraph", say: Callable[[str], None] | None = None) -> None:
        if mode not in ("cuda", "standin", "eager"):
            raise ValueError(f"unknown graph mode {mode!r}; use cuda, standin or eager")
        self.device = torch.device(device)
        if mode == "cuda" and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {self.device}")
        self.mode, self.max_graphs, self.name = mode, int(max_graphs), name
        self.say = say or warn
        self.graphs: dict[Hashable, Any] = {}
        self.eager_keys: set[Hashable] = set()
        self.stats = GraphStats()
        self.pool = torch.cuda.graph_pool_handle() if mode == "cuda" else None
        self._told: set[str] = set()

    @property
    def capturing(self) -> bool:
        return self.mode != "eager"

    def ensure(self, key: Hashable, fn: Callable[[], None], in_ladder: bool = True) -> bool:
        """Capture ``key``'s graph of ``fn`` unless it has one or runs eagerly; whether it replays a graph now.

        Capturing *runs* ``fn`` (the warm-up runs before a CUDA capture, the stand-in's run): the static buffers
        hold garbage after it, so a caller sets their inputs after ``ensure`` and before :meth:`run`."""
        if not self.capturing:
            return False
        if key in self.graphs:
            return True
        if key in self.eager_keys:
            return False
        if not in_ladder:
            self._miss("not a bucket", f"a shape outside the buckets ({key})")
            return False
        if len(self.graphs) >= self.max_graphs:
            self._miss("graph limit", f"{self.max_graphs} graphs held (max_graphs)")
            return False
        return self._capture(key, fn) is not None

    def run(self, key: Hashable, fn: Callable[[], None]) -> None:
        """Replay ``key``'s graph, or run ``fn`` eagerly where it has none (after :meth:`ensure`). ``fn`` reads and
        writes only static tensors: the caller copies inputs in before and outputs out after."""
        graph = self.graphs.get(key)
        if graph is None:
            self.stats.eager_runs += 1
            fn()
            return
        graph.replay()
        self.stats.replays += 1

    def drop(self, keys: Any) -> None:
        """Forget the graphs of ``keys`` (their static buffers are freed: a later :meth:`ensure` captures anew)."""
        for key in keys:
            if self.graphs.pop(key, None) is not None:
                self.stats.dropped += 1
            self.eager_keys.discard(key)
        self.stats.held = len(self.graphs)

    def _miss(self, why: str, notice: str) -> None:
        self.stats.misses[why] = self.stats.misses.get(why, 0) + 1
        if why not in self._told:
            self._told.add(why)
            self.say(f"{self.name}: {notice}; its steps run eagerly (counted in the engine's details)")

    def _capture(self, key: Hashable, fn: Callable[[], None]) -> Any:
        t0 = time.perf_counter()
        graph = StandInGraph() if self.mode == "standin" else _CudaGraph(self.device, self.pool)
        try:
            graph.capture(fn)
        except Exception as e:  # noqa: BLE001 - an operation the graph cannot hold: that bucket runs eagerly
            if self.mode == "cuda":
                torch.cuda.synchronize(self.device)
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            self.eager_keys.add(key)
            self.stats.misses["capture failed"] = self.stats.misses.get("capture failed", 0) + 1
            self.stats.failures[str(key)] = f"{type(e).__name__}: {msg}"
            self.say(f"{self.name}: capturing the step of bucket {key} failed ({type(e).__name__}: {msg}); it runs "
                     "eagerly")
            return None
        if self.mode == "cuda":
            torch.cuda.synchronize(self.device)
        self.stats.capture_seconds += time.perf_counter() - t0
        self.stats.captured += 1
        self.stats.keys.append(str(key))
        self.graphs[key] = graph
        self.stats.held = len(self.graphs)
        return graph
