"""breaknli-fast: the BreakNLI logical-triangle test on fast engines."""

import os

# the variables below that the user set, before this package sets its defaults: a result file records only what
# the user set (breaknli_fast.suite.provenance)
USER_SET_ENV = frozenset(k for k in ("OMP_WAIT_POLICY", "MKL_CBWR") if k in os.environ)

# torch's CPU build runs its intra-op threads on GNU OpenMP, whose idle threads spin. When other processes
# share the cores (a second run, a CI job, a laptop's browser), spinning threads take the cores from the
# threads that have work: with spinning threads, a `run --limit 300` that takes 21 s alone did not finish in
# 900 s beside a second one on 2 cores (BENCHMARKS.md, "A busy machine").
# Passive waiting gives the cores back. It must be set before torch is first imported; a value the user
# set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# MKL (torch's fp32 BLAS on x86) picks its code path by the shape of a product: on Intel CPUs it splits the sum
# of a product with few rows between threads, so a row alone got other fp32 bits than among many (every row
# count up to ~160, multiples of 8 included), and the torch reference's answer depended on its batch. MKL's
# conditional numerical reproducibility in strict mode fixes the path whatever the row count. MKL reads it at
# its first call, not at torch's import: importing this package before the first matrix product is enough
# (engines/reproducibility.py checks that it took effect; docs/stack.md gives the cost). A value the user set
# is kept.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"
