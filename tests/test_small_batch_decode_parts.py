"""The parts of a small-batch decode step against the measured per-op tables (issue 40, note
benchmarks/notes/2026-12-06-small-batch-decode.md): the weight-reading GEMMs at m <= 16 and the MoE block at one
token are charged within a few percent of the tables, so the small-batch gap is not there."""

from __future__ import annotations

import pytest

from costmodel.physics.kernels.gemm import gemm_time_s
from costmodel.physics.kernels.moe_decode import serving_moe_ops
from costmodel.physics.tables import gemm_lookup, moe_lookup
from costmodel.spec.presets import load_cluster, load_model

H200 = load_cluster("h200").device
B200 = load_cluster("b200").device

#: (device, table backend, m, n, k): the dense decode GEMMs of the rows in the note
SHAPES = [
    (H200, "vllm 0.24.0", 8, 6144, 4096),  # Llama-3.1-8B TP1 QKV
    (H200, "vllm 0.24.0", 8, 4096, 4096),  # O
    (H200, "vllm 0.24.0", 8, 28672, 4096),  # gate_up
    (H200, "vllm 0.24.0", 8, 4096, 14336),  # down
    (H200, "vllm 0.24.0", 8, 2560, 8192),  # Llama-3-70B TP4 QKV
    (H200, "vllm 0.24.0", 8, 14336, 8192),  # gate_up
    (H200, "vllm 0.24.0", 8, 8192, 7168),  # down
    (B200, "sglang 0.5.14", 1, 1280, 4096),  # Qwen3-235B TP8 QKV
    (B200, "sglang 0.5.14", 1, 4096, 1024),  # O
    (B200, "sglang 0.5.14", 1, 128, 4096),  # router
]


@pytest.mark.parametrize("dev,backend,m,n,k", SHAPES)
def test_small_m_gemms_are_charged_as_measured_or_slower(dev, backend, m, n, k):
    model = gemm_time_s(m, n, k, dev, "bf16")
    table, ev = gemm_lookup(dev, "bf16", m, n, k, backend)
    assert ev.kind in ("measured", "interpolated")
    assert 0.85 * table <= model <= 1.2 * table, (model, table)


def test_qwen3_moe_at_one_token_reads_the_measured_table():
    """One token, top-8 of 128 experts, each split 8 ways: the block is latency-bound (35.6 us for 38 MB of
    weights, 5 us of HBM time at 8 TB/s), and the model charges the table's point, not the roofline."""
    m = load_model("qwen3-235b-a22b")
    ops = serving_moe_ops(m, B200, "bf16", 1, 8, 1, True, "ar")
    experts = next(o for o in ops if o.name == "experts")
    t, ev = moe_lookup(B200, "bf16", 1, m.hidden, m.moe_ffn_hidden, m.topk, m.experts, 8, 1, True)
    assert ev.kind == "measured"
    assert experts.fwd_s == pytest.approx(t, rel=1e-9)
    weights = m.topk * 3 * m.hidden * m.moe_ffn_hidden / 8 * 2
    assert experts.fwd_s > 4 * weights / B200.hbm_bw_bytes_per_s
