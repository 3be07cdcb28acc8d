"""The model's architecture as Megatron-LM arguments, so an emitted command line runs as it is.

``planner.emit`` writes the plan (parallelism, precision, overlap); this module adds what
``pretrain_gpt.py`` needs to build the model the plan was evaluated for. Names are Megatron-LM's at
d98e8a64 (``megatron/training/arguments.py`` ``_add_network_size_args``, and the
``TransformerConfig`` fields it turns into flags: ``--num-query-groups``, ``--kv-channels``,
``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``, ``--moe-layer-freq``,
``--multi-latent-attention`` with its ranks, ``--hidden-dropout`` and ``--attention-dropout`` where the
model's differ from Megatron-Core's 0.1); ``benchmarks/real_parsers.py`` runs them through
Megatron-LM's own ``parse_args`` and ``validate_args``.

What a :class:`~costmodel.spec.specs.ModelSpec` does not record is assumed and said so
(:func:`megatron_model_notes`): normalisation, position embedding and linear biases follow the
family the activation marks (SwiGLU: the Llama family's RMSNorm, RoPE and no biases; otherwise
Megatron-LM's defaults, LayerNorm and learned absolute positions). None of them changes the
predicted step time. The vocabulary comes from the tokenizer, as in any Megatron-LM run.

>>> from costmodel.spec.presets import load_model
>>> from costmodel.spec.workload import Workload
>>> print(" ".join(t for a in megatron_model_args(load_model("llama3-8b"), Workload(global_batch=8, seq_len=8192))
...                for t in a))  # doctest: +NORMALIZE_WHITESPACE
--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention
--num-query-groups 8 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear
--seq-length 8192 --max-position-embeddings 8192 --untie-embeddings-and-output-weights --hidden-dropout 0.0
--attention-dropout 0.0
"""

from __future__ import annotations

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload

from .megatron_model import MEGATRON_DROPOUT


def megatron_model_args(model: ModelSpec, workload: Workload) -> list[list[str]]:
    """Megatron-LM arguments that build ``model`` for ``workload``'s sequence length."""
    m = model
    out = [
        ["--num-layers", str(m.layers)],
        ["--hidden-size", str(m.hidden)],
        ["--ffn-hidden-size", str(m.ffn_hidden)],
        ["--num-attention-heads", str(m.heads)],
    ]
    if m.kv_heads and m.kv_heads != m.heads:
        out += [["--group-query-attention"], ["--num-query-groups", str(m.kv_heads)]]
    if m.head_dim and m.head_dim != m.hidden // m.heads and not m.is_mla:
        out.append(["--kv-channels", str(m.head_dim)])
    if m.is_mla:  # DeepSeek-V2/V3 latent attention (TransformerConfig: MLATransformerConfig fields)
        out.append(["--multi-latent-attention"])
        if m.q_lora_rank:
            out.append(["--q-lora-rank", str(m.q_lora_rank)])
        out += [
            ["--kv-lora-rank", str(m.kv_lora_rank)],
            ["--qk-head-dim", str(m.head_dim or m.hidden // m.heads)],
            ["--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)],
            ["--v-head-dim", str(m.v_head_dim)],
        ]
    if m.activation == "swiglu":
        out += [
            ["--swiglu"],
            ["--normalization", "RMSNorm"],
            ["--position-embedding-type", "rope"],
            ["--disable-bias-linear"],
        ]
    if m.experts:
        out += [
            ["--num-experts", str(m.experts)],
            ["--moe-router-topk", str(m.topk)],
            ["--moe-ffn-hidden-size", str(m.moe_ffn_hidden or m.ffn_hidden)],
        ]
        if m.shared_experts:
            out.append(
                ["--moe-shared-expert-intermediate-size", str(m.shared_experts * (m.moe_ffn_hidden or m.ffn_hidden))]
            )
        if m.dense_layers:  # the first k layers dense (DeepSeek first_k_dense_replace)
            out.append(["--moe-layer-freq", f"([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})"])
    out += [["--seq-length", str(workload.seq_len)], ["--max-position-embeddings", str(workload.seq_len)]]
    if not m.tied_embeddings:
        out.append(["--untie-embeddings-and-output-weights"])
    if m.mtp_layers:  # Megatron-Core trains MTP modules only with --mtp-num-layers (costmodel.physics.kernels.mtp)
        out.append(["--mtp-num-layers", str(m.mtp_layers)])
    for name, default in MEGATRON_DROPOUT.items():  # stated only where the model's differs from Megatron's default
        p = getattr(m, name)
        if p != default:
            out.append(["--" + name.replace("_", "-"), str(float(p))])
    return out


def attention_args(c: ParallelConfig) -> list[list[str]]:
    """``--attention-backend unfused`` when the plan charges attention that stores the ``s x s``
    scores (``flash_attention=False``); the default (``auto``) lets Transformer Engine run its
    fused kernels (``megatron/core/models/common/language_module/language_module.py``)."""
    return [] if c.flash_attention else [["--attention-backend", "unfused"]]


def megatron_model_notes(model: ModelSpec, c: ParallelConfig) -> list[str]:
    """What the architecture arguments assume beyond the model spec."""
    fam = (
        "RMSNorm, RoPE and no linear biases (the Llama family of a SwiGLU model)"
        if model.activation == "swiglu"
        else "Megatron-LM's defaults, LayerNorm and learned absolute positions"
    )
    return [
        f"architecture flags from the model spec; not in it and assumed: {fam}; the vocabulary "
        f"({model.vocab}) comes from your tokenizer flags"
    ] + attention_notes(c)


def _word(t: str) -> str:
    return f'"{t}"' if any(ch in t for ch in "|()*[]+") else t


def with_model_lines(
    text: str, notes: list[str], c: ParallelConfig, workload: Workload, model: ModelSpec | None
) -> tuple[str, list[str]]:
    """Megatron-LM shell lines ``text`` with the architecture lines first (when ``model`` is given)
    and the attention backend last (when the plan's attention is unfused), and their notes."""
    head = megatron_model_args(model, workload) if model is not None else []
    tail = attention_args(c)
    lines = (
        [" ".join(_word(t) for t in a) for a in head]
        + ([text] if text else [])
        + [" ".join(_word(t) for t in a) for a in tail]
    )
    extra = megatron_model_notes(model, c) if model is not None else attention_notes(c)
    return " \\\n".join(lines), notes + extra


def attention_notes(c: ParallelConfig) -> list[str]:
    return (
        []
        if c.flash_attention
        else [
            "attention backend: unfused (--attention-backend unfused, TE's kernel that stores the s x s scores), as "
            "predicted; drop it for TE's fused kernels (faster, and less activation memory)"
        ]
    )


def model_args_tokens(model: ModelSpec, c: ParallelConfig, workload: Workload) -> list[str]:
    """The architecture and attention arguments as one token list (the JSON ``megatron_model_args``,
    to put before the plan's ``megatron_args``)."""
    return [t for a in megatron_model_args(model, workload) + attention_args(c) for t in a]
