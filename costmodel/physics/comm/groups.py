"""Megatron-LM's rank layout of a parallel group: which ranks a TP, CP, DP, EP or PP group holds (``group_stride``),
how many nodes it spans and whether it crosses the network (``layout``, ``comm_scope``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class GroupLayout:
    """How a communication group maps onto nodes: ``intra`` ranks per node times ``inter`` nodes."""

    intra: int
    inter: int

    @property
    def scope(self) -> str:
        return "inter" if self.inter > 1 else "intra"


@lru_cache(maxsize=4096)
def layout(size: int, stride: int, domain: int) -> GroupLayout:
    """Members ``0, stride, 2*stride, ...`` of consecutive ranks; NVLink domains (``ClusterSpec.domain``: a node on HGX) hold ``domain`` ranks.

    >>> layout(8, 1, 8), layout(8, 8, 8), layout(16, 2, 8)
    (GroupLayout(intra=8, inter=1), GroupLayout(intra=1, inter=8), GroupLayout(intra=4, inter=4))
    """
    if size <= 1:
        return GroupLayout(1, 1)
    intra = 1 if stride >= domain else max(1, min(size, domain // stride))
    while size % intra:
        intra -= 1
    return GroupLayout(intra, size // intra)


def comm_scope(kind: str, size: int, stride: int, domain: int) -> str:
    """``'inter'`` when a group of ``size`` ranks at ``stride`` spans nodes, else ``'intra'``; a
    point-to-point transfer crosses nodes when its peer is a node or more away.

    >>> comm_scope("allreduce", 8, 1, 8), comm_scope("allreduce", 4, 8, 8), comm_scope("p2p", 2, 8, 8)
    ('intra', 'inter', 'inter')
    """
    if kind == "p2p":
        return "inter" if stride >= domain else "intra"
    return layout(size, stride, domain).scope


def group_stride(dim: str, tp: int, cp: int, dp: int, ep: int = 1, etp: int = 1) -> int:
    """Rank stride of a parallel dimension under Megatron-LM's default order ``tp-cp-ep-dp-pp``.

    ``dpcp`` is the data-parallel group *with* context parallelism (size ``dp * cp``): the gradient
    reduction and the distributed optimizer's shards span it (Megatron-Core
    ``parallel_state.get_data_parallel_group(with_context_parallel=True)``, built from the ranks of
    one tp-rank over all cp and dp indices). Under the order tp-cp-dp its ranks are every ``tp``-th,
    so its stride is ``tp``, not the pure DP group's ``tp * cp``: with cp 2 and tp 4 on 8-GPU nodes
    the group of 2 x dp ranks is two per node, not one. EP groups use stride 1 (experts are not
    TP-split when ``ep > 1``, so expert ranks are consecutive); the expert-data-parallel group
    (``edp``) strides over the expert-tensor-parallel and EP ranks, ``etp * ep``: Megatron-Core
    lays the experts out on their own grid, order ``tp-ep-dp-pp`` with ``tp =
    expert_tensor_parallel_size`` (default: the dense TP) and no CP
    (``megatron/core/parallel_state.py@d98e8a6``, ``expert_decoder_rank_generator``, lines 871-895;
    the expert-data-parallel groups are its ``get_ranks("dp")``, line 1457). So experts TP-split
    over ``tp = 8`` without EP replicate every 8th rank, across nodes, not over 4 neighbours.

    >>> [group_stride(d, tp=8, cp=2, dp=4) for d in ("tp", "cp", "dp", "dpcp", "pp")]
    [1, 8, 16, 8, 64]
    >>> group_stride("edp", tp=8, cp=2, dp=2, ep=1, etp=8), group_stride("edp", tp=8, cp=1, dp=8, ep=4, etp=1)
    (8, 4)
    """
    if dim in ("cp", "dpcp"):
        return tp
    if dim == "dp":
        return tp * cp
    if dim == "pp":
        return tp * cp * dp
    if dim == "edp":
        return ep * etp
    if dim in ("tp", "ep"):
        return 1
    raise KeyError(dim)


def placement(tp: int, cp: int, dp: int, ep: int, pp: int, domain: int) -> list[tuple[str, int, GroupLayout]]:
    """``(dim, size, layout)`` of each parallel group of more than one rank, under Megatron-LM's rank order
    (:func:`group_stride`) on NVLink domains of ``domain`` GPUs; a pipeline group's layout is its point-to-point
    peers' (``inter`` = 2: the next stage is in another domain).

    >>> [(d, n, g.scope) for d, n, g in placement(tp=2, cp=1, dp=144, ep=32, pp=4, domain=72)]
    [('tp', 2, 'intra'), ('ep', 32, 'intra'), ('dp', 144, 'inter'), ('pp', 4, 'inter')]
    """
    out = []
    for dim, size in (("tp", tp), ("cp", cp), ("ep", ep), ("dp", dp)):
        if size > 1:
            out.append((dim, size, layout(size, group_stride(dim, tp, cp, dp, ep), domain)))
    if pp > 1:
        peer = group_stride("pp", tp, cp, dp)
        out.append(("pp", pp, GroupLayout(1, 2) if peer >= domain else GroupLayout(2, 1)))
    return out
