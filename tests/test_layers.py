"""The package's layers (docs/layout.md): every import of an nmt module, at module level or
inside a function, goes to the same layer or one listed before it, and the modules' import
graph has no cycle. Read from the source, so it holds for imports no test runs."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

# Lowest first: each may import only from itself and those before it. The package's
# __init__ (version and the API's names) and __main__ (the command) stand at the top.
LAYERS = ["errors", "encoding", "yaml_file", "setting_checks", "runtime", "defaults", "config", "report", "data", "models", "inference", "training",
          "export", "comparison", "tools", "api", "demos", "serve", "cli", "__init__", "__main__"]


def _modules() -> dict[str, Path]:
    package = ROOT / "nmt"
    names = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 2 else parts)] = path
    return names


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The nmt modules ``path`` imports (``from nmt.x import y`` counts nmt.x.y when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nmt"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("nmt"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return found & modules.keys()


def _layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_every_import_goes_down_the_layers() -> None:
    graph = _graph()
    assert {_layer(m) for m in graph} <= set(LAYERS), "a sub-package missing from LAYERS and docs/layout.md"
    upward = [f"{m} -> {d}" for m, deps in graph.items() for d in deps
              if LAYERS.index(_layer(d)) > LAYERS.index(_layer(m))]
    assert not upward, upward


def test_the_import_graph_has_no_cycle() -> None:
    graph, done, path = _graph(), set(), []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError(" -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
