"""A decode step's attention call has a measured fixed time (issue 40, small-batch decode): the KV-cache write
and the decode kernel take 9-12 us on Hopper and Blackwell at small context in AIConfigurator's
generation-attention tables, not one 4 us kernel overhead; the cache reads add on top."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

import pytest

import costmodel.physics.kernels.compute as compute
import costmodel.serving.step as step
from costmodel.physics.kernels.compute import _decode_attention, layer_ops
from costmodel.physics.kernels.decode_attention import (
    FALLBACK_KERNELS,
    FIXED_S,
    FIXED_US,
    decode_attention_evidence,
    decode_attention_fixed_s,
)
from costmodel.physics.kernels.kvcache import kv_elements_per_token_layer
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

LLAMA8 = load_model("llama3.1-8b")
H200 = load_cluster("h200").with_gpus(1)
B200 = load_cluster("b200").with_gpus(8)


def test_each_system_takes_the_median_of_its_engines_tables():
    for system, per in FIXED_US.items():
        assert FIXED_S[system] == pytest.approx(median(per.values()) * 1e-6)
        assert min(per.values()) * 1e-6 <= FIXED_S[system] <= max(per.values()) * 1e-6
    # the measured call is more than the one kernel overhead the roofline charged before, on every GPU
    for name in ("h100-sxm", "h200", "b200", "a100-80g"):
        dev = load_cluster(name).device
        assert decode_attention_fixed_s(dev) > 2 * dev.kernel_overhead_s
        assert decode_attention_evidence(dev) == "measured"


def test_a_device_without_a_table_is_charged_two_kernels_and_says_assumed():
    dev = replace(H200.device, name="NoTable-GPU")
    assert decode_attention_fixed_s(dev) == FALLBACK_KERNELS * dev.kernel_overhead_s
    assert decode_attention_evidence(dev) == "assumed"


def test_stand_in_die_reads_its_twin():
    h800 = load_cluster("h800").device  # no table of its own: H100 SXM's die stands in
    assert decode_attention_fixed_s(h800) == FIXED_S["h100_sxm"]


@pytest.mark.parametrize("ctx", [1, 128, 4096, 65536])
def test_decode_attention_is_the_fixed_time_plus_the_cache_reads(ctx):
    dev = H200.device
    op = _decode_attention(LLAMA8, dev, 8, ctx, 1, 2)
    reads = 8 * ctx * kv_elements_per_token_layer(LLAMA8, 1) * 2 / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency)
    assert op.fwd_s == pytest.approx(FIXED_S["h200_sxm"] + reads, rel=1e-12)
    assert op.evidence == "measured"


def test_mla_decode_reads_the_gqa_figure_as_assumed():
    op = _decode_attention(load_model("deepseek-v3"), B200.device, 8, 1024, 8, 1)
    assert op.evidence == "assumed"
    assert op.fwd_s > FIXED_S["b200_sxm"]


def test_step_charges_the_fixed_time_once_per_layer_and_the_reads_per_cached_token(monkeypatch):
    """body_s carries the call's fixed time; decode_ctx_s only the cache reads (not the fixed time again)."""
    c = ParallelConfig()
    new = step.StepCost(LLAMA8, H200, "bf16", c, "bf16")
    per_token = kv_elements_per_token_layer(LLAMA8, 1) * 2 / (H200.device.hbm_bw_bytes_per_s * 0.8)
    assert new.decode_ctx_s == pytest.approx(LLAMA8.layers * per_token, rel=1e-9)
    body = {m: new.body_s(m) for m in (1, 8, 64)}
    old_fixed = H200.device.kernel_overhead_s
    monkeypatch.setattr(compute, "decode_attention_fixed_s", lambda dev: old_fixed)
    monkeypatch.setattr(step, "decode_attention_fixed_s", lambda dev: old_fixed)
    from costmodel.serving import phase

    phase._layer.cache_clear()
    compute._layer_ops.cache_clear()
    old = step.StepCost(LLAMA8, H200, "bf16", c, "bf16")
    assert old.decode_ctx_s == pytest.approx(new.decode_ctx_s, rel=1e-12)
    for m in (1, 8, 64):
        grew = body[m] - old.body_s(m)
        assert grew == pytest.approx(LLAMA8.layers * (FIXED_S["h200_sxm"] - old_fixed), rel=1e-6)
    phase._layer.cache_clear()
    compute._layer_ops.cache_clear()


def test_training_layers_do_not_read_it():
    """A training (or prefill) layer runs the context-attention kernel: the decode call's fixed time is absent."""
    w = Workload(global_batch=8, seq_len=4096)
    ops = layer_ops(LLAMA8, H200.device, w, ParallelConfig(mb=1))
    attn = next(o for o in ops if o.name == "attn_core")
    assert attn.evidence == ""
