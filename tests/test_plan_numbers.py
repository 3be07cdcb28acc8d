"""The numbers reported for a plan, and which plans are reported.

``recommend`` and ``evaluate`` give one plan the same engine, step time, band and MFU (the analytic
optimum CP-SAT proved kept under its own name); model FLOPs count causal attention as Megatron-LM
does, the convention is stated and ``--mfu-convention full`` is the other; the band contains its own
estimate and says when it leans; the top-k plans differ in their numbers, not only in knobs that change
nothing; within the memory tie the leanest plan is the answer.
"""

import json

import pytest

from planner import cli

LLAMA = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
PROBLEM = ["--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _config_flags(c: dict) -> list[str]:
    flags = []
    for k in ("tp", "pp", "dp", "ep", "cp", "vp", "mb", "zero", "recompute", "chunks", "bucket_mb"):
        flags += [f"--{k.replace('_', '-')}", str(c[k])]
    return flags + (["--sp"] if c["sp"] else ["--no-sp"])


def _one_line_error(capsys, argv, *needles):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("planner: error: "), (code, err)
    assert len(err) < 1000 and all(n in err for n in needles), err
    return err


# --------------------------------------------------------------------------- one plan, one number
def test_recommend_and_evaluate_report_the_same_engine_and_step_time(capsys):
    code, out, _ = run(capsys, ["recommend", *LLAMA, "--json"])
    rec = json.loads(out)
    assert code == 0 and rec["engine"] == "graph"
    code, out, _ = run(capsys, ["evaluate", *LLAMA, "--json", *_config_flags(rec["config"])])
    ev = json.loads(out)
    assert code == 0 and ev["engine"] == "graph" and ev["config"] == {**rec["config"], "layers_per_stage": []}
    assert ev["step_time_s"] == pytest.approx(rec["step_time_s"], rel=1e-9)
    assert ev["step_time_band_s"] == pytest.approx(rec["step_time_band_s"], rel=1e-9)
    assert ev["mfu"] == pytest.approx(rec["mfu"], rel=1e-9)
    # the analytic number CP-SAT proved stays, under its own name
    assert abs(rec["objective_s"] / rec["analytic_step_time_s"] - 1) <= 0.005
    assert all(a["engine"] == "graph" for a in rec["alternatives"])


def test_the_b200_band_contains_its_own_estimate_and_says_why_it_leans(capsys):
    # every B200 validation row measured 6-14% slower than predicted: the band leans above the estimate
    code, out, _ = run(
        capsys,
        [
            "evaluate",
            "--model",
            "llama3-70b",
            "--cluster",
            "b200",
            "--gpus",
            "64",
            "--global-batch",
            "128",
            "--seq",
            "4096",
            "--tp",
            "4",
            "--pp",
            "2",
            "--json",
        ],
    )
    d = json.loads(out)
    lo, hi = d["step_time_band_s"]
    assert code == 0 and lo <= d["step_time_s"] <= hi
    # (the B200 rows that measured 6-14% slower are in the sealed split now, so the band no longer leans
    # on them; whichever rows it is drawn from, it contains the estimate and says so when it leans)
    lean = [n for n in d["notes"] if "band lies" in n]
    assert bool(lean) == (lo >= d["step_time_s"] * (1 - 1e-9) or hi <= d["step_time_s"] * (1 + 1e-9))


# --------------------------------------------------------------------------- the MFU convention
def test_model_flops_count_causal_attention_as_megatron_does():
    from costmodel.physics.kernels.flops import model_flops_per_step
    from costmodel.spec.presets import load_model
    from costmodel.spec.workload import Workload

    m = load_model("gpt3-175b")
    B, s, L, h, V = 8, 32768, 96, 12288, 51200
    # Megatron-LM num_floating_point_operations (megatron/training/training.py at d98e8a64), per token:
    # 3 (fwd+bwd) x 2 (FMA) x [L (4h^2 projections + 8h^2 MLP + h s / 2 x 2 causal core) + h V]
    megatron = B * s * 3 * 2 * (L * (4 * h * h + 8 * h * h + h * s) + h * V)
    assert model_flops_per_step(m, Workload(global_batch=B, seq_len=s)) == pytest.approx(megatron, rel=2e-3)
    korthikanti = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    assert model_flops_per_step(m, Workload(global_batch=B, seq_len=s), "full") == pytest.approx(korthikanti, rel=2e-3)


def test_mfu_convention_is_stated_and_the_other_is_a_flag(capsys):
    argv = [
        "evaluate",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "32768",
        "--tp",
        "8",
        "--sp",
        "--json",
    ]
    _, out, _ = run(capsys, argv)
    causal = json.loads(out)
    _, out, _ = run(capsys, argv + ["--mfu-convention", "full"])
    full = json.loads(out)
    assert "causal" in causal["flop_convention"] and "full s x s" in full["flop_convention"]
    assert causal["step_time_s"] == full["step_time_s"]
    assert causal["mfu"] < 0.8 * full["mfu"]  # at 32k tokens the attention core is a large share
    _, out, _ = run(capsys, ["recommend", *LLAMA])
    assert "MFU counts GEMM + attention FLOPs, causal attention" in out
    _one_line_error(capsys, argv + ["--mfu-convention", "half"], "mfu_convention='half'")


# --------------------------------------------------------------------------- which plans
def test_top_k_leaves_out_plans_differing_only_in_knobs_that_change_nothing(capsys):
    code, out, _ = run(capsys, ["recommend", "--model", "llama3-8b", *PROBLEM, "--top", "6", "--json"])
    d = json.loads(out)
    plans = [d] + d["alternatives"]
    numbers = [(p["step_time_s"], p["analytic_step_time_s"], p["peak_memory_bytes"]) for p in plans]
    assert code == 0 and len(set(numbers)) == len(numbers)  # at cc41895 #2 and #3 differed in bucket_mb only


def test_the_leanest_plan_within_the_memory_tie_is_the_answer():
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from search.problem import Limits, Problem
    from search.solve import MEMORY_TIE, SolveOptions, solve

    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(8),
        workload=Workload(global_batch=64, seq_len=4096),
        limits=Limits(),
    )
    r = solve(p, SolveOptions(rescore=True, top_k=4, time_limit_s=60))
    assert r.status == "OPTIMAL" and r.memory_tie == MEMORY_TIE == 0.01
    near = [pl for pl in r.plans if pl.graph_step_time_s <= r.fastest_graph_s * (1 + MEMORY_TIE)]
    assert r.best.graph_estimate.peak_memory_bytes == min(pl.graph_estimate.peak_memory_bytes for pl in near)
    # at cc41895 the answer was the fastest, at 78.8 GiB of 80; a plan 0.03% slower holds 62.5 GiB
    assert r.best.graph_estimate.peak_memory_bytes < 0.9 * max(pl.graph_estimate.peak_memory_bytes for pl in near)
    # "OPTIMAL" keeps its meaning: the analytic optimum under the stated headroom, proven
    assert r.bound_s == r.objective_s
    off = solve(p, SolveOptions(rescore=True, top_k=4, time_limit_s=60, memory_tie=0.0, memory_margin=0.0))
    assert off.graph_objective_s == off.fastest_graph_s <= r.graph_objective_s
