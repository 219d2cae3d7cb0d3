"""README.md's "Python API" section is true: its code blocks run, in order, in one namespace (the shipped mini
models, the sizes the README gives, a run directory under a temporary folder)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_api_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^## Python API\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no '## Python API' section"
    return re.findall(r"^```python\n(.*?)^```", m.group(1), re.S | re.M)


def test_the_readme_python_api_examples_run(tmp_path, monkeypatch, capsys):
    blocks = python_api_blocks()
    assert len(blocks) >= 3
    code = "\n".join(blocks)
    for needed in ("run_study(", "registry.load_classifier(", "registry.load_generator(", "Decoding(", "seeds=",
                   "report.json"):
        assert needed in code, needed
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md Python API block {i + 1}", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    # what the blocks printed is what they say
    assert (tmp_path / "runs" / "api-demo" / "report.json").exists()
    assert re.search(r"^\d+ records in runs/api-demo$", out, re.M), out
    labels = namespace["pred"].labels
    assert len(labels) == 2 and set(labels) <= {"entailment", "neutral", "contradiction"}
    texts = namespace["texts"]
    assert len(texts) == 2 and all(len(t) == 3 and all(isinstance(x, str) and x for x in t) for t in texts)


def test_make_test_installs_the_merge_extra_so_the_real_tagger_is_tested():
    """`make test` (what CI runs) installs the extras of the .venv it tests in, the merge extra (spaCy and its
    pipeline) among them, and a change of the Makefile installs them again into an existing .venv."""
    makefile = (README.parent / "Makefile").read_text()
    rule = re.search(r"^\$\(STAMP\):(.*?)\n((?:\t.*\n)+)", makefile, re.M)
    assert rule and "Makefile" in rule.group(1).split()
    extras = re.search(r'-e "\.\[([^\]]*)\]"', rule.group(2)).group(1).split(",")
    assert "merge" in extras and "test" in extras
    assert re.search(r"^test: setup$", makefile, re.M) and re.search(r"^setup: \$\(STAMP\)$", makefile, re.M)
    pyproject = (README.parent / "pyproject.toml").read_text()
    assert re.search(r'^merge = \[.*"spacy', pyproject, re.M)


def test_the_readme_install_names_every_extra():
    """Each extra of pyproject.toml is named in the README's Install section (``openvino`` was missing)."""
    import tomllib

    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = README.read_text(encoding="utf-8")
    install = re.search(r"^## Install\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    assert not [x for x in extras if f"`{x}`" not in install], [x for x in extras if f"`{x}`" not in install]
