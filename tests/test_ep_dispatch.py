"""Expert-parallel dispatch (costmodel.physics.comm.ep_dispatch): how many ranks and nodes a token reaches, the
bytes DeepEP moves on each link, and its time, as both engines charge it."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.ep_dispatch import ep_alltoall_bytes
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.comm.ep_dispatch import Fanout, deepep_bytes, deepep_time_s, ep_dispatch_time_s, fanout
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package

from benchmarks import component_ep as ce  # noqa: E402


def test_one_rank_holds_every_expert():
    assert fanout(64, 8, 1, 8) == fanout(64, 8, 1, 8, "consecutive")
    assert fanout(64, 8, 1, 8).ranks == pytest.approx(1.0)


def test_consecutive_routing_hand_counted():
    # DeepSeek-V3 EP 64: experts 8t..8t+7 over ranks of 4 experts -> 2 ranks, both in one node of 32 experts
    assert fanout(256, 8, 64, 8, "consecutive") == Fanout(ranks=2.0, nodes=1.0)
    # Qwen3-30B-A3B EP 8: 16 experts per rank, blocks of 8 aligned -> one rank
    assert fanout(128, 8, 8, 8, "consecutive") == Fanout(ranks=1.0, nodes=1.0)
    # Kimi K2 EP 32: 12 experts per rank; blocks [0,8) one rank, [8,16) two, [16,24) one -> 4/3 on average;
    # 96 experts per node, a multiple of 8 -> one node
    f = fanout(384, 8, 32, 8, "consecutive")
    assert (f.ranks, f.nodes) == (pytest.approx(4 / 3), 1.0)


@pytest.mark.parametrize(
    "experts, topk, ep, groups",
    [(256, 8, 8, 0), (256, 8, 16, 0), (256, 8, 32, 0), (128, 8, 64, 0), (256, 8, 64, 4), (32, 4, 8, 0)],
)
def test_uniform_fanout_matches_a_replay_of_random_routing(experts, topk, ep, groups):
    ranks, nodes = ce.test_routing(experts, topk, ep, 8, groups, 8192, seed=1)
    f = fanout(experts, topk, ep, 8, "uniform", groups)
    assert f.ranks == pytest.approx(ranks, rel=0.02)  # the node limit is an approximation: 2%
    assert f.nodes == pytest.approx(nodes, rel=0.02)


def test_deepep_bytes_split_by_link():
    m = load_model("qwen3-235b-a22b")
    one = deepep_bytes(m, 1000, 8, 8, 100.0)
    assert one.rdma_bytes == 0 and one.nvlink_bytes > 0
    four = deepep_bytes(m, 1000, 32, 8, 100.0)
    f = fanout(m.experts, m.topk, 32, 8)
    assert four.rdma_bytes == pytest.approx(1000 * 100 * f.nodes * 3 / 4)
    assert four.nvlink_bytes == pytest.approx(1000 * 100 * f.ranks * 7 / 8)


def test_alltoall_dispatcher_unchanged():
    m, cl = load_model("qwen3-235b-a22b"), load_cluster("h100-sxm").with_gpus(64)
    a2a = ep_alltoall_bytes(m, 4096, 2, 32, 8)
    assert ep_dispatch_time_s(m, 4096, 2, 32, cl) == collective_time_s("alltoall", a2a, 32, 1, cl)


def test_more_nic_bandwidth_never_slows_deepep():
    m, cl = load_model("deepseek-v3"), load_cluster("h800").with_gpus(64)
    fast = replace(cl, inter_link=replace(cl.inter_link, bw_bytes_per_s=2 * cl.inter_link.bw_bytes_per_s))
    t, t_fast = (ep_dispatch_time_s(m, 4096, 1, 64, c, "deepep") for c in (cl, fast))
    assert t_fast < t
    b = deepep_bytes(m, 4096, 64, 8, m.hidden * 2)
    assert t == pytest.approx(deepep_time_s(b, 64, cl))


def test_both_engines_charge_the_routing():
    m = load_model("qwen3-30b-a3b")
    cl = load_cluster("h100-sxm").with_gpus(8)
    w = Workload(global_batch=64, seq_len=4096)
    c = ParallelConfig(tp=1, pp=1, dp=8, ep=8, mb=2, ep_dispatcher="deepep")
    for engine in ("analytic", "graph"):
        uni = evaluate(m, cl, w, c, engine=engine).breakdown["ep_exposed_s"]
        con = evaluate(replace(m, moe_routing="consecutive"), cl, w, c, engine=engine).breakdown["ep_exposed_s"]
        assert 0 < con < uni, engine


def test_bad_routing_names_the_field():
    with pytest.raises(SpecError, match="moe_routing"):
        ModelSpec(layers=2, hidden=64, heads=4, ffn_hidden=128, vocab=100, experts=8, topk=2, moe_routing="hash")


def test_v1_internode_kernel_rate_binds_where_links_do_not():
    # 2 x 8 H200, DeepEP's test shape: NVLink (450 GB/s) and the NIC are both faster than the V1 kernel's
    # 134.6 GB/s of delivered rows, so V1 takes rows / 134.6 GB/s; EPv2 is charged its links only
    from costmodel.physics.comm.ep_dispatch import DEEPEP_INTERNODE_ROWS_BYTES_PER_S

    m = ModelSpec(layers=1, hidden=7168, heads=1, ffn_hidden=1, vocab=1, experts=256, topk=8, moe_ffn_hidden=1)
    cl = load_cluster("h200").with_gpus(16)
    b = deepep_bytes(m, 4096, 16, 8, 7168 * 2, max_nodes=2)
    v1, v2 = deepep_time_s(b, 16, cl), deepep_time_s(b, 16, cl, generation=2)
    alpha = cl.intra_link.latency_s + cl.inter_link.latency_s  # one NVLink and one network step
    assert v1 == pytest.approx(b.rows_bytes / DEEPEP_INTERNODE_ROWS_BYTES_PER_S + alpha, rel=1e-6)
    assert v2 < v1
    with pytest.raises(SpecError, match="generation"):
        deepep_time_s(b, 16, cl, generation=3)
