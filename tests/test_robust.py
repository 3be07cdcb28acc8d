"""Robust plans (recommend --robust) and the baseline comparison (recommend --baseline)."""

import json
import subprocess
import sys

import pytest

from costmodel.spec.presets import load_cluster, load_model
from costmodel.trust.scenarios import GROUPS, pessimistic, scenarios
from costmodel.spec.workload import Workload
from planner import recommend
from search.problem import Problem
from search.robust import solve_robust
from search.solve import SolveOptions, solve

A100 = load_cluster("a100-80g")


def test_pessimistic_scenarios_only_slow_things_down():
    for name, cl in scenarios(A100):
        assert cl.device.gemm_efficiency <= A100.device.gemm_efficiency
        assert cl.inter_link.efficiency <= A100.inter_link.efficiency
        assert cl.device.comm_compute_interference >= A100.device.comm_compute_interference
    c = pessimistic(A100, GROUPS["network"])
    assert c.device.gemm_efficiency == A100.device.gemm_efficiency and c.inter_link.efficiency < 0.9


@pytest.fixture(scope="module")
def problem():
    return Problem(
        model=load_model("gpt-1.7b"), cluster=A100.with_gpus(16), workload=Workload(global_batch=64, seq_len=2048)
    )


def test_robust_optimum_is_no_worse_in_the_worst_case_than_the_nominal_optimum(problem):
    nominal = solve(problem, SolveOptions(time_limit_s=30))
    r = solve_robust(problem, SolveOptions(time_limit_s=30, top_k=2))
    assert r.status == "OPTIMAL" and r.stats.cpsat_agrees
    rb = r.robust
    assert rb["worst_s"] == pytest.approx(max(rb["robust_plan"].values()))
    assert rb["worst_s"] <= max(rb["nominal_plan"].values()) * (1 + 1e-9)
    # the nominal optimum is a floor (objective_s is rounded to the microsecond)
    assert rb["robust_plan"]["nominal"] >= nominal.objective_s - 1e-6
    assert r.objective_s == pytest.approx(rb["worst_s"], rel=1e-6)


def test_api_and_cli_robust_and_baseline(problem):
    r = recommend("gpt-1.7b", "a100-80g", gpus=16, global_batch=64, seq=2048, robust=True)
    assert r.robust is not None and r.best is not None
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "recommend",
            "--model",
            "gpt-1.7b",
            "--cluster",
            "a100-80g",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--robust",
            "--json",
            "--baseline",
            "tp=2,pp=1,mb=1,zero=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert set(d["solve"]["robust"]["robust_plan"]) == {"nominal", "compute", "network", "interference", "all"}
    assert d["baseline"]["baseline"]["config"]["tp"] == 2 and "band" in d["baseline"]["message"]
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "recommend",
            "--model",
            "gpt-1.7b",
            "--cluster",
            "a100-80g",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--baseline",
            "--tensor-model-parallel-size 2 --micro-batch-size 1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert text.returncode == 0, text.stderr
    assert "baseline tp=2" in text.stdout and ("faster" in text.stdout or "keep your plan" in text.stdout)
