"""The steps of :class:`breaknli_fast.export.exporter.Exporter`, each alone: resolve, cache key, reuse, build,
measure and judge, manifest. A toy exporter (one text file, canned figures) keeps them fast and shows what is the
base class's; the ort backend's exporter shows a real format's hooks. Offline, CPU, seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tiny_models as testing
from breaknli_fast.engines import registry
from breaknli_fast.engines.backend import Backend
from breaknli_fast.export import (ExportError, ExportPlan, ExportRequest, ExportValidationError, Exporter,
                                  UnsupportedModelError, export_model)
from breaknli_fast.export import manifest as mf
from breaknli_fast.export import validate as val
from breaknli_fast.export.exporter import exporter

PAIRS = [(p, h) for p, h, _ in testing.pairs(12, seed=7)]
GOOD = {"n": 4, "max_abs_logit": 0.0, "agreement": 100.0, "nonfinite": 0}


class ToyExporter(Exporter):
    """One file with the model's path; figures given by the test. Counts its hooks' calls."""

    FORMAT = "toy"
    PRECISIONS = ("fp32", "int8")

    def __init__(self, figures: dict[str, Any] | None = None, calibrated_variants: tuple[str, ...] = ()):
        self.figures = dict(figures or GOOD)
        self.calibrated_variants = calibrated_variants
        self.calls: list[str] = []

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        return f"{precision}-{quantization}" if quantization else precision

    def calibrated(self, variant: str) -> bool:
        return variant in self.calibrated_variants

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        self.calls.append("write_files")
        (stage / "toy.txt").write_text(plan.src)
        return {"exporter": "toy"}

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        self.calls.append("compare")
        assert (folder / "toy.txt").read_text() == plan.src  # judged on the files just written
        return dict(self.figures)


@pytest.fixture(autouse=True)
def _cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache-root"))


def _request(model: str, tmp_path: Path, **kw: Any) -> ExportRequest:
    opts: dict[str, Any] = {"format": "toy", "cache_dir": tmp_path / "exports", "calibration_pairs": PAIRS,
                            "validation_size": 4, "calibration_size": 6, "progress": False, **kw}
    return ExportRequest(model, **opts)


def test_every_backend_s_exporter_is_an_exporter_subclass():
    """The declarations name a class (``module:Class``); each is an Exporter, the test plugin's too."""
    from plugins.jit_backend import JitExporter

    found = {f: exporter(f) for f in registry.export_formats()}
    assert {"onnx", "ct2", "openvino", "tensorrt"} <= set(found)
    for f, ex in found.items():
        assert isinstance(ex, Exporter) and f in registry.backend_for_format(f).formats, f
    assert issubclass(JitExporter, Exporter)


def test_a_declaration_without_an_exporter_class_is_one_line(monkeypatch):
    decl = Backend(name="broken", loaders="x", precisions={}, exporter="breaknli_fast.export.pairs",
                   formats=("broken",))
    monkeypatch.setattr(registry, "backend_for_format", lambda f: decl if f == "broken" else None)
    with pytest.raises(ExportError, match="not 'module:Class' of a breaknli_fast.export.exporter.Exporter subclass"):
        exporter("broken")
    decl = Backend(name="broken", loaders="x", precisions={}, exporter="breaknli_fast.export.pairs:as_pairs",
                   formats=("broken",))
    with pytest.raises(ExportError, match="not 'module:Class'"):
        exporter("broken")


def test_a_format_must_write_and_compare():
    class Half(Exporter):
        def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match="compare"):
        Half()


def test_resolve_checks_and_resolves_before_any_work(tiny_roberta, tmp_path):
    ex = ToyExporter()
    plan = ex.resolve(_request(tiny_roberta, tmp_path, max_length=4096, label_map=None))
    assert (plan.kind, plan.family, plan.variant, plan.device) == ("seq-cls", "roberta", "fp32", "cpu")
    assert plan.max_length == 128 and plan.limits["model_max_length"] == 128  # capped at the position table
    assert plan.val_pairs == PAIRS[:4] and plan.calib == [] and plan.pairs_source == "given"
    assert plan.tolerances == val.tolerances_for("seq-cls", "fp32")
    assert plan.target.parent == tmp_path / "exports" and "-toy-fp32-" in plan.target.name
    assert ex.calls == []  # nothing built, nothing measured
    for bad, match in (({"validation_size": 0}, "validation_size must be a whole number"),
                       ({"max_length": 0}, "max_length must be a whole number"),
                       ({"tolerances": {"min_agreement": 200}}, "percentage"),
                       ({"precision": "fp16"}, "toy exports are fp32, int8, not 'fp16'")):
        with pytest.raises(ExportError, match=match):
            ex.resolve(_request(tiny_roberta, tmp_path, **bad))


def test_resolve_asks_the_format_s_hooks(tiny_roberta, tmp_path):
    """target_device, default_tolerances and require are methods with defaults; a subclass overrides them."""
    seen: list[str] = []

    class Gpu(ToyExporter):
        def target_device(self, device: str) -> str:
            return "cuda:1"

        def default_tolerances(self, kind: str, precision: str) -> dict[str, Any]:
            return {"max_abs_logit": 0.5, "min_agreement": 90.0, "max_nonfinite": 0}

        def require(self, kind: str) -> None:
            seen.append(kind)

        def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                    quantization: str | None = None) -> str:
            seen.append(device)
            return "gpu-" + precision

    plan = Gpu().resolve(_request(tiny_roberta, tmp_path, tolerances={"min_agreement": 80}))
    assert plan.device == "cuda:1" and plan.variant == "gpu-fp32" and seen == ["cuda", "seq-cls"]
    assert plan.tolerances == {"max_abs_logit": 0.5, "min_agreement": 80.0, "max_nonfinite": 0}


def test_the_cache_key_changes_with_an_option(tiny_roberta, tmp_path, monkeypatch):
    ex = ToyExporter(calibrated_variants=("int8-static",))
    key = lambda **kw: ex.cache_key(ex.resolve(_request(tiny_roberta, tmp_path, **kw)))  # noqa: E731
    base = key()
    assert base == key() and base["variant"] == "fp32" and "calibration" not in base
    assert set(base["libraries"]) == {"torch", "transformers"}  # the default key_parts: Exporter.LIBRARIES
    assert key(precision="int8")["variant"] == "int8"
    static = key(precision="int8", quantization="static")
    assert static["calibration"]["pairs"] == 6
    other = key(precision="int8", quantization="static", calibration_pairs=PAIRS[::-1])
    assert other["calibration"]["sha256"] != static["calibration"]["sha256"]  # other calibration pairs
    real = mf.library_versions
    monkeypatch.setattr(mf, "library_versions", lambda names=mf.LIBRARIES: {**real(names), "torch": "0.0.1"})
    assert key()["libraries"]["torch"] == "0.0.1" and key() != base


def test_the_ort_exporter_s_key_parts(tiny_roberta, tmp_path):
    ort = exporter("onnx")
    keys = {p: ort.cache_key(ort.resolve(_request(tiny_roberta, tmp_path, format="onnx", precision=p)))
            for p in ("fp32", "int8")}
    assert keys["fp32"]["classifier_graph"] and "int8_rows" not in keys["fp32"]
    assert keys["int8"]["variant"] == "int8-dynamic" and keys["int8"]["int8_rows"]
    assert set(keys["fp32"]["libraries"]) == {"torch", "transformers", "onnxruntime", "onnx"}


def test_a_cached_export_is_reused_without_a_rebuild(tiny_roberta, tmp_path):
    ex = ToyExporter()
    first = ex.export(_request(tiny_roberta, tmp_path))
    assert not first.reused and ex.calls == ["write_files", "compare"]
    again = ex.export(_request(tiny_roberta, tmp_path))
    assert again.reused and again.path == first.path and ex.calls == ["write_files", "compare"]  # no rebuild
    assert again.manifest["validation"]["passed"]
    plan = ex.resolve(_request(tiny_roberta, tmp_path))
    assert ex.reuse(plan, ex.cache_key(plan)).reused  # the step alone
    assert ex.reuse(plan, {**ex.cache_key(plan), "variant": "other"}) is None  # another key: rebuilt
    forced = ex.resolve(_request(tiny_roberta, tmp_path, force=True))
    assert ex.reuse(forced, ex.cache_key(forced)) is None
    ex.export(_request(tiny_roberta, tmp_path, force=True))
    assert ex.calls.count("write_files") == 2


def test_reuse_judges_the_recorded_figures_against_today_s_tolerances(tiny_roberta, tmp_path):
    ex = ToyExporter({**GOOD, "max_abs_logit": 0.01})
    ex.export(_request(tiny_roberta, tmp_path, tolerances={"max_abs_logit": 0.1}))
    with pytest.raises(ExportValidationError, match=r"max\|Δlogit\| 0.01 > 0.001"):
        ex.export(_request(tiny_roberta, tmp_path, tolerances={"max_abs_logit": 0.001}))
    assert ex.calls == ["write_files", "compare"]  # judged from the manifest: neither rebuilt nor re-measured
    # an export built without validation is validated on reuse, and the figures recorded
    ex2 = ToyExporter()
    r = ex2.export(_request(tiny_roberta, tmp_path / "b", validate=False))
    assert r.manifest["validation"] == {"skipped": True}
    ex2.export(_request(tiny_roberta, tmp_path / "b"))
    assert ex2.calls == ["write_files", "compare"]
    assert mf.read_manifest(r.path)["validation"]["pairs_source"] == "given"


def test_a_failing_judgement_refuses_the_export(tiny_roberta, tmp_path):
    ex = ToyExporter({**GOOD, "agreement": 50.0})
    with pytest.raises(ExportValidationError, match="toy fp32 failed validation against PyTorch fp32: label "
                                                    "agreement 50.00% < 100.00%") as e:
        ex.export(_request(tiny_roberta, tmp_path))
    assert e.value.validation["passed"] is False
    target = ex.resolve(_request(tiny_roberta, tmp_path)).target
    assert not target.exists() and not [p for p in target.parent.iterdir() if target.name in p.name]  # nor staged


def test_judge_alone(tiny_roberta, tmp_path):
    ex = ToyExporter()
    plan = ex.resolve(_request(tiny_roberta, tmp_path))
    figs = dict(GOOD)
    ex.judge(plan, figs)
    assert figs["passed"] and figs["failures"] == [] and figs["tolerances"] == plan.tolerances
    with pytest.raises(ExportValidationError, match="non-finite"):
        ex.judge(plan, {**GOOD, "nonfinite": 2})


def test_measure_records_what_the_figures_were_measured_on(tiny_roberta, tmp_path):
    ex = ToyExporter()
    plan = ex.resolve(_request(tiny_roberta, tmp_path, label_map={"0": "entailment"}))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "toy.txt").write_text(plan.src)
    figs = ex.measure(plan, tmp_path / "f")
    assert (figs["pairs_source"], figs["max_length"], figs["label_map"]) == ("given", 128, {"0": "entailment"})

    class Broken(ToyExporter):
        def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
            raise RuntimeError("the runtime fell over\nsecond line")

    with pytest.raises(ExportError, match=r"^validation could not run: the runtime fell over$"):
        Broken().measure(plan, tmp_path / "f")


def test_build_and_write_manifest_alone(tiny_roberta, tmp_path):
    ex = ToyExporter()
    plan = ex.resolve(_request(tiny_roberta, tmp_path))
    said: list[str] = []
    plan.say = lambda msg, style=None: said.append(msg)
    stage = tmp_path / "stage"
    stage.mkdir()
    info = ex.build(plan, stage)
    assert info == {"exporter": "toy"} and (stage / "toy.txt").exists()
    assert said == [f"exporting {tiny_roberta} (roberta, seq-cls) → toy fp32 (fp32)"]
    key = ex.cache_key(plan)
    m = ex.write_manifest(plan, key, stage, info, {"skipped": True})
    assert json.loads((stage / "manifest.json").read_text()) == m
    assert m["key"] == key and m["exporter"] == "toy" and m["variant"] == "fp32" and m["model_max_length"] == 128
    assert set(m["files"]) == {"toy.txt"} and m["libraries"] == key["libraries"]


def test_a_subclass_that_overrides_a_step_is_called(tiny_roberta, tmp_path):
    class Stamped(ToyExporter):
        def cache_key(self, plan: ExportPlan) -> dict[str, Any]:
            self.calls.append("cache_key")
            return {**super().cache_key(plan), "stamp": 1}

        def write_manifest(self, plan: ExportPlan, key: Any, stage: Path, info: Any, figs: Any) -> dict[str, Any]:
            self.calls.append("write_manifest")
            return super().write_manifest(plan, key, stage, {**info, "stamped": True}, figs)

    ex = Stamped()
    res = ex.export(_request(tiny_roberta, tmp_path))
    assert ex.calls == ["cache_key", "write_files", "compare", "write_manifest"]
    assert res.manifest["stamped"] and res.manifest["key"]["stamp"] == 1
    assert mf.read_manifest(res.path)["stamped"]


def test_export_model_runs_the_declared_exporter_s_steps(tiny_roberta, tmp_path, monkeypatch):
    """export_model finds the format's Exporter through the registry and calls its export."""
    seen: list[ExportRequest] = []
    ort = type(exporter("onnx"))
    monkeypatch.setattr(ort, "export", lambda self, request: seen.append(request) or "done")
    assert export_model(tiny_roberta, max_batch=3, progress=False) == "done"
    assert seen[0].model == tiny_roberta and seen[0].format == "onnx" and seen[0].max_batch == 3
    with pytest.raises(UnsupportedModelError, match="unknown export task"):
        export_model(tiny_roberta, task="nope")


def test_a_target_judged_on_the_cpu_provider_says_so_when_it_fails():
    """``export --device cuda --precision int8`` on a machine without CUDA is judged on the CPU provider: a failure
    says that this is not the export's target device and how to build it without the check."""
    from types import SimpleNamespace

    from breaknli_fast.export.errors import ExportValidationError
    from breaknli_fast.export.exporter import Exporter

    plan = SimpleNamespace(model="mini-nli", format="onnx", precision="int8", device="cuda",
                           tolerances={"min_agreement": 95.0})
    figs = {"agreement": 84.4, "note": "validated on the CPU provider: --device cuda needs onnxruntime-gpu"}
    with pytest.raises(ExportValidationError) as e:
        Exporter.judge(None, plan, figs)  # the shared judging, whatever the subclass
    assert "validated on the CPU provider" in str(e.value) and "not on cuda, the export's target" in str(e.value)
    assert "--no-validate" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ExportValidationError) as e:  # judged on its own device: no such words
        Exporter.judge(None, SimpleNamespace(**{**vars(plan), "device": "cpu"}), {"agreement": 84.4})
    assert "target" not in str(e.value)
