"""Imports point down only: costmodel <- search <- planner, and inside costmodel floor by floor (costmodel/__init__.py).

The walk reads every ``import`` and ``from ... import`` (function-level ones too) and every
``importlib.import_module("...")`` with a literal or f-string prefix, so a late or hidden import counts.
"""

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("costmodel", "search", "planner")
FORBIDDEN = {"costmodel": {"search", "planner"}, "search": {"planner"}, "planner": set()}

#: costmodel's floors: a module may import its own floor's modules and those of lower floors, never a sibling
#: on the same floor nor anything higher (the physics floors: kernels < comm | memory < mechanics < validity)
FLOORS = {
    "costmodel.spec": 0,
    "costmodel.frameworks": 1,
    "costmodel.physics.tables": 2,
    "costmodel.physics.kernels": 3,
    "costmodel.physics.comm": 4,
    "costmodel.physics.memory": 4,
    "costmodel.physics.mechanics": 5,
    "costmodel.physics.validity": 6,
    "costmodel.compose": 7,
    "costmodel.engines.analytic": 8,
    "costmodel.engines.graph": 8,
    "costmodel.training": 9,
    "costmodel.serving": 9,
    "costmodel.api": 10,
    "costmodel.trust": 11,
    "costmodel.objectives": 11,
}
MAX_LINES = 450


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Dotted names ``path`` imports (``from m import x`` gives ``m.x``; relative imports resolved)."""
    mod = module_name(path, root)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out |= {f"{base}.{a.name}" for a in node.names} | {base}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                prefix = arg.values[0].value.rstrip(".")
                if any(isinstance(v, ast.FormattedValue) and "__package__" in ast.unparse(v) for v in arg.values):
                    prefix = pkg + "." + prefix.lstrip(".")
                out.add(prefix)
    return out


def floor_of(mod: str) -> str | None:
    hits = [k for k in FLOORS if mod == k or mod.startswith(k + ".")]
    return max(hits, key=len) if hits else None


def upward_imports(root: Path = ROOT) -> list[str]:
    """``costmodel`` imports that go up a floor or across to a sibling of the same floor."""
    bad = []
    for path in sorted((root / "costmodel").rglob("*.py")):
        mod = module_name(path, root)
        here = floor_of(mod)
        if here is None:
            continue
        for target in imports_of(path, root):
            there = floor_of(target)
            if there is not None and there != here and FLOORS[there] >= FLOORS[here]:
                bad.append(f"{mod} ({here}) imports {target} ({there})")
    return bad


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Modules of the three packages and the imports between them (a name imported from a module counts
    as the module)."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    g = nx.DiGraph()
    for mod, path in files.items():
        g.add_node(mod)
        for target in imports_of(path, root):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + "."):  # a package's own __init__
                g.add_edge(mod, target)
    return g


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package):
    bad = []
    for f in (ROOT / package).rglob("*.py"):
        hits = {name.split(".")[0] for name in imports_of(f)} & FORBIDDEN[package]
        if hits:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hits)}")
    assert not bad, bad


def test_costmodel_floors_import_only_down():
    assert not upward_imports(), upward_imports()


def test_every_costmodel_module_has_a_floor():
    loose = [
        module_name(p)
        for p in (ROOT / "costmodel").rglob("*.py")
        if floor_of(module_name(p)) is None and p.parent != ROOT / "costmodel" and p.name != "__init__.py"
    ]
    assert not loose, loose
    top = sorted(p.name for p in (ROOT / "costmodel").glob("*.py"))
    assert top == ["__init__.py", "api.py"], top


def test_no_import_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert not cycles, cycles


def test_every_folder_says_what_it_owns():
    for init in (ROOT / "costmodel").rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, init


def test_no_source_file_over_limit():
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    """The checks above can fail: a copy of costmodel with one upward import and one circle is caught."""
    (tmp_path / "costmodel" / "spec").mkdir(parents=True)
    (tmp_path / "costmodel" / "compose").mkdir()
    for pkg in ("search", "planner"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "spec" / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "compose" / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "spec" / "plan.py").write_text("from costmodel.compose.step import compose\n")
    (tmp_path / "costmodel" / "compose" / "step.py").write_text(
        "import importlib\nfrom ..spec import plan\ndef compose():\n    importlib.import_module('costmodel.spec.plan')\n"
    )
    assert "costmodel.spec.plan (costmodel.spec) imports costmodel.compose.step (costmodel.compose)" in upward_imports(
        tmp_path
    )
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph(tmp_path)) if len(c) > 1]
    assert cycles == [["costmodel.compose.step", "costmodel.spec.plan"]]


def test_package_never_reads_shared():
    for package in FORBIDDEN:
        for f in (ROOT / package).rglob("*.py"):
            assert "../shared" not in f.read_text(), f
