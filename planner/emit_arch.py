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
--rotary-base 500000 --seq-length 8192 --max-position-embeddings 8192 --untie-embeddings-and-output-weights
--hidden-dropout 0.0 --attention-dropout 0.0
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
    out += rope_args(m)
    if m.qk_layernorm:  # Qwen3's per-head RMSNorm of Q and K (TransformerConfig.qk_layernorm)
        out.append(["--qk-layernorm"])
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
        out += router_args(m)
    out += [["--seq-length", str(workload.seq_len)], ["--max-position-embeddings", str(max_positions(m, workload))]]
    if not m.tied_embeddings:
        out.append(["--untie-embeddings-and-output-weights"])
    if m.mtp_layers:  # Megatron-Core trains MTP modules only with --mtp-num-layers (costmodel.physics.kernels.mtp)
        out.append(["--mtp-num-layers", str(m.mtp_layers)])
    for name, default in MEGATRON_DROPOUT.items():  # stated only where the model's differs from Megatron's default
        p = getattr(m, name)
        if p != default:
            out.append(["--" + name.replace("_", "-"), str(float(p))])
    return out


def max_positions(model: ModelSpec, workload: Workload) -> int:
    """``--max-position-embeddings``: the model's (its config's ``max_position_embeddings``), else the sequence
    length; never below the sequence length, which Megatron-LM asserts (``validate_args`` @d98e8a64:
    "max_position_embeddings ... must be greater than or equal to seq_length")."""
    return max(model.max_position_embeddings or 0, workload.seq_len)


def rope_args(m: ModelSpec) -> list[list[str]]:
    """The rotary embedding the model was trained with, as Megatron-LM d98e8a64 states it: ``--rotary-base``
    (an int there; default 10000), Llama 3.x scaling (``--use-rope-scaling --rope-scaling-factor F``; the low/high
    frequency factors 1 and 4 and the original 8192 positions are ``RotaryEmbedding._apply_scaling``'s defaults,
    Llama 3.1's) and, for multi-latent attention (whose ``rope_type`` is YaRN by default), the YaRN factor and
    ``mscale_all_dim`` (``MLATransformerConfig.rotary_scaling_factor``, ``mscale_all_dim``)."""
    out = []
    if m.rope_theta is not None and (m.is_mla or m.activation == "swiglu"):
        out.append(["--rotary-base", str(int(round(m.rope_theta)))])
    if m.rope_scaling == "llama3":
        out += [["--use-rope-scaling"], ["--rope-scaling-factor", repr(float(m.rope_scaling_factor or 8.0))]]
    elif m.rope_scaling == "yarn" and m.is_mla:
        out.append(["--rotary-scaling-factor", repr(float(m.rope_scaling_factor or 1.0))])
        if m.rope_mscale_all_dim is not None:
            out.append(["--mscale-all-dim", repr(float(m.rope_mscale_all_dim))])
    return out


def router_args(m: ModelSpec) -> list[list[str]]:
    """The router as the model's config has it (Megatron-LM d98e8a64 ``_add_moe_args``): ``--moe-router-score-function
    sigmoid`` (default softmax), the auxiliary-loss-free expert bias (``--moe-router-enable-expert-bias``, which
    Megatron-Core allows with sigmoid (or sqrtsoftplus) scores only; its update rate is Megatron's default 1e-3, DeepSeek-V3's
    0.001, report Sec. 4.2), group-limited routing (``--moe-router-num-groups``, ``--moe-router-group-topk``) and
    the routed-output scale (``--moe-router-topk-scaling-factor``), and token dropping (``--moe-expert-capacity-factor``,
    ``--moe-pad-expert-input-to-capacity``)."""
    out = []
    if m.router_score_function != "softmax":
        out.append(["--moe-router-score-function", m.router_score_function])
    if m.router_expert_bias:
        out.append(["--moe-router-enable-expert-bias"])
    if m.router_num_groups > 1:
        out += [
            ["--moe-router-num-groups", str(m.router_num_groups)],
            ["--moe-router-group-topk", str(m.router_group_topk)],
        ]
    if m.router_topk_scaling_factor is not None:
        out.append(["--moe-router-topk-scaling-factor", repr(float(m.router_topk_scaling_factor))])
    if m.moe_capacity_factor is not None:  # token dropping (TransformerConfig.moe_expert_capacity_factor)
        out.append(["--moe-expert-capacity-factor", repr(float(m.moe_capacity_factor))])
        if m.moe_pad_to_capacity:
            out.append(["--moe-pad-expert-input-to-capacity"])
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
    rope = []
    if model.rope_theta is None and (model.activation == "swiglu" or model.is_mla):
        rope.append("the RoPE base is not in the model spec: Megatron-LM's --rotary-base 10000 runs; state the model's")
    if model.rope_scaling == "yarn" and not model.is_mla:
        rope.append("the model's YaRN RoPE scaling is not emitted (only for multi-latent attention); add its flags")
    return (
        [
            f"architecture flags from the model spec; not in it and assumed: {fam}; the vocabulary "
            f"({model.vocab}) comes from your tokenizer flags"
        ]
        + rope
        + attention_notes(c)
    )


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
