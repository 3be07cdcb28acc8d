"""gpt-oss's architecture as the frameworks run it (issues 38/39): the sliding window on half the layers, head
dimension 64 on Blackwell, attention sinks, linear biases on the experts, the clamped activation and YaRN RoPE
(:mod:`costmodel.physics.kernels.arch_passes`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from costmodel.physics.kernels import compute
from costmodel.physics.kernels.arch_passes import (
    CLAMP_BYTES,
    EXPERT_BIAS_BYTES,
    YARN_ROPE_UNFUSED,
    head_dim_time_ratio,
    window_time_ratio,
)
from costmodel.physics.kernels.compute import layer_ops
from costmodel.physics.kernels.gemm import elementwise_time_s
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

OSS = load_model("gpt-oss-120b")
#: gpt-oss with none of the mechanisms: its shape only
PLAIN = replace(
    OSS,
    sliding_window=0,
    sliding_window_layers=0,
    attention_sinks=False,
    linear_bias=False,
    activation_clamp=None,
    rope_scaling=None,
)
GB200 = load_cluster("gb200-nvl72").device
H100 = load_cluster("h100-sxm").device
W8K = Workload(global_batch=64, seq_len=8192)


def _ops(model, dev, w, **kw):
    return {o.name: o for o in layer_ops(model, dev, w, ParallelConfig(**kw), moe=True)}


def test_presets_state_the_architecture():
    for name, layers in (("gpt-oss-120b", 36), ("gpt-oss-20b", 24)):
        m = load_model(name)
        assert (m.sliding_window, m.sliding_window_layers) == (128, layers // 2)
        assert m.attention_sinks and m.linear_bias and m.activation_clamp == 7.0 and m.rope_scaling == "yarn"


def test_window_fields_are_checked():
    with pytest.raises(SpecError):
        replace(PLAIN, sliding_window=128)  # no layers named
    with pytest.raises(SpecError):
        replace(PLAIN, sliding_window=128, sliding_window_layers=37)
    with pytest.raises(SpecError):
        replace(PLAIN, activation_clamp=-1.0)


def test_window_ratio_from_the_measured_table_and_the_tile_count():
    r = window_time_ratio(OSS, GB200, 1, 8192, 1)
    assert 0.15 < r < 0.4  # measured: per-tile overheads keep it well above the tile count
    tiles = (math.ceil(128 / 128) + 1) * 128 / ((8192 + 128) / 2)
    assert r > tiles
    assert window_time_ratio(OSS, GB200, 1, 128, 1) == 1.0  # the window covers the sequence
    # a window the tables do not hold: the tile count
    odd = replace(OSS, sliding_window=300)
    assert window_time_ratio(odd, GB200, 1, 8192, 1) == pytest.approx((3 + 1) * 128 / ((8192 + 128) / 2))


def test_head_dim_ratio_only_where_no_fit_describes_it():
    assert head_dim_time_ratio(OSS, GB200, 1, 8192, 1) > 1.3  # head dim 64 is slower per FLOP on Blackwell
    assert head_dim_time_ratio(OSS, H100, 1, 8192, 1) == 1.0  # the cuDNN fit's d0 already prices it
    llama = load_model("llama3.1-8b")  # head dim 128: the reference
    assert head_dim_time_ratio(llama, GB200, 1, 8192, 1) == 1.0


def test_attention_mixes_windowed_and_full_layers():
    full = _ops(PLAIN, GB200, W8K)["attn_core"]
    win = _ops(replace(PLAIN, sliding_window=128, sliding_window_layers=18), GB200, W8K)["attn_core"]
    mix = 0.5 + 0.5 * window_time_ratio(OSS, GB200, 1, 8192, 1)
    oh = GB200.kernel_overhead_s
    assert win.bwd_s - oh == pytest.approx((full.bwd_s - oh) * mix)
    # unfused attention computes the whole score matrix: no window saving
    unf = dict(flash_attention=False)
    assert (
        _ops(replace(PLAIN, sliding_window=128, sliding_window_layers=18), GB200, W8K, **unf)["attn_core"]
        == _ops(PLAIN, GB200, W8K, **unf)["attn_core"]
    )


def test_megatron_charges_clamp_expert_bias_and_unfused_yarn_rope():
    balanced = dict(moe_load_cv=0.0)  # forced balance: every EP rank gets the mean's token-slots
    ops = _ops(replace(OSS, **balanced), GB200, W8K, ep=64, dp=64)
    base = _ops(replace(PLAIN, **balanced), GB200, W8K, ep=64, dp=64)
    n = 8192
    slots = n * OSS.topk * moe_imbalance(replace(OSS, **balanced), 64, n * OSS.topk * 64 / OSS.experts)
    f, h = OSS.moe_ffn_hidden, OSS.hidden
    cf, cb, ckf, ckb = CLAMP_BYTES["megatron"]
    (bff, bfh, bbf, bbh), (bkf, bkb) = EXPERT_BIAS_BYTES["megatron"]
    active = OSS.experts // 64
    clamp_f = elementwise_time_s(cf * slots * f, GB200, ckf)
    bias_f = elementwise_time_s((bff * f + bfh * h) * slots, GB200, bkf * active + 1)
    assert ops["experts"].fwd_s - base["experts"].fwd_s == pytest.approx(clamp_f + bias_f)
    assert ops["experts"].act_s - base["experts"].act_s == pytest.approx(clamp_f)  # inside moe_act's recompute
    qk = OSS.heads * OSS.head_dim + OSS.kv_heads * OSS.head_dim
    assert ops["rope"].fwd_s == pytest.approx(elementwise_time_s(YARN_ROPE_UNFUSED[0] * n * qk, GB200, 6))
    assert "rope" not in base and "sink_rescale" not in ops  # cuDNN runs the sinks


def test_automodel_charges_sinks_and_both_expert_biases_but_no_clamp():
    w = Workload(global_batch=16, seq_len=4096)
    kw = dict(framework="fsdp2", zero=2, dp=8, ep=8, mb=2)
    ops, base = _ops(OSS, H100, w, **kw), _ops(PLAIN, H100, w, **kw)
    assert "sink_rescale" in ops and "sink_rescale" not in base
    # AutoModel's fused RoPE, then the YaRN concentration as a separate product on q and k
    qk = OSS.heads * OSS.head_dim + OSS.kv_heads * OSS.head_dim
    assert ops["rope"].fwd_s == pytest.approx(elementwise_time_s(4 * 8192 * qk, H100, 2))
    assert ops["experts"].act_s == base["experts"].act_s  # the clamp is compiled into the activation
    assert ops["experts"].fwd_s > base["experts"].fwd_s


def test_serving_and_other_models_are_unchanged():
    w = Workload(global_batch=8, seq_len=4096, mode="infer")
    ops = _ops(OSS, GB200, w)
    assert "rope" not in ops and "sink_rescale" not in ops
    assert ops["experts"] == _ops(PLAIN, GB200, w)["experts"]
    qwen = load_model("qwen3-30b-a3b")
    w = Workload(global_batch=64, seq_len=4096)
    a = layer_ops(qwen, GB200, w, ParallelConfig(ep=8, dp=8), moe=True)
    b = layer_ops(qwen, GB200, w, ParallelConfig(ep=8, dp=8, framework="fsdp2", zero=3), moe=True)
    assert a == b
    compute._layer_ops.cache_clear()
