"""breaknli-fast: the BreakNLI logical-triangle test on fast engines."""

import os

# torch's CPU build runs its intra-op threads on GNU OpenMP, whose idle threads spin. When other processes
# share the cores (a second run, a CI job, a laptop's browser), spinning threads take the cores from the
# threads that have work, and a run slowed down about 20-fold here (BENCHMARKS.md, "A busy machine").
# Passive waiting gives the cores back. It must be set before torch is first imported; a value the user
# set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
