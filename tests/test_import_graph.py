"""The import graph of src/toolswap has no cycles (every import counts, lazy ones too)."""

from __future__ import annotations

import ast
from pathlib import Path

import toolswap

SRC = Path(toolswap.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem]
                # `from . import core` imports the submodule, not the package.
                subs = [f"{stem}.{alias.name}" for alias in node.names]
                if all(sub in modules for sub in subs):
                    targets = subs
                else:
                    targets += [sub for sub in subs if sub in modules]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_sees_the_retention_modules() -> None:
    graph = _import_graph()
    assert "toolswap.retention.owner" in graph["toolswap.retention.journal"]
    assert "toolswap.retention.owners.sqlite" in graph["toolswap.retention.owners"]


def test_the_import_graph_sees_the_salience_modules() -> None:
    graph = _import_graph()
    assert "toolswap.salience.vocabulary" in graph["toolswap.salience.candidates"]
    assert "toolswap._threads" in graph["toolswap.salience.middle_scan"]
    assert "toolswap.salience.middle_scan" in graph["toolswap.capture"]


def test_no_toolswap_module_imports_itself_through_a_cycle() -> None:
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_reports_a_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
