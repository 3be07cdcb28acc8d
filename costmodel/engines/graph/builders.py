"""Op graphs of one transformer layer, one micro-batch, one GPU: one builder per mechanism.

Durations come from :func:`costmodel.physics.kernels.compute.layer_ops` and collective times from
:func:`costmodel.physics.comm.collectives.collective_time_s` (through :class:`GraphBuilder`). Communication is
placed where Megatron-LM / Megatron-Core issue it, the same places as :mod:`costmodel.engines.analytic`,
but its overlap is left to the scheduler:

* **TP** (Shoeybi et al. 2019, Fig. 3): forward AllReduce after the row-parallel GEMM feeds
  the next op (on the critical path); backward AllReduce of the column-parallel GEMM's input
  gradient runs while its weight-gradient GEMM computes (``--async-tensor-model-parallel-allreduce``).
* **TP + SP** (Korthikanti et al. 2023, section 4.2.2): AllGather before the column-parallel and
  ReduceScatter after the row-parallel GEMM, each split into ``chunks`` pieces pipelined with
  the GEMM's chunks (source document section 3: "as soon as one chunk is computed, issue its
  ReduceScatter"); backward re-gathers the input during the data-gradient GEMM and
  reduce-scatters during the weight-gradient GEMM.
* **CP** ring attention (Liu et al. 2023, "Ring Attention"): the next K/V block travels while
  the current block computes; backward also passes the dK/dV partial sums around the ring.
* **EP** (source section 6): dispatch AllToAll after the router (dependent), experts in
  ``chunks`` pieces, each piece's combine AllToAll issued as soon as it is computed.
* **ZeRO-3** (Rajbhandari et al. 2020, section 5; source section 5): the layer's parameter
  AllGather is prefetched behind the previous layer, its gradient ReduceScatter runs behind the
  next layer's backward. One layer graph is one period of that steady state: the transfers are
  issued at the layer's start and must end by its end (``out``); built by
  :func:`costmodel.engines.graph.zero3.zero3_prefetch`.

The LM head and MTP graphs of a stage's ends: :mod:`costmodel.engines.graph.part_graphs`.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> g = layer_graph(load_model("gpt3-175b"), load_cluster("a100-80g"), Workload(global_batch=8, seq_len=2048),
...                 ParallelConfig(tp=8), False, "fwd")
>>> [n for n in g if g.nodes[n]["strategy"]]
['attn_out.ar', 'fc2.ar']
"""

from __future__ import annotations

from functools import lru_cache

import networkx as nx

from costmodel.physics.comm import dma
from costmodel.physics.mechanics.fsdp_copies import fsdp2_copies_s
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.frameworks.stacks import tp_from_nccl_tables
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.compute import Op, cp_exchange, layer_ops
from costmodel.physics.kernels.recompute import module_recompute_fractions, op_sac_fractions
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.comm.ep_dispatch import ep_alltoall_bytes, ep_dispatch_time_s, ep_sm_share
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.physics.comm.split_overhead import (
    CP_RING,
    EP,
    GEMM,
    BwdSplit,
    bwd_split,
    fwd_split,
    replay_plan,
    split_s,
)
from costmodel.engines.graph.nodes import GraphBuilder
from costmodel.engines.graph.zero3 import zero3_prefetch


class _Ctx:
    """Sizes shared by the mechanism builders of one layer."""

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, decode: bool = False
    ):
        self.model, self.cluster, self.w, self.c, self.moe = model, cluster, w, c, moe
        self.ov = cluster.device.kernel_overhead_s
        # tokens on this GPU: a decode step carries one new token per sequence
        self.n = c.mb if decode else c.mb * w.seq_len / c.cp
        self.msg = self.n * model.hidden * ACT_BYTES  # TP/SP activation message (Korthikanti Table 2)
        self.tp, self.sp = c.tp, c.sp_on
        self.nccl = tp_from_nccl_tables(w, c)  # whether the measured table times TP (issue 38)
        self.cpx = cp_exchange(model, self.n, c.tp, c.cp, c.cp_impl)
        self.kv_bytes = self.cpx.kv_bytes
        self.cp_stride = group_stride("cp", c.tp, c.cp, c.dp)
        self.a2a_bytes = ep_alltoall_bytes(model, self.n, c.tp, c.ep, cluster.domain, c.ep_dispatcher) if moe else 0.0
        self.ep_sm = ep_sm_share(c.ep_dispatcher, cluster.device)  # None: the EP engine class's interference

    def a2a_s(self, share: float = 1.0) -> float:
        """One MoE dispatch or combine (``share`` of its tokens) as the dispatcher runs it
        (:func:`costmodel.physics.comm.ep_dispatch.ep_dispatch_time_s`, the analytic engine's time too; training's
        from the measured NCCL table where it has the group)."""
        c, eng = self.c, dma.engines_of(self.cluster, plan_dma(self.model, self.cluster, self.w, self.c), "ep")
        train = self.w.mode != "infer"
        return ep_dispatch_time_s(self.model, self.n, c.tp, c.ep, self.cluster, c.ep_dispatcher, eng, share, train)

    def piece_s(self, kind: str, k: int) -> float:
        """One of ``k`` pieces of a TP/SP collective pipelined with GEMM chunks. The pieces are the
        steps of one ring exchange (Wang et al., ASPLOS 2023, "Overlap communication with dependent
        computation via decomposition"; Transformer Engine userbuffers), not ``k`` collectives, so
        each is ``1/k`` of the whole collective's time, latency included. Serving workloads use the
        direct (one-/two-shot) all-reduce of inference engines, as :mod:`costmodel.serving.inference` does."""
        algorithm = "direct" if self.w.mode == "infer" else "ring"
        engines = dma.engines_of(self.cluster, plan_dma(self.model, self.cluster, self.w, self.c), "tp")
        return collective_time_s(kind, self.msg, self.tp, 1, self.cluster, algorithm, engines, self.nccl) / k


def _sfx(i: int, k: int) -> str:
    return f".{i}" if k > 1 else ""


# ----------------------------------------------------------------------------- forward
def _fwd_op(b: GraphBuilder, op: Op, x: list, cx: _Ctx, phase: str, tag: str) -> list:
    """Forward of ``op`` fed by nodes ``x``, split as :func:`costmodel.physics.comm.split_overhead.fwd_split`
    says; returns the nodes its consumer waits for."""
    name, split = tag + op.name, fwd_split(op, cx.c)
    if split.mechanism == CP_RING:
        return cp_ring_forward(b, op, x, cx, phase, name, split.pieces)
    if split.mechanism == EP:
        return ep_forward(b, op, x, cx, phase, name, split.pieces)
    k, kind = split.pieces, split.reduce_after
    outs = []
    for i in range(k):
        deps = x
        if split.gather_before:  # SP: gather this chunk's sequence shards first
            deps = [
                b.comm(
                    f"{name}.ag{_sfx(i, k)}",
                    "allgather",
                    cx.msg / k,
                    cx.tp,
                    1,
                    "sp",
                    x,
                    phase=phase,
                    duration_s=cx.piece_s("allgather", k),
                )
            ]
        y = b.compute(name + _sfx(i, k), op.kind, split_s(op.fwd_s, k, cx.ov), deps, phase=phase)
        if kind:  # TP AllReduce / SP ReduceScatter of this chunk's partial sums
            short, strat = ("ar", "tp") if kind == "allreduce" else ("rs", "sp")
            y = b.comm(
                f"{name}.{short}{_sfx(i, k)}",
                kind,
                cx.msg / k,
                cx.tp,
                1,
                strat,
                [y],
                phase=phase,
                duration_s=cx.piece_s(kind, k),
            )
        outs.append(y)
    return outs


def cp_ring_forward(b: GraphBuilder, op: Op, x: list, cx: _Ctx, phase: str, name: str, cp: int) -> list:
    """Ring attention in ``cp`` blocks: block ``i`` computes while K/V block ``i + 1`` arrives from
    the neighbour."""
    t_blk = split_s(op.fwd_s, cp, cx.ov)
    if cx.cpx.gather_bytes:  # PyTorch context_parallel: all shards gathered once, behind the local block
        ag = b.comm(f"{name}.kvag", "allgather", cx.cpx.gather_bytes, cp, cx.cp_stride, "cp", x, phase=phase)
        blk = b.compute(f"{name}.blk0", op.kind, t_blk, x, phase=phase)
        for i in range(1, cp):
            blk = b.compute(f"{name}.blk{i}", op.kind, t_blk, [ag, blk], phase=phase)
        return [blk]
    blk = b.compute(f"{name}.blk0", op.kind, t_blk, x, phase=phase)
    kv = None
    for i in range(1, cp):
        kv = b.comm(
            f"{name}.kv{i}", "ring_p2p", cx.kv_bytes, cp, cx.cp_stride, "cp", x if kv is None else [kv], phase=phase
        )
        blk = b.compute(f"{name}.blk{i}", op.kind, t_blk, [kv], phase=phase)
    return [blk]


def ep_forward(b: GraphBuilder, op: Op, x: list, cx: _Ctx, phase: str, name: str, k: int) -> list:
    """Dispatch AllToAll (needs the router output) -> ``k`` expert chunks -> one combine per chunk."""
    ep = cx.c.ep
    disp = b.comm(
        f"{name}.dispatch",
        "alltoall",
        cx.a2a_bytes,
        ep,
        1,
        "ep",
        x,
        phase=phase,
        duration_s=cx.a2a_s(),
        sm_share=cx.ep_sm,
    )
    outs = []
    for i in range(k):
        y = b.compute(name + _sfx(i, k), op.kind, split_s(op.fwd_s, k, cx.ov), [disp], phase=phase)
        outs.append(
            b.comm(
                f"{name}.combine{_sfx(i, k)}",
                "alltoall",
                cx.a2a_bytes / k,
                ep,
                1,
                "ep",
                [y],
                phase=phase,
                duration_s=cx.a2a_s(1 / k),
                sm_share=cx.ep_sm,
            )
        )
    return outs


# ----------------------------------------------------------------------------- backward
def _bwd_op(b: GraphBuilder, op: Op, x: list, cx: _Ctx, tag: str) -> list:
    """Backward of ``op`` fed by its output gradient ``x``, split as
    :func:`costmodel.physics.comm.split_overhead.bwd_split` says; returns its input-gradient nodes."""
    name, ph, split = tag + op.name + ".b", "bwd", bwd_split(op, cx.c)
    if op.kind == "attention" and "core_attn" in cx.c.recomputed_modules:
        # Korthikanti et al. 2023, section 5: recompute attention
        x = [b.compute(tag + op.name + ".rc", op.kind, op.fwd_s, x, phase="recompute")]
    if split.mechanism == CP_RING:
        return cp_ring_backward(b, op, x, cx, name, split)
    if split.mechanism == EP:
        return ep_backward(b, op, x, cx, name, split)
    if split.mechanism != GEMM:
        return [b.compute(name, op.kind, op.bwd_s, x, phase=ph)]
    dgrad_s, wgrad_s = op.bwd_s - op.wgrad_s, op.wgrad_s
    grads = x
    if split.gather_grad:  # gather the sequence-sharded output gradient, chunked
        k = split.pieces
        grads = [
            b.comm(
                f"{name}.ag{_sfx(i, k)}",
                "allgather",
                cx.msg / k,
                cx.tp,
                1,
                "sp",
                x,
                phase=ph,
                duration_s=cx.piece_s("allgather", k),
            )
            for i in range(k)
        ]
        dgr = [
            b.compute(f"{name}.dgrad{_sfx(i, k)}", "gemm", split_s(split.split_part_s(op), k, cx.ov), [g], phase=ph)
            for i, g in enumerate(grads)
        ]
    else:
        dgr = [b.compute(f"{name}.dgrad", "gemm", dgrad_s, x, phase=ph)]
    if not split.reduce_input_grad:
        b.compute(f"{name}.wgrad", "gemm", wgrad_s, grads, phase=ph)
        return dgr
    if split.reduce_input_grad == "reducescatter":
        # SP: re-gather the input for wgrad while dgrad runs; reduce-scatter dgrad while wgrad runs
        ag_in = b.comm(f"{name}.ag_in", "allgather", cx.msg, cx.tp, 1, "sp", x, phase=ph, tables=cx.nccl)
        red = b.comm(f"{name}.rs", "reducescatter", cx.msg, cx.tp, 1, "sp", dgr, phase=ph, tables=cx.nccl)
        b.compute(f"{name}.wgrad", "gemm", wgrad_s, list(grads) + [ag_in], phase=ph)
    else:
        red = b.comm(f"{name}.ar", "allreduce", cx.msg, cx.tp, 1, "tp", dgr, phase=ph, tables=cx.nccl)
        b.compute(f"{name}.wgrad", "gemm", wgrad_s, grads, phase=ph)
    return [red]


def cp_ring_backward(b: GraphBuilder, op: Op, x: list, cx: _Ctx, name: str, split: BwdSplit) -> list:
    """Ring attention backward in ``split.pieces`` blocks: K/V blocks travel as in forward; dK/dV
    partial sums follow."""
    cp = split.pieces
    t_blk = split_s(split.split_part_s(op), cp, cx.ov)
    if cx.cpx.gather_bytes:  # PyTorch context_parallel: K/V gathered again; dK/dV (FP32) sent after every block
        ag = b.comm(f"{name}.kvag", "allgather", cx.cpx.gather_bytes, cp, cx.cp_stride, "cp", x, phase="bwd")
        blk = b.compute(f"{name}.blk0", op.kind, t_blk, x, phase="bwd")
        dkv = b.comm(f"{name}.dkv0", "ring_p2p", cx.cpx.dkv_bytes, cp, cx.cp_stride, "cp", [blk], phase="bwd")
        for i in range(1, cp):
            blk = b.compute(f"{name}.blk{i}", op.kind, t_blk, [ag, blk], phase="bwd")
            dkv = b.comm(
                f"{name}.dkv{i}", "ring_p2p", cx.cpx.dkv_bytes, cp, cx.cp_stride, "cp", [blk, dkv], phase="bwd"
            )
        return [blk, dkv]
    blk = b.compute(f"{name}.blk0", op.kind, t_blk, x, phase="bwd")
    kv = dkv = None
    for i in range(1, cp):
        kv = b.comm(
            f"{name}.kv{i}", "ring_p2p", cx.kv_bytes, cp, cx.cp_stride, "cp", x if kv is None else [kv], phase="bwd"
        )
        blk = b.compute(f"{name}.blk{i}", op.kind, t_blk, [kv], phase="bwd")
        dkv = b.comm(
            f"{name}.dkv{i}",
            "ring_p2p",
            cx.kv_bytes,
            cp,
            cx.cp_stride,
            "cp",
            [blk] + ([dkv] if dkv else []),
            phase="bwd",
        )
    return [blk, dkv]


def ep_backward(b: GraphBuilder, op: Op, x: list, cx: _Ctx, name: str, split: BwdSplit) -> list:
    """Combine's gradient AllToAll (dependent) -> ``split.pieces`` expert backward chunks -> per-chunk
    dispatch gradient."""
    k, ep = split.pieces, cx.c.ep
    comb = b.comm(
        f"{name}.combine",
        "alltoall",
        cx.a2a_bytes,
        ep,
        1,
        "ep",
        x,
        phase="bwd",
        duration_s=cx.a2a_s(),
        sm_share=cx.ep_sm,
    )
    outs = []
    for i in range(k):
        y = b.compute(name + _sfx(i, k), op.kind, split_s(split.split_part_s(op), k, cx.ov), [comb], phase="bwd")
        outs.append(
            b.comm(
                f"{name}.dispatch{_sfx(i, k)}",
                "alltoall",
                cx.a2a_bytes / k,
                ep,
                1,
                "ep",
                [y],
                phase="bwd",
                duration_s=cx.a2a_s(1 / k),
                sm_share=cx.ep_sm,
            )
        )
    return outs


def op_sac_replay(b: GraphBuilder, ops, cx: _Ctx) -> list:
    """The forward that torchtitan's per-op selective checkpointing replays before a layer's
    backward (:func:`costmodel.physics.kernels.recompute.op_sac_fractions`): each op's replayed share in order, the
    sequence-parallel all-gathers in front of the column-parallel GEMMs (chunked as in forward), or
    without SP the all-reduces after the row-parallel ones; the reduce-scatters' outputs are saved.
    Expert all-to-alls are not replayed here (torchtitan 327b72b has no MoE). Which ops, and how:
    :func:`costmodel.physics.comm.split_overhead.replay_plan`."""
    fr = op_sac_fractions(cx.model, ops, cx.tp, cx.w.dtype, cx.c.flash_attention)
    return _replay(b, replay_plan(ops, fr, cx.c, True), cx)


def module_replay(b: GraphBuilder, ops, cx: _Ctx) -> list:
    """The forward Megatron-Core's ``--recompute-modules`` beyond the core attention replay before a
    layer's backward (:func:`costmodel.physics.kernels.recompute.module_recompute_fractions`): the MoE block with its
    dispatch and combine all-to-alls, the pre-MLP norm; TP / SP collectives of a replayed op too.
    Which ops, and how: :func:`costmodel.physics.comm.split_overhead.replay_plan`."""
    fr = module_recompute_fractions(ops, cx.c.recomputed_modules, cx.moe, cx.model)
    return _replay(b, replay_plan(ops, fr, cx.c, False), cx)


def _replay(b: GraphBuilder, plan, cx: _Ctx) -> list:
    """The replayed ops of ``plan`` in a chain: a forward with its pieces, or one whole kernel."""
    x: list = []
    for op, whole in plan:
        if whole:
            x = [b.compute("rc." + op.name, op.kind, op.fwd_s, x, phase="recompute")]
        else:
            x = _fwd_op(b, op, x, cx, "recompute", "rc.")
    return x


# ----------------------------------------------------------------------------- graphs
def layer_graph(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    c: ParallelConfig,
    moe: bool,
    phase: str,
    recompute: bool = False,
    decode: bool = False,
) -> nx.DiGraph:
    """One layer's forward (``phase="fwd"``) or backward (``"bwd"``) graph, ending in node ``out``.

    ``recompute=True`` (full recompute) prefixes the backward with the layer's forward again,
    its communication included (Megatron-LM ``--recompute-granularity full``).
    ``decode=True``: an inference decode step (forward only), one new token for each of
    ``c.mb`` sequences whose KV cache holds ``w.seq_len`` tokens.
    """
    return _layer_graph(model, cluster, w, c, moe, phase, recompute, decode).copy()


@lru_cache(maxsize=512)
def _layer_graph(model, cluster, w, c, moe, phase, recompute, decode=False) -> nx.DiGraph:
    if phase not in ("fwd", "bwd"):
        raise ValueError(f"phase={phase!r}: must be 'fwd' or 'bwd'")
    if decode and phase != "fwd":
        raise ValueError("decode: forward only")
    cx = _Ctx(model, cluster, w, c, moe, decode)
    ops = layer_ops(model, cluster.device, w, c, moe, decode=decode)
    b = GraphBuilder(cluster, dma=plan_dma(model, cluster, w, c))
    zero = zero3_prefetch(b, model, c, moe, phase)
    x: list = []
    if not decode:  # FSDP2's copy-out (and gradient copy-in) on the compute stream, before any recompute
        copy = fsdp2_copies_s(model, cluster.device, c, moe)[0 if phase == "fwd" else 1]
        if copy > 0:
            x = [b.compute(f"zero.copy.{phase}", "elementwise", copy, x, phase=phase)]
    if phase == "fwd":
        for op in ops:
            x = _fwd_op(b, op, x, cx, "fwd", "")
    else:
        if recompute:
            for op in ops:
                x = _fwd_op(b, op, x, cx, "recompute", "rc.")
        elif c.recompute == "op_sac":
            x = op_sac_replay(b, ops, cx)
        elif c.recomputed_modules - {"core_attn"}:
            x = module_replay(b, ops, cx)
        for op in reversed(ops):
            x = _bwd_op(b, op, x, cx, "")
    b.sink("out", x + zero, phase=phase)
    return b.graph


def plan_dma(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig) -> dma.Assignment | None:
    """The DMA assignment a training plan's graphs run on (:func:`costmodel.physics.comm.dma.resolve`); serving
    plans keep the engine classes (no assignment)."""
    return dma.resolve(cluster, c, model) if w.mode == "train" else None


def pipelined_graph(
    cluster: ClusterSpec,
    t_compute_s: float,
    t_comm_s: float,
    chunks: int,
    kind: str = "reducescatter",
    strategy: str = "sp",
    issue: str = "async",
) -> nx.DiGraph:
    """A GEMM of ``t_compute_s`` split into ``chunks``, each followed by its share of a collective of
    ``t_comm_s`` (no latency): the mechanism of SP and EP-combine overlap in isolation. With
    ``chunks -> inf`` the makespan tends to ``max(T_compute, T_comm)`` (source section 2)."""
    b = GraphBuilder(cluster)
    outs = []
    for i in range(chunks):
        y = b.compute(f"gemm{_sfx(i, chunks)}", "gemm", t_compute_s / chunks)
        outs.append(
            b.comm(
                f"{kind}{_sfx(i, chunks)}", kind, 0.0, 2, 1, strategy, [y], issue=issue, duration_s=t_comm_s / chunks
            )
        )
    b.sink("out", outs)
    return b.graph
