"""Layer graphs per mechanism: where each collective sits, how it is chunked, and that graph and
analytical model agree on how much communication there is (one formula for collective time)."""

import networkx as nx
import pytest

from costmodel.engines.analytic import layer_timing
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.engines.graph.builders import layer_graph, pipelined_graph
from costmodel.engines.graph.part_graphs import head_graph
from costmodel.engines.graph.scheduler import resources_for, schedule
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

GPT = load_model("gpt3-175b")
MIX = load_model("mixtral-8x7b")
CL = load_cluster("a100-80g").with_gpus(64)
W = Workload(global_batch=8, seq_len=2048)


def comm_nodes(g, strategy=None):
    return [n for n in g if g.nodes[n]["strategy"] and (strategy is None or g.nodes[n]["strategy"] == strategy)]


def test_no_parallelism_no_communication():
    for phase in ("fwd", "bwd"):
        g = layer_graph(GPT, CL, W, ParallelConfig(), False, phase)
        assert comm_nodes(g) == [] and nx.is_directed_acyclic_graph(g) and "out" in g


def test_tp_standard_allreduce_placement():
    c = ParallelConfig(tp=8)
    fwd = layer_graph(GPT, CL, W, c, False, "fwd")
    assert comm_nodes(fwd) == ["attn_out.ar", "fc2.ar"]
    assert list(fwd.successors("fc2.ar")) == ["bda2"]  # the next op consumes it
    bwd = layer_graph(GPT, CL, W, c, False, "bwd")
    assert sorted(comm_nodes(bwd)) == ["fc1.b.ar", "qkv.b.ar"]
    # the input-gradient AllReduce depends on dgrad only: wgrad is its window
    assert list(bwd.predecessors("fc1.b.ar")) == ["fc1.b.dgrad"]
    assert not nx.has_path(bwd, "fc1.b.ar", "fc1.b.wgrad") and not nx.has_path(bwd, "fc1.b.wgrad", "fc1.b.ar")


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_sp_pieces_pipeline_with_gemm_chunks(chunks):
    c = ParallelConfig(tp=8, sp=True, chunks=chunks)
    g = layer_graph(GPT, CL, W, c, False, "fwd")
    ags = [n for n in comm_nodes(g, "sp") if n.startswith("qkv.ag")]
    rss = [n for n in comm_nodes(g, "sp") if n.startswith("fc2.rs")]
    assert len(ags) == len(rss) == chunks
    if chunks > 1:
        assert list(g.successors("qkv.ag.1")) == ["qkv.1"] and list(g.predecessors("fc2.rs.0")) == ["fc2.0"]
    # the pieces add up to the whole collective (they are steps of one ring); chunked, Transformer Engine's
    # userbuffers carry them, priced by the collective model (unchunked, NCCL issues it: the measured table)
    total = sum(g.nodes[n]["duration_s"] for n in ags)
    one = layer_graph(GPT, CL, W, ParallelConfig(tp=8, sp=True), False, "fwd").nodes["qkv.ag"]["duration_s"]
    whole = collective_time_s("allgather", W.seq_len * GPT.hidden * 2, 8, 1, CL, tables=chunks == 1)
    assert total == pytest.approx(whole)
    assert one == pytest.approx(collective_time_s("allgather", W.seq_len * GPT.hidden * 2, 8, 1, CL, tables=True))


@pytest.mark.parametrize(
    "c",
    [
        ParallelConfig(tp=8),
        ParallelConfig(tp=8, sp=True),
        ParallelConfig(tp=8, sp=True, chunks=4),
        ParallelConfig(tp=4, cp=2, dp=2),
        ParallelConfig(tp=4, dp=4, zero=3),
    ],
)
def test_link_time_matches_the_analytic_ledger(c):
    cl = CL.with_gpus(c.gpus)
    lt = layer_timing(GPT, cl, W, c, False)
    res = resources_for(cl.device)
    link = {}
    for phase in ("fwd", "bwd"):
        for k, v in schedule(layer_graph(GPT, cl, W, c, False, phase), res).link_s.items():
            link[k] = link.get(k, 0.0) + v
    assert link == pytest.approx(lt.ledger.link_s)


def test_cp_ring_passes_kv_blocks():
    c = ParallelConfig(tp=2, cp=4, dp=8)
    fwd = layer_graph(GPT, CL, W, c, False, "fwd")
    assert comm_nodes(fwd, "cp") == ["attn_core.kv1", "attn_core.kv2", "attn_core.kv3"]
    assert list(fwd.predecessors("attn_core.blk2")) == ["attn_core.kv2"]
    bwd = layer_graph(GPT, CL, W, c, False, "bwd")
    assert len(comm_nodes(bwd, "cp")) == 2 * 3  # K/V forward and dK/dV back around the ring


def test_ep_dispatch_then_chunked_combine():
    c = ParallelConfig(tp=2, ep=4, dp=4, chunks=4)
    cl = load_cluster("h100-sxm").with_gpus(8)
    g = layer_graph(MIX, cl, W, c, True, "fwd")
    ep = comm_nodes(g, "ep")
    assert ep[0] == "experts.dispatch" and len(ep) == 5
    # Megatron-Core: router -> softmax/top-k/aux loss -> tokens_per_expert host sync -> permute -> dispatch
    assert list(g.predecessors("experts.dispatch")) == ["permute"]
    assert list(g.predecessors("permute")) == ["tokens_per_expert_sync"]
    assert list(g.predecessors("router_topk")) == ["router"]
    assert list(g.predecessors("experts.combine.2")) == ["experts.2"]


def test_zero3_prefetch_issued_at_layer_start():
    c = ParallelConfig(tp=4, dp=4, zero=3)
    fwd = layer_graph(GPT, CL.with_gpus(16), W, c, False, "fwd")
    assert comm_nodes(fwd, "zero") == ["zero.ag.fwd"]
    assert list(fwd.predecessors("zero.ag.fwd")) == [] and list(fwd.successors("zero.ag.fwd")) == ["out"]
    bwd = layer_graph(GPT, CL.with_gpus(16), W, c, False, "bwd")
    assert sorted(comm_nodes(bwd, "zero")) == ["zero.ag.bwd", "zero.rs"]


def test_full_recompute_repeats_the_forward_with_its_communication():
    c = ParallelConfig(tp=8)
    g = layer_graph(GPT, CL, W, c, False, "bwd", recompute=True)
    assert {"rc.attn_out.ar", "rc.fc2.ar"} <= set(comm_nodes(g, "tp"))
    assert {g.nodes[n]["phase"] for n in g} == {"recompute", "bwd"}


def test_head_graph_reduces_input_gradient_behind_wgrad():
    g = head_graph(GPT, CL, W, ParallelConfig(tp=8, sp=True), "bwd")
    assert comm_nodes(g) == ["lm_head.b.sp"]
    assert not nx.has_path(g, "lm_head.b.sp", "lm_head.b.wgrad")


def test_pipelined_graph_shape():
    g = pipelined_graph(CL, 1.0, 1.0, 3)
    assert len(comm_nodes(g)) == 3 and len(g) == 7
