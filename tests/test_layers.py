"""The house rules of ARCHITECTURE.md hold, read from the source (``ast``, nothing imported).

- Floors: a package imports only the packages below it: decoding (the engine) ← ingestion
  (documents and stores) ← copilot (the product) ← evals. Two entry points reach up:
  ``python -m ingestion`` runs the ``copilot`` CLI, and ``copilot eval`` mounts the evals.
- No import cycle between modules, lazy imports inside functions included.
- No module reads another module's ``_private`` name, by import or by attribute.
- No class with more than 12 public methods, no function with more than 7 parameters.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What each package may import besides itself and third-party code.
ALLOWED = {"decoding": set(), "ingestion": set(), "copilot": {"decoding", "ingestion"},
           "evals": {"decoding", "ingestion", "copilot"}}
ENTRY_POINTS = {("ingestion/__main__.py", "copilot"), ("copilot/cli/main.py", "evals")}
#: The packages the module rules (cycles, privacy, sizes) are checked on.
CHECKED = ("decoding", "ingestion", "copilot")
MAX_PUBLIC_METHODS = 12
MAX_PARAMETERS = 7


@dataclass
class Module:
    """One source module: its dotted name, path, syntax tree and what it imports."""

    name: str
    path: Path
    tree: ast.Module
    imports: set[str] = field(default_factory=set)  # modules of ours
    imported_names: list[tuple[str, str]] = field(default_factory=list)  # (module, name) of ours


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".") if module.path.name == "__init__.py" else module.name.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, modules: dict[str, Module]) -> str | None:
    """The longest dotted prefix of ``name`` that is one of our modules."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


@cache
def _modules() -> dict[str, Module]:
    modules = {}
    for package in CHECKED:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[_dotted(path)] = Module(_dotted(path), path, ast.parse(path.read_text(encoding="utf-8")))
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, node)
                targets = [(f"{source}.{a.name}", None) if f"{source}.{a.name}" in modules else (source, a.name)
                           for a in node.names]
            else:
                continue
            for target, name in targets:
                owner = _owner(target, modules)
                if owner and owner != module.name:
                    module.imports.add(owner)
                    if name:
                        module.imported_names.append((owner, name))
    return modules


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_names(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assignments, attributes set on anything."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_floors_below_it(package):
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name in _imports(path) & (set(ALLOWED) - {package}):
            if name not in ALLOWED[package] and (rel, name) not in ENTRY_POINTS:
                wrong.append(f"{rel} imports {name}")
    assert not wrong, wrong


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules():
    modules = _modules()
    # A package's __init__ that re-exports its modules is not a cycle with them.
    graph = {name: {t for t in m.imports if not name.startswith(t + ".")} for name, m in modules.items()}
    assert not _cycles(graph)


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_reads_another_modules_private_names():
    modules = _modules()
    defined = {name: _defined_names(m.tree) for name, m in modules.items()}
    ours = set().union(*defined.values())
    wrong = [f"{m.name} imports {owner}.{name}" for m in modules.values() for owner, name in m.imported_names
             if _private(name)]
    for m in modules.values():
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in defined[m.name]
                    and node.attr in ours):
                wrong.append(f"{m.path.relative_to(ROOT)}:{node.lineno} reads .{node.attr}")
    assert not wrong, wrong


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]


def test_no_class_over_12_public_methods_no_function_over_7_parameters():
    wrong = []
    for m in _modules().values():
        for node in ast.walk(m.tree):
            where = f"{m.path.relative_to(ROOT)}:{node.lineno}" if hasattr(node, "lineno") else ""
            if isinstance(node, ast.ClassDef):
                public = [n.name for n in node.body
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]
                if len(public) > MAX_PUBLIC_METHODS:
                    wrong.append(f"{where} class {node.name}: {len(public)} public methods")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_parameters(node)) > MAX_PARAMETERS:
                wrong.append(f"{where} {node.name}(): {len(_parameters(node))} parameters")
    assert not wrong, wrong
