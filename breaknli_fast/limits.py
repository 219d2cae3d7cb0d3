"""The bounds of every resource a user can ask for, in one place: threads, workers, beams, generated tokens,
batch sizes, LoadGen's arrival rate and durations, bench repetitions.

A request beyond a bound is refused in one ``error:`` line naming the bound and why, before any model loads
(the command line's option bounds and each options class's ``check``; docs/limits.md lists them). Each bound is
far above what a study or a benchmark here needs and well below what takes a shared machine down: a million
``--threads`` used to create threads until the machine's process table was full, ``--target-qps 1e9`` made LoadGen
prepare queries until memory ran out.
"""

from __future__ import annotations

import os

# CPU threads (--threads, a bench entry's threads=, --ray-threads) and batches side by side (--workers), at most this
# many per core the process may use: beyond the cores threads only wait for one another (the run is slower, not
# faster), and a few per core are enough to measure that
THREADS_PER_CORE = 4

# generated tokens per candidate (--max-new-tokens): T5's configured length (n_positions 512); a BreakNLI candidate is
# one sentence (40 tokens by default), and every engine holds a decoder cache of this length per sequence
MAX_NEW_TOKENS = 512

# beams of beam / diverse-beam decoding (--num-beams): as many as the candidates per hypothesis allowed (--k at most
# 1000): each beam is a sequence the generator holds per prompt, as each sampled candidate is
MAX_BEAMS = 1000

# batch sizes: prompts per generator batch (--gen-batch; each with its K candidates), pairs per classifier batch
# (--max-batch) and padded tokens per classifier batch (--token-budget): 128 x the CPU defaults (8, 32, 8192), so
# a GPU's larger batches fit; larger batches only hold more activations at once
MAX_GEN_BATCH = 1024
MAX_BATCH_PAIRS = 4096
MAX_TOKEN_BUDGET = 1 << 20

# LoadGen (bench --scenario): queries it prepares for a run and holds in memory (MLPerf's official Server minimum,
# 270,336, fits; a Server run prepares --target-qps x --min-duration of them), the arrival rate (LoadGen schedules
# every arrival in advance) and the minimum duration of each run (6x MLPerf's official 600 s)
MAX_PREPARED = 500_000
MAX_TARGET_QPS = 100_000.0
MAX_MIN_DURATION_S = 3600.0

# bench's own repetitions: end-to-end repeats (or LoadGen rounds), warm-up and measured iterations per stage, the
# measured seconds per stage
MAX_REPEATS = 100
MAX_WARMUP = 100
MAX_MIN_ITERATIONS = 10_000
MAX_MIN_SECONDS = 3600.0


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def max_threads() -> int:
    """The most CPU threads (or side-by-side batches) a run may ask for on this machine."""
    return THREADS_PER_CORE * usable_cores()


def check_threads(value: int | None, flag: str) -> None:
    """A thread (or worker) count above :func:`max_threads`, refused in one line naming the bound and why."""
    from breaknli_fast.errors import UserError

    if value is not None and value > max_threads():
        raise UserError(f"{flag} {value}: at most {max_threads()} ({THREADS_PER_CORE} per CPU core this process may "
                        f"use, {usable_cores()}); threads beyond the cores only wait for one another")
