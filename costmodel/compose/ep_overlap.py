"""The MoE all-to-all hidden behind another micro-batch's compute (Megatron-Core ``--overlap-moe-expert-parallel-comm``).

Megatron-Core's combined 1F1B schedule runs the forward of one micro-batch and the backward of another
together, layer by layer, on two CUDA streams (``megatron/core/models/common/model_chunk_schedule_plan.py``
``TransformerLayerSchedulePlan.run`` at NVIDIA/Megatron-LM@d98e8a6)::

    comm stream: combine_bwd      | dispatch_fwd -> dispatch_bwd        | combine_fwd
    comp stream: pre_dispatch_fwd | mlp_bwd -> mlp_bwd_dw -> mlp_fwd    | pre_dispatch_bwd (-> its dw)

each all-to-all waiting for the compute that produces its input and each compute for the all-to-all that
feeds it; the next layer pair's backward starts from this pair's ``pre_dispatch_bwd`` and its forward from
this pair's ``combine_fwd``. :func:`pair_exposed_s` replays those two FIFO streams over consecutive pairs
and returns the all-to-all time one pair leaves exposed in the steady state, plus the slowdown of the
compute the SM-based all-to-alls share their SMs with (``coef``, the device's
``comm_compute_interference``, as :class:`~costmodel.compose.overlap.CommLedger` charges an overlap).

Only the forward and backward passes the schedule pairs gain: :func:`paired_fraction` counts them from
Megatron-Core's warm-up (``megatron/core/pipeline_parallel/schedules.py@d98e8a6``: ``(p - s - 1) * 2 +
(v - 1) * p`` forward chunks, plus one "to ensure the forward and backward computations are independent
in all 1f1b steps"; without a pipeline ``combined_1f1b_schedule_for_no_pipelining`` runs the first
forward and the last backward alone). Both engines charge a layer's all-to-alls as paired in that share of
its passes and as without the overlap in the rest (``comm_ledgers._ep_pair_ledgers``, the op-graph engine's
``graph.blend.mix``, per stage there).

>>> parts = PairParts(pre_f=1.0, mlp_f=2.0, mlp_b=2.0, mlp_dw=1.0, pre_b=2.0, pre_dw=0.5, a2a=0.5)
>>> round(pair_exposed_s(parts), 3)  # every all-to-all shorter than the compute beside it: all hidden
0.0
>>> round(pair_exposed_s(PairParts(1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 3.0)), 3)  # all-to-all bound: 4 x 3 s a pair
8.0
>>> paired_fraction(m=8, p=1, v=1), paired_fraction(m=16, p=4, v=2, stage=3)  # 1 of 8; 0 * 2 + 1 * 4 + 1 of 32
(0.875, 0.84375)
"""

from __future__ import annotations

from typing import NamedTuple

#: ops of an MoE layer the combined schedule runs between dispatch and combine (its ``mlp`` node: the routed
#: experts and the shared experts, ``megatron/core/transformer/moe/moe_layer.py`` ``experts_compute``)
MLP_OPS = ("experts", "shared_fc1", "shared_fc2")
#: consecutive layer pairs replayed to reach the steady state (the slope from the first to the last)
PAIRS = 6


class PairParts(NamedTuple):
    """Seconds of one MoE layer's pieces: compute before the dispatch (attention, router, permutation) and
    the MLP, forward, backward (data gradient) and weight gradient, and one all-to-all."""

    pre_f: float
    mlp_f: float
    mlp_b: float
    mlp_dw: float
    pre_b: float
    pre_dw: float
    a2a: float


def parts_of(ops, t_a2a: float) -> PairParts:
    """The pieces of an MoE layer from its ops (:func:`costmodel.physics.kernels.compute.layer_ops`)."""
    mlp = [o for o in ops if o.name in MLP_OPS]
    pre = [o for o in ops if o.name not in MLP_OPS]
    return PairParts(
        pre_f=sum(o.fwd_s for o in pre),
        mlp_f=sum(o.fwd_s for o in mlp),
        mlp_b=sum(o.bwd_s - o.wgrad_s for o in mlp),
        mlp_dw=sum(o.wgrad_s for o in mlp),
        pre_b=sum(o.bwd_s - o.wgrad_s for o in pre),
        pre_dw=sum(o.wgrad_s for o in pre),
        a2a=t_a2a,
    )


def pair_exposed_s(p: PairParts, coef: float = 0.0) -> float:
    """All-to-all seconds one forward/backward layer pair leaves exposed in the steady state (see the module)."""
    if p.a2a <= 0:
        return 0.0
    comm = comp = 0.0  # when each stream is next free
    pre_b_end = comb_f_end = 0.0  # what the next pair waits for
    ends = []
    for _ in range(PAIRS):
        comb_b = max(comm, pre_b_end) + p.a2a
        pre_f = max(comp, comb_f_end) + p.pre_f
        mlp_b = max(pre_f, comb_b) + p.mlp_b
        disp_f = max(comb_b, pre_f) + p.a2a
        mlp_dw = mlp_b + p.mlp_dw
        disp_b = max(disp_f, mlp_b) + p.a2a
        mlp_f = max(mlp_dw, disp_f) + p.mlp_f
        comb_f = max(disp_b, mlp_f) + p.a2a
        pre_b = max(mlp_f, disp_b) + p.pre_b
        comp = pre_b + p.pre_dw
        comm, pre_b_end, comb_f_end = comb_f, pre_b, comb_f
        ends.append(max(comm, comp))
    per_pair = (ends[-1] - ends[0]) / (PAIRS - 1)
    compute = p.pre_f + p.mlp_f + p.mlp_b + p.mlp_dw + p.pre_b + p.pre_dw
    exposed = max(0.0, per_pair - compute)
    return exposed + coef * max(0.0, 4 * p.a2a - exposed)


def paired_fraction(m: int, p: int, v: int, stage: int | None = None) -> float:
    """Share of a stage's forward (and backward) chunk passes the combined schedule runs paired; ``stage``
    None: the mean over the stages (what one layer's cost, shared by every stage, can carry)."""
    total = m * v
    if p <= 1:
        return max(0.0, (total - 1) / total)
    stages = range(p) if stage is None else (stage,)
    warm = [min(total, (p - s - 1) * 2 + (v - 1) * p + 1) for s in stages]
    return max(0.0, 1.0 - sum(warm) / len(warm) / total)
