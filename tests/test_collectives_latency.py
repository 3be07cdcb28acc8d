"""Collective latency as NCCL's cost model charges it (src/graph/tuning.cc; Hu et al. 2025,
"Demystifying NCCL"): rings for AllGather/ReduceScatter, min(ring, tree) for AllReduce."""

import math

import numpy as np

import pytest

from costmodel.physics.comm.collectives import (
    RING_PLATEAU_LATENCY_FACTOR,
    TREE_BW_FACTOR,
    collective_latency_s,
    collective_time_s,
    ring_latency_s,
    ring_plateau_factor,
    tree_latency_s,
)
from costmodel.spec.presets import load_cluster

A_I, A_E = 3.4e-6, 14e-6  # a100-80g: one NVLink and one network step of NCCL's Simple ring (tuning.cc hwLatencies)
BASE = 8.4e-6  # NCCL's base latency of a Simple ring or tree (tuning.cc baseLatencies)
# DGX A100 hosts are AMD: in a ring that crosses nodes an NVLink step costs at least 3 x 2 us under Simple,
# 2 us under LL128 and LL (tuning.cc getNetOverhead, "inter-node rings still have to launch nsteps * net overhead")
A_I_AMD = 6e-6
LL128_I_AMD, LL128_E = 2e-6, 4e-6  # LL128 steps: max(1.9, 2.0) us on NVLink across nodes, 4.0 us on the network


@pytest.fixture
def a100():
    return load_cluster("a100-80g")


# --------------------------------------------------------------------------- hand-computed
def test_ring_allgather_one_gpu_per_node(a100):
    # 64 ranks at stride 8: one GPU on each of 64 nodes, a ring of 63 network steps (with one GPU per node
    # NCCL charges the tree's network step: Simple 14 us, LL 5 us)
    # 100 MB, Simple: t = 63/64 * S / (25 GB/s * 0.9) + 8.4 us + 63 * 14 us (LL128 would pay 1/0.92 of the
    # bandwidth term for 341 us less latency: 40 us slower)
    S = 1e8
    expected = 63 / 64 * S / (25e9 * 0.9) + BASE + 63 * A_E
    assert collective_time_s("allgather", S, 64, 8, a100) == pytest.approx(expected)
    # a 1-byte all-gather takes LL: 6.6 us + 63 * 5 us
    assert collective_latency_s("allgather", 64, 8, a100) == pytest.approx(6.6e-6 + 63 * 5e-6)


def test_ring_reducescatter_across_nodes_is_one_pipelined_ring(a100):
    # 32 ranks at stride 1: 8 GPUs x 4 nodes, one ring whose hops are NVLink (234 GB/s) or the
    # node's 8 NICs (8 x 22.5 = 180 GB/s): bus bandwidth min(234, 180) = 180 GB/s (tuning.cc:
    # busBw = nChannels * bwInter), bandwidth term 31/32 * S / 180 GB/s. Latency: p - 1 = 31
    # steps, nodes - 1 = 3 across the network. At 1 MB NCCL runs LL128: 0.92 of the bandwidth,
    # 14 us + 28 * 2 us + 3 * 4 us = 82 us of latency (Simple: 8.4 + 28 * 6 + 3 * 14 = 218 us).
    S = 1e6
    bw = 31 / 32 * S / (8 * 25e9 * 0.9)
    expected = bw / 0.92 + 14e-6 + 28 * LL128_I_AMD + 3 * LL128_E
    assert collective_time_s("reducescatter", S, 32, 1, a100) == pytest.approx(expected)


def test_allreduce_ring_and_tree_latencies():
    # ring over 4 nodes x 8: 2*31 = 62 steps, 2*(4-1) = 6 of them inter (tuning.cc nInterSteps):
    # 56*1 + 6*10
    assert ring_latency_s("allreduce", 8, 4, 1.0, 10.0) == 56 + 60
    # one rank per node: every one of the 2 (n-1) steps crosses the network
    assert ring_latency_s("allreduce", 1, 16, 1.0, 10.0) == 30 * 10
    # tree: 2 * (7 * 1 + floor(log2 4) * 10) = 54; floor(log2 24) = 4
    assert tree_latency_s(8, 4, 1.0, 10.0) == 54
    assert tree_latency_s(1, 24, 1.0, 10.0) == 2 * 4 * 10


def test_small_allreduce_across_many_nodes_uses_the_tree(a100):
    # 1 KB over 128 nodes (one GPU each): the LL tree, 6.8 us + 2 * 7 network steps of 5 us = 76.8 us,
    # beats every ring (254 network steps); the tree's bandwidth term: every node sends 2 S over its NIC
    # (tuning.cc: tree algbw = busBw * .5), at 0.92 of the ring's bus bandwidth, LL's 1/3.8 and LL's
    # medium-size correction (1 KB: log2i(1000 >> 6) = 3 -> 1.0, tuning.cc treeCorrectionFactor)
    t = collective_time_s("allreduce", 1e3, 128, 8, a100)
    bw = 2 * 1e3 / (25e9 * 0.9)
    assert t == pytest.approx(bw * 3.8 / TREE_BW_FACTOR + 6.8e-6 + 2 * 7 * 5e-6)
    assert collective_latency_s("allreduce", 128, 8, a100, nbytes=1e3) == pytest.approx(6.8e-6 + 2 * 7 * 5e-6)


def test_large_allreduce_on_few_nodes_uses_the_ring(a100):
    # 1 GB over 2 nodes: the ring's 8% bandwidth advantage outweighs its latency
    # one rank per node: 2 (p-1) = 2 network steps and the base, times NCCL's ring plateau factor 1.4
    S = 1e9
    ring = 2 * 1 / 2 * S / (25e9 * 0.9) + RING_PLATEAU_LATENCY_FACTOR * (BASE + 2 * A_E)
    assert collective_time_s("allreduce", S, 2, 8, a100) == pytest.approx(ring)


def test_inside_a_node_unchanged(a100):
    # one node: the Simple ring at 100 MB, 2 (n-1) steps for all-reduce, n - 1 for the others
    S = 1e8
    assert collective_time_s("allgather", S, 8, 1, a100) == pytest.approx(7 / 8 * S / 234e9 + BASE + 7 * A_I)
    assert collective_time_s("allreduce", S, 8, 1, a100) == pytest.approx(2 * 7 / 8 * S / 234e9 + BASE + 14 * A_I)


def test_issue_claim_allgather_latency_grows_linearly_at_scale(a100):
    # 1,536 GPUs with TP 8: a DP AllGather over 192 nodes pays 191 network steps (LL: 6.6 us + 191 * 5 us,
    # about 1 ms), where a log-depth tree would pay 2 * 8 = 16
    lat = collective_latency_s("allgather", 192, 8, a100)
    assert lat == pytest.approx(6.6e-6 + 191 * 5e-6)
    assert lat > 10 * 2 * math.ceil(math.log2(192)) * 5e-6 / 2


# --------------------------------------------------------------------------- properties
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
@pytest.mark.parametrize("stride", [1, 2, 8])
def test_more_ranks_never_lower_latency(a100, kind, stride):
    sizes = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    lats = [collective_latency_s(kind, n, stride, a100) for n in sizes]
    assert all(b >= a for a, b in zip(lats, lats[1:])), lats


@pytest.mark.parametrize("kind", ["allgather", "reducescatter"])
def test_ring_latency_monotone_in_ranks(kind):
    for inter in (1, 2, 3, 8):
        lats = [ring_latency_s(kind, k, inter, 1.0, 10.0) for k in range(1, 9)]
        assert all(b > a for a, b in zip(lats, lats[1:]))
    for k in (1, 4, 8):
        lats = [ring_latency_s(kind, k, n, 1.0, 10.0) for n in range(1, 40)]
        assert all(b > a for a, b in zip(lats, lats[1:]))


def test_allreduce_never_slower_than_its_simple_ring(a100):
    # NCCL picks the fastest algorithm and protocol, so the Simple ring all-reduce bounds the result from above
    for size, stride in ((16, 1), (64, 8), (256, 2), (1024, 8)):
        for S in (1e3, 1e6, 1e8, 1e9):
            k = min(size, 8 // stride) if stride < 8 else 1
            nodes = size // k
            ring_lat = BASE + ring_latency_s("allreduce", k, nodes, A_I_AMD, A_E)
            bus = 25e9 * 0.9 * k if nodes > 1 else 234e9
            ring = 2 * (size - 1) / size * S / min(bus, 234e9) + ring_plateau_factor(S, k, nodes) * ring_lat
            t = collective_time_s("allreduce", S, size, stride, a100)
            assert t <= ring * (1 + 1e-12)
            assert t > collective_latency_s("allreduce", size, stride, a100, nbytes=S) > 0


def test_latency_kind_checked(a100):
    with pytest.raises(ValueError):
        collective_latency_s("alltoall", 8, 1, a100)


def test_array_of_sizes_picks_the_algorithm_per_entry(a100):
    # 16 nodes x 8 GPUs: small all-reduces take the tree, large ones the ring; an array of sizes
    # across the crossover gets each entry's own choice (the cost tables score all layer counts
    # at once), and empty buffers cost nothing
    sizes = [0.0, 1e3, 1e6, 1e7, 1e8, 1e9, 1e10]
    for kind in ("allreduce", "allgather", "reducescatter"):
        arr = collective_time_s(kind, np.array(sizes), 128, 1, a100)
        assert arr.tolist() == pytest.approx([collective_time_s(kind, s, 128, 1, a100) for s in sizes], rel=1e-12)
    # the sizes straddle the crossover: the LL tree at 1 KB (NVLink step 0.6 us, network 5 us), the Simple ring
    # at 10 GB
    assert collective_latency_s("allreduce", 128, 1, a100, nbytes=1e3) == pytest.approx(
        6.8e-6 + tree_latency_s(8, 16, 0.6e-6, 5e-6)
    )
    assert collective_latency_s("allreduce", 128, 1, a100, nbytes=1e10) == pytest.approx(
        RING_PLATEAU_LATENCY_FACTOR * (BASE + ring_latency_s("allreduce", 8, 16, A_I_AMD, A_E))
    )
    assert collective_time_s("allreduce", np.array(sizes), 128, 1, a100)[0] == 0.0


def test_array_of_sizes_refused_where_not_supported(a100):
    with pytest.raises(ValueError, match="nbytes"):
        collective_time_s("alltoall", np.array([1e6, 2e6]), 8, 1, a100)


def test_a_ring_step_is_as_slow_as_its_slowest_hop(a100):
    # ring attention's K/V exchange (kind ring_p2p): every rank sends to its neighbour at once; a ring
    # of 32 consecutive ranks spans 4 nodes, so one hop per node crosses the network and paces the step
    S = 1e8
    assert collective_time_s("ring_p2p", S, 32, 1, a100) == pytest.approx(S / (25e9 * 0.9) + A_E)
    assert collective_time_s("ring_p2p", S, 8, 1, a100) == pytest.approx(S / 234e9 + A_I)  # inside a node
    # a single send to a peer 1 rank away stays on NVLink (pipeline sends are p2p)
    assert collective_time_s("p2p", S, 32, 1, a100) == pytest.approx(S / 234e9 + A_I)


# --------------------------------------------------------------------------- NCCL's algorithms
def test_ring_across_nodes_is_bound_by_its_slowest_hop():
    # B200: NVLink 900 GB/s x 0.8 = 720 GB/s per GPU, 8 NICs x 45 GB/s = 360 GB/s per node.
    # 4 nodes x 8: one ring, bus bandwidth min(720, 360) = 360 GB/s: 31/32 * S / 360 GB/s
    # Simple: Intel hosts, so an NVLink step stays 3.4 us (3 x 1 us of network overhead is less)
    b200 = load_cluster("b200")
    S = 1e9
    expected = 31 / 32 * S / (8 * 50e9 * 0.9) + BASE + 28 * 3.4e-6 + 3 * 14e-6
    assert collective_time_s("allgather", S, 32, 1, b200) == pytest.approx(expected)


def test_two_node_tree_beats_a_network_bound_ring():
    # H100 nodes with 25 GB/s per GPU (A3-Mega-like): the ring's bus bandwidth is the node's
    # 8 x 22.5 = 180 GB/s; on two nodes the tree sends S once per node over those NICs, and 2 S
    # over NVLink (chain up and down): max(2 S / 360, S / 180) / 0.92. Tree latency (Simple): the base
    # and 2 * (7 * 4 us + 1 * 14 us) = 84 us.
    # (NVLSTree switched off here: the next tests cover it)
    from dataclasses import replace

    h = load_cluster("h100-sxm")
    h = replace(
        h,
        inter_link=replace(h.inter_link, bw_bytes_per_s=25e9),
        intra_link=replace(
            h.intra_link, nvls_tree_channel_bw_bytes_per_s=0.0, nvls_tree_2node_channel_bw_bytes_per_s=0.0
        ),
    )
    S = 8e9
    tree = max(2 * S / 360e9, S / 180e9) / TREE_BW_FACTOR + BASE + 2 * (7 * 4e-6 + 14e-6)
    ring = 2 * 15 / 16 * S / 180e9
    assert tree < ring
    assert collective_time_s("allreduce", S, 16, 1, h) == pytest.approx(tree)


# NVLSTree (NCCL tuning.cc NCCL_ALGO_NVLS_TREE): NVLS inside the node, a tree between nodes.
# H100 preset: NVLink 450 x 0.8 = 360 GB/s, NVLS 0.85 of it = 306 GB/s; 8 NICs x 45 GB/s = 360 GB/s;
# per-channel caps 45.5 GB/s (> 2 nodes) and 57.7 GB/s (2 nodes) on 8 channels.
NVLS_TREE_STEP_S = 14e-6 * 20.9 / 14.0


def test_nvls_tree_across_many_hopper_nodes():
    # 1,024 GPUs (128 nodes), 16 GiB: max(S / 306, 2 S / 360, 2 S / (8 x 45.5)) = 2 S / 360 GB/s
    # (network-bound), latency 25 us + 2 * 7 network steps of 20.9 us
    h = load_cluster("h100-sxm")
    S = 2.0**34
    expected = 2 * S / 360e9 + 25e-6 + 14 * NVLS_TREE_STEP_S
    assert collective_time_s("allreduce", S, 1024, 1, h) == pytest.approx(expected)
    # the tree alone would be 0.92 as fast: NVLSTree is what the model (and NCCL) picks
    assert expected < 2 * S / 360e9 / TREE_BW_FACTOR


def test_nvls_tree_on_two_nodes_is_capped_per_channel():
    # 2 nodes: the network term halves (S / 360 GB/s) and the cap 8 x 57.7 = 461.6 GB/s binds:
    # max(S / 306, S / 360, 2 S / 461.6) = 2 S / 461.6 GB/s; latency 25 us + 2 * 1 steps
    h = load_cluster("h100-sxm")
    S = 8e9
    expected = 2 * S / (8 * 57.7e9) + 25e-6 + 2 * NVLS_TREE_STEP_S
    assert collective_time_s("allreduce", S, 16, 1, h) == pytest.approx(expected)


def test_nvls_tree_needs_two_gpus_of_a_node_and_nvls():
    # one GPU per node (stride 8): no NVLS (nvls.cc: fewer than 2 local GPUs), the tree or ring
    from dataclasses import replace

    h = load_cluster("h100-sxm")
    off = replace(
        h,
        intra_link=replace(
            h.intra_link, nvls_tree_channel_bw_bytes_per_s=0.0, nvls_tree_2node_channel_bw_bytes_per_s=0.0
        ),
    )
    for S in (1e6, 1e9):
        assert collective_time_s("allreduce", S, 64, 8, h) == collective_time_s("allreduce", S, 64, 8, off)
    # A100 (no NVLS): unchanged by the caps it does not have
    a = load_cluster("a100-80g")
    assert a.intra_link.nvls_tree_channel_bw_bytes_per_s == 0
    # with NVLSTree the all-reduce is never slower than without it (the model takes the minimum)
    for S in (1e5, 1e7, 1e9, 1e10):
        for n in (16, 32, 256, 2048):
            assert collective_time_s("allreduce", S, n, 1, h) <= collective_time_s("allreduce", S, n, 1, off)


def test_nvls_tree_in_the_array_path_matches_scalars():
    h = load_cluster("h100-sxm")
    sizes = np.array([1e4, 1e6, 1e8, 1e10])
    arr = collective_time_s("allreduce", sizes, 256, 1, h)
    assert arr == pytest.approx([collective_time_s("allreduce", float(s), 256, 1, h) for s in sizes])
    lat = collective_latency_s("allreduce", 256, 1, h, nbytes=1e10)
    assert lat == pytest.approx(25e-6 + 2 * 5 * NVLS_TREE_STEP_S)


def test_nvls_tree_caps_are_validated_and_round_trip():
    from costmodel.spec.errors import SpecError
    from costmodel.spec.presets import cluster_from_dict, cluster_to_dict
    from costmodel.spec.specs import LinkSpec

    with pytest.raises(SpecError):
        LinkSpec(bw_bytes_per_s=1e9, nvls_tree_channel_bw_bytes_per_s=-1.0)
    h = load_cluster("h100-sxm")
    assert cluster_from_dict(cluster_to_dict(h)).intra_link == h.intra_link
    assert h.intra_link.nvls_tree_channel_bw_bytes_per_s == pytest.approx(45.5e9)
    assert load_cluster("b200").intra_link.nvls_tree_2node_channel_bw_bytes_per_s == pytest.approx(96e9)


def test_nvls_allreduce_inside_a_hopper_node():
    # H100 node: NVLS moves S once at 0.85 of 360 GB/s, plus 25 us; the ring would move
    # 2 * 7/8 S at 360 GB/s: 1 GB: 3.29 ms against 4.86 ms
    h = load_cluster("h100-sxm")
    S = 1e9
    assert collective_time_s("allreduce", S, 8, 1, h) == pytest.approx(S / (360e9 * 0.85) + 25e-6)
    # no NVLS on A100 (nvls_efficiency 0): the ring, as before
    a = load_cluster("a100-80g")
    assert collective_time_s("allreduce", S, 8, 1, a) == pytest.approx(2 * 7 / 8 * S / 234e9 + BASE + 14 * A_I)
    # NVLS is an all-reduce algorithm: all-gather stays a (Simple) ring
    assert collective_time_s("allgather", S, 8, 1, h) == pytest.approx(7 / 8 * S / 360e9 + BASE + 7 * 3.4e-6)


def test_more_nic_bandwidth_never_slows_a_collective():
    from dataclasses import replace

    h = load_cluster("h100-sxm")
    for kind in ("allreduce", "allgather", "reducescatter"):
        for size, stride in ((16, 1), (64, 1), (32, 2), (128, 8)):
            prev = None
            for bw in (12.5e9, 25e9, 50e9, 100e9):
                c = replace(h, inter_link=replace(h.inter_link, bw_bytes_per_s=bw))
                t = collective_time_s(kind, 1e8, size, stride, c)
                assert prev is None or t <= prev + 1e-15
                prev = t


def test_nvls_efficiency_is_validated():
    from costmodel.spec.errors import SpecError
    from costmodel.spec.specs import LinkSpec

    with pytest.raises(SpecError):
        LinkSpec(bw_bytes_per_s=1e9, nvls_efficiency=1.5)
    with pytest.raises(SpecError):
        LinkSpec(bw_bytes_per_s=1e9, nvls_efficiency=-0.1)


# --------------------------------------------------------------------------- NCCL's ring plateau
def test_ring_plateau_only_across_nodes_and_only_for_allreduce(a100):
    # tuning.cc ncclTopoGetAlgoTime: Ring + Simple + nNodes > 1 + AllReduce, once
    # nBytes / (nChannels * nRanks) >= 64 (one channel per rank of the node here)
    assert ring_plateau_factor(1e9, 8, 1) == 1.0  # one node: never
    assert ring_plateau_factor(64 * 8 * 32 - 1, 8, 4) == 1.0  # just below 64 B per rank and channel
    assert ring_plateau_factor(64 * 8 * 32, 8, 4) == RING_PLATEAU_LATENCY_FACTOR
    arr = ring_plateau_factor(np.array([1e3, 1e9]), 8, 4)
    assert arr.tolist() == [1.0, RING_PLATEAU_LATENCY_FACTOR]
    # all-gather and reduce-scatter rings keep NCCL's unscaled latency across nodes
    assert collective_latency_s("allgather", 32, 1, a100, nbytes=1e9) == pytest.approx(BASE + 28 * A_I_AMD + 3 * A_E)


def test_ring_plateau_raises_a_large_multinode_ring_allreduce(a100):
    # 1 GB over 2 nodes x 1 GPU: the Simple ring wins and pays 1.4 x its base and 2 network steps, so its
    # latency rises by exactly 0.4 x (base + 2 x A_E) over the unscaled ring
    lat = collective_latency_s("allreduce", 2, 8, a100, nbytes=1e9)
    unscaled = BASE + ring_latency_s("allreduce", 1, 2, A_I, A_E)
    assert lat == pytest.approx(RING_PLATEAU_LATENCY_FACTOR * unscaled)
    assert lat - unscaled == pytest.approx(0.4 * (BASE + 2 * A_E))
