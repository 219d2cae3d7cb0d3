"""One LoadGen test of one system under test: LoadGen runs on a thread of its own and hands its queries to this
process's main thread, which runs the engine (the thread every other measurement of the bench runs it on) and
reports each sample complete (and, for a generator, its first token) back to LoadGen.

LoadGen schedules, times and judges; this module only serves its queries. A failure inside the engine still
completes every outstanding query (empty answers), so LoadGen ends, and is then raised.
"""

from __future__ import annotations

import array
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from breaknli_fast.bench.energy import Energy, Meter
from breaknli_fast.bench.loadgen import logs
from breaknli_fast.bench.loadgen.types import RunResult


@dataclass
class Output:
    """One sample's answer: ``value`` (kept for the accuracy score), ``payload`` (the bytes LoadGen receives and
    writes to its accuracy log), ``tokens`` (a generator's output tokens, for TPOT and tokens/s), ``first`` (a
    generator's first-token response as its output has it: sent at completion where the engine reported none)."""

    value: Any
    payload: bytes = b""
    tokens: int | None = None
    first: bytes | None = None


# positions (in the query's list) whose first tokens are out, with each position's first token ids (one per
# candidate): LoadGen receives them as the first-token response (JSON) and logs them as ``token_data``
FirstToken = Callable[[Sequence[int], Sequence[Sequence[int]]], None]
NO_FIRST = b"[]"  # the first-token response of an answer without token ids


class SampleRunner(Protocol):
    """What LoadGen's system under test runs: the samples of a query, by their library index."""

    size: int  # samples in the library (LoadGen's QSL)

    def process(self, indices: Sequence[int], first_token: FirstToken | None) -> list[Output]: ...


@dataclass
class TestRun:
    folder: Path
    result: RunResult  # logs.read_run
    outputs: dict[int, Any] = field(default_factory=dict)  # library index -> value (its first answer)
    service_s: list[float] = field(default_factory=list)  # per query: the engine's own time, LoadGen's excluded
    samples: int = 0
    first_token_missing: int = 0
    wall_s: float = 0.0
    energy: Energy | None = None  # the counters over the run, where a meter was given


def _buffer(data: bytes) -> array.array:
    return array.array("B", data)


def run_test(lg: Any, runner: SampleRunner, ts: Any, folder: str | Path, percentile: float | None,
             tokens: bool = False, coalesce: int = 1, audit: str | None = None, meter: Meter | None = None) -> TestRun:
    """Run one LoadGen test (``ts``: its TestSettings) with ``runner`` as the system under test; logs go to
    ``folder``. ``coalesce``: queries waiting together are served as one batch of up to this many samples
    (Server; the other scenarios never have two queries waiting). ``audit``: the text of an ``audit.config``
    (compliance tests), written into ``folder`` and given to LoadGen; without it LoadGen is given a file name that
    does not exist, since it would otherwise apply an ``audit.config`` it finds in the working directory.
    ``meter``: energy counters read as LoadGen starts and once it has ended (``TestRun.energy``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    audit_path = folder / ("audit.config" if audit is not None else "no-audit.config")
    if audit is not None:
        audit_path.write_text(audit)
    waiting: queue.SimpleQueue = queue.SimpleQueue()
    run = TestRun(folder, RunResult())

    def issue(samples: Any) -> None:
        waiting.put(list(samples))

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(runner.size, runner.size, lambda s: None, lambda s: None)
    log = lg.LogSettings()
    log.log_output.outdir = str(folder)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            lg.StartTestWithLogSettings(sut, qsl, ts, log, str(audit_path))
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            failure.append(e)
        finally:
            waiting.put(None)

    t0 = time.perf_counter()
    reading = meter.start() if meter is not None else None
    thread = threading.Thread(target=drive, name="loadgen", daemon=True)
    thread.start()
    error: BaseException | None = None
    done = False
    while not done:
        item = waiting.get()
        if item is None:
            break
        while len(item) < coalesce:  # Server: what else is already waiting joins this batch
            try:
                more = waiting.get_nowait()
            except queue.Empty:
                break
            if more is None:
                done = True
                break
            item += more
        if error is not None:
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in item])
            continue
        try:
            _serve(lg, runner, item, run, tokens)
        except BaseException as e:  # noqa: BLE001 - LoadGen must still end: answer what is left, raise after
            error = e
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in item])
    thread.join()
    run.energy = reading.stop() if reading is not None else None
    run.wall_s = time.perf_counter() - t0
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    if error is not None:
        raise error
    if failure:
        raise failure[0]
    logs.tidy(folder)
    run.result = logs.read_run(folder, percentile)
    return run


def _serve(lg: Any, runner: SampleRunner, item: list[Any], run: TestRun, tokens: bool) -> None:
    ids = [s.id for s in item]
    first_sent = [False] * len(item)
    keep: list[array.array] = []

    def send_first(todo: list[tuple[int, bytes]]) -> None:
        responses = []
        for p, data in todo:
            buf = _buffer(data)
            keep.append(buf)
            ptr, n = buf.buffer_info()
            responses.append(lg.QuerySampleResponse(ids[p], ptr, n, 1))
            first_sent[p] = True
        if responses:
            lg.FirstTokenComplete(responses)

    def first_token(positions: Sequence[int], firsts: Sequence[Sequence[int]]) -> None:
        send_first([(p, json.dumps([int(t) for t in f]).encode()) for p, f in zip(positions, firsts)
                    if not first_sent[p]])

    t0 = time.perf_counter()
    outs = runner.process([s.index for s in item], first_token if tokens else None)
    if len(outs) != len(item):
        raise RuntimeError(f"the system under test answered {len(outs)} of {len(item)} samples")
    if tokens:
        missing = [p for p, sent in enumerate(first_sent) if not sent]
        run.first_token_missing += len(missing)
        # an engine that did not report it: its first token counts at completion, as its output has it
        send_first([(p, outs[p].first if outs[p].first is not None else NO_FIRST) for p in missing])
    responses = []
    for s, out in zip(item, outs):
        buf = _buffer(out.payload)
        keep.append(buf)
        ptr, n = buf.buffer_info()
        responses.append(lg.QuerySampleResponse(s.id, ptr, n, max(1, int(out.tokens or 1))) if tokens
                         else lg.QuerySampleResponse(s.id, ptr, n))
    run.service_s.append(time.perf_counter() - t0)
    lg.QuerySamplesComplete(responses)
    run.samples += len(item)
    for s, out in zip(item, outs):
        run.outputs.setdefault(s.index, out.value)
