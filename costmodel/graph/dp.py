"""Data-parallel gradient buckets and ZeRO-1/2 parameter gathers at the end and start of a step.

Gradients are accumulated over the micro-batches of a step, so the DP reduction can only hide
behind the last backward of each model chunk (Megatron-LM ``--overlap-grad-reduce``; PyTorch
DDP, Li et al. 2020, section 3.2.3). Parameters are grouped in reverse layer order into buckets
of ``bucket_bytes``; a full bucket issues its AllReduce (ZeRO >= 1: ReduceScatter, Megatron's
distributed optimizer) at once and runs while backward continues (source section 5). With
``bucket_bytes = 0`` one reduction is issued after backward ends (synchronous issue).

Bucket seconds are shares (by bytes) of the stage's total reduction time, which is
:func:`costmodel.analytic.dp_comm`'s volume plus one collective latency per extra bucket
(:func:`costmodel.step.bucketed_s`), so the collective formula and the DP/expert-DP group
layout stay in one place.

>>> from costmodel.presets import load_cluster
>>> g = dp_bucket_graph(load_cluster("a100-80g"), (("l1", 1.0, 100.0), ("l0", 1.0, 100.0)), 2.0, 100.0,
...                     "reducescatter", 8, 8)
>>> [n for n in g if g.nodes[n]["strategy"] == "dp"]
['dp.bucket0', 'dp.bucket1']
"""

from __future__ import annotations

from functools import lru_cache

import networkx as nx

from ..dma import Assignment
from ..specs import ClusterSpec
from .nodes import GraphBuilder
from .scheduler import Schedule, resources_for, schedule


def dp_bucket_graph(cluster: ClusterSpec, window: tuple, t_grad_s: float, bucket_bytes: float,
                    kind: str, size: int, stride: int, dma: Assignment | None = None) -> nx.DiGraph:
    """The backward window of the step's last micro-batch with bucketed gradient reduction.

    Parameters
    ----------
    window : ``(name, seconds, grad_bytes)`` compute pieces in the order they run; a piece's
        gradients (``grad_bytes``, 0 for work that produces none) are ready when it ends.
    t_grad_s : seconds to reduce all of the window's gradients in one collective.
    bucket_bytes : bucket size; 0 means one reduction issued after the window (not overlapped).
    kind, size, stride : the collective and its group (``allreduce`` or ``reducescatter``).
    dma : the plan's DMA assignment: the buckets run on the ``dp`` stream's engine pool.
    """
    b = GraphBuilder(cluster, dma=dma)
    total = sum(x[2] for x in window)
    buckets, acc, prev, k = [], 0.0, None, 0
    nodes = []
    for name, secs, nbytes in window:
        prev = b.compute(name, "gemm", secs, [prev] if prev else [], phase="bwd")
        nodes.append(prev)
        acc += nbytes
        if bucket_bytes > 0 and acc >= bucket_bytes and total > 0:
            buckets.append(b.comm(f"dp.bucket{k}", kind, acc, size, stride, "dp", [prev], phase="bwd",
                                  duration_s=t_grad_s * acc / total))
            acc, k = 0.0, k + 1
    if acc > 0 and total > 0:
        issue = "async" if bucket_bytes > 0 else "sync"
        buckets.append(b.comm(f"dp.bucket{k}", kind, acc, size, stride, "dp", [prev], issue=issue,
                              phase="bwd", duration_s=t_grad_s * acc / total))
    b.sink("out", buckets + ([prev] if prev else []), phase="bwd")
    return b.graph


@lru_cache(maxsize=1024)
def dp_tail(cluster: ClusterSpec, window: tuple, t_grad_s: float, bucket_bytes: float, kind: str,
            size: int, stride: int, dma: Assignment | None = None) -> tuple[float, Schedule]:
    """Seconds from the window's last compute (at full speed) to the end of its last bucket,
    including the slowdown of that compute by SM-based reductions; and the schedule."""
    g = dp_bucket_graph(cluster, window, t_grad_s, bucket_bytes, kind, size, stride, dma)
    s = schedule(g, resources_for(cluster.device, dma))
    return s.makespan_s - s.compute_s, s


def param_gather_lateness_s(t_param_s: float, fractions: tuple, need_s: tuple) -> float:
    """ZeRO-1/2 parameter AllGather after the optimizer step, bucket by bucket in layer order,
    each needed by the next step's first forward at ``need_s`` (seconds after the step starts;
    a later pipeline stage starts its first forward after the fill, a bubble that hides the
    gather: source section 4, "the next global batch's prefetch"). Returns how late the last-
    needed bucket is.

    >>> param_gather_lateness_s(1.0, (0.5, 0.5), (0.0, 0.8))
    0.5
    """
    t, late = 0.0, 0.0
    for f, need in zip(fractions, need_s):
        t += t_param_s * f
        late = max(late, t - need)
    return late
