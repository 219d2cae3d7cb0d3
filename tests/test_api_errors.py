"""The library called from Python: what a caller passes wrongly is a clear error that names what was passed (the
keyword, with the command line's flag beside it), never an AttributeError or an unpacking error from deep inside."""

from __future__ import annotations

import pytest

from breaknli_fast.data.loaders import DataError
from breaknli_fast.engines import registry
from breaknli_fast.probes import get_probe
from breaknli_fast.probes.base import ProbeConfigError
from breaknli_fast.study import run_study
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.study.rundir import RunDirError


def test_a_probe_config_may_be_a_dict_of_its_fields(tiny_roberta, tiny_tsv):
    p = get_probe("breaknli", {"k": 6, "u": 2, "s": 1, "modes": ["entailed"], "decoding": {"top_p": 0.9}})
    assert (p.cfg.k, p.cfg.modes, p.cfg.decoding.top_p, p.cfg.decoding.top_k) == (6, ("entailed",), 0.9, 50)
    assert set(p.cfg.prompts) == {"contradictive", "entailed"}  # a dict field given in part keeps its defaults
    res = run_study("accuracy", {"chunk_size": 2}, dataset=str(tiny_tsv), limit=4, classifier=tiny_roberta,
                    engine="torch")
    assert len(res.records) == 4 and res.probe.chunk_size == 2
    with pytest.raises(ProbeConfigError, match="the breaknli probe's config has no field 'kk' \\(its fields: modes, k"):
        get_probe("breaknli", {"kk": 1})
    with pytest.raises(ProbeConfigError, match="config's decoding has no field 'topp'"):
        get_probe("breaknli", {"decoding": {"topp": 0.9}})
    with pytest.raises(TypeError, match="must be a PermutationConfig or a dict of its fields, not str"):
        get_probe("permutation", "q=5")
    with pytest.raises(ValueError, match="need K >= U >= S"):  # the config's own checks still run
        get_probe("breaknli", {"k": 2, "u": 3})


def test_classify_takes_pairs_and_says_so(tiny_roberta):
    clf = registry.load_classifier("torch", tiny_roberta)
    assert len(clf.classify([("A man sleeps.", "A man rests.")]).labels) == 1
    for bad, match in ((["text"], "item 0 is 'text' \\(str\\)"), ("text", "not one text"),
                       ([("a", "b", "c")], "item 0 is"), (["ab"], "item 0 is 'ab'")):
        with pytest.raises(TypeError, match=match):
            clf.classify(bad)


def test_errors_name_the_keyword_the_caller_passed(tiny_roberta, tiny_tsv, tmp_path):
    with pytest.raises(DataError, match=r"^limit \(--limit\) cannot be negative \(got -1\)"):
        run_study("accuracy", dataset=str(tiny_tsv), limit=-1, classifier=tiny_roberta, engine="torch")
    with pytest.raises(Exception, match=r"^threads \(--threads\) must be at least 1, not 0"):
        run_study("accuracy", dataset=str(tiny_tsv), classifier=tiny_roberta, engine=EngineConfig("torch", threads=0))
    with pytest.raises(RunDirError, match="out is an empty path"):
        run_study("accuracy", dataset=str(tiny_tsv), classifier=tiny_roberta, engine="torch", out="")
