"""The package's import graph: no cycles, the runtime never imports the mini-model training code, and no
production module imports the test helpers. Every ``import`` statement counts, also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "breaknli_fast"
TRAINING = ("breaknli_fast.mini",)  # training code: only the CLI's `mini` commands may reach it
TEST_HELPERS = ("tiny_models",)
# modules that may import training code: the command line (its `mini train` / `mini check` commands)
MAY_IMPORT_TRAINING = ("breaknli_fast.cli",)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str, known: set[str]) -> str | None:
    """The package module an imported name refers to (``a.b.c`` may be module ``a.b`` with attribute ``c``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    prefix = f"{base}.{node.module}" if node.module else base
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" for a in node.names] + [prefix]
            for t in targets:
                if t.startswith("breaknli_fast"):
                    r = _resolve(t, known)
                    if r and r != mod:
                        graph[mod].add(r)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # every edge counts, a submodule's import of its own package too (``from pkg import mod`` names ``pkg``
    # first: when ``pkg/__init__`` imports the submodule back, that is a cycle)
    assert _cycles(import_graph()) == []


def test_runtime_does_not_import_training_code_or_test_helpers():
    graph = import_graph()
    bad = []
    for mod, deps in graph.items():
        for d in deps:
            if d.startswith(TEST_HELPERS) and not mod.startswith(TEST_HELPERS):
                bad.append(f"{mod} -> {d}")
            if (d.startswith(TRAINING) and not mod.startswith(TRAINING) and mod not in MAY_IMPORT_TRAINING):
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_the_walker_sees_function_level_imports_and_cycles():
    # the checks above can fail: a cycle through a function-level import is found
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    graph = import_graph()
    assert "breaknli_fast.study" in graph["breaknli_fast.cli"]  # imported inside `run`
