"""planner has one front door (issue 37): no import circle inside planner, ``planner recommend`` is
flags -> :func:`planner.api.recommend` -> a renderer, one translation of pins and bounds into
``Limits`` for the CLI, the API and the tuner, and the best plan's band attached once."""

import ast
import contextlib
import io
import json
import re
from pathlib import Path


import planner
import planner.api
import planner.limits
from planner import Planner, cli
from planner.flags import constraints_from_args

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


# --------------------------------------------------------------------------- no import circle
def planner_modules() -> dict:
    """``{module name: path}`` of every module under planner/."""
    out = {}
    for p in sorted((ROOT / "planner").rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _dynamic_targets(module: str, is_package: bool, arg, modules: dict) -> list[str]:
    """The modules an ``importlib.import_module(...)`` argument can name: a string, or an f-string whose
    ``{__package__}`` is the module's package and whose other fields match any dotted name."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if not isinstance(arg, ast.JoinedStr):
        return []
    package = module if is_package else module.rpartition(".")[0]
    pattern = ""
    for v in arg.values:
        if isinstance(v, ast.Constant):
            pattern += re.escape(v.value)
        elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id == "__package__":
            pattern += re.escape(package)
        else:
            pattern += r"[\w.]+"
    return [m for m in modules if re.fullmatch(pattern, m)]


def import_graph() -> dict:
    """``{module: set of planner modules it imports}``, imports inside functions and
    ``importlib.import_module`` names included (a package's own ``__init__`` run first is not an edge)."""
    modules = planner_modules()
    graph = {m: set() for m in modules}
    for m, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(m, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif (
                isinstance(node, ast.Call)
                and node.args
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            ):
                targets = _dynamic_targets(m, is_package, node.args[0], modules)
            for t in targets:
                while t and t not in modules:  # ``from .x import name``: the module x
                    t = t.rpartition(".")[0]
                if t and t != m and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_planner_has_no_import_circle():
    assert cycles(import_graph()) == []


def test_the_walk_sees_the_cli_load_its_commands_and_the_cuts_hold():
    graph = import_graph()
    assert {f"planner.commands.{c}" for c in cli.COMMANDS} <= graph["planner.cli"]  # through importlib
    assert not [m for m in graph if m.startswith("planner.commands") and "planner.cli" in graph[m]]
    # the sweep calls the API; the API knows no sweep (sweep() is planner.sweep.api's), nor the CLI
    assert not [t for t in graph["planner.api"] if t.startswith(("planner.sweep", "planner.cli", "planner.commands"))]
    # the sweep's runner is handed its backend from the driver's table: the two backends never import each other
    assert "planner.sweep.ray_backend" not in graph["planner.sweep.runner"]
    assert "planner.sweep.runner" not in graph["planner.sweep.ray_backend"]


def test_the_walk_catches_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# --------------------------------------------------------------------------- one front door
def run_cli(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def test_cli_recommend_goes_through_planner_api_recommend(monkeypatch):
    calls = []
    real = planner.api.recommend

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner.api, "recommend", spy)
    code, out, _ = run_cli(["recommend", *SMALL, "--tp", "8", "--pp-max", "1", "--time-limit", "20", "--json"])
    assert code == 0 and json.loads(out)["config"]["tp"] == 8
    assert len(calls) == 1
    kw = calls[0]
    # the CLI's options, explicit: the op-graph re-score and the memory margin, refusing a bad pin, the deadline
    assert kw["tp"] == 8 and kw["pp_max"] == 1 and kw["rescore"] is True and kw["refuse_pins"] is True
    assert kw["deadline"] is not None and kw["mfu_convention"] == "causal"


def test_cli_flags_and_api_keywords_make_the_same_limits():
    from costmodel.spec.units import GiB

    parser = cli.build_parser()
    args = parser.parse_args(
        ["recommend", *SMALL, "--tp", "8", "--pp-max", "4", "--mb-max", "4", "--no-zero3", "--headroom-gib", "2"]
    )
    from_flags, _ = planner.limits.limits_of(32, constraints_from_args(args))
    from_keywords, _ = planner.limits.limits_of(
        32, {"tp": 8, "pp_max": 4, "mb_max": 4, "exclude": {"zero": (3,)}, "headroom_bytes": 2 * GiB}
    )
    assert from_flags == from_keywords
    assert (from_flags.fixed, from_flags.maximum, from_flags.mb_max, from_flags.exclude) == (
        {"tp": 8},
        {"pp": 4},
        4,
        {"zero": (3,)},
    )


def test_cli_api_and_tuner_translate_by_the_one_function(monkeypatch):
    seen = []
    real = planner.limits.limits_of

    def spy(layers, constraints, base=None, **kw):
        seen.append(dict(constraints))
        return real(layers, constraints, base, **kw)

    monkeypatch.setattr(planner.limits, "limits_of", spy)
    assert run_cli(["recommend", *SMALL, "--tp", "8", "--pp", "1", "--time-limit", "20", "--json"])[0] == 0
    planner.recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, tp=8, pp=1)
    p = Planner("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096)
    p.recommend(constraints={"tp": 8, "pp": 1})
    p.space(tp=8, pp=1, zero=1, mb=1)
    assert len(seen) == 4 and all(c["tp"] == 8 and c["pp"] == 1 for c in seen)


def test_a_pin_no_plan_holds_is_refused_by_the_cli_and_explained_by_the_api():
    code, _, err = run_cli(["recommend", *SMALL, "--tp", "3"])
    r = planner.recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, tp=3)
    assert code == 2 and r.status == "INFEASIBLE" and r.explanation
    assert err.strip() == f"planner: error: {' '.join(r.explanation.split())}"


def test_the_band_is_attached_once(monkeypatch):
    """The best plan's band is computed once per recommend: attached by api.recommend, read by the renderer."""
    from costmodel.trust import attach, uncertainty

    n = [0]
    real = uncertainty.assess

    def counted(*args, **kwargs):
        n[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(uncertainty, "assess", counted)
    monkeypatch.setattr(attach, "assess", counted)
    code, out, _ = run_cli(["recommend", *SMALL, "--tp", "8", "--time-limit", "20"])
    assert code == 0 and "80% band" in out
    assert n[0] == 1
    n[0] = 0
    r = planner.recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, tp=8)
    assert n[0] == 1 and r.best.reported.step_time_band_s is not None
