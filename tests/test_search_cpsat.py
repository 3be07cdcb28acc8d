"""CP-SAT search against the exhaustive baseline: equal optimal objectives on random small problems.

Each instance is a small dense or MoE model on 1-8 GPUs with a small HBM, so memory, uneven
stages, interleaving, partial recompute and ZeRO all bind somewhere. Both searches score with
the same integer tables; the CP-SAT side also goes through presolve (dominance, memory screen,
bounds), which the exhaustive baseline skips, so equal optima test those reductions too.
"""

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB
from search.candidates import Split
from search.cpsat import Space, build_model
from search.exhaustive import best_splits, solve_exhaustive
from search.problem import Limits, Problem
from search.result import FEASIBLE, INFEASIBLE, OPTIMAL
from search.solve import SolveOptions, solve
from search.tables import Tables


def small_problem(seed: int) -> Problem:
    rng = random.Random(seed)
    layers, hidden = rng.choice([2, 3, 4]), rng.choice([256, 512])
    moe = rng.random() < 0.3
    model = ModelSpec(
        name=f"tiny{seed}",
        layers=layers,
        hidden=hidden,
        heads=rng.choice([4, 8]),
        ffn_hidden=4 * hidden,
        vocab=rng.choice([1000, 4096, 32000]),
        activation=rng.choice(["gelu", "swiglu"]),
        experts=4 if moe else 0,
        topk=2 if moe else 0,
        dense_layers=rng.choice([0, 1]) if moe and layers > 2 else 0,
    )
    cluster = load_cluster(rng.choice(["a100-80g", "h100-sxm"]))
    device = replace(cluster.device, hbm_bytes=rng.choice([2.2, 2.5, 3.0, 4.0]) * GiB)
    gpus = rng.choice([1, 2, 2, 4, 4] if moe else [1, 2, 2, 4, 4, 8])  # MoE spaces grow with ep
    cluster = replace(cluster, gpus_per_node=rng.choice([2, 4, 8]), device=device).with_gpus(gpus)
    workload = Workload(global_batch=rng.choice([4, 8]), seq_len=rng.choice([512, 1024]))
    limits = Limits(mb_max=2, vp_max=2, chunk_options=(1, 2), bucket_mb_options=(0, 25), min_tokens_per_cp_rank=512)
    return Problem(model=model, cluster=cluster, workload=workload, limits=limits)


# --------------------------------------------------------------------------- trivial
def test_single_gpu_single_choice_space():
    p = small_problem(0)
    cluster = replace(p.cluster, device=replace(p.cluster.device, hbm_bytes=80 * GiB)).with_gpus(1)
    p = replace(p, cluster=cluster, limits=Limits(fixed={"mb": 1, "recompute": "none"}))
    r = solve(p, SolveOptions(workers=1))
    e = solve_exhaustive(p)
    assert e.choices_total == 1
    assert r.status == OPTIMAL and r.best.choice == e.best.choice
    assert (r.best.choice.shape.tp, r.best.choice.shape.pp, r.best.choice.shape.dp) == (1, 1, 1)


def test_model_of_one_choice_picks_its_best_split():
    p = small_problem(11)
    p = replace(p, cluster=p.cluster.with_gpus(4), limits=Limits(fixed={"tp": 1, "pp": 4, "cp": 1}))
    p = replace(
        p,
        model=replace(p.model, layers=8, experts=0, topk=0, dense_layers=0),
        cluster=replace(p.cluster, device=replace(p.cluster.device, hbm_bytes=80 * GiB)),
    )
    tables = Tables(p)
    e = solve_exhaustive(p, tables=tables)
    c = e.best.choice
    space = Space(p.model.layers, {c: tables.stage_table(c)}, {})
    model, v = build_model(space)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    choice, split, obj = v.extract(solver)
    assert choice == c and obj == best_splits(tables.stage_table(c), 8, 1)[0].objective
    assert split.first + 2 * split.mid + split.last == 8


# --------------------------------------------------------------------------- the property
# 50 problems here (issue 42 item 10: the suite's time); ``python -m benchmarks.search_equality --instances 200
# --seed 0`` checks the same property on 200 instances of its own generator (benchmarks/RESULTS.md)
@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10**6))
def test_cpsat_optimum_equals_exhaustive_optimum(seed):
    p = small_problem(seed)
    tables = Tables(p)
    r = solve(p, SolveOptions(workers=1, explain=False), tables=tables)
    e = solve_exhaustive(p, tables=tables)
    if e.best is None:
        assert r.status == INFEASIBLE and not r.plans
        return
    assert r.status == OPTIMAL
    assert round(r.objective_s / tables.res_s) == e.best.objective  # objectives, not assignments
    plan = r.best
    assert plan.estimate.fits  # feasible under evaluate
    assert plan.agreement <= 0.005


@pytest.mark.parametrize("seed", range(12))
def test_cpsat_without_bound_pruning_matches_too(seed):
    """The CP-SAT model alone (every choice that fits, no pruning by bound) finds the optimum."""
    p = small_problem(1000 + seed)
    tables = Tables(p)
    # a wide budget: without bound pruning the model is larger, and on a loaded 2-core host the default
    # 10 s can stop CP-SAT at FEASIBLE (seen at seed 8) -- the test is about the model, not its speed
    r = solve(p, SolveOptions(workers=1, presolve_bounds=False, explain=False, time_limit_s=120.0), tables=tables)
    assert r.status != FEASIBLE, "CP-SAT stopped at its time limit before proving the optimum"
    e = solve_exhaustive(p, tables=tables)
    if e.best is None:
        assert r.status == INFEASIBLE
    else:
        assert round(r.objective_s / tables.res_s) == e.best.objective
        assert r.stats.model_choices >= r.stats.probed


def test_exhaustive_reports_coverage_when_capped():
    p = small_problem(5)
    e = solve_exhaustive(p, time_limit_s=0.0)
    assert not e.complete and e.choices_done == 0 and e.choices_total > 0


def test_splits_are_layers_per_stage():
    assert Split(3, 2, 1).layers_per_stage(4) == (3, 2, 2, 1)
    assert Split(5, 0, 0).layers_per_stage(1) == (5,)
