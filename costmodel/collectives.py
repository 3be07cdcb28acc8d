"""Collective communication time with latency (alpha) and bandwidth (beta) terms.

Groups are laid out as Megatron-LM does (rank order tp, cp, dp, pp; see :func:`group_stride`):
a group of ``size`` ranks at ``stride`` occupies ``intra`` ranks of each node it touches and
spans ``inter`` nodes. Inside a node traffic uses NVLink, across nodes every GPU uses its own
NIC (one NIC per GPU, as on DGX A100/H100). Spanning groups run hierarchically, as NCCL does:
reduce-scatter inside the node, the inter-node collective on 1/intra of the data on every
rail in parallel, then all-gather inside the node.

Bandwidth terms are the ring algorithm's (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"
convention, nccl-tests PERFORMANCE.md): all-reduce moves ``2 (n-1)/n`` of the buffer per GPU,
all-gather and reduce-scatter ``(n-1)/n``. Latency terms: ring steps inside a node, a tree
(``2 log2 n`` steps) across nodes, as NCCL picks for latency-bound sizes.

>>> from costmodel.presets import load_cluster
>>> cl = load_cluster("a100-80g")
>>> t = collective_time_s("allreduce", 100e6, 8, 1, cl)   # 100 MB over 8 GPUs of one node
>>> round(t * 1e3, 3)  # 2*7/8*100e6 / (300e9*0.78) + 14 * 8us
0.86
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .specs import ClusterSpec

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")


@dataclass(frozen=True)
class GroupLayout:
    """How a communication group maps onto nodes: ``intra`` ranks per node times ``inter`` nodes."""

    intra: int
    inter: int

    @property
    def scope(self) -> str:
        return "inter" if self.inter > 1 else "intra"


def layout(size: int, stride: int, gpus_per_node: int) -> GroupLayout:
    """Members ``0, stride, 2*stride, ...`` of consecutive ranks; nodes hold ``gpus_per_node`` ranks.

    >>> layout(8, 1, 8), layout(8, 8, 8), layout(16, 2, 8)
    (GroupLayout(intra=8, inter=1), GroupLayout(intra=1, inter=8), GroupLayout(intra=4, inter=4))
    """
    if size <= 1:
        return GroupLayout(1, 1)
    intra = 1 if stride >= gpus_per_node else max(1, min(size, gpus_per_node // stride))
    while size % intra:
        intra -= 1
    return GroupLayout(intra, size // intra)


def _ring(kind: str, nbytes: float, n: int, bw: float, alpha: float, tree: bool) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * math.ceil(math.log2(n)) if tree else (n - 1)
    if kind == "allreduce":
        return 2 * (n - 1) / n * nbytes / bw + 2 * steps * alpha
    return (n - 1) / n * nbytes / bw + steps * alpha


def link_bw_bytes_per_s(cluster: ClusterSpec, scope: str) -> float:
    """Achievable bandwidth per GPU for one collective at ``scope``: the link's effective
    bandwidth, capped by the DMA engines that carry it (count x per-engine bandwidth) when the
    engine class has a bandwidth of its own (source document, section 8: "peak DMA bandwidth
    bounds T_comm")."""
    link = cluster.intra_link if scope == "intra" else cluster.inter_link
    bw = link.effective_bw_bytes_per_s
    eng = cluster.device.engines_for(scope)
    if eng.bw_bytes_per_s > 0:
        bw = min(bw, eng.count * eng.bw_bytes_per_s)
    return bw


def collective_time_s(kind: str, nbytes: float, size: int, stride: int, cluster: ClusterSpec,
                      algorithm: str = "ring") -> float:
    """Seconds for one collective.

    Parameters
    ----------
    kind : one of ``allreduce``, ``allgather``, ``reducescatter``, ``alltoall``, ``p2p``.
    nbytes : per-GPU buffer: the reduced tensor (all-reduce), the gathered output
        (all-gather), the input (reduce-scatter), the send buffer (all-to-all), the message (p2p).
    size, stride : group size and rank stride (see :func:`group_stride`).
    algorithm : ``ring`` (NCCL ring/tree, the default) or ``direct``: an all-reduce inside one
        node done by reading the peers' buffers over NVLink/NVSwitch, as inference engines do
        for small messages (vLLM ``csrc/custom_all_reduce.cuh``: one-shot, every rank reads the
        ``size - 1`` peer buffers, one latency; two-shot, reduce-scatter then all-gather, two
        latencies), whichever is faster. Other kinds and multi-node groups fall back to ``ring``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: must be one of {', '.join(KINDS)}")
    if algorithm not in ("ring", "direct"):
        raise ValueError(f"algorithm={algorithm!r}: must be 'ring' or 'direct'")
    intra_l, inter_l = cluster.intra_link, cluster.inter_link
    bi, be = link_bw_bytes_per_s(cluster, "intra"), link_bw_bytes_per_s(cluster, "inter")
    if kind == "p2p":
        if size <= 1 or nbytes <= 0:
            return 0.0
        scope = "inter" if stride >= cluster.gpus_per_node else "intra"
        link = inter_l if scope == "inter" else intra_l
        return nbytes / link_bw_bytes_per_s(cluster, scope) + link.latency_s
    lay = layout(size, stride, cluster.gpus_per_node)
    k, nodes = lay.intra, lay.inter
    if kind == "alltoall":
        if size <= 1 or nbytes <= 0:
            return 0.0
        # each GPU sends nbytes/size to every peer: (k-1) peers over NVLink, the rest over its NIC
        t_intra = nbytes * (k - 1) / size / bi
        t_inter = nbytes * (size - k) / size / be
        alpha = intra_l.latency_s + (inter_l.latency_s if nodes > 1 else 0.0)
        return max(t_intra, t_inter) + alpha
    if nodes == 1:
        if algorithm == "direct" and kind == "allreduce" and k > 1 and nbytes > 0:
            alpha = intra_l.latency_s
            return min((k - 1) * nbytes / bi + alpha, 2 * (k - 1) / k * nbytes / bi + 2 * alpha)
        return _ring(kind, nbytes, k, bi, intra_l.latency_s, tree=False)
    if k == 1:
        return _ring(kind, nbytes, nodes, be, inter_l.latency_s, tree=True)
    # hierarchical: intra reduce-scatter / all-gather around an inter-node phase on 1/k of the data
    t = _ring(kind, nbytes / k, nodes, be, inter_l.latency_s, tree=True)
    intra_kind = "reducescatter"
    t_intra = _ring(intra_kind, nbytes, k, bi, intra_l.latency_s, tree=False)
    return t + (2 * t_intra if kind == "allreduce" else t_intra)


def group_stride(dim: str, tp: int, cp: int, dp: int, ep: int = 1) -> int:
    """Rank stride of a parallel dimension under Megatron-LM's default order ``tp-cp-ep-dp-pp``.

    EP groups use stride 1 (experts are not TP-split when ``ep > 1``, so expert ranks are
    consecutive); the expert-data-parallel group (``edp``) strides over them.

    >>> [group_stride(d, tp=8, cp=2, dp=4) for d in ("tp", "cp", "dp", "pp")]
    [1, 8, 16, 64]
    """
    return {"tp": 1, "cp": tp, "dp": tp * cp, "pp": tp * cp * dp, "ep": 1, "edp": ep}[dim]
