"""Multi-token prediction (DeepSeek-V3 section 2.2; Megatron-Core ``--mtp-num-layers``): what an MTP
module adds beyond its decoder layer.

Megatron-Core's ``MultiTokenPredictionLayer`` (``megatron/core/transformer/multi_token_prediction.py``
at NVIDIA/Megatron-LM@d98e8a64) embeds the shifted tokens with the model's embedding, normalises the
embedding and the previous hidden state (``enorm``, ``hnorm``), projects their concatenation with
``eh_proj`` (a column-parallel linear 2h -> h, no bias), runs one decoder layer (counted with the
decoder layers, :func:`costmodel.physics.memory.stage_contents.chunk_counts`) and a ``final_layernorm``. The logits and loss
of every MTP depth are computed on the last stage with the model's own ``output_layer``
(``process_mtp_loss``, called from ``GPTModel._postprocess``): the LM head GEMM and the cross-entropy
run ``1 + mtp_layers`` times there, on the one output weight. A rank that holds MTP layers but not the
embedding keeps a copy of the word embedding, synchronised with the first stage's like a tied
embedding (``language_module.py`` ``setup_embeddings_and_output_layer``: "we also need to maintain
duplicated embedding weights in mtp process stage"); its gradient all-reduce is not modelled.

The layer counts, which virtual stage holds the MTP layers, come from the plan's layout
(:func:`costmodel.spec.layout.of`: with the loss unless the layout says otherwise).
"""

from __future__ import annotations

from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.compute import Op, _elementwise, _gemm, embedding_op
from costmodel.spec.layout import of as layout_of


def stage_mtp_layers(model, c, stage: int) -> int:
    """MTP layers on pipeline rank ``stage`` (over all its model chunks)."""
    if not model.mtp_layers:
        return 0
    return sum(layout_of(model, c).mtp_chunks(stage))


def heads_on(model, c, stage: int) -> int:
    """LM head and cross-entropy passes per micro-batch on ``stage``: ``1 + mtp_layers`` on the last
    (``process_mtp_loss`` loops over the MTP depths with the model's output layer), 0 elsewhere."""
    return 1 + model.mtp_layers if stage == c.pp - 1 else 0


def extra_params(model, c, stage: int) -> float:
    """Parameters one GPU of ``stage`` holds for its MTP modules beyond their decoder layers:
    ``eh_proj`` (2h x h, split by TP), ``enorm``, ``hnorm`` and ``final_layernorm`` (h each, replicated),
    and the embedding copy on a stage that holds MTP but not the embedding."""
    k = stage_mtp_layers(model, c, stage)
    if not k:
        return 0.0
    h = model.hidden
    copy = model.embedding_params / c.tp if stage != 0 else 0.0
    return k * (2 * h * h / c.tp + 3 * h) + copy


def extra_ops(model, dev, w, c) -> tuple[Op, ...]:
    """The ops of one MTP module beyond its decoder layer, per micro-batch: the embedding of the
    shifted tokens, the two input RMSNorms and the final one (read and write h per token each), and
    ``eh_proj`` on the concatenated 2h input (its TP all-gather before it is the layer's, not charged
    again here)."""
    n = c.mb * w.seq_len / c.cp
    h = model.hidden
    return (
        embedding_op(model, dev, w, c),
        _elementwise("mtp_norms", "mtp", 3 * 2 * ACT_BYTES * n * h, dev, kernels=3),
        _gemm("mtp_eh_proj", "mtp", n, h / c.tp, 2 * h, dev, w.dtype),
    )


def extra_s(model, dev, w, c, stage: int) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch of ``stage``'s MTP modules beyond their decoder layers."""
    k = stage_mtp_layers(model, c, stage)
    if not k:
        return 0.0, 0.0
    ops = extra_ops(model, dev, w, c)
    return k * sum(o.fwd_s for o in ops), k * sum(o.bwd_s for o in ops)


def module_params(model) -> int:
    """Weights of one MTP module the model trains, without the embedding and output head it shares:
    its decoder layer (of the last layer's kind), ``eh_proj`` (2h x h) and its three norms."""
    layer = model.moe_layer_params if model.is_moe else model.dense_layer_params
    return layer + 2 * model.hidden * model.hidden + 3 * model.hidden
