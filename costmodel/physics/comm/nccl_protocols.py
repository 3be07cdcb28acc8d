"""NCCL's three protocols (LL, LL128, Simple) as its own cost model prices the ring and the tree.

NCCL times every (algorithm, protocol) pair with ``latency + bytes / bandwidth`` and runs the fastest
(NVIDIA/nccl ``src/graph/tuning.cc``@5067397, ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``). The
protocols trade latency for bandwidth:

* **Simple**: the full link bandwidth, the largest per-step latency (NVLink ring step 3.4 us, network 14 us);
* **LL128**: 0.92 of it (``busBw * 0.92``; the tree's ``120/128`` after its own 0.92), steps of 1.9 us (NVLink)
  and 4.0 us (network); enabled by default on Hopper/Blackwell (and Ampere) NVLink nodes with PCIe-switched
  NICs (``pEnable`` for ``NCCL_PROTO_LL128``: ``typeInter <= PATH_PXN``, ``typeIntra <= PATH_NVB``);
* **LL**: half of it (the tree's ``1/3.8``), capped by ``llMaxBws``, steps of 0.6 / 2.7 us: tiny messages.

Each protocol also pays a base latency once per collective (``baseLatencies``: ring 6.6 / 14.0 / 8.4 us, tree
6.8 / 14.0 / 8.4 us for LL / LL128 / Simple). In a ring that crosses nodes an NVLink step costs at least the
host's network post overhead (``getNetOverhead``: 1 us on Intel x86 and Arm hosts, 2 us on AMD x86; three
times that under Simple): "Inter-node rings still have to launch nsteps * net overhead". With one GPU per
node the ring's network steps take the tree's network latency ("with ppn=1 latencies are fully exposed").

The model keeps the cluster's per-step latencies (``LinkSpec.latency_s``) as the Simple ring's step on that
link (the presets carry NCCL's 3.4 us NVLink and 14 us network figures) and scales the other protocols' and
the tree's steps by NCCL's ratios, so a user's link latency still moves every protocol.

Across nodes the ring's LL128 bus bandwidth is capped at the search graph's channels times
``perChMaxRingLL128Bws`` (tuning.cc@5067397 l. 329, ``busBw = min(busBw * 0.92, nChannels * perChMaxRingLL128Bw)``;
:func:`ring_ll128_cap_bytes_per_s`): on an 8-NIC Hopper node 8 x 36.7 = 293.6 GB/s, below the 0.92 of the NICs'
bus bandwidth, which moves NCCL's LL128 -> Simple switch for an 80-rank all-gather to about 228 MiB, where
measured runs step (``benchmarks/notes/2026-12-06-nccl-multinode-allgather.md``). Not modelled: the cap inside one
node (its ring channels depend on the NVLink topology search, not carried), ``perChMaxTreeBws``, PAT (one GPU per
node only), CollNet.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from costmodel.spec.precision import generation

PROTOCOLS = ("LL", "LL128", "Simple")

#: ``baseLatencies`` (us), (LL, LL128, Simple): tuning.cc@5067397 ``ncclTunerConstantsDefaults``
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
#: ``hwLatencies`` (us) per link class and algorithm, (LL, LL128, Simple): the same table
HW_LATENCY_US = {
    ("nvlink", "tree"): (0.6, 1.25, 4.0),
    ("nvlink", "ring"): (0.6, 1.9, 3.4),
    ("net", "tree"): (5.0, 8.5, 14.0),
    ("net", "ring"): (2.7, 4.0, 14.0),
}
#: ``getNetOverhead`` (us): x86 Intel and other hosts 1.0, x86 AMD 2.0
NET_OVERHEAD_US = {"amd": 2.0, "other": 1.0}
#: ring bus-bandwidth factor per protocol (``busBw * .5`` LL, ``* 0.92`` LL128) and the tree's after its 0.92
RING_BW_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
TREE_BW_FACTOR = {"LL": 1.0 / 3.8, "LL128": 120.0 / 128.0, "Simple": 1.0}
#: ``llMaxBws`` (GB/s): one node by GPU generation; across nodes by host CPU, two nodes / more than two
LL_MAX_BW_GBPS_ONE_NODE = {"ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BW_GBPS_NODES = {"amd": (22.5, 19.0), "other": (39.0, 20.4)}

#: devices whose hosts are AMD x86 in their reference systems (DGX A100: dual AMD EPYC 7742, NVIDIA DGX A100
#: datasheet); every other preset's hosts are Intel Xeon (DGX H100/H200/B200/B300) or Grace (GB200/GB300)
AMD_HOSTED = ("A100",)


def host_vendor(device_name: str) -> str:
    """``amd`` or ``other``: the host CPU class NCCL's network overhead and LL cap depend on.

    >>> host_vendor("A100-SXM4-80GB"), host_vendor("B200")
    ('amd', 'other')
    """
    return "amd" if device_name.upper().startswith(AMD_HOSTED) else "other"


def step_latency_s(link_latency_s: float, cls: str, algo: str, proto: str) -> float:
    """One step of ``algo`` under ``proto`` on a link whose Simple ring step is ``link_latency_s``
    (NCCL's ratio of the two hardware latencies times the cluster's figure).

    >>> round(step_latency_s(3.4e-6, "nvlink", "ring", "LL128") * 1e6, 2)
    1.9
    """
    i = PROTOCOLS.index(proto)
    return link_latency_s * HW_LATENCY_US[(cls, algo)][i] / HW_LATENCY_US[(cls, "ring")][2]


def ring_steps_s(
    proto: str, intra_s: float, inter_s: float, nodes: int, ppn: int, device_name: str
) -> tuple[float, float]:
    """(NVLink step, network step) of NCCL's ring under ``proto``, the links' Simple steps being ``intra_s`` and
    ``inter_s``: across nodes the NVLink step is at least the host's network overhead (three times it under
    Simple), and with one GPU per node the network step is the tree's.

    >>> [round(x * 1e6, 2) for x in ring_steps_s("Simple", 3.4e-6, 14e-6, 4, 8, "A100-SXM4-80GB")]
    [6.0, 14.0]
    """
    a_i = step_latency_s(intra_s, "nvlink", "ring", proto)
    a_e = step_latency_s(inter_s, "net", "tree" if ppn == 1 else "ring", proto)
    if nodes > 1:
        a_i = max(a_i, NET_OVERHEAD_US[host_vendor(device_name)] * (3 if proto == "Simple" else 1) * 1e-6)
    return a_i, a_e


def base_latency_s(algo: str, proto: str) -> float:
    """NCCL's base latency of one collective of ``algo`` under ``proto``."""
    return BASE_LATENCY_US[algo][PROTOCOLS.index(proto)] * 1e-6


#: ``perChMaxRingLL128Bws`` (GB/s per channel) by generation, the same for 1, 2 and more nodes (tuning.cc@5067397
#: l. 184-190); Hopper's where the generation is unknown
PER_CH_MAX_RING_LL128_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}


def ring_channels(nics: int, nic_bw_bytes_per_s: float, device_name: str) -> int:
    """The ring channels NCCL's topology search gives a node driving ``nics`` NICs: one per NIC, doubled by
    ``ncclTopoDupChannels`` (search.cc@5067397 l. 1036-1049) unless the compute capability is above 8.0, the
    channel's bandwidth below 50 GB/s (a 400 Gb/s NIC's channel runs at 48) and there are more than 4 channels.

    >>> ring_channels(8, 50e9, "H100"), ring_channels(4, 50e9, "H100"), ring_channels(8, 25e9, "A100"), ring_channels(8, 100e9, "B300")
    (8, 8, 16, 16)
    """
    newer = generation(device_name) in ("hopper", "blackwell")
    return nics if newer and nic_bw_bytes_per_s <= 50e9 and nics > 4 else 2 * nics


@lru_cache(maxsize=256)
def ring_ll128_cap_bytes_per_s(nics: int, nic_bw_bytes_per_s: float, device_name: str) -> float:
    """NCCL's cap on the ring LL128 bus bandwidth across nodes (module doc): :func:`ring_channels` times
    ``perChMaxRingLL128Bws``.

    >>> round(ring_ll128_cap_bytes_per_s(8, 50e9, "H100") / 1e9, 1)
    293.6
    """
    per_ch = PER_CH_MAX_RING_LL128_GBPS.get(generation(device_name), 36.7)
    return ring_channels(nics, nic_bw_bytes_per_s, device_name) * per_ch * 1e9


def ll_max_bw_bytes_per_s(nodes: int, device_name: str) -> float:
    """NCCL's cap on the LL protocol's bus bandwidth (``llMaxBws``): on one node by GPU generation (Hopper's
    where unknown), across nodes by host CPU."""
    if nodes == 1:
        return LL_MAX_BW_GBPS_ONE_NODE.get(generation(device_name), 141.0) * 1e9
    two, more = LL_MAX_BW_GBPS_NODES[host_vendor(device_name)]
    return (two if nodes == 2 else more) * 1e9


def ring_latency_s(kind: str, intra: int, inter: int, alpha_intra_s: float, alpha_inter_s: float) -> float:
    """Latency of NCCL's ring over ``intra`` ranks on each of ``inter`` nodes.

    NCCL tuning.cc (@5067397 ``ncclTopoTuneModel``; the same since 2.7, @01afd20):
    ``nsteps = 2 (p-1)`` (all-reduce) or ``p - 1`` (all-gather, reduce-scatter),
    ``nInterSteps = 2 (nodes - 1)`` (all-reduce across nodes) or ``nodes - 1``; latency
    ``(nsteps - nInterSteps) alpha_intra + nInterSteps alpha_inter``. (NCCL's "plateau" factor on
    the multi-node ring all-reduce depends on the size: :func:`ring_plateau_factor`.)

    >>> ring_latency_s("allgather", 8, 4, 1.0, 10.0)   # p = 32: 28 intra steps + 3 inter steps
    58.0
    >>> ring_latency_s("allreduce", 8, 4, 1.0, 10.0)   # 62 steps: 56 intra + 2 * 3 inter
    116.0
    >>> ring_latency_s("allreduce", 8, 1, 1.0, 10.0)   # 2 * 7 intra steps
    14.0
    """
    p = intra * inter
    if p <= 1:
        return 0.0
    if kind == "allreduce":
        nsteps, n_inter = 2 * (p - 1), 2 * (inter - 1)
    else:
        nsteps, n_inter = p - 1, inter - 1
    return (nsteps - n_inter) * alpha_intra_s + n_inter * alpha_inter_s


#: NCCL's "plateau effect of ring": a ring all-reduce across nodes under the Simple protocol is
#: expected to take 1.4x its modelled latency on compute capability 8.0 and later (1.9x before),
#: once every rank's share per channel reaches 64 bytes (NVIDIA/nccl src/graph/tuning.cc@5067397,
#: ``ncclTopoGetAlgoTime``: ``if (algorithm == NCCL_ALGO_RING && protocol == NCCL_PROTO_SIMPLE &&
#: comm->nNodes > 1 && coll == ncclFuncAllReduce && nBytes / (comm->nChannels * comm->nRanks) >= 64)
#: lat *= comm->minCompCap < 80 ? 1.9 : 1.4``; 2.8-era @01afd20: 1.9x). Every preset is sm80 or
#: later (A100, Hopper, Blackwell), so 1.4.
RING_PLATEAU_LATENCY_FACTOR = 1.4
RING_PLATEAU_MIN_BYTES = 64


def ring_plateau_factor(nbytes, intra: int, inter: int):
    """NCCL's factor on the latency of a ring all-reduce of ``nbytes`` over ``intra`` ranks on each
    of ``inter`` nodes (:data:`RING_PLATEAU_LATENCY_FACTOR` across nodes once
    ``nbytes / (channels * p) >= 64``, else 1); element-wise for arrays.

    NCCL divides by its channel count, which the model does not carry: it takes one channel per
    rank of the node (one per NIC, as for NVLSTree: nccl#1041), the fewest an 8-NIC node runs, so
    the factor starts at the smallest size NCCL could start it at. Below that size the ring's
    latency (linear in the ranks) has already lost to the tree's across nodes.

    >>> ring_plateau_factor(1e9, 8, 4), ring_plateau_factor(1e3, 8, 4), ring_plateau_factor(1e9, 8, 1)
    (1.4, 1.0, 1.0)
    """
    if inter <= 1:
        return 1.0
    threshold = RING_PLATEAU_MIN_BYTES * max(intra, 1) * intra * inter
    if isinstance(nbytes, np.ndarray):
        return np.where(nbytes >= threshold, RING_PLATEAU_LATENCY_FACTOR, 1.0)
    return RING_PLATEAU_LATENCY_FACTOR if nbytes >= threshold else 1.0


def tree_latency_s(intra: int, inter: int, alpha_intra_s: float, alpha_inter_s: float) -> float:
    """Latency of NCCL's tree all-reduce: up and down a chain of ``intra`` ranks inside each node
    and a double binary tree over ``inter`` nodes (tuning.cc:
    ``2 * ((nRanks/nNodes - 1) * intraLat + log2i(nNodes) * interLat)``, ``log2i`` = floor).

    >>> tree_latency_s(8, 32, 1.0, 10.0)   # 2 * (7 * 1 + 5 * 10)
    114.0
    """
    if intra * inter <= 1:
        return 0.0
    depth = int(math.floor(math.log2(inter))) if inter > 1 else 0
    return 2 * ((intra - 1) * alpha_intra_s + depth * alpha_inter_s)


#: latency of an NVLS (NVLink SHARP) all-reduce: NCCL's NVLink ``hwLat`` for NVLS/Simple is
#: 25 us, with no base latency (src/graph/tuning.cc@5067397, ``ncclTunerConstantsDefaults``)
NVLS_LATENCY_S = 25e-6

#: an NVLSTree network step costs NCCL 20.9 us against 14 us for a tree step (tuning.cc@5067397
#: ``hwLatencies`` NET, Simple): the preset's per-step network latency is scaled by that ratio
NVLS_TREE_NET_STEP_RATIO = 20.9 / 14.0


def nvls_tree_latency_s(inter: int, alpha_inter_s: float) -> float:
    """Latency of NCCL's NVLSTree all-reduce over ``inter >= 2`` nodes: the NVLS step inside the
    node once, then up and down the tree between nodes (tuning.cc:
    ``intraLat + 2 * log2i(nNodes) * interLat``, NVLink ``hwLat`` for NVLSTree/Simple 25 us).

    The preset's network step latency ``alpha_inter_s`` stands for NCCL's tree step (14 us) and is
    scaled by :data:`NVLS_TREE_NET_STEP_RATIO` (20.9 / 14).

    >>> round(nvls_tree_latency_s(128, 14e-6) * 1e6, 1)   # 25 + 2 * 7 * 20.9
    317.6
    """
    return NVLS_LATENCY_S + 2 * int(math.floor(math.log2(inter))) * alpha_inter_s * NVLS_TREE_NET_STEP_RATIO
