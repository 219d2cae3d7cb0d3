"""The package's import graph: layers whose imports go one way (down), no cycles, and the runtime never imports
the mini-model training code. Every ``import`` statement counts, also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "breaknli_fast"
TRAINING = ("breaknli_fast.mini",)  # training code: only the CLI's `mini` commands may reach it
# the layers, bottom to top: a module may import its own layer and those below, never one above
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("breaknli_fast", "breaknli_fast.errors", "breaknli_fast.limits", "breaknli_fast.options",
              "breaknli_fast.console", "breaknli_fast.progress", "breaknli_fast.plotting", "breaknli_fast.prompts",
              "breaknli_fast.envinfo", "breaknli_fast.stats")),
    ("data", ("breaknli_fast.data",)),
    ("engines", ("breaknli_fast.engines",)),
    ("export", ("breaknli_fast.export",)),
    ("backends", ("breaknli_fast.backends",)),
    ("probes", ("breaknli_fast.probes",)),
    ("study", ("breaknli_fast.study",)),
    ("bench", ("breaknli_fast.bench", "breaknli_fast.mini")),
    # the benchmark suite: the measurements (each a typed, registered part of the package), result files, BENCHMARKS.md
    ("suite", ("breaknli_fast.suite",)),
    ("cli", ("breaknli_fast.cli", "breaknli_fast.cli_options", "breaknli_fast.cli_help", "breaknli_fast.cli_report",
             "breaknli_fast.bench.command", "breaknli_fast.export.command", "breaknli_fast.data.synthetic.command",
             "breaknli_fast.mini.command", "breaknli_fast.suite.command")),
)
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


def layer_of(mod: str) -> int | None:
    """The index in :data:`LAYERS` of the longest prefix that names ``mod`` (None: no layer names it)."""
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            # the root package names itself only (its __init__); every other prefix names its submodules too
            if (mod == p or (p != "breaknli_fast" and mod.startswith(p + "."))) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every edge from a module to a module of a higher layer, and every module no layer names."""
    bad = []
    for mod, deps in sorted(graph.items()):
        lm = layer_of(mod)
        if lm is None:
            bad.append(f"{mod}: in no layer")
            continue
        for d in sorted(deps):
            ld = layer_of(d)
            if ld is None or ld > lm:
                bad.append(f"{mod} ({LAYERS[lm][0]}) -> {d} ({'no layer' if ld is None else LAYERS[ld][0]})")
    return bad


def test_imports_go_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_the_layer_check_fails_on_an_upward_import():
    graph = {"breaknli_fast.engines.x": {"breaknli_fast.study.runner"}, "breaknli_fast.study.runner": set(),
             "breaknli_fast.probes.y": {"breaknli_fast.engines.x", "breaknli_fast.stats"}, "breaknli_fast.stats": set(),
             "breaknli_fast.elsewhere": set()}
    assert upward_imports(graph) == ["breaknli_fast.elsewhere: in no layer",
                                     "breaknli_fast.engines.x (engines) -> breaknli_fast.study.runner (study)"]


def test_runtime_does_not_import_training_code():
    graph = import_graph()
    bad = [f"{mod} -> {d}" for mod, deps in graph.items() for d in deps
           if d.startswith(TRAINING) and not mod.startswith(TRAINING) and mod not in MAY_IMPORT_TRAINING]
    assert bad == []


def test_the_walker_sees_function_level_imports_and_cycles():
    # the checks above can fail: a cycle through a function-level import is found
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    graph = import_graph()
    assert "breaknli_fast.envinfo" in graph["breaknli_fast.cli"]  # imported inside `env` only
