"""``optimizer_dtype='bf16'`` under Megatron-Core with ``zero=1`` (issue 21, dev row 128 Nemotron-340B): NeMo 1.x's
Apex ``distributed_fused_adam`` with ``optim.dtype: bf16`` and ``megatron_amp_O2`` stores no master copy
(``megatron_base_model.py`` ``store_params=False`` when the optimizer dtype is the model's) and only BF16
``exp_avg``/``exp_avg_sq`` shards (``distributed_fused_adam.py`` ``StateBucket``). Hand-computed -> time -> errors."""

import subprocess
import sys
from dataclasses import replace

import pytest

from costmodel.physics.kernels.compute import optimizer_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.physics.memory.stage_memory import model_state_bytes
from costmodel.physics.memory.stage_contents import stage_params
from costmodel.spec.presets import load_cluster, load_model

M = load_model("llama3-70b")
FP32 = ParallelConfig(tp=8, pp=4, dp=2, sp=True, zero=1, grad_dtype="bf16")
BF16 = replace(FP32, optimizer_dtype="bf16")


def test_state_hand_computed():
    # P parameters on the stage: BF16 weights 2 P and the BF16 gradient buffer 2 P (full, as the distributed
    # optimizer keeps it) either way; FP32 master + m + v 12 P / dp, or BF16 m + v 4 P / dp
    p = sum(stage_params(M, FP32, 1))
    assert model_state_bytes(M, FP32, 1) == pytest.approx((2 * p, 2 * p, 12 * p / 2))
    assert model_state_bytes(M, BF16, 1) == pytest.approx((2 * p, 2 * p, 4 * p / 2))


def test_the_step_moves_fewer_bytes():
    dev = load_cluster("h100-sxm").device
    assert optimizer_time_s(1e9, dev, "bf16") < optimizer_time_s(1e9, dev, "fp32")


@pytest.mark.parametrize(
    "kw", [dict(zero=0), dict(zero=3), dict(framework="deepspeed", zero=1), dict(zero=1, fp8_param_gather=True)]
)
def test_other_plans_keep_a_master_copy(kw):
    with pytest.raises(SpecError, match="^(optimizer_dtype|fp8_param_gather)="):
        ParallelConfig(tp=8, pp=4, dp=2, sp=True, optimizer_dtype="bf16", **kw)


def test_recommend_pins_zero_1_and_emit_megatron_refuses():
    from search.problem import Limits, Problem
    from costmodel.spec.workload import Workload

    cl, w = load_cluster("h100-sxm").with_gpus(16), Workload(global_batch=32, seq_len=4096)
    p = Problem(model=M, cluster=cl, workload=w, options=(("optimizer_dtype", "bf16"),))
    assert p.limits.fixed["zero"] == 1
    with pytest.raises(SpecError, match="^zero=0"):
        Problem(
            model=M, cluster=cl, workload=w, options=(("optimizer_dtype", "bf16"),), limits=Limits(fixed={"zero": 0})
        )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "evaluate",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "64",
            "--global-batch",
            "32",
            "--seq",
            "4096",
            "--tp",
            "8",
            "--pp",
            "4",
            "--mb",
            "1",
            "--sp",
            "--zero",
            "1",
            "--recompute",
            "none",
            "--bucket-mb",
            "40",
            "--chunks",
            "8",
            "--optimizer-dtype",
            "bf16",
            "--emit",
            "megatron",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "optimizer_dtype" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_search_answers_with_the_option_on_zero_1_plans():
    """The bounds probe other ZeRO stages; the option must not make them unbuildable (it did: recommend exited 2)."""
    from search.problem import Problem
    from search.solve import SolveOptions, solve
    from costmodel.spec.workload import Workload

    cl = load_cluster("h100-sxm").with_gpus(64)
    r = solve(
        Problem(
            model=M,
            cluster=cl,
            workload=Workload(global_batch=64, seq_len=4096),
            options=(("optimizer_dtype", "bf16"),),
        ),
        SolveOptions(time_limit_s=30, small_space=-1),
    )
    assert r.status == "OPTIMAL" and all(p.config.zero == 1 and p.config.optimizer_dtype == "bf16" for p in r.plans)


def test_evaluate_fills_an_unstated_zero_with_the_stage_the_option_runs_on(capsys):
    """``evaluate --optimizer-dtype bf16`` without ``--zero`` refused the plan (its literal probe took zero=0):
    the NeMo Nemotron-340B row had no answer in benchmarks/evaluate_partial.py. A stated wrong zero still exits 2."""
    from planner.cli import main

    flags = [
        "evaluate",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "8",
        "--global-batch",
        "32",
        "--seq",
        "4096",
        "--tp",
        "2",
        "--optimizer-dtype",
        "bf16",
    ]
    assert main(flags) in (0, None)
    assert "zero=1" in capsys.readouterr().out
    assert main(flags + ["--zero", "2"]) == 2 and "optimizer_dtype" in capsys.readouterr().err
