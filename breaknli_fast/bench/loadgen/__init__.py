"""``breaknli-fast bench --scenario``: latency and accuracy as MLPerf Inference measures them, with MLCommons'
LoadGen (``pip install 'breaknli-fast[loadgen]'``) driving each engine.

Each ``--engines`` entry is LoadGen's system under test, once per role (:mod:`.roles`: the classifier on one
(premise, hypothesis) pair per sample, the generator on one prompt giving K candidates, the study unit on one
BreakNLI example through the whole loop), in the SingleStream, MultiStream, Offline and Server scenarios
(:mod:`.settings`), each followed by an AccuracyOnly pass on the same code (:mod:`.accuracy`: the score as a
percentage of the torch fp32 reference's, with the 99 % and 99.9 % tiers). LoadGen schedules the queries, times
them and judges the run (VALID / INVALID, early stopping, percentiles, TTFT / TPOT); :mod:`.logs` reads its log
files, never recomputes them. :mod:`.compliance` runs and judges MLPerf's compliance tests per role
(``--compliance``). :mod:`.runner` runs it all into the typed results of :mod:`.types` (serialised by
:func:`breaknli_fast.bench.types.to_json`), :mod:`.metrics` defines every figure once for the JSON, the Markdown, the
terminal table and ``--compare`` (:mod:`.report`), :mod:`.plot` draws the accuracy / latency trade-off (bench.png)
and writes bench.html. docs/latency.md explains how to read it.
"""

from __future__ import annotations

from typing import Any

from breaknli_fast.errors import UserError

EXTRA = "loadgen"
INSTALL = f"pip install 'breaknli-fast[{EXTRA}]' (mlcommons-loadgen)"


class LoadGenMissing(UserError):
    """MLCommons' LoadGen is not installed (one line naming the extra)."""


def import_loadgen() -> Any:
    """The ``mlperf_loadgen`` module, or :class:`LoadGenMissing` saying which extra installs it."""
    try:
        import mlperf_loadgen
    except ImportError:
        raise LoadGenMissing(f"bench --scenario needs MLCommons' LoadGen: {INSTALL}") from None
    return mlperf_loadgen


def loadgen_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("mlcommons-loadgen")
    except Exception:  # noqa: BLE001 - informative only
        return None
