"""MoE per-layer costs: router top-k/aux loss, permute/unpermute, the tokens_per_expert host sync,
routing imbalance across EP ranks and ragged grouped GEMMs (costmodel.physics.kernels.compute)."""

import math
from dataclasses import replace

import pytest

from costmodel.physics.kernels.gemm import ACT_BYTES, elementwise_time_s, gemm_utilization, k_overhead
from costmodel.physics.kernels.compute import HOST_COPY_S, SYNC_EXPOSED_LAUNCHES, layer_ops
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

QWEN = load_model("qwen3-30b-a3b")  # hidden 2048, 128 experts, top-8, moe_ffn_hidden 768
H200 = load_cluster("h200").device


def _ops(c, w=None, model=QWEN):
    w = w or Workload(global_batch=8, seq_len=4096)
    return {o.name: o for o in layer_ops(model, H200, w, c, True)}


def test_moe_layer_has_the_new_ops_in_order():
    names = [o.name for o in layer_ops(QWEN, H200, Workload(global_batch=8, seq_len=4096), ParallelConfig(), True)]
    i = names.index
    assert i("router") < i("router_topk") < i("tokens_per_expert_sync") < i("permute") < i("experts") < i("unpermute")


def test_permute_is_topk_copies_read_and_written():
    # 4096 tokens, top-8, hidden 2048, BF16: read + write 8 * 4096 * 2048 * 2 B
    ops = _ops(ParallelConfig())
    expected = elementwise_time_s(2 * ACT_BYTES * 8 * 4096 * 2048, H200)
    assert ops["permute"].fwd_s == pytest.approx(expected)
    assert ops["permute"].bwd_s == pytest.approx(expected)  # the backward scatter moves the same bytes


def test_host_sync_once_per_forward_not_in_backward_nor_serving():
    ops = _ops(ParallelConfig())
    assert ops["tokens_per_expert_sync"].fwd_s == pytest.approx(HOST_COPY_S + SYNC_EXPOSED_LAUNCHES * 4e-6)
    assert ops["tokens_per_expert_sync"].bwd_s == 0.0
    serving = _ops(ParallelConfig(), Workload(mode="infer", global_batch=8, input_len=4000, output_len=96))
    assert "tokens_per_expert_sync" not in serving


def test_imbalance_hand_computed():
    # EP 8, 16 experts per rank, many tokens: 1 + z * cv / sqrt(16), z = Phi^-1(7.625 / 8.25) = 1.434
    z = 1.4338
    assert moe_imbalance(QWEN, 8, 1e12) == pytest.approx(1 + z * 0.3 / 4, rel=1e-3)
    # few tokens per expert add multinomial noise: cv = sqrt(0.09 + 1/16)
    assert moe_imbalance(QWEN, 8, 16) == pytest.approx(1 + z * math.sqrt(0.09 + 1 / 16) / 4, rel=1e-3)
    assert moe_imbalance(QWEN, 1, 100) == 1.0
    assert moe_imbalance(replace(QWEN, moe_load_cv=0.0), 8, 1e12) == pytest.approx(1.0, abs=1e-5)


def test_imbalance_never_speeds_up():
    base = _ops(ParallelConfig(ep=8))["experts"]
    balanced = _ops(ParallelConfig(ep=8), model=replace(QWEN, moe_load_cv=0.0))["experts"]
    skewed = _ops(ParallelConfig(ep=8), model=replace(QWEN, moe_load_cv=0.6))["experts"]
    assert balanced.fwd_s <= base.fwd_s <= skewed.fwd_s
    assert balanced.bwd_s <= base.bwd_s <= skewed.bwd_s
    # more EP ranks wait for a busier slowest rank
    vals = [moe_imbalance(QWEN, ep, 256) for ep in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert all(b >= a for a, b in zip(vals, vals[1:]))


def test_small_grouped_gemms_less_efficient_than_large():
    # per-expert GEMMs of 256 rows (ragged) vs one large GEMM of the same total size
    k0 = k_overhead(H200, "bf16")
    small = gemm_utilization(256, 1536 * 128, 2048, 132, k0, ragged_groups=128)
    large = gemm_utilization(256 * 128, 1536, 2048, 132, k0)
    assert small < large
    # fewer rows per expert -> more of each expert's last tile is padding
    utils = [gemm_utilization(m, 1536 * 16, 768, 132, k0, ragged_groups=16) for m in (64, 128, 256, 1024, 8192)]
    assert all(b > a for a, b in zip(utils, utils[1:]))


def test_fp8_gains_little_on_short_k():
    # the per-tile prologue is fixed time: twice as many FP8 K elements (DeepGEMM README table)
    assert k_overhead(H200, "fp8") == pytest.approx(2 * k_overhead(H200, "bf16"), rel=1e-3)  # 1979 / 989
    short = gemm_utilization(4096, 4096, 768, 132, k_overhead(H200, "fp8")) / gemm_utilization(
        4096, 4096, 768, 132, k_overhead(H200, "bf16")
    )
    long = gemm_utilization(4096, 4096, 8192, 132, k_overhead(H200, "fp8")) / gemm_utilization(
        4096, 4096, 8192, 132, k_overhead(H200, "bf16")
    )
    assert short < long < 1


def test_moe_block_slower_than_before_in_the_measured_direction():
    # Qwen3-30B-A3B-like shapes on one H200, 2 x 4096 tokens, BF16: the issue measured 8.5 ms for the
    # MoE block where the model charged 3.3 ms (before router/permute/sync/ragged tiles). Direction only.
    c = ParallelConfig(mb=2)
    moe = [
        o
        for o in layer_ops(QWEN, H200, Workload(global_batch=8, seq_len=4096), c, True)
        if o.block == "mlp" and o.name not in ("ln2", "bda2")
    ]
    t = sum(o.fwd_s + o.bwd_s for o in moe)
    assert 3.5e-3 < t < 8.5e-3


def test_router_runs_on_the_sequence_parallel_shard():
    # Megatron-Core MoELayer.route applies the router to the [s/tp, b, h] shard under sequence parallelism
    # (moe_layer.py @d98e8a6): with tp 4 and SP the router GEMM and top-k see 4096 / 4 = 1024 tokens.
    # router GEMM flops: 2 * 1024 * 128 experts * 2048 hidden; top-k bytes: 22 B per score + 12 B per slot.
    w = Workload(global_batch=8, seq_len=4096)
    sharded = _ops(ParallelConfig(tp=4, ep=2, sp=True), w)
    assert sharded["router"].fwd_flops == pytest.approx(2 * 1024 * 128 * 2048)
    expected = elementwise_time_s(22 * 1024 * 128 + 12 * 1024 * 8, H200, kernels=6)
    assert sharded["router_topk"].fwd_s == pytest.approx(expected)
    # without sequence parallelism (serving: every TP rank holds all tokens) the router sees all 4096
    full = _ops(ParallelConfig(tp=4, ep=2, sp=False), w)
    assert full["router"].fwd_flops == pytest.approx(4 * sharded["router"].fwd_flops)
