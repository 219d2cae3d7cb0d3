"""A new backend is one folder and one registry line: the TorchScript backend of tests/plugins/jit_backend.py
(declaration, loader, runtime and exporter in one module) exports on first use through ``export_model`` (cache,
manifest, validation through the engine contract, judged against the torch reference), runs in a study, and is
refused in one line where its declaration says it does not run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tiny_models as testing
from breaknli_fast.engines import registry
from breaknli_fast.export.errors import ExportValidationError

PAIRS = [(p, h) for p, h, _ in testing.pairs(24, seed=13)]


@pytest.fixture(scope="module")
def jit():
    registry.register("jit", "plugins.jit_backend")
    yield "jit"
    registry._ENGINES.pop("jit", None)


def test_the_plugin_exports_on_first_use_and_passes_validation(jit, tiny_roberta, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    opts = {"calibration_pairs": PAIRS, "validation_size": 16}
    clf = registry.load_classifier(jit, tiny_roberta, **opts)
    folder = clf.info.details["export_dir"]
    manifest = json.loads((tmp_path / "cache" / "exports" / folder.rsplit("/", 1)[-1] / "manifest.json").read_text())
    assert manifest["format"] == "torchscript" and manifest["exporter"] == "torch.jit.trace"
    v = manifest["validation"]
    assert v["passed"] and v["n"] == 16 and v["max_abs_logit"] <= 1e-4 and v["agreement"] == 100.0
    ref = registry.load_classifier("torch", tiny_roberta).classify(PAIRS)
    out = clf.classify(PAIRS)
    assert float(np.abs(ref.logits - out.logits).max()) <= 1e-4 and ref.labels == out.labels
    again = registry.load_classifier(jit, tiny_roberta, **opts)
    assert again.info.details["export_reused"] is True and clf.info.details["export_reused"] is False


def test_a_wrong_export_fails_the_contract_validation(jit, tiny_roberta, tmp_path, monkeypatch):
    """The judging is the shared one: an export whose logits are off is refused, in one line."""
    import plugins.jit_backend as plugin

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    real = plugin.JitClassifier._run
    monkeypatch.setattr(plugin.JitClassifier, "_run", lambda self, feeds: real(self, feeds)[:, ::-1].copy())
    with pytest.raises(ExportValidationError) as ei:
        registry.load_classifier(jit, tiny_roberta, calibration_pairs=PAIRS, validation_size=16)
    assert "\n" not in str(ei.value)
    assert "torchscript fp32 failed validation against PyTorch fp32" in str(ei.value)


def test_the_declaration_refuses_what_the_plugin_does_not_run(jit, tiny_t5):
    with pytest.raises(registry.EngineUnavailable, match="the jit engine has no generator role"):
        registry.load_generator(jit, tiny_t5)
    with pytest.raises(registry.PrecisionError, match="the jit engine's classifier runs fp32 on cpu, not 'int8'"):
        registry.load_classifier(jit, "mini-nli", precision="int8")
    assert registry.resolve_engine("auto") != jit  # auto never picks a backend that does not ask for it


def test_the_plugin_runs_a_study(jit, tiny_roberta, tmp_path, monkeypatch):
    from breaknli_fast.study.loading import EngineConfig
    from breaknli_fast.study.runner import run_study

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    res = run_study("accuracy", None, dataset="sample", limit=12, classifier=tiny_roberta,
                    engine=EngineConfig(engine=jit), out=tmp_path / "run", html=False)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["engine"]["name"] == "jit" and cfg["engine"]["classifier_details"]["engine"] == "jit"
    assert len(res.records) == 12


def test_a_backend_and_a_probe_installed_as_packages_join_by_entry_point(tiny_roberta, tiny_tsv, tmp_path,
                                                                        monkeypatch):
    """A package of its own declares ``[breaknli_fast.backends]`` / ``[breaknli_fast.probes]`` entry points in its
    metadata: the registry finds them without a line of this package's code, and the CLI runs them."""
    from typer.testing import CliRunner

    from breaknli_fast import probes
    from breaknli_fast.cli import app

    dist = tmp_path / "site" / "breaknli_fast_jitplugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: breaknli-fast-jitplugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[breaknli_fast.backends]\njitpkg = plugins.jit_backend\n\n"
                                           "[breaknli_fast.probes]\ntoy-accuracy = tests.test_study:AccuracyProbe\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    try:
        registry.rescan()
        probes.rescan()
        assert "jitpkg" in registry.names() and "toy-accuracy" in probes.probe_names()
        assert registry.backend("jitpkg") is not None and "ort" in registry.names()  # the built-in ones stay
        r = CliRunner().invoke(app, ["run", "--probe", "toy-accuracy", "--engine", "jitpkg", "-c", tiny_roberta, "-d",
                                     str(tiny_tsv), "--limit", "6", "--out", str(tmp_path / "run")])
        assert r.exit_code == 0, r.output
        cfg = json.loads((tmp_path / "run" / "config.json").read_text())
        assert cfg["probe"] == "toy-accuracy" and cfg["roles"]["classifier"]["engine"] == "jitpkg"
    finally:
        registry._ENGINES.pop("jitpkg", None)
        probes._PROBES.pop("toy-accuracy", None)
