"""MoE decode as the engines run it (issue 40): the experts a batch hits, the measured MoE table, no training
mechanisms in a serving step."""

from __future__ import annotations

import math

import pytest

from costmodel.physics.kernels.moe_decode import experts_hit, hit_fraction, serving_moe_ops, weight_bytes_read
from costmodel.serving.phase import _phase, serving_layer_ops
from costmodel.serving.step import step_cost
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

DSV3 = load_model("deepseek-v3")
B200 = load_cluster("b200").with_gpus(8)
H800 = load_cluster("h800").with_gpus(8)  # no measured MoE table: the roofline times its experts


@pytest.mark.parametrize("ep", [1, 8])
def test_weight_bytes_follow_the_distinct_experts_formula_and_saturate(ep):
    """Routed-expert bytes read per layer: L (1 - (1 - k/E)^B) experts (L = E/ep), not all experts, not k B."""
    m, per_expert = DSV3, 3 * DSV3.hidden * DSV3.moe_ffn_hidden / (8 if ep == 1 else 1)
    local = m.experts // ep
    last = 0.0
    for b in (1, 2, 4, 8, 32, 128, 512, 4096):
        mean, slowest = weight_bytes_read(m, 1, b, 8, ep)
        want = local * (1 - (1 - m.topk / m.experts) ** b) * per_expert
        assert mean == pytest.approx(want, rel=1e-12)
        assert mean > last and mean <= local * per_expert * (1 + 1e-12)
        assert mean <= min(m.topk * b / ep, local) * per_expert * (1 + 1e-12)  # not k B: repeats read once
        assert b == 1 or mean < m.topk * b / ep * per_expert
        last = mean
    assert last == pytest.approx(local * per_expert, rel=1e-6)  # every expert read once at large batch
    assert weight_bytes_read(m, 1, 1, 8, ep)[0] == pytest.approx(m.topk / ep * per_expert, rel=1e-12)


def test_slowest_rank_hits_more_than_the_mean_under_ep_only():
    mean, slowest = experts_hit(32, 8, 256, 8)
    assert mean == pytest.approx(32 * hit_fraction(32, 8, 256))
    assert mean + 1 < slowest < 32  # the ranks' outputs are summed: the step waits for the busiest
    assert experts_hit(32, 8, 256, 1)[0] == experts_hit(32, 8, 256, 1)[1]  # TP slices every expert alike
    # E[max] of 8 ranks of Binomial(32, p) by direct enumeration of one rank's distribution
    p = hit_fraction(32, 8, 256)
    cdf = [sum(math.comb(32, i) * p**i * (1 - p) ** (32 - i) for i in range(j + 1)) for j in range(33)]
    assert slowest == pytest.approx(sum(1 - cdf[j] ** 8 for j in range(32)), rel=1e-9)


def test_roofline_experts_time_grows_with_the_hit_experts_weights():
    """Without a table (H800) the routed experts are HBM-bound at decode sizes: the time added between two
    batches is the added hit experts' weights over the achieved bandwidth (their FLOPs are negligible)."""
    dev = H800.device
    t = {
        b: next(o for o in serving_moe_ops(DSV3, dev, "fp8", b, 8, 8, True, "ar") if o.name == "experts")
        for b in (1, 16)
    }
    assert t[1].evidence == "" and t[16].evidence == ""
    added = weight_bytes_read(DSV3, 1, 16, 8, 8)[1] - weight_bytes_read(DSV3, 1, 1, 8, 8)[1]
    bw = dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency
    assert (t[16].fwd_s - t[1].fwd_s) == pytest.approx(added / bw, rel=0.15)


def test_b200_times_the_experts_from_the_measured_moe_table():
    ops = serving_moe_ops(DSV3, B200.device, "fp8", 128, 8, 8, True, "ar")
    experts = next(o for o in ops if o.name == "experts")
    assert experts.evidence in ("measured", "interpolated")
    from costmodel.physics.tables.moe import moe_lookup

    # at 128 tokens every local expert is hit: the table's own point (fp8_block, DeepSeek-V3's shape, EP8)
    t, ev = moe_lookup(B200.device, "fp8_block", 128, 7168, 2048, 8, 256, 1, 8)
    assert ev.kind == "measured" and experts.fwd_s == pytest.approx(t, rel=0.02)
    # fewer tokens, fewer experts hit: less than the balanced table's time at the same token count
    t32, _ = moe_lookup(B200.device, "fp8_block", 32, 7168, 2048, 8, 256, 1, 8)
    e32 = next(o for o in serving_moe_ops(DSV3, B200.device, "fp8", 32, 8, 8, True, "ar") if o.name == "experts")
    assert e32.fwd_s < 0.9 * t32


def test_serving_step_has_no_training_moe_mechanisms():
    """The step builds its phases with a training-mode Workload; the layer must still run as serving engines
    run it: no host copy of the expert counts, no auxiliary-loss router, no per-expert GEMM streams."""
    c = ParallelConfig(tp=8, ep=1, mb=32)
    ops_train = serving_layer_ops(DSV3, B200.device, Workload(global_batch=32, seq_len=1536), c, True, True, "fp8")
    names = [o.name for o in ops_train]
    assert "tokens_per_expert_sync" not in names and "router_topk" not in names and names.count("experts") == 1
    w_train = Workload(global_batch=32, seq_len=1, dtype="fp8")
    w_infer = Workload(global_batch=32, seq_len=1, dtype="fp8", mode="infer")
    a = _phase(DSV3, B200, w_train, c, decode=True, kv_dtype="fp8", micro_batches=1)
    b = _phase(DSV3, B200, w_infer, c, decode=True, kv_dtype="fp8", micro_batches=1)
    assert a.period_s == b.period_s


def test_decode_step_is_its_layers_with_no_launch_term():
    """Engines replay decode steps as CUDA graphs: the step is the sum of its kernels (each with the device's
    per-kernel time) and collectives; nothing per step or per layer is added for launching them."""
    llama = load_model("llama3.1-70b")
    cl = load_cluster("h200").with_gpus(8)
    c = ParallelConfig(tp=8)
    sc = step_cost(llama, cl, "bf16", c, "bf16")
    ph = _phase(
        llama,
        cl,
        Workload(global_batch=8, seq_len=1, dtype="bf16"),
        ParallelConfig(tp=8, mb=8),
        decode=True,
        kv_dtype="bf16",
        micro_batches=1,
        sampled=0,
    )
    assert sc.body_s(8) == pytest.approx(ph.period_s, rel=1e-12)
    w = Workload(global_batch=8, seq_len=1, dtype="bf16")
    per_layer = sum(
        o.fwd_s for o in serving_layer_ops(llama, cl.device, w, ParallelConfig(tp=8, mb=8), False, True, "bf16")
    )
    assert ph.compute_s - llama.layers * per_layer < 2 * per_layer  # the rest is the embedding lookup alone


def test_deepseek_decode_step_on_b200_within_the_weight_read_bound():
    """TP8 EP8, 32 decodes: the step cannot beat reading the hit experts' weights (mean rank) plus the dense
    weights, and the MoE block is no longer priced as training (it was 24.97 ms at ce686fa)."""
    sc = step_cost(DSV3, B200, "fp8", ParallelConfig(tp=8, ep=8), "fp8")
    step = sc.time_s(tokens=32, sampled=32, prefill_pairs=0, decode_ctx=32 * 1536)
    dev = B200.device
    moe_layers = DSV3.layers - DSV3.dense_layers
    expert_bytes = moe_layers * weight_bytes_read(DSV3, 1, 32, 8, 8)[0]
    assert step > expert_bytes / dev.hbm_bw_bytes_per_s
    assert step < 0.85 * 24.97e-3


def test_data_parallel_attention_routes_every_replicas_tokens_to_each_ep_rank():
    """DP8 x EP8 (tp=1): each GPU's n decode tokens are dispatched over the EP group, so its local experts see
    8 n tokens: the experts hit are those of 8 n tokens, as TP8 EP8 with 8 n tokens on every rank."""
    dev = B200.device
    dp = next(o for o in serving_moe_ops(DSV3, dev, "fp8", 4, 1, 8, True, "ar") if o.name == "experts")
    tp = next(o for o in serving_moe_ops(DSV3, dev, "fp8", 32, 8, 8, True, "ar") if o.name == "experts")
    assert dp.fwd_s == pytest.approx(tp.fwd_s, rel=1e-12)
    assert weight_bytes_read(DSV3, 1, 4, 1, 8) == weight_bytes_read(DSV3, 1, 32, 8, 8)
