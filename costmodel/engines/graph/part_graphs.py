"""Op graphs of a stage's work beyond its decoder layers: the last stage's LM head and cross-entropy
(:func:`head_graph`) and an MTP module's extra ops (:func:`mtp_graph`); the layers' graphs are
:mod:`costmodel.engines.graph.builders`."""

from __future__ import annotations

import networkx as nx

from costmodel.engines.graph.builders import plan_dma
from costmodel.engines.graph.nodes import GraphBuilder
from costmodel.frameworks.stacks import tp_from_nccl_tables
from costmodel.physics.kernels.compute import head_ops
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.mtp import extra_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload


def head_graph(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, phase: str) -> nx.DiGraph:
    """The LM head and cross-entropy of the last stage; in backward the head's input gradient is
    reduced across TP while its weight gradient computes (as :func:`costmodel.engines.analytic.stage_timing`)."""
    head, ce = head_ops(model, cluster.device, w, c)
    b = GraphBuilder(cluster, dma=plan_dma(model, cluster, w, c))
    if phase == "fwd":
        y = b.compute("lm_head", "gemm", head.fwd_s)
        y = b.compute("cross_entropy", "elementwise", ce.fwd_s, [y])
        b.sink("out", [y])
        return b.graph
    y = b.compute("cross_entropy.b", "elementwise", ce.bwd_s, phase="bwd")
    d = b.compute("lm_head.b.dgrad", "gemm", head.bwd_s - head.wgrad_s, [y], phase="bwd")
    out = [d]
    if c.tp > 1:
        msg = c.mb * w.seq_len / c.cp * model.hidden * ACT_BYTES
        kind, strat = ("reducescatter", "sp") if c.sp_on else ("allreduce", "tp")
        nccl = tp_from_nccl_tables(w, c, head=True)
        out = [b.comm("lm_head.b." + strat, kind, msg, c.tp, 1, strat, [d], phase="bwd", tables=nccl)]
    b.compute("lm_head.b.wgrad", "gemm", head.wgrad_s, [y], phase="bwd")
    b.sink("out", out, phase="bwd")
    return b.graph


def mtp_graph(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, phase: str) -> nx.DiGraph:
    """One MTP module's work beyond its decoder layer (:func:`costmodel.physics.kernels.mtp.extra_ops`): the embedding of
    the shifted tokens, the norms and ``eh_proj``, in a chain (as :func:`costmodel.engines.analytic.stage_timing`)."""
    b = GraphBuilder(cluster, dma=plan_dma(model, cluster, w, c))
    ops = extra_ops(model, cluster.device, w, c)
    deps = ()
    for op in ops if phase == "fwd" else reversed(ops):
        name, secs = (op.name, op.fwd_s) if phase == "fwd" else (op.name + ".b", op.bwd_s)
        deps = [b.compute(name, op.kind, secs, deps, phase=phase)]
    b.sink("out", deps, phase=phase)
    return b.graph
