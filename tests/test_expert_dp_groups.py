"""The expert-data-parallel group is laid out on Megatron-Core's expert grid (order ``tp-ep-dp-pp``
with ``tp = expert_tensor_parallel_size``, no CP: ``megatron/core/parallel_state.py@d98e8a6`` lines
871-895 and 1457): its stride is ``etp * ep``. Experts TP-split over 8 GPUs without EP replicate
every 8th rank, across nodes. The stride ``ep`` alone once put Mixtral's ZeRO-3 expert gathers
(tp 8, ep 1) on NVLink, where the graph engine queued them behind SP and the closed form did not
(the engines then disagreed by 9.7%, RESULTS.md section 33)."""

import pytest

from costmodel.engines import analytic
from costmodel.physics.comm.groups import group_stride, layout
from costmodel.physics.mechanics.fsdp_copies import zero3_groups
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.engines.graph.builders import layer_graph, plan_dma
from costmodel.engines.graph.scheduler import resources_for, schedule
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload


def _expert_dp_ranks(etp: int, ep: int, edp: int, pp: int) -> list[list[int]]:
    """Megatron's RankGenerator for order ``tp-ep-dp-pp`` (tp fastest): the ranks that share
    every coordinate but the dp one, written out independently of ``group_stride``."""
    groups = []
    for p in range(pp):
        for e in range(ep):
            for t in range(etp):
                groups.append([t + etp * (e + ep * (d + edp * p)) for d in range(edp)])
    return groups


@pytest.mark.parametrize("etp, ep, edp", [(8, 1, 4), (4, 1, 2), (1, 8, 2), (1, 4, 4), (2, 2, 4)])
def test_edp_stride_is_that_of_megatrons_expert_grid(etp, ep, edp):
    stride = group_stride("edp", tp=8, cp=1, dp=4, ep=ep, etp=etp)  # tp/cp/dp do not enter the expert grid
    for ranks in _expert_dp_ranks(etp, ep, edp, pp=2):
        assert [b - a for a, b in zip(ranks, ranks[1:])] == [stride] * (edp - 1)


def _plan():
    m = load_model("mixtral-8x7b")
    cl = load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=256, seq_len=4096)
    c = ParallelConfig(tp=8, pp=2, dp=2, cp=2, mb=2, sp=True, zero=3, bucket_bytes=160e6, chunks=8)
    return m, cl, w, c


def test_mixtral_zero3_expert_gathers_cross_nodes_like_the_dense_ones():
    m, cl, w, c = _plan()
    groups = zero3_groups(m, c, True)
    assert len(groups) == 2  # dense (DP x CP) and experts (expert-DP, etp = tp = 8, ep = 1)
    assert [(size, stride) for _p, size, stride in groups] == [(4, 8), (4, 8)]
    assert {layout(size, stride, cl.gpus_per_node).scope for _p, size, stride in groups} == {"inter"}


def test_mixtral_tp8_cp2_zero3_engines_agree_and_the_nic_bounds_the_layer():
    m, cl, w, c = _plan()
    a, g = evaluate(m, cl, w, c, engine="analytic"), evaluate(m, cl, w, c, engine="graph")
    # tolerance 1%: the benchmark's max target is 8%; this plan was 9.7% apart before the fix
    assert a.step_time_s == pytest.approx(g.step_time_s, rel=0.01)
    # Megatron FSDP semantics: the next layer's gather (and in backward the reduce-scatter) on
    # side streams behind this layer's compute; 176 M expert parameters per GPU over 4 nodes
    # take longer than the layer computes, so the layer lasts as long as its transfers on the NIC
    # (every gather, reduce-scatter and CP ring step crosses it, one after another)
    lt = analytic.layer_timing(m, cl, w, c, True)
    coef = cl.device.comm_compute_interference
    exposed_graph = 0.0
    for phase in ("fwd", "bwd"):
        gr = layer_graph(m, cl, w, c, True, phase)
        s = schedule(gr, resources_for(cl.device, plan_dma(m, cl, w, c)))
        on_nic = sum(d["duration_s"] for _n, d in gr.nodes(data=True) if d.get("link") == "inter")
        assert s.makespan_s == pytest.approx(on_nic, rel=1e-3)
        exposed_graph += s.exposed_s["zero"]
    t_zero = lt.ledger.link_s["zero"]
    # the most that can hide it: the compute, slowed by the SM collectives, and the time compute
    # waits on the layer's other (SP on NVLink, CP) communication, while the NIC keeps moving
    hide = (lt.fwd_s + lt.bwd_s) / (1 - coef) + sum(v for k, v in lt.ledger.exposed_s.items() if k != "zero")
    for exposed in (lt.ledger.exposed_s["zero"], exposed_graph):
        assert t_zero - hide <= exposed <= t_zero
    assert lt.ledger.exposed_s["zero"] == pytest.approx(exposed_graph, rel=0.03)
    # and the whole step pays it: most of the step is ZeRO-3 exposure in both engines
    for e in (a, g):
        assert e.breakdown["zero_exposed_s"] > 0.7 * e.step_time_s
