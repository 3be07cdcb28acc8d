"""Collective communication time with latency (alpha) and bandwidth (beta) terms.

Groups are laid out as Megatron-LM does (rank order tp, cp, dp, pp; see :func:`group_stride`):
a group of ``size`` ranks at ``stride`` occupies ``intra`` ranks of each node it touches and
spans ``inter`` nodes. Inside a node traffic uses NVLink, across nodes every GPU uses its own
NIC (one NIC per GPU, as on DGX A100/H100).

Bandwidth terms follow NCCL's algorithms and its cost model (``ncclTopoTuneModel`` in
``src/graph/tuning.cc``, NVIDIA/nccl@5067397 and the 2.8-era @01afd20; Hu et al. 2025,
"Demystifying NCCL", arXiv 2507.04786), in the bus-bandwidth convention of nccl-tests
(PERFORMANCE.md): an all-reduce moves ``2 (p-1)/p`` of the buffer per GPU, all-gather and
reduce-scatter ``(p-1)/p``.

* Ring (every collective): one ring of ``p = intra * nodes`` ranks per channel, its chunks
  pipelined through NVLink and NIC hops alike, so the bus bandwidth is the slower of the two
  (tuning.cc: ``busBw = nChannels * bwInter`` across nodes, one bottleneck, no sum of phases):
  ``min(nvlink, intra * nic)``: a node's ``intra`` ranks drive ``intra`` NICs in parallel.
* Tree (AllReduce across nodes): a chain inside each node (up and down: ``2 S`` over NVLink)
  and NCCL's double binary tree between nodes. Each node sends ``2 S`` over its NICs when there
  are more than two nodes (tuning.cc: tree algbw = ``busBw * .5``, ring ``busBw * p / 2(p-1)``),
  but only ``S`` on two nodes (each node is the root of one of the two trees, so the tree can
  beat the network-bound ring there: nccl-tests issue 196, "on two nodes NCCL uses the tree ...
  which can go beyond the network bottleneck"); times 1/0.92 (tuning.cc ``busBw * .92``).
* NVLS (AllReduce inside one node of NVSwitch GPUs, Hopper and later): NVLink SHARP reduces in
  the switch, so each GPU sends and receives the buffer once (``S``, not ``2 (p-1)/p S``) at
  ``intra_link.nvls_efficiency`` of the link rate (tuning.cc ``nvlsEfficiency``: 0.85 Hopper,
  0.74 Blackwell) with a 25 us latency (tuning.cc NVLink ``hwLat`` for NVLS/Simple).

* NVLSTree (AllReduce across nodes of NVSwitch GPUs, Hopper and later: NCCL's default there at
  scale): NVLS inside each node, NCCL's tree between nodes. tuning.cc (``NCCL_ALGO_NVLS_TREE``)
  takes per channel the least of the NVLS rate inside the node, the network rate (doubled on two
  nodes, where each node roots one of the two trees) and ``perChMaxNVLSTreeBws`` (Hopper 45.5 GB/s
  per channel across more than two nodes, 57.7 on two; Blackwell 80 / 96), without the tree's 0.92;
  here the NVLS term is the one-node NVLS time ``S / (nvlink nvls_efficiency)``, the network term
  the tree's ``2 S`` (``S`` on two nodes) over the node's ``k`` NICs, and the cap ``2 S / (k cap)``
  with one search channel per NIC (``k`` channels: NVIDIA/nccl issue 1041, 8 NVLSTree channels on
  an 8-NIC H100 node). NVLS needs at least two GPUs of a node in the group
  (src/transport/nvls.cc ``ncclNvlsInit``: ``gpuCount < 2`` disables it). Latency (tuning.cc):
  the NVLink NVLS latency once plus ``2 log2i(nodes)`` network steps, each 20.9 / 14 of a tree step.

NCCL picks the fastest algorithm for each message size; the model takes the minimum.

* Measured tables (issue 38): :func:`_table_times` (``--kernels measured``; by default training's all-to-all).

* Medium sizes: NCCL corrects its own tree model there ("Trees are not perfectly sticking to the
  model for medium sizes", tuning.cc ``treeCorrectionFactor``, ``ncclTopoGetAlgoTime``): the tree
  all-reduce's bandwidth is scaled by a factor per power of two of the size from 64 B (0.5 at
  512 KiB-4 MiB, 0.9 from 128 MiB, 1 from 512 MiB), and so is NVLSTree's on Blackwell with x86
  hosts (``intra_link.nvls_tree_medium_correction``). NCCL both chooses and is timed by the
  corrected model, each protocol by its own row.

Protocols (:mod:`costmodel.physics.comm.nccl_protocols`): every ring and tree is priced under NCCL's LL,
LL128 and Simple protocols, each with its bandwidth factor, its per-step latencies and its base latency,
and the fastest is taken, as NCCL does; NVLS and NVLSTree run Simple only. Until 2026-12-06 the model had
Simple only, at an assumed 8 us per NVLink step and 15 us per network step: 2-4x too slow on the small
and medium messages of the measured one-node tables and of multi-node nccl-tests runs
(``benchmarks/component_collectives.py``; ``benchmarks/notes/2026-12-06-nccl-protocols.md``).

Latency terms follow the same cost model. ``link.latency_s`` is one step of the Simple ring on that
link (the presets carry NCCL's 3.4 us NVLink and 14 us network figures); the other protocols' and the
tree's steps are NCCL's ratios of it. A group of ``p = intra * nodes`` ranks pays NCCL's base latency
once and:

* AllGather / ReduceScatter: NCCL runs them as rings only (tuning.cc skips the tree for every
  collective but AllReduce), ``p - 1`` steps of which ``nodes - 1`` cross the network:
  ``(p - nodes) alpha_intra + (nodes - 1) alpha_inter``. The latency grows linearly with the
  number of ranks. (NCCL 2.23's PAT algorithm, Jeaugey 2025, arXiv 2506.20252, is logarithmic
  but only for one GPU per node and postdates the published runs; not modelled. Its cost in
  tuning.cc@5067397 (``ncclPatEnable``: only where ``nNodes == nRanks``): busBw x 0.75, latency 8 us + ``log2i(nodes)`` x 14 / 3.5 us + 2.8 us per rank,
  still linear in the ranks; no measurement of it was found to check it against.)
* AllReduce, ring: ``2 (p - 1)`` steps, ``2 (nodes - 1)`` of them across the network, and across
  nodes NCCL's "plateau effect of ring": the Simple ring all-reduce's latency times 1.4
  (:data:`RING_PLATEAU_LATENCY_FACTOR`, :func:`ring_plateau_factor`); tree:
  ``2 ((intra - 1) alpha_intra + floor(log2 nodes) alpha_inter)``.
* In a ring that crosses nodes an NVLink step costs at least the host's network post overhead
  (:func:`costmodel.physics.comm.nccl_protocols.ring_steps_s`).

>>> from costmodel.spec.presets import load_cluster
>>> cl = load_cluster("a100-80g")
>>> t = collective_time_s("allreduce", 100e6, 8, 1, cl)   # 100 MB over 8 GPUs of one node, Simple ring
>>> round(t * 1e3, 3)  # 2*7/8*100e6 / (300e9*0.78) + 8.4 us + 14 * 3.4 us
0.804
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from costmodel.physics.comm import nccl_protocols
from costmodel.physics.comm.nccl_protocols import (  # noqa: F401  (re-exported: the latency model's parts)
    NVLS_LATENCY_S,
    RING_PLATEAU_LATENCY_FACTOR,
    nvls_tree_latency_s,
    ring_latency_s,
    ring_plateau_factor,
    tree_latency_s,
)
from costmodel.physics.comm.nccl_correction import NVLS_TREE_CORRECTION_SIZES, tree_correction
from costmodel.spec.specs import ClusterSpec, DmaEngineClass
from costmodel.physics.kernels.measured import table_collective
from costmodel.physics.comm.groups import layout, comm_scope

#: the engines a stream was given: (engine class, number of its engines), see :mod:`costmodel.physics.comm.dma`;
#: ``None`` means every engine of the class serving the scope (one collective at a time)
Engines = Optional[Tuple[DmaEngineClass, int]]

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p", "ring_p2p")

#: None in the planner; a list: every :func:`collective_time_s` call appends ``(kind, nbytes, size, stride, cluster,
#: algorithm)`` (``benchmarks/component_collectives.py --plans`` lists a plan's collectives so)
TRACE: list | None = None


#: NCCL's tree all-reduce reaches 0.92 of the ring's bus bandwidth (src/graph/tuning.cc,
#: ``if (a == NCCL_ALGO_TREE) busBw = std::min(busBw*.92, ...)``)
TREE_BW_FACTOR = 0.92


def _bw_s(kind: str, nbytes: float, n: int, bw: float) -> float:
    """Bandwidth term of a ring over ``n`` ranks (bus-bandwidth convention, no latency);
    ``nbytes`` may be a numpy array."""
    if n <= 1:
        return 0.0
    return (2 if kind == "allreduce" else 1) * (n - 1) / n * nbytes / bw


def _ring_bw_s(kind: str, nbytes: float, k: int, nodes: int, bi: float, be: float) -> float:
    """Bandwidth term of NCCL's ring over ``k`` ranks on each of ``nodes`` nodes: one pipelined
    ring, as fast as its slowest hop, an NVLink hop (``bi``) or a node's ``k`` NICs (``k be``).

    >>> _ring_bw_s("allgather", 8.0, 8, 4, 2.0, 1.0) == 31 / 32 * 8.0 / 2.0   # NVLink-bound
    True
    >>> _ring_bw_s("allgather", 8.0, 1, 4, 2.0, 1.0) == 3 / 4 * 8.0 / 1.0     # one NIC per node
    True
    """
    if nodes == 1:
        return _bw_s(kind, nbytes, k, bi)
    return _bw_s(kind, nbytes, k * nodes, min(bi, k * be))


def _tree_bw_s(nbytes: float, k: int, nodes: int, bi: float, be: float, proto: str = "Simple") -> float:
    """Bandwidth term of NCCL's tree all-reduce across ``nodes >= 2`` nodes: the chain inside a
    node moves ``2 S`` over NVLink (reduce up, broadcast down); between nodes each node sends
    ``2 S`` over its ``k`` NICs, or ``S`` when there are only two nodes (each is the root of one
    of the two trees); the slower of the two, at 0.92 of the ring's bus bandwidth, the protocol's
    factor (:data:`costmodel.physics.comm.nccl_protocols.TREE_BW_FACTOR`) and NCCL's medium-size
    correction of that protocol (:func:`tree_correction`; tuning.cc).

    >>> _tree_bw_s(1e9, 8, 2, 2.0, 0.125) == 1e9 / 1.0 / TREE_BW_FACTOR   # two nodes: S / (k be)
    True
    """
    t_intra = 2 * nbytes / bi if k > 1 else 0.0
    t_net = (1 if nodes == 2 else 2) * nbytes / (k * be)
    t = np.maximum(t_intra, t_net) if isinstance(nbytes, np.ndarray) else max(t_intra, t_net)
    return t / (TREE_BW_FACTOR * nccl_protocols.TREE_BW_FACTOR[proto] * tree_correction(nbytes, proto=proto))


def _nvls_tree_bw_s(nbytes: float, k: int, nodes: int, bi: float, be: float, nvls: float, cap_ch: float):
    """Bandwidth term of NCCL's NVLSTree all-reduce across ``nodes >= 2`` nodes of ``k >= 2`` ranks:
    the slowest of NVLS inside the node, the tree's network traffic over the node's ``k`` NICs
    (``2 S``; ``S`` on two nodes) and NCCL's per-channel cap ``cap_ch`` on ``k`` channels
    (tuning.cc ``perChMaxNVLSTreeBws``: busBw ``k cap_ch``, algorithm bandwidth half of it).

    >>> _nvls_tree_bw_s(1.0, 8, 4, 2.0, 0.25, 1.0, 1.0) == 2 * 1.0 / (8 * 0.25)   # network-bound
    True
    >>> _nvls_tree_bw_s(1.0, 8, 4, 2.0, 1.0, 1.0, 0.1) == 2 * 1.0 / (8 * 0.1)     # NCCL's cap
    True
    """
    t_nvls = nbytes / (bi * nvls)
    t_net = (1 if nodes == 2 else 2) * nbytes / (k * be)
    t_cap = 2 * nbytes / (k * cap_ch)
    if isinstance(nbytes, np.ndarray):
        return np.maximum(np.maximum(t_nvls, t_net), t_cap)
    return max(t_nvls, t_net, t_cap)


def _pick(array: bool, t, lat, t_alt, lat_alt):
    """The faster of two (time, latency) candidates, element-wise for arrays."""
    if array:
        return np.minimum(t, t_alt), np.where(t_alt < t, lat_alt, lat)
    return (t_alt, lat_alt) if t_alt < t else (t, lat)


def _nccl_s(
    kind: str, nbytes: float, k: int, nodes: int, cluster: ClusterSpec, bi: float, be: float
) -> tuple[float, float]:
    """(total seconds, latency seconds) of AllReduce/AllGather/ReduceScatter as NCCL would pick it,
    ``bi``/``be`` the stream's intra-/inter-node bandwidth (:func:`link_bw_bytes_per_s`).

    ``nbytes`` may be a numpy array (the cost tables score every layer count of a stage at once):
    each entry picks its own algorithm, so the time is exact where the ring/tree choice flips,
    which an affine fit over the layer count is not.
    """
    array = isinstance(nbytes, np.ndarray)
    if k * nodes <= 1 or (not array and nbytes <= 0):
        return 0.0, 0.0
    a_i, a_e = cluster.intra_link.latency_s, cluster.inter_link.latency_s
    dev = cluster.device.name
    t_bw = _ring_bw_s(kind, nbytes, k, nodes, bi, be)
    bus = bi if nodes == 1 else min(bi, k * be)  # the ring's bus bandwidth (_ring_bw_s)
    ll_slow = max(1.0, bus / nccl_protocols.ll_max_bw_bytes_per_s(nodes, dev))
    # LL128 across nodes: NCCL's per-channel cap on the search graph's channels (one per NIC, k NICs)
    ll128_slow = 1.0
    if nodes > 1:
        cap = nccl_protocols.ring_ll128_cap_bytes_per_s(k, cluster.inter_link.bw_bytes_per_s, dev)
        ll128_slow = max(1.0, nccl_protocols.RING_BW_FACTOR["LL128"] * bus / cap)
    slow_of = {"LL": ll_slow, "LL128": ll128_slow, "Simple": 1.0}  # each protocol's caps beyond its bandwidth factor
    t = lat = None
    for proto in nccl_protocols.PROTOCOLS:
        s_i, s_e = nccl_protocols.ring_steps_s(proto, a_i, a_e, nodes, k, dev)
        lat_p = nccl_protocols.base_latency_s("ring", proto) + ring_latency_s(kind, k, nodes, s_i, s_e)
        if kind == "allreduce" and proto == "Simple":
            lat_p = lat_p * ring_plateau_factor(nbytes, k, nodes)
        slow = 1.0 / nccl_protocols.RING_BW_FACTOR[proto] * slow_of[proto]
        t_p = t_bw * slow + lat_p
        t, lat = (t_p, lat_p) if t is None else _pick(array, t, lat, t_p, lat_p)
    if kind == "allreduce" and nodes > 1:
        for proto in nccl_protocols.PROTOCOLS:
            s_i = nccl_protocols.step_latency_s(a_i, "nvlink", "tree", proto)
            s_e = nccl_protocols.step_latency_s(a_e, "net", "tree", proto)
            lat_tree = nccl_protocols.base_latency_s("tree", proto) + tree_latency_s(k, nodes, s_i, s_e)
            t_tree = _tree_bw_s(nbytes, k, nodes, bi, be, proto)
            if proto == "LL":
                floor = 2 * nbytes / nccl_protocols.ll_max_bw_bytes_per_s(nodes, dev)
                t_tree = np.maximum(t_tree, floor) if array else max(t_tree, floor)
            t, lat = _pick(array, t, lat, t_tree + lat_tree, lat_tree)
    nvls = cluster.intra_link.nvls_efficiency
    if kind == "allreduce" and nodes == 1 and nvls > 0:
        t, lat = _pick(array, t, lat, nbytes / (bi * nvls) + NVLS_LATENCY_S, NVLS_LATENCY_S)
    nt = _nvls_tree_s(nbytes, k, nodes, cluster, bi, be) if kind == "allreduce" else None
    if nt is not None:
        t, lat = _pick(array, t, lat, nt[0] + nt[1], nt[1])
    if array:
        on = np.asarray(nbytes) > 0
        return np.where(on, t, 0.0), np.where(on, lat, 0.0)
    return t, lat


def _nvls_tree_s(nbytes, k: int, nodes: int, cluster: ClusterSpec, bi: float, be: float):
    """(bandwidth term, latency) of NCCL's NVLSTree all-reduce over ``k`` ranks on each of ``nodes`` nodes, or None
    where it does not run: one node, fewer than two GPUs of a node, or a link without NVLS or NVLSTree caps."""
    intra = cluster.intra_link
    cap_ch = intra.nvls_tree_2node_channel_bw_bytes_per_s if nodes == 2 else intra.nvls_tree_channel_bw_bytes_per_s
    if nodes < 2 or k < 2 or intra.nvls_efficiency <= 0 or cap_ch <= 0:
        return None
    t_nt = _nvls_tree_bw_s(nbytes, k, nodes, bi, be, intra.nvls_efficiency, cap_ch)
    if intra.nvls_tree_medium_correction:
        t_nt = t_nt / tree_correction(nbytes, NVLS_TREE_CORRECTION_SIZES)
    return t_nt, nvls_tree_latency_s(nodes, cluster.inter_link.latency_s)


def nvls_tree_time_s(nbytes: float, size: int, stride: int, cluster: ClusterSpec) -> float | None:
    """Seconds of an all-reduce NCCL is forced to run as NVLSTree (``NCCL_ALGO=NVLSTree``), or None where NVLSTree
    cannot run it (:func:`_nvls_tree_s`); :func:`collective_time_s` takes it only where it is the fastest.

    >>> from costmodel.spec.presets import load_cluster
    >>> h = load_cluster("h100-sxm")
    >>> round(nvls_tree_time_s(512, 16, 1, h) * 1e6, 1)   # the latency floor: 25 us + 2 network steps of 20.9 us
    66.8
    """
    lay = layout(size, stride, cluster.domain)
    bi, be = link_bw_bytes_per_s(cluster, "intra"), link_bw_bytes_per_s(cluster, "inter")
    nt = _nvls_tree_s(nbytes, lay.intra, lay.inter, cluster, bi, be)
    return None if nt is None else nt[0] + nt[1]


def link_bw_bytes_per_s(cluster: ClusterSpec, scope: str, engines: Engines = None) -> float:
    """Achievable bandwidth per GPU for one collective at ``scope``: the link's effective
    bandwidth, capped by the DMA engines that carry it (engines given x per-engine bandwidth)
    when the engine class has a bandwidth of its own (source document, section 8: "peak DMA
    bandwidth bounds T_comm"; 0 = link-bound, no cap).

    ``engines``: the ``(class, count)`` a stream was given by its DMA assignment
    (:mod:`costmodel.physics.comm.dma`); ``None``: all engines of the class serving ``scope``.

    >>> from costmodel.spec.presets import load_cluster
    >>> cl = load_cluster("sg2262-like")   # 4 CDMA at 64 GB/s, intra link 448 GB/s x 0.85
    >>> cdma = cl.device.engines_for("intra")
    >>> [link_bw_bytes_per_s(cl, "intra", e) / 1e9 for e in (None, (cdma, 2), (cdma, 1))]
    [256.0, 128.0, 64.0]
    """
    link = cluster.intra_link if scope == "intra" else cluster.inter_link
    bw = link.effective_bw_bytes_per_s
    eng, count = engines if engines is not None else (cluster.device.engines_for(scope), None)
    if eng.bw_bytes_per_s > 0:
        bw = min(bw, (eng.count if count is None else count) * eng.bw_bytes_per_s)
    return bw


def collective_time_s(
    kind: str,
    nbytes: float,
    size: int,
    stride: int,
    cluster: ClusterSpec,
    algorithm: str = "ring",
    engines: Engines = None,
    tables: bool | None = None,
) -> float:
    """Seconds for one collective.

    Parameters
    ----------
    kind : one of ``allreduce``, ``allgather``, ``reducescatter``, ``alltoall``, ``p2p`` (one
        message to one peer ``stride`` ranks away) or ``ring_p2p`` (every rank of a ring of
        ``size`` sends one message to its neighbour at once, as ring attention passes K/V blocks:
        a step lasts as long as its slowest hop, which crosses nodes when the ring spans them).
    nbytes : per-GPU buffer: the reduced tensor (all-reduce), the gathered output
        (all-gather), the input (reduce-scatter), the send buffer (all-to-all), the message (p2p);
        a numpy array (one time per entry) for all-reduce, all-gather and reduce-scatter under
        ``ring``.
    size, stride : group size and rank stride (see :func:`group_stride`).
    algorithm : ``ring`` (NCCL ring/tree, the default) or ``direct``: an all-reduce inside one node done by
        reading the peers' buffers over NVLink/NVSwitch, as inference engines do for small messages (vLLM
        ``csrc/custom_all_reduce.cuh``: one-shot, every rank reads the ``size - 1`` peer buffers, one latency;
        two-shot, reduce-scatter then all-gather, two latencies), whichever is faster (serving reads the engine's
        own table where it has one: :mod:`costmodel.physics.tables.allreduce`); other kinds and nodes: ``ring``.
    engines : the ``(engine class, count)`` the stream carrying it was given
        (:func:`costmodel.physics.comm.dma.engines_of`); ``None``: all engines of the class serving the scope.
    tables : a measured nccl-tests table may time it (:func:`_table_times`): None, under ``--kernels measured``; True,
        also without (the caller runs the table's protocol: training's EP all-to-all, NCCL-issued TP); False, never.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: must be one of {', '.join(KINDS)}")
    if algorithm not in ("ring", "direct"):
        raise ValueError(f"algorithm={algorithm!r}: must be 'ring' or 'direct'")
    if isinstance(nbytes, np.ndarray) and (kind in ("alltoall", "p2p", "ring_p2p") or algorithm != "ring"):
        raise ValueError(
            f"nbytes: an array only for all-reduce, all-gather and reduce-scatter under 'ring', "
            f"not {kind} / {algorithm}"
        )
    if TRACE is not None:
        TRACE.append((kind, nbytes, size, stride, cluster, algorithm))
    if isinstance(nbytes, np.ndarray) or _table_times is not _TABLE_RULE:
        # arrays, and a table rule swapped in that reads its caller's plan (benchmarks/component_collectives.py)
        return _collective_time_s(kind, nbytes, size, stride, cluster, algorithm, engines, tables)
    # one time per message shape: the search asks for about 20,000 collectives of under 2,000 shapes
    # (DeepSeek-V3 / 2048 H800); keyed by the cluster's identity, kept with it so that a reused id cannot hit
    key = (kind, nbytes, size, stride, id(cluster), algorithm, engines, tables)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    t = _collective_time_s(kind, nbytes, size, stride, cluster, algorithm, engines, tables)
    if len(_MEMO) > 65536:
        _MEMO.clear()
    _MEMO[key] = (cluster, t)
    return t


_MEMO: dict = {}
collective_time_s.cache_clear = _MEMO.clear  # as an lru_cache: benchmarks start cold (benchmarks/search_speed.py)


def _collective_time_s(kind, nbytes, size, stride, cluster, algorithm, engines, tables):
    """:func:`collective_time_s` past its checks and memo."""
    intra_l, inter_l = cluster.intra_link, cluster.inter_link
    bi, be = link_bw_bytes_per_s(cluster, "intra", engines), link_bw_bytes_per_s(cluster, "inter", engines)
    if kind in ("p2p", "ring_p2p"):
        if size <= 1 or nbytes <= 0:
            return 0.0
        inter = comm_scope(kind, size, stride, cluster.domain) == "inter"
        return nbytes / (be if inter else bi) + (inter_l if inter else intra_l).latency_s
    lay = layout(size, stride, cluster.domain)
    k, nodes = lay.intra, lay.inter
    if _table_times(kind, k, nodes, cluster, algorithm, tables):
        measured = _measured_intra_s(kind, nbytes, k, cluster, engines)
        if measured is not None:
            return measured
    if kind == "alltoall":
        if size <= 1 or nbytes <= 0:
            return 0.0
        # each GPU sends nbytes/size to every peer: (k-1) peers over NVLink, the rest over its NIC
        t_intra = nbytes * (k - 1) / size / bi
        t_inter = nbytes * (size - k) / size / be
        alpha = intra_l.latency_s + (inter_l.latency_s if nodes > 1 else 0.0)
        return max(t_intra, t_inter) + alpha
    if nodes == 1 and algorithm == "direct" and kind == "allreduce" and k > 1 and nbytes > 0:
        alpha = intra_l.latency_s
        return min((k - 1) * nbytes / bi + alpha, 2 * (k - 1) / k * nbytes / bi + 2 * alpha)
    return _nccl_s(kind, nbytes, k, nodes, cluster, bi, be)[0]


#: the collectives the measured nccl-tests tables time (p2p and ring_p2p: none measured)
TABLE_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")


def _table_times(kind: str, k: int, nodes: int, cluster: ClusterSpec, algorithm="ring", tables=None) -> bool:
    """Whether the measured table may time this collective (issue 38): in one node / NVLink domain, run by NCCL
    (not inference engines' ``direct`` peer reads), a kind a table measures, and ``--kernels measured`` set
    (:func:`costmodel.frameworks.stacks.with_measured_kernels`) or ``tables=True`` (``False``: never); the GPU's
    table and its counts then decide (:func:`costmodel.physics.kernels.measured.table_collective`)."""
    on = nodes == 1 and k > 1 and algorithm == "ring" and kind in TABLE_KINDS and tables is not False
    return on and (bool(tables) or bool(cluster.device.kernel_table))


_TABLE_RULE = _table_times  # the rule collective_time_s memoizes under


def collective_evidence(kind: str, nbytes: float, size: int, stride: int, cluster: ClusterSpec, tables=None):
    """The :class:`costmodel.physics.tables.Evidence` of the table look-up timing this collective in
    :func:`collective_time_s` with the same ``tables``, or None where the modelled NCCL algorithms time it."""
    lay = layout(size, stride, cluster.domain)
    if nbytes <= 0 or not _table_times(kind, lay.intra, lay.inter, cluster, "ring", tables):
        return None
    t, ev = table_collective(kind, float(nbytes), lay.intra, cluster.device)
    return ev if t is not None else None


def _measured_intra_s(kind: str, nbytes, k: int, cluster: ClusterSpec, engines: Engines):
    """A collective inside one node timed from the measured nccl-tests table (``cluster.device.kernel_table`` set:
    :func:`costmodel.physics.kernels.measured.table_collective`), slowed by the share of the link the stream's
    engines get (:func:`link_bw_bytes_per_s`); None where no table times it. ``nbytes`` may be an array."""
    share = link_bw_bytes_per_s(cluster, "intra", None) / link_bw_bytes_per_s(cluster, "intra", engines)
    sizes = np.atleast_1d(np.asarray(nbytes, dtype=float))
    out = np.zeros_like(sizes)
    for i, b in enumerate(sizes):
        if b > 0:
            t, _ = table_collective(kind, float(b), k, cluster.device)
            if t is None:
                return None
            out[i] = t * share
    return out if isinstance(nbytes, np.ndarray) else float(out[0])


def collective_latency_s(
    kind: str, size: int, stride: int, cluster: ClusterSpec, nbytes: float = 1.0, engines: Engines = None
) -> float:
    """The latency (alpha) part of one AllReduce/AllGather/ReduceScatter of ``nbytes`` under the
    algorithm NCCL picks for that size (ring, or tree for a small all-reduce across nodes): what
    every extra bucket or per-module collective pays again.

    >>> from costmodel.spec.presets import load_cluster
    >>> cl = load_cluster("a100-80g")   # Simple steps: 3.4 us on NVLink, 14 us on the network
    >>> round(collective_latency_s("allgather", 64, 8, cl) * 1e6, 1)   # 64 nodes, 1 GPU each, LL: 6.6 + 63 * 5 us
    321.6
    >>> round(collective_latency_s("allreduce", 64, 8, cl) * 1e6, 1)   # small: the LL tree, 6.8 + 2 * 6 * 5 us
    66.8
    """
    if kind not in ("allreduce", "allgather", "reducescatter"):
        raise ValueError(f"kind={kind!r}: must be allreduce, allgather or reducescatter")
    lay = layout(size, stride, cluster.domain)
    bi, be = link_bw_bytes_per_s(cluster, "intra", engines), link_bw_bytes_per_s(cluster, "inter", engines)
    return _nccl_s(kind, nbytes, lay.intra, lay.inter, cluster, bi, be)[1]
