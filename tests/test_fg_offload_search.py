"""Fine-grained activation offloading in the search: its exposed reloads are a step-level term of the tables
(``StageTable.stall_s``, the most exposed stage's, from ``fg_offload.counts_exposed_s``, the one formula ``evaluate``
charges), so the search's objective is ``evaluate``'s for an offloading plan, and the bounds stay below it."""

import math
import random
import sys
from pathlib import Path

import pytest

from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.bounds import Bounds
from search.candidates import splits
from search.cpsat import Space, build_model
from search.exhaustive import all_choices, best_splits, solve_exhaustive, split_objectives
from search.candidates import Split
from search.group_expander import Expander, _groups
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve
from search.tables import Tables

BOTH = ("expert_fc1", "moe_act")
OPTIONS = (("offload_modules", BOTH), ("recompute_modules", ("moe_act",)))


def problem(model="qwen3-30b-a3b", gpus=16, batch=32, options=OPTIONS, **limits):
    return Problem(
        model=load_model(model),
        cluster=load_cluster("h100-sxm").with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=4096),
        limits=Limits(**limits),
        options=options,
    )


def _plans(p, rng, n):
    """``n`` random (choice, split) pairs of ``p``'s space (the stage splits the search considers)."""
    choices, out = list(all_choices(p)), []
    while len(out) < n:
        c = rng.choice(choices)
        options = list(splits(p.model.layers, c.shape.pp, c.vp, max(1, p.model.dense_layers)))
        if options:
            sp = Split(*rng.choice(options))
            if c.recompute_layers is None or max(sp.first, sp.mid, sp.last) >= c.recompute_layers:
                out.append((c, sp))
    return out


@pytest.mark.parametrize(
    "model,gpus,batch",
    [("qwen3-30b-a3b", 16, 32), ("qwen3-30b-a3b", 32, 64), ("deepseek-v3", 256, 512)],
    ids=["qwen3-16", "qwen3-32", "deepseek-v3"],  # deepseek-v3: leading dense layers, an MTP layer on the last stage
)
def test_table_step_time_equals_evaluate_with_offload(model, gpus, batch):
    p = problem(model, gpus, batch)
    tables, charged = Tables(p), 0
    for c, sp in _plans(p, random.Random(7), 25):
        cfg = c.config(True, sp.layers_per_stage(c.shape.pp))
        est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")
        t = tables.stage_table(c)
        assert t.stall_s is not None and cfg.offload_modules == BOTH
        assert t.step_s(sp) == pytest.approx(est.step_time_s, rel=1e-9), (c, sp)
        stall = max(t.stall_s[k][sp.count("first" if k == "only" else k)] for k in t.kinds)
        assert stall == pytest.approx(est.breakdown["fg_offload_exposed_s"], rel=1e-12, abs=1e-15)
        charged += stall > 0
    assert charged  # the reloads are exposed on some of these plans: the term is exercised


def test_the_integer_objective_holds_the_stall():
    p = problem()
    tables = Tables(p)
    for c, _ in _plans(p, random.Random(3), 15):
        t = tables.stage_table(c)
        obj, nf, nm, nl = split_objectives(t, p.model.layers)
        for i in range(min(3, len(obj))):
            sp = Split(int(nf[i]), int(nm[i]), int(nl[i]))
            # up to 7 rounded terms (time, 3 shares, dp, optimizer, stall), each within half a tick
            assert obj[i] * tables.res_s == pytest.approx(t.step_s(sp), abs=3.5 * tables.res_s)


def test_without_the_option_the_tables_and_the_model_have_no_stall():
    p = problem(options=(("recompute_modules", ("moe_act",)),), fixed={"pp": 2, "tp": 1})
    tables = Tables(p)
    t = tables.stage_table(next(iter(all_choices(p))))
    assert t.stall_s is None and t.stall_ticks is None and "stall_ticks" not in t.max_terms()
    _, v = build_model(Space(p.model.layers, {t.choice: t}, {}))
    assert set(v.terms) == {"T", "D", "O", "S"}
    on = problem(fixed={"pp": 2, "tp": 1})
    u = Tables(on).stage_table(next(iter(all_choices(on))))
    _, v = build_model(Space(on.model.layers, {u.choice: u}, {}))
    assert set(v.terms) == {"T", "D", "O", "S", "F"}


def test_cpsat_and_exhaustive_agree_and_the_answer_is_evaluate():
    p = problem(fixed={"tp": 1, "pp": 2, "ep": 4})
    r, e, res = solve(p, SolveOptions(workers=1)), solve_exhaustive(p), Tables(p).res_s
    assert r.status == "OPTIMAL" and r.objective_s == pytest.approx(e.best.objective * res, abs=1e-9)
    est = evaluate(p.model, p.cluster, p.workload, r.best.config, engine="analytic")
    assert est.breakdown["fg_offload_exposed_s"] > 0
    assert r.objective_s == pytest.approx(est.step_time_s, abs=4 * res)
    assert r.best.agreement < 1e-5


def test_group_bounds_stay_below_the_offloading_optimum():
    """Presolve's group bounds (both levels) are at most the exact optimum of the group, stall included."""
    p = problem(fixed={"tp": 1}, mb_max=2, vp_max=2)
    tables = Tables(p)
    optima: dict = {}
    for c in all_choices(p):
        key = (c.shape, c.mb, c.vp)
        best = best_splits(tables.stage_table(c), p.model.layers, 1)
        optima[key] = min(optima.get(key, math.inf), best[0].objective if best else math.inf)
    ex, bounds, res, checked = Expander(p, tables, {}), Bounds(tables.relaxed()), tables.res_s, 0
    for q in _groups(p):
        exact = optima.get(q, math.inf)
        for lb in (ex.group_lb_s(bounds, *q, level=lv) for lv in (0, 1)):
            if lb is None:  # refused by the memory screen: nothing of the group fits
                assert exact == math.inf, q
                continue
            assert math.floor(lb / res) - 4 <= exact, (q, lb / res, exact)
            checked += 1
    assert checked


def test_row_293_search_objective_is_evaluate():
    """Published row 293 (Qwen3-235B-A22B / 256 GPUs with --offload-modules expert_fc1 moe_act), its plan pinned:
    the search's objective is the analytic evaluate of its answer, the exposed reloads and the EP overlap's
    paired share included (5.91 s against evaluate's 6.90 s when the search left the reloads out and paired the
    overlap's all-to-alls as a one-stage, one-chunk plan would)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
    from benchmarks import published
    from benchmarks.pinned_recommend import pins_of

    row = next(r for r in published.load_set("all") if r.row_id == "293")
    fixed, extra = pins_of(row)
    p = Problem(
        model=row.model,
        cluster=row.cluster,
        workload=row.workload,
        limits=Limits(fixed=fixed, **extra),
        framework=row.fixed.get("framework", "megatron"),
        grad_dtype=row.fixed.get("grad_dtype", "fp32"),
        options=row.plan_options(),
    )
    r = solve(p, SolveOptions(time_limit_s=10))
    assert r.status == "OPTIMAL"
    est = evaluate(row.model, row.cluster, row.workload, r.best.config, engine="analytic")
    assert est.breakdown["fg_offload_exposed_s"] > 0.5
    assert r.objective_s == pytest.approx(est.step_time_s, abs=4 * Tables(p).res_s)
