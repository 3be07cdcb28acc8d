"""Data-parallel gradient buckets and ZeRO-1/2 parameter gathers at the end and start of a step.

Gradients are accumulated over the micro-batches of a step, so the DP reduction can only hide
behind the last backward of each model chunk (Megatron-LM ``--overlap-grad-reduce``; PyTorch
DDP, Li et al. 2020, section 3.2.3). Parameters are grouped in reverse layer order into buckets
of ``bucket_bytes``; a full bucket issues its AllReduce (ZeRO >= 1: ReduceScatter, Megatron's
distributed optimizer) at once and runs while backward continues (source section 5). With
``bucket_bytes = 0`` one reduction is issued after backward ends (synchronous issue).

Bucket seconds are shares (by bytes) of the stage's total reduction time, which is
:func:`costmodel.compose.stage_terms.dp_comm`'s volume plus one collective latency per extra bucket
(:func:`costmodel.compose.step.bucketed_s`), so the collective formula and the DP/expert-DP group
layout stay in one place.

>>> from costmodel.spec.presets import load_cluster
>>> g = dp_bucket_graph(load_cluster("a100-80g"), (("l1", 1.0, 100.0), ("l0", 1.0, 100.0)), 2.0, 100.0,
...                     "reducescatter", 8, 8)
>>> [n for n in g if g.nodes[n]["strategy"] == "dp"]
['dp.bucket0', 'dp.bucket1']
"""

from __future__ import annotations

from functools import lru_cache

import networkx as nx

from costmodel.spec.dma_plan import Assignment
from costmodel.physics.mechanics.grad_buckets import GradBuckets
from costmodel.spec.specs import ClusterSpec
from costmodel.engines.graph.nodes import GraphBuilder
from costmodel.engines.graph.scheduler import Schedule, resources_for, schedule


def dp_bucket_graph(
    cluster: ClusterSpec,
    window: tuple,
    t_grad_s: float,
    bucket_bytes: float,
    kind: str,
    size: int,
    stride: int,
    dma: Assignment | None = None,
    buckets: GradBuckets | None = None,
) -> nx.DiGraph:
    """The backward window of the step's last micro-batch with bucketed gradient reduction.

    Parameters
    ----------
    window : ``(name, seconds, grad_bytes[, chunk])`` compute pieces in the order they run; a
        piece's gradients (``grad_bytes``, 0 for work that produces none) are ready when it ends;
        ``chunk``: the model chunk they belong to (default 0).
    t_grad_s : seconds to reduce all of the window's gradients (every bucket's latency included).
    bucket_bytes : bucket size; 0 means one reduction issued after the window (not overlapped).
    kind, size, stride : the collective and its group (``allreduce`` or ``reducescatter``).
    dma : the plan's DMA assignment: the buckets run on the ``dp`` stream's engine pool.
    buckets : the framework's own buckets (:func:`costmodel.physics.mechanics.grad_buckets.stage_grad_buckets`);
        ``bucket_bytes`` is then unused. A bucketed chunk issues each buffer's buckets as the
        chunk's gradients reach their share of that buffer; an unbucketed chunk issues its
        collectives after its last piece; not overlapped, all after the window, one after another.
    """
    if buckets is not None:
        return _framework_bucket_graph(cluster, window, t_grad_s, kind, size, stride, dma, buckets)
    b = GraphBuilder(cluster, dma=dma)
    total = sum(x[2] for x in window)
    out, acc, prev, k = [], 0.0, None, 0
    for name, secs, nbytes, *_ in window:
        prev = b.compute(name, "gemm", secs, [prev] if prev else [], phase="bwd")
        acc += nbytes
        if bucket_bytes > 0 and acc >= bucket_bytes and total > 0:
            out.append(
                b.comm(
                    f"dp.bucket{k}",
                    kind,
                    acc,
                    size,
                    stride,
                    "dp",
                    [prev],
                    phase="bwd",
                    duration_s=t_grad_s * acc / total,
                )
            )
            acc, k = 0.0, k + 1
    if acc > 0 and total > 0:
        issue = "async" if bucket_bytes > 0 else "sync"
        out.append(
            b.comm(
                f"dp.bucket{k}",
                kind,
                acc,
                size,
                stride,
                "dp",
                [prev],
                issue=issue,
                phase="bwd",
                duration_s=t_grad_s * acc / total,
            )
        )
    b.sink("out", out + ([prev] if prev else []), phase="bwd")
    return b.graph


def _framework_bucket_graph(cluster, window, t_grad_s, kind, size, stride, dma, gb: GradBuckets) -> nx.DiGraph:
    b = GraphBuilder(cluster, dma=dma)
    elements = sum(x for ch in gb.chunks for buf in ch for x in buf)
    chunk_bytes: dict = {}
    for item in window:
        ch = item[3] if len(item) > 3 else 0
        chunk_bytes[ch] = chunk_bytes.get(ch, 0.0) + item[2]
    last = {}  # the index of each chunk's last gradient piece
    for j, item in enumerate(window):
        if item[2] > 0:
            last[item[3] if len(item) > 3 else 0] = j
    # per chunk, per buffer: the cumulative share of the chunk's gradients at which each bucket closes
    todo = {}
    for ch, bufs in enumerate(gb.chunks):
        todo[ch] = []
        for buf in bufs:
            tot, cum = sum(buf), 0.0
            for x in buf:
                cum += x
                due = cum / tot if (gb.overlapped and gb.bucketed[ch] and tot > 0) else 1.0
                todo[ch].append((due, x))
        todo[ch].sort(key=lambda d: d[0])
    out, prev, k, acc = [], None, 0, {}
    late = []  # not overlapped: issued after the window, in turn

    def issue(ch, x, deps, how):
        nonlocal k
        node = b.comm(
            f"dp.bucket{k}",
            kind,
            x,
            size,
            stride,
            "dp",
            deps,
            issue=how,
            phase="bwd",
            duration_s=t_grad_s * x / elements if elements > 0 else 0.0,
        )
        k += 1
        return node

    for j, item in enumerate(window):
        name, secs, nbytes = item[:3]
        ch = item[3] if len(item) > 3 else 0
        prev = b.compute(name, "gemm", secs, [prev] if prev else [], phase="bwd")
        if nbytes <= 0 or ch >= len(gb.chunks):
            continue
        acc[ch] = acc.get(ch, 0.0) + nbytes
        share = acc[ch] / chunk_bytes[ch] if chunk_bytes[ch] > 0 else 1.0
        while todo[ch] and (todo[ch][0][0] <= share + 1e-9 or last.get(ch) == j):
            _, x = todo[ch].pop(0)
            if gb.overlapped:
                out.append(issue(ch, x, [prev], "async"))
            else:
                late.append(x)
    for ch in todo:  # chunks with no gradient piece in the window (nothing ready in it)
        late += [x for _, x in todo[ch]]
    for x in late:
        out.append(issue(None, x, [out[-1] if out else prev] if (out or prev) else [], "sync"))
    b.sink("out", out + ([prev] if prev else []), phase="bwd")
    return b.graph


@lru_cache(maxsize=1024)
def dp_tail(
    cluster: ClusterSpec,
    window: tuple,
    t_grad_s: float,
    bucket_bytes: float,
    kind: str,
    size: int,
    stride: int,
    dma: Assignment | None = None,
    buckets: GradBuckets | None = None,
) -> tuple[float, Schedule]:
    """Seconds from the window's last compute (at full speed) to the end of its last bucket,
    including the slowdown of that compute by SM-based reductions; and the schedule."""
    g = dp_bucket_graph(cluster, window, t_grad_s, bucket_bytes, kind, size, stride, dma, buckets)
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
