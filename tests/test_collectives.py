"""Collective times: alpha-beta terms, layouts and hierarchy."""

import pytest

from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import layout
from costmodel.spec.presets import load_cluster


@pytest.fixture
def a100():
    return load_cluster("a100-80g")


def test_trivial_groups_cost_nothing(a100):
    for kind in ("allreduce", "allgather", "reducescatter", "alltoall", "p2p"):
        assert collective_time_s(kind, 1e9, 1, 1, a100) == 0.0
        assert collective_time_s(kind, 0, 8, 1, a100) == 0.0


def test_ring_allreduce_inside_a_node(a100):
    # NCCL's Simple ring at 1 GB: 2 (n-1)/n S / B + base + 2 (n-1) alpha, B = 300 GB/s * 0.78, alpha 3.4 us and
    # base 8.4 us (tuning.cc)
    S, n = 1e9, 8
    bw = 300e9 * 0.78
    expected = 2 * (n - 1) / n * S / bw + 8.4e-6 + 2 * (n - 1) * 3.4e-6
    assert collective_time_s("allreduce", S, n, 1, a100) == pytest.approx(expected)


def test_allreduce_is_reducescatter_plus_allgather(a100):
    S = 5e8
    ar = collective_time_s("allreduce", S, 8, 1, a100)
    rs = collective_time_s("reducescatter", S, 8, 1, a100)
    ag = collective_time_s("allgather", S, 8, 1, a100)
    assert ar == pytest.approx(rs + ag - 8.4e-6)  # one collective: NCCL's base latency once


def test_layouts():
    assert layout(8, 1, 8).scope == "intra"
    assert layout(8, 8, 8).scope == "inter"
    assert (layout(64, 1, 8).intra, layout(64, 1, 8).inter) == (8, 8)


def test_spanning_nodes_is_slower_than_inside(a100):
    inside = collective_time_s("allreduce", 1e9, 8, 1, a100)
    across = collective_time_s("allreduce", 1e9, 8, 8, a100)
    assert across > 5 * inside


def test_hierarchical_uses_every_rail(a100):
    # 64 ranks = 8 nodes x 8 GPUs: the inter-node phase carries 1/8 of the data per NIC,
    # so it is much faster than a flat ring of 8 one-GPU-per-node ranks on the same data.
    hier = collective_time_s("allreduce", 1e9, 64, 1, a100)
    flat = collective_time_s("allreduce", 1e9, 8, 8, a100)
    assert hier < flat / 3


def test_more_bandwidth_never_slower(a100):
    from dataclasses import replace

    fast = replace(a100, inter_link=replace(a100.inter_link, bw_bytes_per_s=2 * a100.inter_link.bw_bytes_per_s))
    for kind in ("allreduce", "allgather", "alltoall", "p2p"):
        assert collective_time_s(kind, 1e8, 16, 8, fast) <= collective_time_s(kind, 1e8, 16, 8, a100)


def test_dedicated_dma_engines_cap_bandwidth():
    # the sg2262-like preset carries collectives on 4 CDMA engines; halving the engine count
    # halves the achievable bandwidth when the engines, not the link, are the bottleneck
    from dataclasses import replace
    from costmodel.physics.comm.collectives import link_bw_bytes_per_s

    cl = load_cluster("sg2262-like")
    eng = cl.device.engines_for("intra")
    fewer = replace(cl, device=replace(cl.device, dma_engines=(replace(eng, count=2),) + cl.device.dma_engines[1:]))
    full = link_bw_bytes_per_s(cl, "intra")
    assert full <= cl.intra_link.effective_bw_bytes_per_s
    if eng.count * eng.bw_bytes_per_s < cl.intra_link.effective_bw_bytes_per_s:
        assert link_bw_bytes_per_s(fewer, "intra") < full
    assert collective_time_s("allreduce", 1e8, 8, 1, fewer) >= collective_time_s("allreduce", 1e8, 8, 1, cl)
