"""Both engines charge a chunked op's extra kernel launches (costmodel.physics.comm.split_overhead): a layer's
compute in the closed form equals the compute the op graph schedules, phase by phase. Before, the
closed form charged none, and was 3% fast on plans with 8 TP chunks (RESULTS.md section 33)."""

import re

import pytest

from costmodel.engines import analytic
from costmodel.physics.kernels.compute import Op, layer_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.engines.graph.builders import layer_graph
from costmodel.engines.graph.nodes import COMPUTE
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.physics.comm.split_overhead import (
    CP_RING,
    EP,
    GEMM,
    ONE,
    TP,
    BwdSplit,
    FwdSplit,
    bwd_split,
    extra_s,
    fwd_split,
    replay_extra_s,
    replay_plan,
    split_s,
)

CASES = [  # (model, moe, plan)
    ("llama3-8b", False, dict(tp=8, sp=True, chunks=8)),
    ("llama3-8b", False, dict(tp=4, sp=False, chunks=4, cp=2)),
    ("llama3-8b", False, dict(tp=2, sp=True, chunks=2, cp=4, recompute="full")),
    ("llama3-8b", False, dict(tp=4, sp=True, chunks=4, recompute="selective")),
    ("llama3-8b", False, dict(tp=4, sp=True, chunks=4, recompute="op_sac", framework="fsdp2", zero=3, dp=2)),
    ("mixtral-8x7b", True, dict(tp=2, sp=True, ep=4, chunks=4, cp=2)),
    ("mixtral-8x7b", True, dict(tp=8, sp=True, chunks=8)),  # experts TP-split, no EP
    ("mixtral-8x7b", True, dict(tp=2, sp=True, ep=4, chunks=2, recompute="selective", recompute_modules=("moe",))),
]


def _graph_compute(m, cl, w, c, moe) -> dict:
    out: dict = {}
    for phase in ("fwd", "bwd"):
        g = layer_graph(m, cl, w, c, moe, phase, recompute=c.recompute == "full")
        for _n, a in g.nodes(data=True):
            if a.get("resource") == COMPUTE:  # FSDP2 copies included: both engines charge them
                out[a.get("phase", phase)] = out.get(a.get("phase", phase), 0.0) + a["duration_s"]
    return out


def _problem(model, plan):
    """A case of :data:`CASES` on 64 H100s: (model, cluster, workload, config)."""
    return (
        load_model(model),
        load_cluster("h100-sxm").with_gpus(64),
        Workload(global_batch=64, seq_len=8192),
        ParallelConfig(**{"dp": 1, **plan}),
    )


@pytest.mark.parametrize("model, moe, plan", CASES)
def test_layer_compute_is_the_graphs(model, moe, plan):
    m, cl, w, c = _problem(model, plan)
    lt = analytic.layer_timing(m, cl, w, c, moe)
    g = _graph_compute(m, cl, w, c, moe)
    assert lt.fwd_s == pytest.approx(g["fwd"], rel=1e-9)
    assert lt.bwd_s == pytest.approx(g["bwd"], rel=1e-9)
    assert lt.recompute_s == pytest.approx(g.get("recompute", 0.0), rel=1e-9, abs=1e-12)


def test_chunks_cost_kernel_launches():
    m, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8)
    w = Workload(global_batch=8, seq_len=8192)
    one = analytic.layer_timing(m, cl, w, ParallelConfig(tp=8, sp=True, chunks=1), False)
    eight = analytic.layer_timing(m, cl, w, ParallelConfig(tp=8, sp=True, chunks=8), False)
    ov = cl.device.kernel_overhead_s
    # forward: qkv, proj, fc1, fc2 each split in 8 (an SP gather before or a reduce-scatter after)
    assert eight.fwd_s - one.fwd_s == pytest.approx(4 * 7 * ov, rel=1e-9)
    # backward: the data gradients of proj and fc2 (their output gradient is gathered in 8 pieces)
    assert eight.bwd_s - one.bwd_s == pytest.approx(2 * 7 * ov, rel=1e-9)


# ----------------------------------------------------------------------------- the piece plan
def _op(name, kind="gemm", comm_after=""):
    return Op(name, kind, "mlp", 0.0, 1e-3, 2e-3, 1e-3, comm_after)


def test_fwd_split_rules():
    sp4 = ParallelConfig(tp=8, sp=True, chunks=4)
    tp4 = ParallelConfig(tp=8, sp=False, chunks=4)
    # SP: a column-parallel GEMM gathers each chunk's input; a row-parallel one reduce-scatters each chunk
    assert fwd_split(_op("fc1"), sp4) == FwdSplit(mechanism=TP, pieces=4, gather_before=True)
    assert fwd_split(_op("fc2", comm_after="rs"), sp4) == FwdSplit(mechanism=TP, pieces=4, reduce_after="reducescatter")
    # TP without SP: only the row-parallel GEMM's all-reduce splits it; the column-parallel GEMM is one kernel
    assert fwd_split(_op("fc2", comm_after="ar"), tp4) == FwdSplit(mechanism=TP, pieces=4, reduce_after="allreduce")
    assert fwd_split(_op("fc1"), tp4) == FwdSplit(mechanism=ONE, pieces=1)
    # ring attention in cp blocks, EP experts in chunks, whatever the TP layout
    ring, ep = ParallelConfig(cp=4, chunks=2), ParallelConfig(ep=4, chunks=2)
    assert fwd_split(_op("attn_core", "attention"), ring) == FwdSplit(mechanism=CP_RING, pieces=4)
    assert fwd_split(_op("experts", comm_after="a2a"), ep) == FwdSplit(mechanism=EP, pieces=2)
    # no TP: nothing to pipeline with
    assert fwd_split(_op("fc2", comm_after="ar"), ParallelConfig(chunks=4)).pieces == 1


def test_bwd_split_rules():
    sp4 = ParallelConfig(tp=8, sp=True, chunks=4)
    row, col = _op("fc2", comm_after="rs"), _op("fc1")
    # SP row-parallel: the output gradient gathered in 4, the data gradient (2e-3 - 1e-3) split in 4
    b = bwd_split(row, sp4)
    assert (b.mechanism, b.pieces, b.gather_grad, b.reduce_input_grad) == (GEMM, 4, True, "")
    assert b.split_part_s(row) == pytest.approx(1e-3)
    # column-parallel: input gradient reduce-scattered (SP) or all-reduced (TP) behind the weight gradient
    assert bwd_split(col, sp4).reduce_input_grad == "reducescatter"
    assert bwd_split(col, ParallelConfig(tp=8, chunks=4)) == BwdSplit(
        mechanism=GEMM, pieces=1, reduce_input_grad="allreduce"
    )
    # ring attention and EP experts split their whole backward (2e-3)
    ring = bwd_split(_op("attn_core", "attention"), ParallelConfig(cp=4))
    assert (ring.mechanism, ring.pieces, ring.split_part_s(_op("attn_core", "attention"))) == (CP_RING, 4, 2e-3)
    assert bwd_split(_op("experts", comm_after="a2a"), ParallelConfig(ep=4, chunks=2)).pieces == 2
    assert bwd_split(_op("ln2", "elementwise"), sp4) == BwdSplit(mechanism=ONE, pieces=1)


def test_extra_is_the_pieces_overhead():
    # 4 pieces of a 1 ms kernel with 5 us overhead: 3 more launches, 15 us; the pieces of split_s sum to it
    assert extra_s(4, 1e-3, 5e-6) == pytest.approx(15e-6, rel=1e-12)
    assert 4 * split_s(1e-3, 4, 5e-6) - 1e-3 == pytest.approx(extra_s(4, 1e-3, 5e-6), rel=1e-9)
    assert extra_s(1, 1e-3, 5e-6) == 0.0
    assert extra_s(4, 1e-6, 5e-6) == pytest.approx(3e-6)  # an overhead longer than the kernel: capped at it


@pytest.mark.parametrize("model, moe, plan", CASES)
def test_graph_builds_the_plans_pieces(model, moe, plan):
    """Each op's forward in the graph has as many compute nodes as fwd_split gives it pieces."""
    m, cl, w, c = _problem(model, plan)
    g = layer_graph(m, cl, w, c, moe, "fwd")
    computes = [n for n, a in g.nodes(data=True) if a.get("resource") == COMPUTE and a.get("kind") != "sink"]
    for op in layer_ops(m, cl.device, w, c, moe):
        mine = [n for n in computes if n == op.name or re.fullmatch(re.escape(op.name) + r"\.(blk)?\d+", n)]
        assert len(mine) == fwd_split(op, c).pieces, (op.name, mine)


def test_replay_plan_splits_as_the_forward():
    ops = [_op("fc1"), _op("act", "elementwise"), _op("fc2", comm_after="rs"), _op("experts", comm_after="a2a")]
    c = ParallelConfig(tp=8, sp=False, chunks=4)
    # Megatron --recompute-modules: fc2 replays half of itself with its TP all-reduce; experts in full
    plan = replay_plan(ops, (0.0, 0.0, 0.5, 1.0), c, False)
    assert [(o.name, o.fwd_s, o.comm_after, whole) for o, whole in plan] == [
        ("fc2", 0.5e-3, "", False),
        ("experts", 1e-3, "a2a", False),
    ]
    # per-op SAC: experts' replay is one kernel; a saved op without collectives is not replayed
    plan = replay_plan(ops, (0.0, 0.0, 0.5, 0.5), c, True)
    assert [(o.name, whole) for o, whole in plan] == [("fc2", False), ("experts", True)]
    ov = 5e-6
    # modules: fc2's replay keeps no collective (its reduce-scatter is saved), one kernel; experts in 4 chunks: 3 ov
    assert replay_extra_s(ops, (0.0, 0.0, 0.5, 1.0), c, ov, False) == pytest.approx(3 * ov)
    assert replay_extra_s(ops, (0.0, 0.0, 0.5, 0.5), c, ov, True) == 0.0  # per-op SAC: experts one whole kernel
