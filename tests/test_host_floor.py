"""The host floor (costmodel.physics.kernels.host): a layer's phase lasts at least the host's time to issue it, in
both engines; layers whose GPU time is far above it (dense, large micro-batches) are unchanged."""

import pytest

from costmodel.api import evaluate
from costmodel.engines import analytic
from costmodel.engines.analytic import layer_timing
from costmodel.engines.graph.compose import layer_schedule
from costmodel.physics.kernels.host import EAGER_OP_S, host_gap_s, host_scale, layer_host_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

QWEN = load_model("qwen3-30b-a3b")  # 128 experts, top-8: 16 local experts at EP 8
GB200 = load_cluster("gb200-nvl72").with_gpus(8)
PLAN = ParallelConfig(dp=8, ep=8, mb=1)


def _short(seq=256):
    """Micro-batch 1 of a short sequence: GPU work per layer below the host's (a Grace host)."""
    return Workload(global_batch=64, seq_len=seq, dtype="fp8", recipe="mxfp8")


def test_mb1_fine_grained_moe_layer_bounded_below_by_host_time():
    w = _short()
    host_f, host_b = layer_host_s(QWEN, GB200.device, w, PLAN, True)
    lt = layer_timing(QWEN, GB200, w, PLAN, True)
    assert lt.fwd_s + lt.bwd_s + lt.recompute_s + lt.ledger.total_exposed_s >= host_f + host_b - 1e-12
    f = layer_schedule(QWEN, GB200, w, PLAN, True, "fwd")
    b = layer_schedule(QWEN, GB200, w, PLAN, True, "bwd")
    assert f.makespan_s == pytest.approx(host_f) and b.makespan_s == pytest.approx(host_b)
    assert f.extra["host_gap_s"] > 0 and f.extra["phase_s"]["fwd"] > 0


def test_engines_agree_when_host_bound():
    w = _short()
    a = evaluate(QWEN, GB200, w, PLAN, engine="analytic").step_time_s
    g = evaluate(QWEN, GB200, w, PLAN, engine="graph").step_time_s
    assert a == pytest.approx(g, rel=0.02)


def test_floor_raises_the_host_bound_layer(monkeypatch):
    w = _short()
    with_floor = layer_timing(QWEN, GB200, w, PLAN, True)
    monkeypatch.setattr(analytic, "layer_host_s", lambda *a, **k: (0.0, 0.0))
    without = layer_timing.__wrapped__(QWEN, GB200, w, PLAN, True)
    assert with_floor.fwd_s > without.fwd_s * 1.03


@pytest.mark.parametrize("cluster", ["gb200-nvl72", "h100-sxm"])
def test_dense_70b_layer_unchanged(monkeypatch, cluster):
    m, cl = load_model("llama3-70b"), load_cluster(cluster).with_gpus(64)
    w = Workload(global_batch=128, seq_len=8192, dtype="bf16")
    c = ParallelConfig(tp=4, pp=4, dp=4, mb=1, sp=True)
    lt = layer_timing.__wrapped__(m, cl, w, c, False)
    monkeypatch.setattr(analytic, "layer_host_s", lambda *a, **k: (0.0, 0.0))
    plain = layer_timing.__wrapped__(m, cl, w, c, False)
    assert lt.fwd_s + lt.bwd_s == pytest.approx(plain.fwd_s + plain.bwd_s, rel=0.01)
    host = sum(layer_host_s(m, cl.device, w, c, False))
    assert host < 0.25 * (plain.fwd_s + plain.bwd_s)  # well below: the floor does not bind


def test_no_floor_outside_megatron_training():
    w = _short()
    infer = Workload(mode="infer", global_batch=1, seq_len=256, input_len=128, output_len=128)
    assert layer_host_s(QWEN, GB200.device, infer, PLAN, True) == (0.0, 0.0)
    fsdp = ParallelConfig(framework="fsdp2", zero=3, dp=8)
    assert layer_host_s(load_model("llama3.1-8b"), GB200.device, w, fsdp, False) == (0.0, 0.0)


def test_host_time_grows_with_local_experts_and_full_recompute():
    w = _short()
    f8, b8 = layer_host_s(QWEN, GB200.device, w, PLAN, True)
    f1, _ = layer_host_s(QWEN, GB200.device, w, ParallelConfig(dp=8, ep=1), True)  # 128 local experts
    assert f1 > 3 * f8
    _, b_full = layer_host_s(QWEN, GB200.device, w, ParallelConfig(dp=8, ep=8, recompute="full"), True)
    assert b_full == pytest.approx(b8 + f8)


def test_x86_host_is_faster_than_grace():
    w = _short()
    b200 = load_cluster("b200").device
    assert host_scale(b200) < 0.5 and EAGER_OP_S > 4e-6
    assert layer_host_s(QWEN, b200, w, PLAN, True)[0] < layer_host_s(QWEN, GB200.device, w, PLAN, True)[0]
    assert host_gap_s(1.0, 0.5) == 0.0
