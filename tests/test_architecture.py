"""Imports point down only: costmodel <- search <- planner (DESIGN.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"costmodel": {"search", "planner"}, "search": {"planner"}, "planner": set()}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package):
    bad = []
    for f in (ROOT / package).rglob("*.py"):
        hits = imported_packages(f) & FORBIDDEN[package]
        if hits:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hits)}")
    assert not bad, bad


def test_package_never_reads_shared():
    for package in FORBIDDEN:
        for f in (ROOT / package).rglob("*.py"):
            assert "../shared" not in f.read_text(), f
