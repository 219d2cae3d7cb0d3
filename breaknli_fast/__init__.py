"""breaknli-fast: the BreakNLI logical-triangle test on fast engines."""

import os

# torch's CPU build runs its intra-op threads on GNU OpenMP, whose idle threads spin. When other processes
# share the cores (a second run, a CI job, a laptop's browser), spinning threads take the cores from the
# threads that have work: with spinning threads, a `run --limit 300` that takes 21 s alone did not finish in
# 900 s beside a second one on 2 cores (BENCHMARKS.md, "A busy machine").
# Passive waiting gives the cores back. It must be set before torch is first imported; a value the user
# set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
