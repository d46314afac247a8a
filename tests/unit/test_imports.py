"""The import graph of the project's packages: no circle, and dependencies flow one way.

The graph is read from the source with `ast` (nothing is imported). A node is a module (``testbed.runner``,
``testbed.stabilizers``: a package is its ``__init__``); an edge A -> B says that A's file imports B, counted
wherever the import statement stands: at module level, inside a function (a deferred import is still a
dependency, only a later one) and under ``if TYPE_CHECKING:``. ``from P import x`` is an edge to ``P.x`` when
that is a module of the project, else to ``P``; importing ``P.x`` is not counted as importing ``P`` (Python runs
``P/__init__.py`` first, but that is the package's choice, not the importer's). Relative imports are resolved.

The direction (DESIGN.md, "Dependencies flow one way"; the shared utilities in ``testbed.util``):

    testbed.util   <- everyone                 (imports nothing of the project outside itself)
    testbed.stabilizers <- testbed <- figures  (the stabilizer layer imports only itself and testbed.util)
    testbed.stabilizers <- theory, llm_scale   (llm_scale imports testbed only through these two)
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "theory", "figures", "llm_scale")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = _modules()


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _target(name: str) -> str | None:
    """The project module ``name`` stands for (its nearest enclosing module of the project), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path) -> dict[str, int]:
    """The project modules ``module`` imports -> the line of the first such import."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
        for name in names:
            target = _target(name) if _ours(name) else None
            if target and target != module:
                found.setdefault(target, node.lineno)
    return found


GRAPH = {m: imports(m, p) for m, p in MODULES.items()}


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One circle of ``graph`` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, {}))))
    return None


def circles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The import circles of ``graph``: its strongly connected components of two or more modules (each module of
    one reaches every other through imports), sorted."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), {}):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    found = {frozenset({m, *(n for n in reach[m] if m in reach.get(n, ()))}) for m in graph if m in reach[m]}
    return sorted(found, key=sorted)




def _show(cycle: list[str]) -> str:
    return "\n".join(f"  {a} imports {b} ({MODULES[a].relative_to(ROOT)}:{GRAPH[a][b]})"
                     for a, b in itertools.pairwise(cycle))


def _layer(module: str) -> str:
    for layer in ("testbed.util", "testbed.stabilizers"):
        if module == layer or module.startswith(layer + "."):
            return layer
    return module.split(".")[0]


# Which layers each layer may import (besides itself).
ALLOWED = {
    "testbed.util": set(),
    "testbed.stabilizers": {"testbed.util"},
    "testbed": {"testbed.util", "testbed.stabilizers"},
    "theory": {"testbed.util", "testbed.stabilizers", "testbed"},
    "llm_scale": {"testbed.util", "testbed.stabilizers"},
    "figures": {"testbed.util", "testbed.stabilizers", "testbed", "theory", "llm_scale"},
}


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    return [f"{MODULES[a].relative_to(ROOT)}:{line}: {a} ({_layer(a)}) imports {b} ({_layer(b)})"
            for a, targets in sorted(graph.items()) for b, line in sorted(targets.items())
            if _layer(b) != _layer(a) and _layer(b) not in ALLOWED[_layer(a)]]


def test_the_graph_is_read_from_every_package():
    assert all(any(m.split(".")[0] == pkg for m in MODULES) for pkg in PACKAGES)
    # an edge of each kind: module level, ``from P import module``, relative, inside a function
    assert "testbed.util.files" in GRAPH["figures.claims"]
    assert "testbed.util.seeding" in GRAPH["llm_scale.learner"] and "testbed.util" not in GRAPH["llm_scale.learner"]
    assert "llm_scale.config" in GRAPH["llm_scale.trainer"]
    assert "testbed.util.provenance" in GRAPH["llm_scale.trainer"]  # in device_name


def test_find_cycle_and_circles_on_small_graphs():
    line, ring = {"a": {"b": 1}, "b": {"c": 1}, "c": {}}, {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}
    assert find_cycle(line) is None and circles(line) == []
    assert find_cycle(ring) == ["a", "b", "c", "a"] and circles(ring) == [frozenset("abc")]
    two = {"a": {"b": 1}, "b": {"b2": 1, "c": 1}, "b2": {}, "c": {"b": 1}, "d": {"e": 1}, "e": {"d": 1, "a": 1}}
    assert find_cycle(two) == ["b", "c", "b"] and circles(two) == [frozenset("bc"), frozenset("de")]


def test_the_import_graph_has_no_circle():
    found = circles(GRAPH)
    if found:
        cycle = find_cycle({m: {n: ln for n, ln in GRAPH[m].items() if n in found[0]} for m in found[0]})
        pytest.fail(f"{len(found)} import circle(s); one of them:\n" + _show(cycle or []))


def test_llm_scale_imports_testbed_only_through_the_stabilizers_and_the_utilities():
    bad = [v for v in layer_violations(GRAPH) if v.split(": ")[1].startswith("llm_scale") and " testbed" in v]
    assert not bad, "\n".join(bad)


def test_dependencies_flow_one_way():
    bad = layer_violations(GRAPH)
    assert not bad, "\n".join(bad)


def test_a_violation_is_named():
    graph = {"llm_scale.sampler": {"testbed.seeding": 7}, "testbed.seeding": {}}
    assert layer_violations(graph) == ["llm_scale/sampler.py:7: llm_scale.sampler (llm_scale) imports testbed.seeding (testbed)"]
