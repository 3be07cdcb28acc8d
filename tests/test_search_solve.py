"""The search pipeline: proven optima, alternatives, determinism, user limits, infeasible problems."""

import pytest

from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB
from search.explain import explain_infeasible
from search.problem import Limits, Problem
from search.result import FEASIBLE, INFEASIBLE, OPTIMAL
from search.solve import SolveOptions, solve


def problem(model="llama3-8b", cluster="h100-sxm", gpus=16, batch=64, seq=4096, **limits):
    return Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=Limits(**limits),
    )


# --------------------------------------------------------------------------- the headline problem
def test_gpt3_175b_on_1024_a100_is_proven_optimal():
    r = solve(problem("gpt3-175b", "a100-80g", 1024, 1536, 2048))
    assert r.status == OPTIMAL and r.gap == 0.0 and r.bound_s == r.objective_s
    best = r.best
    assert best.estimate.fits and best.agreement <= 0.005
    assert best.config.gpus == 1024 and best.config.tp <= 8  # TP within a DGX node
    assert r.time_s < 20  # the speed target (2 s on 2 idle cores) is measured by benchmarks/search_speed.py


# --------------------------------------------------------------------------- answers
def test_top_k_plans_are_distinct_sorted_and_rescored():
    r = solve(problem(), SolveOptions(top_k=3))
    assert r.status == OPTIMAL and len(r.plans) == 3
    objectives = [p.objective_s for p in r.plans]
    assert objectives == sorted(objectives) and r.objective_s == objectives[0]
    assert len({p.choice for p in r.plans}) == 3
    for p in r.plans:
        assert p.estimate.fits and p.agreement <= 0.005
        assert p.to_dict()["objective_s"] == p.objective_s


def test_same_seed_same_plan_whatever_the_workers():
    a = solve(problem(), SolveOptions(seed=3, workers=1))
    b = solve(problem(), SolveOptions(seed=3, workers=2))
    c = solve(problem(), SolveOptions(seed=3, workers=2))
    assert a.best.config == b.best.config == c.best.config


def test_solve_dict_has_the_design_keys():
    d = solve(problem()).solve_dict()
    assert {"status", "time_s", "objective_s", "bound_s", "gap"} <= set(d)


def test_tiny_time_limit_still_returns_a_plan():
    r = solve(problem("gpt3-175b", "a100-80g", 256, 512, 2048), SolveOptions(time_limit_s=0.01))
    assert r.status in (OPTIMAL, FEASIBLE) and r.best.estimate.fits


# --------------------------------------------------------------------------- user limits
def test_fixed_values_bounds_and_exclusions_hold():
    r = solve(problem(fixed={"tp": 2}, maximum={"pp": 2}, exclude={"zero": (3,)}), SolveOptions(top_k=3))
    for p in r.plans:
        assert p.config.tp == 2 and p.config.pp <= 2 and p.config.zero != 3
    assert "tp=2 fixed by the user" in r.best.binding


def test_headroom_keeps_memory_free():
    headroom = 40 * GiB
    r = solve(problem(headroom_bytes=headroom))
    assert r.best.estimate.peak_memory_bytes <= 80 * GiB - headroom


def test_tp_stays_in_a_node_unless_allowed():
    p = problem("gpt3-175b", "a100-80g", 64, 64, 2048)
    assert solve(p).best.config.tp <= 8
    wide = solve(problem("gpt3-175b", "a100-80g", 64, 64, 2048, tp_across_nodes=True, fixed={"tp": 16}))
    assert wide.best.config.tp == 16


def test_memory_bound_plan_names_its_stage():
    r = solve(problem("gpt3-175b", "a100-80g", 64, 64, 2048, fixed={"tp": 4, "pp": 4}))
    assert any(b.startswith("memory of stage") for b in r.best.binding)


# --------------------------------------------------------------------------- infeasible problems
def test_too_few_gpus_is_explained_with_the_smallest_changes():
    r = solve(problem("gpt3-175b", "a100-80g", 2, 8, 2048))
    assert r.status == INFEASIBLE and not r.plans
    assert r.explanation.startswith("no plan fits in memory")
    assert r.changes[0].startswith("--gpus ") and any(c.startswith("HBM >=") for c in r.changes)
    gpus = int(r.changes[0].split()[1])
    assert solve(problem("gpt3-175b", "a100-80g", gpus, 8, 2048)).status == OPTIMAL  # it really is enough


def test_impossible_division_is_explained():
    why, changes = explain_infeasible(problem(gpus=16, batch=64, fixed={"dp": 3}))
    assert why.startswith("no way to divide 16 GPUs")
    r = solve(problem(gpus=16, batch=64, fixed={"dp": 3}))
    assert r.status == INFEASIBLE


def test_a_smaller_batch_can_be_the_fix():
    # 64 GPUs with tp, pp <= 2 and cp = 1 need dp >= 16, which does not divide 97 sequences
    r = solve(problem(gpus=64, batch=97, maximum={"tp": 2, "pp": 2}, fixed={"cp": 1}))
    assert r.status == INFEASIBLE and r.explanation.startswith("no way to divide 64 GPUs")
    assert "--global-batch 96" in r.changes


@pytest.mark.parametrize("field, value", [("gpus", 0)])
def test_problem_needs_gpus(field, value):
    with pytest.raises(ValueError, match="gpus"):
        Problem(
            model=load_model("llama3-8b"),
            cluster=load_cluster("h100-sxm"),
            workload=Workload(global_batch=8, seq_len=128),
        )


def test_limits_reject_unknown_variables():
    with pytest.raises(ValueError, match="fixed='warp'"):
        Limits(fixed={"warp": 2})
    with pytest.raises(ValueError, match="headroom_bytes"):
        Limits(headroom_bytes=-1)


# --------------------------------------------------------------------------- the cyclic collector
def test_search_pauses_the_cyclic_collector_and_restores_its_state():
    import gc

    from search.solve import cyclic_gc_paused

    seen = []

    @cyclic_gc_paused()
    def body(fail):
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("bad input")

    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            body(False)
            with pytest.raises(ValueError):
                body(True)  # an error inside the search restores the collector too
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    assert seen == [False] * 4
    assert solve(problem(gpus=8, batch=16)).status == OPTIMAL and gc.isenabled()
