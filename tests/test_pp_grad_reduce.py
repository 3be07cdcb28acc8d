"""``ParallelConfig.pp_grad_reduce`` (issue 21, the Llama 3 405B rows): FSDP without resharding after
forward under a pipeline schedule reduces gradients once per step (torch.distributed.pipelining, the
default) or in every micro-batch's backward (ZeRO-2 under PP, as Meta's FSDP ran Llama 3: arXiv
2407.21783 section 3.3.2, "Our use of FSDP for Llama 3 shards optimizer states and gradients").
Trivial -> hand-computed -> the search and the CLI -> errors."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import gathered_weight_bytes, memory_per_stage, model_state_bytes
from costmodel.physics.memory.stage_contents import stage_params
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

GiB = 2**30
M70 = load_model("llama3-70b")
STEP = ParallelConfig(tp=8, pp=2, dp=2, sp=True, zero=2, framework="fsdp2", recompute="full")
MICRO = replace(STEP, pp_grad_reduce="microbatch")
W = Workload(global_batch=16, seq_len=4096)


def test_the_default_is_unchanged_and_the_key_only_appears_when_set():
    assert ParallelConfig().pp_grad_reduce == "step" and frameworks.of(STEP) is frameworks._FSDP_NO_RESHARD_PP
    assert "pp_grad_reduce" not in STEP.to_dict() and MICRO.to_dict()["pp_grad_reduce"] == "microbatch"
    assert ParallelConfig.from_dict(MICRO.to_dict()) == MICRO


def test_microbatch_is_zero2_under_pp_as_without_a_pipeline():
    sem = frameworks.of(MICRO)
    assert sem is frameworks.of(replace(MICRO, pp=1, dp=4))  # the semantics of FSDP2 zero=2 without PP
    assert sem.reduce_per_microbatch and sem.gather_forward and sem.shard_grads and sem.step_grad is None


def test_memory_hand_computed():
    # per stage P parameters: "step" keeps the FP32 parameter (4 B, the master) and the FP32 gradient (4 B)
    # unsharded, Adam's moments (8 B) over dp; "microbatch" shards all three over dp and holds the stage's
    # gathered BF16 weights (2 B) from forward to backward
    p = sum(stage_params(M70, STEP, 0))
    assert model_state_bytes(M70, STEP, 0) == pytest.approx((4 * p, 4 * p, 8 * p / 2))
    assert gathered_weight_bytes(M70, STEP, 0) == 0
    assert model_state_bytes(M70, MICRO, 0) == pytest.approx((4 * p / 2, 4 * p / 2, 8 * p / 2))
    assert gathered_weight_bytes(M70, MICRO, 0) == pytest.approx(2 * p)
    saved = max(m.total_bytes for m in memory_per_stage(M70, W, STEP)) - max(
        m.total_bytes for m in memory_per_stage(M70, W, MICRO)
    )
    assert saved == pytest.approx(4 * p - 2 * p, rel=0.02)  # (4 + 4) - (2 + 2 + 2) B per parameter at dp = 2


def test_microbatch_pays_a_gather_and_a_reduce_scatter_per_microbatch():
    cl = load_cluster("h100-sxm").with_gpus(32)
    w = Workload(global_batch=32, seq_len=4096)  # 16 micro-batches per replica
    a = evaluate(M70, cl, w, STEP, engine="analytic")
    b = evaluate(M70, cl, w, MICRO, engine="analytic")
    assert b.peak_memory_bytes < a.peak_memory_bytes
    assert b.breakdown["zero_exposed_s"] + b.breakdown["interference_s"] > (
        a.breakdown["zero_exposed_s"] + a.breakdown["interference_s"]
    )


def test_the_fast_path_scores_both_as_evaluate_does_from_one_cache():
    from costmodel.training.fastpath import Scorer

    cl = load_cluster("h100-sxm").with_gpus(32)
    scorer = Scorer(M70, cl, W)
    for c in (STEP, MICRO):  # one scorer: a cache key without the option would hand MICRO STEP's terms
        est = evaluate(M70, cl, W, c, engine="analytic")
        score = scorer.score(c)
        assert score.step_time_s == pytest.approx(est.step_time_s, rel=1e-9)
        assert score.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-9)


def test_the_search_charges_the_option_as_evaluate_does():
    """A cap between the two peaks: recommend answers only with the option, and its plan re-scores as fitting."""
    from search.problem import Limits, Problem
    from search.solve import SolveOptions, solve

    cl = load_cluster("h100-sxm").with_gpus(32)
    fixed = {"tp": 8, "pp": 2, "vp": 1, "mb": 1, "zero": 2, "recompute": "full", "cp": 1, "ep": 1, "chunks": 1}
    step_peak = max(m.total_bytes for m in memory_per_stage(M70, W, STEP))
    micro_peak = max(m.total_bytes for m in memory_per_stage(M70, W, MICRO))
    headroom = cl.device.hbm_bytes - (step_peak + micro_peak) / 2

    def problem(options):
        return Problem(
            model=M70,
            cluster=cl,
            workload=W,
            framework="fsdp2",
            options=options,
            limits=Limits(fixed=fixed, headroom_bytes=headroom, bucket_mb_options=(40,)),
        )

    assert solve(problem(()), SolveOptions(small_space=-1)).status == "INFEASIBLE"
    r = solve(problem((("pp_grad_reduce", "microbatch"),)), SolveOptions(small_space=-1))
    assert r.status == "OPTIMAL" and r.best.config.pp_grad_reduce == "microbatch"
    assert evaluate(M70, cl, W, r.best.config, engine="analytic").peak_memory_bytes <= cl.device.hbm_bytes - headroom


@pytest.mark.parametrize(
    "kw",
    [
        dict(framework="megatron", zero=1),
        dict(framework="fsdp2", zero=3),
        dict(framework="deepspeed", zero=2),
        dict(framework="fsdp2", zero=2, value="x"),
    ],
)
def test_only_fsdp_without_resharding_has_the_choice(kw):
    value = kw.pop("value", "microbatch")
    with pytest.raises(SpecError, match="^pp_grad_reduce="):
        ParallelConfig(pp=2, dp=2, pp_grad_reduce=value, **kw)


def _planner(*a):
    return subprocess.run([sys.executable, "-m", "planner", *a], capture_output=True, text=True, timeout=120)


BASE = [
    "evaluate",
    "--model",
    "llama3-70b",
    "--cluster",
    "h100-sxm",
    "--gpus",
    "32",
    "--global-batch",
    "16",
    "--seq",
    "4096",
    "--tp",
    "8",
    "--pp",
    "2",
    "--mb",
    "1",
    "--sp",
    "--zero",
    "2",
    "--framework",
    "fsdp2",
    "--recompute",
    "full",
    "--bucket-mb",
    "40",
    "--chunks",
    "1",
]


def test_the_cli_flag_and_its_errors():
    r = _planner(*BASE, "--pp-grad-reduce", "microbatch", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"]["pp_grad_reduce"] == "microbatch"
    p = sum(stage_params(M70, STEP, 0))
    assert out["memory"][0]["grads_bytes"] == pytest.approx(4 * p / 2)  # the FP32 gradient sharded over dp = 2
    for flags, field in (
        (["--pp-grad-reduce", "bogus"], "pp_grad_reduce"),
        (["--pp-grad-reduce", "microbatch", "--emit", "fsdp2"], "pp_grad_reduce"),
    ):
        bad = _planner(*BASE, *flags)
        assert bad.returncode == 2 and field in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
