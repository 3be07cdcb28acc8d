"""The kernel launches a chunked op adds: work divides over its pieces, the per-kernel overhead does not.

An op overlapped with communication by splitting it runs as several kernels: a TP/SP GEMM pipelined
with its collective in ``chunks`` pieces (Transformer Engine userbuffers: one GEMM per chunk), the
experts of an EP layer in ``chunks`` pieces between dispatch and combine, ring attention in ``cp``
blocks (Transformer Engine ``AttnFuncWithCPAndKVP2P``: one attention kernel per ring step). Each
extra piece pays the device's ``kernel_overhead_s`` again (:func:`costmodel.graph.nodes.split_s`:
``(d - ov) / k + ov`` per piece). The op graph builds those pieces
(:mod:`costmodel.graph.builders`: ``_fwd_op``, ``_bwd_op``, ``cp_ring_*``, ``ep_*``, the replays);
this module counts them for the closed form, with the same rules, so both engines charge the same
compute (``tests/test_split_overhead.py`` compares them layer graph by layer graph).

>>> from costmodel.compute import Op
>>> from costmodel.config import ParallelConfig
>>> op = Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "")
>>> fwd_pieces(op, ParallelConfig(tp=8, sp=True, chunks=4)), bwd_pieces(op, ParallelConfig(tp=8, sp=True, chunks=4))
(4, 1)
"""

from __future__ import annotations

from dataclasses import replace

COLUMN_PARALLEL = ("qkv", "fc1", "shared_fc1", "lm_head")


def _column_like(op, c) -> bool:
    """Column-parallel GEMMs, whose backward reduces the input gradient across TP (as the graph's)."""
    if c.tp == 1:
        return False
    return op.name in COLUMN_PARALLEL or (op.name == "experts" and op.comm_after == ("rs" if c.sp_on else "ar"))


def fwd_pieces(op, c) -> int:
    """Kernels ``op``'s forward runs as: ``cp`` ring blocks for the core attention under CP, ``chunks``
    for EP experts and for a GEMM with an SP all-gather before it or a TP/SP collective after it."""
    k = max(1, c.chunks)
    if op.name == "attn_core" and c.cp > 1:
        return c.cp
    if op.name == "experts" and op.comm_after == "a2a":
        return k
    post = c.tp > 1 and op.comm_after in ("rs", "ar")
    pre = c.sp_on and _column_like(op, c)
    return k if (pre or post) else 1


def bwd_pieces(op, c) -> int:
    """Kernels of ``op``'s backward that split: the attention's ``cp`` blocks, EP experts' ``chunks``,
    and under SP the data-gradient GEMM of an op followed by a reduce-scatter (its output gradient
    is gathered in ``chunks``). Only the data gradient splits there (:func:`split_extra_s`)."""
    if op.kind == "attention":
        return c.cp if c.cp > 1 else 1
    if op.kind != "gemm":
        return 1
    if op.name == "experts" and op.comm_after == "a2a":
        return max(1, c.chunks)
    if c.sp_on and op.comm_after == "rs":
        return max(1, c.chunks)
    return 1


def _extra(pieces: int, secs: float, ov: float) -> float:
    return (pieces - 1) * min(ov, secs) if pieces > 1 else 0.0


def _bwd_split_s(o) -> float:
    """The part of ``o``'s backward that splits: all of it for attention and EP experts, else the data gradient."""
    return o.bwd_s if (o.kind == "attention" or (o.name == "experts" and o.comm_after == "a2a")) else o.bwd_s - o.wgrad_s


def with_split_overheads(ops, c, ov: float) -> tuple:
    """``ops`` with each forward and backward lengthened by what its splits add (the weight
    gradient, never split, unchanged): the compute the op graph schedules, and the windows its
    pieces give the communication they overlap.

    >>> from costmodel.compute import Op
    >>> from costmodel.config import ParallelConfig
    >>> [round(o.fwd_s * 1e6, 1) for o in with_split_overheads([Op("fc1", "gemm", "mlp", 0.0, 1e-3, 2e-3, 1e-3, "")],
    ...                                                        ParallelConfig(tp=8, sp=True, chunks=4), 5e-6)]
    [1015.0]
    """
    out = []
    for o in ops:
        xf, xb = _extra(fwd_pieces(o, c), o.fwd_s, ov), _extra(bwd_pieces(o, c), _bwd_split_s(o), ov)
        out.append(replace(o, fwd_s=o.fwd_s + xf, bwd_s=o.bwd_s + xb) if xf or xb else o)  # unsplit ops as they are
    return tuple(out)


def replay_extra_s(ops, fractions, c, ov: float, per_op_sac: bool) -> float:
    """Seconds the splits add to a partial replay of the forward: Megatron's ``--recompute-modules``
    (``per_op_sac=False``, :func:`costmodel.graph.builders.module_replay`) or torchtitan's per-op
    selective checkpointing (``True``, ``op_sac_replay``), each op replaying ``fractions`` of itself
    with the TP all-reduce it needs (the saved reduce-scatters are not replayed)."""
    out = 0.0
    for o, f in zip(ops, fractions):
        ar = c.tp > 1 and not c.sp_on and o.comm_after == "ar"
        if per_op_sac:
            ag = c.sp_on and _column_like(o, c)
            if (f <= 0 and not (ag or ar)) or (o.name == "attn_core" and c.cp > 1) or \
                    (o.name == "experts" and o.comm_after == "a2a"):
                continue
        elif f <= 0:
            continue
        elif o.name == "experts" and o.comm_after == "a2a":
            out += _extra(fwd_pieces(o, c), o.fwd_s, ov)
            continue
        plain = replace(o, fwd_s=f * o.fwd_s, comm_after="ar" if ar else "")
        out += _extra(fwd_pieces(plain, c), plain.fwd_s, ov)
    return out
