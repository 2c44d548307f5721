"""The floors of ARCHITECTURE.md hold: a package imports only the packages below it.

decoding (the engine) ← ingestion (documents and stores) ← copilot (the product) ← evals.
Two entry points are allowed to reach up: ``python -m ingestion`` runs the ``copilot`` CLI,
and ``copilot eval`` mounts the evals' commands when that package is installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What each package may import besides itself and third-party code.
ALLOWED = {"decoding": set(), "ingestion": set(), "copilot": {"decoding", "ingestion"},
           "evals": {"decoding", "ingestion", "copilot"}}
ENTRY_POINTS = {("ingestion/__main__.py", "copilot"), ("copilot/cli.py", "evals")}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
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
