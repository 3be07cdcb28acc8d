"""Optimizer CPU offload in the search (search.offload_choice): the tables and bounds charge costmodel.physics.mechanics.offload's
step exactly, the bounds stay below the optimum, a problem that fits is searched as before, and one that fits
only with offload is answered with it."""

import importlib.util
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.physics.mechanics import offload
from costmodel.compose.stage_terms import stage_optimizer_s
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.bounds import Bounds
from search.exhaustive import best_splits
from search.offload_choice import FRACTIONS, offered
from search.group_expander import Expander, _groups
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve
from search.tables import Tables


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TABLES_T, BOUNDS_T = _load("test_search_tables"), _load("test_presolve_bounds")
OFF = (("optimizer_offload_fraction", 0.5), ("overlap_cpu_optimizer_d2h_h2d", False))
OFF_OVL = (("optimizer_offload_fraction", 1.0), ("overlap_cpu_optimizer_d2h_h2d", True))
L70 = dict(
    model=load_model("llama3-70b"),
    cluster=load_cluster("h100-sxm").with_gpus(8),
    workload=Workload(global_batch=16, seq_len=4096),
)


def test_offload_never_lowers_the_optimizer_step():
    # the premise of search.offload_choice's argument: for the fractions it offers, on every preset with a host
    # link, the step with offload is at least the GPU Adam of the whole shard (both copy modes)
    checked = 0
    for name in ("a100-40g", "a100-80g", "h100-sxm", "h100-96g", "h200", "h800", "b200"):
        cl = load_cluster(name)
        if offload.host_link_bytes_per_s(cl) <= 0:
            continue
        for n in (1e5, 1e7, 1e9, 1e11):
            plain = offload.shard_optimizer_s(n, cl)
            for f in FRACTIONS:
                for overlap in (False, True):
                    assert offload.shard_optimizer_s(n, cl, "fp32", f, overlap) >= plain, (name, n, f, overlap)
        checked += 1
    assert checked == 7


def _offload_problem(options, case=("llama3-8b", "h100-sxm", 32, 64, 4096)):
    p = TABLES_T.problem(*case)
    return replace(p, options=options)


@pytest.mark.parametrize("options", [OFF, OFF_OVL], ids=["half", "all-overlapped"])
def test_tables_charge_evaluate_s_offloaded_optimizer(options):
    p = _offload_problem(options)
    assert p.limits.fixed["zero"] == 1  # Problem pins the distributed optimizer
    tables, bounds = Tables(p), Bounds(Tables(p))
    checked = 0
    for c, sp in TABLES_T.random_plans(p, random.Random(11), 20):
        c = replace(c, options=p.options)
        cfg = c.config(True, sp.layers_per_stage(c.shape.pp))
        assert cfg.optimizer_offload_fraction == dict(options)["optimizer_offload_fraction"]
        est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")
        t = tables.stage_table(c)
        assert t.step_s(sp) == pytest.approx(est.step_time_s, rel=1e-9), (c, sp)
        peak = max(t.mem_bytes[k][sp.count("first" if k == "only" else k)] for k in t.kinds)
        assert peak == pytest.approx(est.peak_memory_bytes, rel=1e-9)
        opt = max(stage_optimizer_s(p.model, p.cluster, cfg, i) for i in range(cfg.pp))
        assert est.breakdown["optimizer_s"] == pytest.approx(opt, rel=1e-9)
        best = best_splits(t, p.model.layers, 1)
        caps = bounds.caps(c)
        if best and caps is not None:  # the bounds charge the same step: still below the exact optimum
            for lb in (bounds.quick_lb_s(c), bounds.strong_lb_s(c, caps)):
                assert math.floor(lb / tables.res_s) - 4 <= best[0].objective, c
            checked += 1
    assert checked


def test_group_bounds_with_offload_stay_below_the_group_optima():
    checked = 0
    for seed in range(40, 47):
        base = BOUNDS_T.small_problem(seed)
        problems = offered(base)
        if not problems:
            continue
        for p in problems:
            tables = Tables(p)
            optima = BOUNDS_T._group_optima(p, tables)
            ex, bounds = Expander(p, tables, {}), Bounds(tables.relaxed())
            for q in _groups(p):
                exact = optima.get(q, math.inf)
                levels = [ex.group_lb_s(bounds, *q, level=lv) for lv in (0, 1)]
                if levels[1] is None:
                    assert exact == math.inf
                    continue
                for lb in levels:
                    assert math.floor(lb / tables.res_s) - 4 <= exact, (seed, q)
                checked += 1
    assert checked > 5


def test_a_plan_that_fits_is_searched_as_before():
    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(8),
        workload=Workload(global_batch=16, seq_len=4096),
    )
    a, b = solve(p), solve(p, SolveOptions(offload=False))
    assert a.status == b.status == "OPTIMAL" and a.stats.optimizer_offload is None
    assert a.best.config == b.best.config and a.objective_s == b.objective_s
    assert a.best.config.optimizer_offload_fraction == 0.0


def test_70b_on_8_h100_fits_only_with_offload_and_pays_its_time():
    p = Problem(**L70)
    without = solve(p, SolveOptions(offload=False))
    assert without.status == "INFEASIBLE" and not without.plans
    res = solve(p)
    assert res.status == "OPTIMAL", res.explanation
    info = res.stats.optimizer_offload
    assert info["without"] == "INFEASIBLE" and [t["fraction"] for t in info["tried"]] == list(FRACTIONS)
    cfg = res.best.config
    assert cfg.optimizer_offload_fraction == info["chosen"] > 0 and cfg.overlap_cpu_optimizer_d2h_h2d and cfg.zero == 1
    est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")
    assert est.fits and res.objective_s == pytest.approx(est.step_time_s, rel=1e-6)
    # the step includes costmodel.physics.mechanics.offload's time: the CPU Adam of the largest stage's offloaded shard
    cpu = max(
        offload.offload_times_s(cfg.optimizer_offload_fraction * _local(p, cfg, i), p.cluster)[1] for i in range(cfg.pp)
    )
    assert est.breakdown["optimizer_s"] >= cpu > 1.0
    assert not any("fixed by the user" in b and "zero" in b for b in res.best.binding)  # zero=1 is offload's


def _local(p, cfg, stage):
    from costmodel.physics.memory.stage_contents import stage_params

    d, e = stage_params(p.model, cfg, stage)
    return (d + e) / (cfg.dp * cfg.cp)


def test_a_stated_fraction_is_every_plan_s():
    p = Problem(**L70, options=(("optimizer_offload_fraction", 1.0),))
    res = solve(p, SolveOptions(offload=False))  # no re-search: the problem states it
    assert res.status == "OPTIMAL" and res.best.config.optimizer_offload_fraction == 1.0
    assert not res.best.config.overlap_cpu_optimizer_d2h_h2d and res.stats.optimizer_offload is None


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(limits=Limits(fixed={"zero": 3}), options=(("optimizer_offload_fraction", 1.0),)), "zero"),
        (
            dict(options=(("optimizer_offload_fraction", 1.0), ("optimizer_dtype", "bf16"))),
            "optimizer_offload_fraction",
        ),
        (dict(options=(("overlap_cpu_optimizer_d2h_h2d", True),)), "overlap_cpu_optimizer_d2h_h2d"),
        (dict(framework="deepspeed", options=(("optimizer_offload_fraction", 1.0),)), "optimizer_offload_fraction"),
    ],
)
def test_problem_refuses_what_megatron_refuses(kw, field):
    with pytest.raises(SpecError) as e:
        Problem(**L70, **kw)
    assert e.value.field == field


def test_not_offered_where_megatron_cannot_run_it():
    assert not offered(Problem(**L70, framework="fsdp2"))
    assert not offered(Problem(**L70, limits=Limits(exclude={"zero": (1,)})))
    assert not offered(Problem(**L70, options=(("optimizer_offload_fraction", 0.5),)))
    assert [dict(q.options)["optimizer_offload_fraction"] for q in offered(Problem(**L70))] == list(FRACTIONS)


def test_nothing_fits_even_with_offload_says_so():
    r = solve(Problem(**{**L70, "cluster": load_cluster("h100-sxm").with_gpus(1)}))
    assert r.status == "INFEASIBLE" and not r.plans
    assert [t["status"] for t in r.stats.optimizer_offload["tried"]] == ["INFEASIBLE"] * len(FRACTIONS)
    assert r.explanation.endswith("Optimizer CPU offload (fraction 0.5, 1) does not make a plan fit either.")
