#!/usr/bin/env python
"""Run entries of the declared benchmark suite (benchmarks/suite.toml); scripts/run_benchmarks.sh calls it.

A script, not a bench option: it runs the suite's entries (``bench`` and other scripts) as separate processes, and
it loads breaknli_fast/bench/suite.py from its file, without the ``breaknli_fast.bench`` package (whose import
loads torch), so that the runner and make_benchmarks start in milliseconds and read the suite without a model
stack. ``python -m breaknli_fast.bench.suite`` is the same runner through the package. ``python scripts/suite.py --help`` lists the options
(``--only``, ``--skip``, ``--smoke``, ``--list``, ``--print``; env ONLY, SKIP, PYTHON, RESULTS, WORK).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MODULE = "breaknli_fast.bench.suite"


def suite_module() -> ModuleType:
    """breaknli_fast/bench/suite.py, imported alone (it needs only the standard library and breaknli_fast.errors)."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    spec = importlib.util.spec_from_file_location(MODULE, ROOT / "breaknli_fast" / "bench" / "suite.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = mod
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    sys.exit(suite_module().main())
