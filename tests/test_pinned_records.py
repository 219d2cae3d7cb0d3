"""Pinned results: a small BreakNLI run on the shipped mini models and one on the tiny test models must write the
records of ``tests/data/pinned/*.jsonl`` (and the report figures derived from them), whatever the code around
the loop looks like. The files were written by this module's ``main`` with the torch fp32 reference.

Why this holds on any x86-64 CPU: every discrete field (labels, candidates, statuses, verdicts) must be equal, and
probabilities may differ by 1e-4. fp32 kernels of other instruction sets differ in the last bits (about 1e-6); a
label or a sampled token changes only when two values lie that close, and these runs are kept small (a few
hundred classifications, about two thousand seeded draws) so that such a tie is very unlikely. Regenerate the
files (``python tests/test_pinned_records.py``, once per transformers major version: the tiny case has a file
per version) only for a change of results that is meant, and say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

PINNED = Path(__file__).parent / "data" / "pinned"


def pinned_name(name: str) -> str:
    """The file stem of a case: the tiny classifier is transformers' own random draw, which differs between 4.x
    and 5.x (tests/tiny_models.py), so the tiny run is pinned per major version; the mini models are the same
    weights everywhere and pinned once."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return f"{name}-tf{major}" if name == "tiny" and major >= 5 else name
PROB_TOL = 1e-4
PROB_KEYS = ("ph_probs", "eval_probs")


def _cases(tiny: dict[str, str] | None) -> dict[str, dict[str, Any]]:
    from breaknli_fast.data.loaders import sample_path

    cases = {"mini": dict(generator="mini-t5", classifier="mini-nli", dataset=str(sample_path()), limit=24,
                          k=8, u=4, s=2, seed=0)}
    if tiny:
        cases["tiny"] = dict(generator=tiny["t5"], classifier=tiny["roberta"], dataset=tiny["tsv"], limit=30,
                             k=12, u=4, s=2, seed=3, top_p=1.0, top_k=0, max_new_tokens=12)
    return cases


def run_case(case: dict[str, Any], out: Path | None = None) -> tuple[list[dict], dict]:
    """The case through the library's study entry point with the torch fp32 reference."""
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
    from breaknli_fast.study import run_study

    dec = Decoding(top_p=case.get("top_p", 0.95), top_k=case.get("top_k", 50),
                   max_new_tokens=case.get("max_new_tokens", 40))
    loop = BreakNLIConfig(k=case["k"], u=case["u"], s=case["s"], decoding=dec, seed=case["seed"], chunk_size=5,
                      relation_filter=case.get("relation_filter", "full"))
    res = run_study("breaknli", loop, dataset=case["dataset"], limit=case["limit"], generator=case["generator"],
                    classifier=case["classifier"], engine="torch", out=out)
    return res.records, res.report


def _strip(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "line"} for r in records]


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return abs(float(a) - float(b)) <= PROB_TOL


def assert_same_records(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(_strip(got), _strip(want)):
        assert set(g) == set(w), (g.get("id"), set(g) ^ set(w))
        for key in w:
            if key in PROB_KEYS:
                assert _close(g[key], w[key]), (g["id"], key, g[key], w[key])
            else:
                assert g[key] == w[key], (g["id"], key, g[key], w[key])


@pytest.fixture(scope="module")
def tiny(tiny_t5, tiny_roberta, tiny_tsv) -> dict[str, str]:
    return {"t5": tiny_t5, "roberta": tiny_roberta, "tsv": str(tiny_tsv)}


@pytest.mark.parametrize("name", ["mini", "tiny"])
def test_records_and_report_are_pinned(name, tiny, tmp_path):
    case = _cases(tiny)[name]
    records, report = run_case(case, tmp_path / "run")
    want = [json.loads(x) for x in (PINNED / f"{pinned_name(name)}.jsonl").read_text().splitlines()]
    assert_same_records(records, want)
    # the file the run directory holds is the same as what the call returned
    on_disk = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert_same_records(on_disk, want)
    figures = json.loads((PINNED / f"{pinned_name(name)}.report.json").read_text())
    assert report["funnel"] == figures["funnel"]
    assert report["metrics"] == figures["metrics"]


@pytest.mark.parametrize("name", ["mini", "tiny"])
def test_the_lazy_relation_filter_gives_the_same_results_with_fewer_pairs(name, tiny):
    case = _cases(tiny)[name]
    full, rep_full = run_case(case)
    lazy, rep_lazy = run_case(dict(case, relation_filter="lazy"))
    assert rep_lazy["funnel"] == rep_full["funnel"] and rep_lazy["metrics"] == rep_full["metrics"]

    def verdicts(records):
        return [(r["id"], r["status"], r.get("evaluated"), r.get("predictions"), r.get("verdict")) for r in records]

    assert verdicts(lazy) == verdicts(full)
    for a, b in zip(lazy, full):  # a relation computed in lazy mode is the full mode's; one not needed is None
        for ra, rb in zip(a.get("relations", []), b.get("relations", [])):
            assert all(x is None or x == y for x, y in zip(ra, rb))
    pairs = [sum(r.get("relation_pairs", 0) for r in rs) for rs in (lazy, full)]
    assert 0 < pairs[0] < pairs[1]
    assert rep_lazy["throughput"]["stage_seconds"] and rep_lazy["loop"]["relation_filter"] == "lazy"


def main() -> None:  # pragma: no cover - regenerates the pinned files
    import tempfile

    import tiny_models as testing

    PINNED.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tiny = {"t5": str(testing.make_tiny_t5(Path(d) / "t5")),
                "roberta": str(testing.make_tiny_classifier(Path(d) / "roberta", "roberta", init_std=1.0)),
                "tsv": str(Path(d) / "tiny.tsv")}
        with open(tiny["tsv"], "w") as f:
            f.write("gold_label\tsentence1\tsentence2\tpairID\n")
            for i, (prem, hyp, lab) in enumerate(testing.pairs(60)):
                f.write(f"{lab}\t{prem}\t{hyp}\tp{i}\n")
        for name, case in _cases(tiny).items():
            records, report = run_case(case)
            (PINNED / f"{pinned_name(name)}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _strip(records)))
            (PINNED / f"{pinned_name(name)}.report.json").write_text(
                json.dumps({"funnel": report["funnel"], "metrics": report["metrics"]}, indent=1, sort_keys=True) + "\n")
            print(name, len(records), "records", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
