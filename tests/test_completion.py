"""``planner evaluate`` completes what the user did not state (issue 23): unstated tuning knobs are
chosen as ``recommend`` would with everything stated pinned, and listed; ``--framework-defaults``
fills them with the framework's own defaults instead."""

import json

import pytest

from costmodel.frameworks.defaults import framework_defaults
from planner.cli import main

PROBLEM = ["--model", "llama3-70b", "--cluster", "h100-sxm", "--gpus", "64", "--global-batch", "128", "--seq", "8192"]


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_unstated_knobs_are_chosen_as_recommend_would_and_listed(capsys):
    e = run_json(capsys, "evaluate", *PROBLEM, "--tp", "8", "--pp", "2", "--mb", "1", "--json")
    assert set(e["chosen"]) == {"vp", "sp", "zero", "recompute", "bucket_mb", "chunks", "layers_per_stage"}
    c = e["config"]
    assert (c["tp"], c["pp"], c["mb"]) == (8, 2, 1)  # what was stated is kept
    r = run_json(capsys, "recommend", *PROBLEM, "--tp", "8", "--pp", "2", "--mb", "1", "--json")
    for k in ("vp", "sp", "zero", "recompute", "bucket_mb", "chunks", "dp", "cp"):
        assert c[k] == r["config"][k], k
    assert "recommend" in e["chosen_how"]


def test_text_output_names_the_choices(capsys):
    assert (
        main(
            [
                "evaluate",
                *PROBLEM,
                "--tp",
                "8",
                "--pp",
                "2",
                "--mb",
                "1",
                "--vp",
                "1",
                "--zero",
                "1",
                "--recompute",
                "none",
                "--bucket-mb",
                "160",
                "--sp",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("chosen by the planner:"))
    assert "chunks=" in line and "layers_per_stage=" in line and "mb=" not in line


def test_a_fully_stated_plan_is_evaluated_literally(capsys):
    e = run_json(
        capsys,
        "evaluate",
        *PROBLEM,
        "--tp",
        "8",
        "--pp",
        "1",
        "--mb",
        "1",
        "--vp",
        "1",
        "--zero",
        "1",
        "--recompute",
        "selective",
        "--bucket-mb",
        "40",
        "--chunks",
        "1",
        "--sp",
        "--json",
    )
    assert e["chosen"] == {} and e["config"]["bucket_mb"] == 40 and e["config"]["chunks"] == 1


def test_framework_defaults_are_megatrons_own(capsys):
    e = run_json(capsys, "evaluate", *PROBLEM, "--tp", "8", "--pp", "2", "--framework-defaults", "--json")
    c = e["config"]
    # Megatron-Core d98e8a64: no --overlap-grad-reduce (one reduction after backward), no distributed
    # optimizer, no sequence parallelism, no TP comm overlap, micro-batch 1
    assert (c["bucket_mb"], c["zero"], c["sp"], c["chunks"], c["mb"], c["vp"]) == (0, 0, False, 1, 1, 1)
    assert "framework's defaults" in e["chosen_how"]
    planned = run_json(capsys, "evaluate", *PROBLEM, "--tp", "8", "--pp", "2", "--json")
    assert planned["step_time_s"] < e["step_time_s"]  # the tuned completion is faster than the defaults


def test_framework_default_rules():
    ds = framework_defaults("deepspeed", dp=16, pp=1, global_batch=256)
    assert (ds["zero"], ds["bucket_mb"], ds["mb"]) == (0, 0, 16)  # overlap_comm only with ZeRO-3; no accumulation
    # 5e8 elements of the plan's gradient dtype (DeepSpeed's reduce_bucket_size counts communication-dtype elements)
    assert framework_defaults("deepspeed", dp=16, pp=1, global_batch=256, zero=3)["bucket_mb"] == pytest.approx(2000)
    assert framework_defaults("deepspeed", dp=16, pp=1, global_batch=256, zero=3, grad_dtype="bf16")[
        "bucket_mb"
    ] == pytest.approx(1000)
    tt = framework_defaults("fsdp2", dp=8, pp=1, global_batch=64, tp=2)
    assert (tt["zero"], tt["recompute"], tt["sp"], tt["mb"]) == (3, "op_sac", True, 8)
    assert framework_defaults("fsdp2", dp=8, pp=4, global_batch=64)["zero"] == 2  # no reshard under PP
    from costmodel.spec.errors import SpecError

    with pytest.raises(SpecError, match="framework"):
        framework_defaults("jax", dp=1, pp=1, global_batch=1)


def test_stated_errors_are_still_refused_before_any_search(capsys):
    assert main(["evaluate", *PROBLEM, "--tp", "1", "--sp"]) == 2
    assert "sp" in capsys.readouterr().err
