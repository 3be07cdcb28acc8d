"""Both engines charge a chunked op's extra kernel launches (costmodel.split_overhead): a layer's
compute in the closed form equals the compute the op graph schedules, phase by phase. Before, the
closed form charged none, and was 3% fast on plans with 8 TP chunks (RESULTS.md section 33)."""

import pytest

from costmodel import analytic
from costmodel.config import ParallelConfig
from costmodel.graph.builders import layer_graph
from costmodel.graph.nodes import COMPUTE
from costmodel.presets import load_cluster, load_model
from costmodel.specs import Workload

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


@pytest.mark.parametrize("model, moe, plan", CASES)
def test_layer_compute_is_the_graphs(model, moe, plan):
    m, cl = load_model(model), load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=64, seq_len=8192)
    c = ParallelConfig(**{"dp": 1, **plan})
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
