"""The ZeRO-3 / FSDP nodes of a layer graph (:func:`costmodel.engines.graph.builders.layer_graph`): the parameter
all-gathers prefetched for the next layer and the gradient reduce-scatters of the previous one, per group
(:func:`costmodel.physics.mechanics.fsdp_copies.zero3_groups`) and per piece
(:mod:`costmodel.physics.mechanics.zero3_fetch`), issued at the layer's start with nothing to wait for."""

from __future__ import annotations

from costmodel.engines.graph.nodes import GraphBuilder
from costmodel.frameworks import rules as frameworks
from costmodel.physics.mechanics.fsdp_copies import zero3_groups
from costmodel.physics.mechanics.zero3_fetch import gather_pieces, reduce_pieces
from costmodel.physics.memory.stage_memory import grad_elem_bytes, param_gather_bytes
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ModelSpec


def zero3_prefetch(b: GraphBuilder, model: ModelSpec, c: ParallelConfig, moe: bool, phase: str) -> list:
    """Parameter AllGather for the next layer (and in backward the gradient ReduceScatter of the
    previous one), issued at the layer's start with nothing to wait for. Which of them a
    framework runs per micro-batch is :func:`costmodel.frameworks.rules.semantics` (DeepSpeed ZeRO-2:
    the ReduceScatter only; FSDP2 without resharding: the forward gather and the ReduceScatter)."""
    g = c.dp * c.cp
    sem = frameworks.of(c)
    if not sem.per_microbatch or g <= 1:
        return []
    out = []
    # DeepSpeed: one all-gather per module, reduce-scatters per reduce bucket (costmodel.physics.mechanics.zero3_fetch)
    pieces, reduces = gather_pieces(model, c, moe), reduce_pieces(model, c, moe)
    for i, (params, size, stride) in enumerate(zero3_groups(model, c, moe)):
        sfx = "" if i == 0 else ".experts"
        if sem.gather_forward if phase == "fwd" else sem.gather_backward:
            for j, p in enumerate(pieces[i]):
                out.append(
                    b.comm(
                        f"zero.ag.{phase}{sfx}" + (f".{j}" if j else ""),
                        "allgather",
                        p * param_gather_bytes(c),
                        size,
                        stride,
                        "zero",
                        phase=phase,
                    )
                )
        if phase == "bwd" and sem.reduce_per_microbatch:
            for j, p in enumerate(reduces[i]):
                out.append(
                    b.comm(
                        f"zero.rs{sfx}" + (f".{j}" if j else ""),
                        "reducescatter",
                        p * grad_elem_bytes(c),
                        size,
                        stride,
                        "zero",
                        phase=phase,
                    )
                )
    return out
