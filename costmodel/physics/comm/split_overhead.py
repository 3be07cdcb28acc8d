"""The pieces a chunked op runs as, and the kernel launches they add: work divides over the pieces,
the per-kernel overhead does not.

An op overlapped with communication by splitting it runs as several kernels: a TP/SP GEMM pipelined
with its collective in ``chunks`` pieces (Transformer Engine userbuffers: one GEMM per chunk), the
experts of an EP layer in ``chunks`` pieces between dispatch and combine, ring attention in ``cp``
blocks (Transformer Engine ``AttnFuncWithCPAndKVP2P``: one attention kernel per ring step). Each
extra piece pays the device's ``kernel_overhead_s`` again (:func:`split_s`: ``(d - ov) / k + ov``
per piece).

This module owns those rules for both engines: :func:`fwd_split`, :func:`bwd_split` and
:func:`replay_plan` say how an op or a replay splits (mechanism, number of pieces, which part of the
backward, the TP/SP collectives around the pieces); the op graph builds its nodes from them
(:mod:`costmodel.engines.graph.builders`) and the closed form counts their extra launches from them
(:func:`with_split_overheads`, :func:`replay_extra_s`), so a change of rule moves both engines
(``tests/test_split_overhead.py`` compares them layer graph by layer graph).

>>> from costmodel.physics.kernels.compute import Op
>>> from costmodel.spec.plan import ParallelConfig
>>> op = Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "")
>>> fwd_pieces(op, ParallelConfig(tp=8, sp=True, chunks=4)), bwd_pieces(op, ParallelConfig(tp=8, sp=True, chunks=4))
(4, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

COLUMN_PARALLEL = ("qkv", "fc1", "shared_fc1", "lm_head")

CP_RING = "cp_ring"  # ring-attention blocks, one per CP rank (graph: cp_ring_forward / cp_ring_backward)
EP = "ep"  # expert chunks between the dispatch and combine all-to-alls (graph: ep_forward / ep_backward)
TP = "tp"  # a forward GEMM in chunks with its SP all-gather before and/or TP/SP collective after each
GEMM = "gemm"  # a backward GEMM: data gradient (chunked under SP) and weight gradient
ONE = ""  # one kernel, no collective of its own


def split_s(duration_s: float, pieces: int, overhead_s: float) -> float:
    """Seconds of one of ``pieces`` equal chunks of a kernel of ``duration_s``: the work divides,
    the per-kernel overhead does not.

    >>> split_s(1.0, 4, 0.0), split_s(1.0, 4, 0.2)
    (0.25, 0.4)
    """
    if pieces <= 1:
        return duration_s
    overhead_s = min(overhead_s, duration_s)
    return (duration_s - overhead_s) / pieces + overhead_s


def extra_s(pieces: int, duration_s: float, overhead_s: float) -> float:
    """Seconds ``pieces`` chunks of :func:`split_s` add to a kernel of ``duration_s``:
    ``pieces * split_s(duration_s, pieces, overhead_s) - duration_s``.

    >>> extra_s(4, 1.0, 0.2), round(4 * split_s(1.0, 4, 0.2) - 1.0, 12)
    (0.6000000000000001, 0.6)
    """
    return (pieces - 1) * min(overhead_s, duration_s) if pieces > 1 else 0.0


def column_parallel(op, sp: bool) -> bool:
    """A column-parallel GEMM under TP (with ``sp``: sequence parallelism): the SP all-gather comes
    before it, its backward reduces the input gradient across TP. The experts of an MoE layer
    without EP are TP-split like the MLP (their ``comm_after`` is the MLP's collective).

    >>> from costmodel.physics.kernels.compute import Op
    >>> column_parallel(Op("experts", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "rs"), True)
    True
    """
    return op.name in COLUMN_PARALLEL or (op.name == "experts" and op.comm_after == ("rs" if sp else "ar"))


def column_like(op, c) -> bool:
    """Column-parallel GEMMs of plan ``c`` (:func:`column_parallel`; none without TP)."""
    return c.tp > 1 and column_parallel(op, c.sp_on)


@dataclass(frozen=True, kw_only=True)
class FwdSplit:
    """How an op's forward runs: ``mechanism`` (:data:`CP_RING`, :data:`EP`, :data:`TP` or
    :data:`ONE`), ``pieces`` kernels of :func:`split_s` each, and for :data:`TP` the collectives
    of each piece: ``gather_before`` (SP all-gather of its input) and ``reduce_after``
    (``"allreduce"``, ``"reducescatter"`` or ``""``) of its partial sums, each ``1/pieces`` of the
    whole message."""

    mechanism: str
    pieces: int
    gather_before: bool = False
    reduce_after: str = ""


@dataclass(frozen=True, kw_only=True)
class BwdSplit:
    """How an op's backward runs: ``mechanism`` (:data:`CP_RING`, :data:`EP`, :data:`GEMM` or
    :data:`ONE`), the ``pieces`` its split part (:meth:`split_part_s`) runs as, and for :data:`GEMM`
    ``gather_grad`` (SP: the output gradient all-gathered in ``pieces`` chunks, one per data-gradient
    piece) and ``reduce_input_grad`` (``"reducescatter"`` under SP, ``"allreduce"`` without, ``""``:
    column-parallel GEMMs reduce their input gradient while the weight gradient computes)."""

    mechanism: str
    pieces: int
    gather_grad: bool = False
    reduce_input_grad: str = ""

    def split_part_s(self, op) -> float:
        """The seconds of ``op``'s backward that split: all of it for ring attention and EP
        experts, the data gradient of a GEMM (the weight gradient never splits)."""
        return op.bwd_s if self.mechanism in (CP_RING, EP) else op.bwd_s - op.wgrad_s


_REDUCE = {"rs": "reducescatter", "ar": "allreduce"}  # an op's ``comm_after`` -> the collective after each piece
_FWD_ONE = FwdSplit(mechanism=ONE, pieces=1)  # the unsplit cases, built once
_BWD_ONE = BwdSplit(mechanism=ONE, pieces=1)


def fwd_split(op, c) -> FwdSplit:
    """``op``'s forward under plan ``c``: ``cp`` ring blocks for the core attention under CP,
    ``chunks`` for EP experts and for a GEMM with an SP all-gather before it or a TP/SP collective
    after it; else one kernel.

    >>> from costmodel.physics.kernels.compute import Op
    >>> from costmodel.spec.plan import ParallelConfig
    >>> fwd_split(Op("fc2", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "rs"), ParallelConfig(tp=8, sp=True, chunks=4))
    FwdSplit(mechanism='tp', pieces=4, gather_before=False, reduce_after='reducescatter')
    """
    k = max(1, c.chunks)
    if op.name == "attn_core" and c.cp > 1:
        return FwdSplit(mechanism=CP_RING, pieces=c.cp)
    if op.name == "experts" and op.comm_after == "a2a":
        return FwdSplit(mechanism=EP, pieces=k)
    post = _REDUCE.get(op.comm_after, "") if c.tp > 1 else ""
    pre = c.sp_on and column_like(op, c)
    if pre or post:
        return FwdSplit(mechanism=TP, pieces=k, gather_before=pre, reduce_after=post)
    return _FWD_ONE


def bwd_split(op, c) -> BwdSplit:
    """``op``'s backward under plan ``c``: the attention's ``cp`` blocks, EP experts' ``chunks``,
    and under SP the data-gradient GEMM of an op followed by a reduce-scatter in ``chunks`` (its
    output gradient is gathered in ``chunks``); the input-gradient reduction of column-parallel GEMMs.

    >>> from costmodel.physics.kernels.compute import Op
    >>> from costmodel.spec.plan import ParallelConfig
    >>> bwd_split(Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, ""), ParallelConfig(tp=8, sp=True, chunks=4))
    BwdSplit(mechanism='gemm', pieces=1, gather_grad=False, reduce_input_grad='reducescatter')
    """
    if op.kind == "attention":
        return BwdSplit(mechanism=CP_RING, pieces=c.cp) if c.cp > 1 else _BWD_ONE
    if op.kind != "gemm":
        return _BWD_ONE
    k = max(1, c.chunks)
    if op.name == "experts" and op.comm_after == "a2a":
        return BwdSplit(mechanism=EP, pieces=k)
    gather = c.sp_on and op.comm_after == "rs"
    reduce = ("reducescatter" if c.sp_on else "allreduce") if column_like(op, c) else ""
    return BwdSplit(mechanism=GEMM, pieces=k if gather else 1, gather_grad=gather, reduce_input_grad=reduce)


def fwd_pieces(op, c) -> int:
    """Kernels ``op``'s forward runs as (:func:`fwd_split`)."""
    return fwd_split(op, c).pieces


def bwd_pieces(op, c) -> int:
    """Kernels the split part of ``op``'s backward runs as (:func:`bwd_split`)."""
    return bwd_split(op, c).pieces


def with_split_overheads(ops, c, ov: float) -> tuple:
    """``ops`` with each forward and backward lengthened by what its splits add (the weight
    gradient, never split, unchanged): the compute the op graph schedules, and the windows its
    pieces give the communication they overlap.

    >>> from costmodel.physics.kernels.compute import Op
    >>> from costmodel.spec.plan import ParallelConfig
    >>> [round(o.fwd_s * 1e6, 1) for o in with_split_overheads([Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "")],
    ...                                                        ParallelConfig(tp=8, sp=True, chunks=4), 5e-6)]
    [1015.0]
    """
    # memoised for the tuples costmodel.physics.kernels.compute.layer_ops returns (its own memo hands out the same tuple): the
    # splits read the plan's tp, sp, cp and chunks only; the entry keeps ``ops`` alive, so its id is not reused
    key = (id(ops), c.tp, c.sp_on, c.cp, c.chunks, ov) if type(ops) is tuple else None
    hit = _SPLIT.get(key) if key is not None else None
    if hit is not None and hit[0] is ops:
        return hit[1]
    out = []
    for o in ops:
        b = bwd_split(o, c)
        xf, xb = extra_s(fwd_split(o, c).pieces, o.fwd_s, ov), extra_s(b.pieces, b.split_part_s(o), ov)
        out.append(replace(o, fwd_s=o.fwd_s + xf, bwd_s=o.bwd_s + xb) if xf or xb else o)  # unsplit ops as they are
    out = tuple(out)
    if key is not None:
        if len(_SPLIT) >= SPLIT_ENTRIES:
            _SPLIT.clear()
        _SPLIT[key] = (ops, out)
    return out


_SPLIT: dict = {}
#: entries of :func:`with_split_overheads`' memo before it starts again (as ``layer_ops``' ``lru_cache``)
SPLIT_ENTRIES = 4096
with_split_overheads.cache_clear = _SPLIT.clear  # as an lru_cache: benchmarks start cold by clearing the caches


def replay_plan(ops, fractions, c, per_op_sac: bool) -> tuple:
    """The forward a partial replay runs before a layer's backward, as ``(op, whole)`` pairs in
    order: Megatron's ``--recompute-modules`` (``per_op_sac=False``,
    :func:`costmodel.physics.kernels.recompute.module_recompute_fractions`) or torchtitan's per-op selective
    checkpointing (``True``, :func:`costmodel.physics.kernels.recompute.op_sac_fractions`), each op replaying
    ``fractions`` of itself. ``op`` is the replayed share; ``whole=False``: it runs as a forward
    (:func:`fwd_split`) with the TP all-reduce it needs (without SP), the saved reduce-scatters not
    replayed; ``whole=True``: one kernel without communication (per-op SAC's ring attention and EP
    experts; torchtitan 327b72b has no MoE). Megatron's MoE block replays its experts in full,
    dispatch and combine included. Per-op SAC replays the SP all-gather in front of a column-parallel
    GEMM (or without SP the all-reduce after a row-parallel one) even when the GEMM's output is saved.

    >>> from costmodel.physics.kernels.compute import Op
    >>> from costmodel.spec.plan import ParallelConfig
    >>> ops = [Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, ""),
    ...        Op("act", "elementwise", "mlp", 0.0, 1e-4, 1e-4, 0.0, "")]
    >>> [(o.name, o.fwd_s, whole) for o, whole in replay_plan(ops, (0.0, 1.0), ParallelConfig(tp=8, sp=True), True)]
    [('fc1', 0.0, False), ('act', 0.0001, False)]
    """
    out = []
    for o, f in zip(ops, fractions):
        ar = c.tp > 1 and not c.sp_on and o.comm_after == "ar"
        if per_op_sac:
            ag = c.sp_on and column_like(o, c)
            if f <= 0 and not (ag or ar):
                continue
            if (o.name == "attn_core" and c.cp > 1) or (o.name == "experts" and o.comm_after == "a2a"):
                out.append((replace(o, fwd_s=f * o.fwd_s), True))
                continue
        elif f <= 0:
            continue
        elif o.name == "experts" and o.comm_after == "a2a" and f >= 1.0:  # "moe": the whole block, all-to-alls too
            out.append((o, False))
            continue
        out.append((replace(o, fwd_s=f * o.fwd_s, comm_after="ar" if ar else ""), False))
    return tuple(out)


def replay_extra_s(ops, fractions, c, ov: float, per_op_sac: bool) -> float:
    """Seconds the splits add to a partial replay of the forward (:func:`replay_plan`; the op
    graph's ``module_replay`` and ``op_sac_replay`` in :mod:`costmodel.engines.graph.builders`)."""
    return sum(
        extra_s(fwd_pieces(o, c), o.fwd_s, ov) for o, whole in replay_plan(ops, fractions, c, per_op_sac) if not whole
    )
