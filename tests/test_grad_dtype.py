"""The dtype gradients are reduced in (``ParallelConfig.grad_dtype``): memory, collectives, both engines."""

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import model_state_bytes
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.compose.stage_terms import dp_comm

MODEL = load_model("gpt-1.7b")
CLUSTER = load_cluster("a100-80g").with_gpus(64)
WL = Workload(global_batch=512, seq_len=2048)


def test_half_precision_gradients_halve_the_gradient_buffer_and_reduction():
    fp32 = ParallelConfig(tp=2, dp=32, mb=4, zero=0, bucket_bytes=0)
    half = ParallelConfig(tp=2, dp=32, mb=4, zero=0, bucket_bytes=0, grad_dtype="fp16")
    w32, g32, o32 = model_state_bytes(MODEL, fp32, 0)
    w16, g16, o16 = model_state_bytes(MODEL, half, 0)
    assert (w16, o16) == (w32, o32) and g16 == pytest.approx(g32 / 2)
    t32, t16 = dp_comm(MODEL, CLUSTER, fp32, 0)[0], dp_comm(MODEL, CLUSTER, half, 0)[0]
    assert t16 < t32 and t16 == pytest.approx(t32 / 2, rel=0.05)  # bandwidth-bound: about half
    for engine in ("analytic", "graph"):  # the reduction after backward (no buckets) is on the critical path
        a = evaluate(MODEL, CLUSTER, WL, fp32, engine=engine)
        b = evaluate(MODEL, CLUSTER, WL, half, engine=engine)
        assert b.breakdown["dp_exposed_s"] < a.breakdown["dp_exposed_s"]
        assert b.step_time_s < a.step_time_s


def test_grad_dtype_is_checked_and_kept_in_the_plan_keys():
    with pytest.raises(SpecError, match="grad_dtype"):
        ParallelConfig(grad_dtype="fp8")
    c = ParallelConfig(dp=8, grad_dtype="bf16")
    assert ParallelConfig.from_dict(c.to_dict()) == c
    assert "grad_dtype" not in ParallelConfig(dp=8).to_dict()  # the default leaves the keys as they were


# --------------------------------------------------------------------------- the search plans under it
def _problem(grad_dtype="fp32", **limits):
    from search.problem import Limits, Problem

    return Problem(
        model=MODEL,
        cluster=load_cluster("a100-80g").with_gpus(16),
        workload=Workload(global_batch=64, seq_len=2048),
        limits=Limits(**limits),
        grad_dtype=grad_dtype,
    )


def test_search_plans_every_candidate_with_the_problems_gradient_dtype():
    from search.exhaustive import solve_exhaustive
    from search.solve import solve
    from search.tables import Tables

    with pytest.raises(SpecError, match="grad_dtype='fp8'"):
        _problem("fp8")
    small = {"fixed": {"tp": 2, "mb": 1}, "bucket_mb_options": (0,)}  # the DP reduction after backward: exposed
    fp32, fp16 = solve(_problem(**small)), solve(_problem("fp16", **small))
    assert fp16.status == "OPTIMAL" and all(p.config.grad_dtype == "fp16" for p in fp16.plans)
    assert fp32.best.config.grad_dtype == "fp32"
    assert fp16.objective_s < fp32.objective_s  # half the gradient bytes to reduce
    p16 = _problem("fp16", **small)
    ex = solve_exhaustive(p16)  # every choice and split: the optimum is the same
    assert ex.complete and ex.best.objective * Tables(p16).res_s == pytest.approx(fp16.objective_s)


def test_cli_recommend_grad_dtype_emits_its_flag_or_refuses_before_searching(capsys):
    from planner import cli

    base = [
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
        "--tp",
        "2",
        "--zero",
        "1",
    ]
    assert cli.main(base + ["--grad-dtype", "bf16", "--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--grad-reduce-in-bf16" in out and "--use-distributed-optimizer" in out
    assert cli.main(base + ["--grad-dtype", "bf16", "--emit", "deepspeed"]) == 2
    err = capsys.readouterr().err
    assert "emit='deepspeed'" in err and "bf16 gradient reduction" in err and "solve:" not in err
    assert cli.main(base + ["--grad-dtype", "fp16", "--emit", "megatron"]) == 2  # a bf16 run
    assert "fp32 or bf16 for a bf16 run" in capsys.readouterr().err


def test_planner_builds_and_recommends_with_its_gradient_dtype():
    from planner import Planner

    p = Planner("gpt-1.7b", "a100-80g", gpus=16, global_batch=64, seq=2048, grad_dtype="bf16")
    assert p.config(tp=2).grad_dtype == "bf16"
    assert {c.grad_dtype for c in p.space(tp=[2], pp=[1], zero=[1])} == {"bf16"}
    assert p.recommend(constraints={"tp": 2}).best.config.grad_dtype == "bf16"
    with pytest.raises(SpecError, match="grad_dtype='int8'"):
        Planner("gpt-1.7b", "a100-80g", gpus=16, global_batch=64, seq=2048, grad_dtype="int8").evaluate(tp=2)
