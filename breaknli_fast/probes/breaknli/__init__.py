"""BreakNLI: the logical-triangle test (generate h' from h, keep the on-target candidates, check M(p, h') against
the triangle's verdict table). ``loop``: the steps; ``verdicts``: the rule table; ``metrics``: rates per mode and
label; ``report``: report.md; ``probe``: the probe the study runner drives."""

from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
from breaknli_fast.probes.breaknli.probe import BreakNLIProbe

__all__ = ["BreakNLIConfig", "BreakNLIProbe"]
