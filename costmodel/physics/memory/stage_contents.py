"""What a pipeline stage holds: its layers (dense / MoE, per model chunk) and the parameters one GPU keeps of them.

The layout decides the counts (:func:`costmodel.spec.layout.of`); memory, the engines and the gradient buckets read them from here.

>>> from costmodel.spec.presets import load_model
>>> from costmodel.spec.plan import ParallelConfig
>>> layer_counts(load_model("gpt3-175b"), ParallelConfig(pp=8), 0)
(12, 0)
"""

from __future__ import annotations

from functools import lru_cache

from costmodel.spec import layout as _layout
from costmodel.physics.kernels import mtp
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.stages import chunk_layers, stage_layers
from costmodel.spec.specs import ModelSpec


def is_moe_layer(model: ModelSpec, layer: int) -> bool:
    return model.is_moe and layer >= model.dense_layers


def expert_dp(c: ParallelConfig) -> int:
    """Ranks an expert's weights are replicated over: ``tp*dp*cp / (ep * expert_tp)``."""
    return max(1, c.tp * c.dp * c.cp // (c.ep * c.expert_tp()))


def layer_counts(model: ModelSpec, c: ParallelConfig, stage: int) -> tuple[int, int]:
    """(dense, MoE) layers on ``stage``; the dense ones come first (they lead the model)."""
    return tuple(map(sum, zip(*chunk_counts(model, c, stage))))


def chunk_counts(model: ModelSpec, c: ParallelConfig, stage: int) -> tuple[tuple[int, int], ...]:
    """(dense, MoE) layers of each of ``stage``'s model chunks, in chunk order: as many layers as
    the plan's layout puts in each (:func:`costmodel.spec.layout.of`), taken from the stage's layers
    :func:`rank_layers` (the dense ones first), then the chunk's MTP layers: each holds one decoder
    layer of the kind of the model's last one (Megatron-Core ``gpt_layer_specs.py``
    ``get_gpt_mtp_block_spec_for_backend``: "the spec for the last layer of decoder block"), whose weights,
    activations and compute are those of a decoder layer (:mod:`costmodel.physics.kernels.mtp` adds the rest of a module)."""
    # a dense model's layers are all dense, however many a probe split puts on a stage (the search's
    # tables probe stages of up to all the model's layers, past the model's own numbering)
    return _chunk_counts(
        model.layers,
        model.dense_layers if model.is_moe else 1 << 30,
        c.pp,
        c.vp,
        c.layers_per_stage,
        c.layout,
        stage,
        model.mtp_layers,
    )


def rank_layers(model: ModelSpec, c: ParallelConfig, stage: int) -> range:
    """The model layers charged to ``stage``: its count of them, numbered as if each rank held a
    contiguous block (as this model always numbered them). Megatron-Core numbers an interleaved
    rank's layers chunk by chunk across the ranks (``get_layer_offset``); only the dense / MoE kind
    of a layer depends on its number, so the two differ only where an MoE model's leading dense
    layers outnumber the first virtual stage's (they are all charged to stage 0 here)."""
    per = _layout.of(model, c).per_rank() if (c.layout is not None or c.layers_per_stage is not None) else None
    if per is None:
        return stage_layers(model.layers, c.pp, stage)
    return stage_layers(model.layers, c.pp, stage, per)


@lru_cache(maxsize=65536)
def _chunk_counts(layers, dense, pp, vp, split, lay, stage, mtp=0):
    if lay is None and _plain_split(split, vp, stage, mtp):
        # :func:`costmodel.spec.layout.from_split` read without building it (the searches probe a new split
        # per layer count): rank ``stage``'s chunks are ``chunk_layers(split[stage], vp, stage, pp)``,
        # its layers start after the ranks before it (``per_rank()`` is the split: a rank's chunks sum
        # to its count), and the MTP layers sit in the last chunk of the last rank (``from_chunks``)
        last = stage == len(split) - 1
        return _counts_of(
            chunk_layers(split[stage], vp, stage, len(split)),
            (0,) * (vp - 1) + (mtp if last else 0,),
            sum(split[:stage]),
            layers,
            dense,
        )
    if lay is None:
        # the even split (an invalid plan's floor, as before: validate_config refuses it)
        lay = _layout.from_split(split if split is not None else (layers // pp,) * pp, vp, mtp)
    return _counts_of(lay.chunks(stage), lay.mtp_chunks(stage), sum(lay.per_rank()[:stage]), layers, dense)


def _plain_split(split, vp, stage, mtp) -> bool:
    """Whether :func:`_chunk_counts` may read ``split`` without its layout: the split the layout of
    every valid plan has (integer counts >= 0, ``vp >= 1``, ``stage`` one of its ranks, ``mtp >= 0``); anything
    else goes through :func:`costmodel.spec.layout.from_split`, which raises what it raises."""
    return (
        split is not None
        and type(vp) is int
        and vp >= 1
        and type(stage) is int
        and 0 <= stage < len(split)
        and type(mtp) is int
        and mtp >= 0
        and all(type(n) is int and n >= 0 for n in split)
    )


def _counts_of(chunks, mtp_chunks, start, layers, dense) -> tuple[tuple[int, int], ...]:
    out = []
    for n, k in zip(chunks, mtp_chunks):
        nd = max(0, min(start + n, dense) - start)
        md = k if dense > layers else 0  # an MTP layer is MoE in an MoE model (dense < layers)
        out.append((nd + md, n - nd + k - md))
        start += n
    return tuple(out)


def layer_params(model: ModelSpec, c: ParallelConfig, moe: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one layer held by one GPU: attention, dense MLP or shared
    experts split by TP, router and norms replicated; the routed experts split over EP (and TP
    inside an expert without EP)."""
    if not moe:
        return (model.attn_params + model.mlp_params(model.ffn_hidden)) / c.tp + 2 * model.hidden, 0.0
    dense = (
        (model.attn_params + model.shared_experts * model.expert_params) / c.tp
        + model.hidden * model.experts
        + 2 * model.hidden
    )
    return dense, model.experts / c.ep * model.expert_params / c.expert_tp()


def stage_params(model: ModelSpec, c: ParallelConfig, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters held by one GPU of ``stage``, before ZeRO sharding."""
    n_dense, n_moe = layer_counts(model, c, stage)
    dense = n_dense * layer_params(model, c, False)[0]
    expert = 0.0
    if n_moe:
        d, e = layer_params(model, c, True)
        dense += n_moe * d
        expert = n_moe * e
    if stage == 0:
        dense += model.embedding_params / c.tp
    if stage == c.pp - 1:
        # the LM head; with tied embeddings and pp > 1 Megatron keeps a copy on the last stage
        if not model.tied_embeddings or c.pp > 1:
            dense += model.embedding_params / c.tp
    dense += mtp.extra_params(model, c, stage)  # MTP modules beyond their decoder layers
    return dense, expert
