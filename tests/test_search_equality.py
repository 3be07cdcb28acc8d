"""CP-SAT's optimum equals the exhaustive optimum, exactly in ticks, on preset models and clusters
(a fast slice of ``benchmarks/search_equality.py``, whose 200 instances are in RESULTS.md).

The instances are the benchmark's own generator with smaller spaces: preset models (dense, GQA,
MoE) on a100-80g, h100-sxm and sg2262-like with 1-8 CDMA engines, where the DMA-engine
assignment is searched. Statuses must agree (both infeasible counts as equal).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from search.exhaustive import Scored

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("search_equality", ROOT / "benchmarks" / "search_equality.py")
se = importlib.util.module_from_spec(spec)
sys.modules.setdefault("search_equality", se)
spec.loader.exec_module(se)

SMALL = (30, 250)  # choices per instance: about 0.3 s each for both searches
SEEDS = list(range(500, 518))  # 18 instances, 11 of them on sg2262-like
NO_BOUNDS = {501, 505, 514}  # also solved with presolve_bounds=False (CP-SAT holds every choice that fits)
BINDS_SEED = 501  # sg2262-like with 2 CDMA engines: 4 engines make the optimum 47% faster
#: known mismatches (search/ bugs, reported and not yet fixed): none. Fixed: 504 (the strong lower
#: bound mixed a shared probe's embedding/LM-head extras with the choice's own layers when its
#: streams share one CDMA engine) and benchmark instance 148 (test below).
KNOWN: dict = {}


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN[s])) if s in KNOWN else s for s in SEEDS]
)
def test_cpsat_optimum_equals_exhaustive_optimum(seed):
    inst = se.make_instance(seed, SMALL)
    row = se.check(inst, no_bounds=seed in NO_BOUNDS, engines_probe=False)
    assert row["ok"], f"{row['why']}\n{inst.describe()}"
    if seed in NO_BOUNDS:
        assert row["nb_checked"] and row["nb_ok"]


def test_the_instances_cover_sg2262_engine_counts():
    labels = {se.make_instance(s, SMALL).cluster for s in SEEDS}
    assert {"a100-80g", "h100-sxm"} <= labels
    assert {f"sg2262-like/{n}" for n in (1, 2, 4, 8)} <= labels


def test_an_instance_where_the_engine_count_binds():
    """sg2262-like with fewer CDMA engines: the optimum changes, never for the better."""
    inst = se.make_instance(BINDS_SEED, SMALL)
    row = se.check(inst)
    assert row["ok"] and row["binds"] and row["monotone"] and row["gain_2n"] > 0


def test_a_one_tick_difference_is_a_mismatch(monkeypatch):
    """The comparison is exact: an exhaustive optimum one tick lower fails the check."""
    inst = se.make_instance(SEEDS[1], SMALL)
    real = se.solve_exhaustive

    def off_by_one(p, **kw):
        e = real(p, **kw)
        e.best = Scored(e.best.objective - 1, e.best.choice, e.best.split)
        return e

    monkeypatch.setattr(se, "solve_exhaustive", off_by_one)
    row = se.check(inst, engines_probe=False)
    assert not row["ok"] and "ticks" in row["why"]


def test_benchmark_instance_148_partial_recompute_under_zero3():
    """Instance 148 has caught two wrong OPTIMAL answers. First (mixtral-8x7b / 64 a100-80g, tp8
    zero3 recompute full k=4): the closed form charged the layers a stage does not recompute as if
    they were recomputed (fixed in 46e9a97). Since the benchmark draws (sp, chunks) as a pair
    Megatron can run, it is a different problem (tp8 zero1 k=4, buckets 25/160 MB), on which the
    refined group bound took the DP exposure at the 25 MB bucket only, whose extra latencies put
    it above the optimum at 160 MB (test below)."""
    inst = se.make_instance(148)  # the benchmark's own sizes
    row = se.check(inst, engines_probe=False)
    assert row["ok"], row["why"]


def test_the_group_bound_holds_for_every_bucket_size():
    """The refined group bound is the least DP exposure over the bucket sizes: with 25 and 160 MB
    buckets it took 25 MB's (more buckets, more collective latencies), 14.24 M ticks above the
    optimum of 12.57 M (pp1 dp8 at 160 MB), and the search answered a wrong OPTIMAL 13.20 M."""
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from search.exhaustive import solve_exhaustive
    from search.problem import Limits, Problem
    from search.solve import SolveOptions, solve
    from search.tables import Tables

    fixed = {"vp": 1, "mb": 1, "tp": 8, "recompute": "full", "recompute_layers": 4, "sp": True, "zero": 1}
    p = Problem(
        model=load_model("mixtral-8x7b"),
        cluster=load_cluster("a100-80g").with_gpus(64),
        workload=Workload(global_batch=64, seq_len=2048),
        limits=Limits(
            fixed=fixed, mb_max=1, vp_max=1, chunk_options=(1, 2), bucket_mb_options=(25, 160), partial_recompute=True
        ),
    )
    r = solve(p, SolveOptions(small_space=-1))
    ex = solve_exhaustive(p)
    assert r.status == "OPTIMAL" and ex.complete
    assert round(r.objective_s / Tables(p).res_s) == ex.best.objective
