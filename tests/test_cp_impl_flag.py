"""``--cp-impl {ring,torch}`` (evaluate, explain, recommend): which context-parallel exchange the plan is priced with
(ParallelConfig.cp_impl; planner.flags.cp_impl_of), stated or implied by ``--emit fsdp2``."""

import json

import pytest

from costmodel.spec.errors import SpecError
from planner.cli import build_parser, main
from planner.flags import config_from_args, cp_impl_of, plan_options
from tests.test_framework_inputs import one_line_error  # exit 2, one stderr line naming the words

PROBLEM = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--seq", "16384", "--global-batch", "64"]
CP2 = [*PROBLEM, "--cp", "2", "--tp", "1"]
FSDP2 = [*CP2, "--framework", "fsdp2"]  # PyTorch's context_parallel is torchtitan's (costmodel.frameworks.rules)


def _args(*argv):
    return build_parser().parse_args(["evaluate", *argv])


def _json(capsys, *argv):
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    return json.loads(out)


@pytest.mark.parametrize(
    "extra, impl",
    [
        ([], None),
        (["--cp-impl", "ring"], "ring"),
        (["--cp-impl", "torch", "--framework", "fsdp2"], "torch"),
        (["--emit", "fsdp2"], "torch"),  # torchtitan's CP, as before the flag
        (["--emit", "fsdp2", "--cp-impl", "torch"], "torch"),
        (["--emit", "megatron"], None),
    ],
)
def test_cp_impl_of(extra, impl):
    assert cp_impl_of(_args(*CP2, *extra)) == impl


def test_ring_with_emit_fsdp2_refused():
    with pytest.raises(
        SpecError, match=r"^cp_impl='ring': must be torch or unset with --emit fsdp2 .*context_parallel"
    ):
        cp_impl_of(_args(*CP2, "--cp-impl", "ring", "--emit", "fsdp2"))


def test_flag_reaches_config_and_plan_options():
    torch = _args(*FSDP2, "--cp-impl", "torch")
    assert config_from_args(torch, 16, 32).cp_impl == "torch"
    assert ("cp_impl", "torch") in plan_options(torch)
    ring = _args(*CP2, "--cp-impl", "ring")
    assert config_from_args(ring, 16, 32).cp_impl == "ring"
    assert "cp_impl" not in dict(plan_options(ring))  # the default: the problem is the unstated one
    # cp 1: no context parallelism to exchange; the plan stays the default (search.choice drops the option alike)
    assert config_from_args(_args(*PROBLEM, "--cp-impl", "torch", "--framework", "fsdp2"), 16, 32).cp_impl == "ring"


def test_evaluate_prices_the_torch_exchange(capsys):
    base = _json(capsys, "evaluate", *FSDP2, "--json")
    ring = _json(capsys, "evaluate", *FSDP2, "--cp-impl", "ring", "--json")
    torch = _json(capsys, "evaluate", *FSDP2, "--cp-impl", "torch", "--json")
    assert "cp_impl" not in ring["config"] and ring["step_time_s"] == base["step_time_s"]
    assert torch["config"]["cp_impl"] == "torch"
    # K/V repeated to the query heads and all-gathered, dK/dV in FP32: more bytes than the ring's GQA shards
    assert torch["step_time_s"] > ring["step_time_s"]


def test_recommend_plans_with_torch_cp(capsys):
    argv = ["recommend", *PROBLEM, "--cp", "2", "--framework", "fsdp2", "--time-limit", "10", "--json"]
    torch = _json(capsys, *argv, "--cp-impl", "torch")
    ring = _json(capsys, *argv)
    assert torch["config"]["cp"] == 2 and torch["config"]["cp_impl"] == "torch"
    assert "cp_impl" not in ring["config"]


@pytest.mark.parametrize("command", ["evaluate", "recommend"])
def test_ring_for_torchtitan_exits_2(capsys, command):
    argv = [command, *CP2, "--cp-impl", "ring", "--emit", "fsdp2"]
    one_line_error(capsys, argv, "cp_impl='ring'", "--emit fsdp2", "context_parallel")


@pytest.mark.parametrize("framework", [[], ["--framework", "megatron"], ["--emit", "megatron"]])
def test_torch_for_megatron_refused(capsys, framework):
    """Megatron-Core's CP is Transformer Engine's (cp_comm_type p2p/a2a/allgather): a torch-CP plan under it is a plan
    Megatron would run otherwise, refused before it is priced (the default framework included)."""
    argv = ["evaluate", *CP2, "--cp-impl", "torch", *framework]
    one_line_error(capsys, argv, "cp_impl='torch'", "ring under framework=megatron")


def test_the_rule_holds_every_plan_not_only_the_flag():
    from costmodel.frameworks import rules
    from costmodel.spec.plan import ParallelConfig

    with pytest.raises(SpecError, match="ring under framework=deepspeed"):
        rules.check(ParallelConfig(dp=2, cp=2, framework="deepspeed", cp_impl="torch"))
    rules.check(ParallelConfig(dp=2, cp=2, framework="fsdp2", zero=3, cp_impl="torch"))
    rules.check(ParallelConfig(dp=2, cp=1, framework="megatron", cp_impl="torch"))  # cp 1: nothing exchanged


@pytest.mark.parametrize("command", ["evaluate", "recommend"])
def test_serving_refuses_it(capsys, command):
    argv = [command, "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--mode", "infer"]
    one_line_error(capsys, [*argv, "--cp-impl", "torch"], "cp_impl='torch'", "--mode infer")


def test_torchtitan_config_states_torch(capsys, tmp_path):
    f = tmp_path / "job.toml"
    f.write_text("[parallelism]\ncontext_parallel_degree = 2\n[compile]\nenable = true\n")
    argv = ["evaluate", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--torchtitan-config", str(f)]
    assert _json(capsys, *argv, "--cp-impl", "torch", "--json")["config"]["cp_impl"] == "torch"
    one_line_error(capsys, [*argv, "--cp-impl", "ring"], "cp_impl='ring'", "'torch' as", "--cp-impl")
