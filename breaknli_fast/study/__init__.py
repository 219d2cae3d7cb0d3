"""Studies of NLI models: the probe contract (:mod:`.probe`) and the one entry point that runs any probe
(:func:`run_study`, :mod:`.runner`)."""

from breaknli_fast.probes.base import Probe, StageTimes, StudyContext
from breaknli_fast.progress import ProgressHook
from breaknli_fast.study.runner import StudyResult, execute, run_study

__all__ = ["Probe", "ProgressHook", "StageTimes", "StudyContext", "StudyResult", "execute", "run_study"]
