"""The recommendation that ends every bench: the fastest engine not shown to differ from the reference, beside the
fastest overall and what it may change; with random weights only the speed is ranked."""

from __future__ import annotations

from breaknli_fast import stats
from breaknli_fast.bench.parity import add_verdicts
from breaknli_fast.bench import recommend
from breaknli_fast.bench.types import BenchReport, Parity, from_json, to_json


def recommendation(data: dict):
    return recommend.recommendation(from_json(BenchReport, data))


def recommendation_lines(data: dict) -> list[str]:
    return recommend.recommendation_lines(from_json(BenchReport, data))


def _engine(label: str, speed: float, engine_hits: list[int], ref_hits: list[int], identical: bool = False) -> dict:
    parity = from_json(Parity, {"headline": {"metrics": {"accuracy": stats.paired_diff(engine_hits, ref_hits)}},
                                "generator": {"sampled_candidates": {"n": 50,
                                                                     "identical_pct": 100.0 if identical else 97.0}}})
    add_verdicts(parity, 1.0)
    return {"label": label, "status": "ok", "speed": {"speedup": {"end_to_end": speed}}, "parity": to_json(parity)}


def _bench(meaningful: bool = True) -> dict:
    ref = [1] * 600 + [0] * 400
    same = list(ref)
    worse = [0] * 150 + ref[150:]  # 150 of the 600 correct examples lost: 15 pp, far beyond chance
    return {"reference": "torch:fp32", "parity_meaningful": meaningful,
            "engines": [{"label": "torch:fp32", "status": "ok", "reference": True, "speed": {"speedup": {"end_to_end": 1.0}}},
                        _engine("ort:fp32:clf.precision=int8", 2.1, same, ref, identical=True),
                        _engine("ort:int8", 3.5, worse, ref),
                        {"label": "tensorrt:fp16", "status": "skipped", "reason": "no GPU"}]}


def test_the_pick_is_the_fastest_engine_not_shown_to_differ():
    rec = recommendation(_bench())
    assert rec.pick.label == "ort:fp32:clf.precision=int8" and rec.pick.identical_candidates
    assert rec.fastest.label == "ort:int8" and rec.fastest.confirmed == ["headline: accuracy"]
    assert rec.fastest.different_at_95[0].startswith("headline: accuracy -15.00 pp")
    pick, fastest = recommendation_lines(_bench())
    assert pick.startswith("Pick: `ort:fp32:clf.precision=int8`: 2.10x") and "token for token" in pick
    assert "no cell different" in pick
    assert fastest.startswith("Fastest: `ort:int8`: 3.50x") and "may change: headline: accuracy -15.00 pp" in fastest


def test_no_pick_when_every_engine_differs_and_no_judgement_on_random_weights():
    data = _bench()
    del data["engines"][1]
    lines = recommendation_lines(data)
    assert lines[0].startswith("Pick: none of the engines") and "`torch:fp32`" in lines[0]
    assert lines[1].startswith("Fastest: `ort:int8`")
    random = recommendation_lines(_bench(meaningful=False))
    assert len(random) == 1 and random[0].startswith("Fastest: `ort:int8`: 3.50x")
    assert "no engine is recommended" in random[0] and "may change" not in random[0]
    assert recommendation({"engines": [_bench()["engines"][0]]}) is None


def test_an_engine_that_fails_a_check_is_never_the_pick():
    """``bench -e torch:fp32,ort:fp32,ort:int8`` once picked ort:int8 ("no cell different") and then printed "FAIL
    ort:int8: classifier label agreement 97.97 % < 98.00 %": a pick passes every check shown."""
    data = _bench()
    ref = [1] * 600 + [0] * 400
    failing = _engine("ort:int8:quantization=static", 4.8, list(ref), ref)
    failing["checks"] = {"applied": True, "passed": False,
                         "failures": ["classifier label agreement 97.97 % < 98.00 %"]}
    data["engines"].insert(1, failing)
    rec = recommendation(data)
    assert rec.pick.label == "ort:fp32:clf.precision=int8"
    assert rec.fastest.label == "ort:int8:quantization=static"
    lines = recommendation_lines(data)
    assert lines[0].startswith("Pick: `ort:fp32:clf.precision=int8`")
    assert "fails: classifier label agreement 97.97 % < 98.00 %" in lines[1]


def test_an_engine_slower_than_the_reference_is_never_the_pick():
    data = _bench()
    data["engines"][1]["speed"]["speedup"]["end_to_end"] = 0.12  # matches the reference, at an eighth of its speed
    rec = recommendation(data)
    assert rec.pick is None and rec.fastest.label == "ort:int8"
    assert recommendation_lines(data)[0].startswith("Pick: none of the engines is faster than the reference")


def _delegated(label: str, engine: str, ran: dict[str, str], speed: float) -> dict:
    e = _engine(label, speed, [1] * 600 + [0] * 400, [1] * 600 + [0] * 400)
    e.update(engine=engine, spec={"config": {"engine": engine}}, info={r: {"engine": x} for r, x in ran.items()})
    return e


def test_an_engine_that_ran_none_of_the_models_itself_is_not_ranked_and_a_handed_role_is_said():
    """``-e ct2:int8 --probe accuracy``: CTranslate2 has no classifier, so every call ran on ort: not ct2's speed."""
    data = _bench()
    data["engines"][1:2] = [_delegated("ct2:int8", "ct2", {"classifier": "ort"}, 6.6)]
    report = from_json(BenchReport, data)
    ct2 = report.engines[1]
    assert ct2.delegated == {"classifier": "ort"} and not ct2.did_the_work
    assert ct2.shown_label == "ct2:int8 (classifier on ort)"
    rec = recommend.recommendation(report)
    assert rec.pick is None and rec.fastest.label == "ort:int8"
    lines = recommend.recommendation_lines(report)
    assert lines[-1] == "Not ranked: `ct2:int8 (classifier on ort)` ran none of the bench's models itself."
    # BreakNLI: the generator on ct2, the classifier handed to ort: ranked, and shown as such
    data["engines"][1] = _delegated("ct2:int8", "ct2", {"classifier": "ort", "generator": "ct2"}, 6.6)
    rec = recommendation(data)
    assert rec.pick.label == "ct2:int8 (classifier on ort)"
    assert "ct2:int8 (classifier on ort)" in "".join(recommend.recommendation_lines(from_json(BenchReport, data)))
