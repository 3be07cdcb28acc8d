"""Issue 21: the memory mechanisms the published runs used to fit, and their planner flags.

Megatron-Core ``--recompute-modules mla_up_proj`` / ``mlp`` (memory and replay), FSDP2 under a pipeline
schedule holding BF16 weights beside the FP32 shard, ``--fp8-param-gather`` chosen by recommend for FP8
Megatron plans and charged in the parameter all-gather, and the CLI flags with their one-line errors."""

import subprocess
import sys
from dataclasses import replace

import pytest

from costmodel.compose.stage_terms import dp_comm
from costmodel.physics.kernels.recompute import mla_up_share
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.physics.memory.activations import activation_bytes_per_layer
from costmodel.physics.memory.stage_memory import stage_memory
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

DS = load_model("deepseek-v3")
W = Workload(global_batch=64, seq_len=4096)


def test_mla_up_proj_drops_the_qkv_the_core_attention_read():
    c = ParallelConfig(tp=2, sp=True, ep=8, dp=8, recompute="selective")
    m = replace(c, recompute_modules=("mla_up_proj",))
    q = DS.heads * (DS.head_dim + DS.qk_rope_head_dim)
    kv = DS.heads * (DS.head_dim + DS.qk_rope_head_dim + DS.v_head_dim)
    drop = activation_bytes_per_layer(DS, W, c, True) - activation_bytes_per_layer(DS, W, m, True)
    assert drop == pytest.approx(W.seq_len * (2 * q + 2 * kv) / 2)
    assert 0 < mla_up_share(DS) < 1


def test_mlp_recompute_checkpoints_only_dense_mlps():
    c = ParallelConfig(tp=2, sp=True, ep=8, dp=8, recompute="selective")
    m = replace(c, recompute_modules=("mlp",))
    assert activation_bytes_per_layer(DS, W, m, True) == activation_bytes_per_layer(DS, W, c, True)  # MoE: untouched
    assert activation_bytes_per_layer(DS, W, m, False) < activation_bytes_per_layer(DS, W, c, False)


def test_recompute_modules_cost_replay_time():
    model, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8)
    w = Workload(global_batch=8, seq_len=4096)
    base = ParallelConfig(tp=2, dp=4, sp=True, recompute="selective")
    t0 = evaluate(model, cl, w, base, engine="analytic")
    t1 = evaluate(model, cl, w, replace(base, recompute_modules=("core_attn", "mlp")), engine="analytic")
    assert t1.step_time_s > t0.step_time_s and t1.peak_memory_bytes < t0.peak_memory_bytes


def test_fp8_param_gather_halves_the_parameter_gather_and_drops_the_copy():
    m, cl = load_model("llama3-70b"), load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=64, seq_len=4096, dtype="fp8")
    c = ParallelConfig(tp=8, pp=2, dp=4, zero=1)
    f = replace(c, fp8_param_gather=True)
    assert dp_comm(m, cl, f, 0)[1] < dp_comm(m, cl, c, 0)[1]
    assert stage_memory(m, w, f, 0).weights_bytes < stage_memory(m, w, c, 0).weights_bytes


def _planner(*a):
    return subprocess.run([sys.executable, "-m", "planner", *a], capture_output=True, text=True, timeout=120)


BASE = [
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
    "4096",
    "--tp",
    "2",
    "--mb",
    "1",
    "--sp",
    "--zero",
    "1",
    "--bucket-mb",
    "40",
    "--chunks",
    "1",
]


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--recompute", "selective", "--recompute-modules", "bogus"], "recompute_modules"),
        (["--recompute", "none", "--recompute-modules", "mlp"], "recompute_modules"),
        (["--recompute", "selective", "--recompute-modules", "mla_up_proj"], "recompute_modules"),
        (["--recompute", "none", "--fp8-param-gather"], "fp8_param_gather"),  # a BF16 run
        (["--recompute", "none", "--zero", "0", "--optimizer-dtype", "bf16"], "optimizer_dtype"),  # not a ZeRO-1 run
        (["--recompute", "none", "--loss-impl", "xx"], "loss_impl"),
    ],
)
def test_bad_memory_flags_are_one_line_exit_2(flags, field):
    r = _planner(*BASE, *flags)
    assert r.returncode == 2 and field in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_memory_flags_emit_and_parse_back():
    from planner.megatron_args import config_fields, parse_command_line

    r = _planner(
        *BASE,
        "--dtype",
        "fp8",
        "--recompute",
        "selective",
        "--recompute-modules",
        "core_attn",
        "mlp",
        "--fp8-param-gather",
        "--emit",
        "megatron",
    )
    assert r.returncode == 0, r.stderr
    assert "--fp8-param-gather" in r.stdout and "--recompute-modules core_attn mlp" in r.stdout
    f = config_fields(parse_command_line(r.stdout.replace("\\\n", " ")))
    assert f["fp8_param_gather"] is True and f["recompute_modules"] == ("core_attn", "mlp")


def test_outputs_show_allocated_and_reserved_per_stage():
    import json

    r = _planner(*BASE, "--pp", "2", "--recompute", "none", "--json")
    assert r.returncode == 0, r.stderr
    for m in json.loads(r.stdout)["memory"]:
        assert m["allocated_bytes"] + m["reserved_bytes"] == pytest.approx(m["total_bytes"])
        assert m["reserved_bytes"] > 0
    text = _planner(*BASE, "--pp", "2", "--recompute", "none").stdout
    assert "allocated" in text and "reserved" in text
