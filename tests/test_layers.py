"""The one-way arrows of docs/development.md, read from the source: which dome
packages each package imports, and no cycle between the units of `coordinator`
(its subpackages and top-level modules) through imports made when a module loads."""
from __future__ import annotations

import ast
from pathlib import Path

from coordinator.workgraph import _sccs
from tests.conftest import REPO_ROOT

PACKAGES = ("registry", "ledger", "coordinator", "worker_sdk")
MAY_IMPORT = {"registry": {"registry"}, "ledger": {"ledger", "registry"},
              "worker_sdk": {"worker_sdk", "registry"}, "coordinator": {"coordinator", "ledger", "registry"}}
NEVER_IN_COORDINATOR = {"torch", "klayout", "worker_sdk"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, eager_only: bool) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved); with
    `eager_only`, only those at module level (not inside a function or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    nodes: list[ast.AST] = list(tree.body) if eager_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                out |= {name} if node.module else {f"{name}.{a.name}" for a in node.names}
            else:
                out.add(str(node.module))
    return out


def _sources(package: str) -> list[Path]:
    return sorted(p for p in (REPO_ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def test_each_package_imports_only_what_its_arrow_allows() -> None:
    bad = []
    for package in PACKAGES:
        for path in _sources(package):
            for name in _imports(path, eager_only=False):
                root = name.split(".")[0]
                if root in PACKAGES and root not in MAY_IMPORT[package]:
                    bad.append(f"{_module(path)} imports {name}")
                if package == "coordinator" and root in NEVER_IN_COORDINATOR:
                    bad.append(f"{_module(path)} imports {name}")
    assert not bad, "\n".join(bad)


def _unit(module: str) -> str:
    """coordinator.integration.finish -> coordinator.integration; coordinator.grants stays."""
    parts = module.split(".")
    if len(parts) >= 2 and (REPO_ROOT / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return ".".join(parts[:2]) if len(parts) >= 2 else module


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def unit_graph(root: Path = REPO_ROOT / "coordinator") -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        src = _unit(_module(path))
        for name in _imports(path, eager_only=True):
            if name.split(".")[0] == "coordinator" and name != "coordinator":
                dst = _unit(name)
                if dst != src:
                    graph.setdefault(src, set()).add(dst)
    return graph


def test_no_cycle_between_the_units_of_coordinator() -> None:
    cycle = _cycle(unit_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# -- module cycles, through every import (in a function and under TYPE_CHECKING too) --------------

# No cycle is allowed: an entry here would name the modules of a cycle the house accepts for now.
KNOWN_CYCLES: list[set[str]] = []


def module_graph(root: Path = REPO_ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports anywhere in its source: at load time, inside
    a function or only for type checking. A name resolves to the deepest module that exists
    (`from .jobs import Job` -> the jobs module; `from . import api` -> api)."""
    paths = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for package in packages for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else str(node.module)
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = resolve(name)
                if target is not None and target != module:
                    graph.setdefault(module, set()).add(target)
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Every set of modules that import one another round a cycle: the strongly connected
    components of more than one module (the work graph's Tarjan, `coordinator.workgraph._sccs`)."""
    ids = sorted(set(graph) | {m for targets in graph.values() for m in targets})
    return [set(c) for c in _sccs(ids, {i: sorted(graph.get(i, ())) for i in ids}) if len(c) > 1]


def test_no_module_cycle_even_through_imports_inside_functions() -> None:
    cycles = [c for c in module_cycles(module_graph()) if c not in KNOWN_CYCLES]
    assert not cycles, "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def test_the_module_cycle_check_sees_imports_inside_functions(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from . import c\n    return c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    assert module_cycles(module_graph(tmp_path, ("pkg",))) == [{"pkg.a", "pkg.b", "pkg.c"}]
