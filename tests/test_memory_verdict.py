"""The memory verdict (issue 42): ``fits``, ``tight`` (over the capacity only by the assumed fragmentation
allowance) or ``does not fit`` (:mod:`costmodel.physics.memory.verdict`). A plan the user pinned that is tight is
accepted with a one-line warning; a free search never answers a tight plan.

The case: Llama 3 8B on 8 H100 (79.19 GiB), 64 x 21248 tokens, tp=2 pp=2 (16/16 layers) dp=2, one sequence per
micro-batch, no recompute, no ZeRO: 80.9 GiB with the allowance, 78.7 GiB without. Two sequences per micro-batch
need far more than 80 GiB either way.
"""

import json
import warnings

import pytest

from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import FRAGMENTATION
from costmodel.physics.memory.verdict import (
    DOES_NOT_FIT,
    FITS,
    TIGHT,
    memory_verdict,
    peak_without_allowance,
    tight_warning,
)
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import Planner, cli
from planner.api import recommend
from search.options import SolveOptions
from search.problem import Limits, Problem
from search.solve import solve

GiB = 2**30
MODEL, CLUSTER, GPUS, BATCH, SEQ = "llama3-8b", "h100-sxm", 8, 64, 21248
PINS = dict(tp=2, pp=2, cp=1, mb=1, recompute="none", zero=0, layers_per_stage=(16, 16))
ARGS = [
    "--model", MODEL, "--cluster", CLUSTER, "--gpus", str(GPUS), "--global-batch", str(BATCH), "--seq", str(SEQ),
]  # fmt: skip
PIN_ARGS = ["--tp", "2", "--pp", "2", "--cp", "1", "--recompute", "none", "--zero", "0", "--layers-per-stage", "16,16"]


def _estimate(mb: int):
    c = ParallelConfig(tp=2, pp=2, dp=2, cp=1, mb=mb, sp=True, recompute="none", zero=0, layers_per_stage=(16, 16))
    cl = load_cluster(CLUSTER).with_gpus(GPUS)
    return evaluate(load_model(MODEL), cl, Workload(global_batch=BATCH, seq_len=SEQ), c)


# --------------------------------------------------------------------------- the rule
def test_the_rule_at_its_edges():
    assert memory_verdict(80.0, 76.0, 80.0) == FITS  # at the capacity: fits
    assert memory_verdict(80.5, 80.0, 80.0) == TIGHT  # over, and exactly at it without the allowance
    assert memory_verdict(81.0, 80.01, 80.0) == DOES_NOT_FIT


def test_peak_without_allowance_takes_each_stage_its_own_allowance():
    stages = [{"total_bytes": 100.0, "activations_bytes": 80.0}, {"total_bytes": 99.0, "activations_bytes": 10.0}]
    # stage 0 drops 4.0 (5% of 80), stage 1 0.5: the second stage's 98.5 is the peak without the allowance
    assert peak_without_allowance(stages) == pytest.approx(99.0 - FRAGMENTATION * 10.0)


def test_the_warning_names_both_peaks_the_capacity_and_the_assumption():
    w = tight_warning(176.6 * GiB, 169.2 * GiB, 173.0 * GiB)
    assert "176.6 GiB" in w and "169.2 GiB without" in w and "of 173.0 GiB" in w and "assumed 5%" in w
    assert "\n" not in w


# --------------------------------------------------------------------------- evaluate
def test_estimate_of_the_case_is_tight_and_json_carries_it():
    e = _estimate(1)
    assert not e.fits and e.peak_memory_bytes > e.hbm_bytes >= e.peak_memory_without_allowance_bytes
    assert e.memory_verdict == TIGHT
    d = e.to_dict()
    assert d["memory_verdict"] == TIGHT and d["fits"] is False
    assert _estimate(2).memory_verdict == DOES_NOT_FIT


def test_planner_evaluate_accepts_a_tight_plan_with_one_warning():
    p = Planner(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=SEQ)
    with pytest.warns(UserWarning, match=r"memory tight: 80\.\d GiB .* 78\.\d GiB without, of 79\.2 GiB"):
        e = p.evaluate(tp=2, pp=2, dp=2, mb=1, sp=True, recompute="none", zero=0, layers_per_stage=(16, 16))
    assert e.memory_verdict == TIGHT


def test_evaluate_cli_says_tight_and_warns(capsys):
    code = cli.main(["evaluate", *ARGS, *PIN_ARGS, "--mb", "1", "--sp", "--bucket-mb", "25", "--chunks", "1",
                     "--vp", "1", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["memory_verdict"] == TIGHT
    assert err.count("planner: warning: memory tight:") == 1


# --------------------------------------------------------------------------- recommend
def test_pinned_recommend_accepts_a_tight_plan_with_a_warning():
    with pytest.warns(UserWarning, match="memory tight:") as caught:
        r = recommend(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=SEQ, **PINS)
    assert r.status == "OPTIMAL" and r.memory_verdict == TIGHT
    assert sum("memory tight" in str(w.message) for w in caught) == 1
    assert r.memory_warning.startswith("memory tight:") and "it may not fit" in r.memory_warning
    e = r.best.reported
    assert (e.config.tp, e.config.pp, e.config.dp, e.config.mb) == (2, 2, 2, 1)
    assert e.peak_memory_without_allowance_bytes <= e.hbm_bytes < e.peak_memory_bytes
    assert r.solve_dict()["memory_verdict"] == TIGHT


def test_pinned_recommend_over_even_without_the_allowance_is_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no tight warning either
        r = recommend(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=SEQ, **{**PINS, "mb": 2})
    assert r.status == "INFEASIBLE" and r.best is None and r.memory_verdict is None
    assert "no plan fits in memory" in r.explanation


def test_recommend_cli_tight_exits_0_with_the_verdict_and_over_exits_2(capsys):
    code = cli.main(["recommend", *ARGS, *PIN_ARGS, "--mb", "1", "--json"])
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert code == 0 and d["solve"]["memory_verdict"] == TIGHT and d["memory_verdict"] == TIGHT
    assert "planner: warning: memory tight:" in err
    code = cli.main(["recommend", *ARGS, *PIN_ARGS, "--mb", "2"])
    assert code == 2 and "no plan fits in memory" in capsys.readouterr().err


def _problem(fixed: dict, **limits) -> Problem:
    return Problem(
        model=load_model(MODEL),
        cluster=load_cluster(CLUSTER).with_gpus(GPUS),
        workload=Workload(global_batch=BATCH, seq_len=SEQ),
        limits=Limits(fixed=fixed, layers_per_stage=(16, 16), **limits),
    )


FIXED = dict(tp=2, pp=2, cp=1, mb=1, recompute="none", zero=0)


def test_a_free_search_never_answers_the_tight_plan():
    # the same space, the one tight plan, but cp bounded instead of given: the search chooses, so it must refuse
    free = _problem({k: v for k, v in FIXED.items() if k != "cp"}, maximum={"cp": 1})
    assert not free.degrees_pinned
    r = solve(free, SolveOptions(rescore=True))
    assert r.status == "INFEASIBLE" and not r.plans and not r.memory_warning
    pinned = _problem(FIXED)
    assert pinned.degrees_pinned
    assert solve(pinned, SolveOptions(rescore=True)).memory_verdict == TIGHT
    # the searches a search runs inside itself (offloads, margin) ask for plans that fit
    assert solve(pinned, SolveOptions(rescore=True, pinned_tight=False)).status == "INFEASIBLE"


def test_free_recommend_answers_fit():
    r = recommend(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=SEQ, mb=1, recompute="none", zero=0)
    assert r.status == "OPTIMAL" and r.memory_verdict == FITS and not r.memory_warning
    assert r.best.reported.peak_memory_bytes <= r.best.reported.hbm_bytes


def test_a_tight_pinned_plan_is_answered_as_pinned_before_an_optimizer_offload():
    # zero=1 under Megatron-Core could take an optimizer CPU offload that fits (fraction 0.5 on this case); the user
    # pinned a plan without one, which is over only by the allowance at 26,624 tokens: 81.4 GiB, 78.7 without
    with pytest.warns(UserWarning, match="memory tight:"):
        r = recommend(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=26624, **{**PINS, "zero": 1})
    assert r.status == "OPTIMAL" and r.memory_verdict == TIGHT
    assert r.best.reported.config.optimizer_offload_fraction == 0.0
