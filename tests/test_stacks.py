"""The software stack is an input (issue 20): ``--stack`` names the stack, its kernels and framework
become the plan's defaults, stated flags win, and every result names the stack it assumed."""

import json

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.presets import cluster_from_dict, cluster_to_dict, load_cluster
from costmodel.frameworks.stacks import DEFAULT_STACK, STACKS, apply_stack, load_stack, stack_config
from planner.cli import main

PROBLEM = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "16", "--seq", "8192"]


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_default_stack_is_the_current_nvidia_one_and_changes_nothing():
    h = load_cluster("h100-sxm")
    assert h.stack == DEFAULT_STACK == "mcore-2025"
    assert apply_stack(DEFAULT_STACK, h) == h
    assert stack_config(DEFAULT_STACK) == {"framework": "megatron", "flash_attention": True, "fused_elementwise": True}


def test_every_stack_states_its_source_and_a_known_attention_kernel():
    for s in STACKS.values():
        assert s.source and s.title and s.attention in ("fused", "fa2", "unfused")


def test_fa2_stack_slows_hopper_attention_once():
    h = load_cluster("h100-sxm")
    t = apply_stack("torchtitan-2024", h)
    assert t.device.attention_efficiency < h.device.attention_efficiency
    assert apply_stack("torchtitan-2024", t) == t  # applying it again does not compound
    with pytest.raises(SpecError, match="stack"):
        apply_stack("deepspeed-2022", t)  # a cluster prepared for one stack is not silently re-based


def test_cluster_file_round_trips_its_stack():
    t = apply_stack("torchtitan-2024", load_cluster("h100-sxm"))
    assert cluster_from_dict(cluster_to_dict(t)).stack == "torchtitan-2024"


def test_unknown_stack_is_one_line_exit_2(capsys):
    assert main(["evaluate", *PROBLEM, "--stack", "megatron-2030"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stack" in err[0] and "mcore-2025" in err[0]
    with pytest.raises(SpecError):
        load_stack("x" * 500)


def test_evaluate_names_the_stack_and_takes_its_defaults(capsys):
    base = run_json(capsys, "evaluate", *PROBLEM, "--tp", "2", "--sp", "--json")
    tt = run_json(capsys, "evaluate", *PROBLEM, "--tp", "2", "--sp", "--stack", "torchtitan-2024", "--json")
    assert base["stack"]["name"] == "mcore-2025" and tt["stack"]["name"] == "torchtitan-2024"
    assert tt["config"]["framework"] == "fsdp2" and tt["config"]["fused_elementwise"] is False
    assert tt["step_time_s"] > base["step_time_s"]  # FA2 attention and eager element-wise kernels are slower
    # a stated flag wins over the stack's default
    old = run_json(capsys, "evaluate", *PROBLEM, "--tp", "2", "--sp", "--stack", "megatron-lm-2021", "--json")
    assert old["config"]["flash_attention"] is False
    assert main(["evaluate", *PROBLEM, "--tp", "2", "--sp", "--stack", "megatron-lm-2021"]) == 0
    assert "stack: megatron-lm-2021" in capsys.readouterr().out


def test_recommend_plans_for_the_stack(capsys):
    d = run_json(capsys, "recommend", *PROBLEM, "--stack", "torchtitan-2024", "--tp-max", "2", "--json")
    assert d["stack"]["name"] == "torchtitan-2024"
    assert d["config"]["framework"] == "fsdp2" and d["config"]["fused_elementwise"] is False
    # the search's number is the number evaluate gives for the same plan under the same stack
    c = d["config"]
    e = run_json(
        capsys,
        "evaluate",
        *PROBLEM,
        "--stack",
        "torchtitan-2024",
        "--tp",
        str(c["tp"]),
        "--pp",
        str(c["pp"]),
        "--cp",
        str(c["cp"]),
        "--mb",
        str(c["mb"]),
        "--zero",
        str(c["zero"]),
        "--recompute",
        c["recompute"],
        "--chunks",
        str(c["chunks"]),
        "--bucket-mb",
        str(c["bucket_mb"]),
        *(["--sp"] if c["sp"] else ["--no-sp"]),
        "--json",
    )
    assert e["config"]["fused_elementwise"] is False
    assert e["step_time_s"] == pytest.approx(d["step_time_s"], rel=0.02)
