"""What recomputation replays: the forward work of the modules Megatron-Core's ``--recompute-modules`` and
torchtitan's op-level selective checkpointing (``op_sac``) recompute, as fractions of a layer's ops."""

from __future__ import annotations

from costmodel.spec.specs import ModelSpec


def op_sac_matmuls(model: ModelSpec, name: str, tp: int) -> tuple[float, ...]:
    """Output widths (elements per token on one GPU) of the ``aten.mm`` calls the GEMM op ``name`` stands for, in
    forward order: ``qkv`` is torchtitan's ``wq``, ``wk``, ``wv``; a gated ``fc1`` its ``w1``, ``w3``
    (``w2(silu(w1(x)) * w3(x))`` evaluates ``w1`` first); ``attn_out``/``fc2`` (``wo``/``w2``) output the
    ``h``-wide partial sums; any other GEMM (MLA projections, MoE router and experts, which torchtitan
    327b72b does not have) counts as one matmul."""
    if name == "qkv" and not model.is_mla:
        kv = model.kv_dim / min(tp, model.kv_heads)
        return (model.heads * model.head_dim / tp, kv, kv)
    if name == "fc1":
        return (model.ffn_hidden / tp,) * (2 if model.activation == "swiglu" else 1)
    if name in ("attn_out", "fc2"):
        return (float(model.hidden),)
    return (1.0,)


def op_sac_fractions(model: ModelSpec, ops, tp: int, dtype: str, flash: bool = True) -> tuple[float, ...]:
    """Share of each op's forward that torchtitan's per-op selective activation checkpointing
    replays in backward (``ParallelConfig.recompute == 'op_sac'``).

    torchtitan ``parallelisms/parallelize_llama.py`` at 327b72b (``_apply_ac_to_transformer_block``,
    ``selective_ac_option = 'op'``, the default of its Llama 3 8B/70B/405B configs): per transformer
    block, the outputs of the ops in ``_save_list`` are saved (``aten.mm``, the flash/efficient SDPA
    kernels, ``reduce_scatter_tensor``, ``abs``/``max``) "except every second mm" (the ``mm`` counter
    runs over the block's forward); every other op is recomputed (``PREFER_RECOMPUTE``). So: every
    element-wise op (norms, rotary embedding, activation, residual adds) is replayed; of the matmuls
    ``wq wk wv wo w1 w3 w2`` the 2nd, 4th and 6th (``wk``, ``wo``, ``w3``); FlashAttention is saved (the
    unfused math kernel is not in the list: replayed). FP8 linears run ``aten._scaled_mm``, which is not in
    ``_save_list``: all of them are replayed. The all-gathers of sequence parallelism (functional
    ``all_gather_into_tensor``) are replayed too, the reduce-scatters saved (charged by the engines).
    """
    count, out = 0, []
    for op in ops:
        if op.kind == "elementwise":
            out.append(1.0)
        elif op.kind == "attention":
            out.append(0.0 if flash else 1.0)
        else:
            parts = op_sac_matmuls(model, op.name, tp)
            rec = 0.0
            for width in parts:
                count += 1
                if dtype == "fp8" or count % 2 == 0:
                    rec += width
            out.append(rec / sum(parts))
    return tuple(out)


#: the ops of an MoE layer's MoE block (:func:`layer_ops`): what Megatron's ``moe`` recompute replays
MOE_BLOCK_OPS = ("router", "router_topk", "tokens_per_expert_sync", "permute", "experts", "unpermute")


def module_recompute_fractions(ops, modules, moe: bool, model: ModelSpec | None = None) -> tuple[float, ...]:
    """Share of each op's forward that Megatron-Core's selective recompute replays in backward for
    ``modules`` beyond the core attention (:data:`costmodel.spec.plan_checks.RECOMPUTE_MODULES`; the core attention
    is charged by the engines on their own): ``layernorm`` the pre-MLP norm of an MoE layer (``ln2``;
    the input norm is fused into the QKV GEMM), ``moe`` the MoE block, its all-to-alls included
    (``megatron/core/transformer/transformer_layer.py`` and ``moe/moe_layer.py`` at d98e8a64); ``mlp`` a dense
    layer's MLP (``fc1``, ``act``, ``fc2``); ``moe_act`` the routed experts' activation function (its share of the
    ``experts`` op, ``Op.act_s``); ``mla_up_proj`` (``model`` an MLA model) the up projections' share of
    the ``qkv`` GEMM (:func:`mla_up_share`) and the rotary embedding (``multi_latent_attention.py``,
    ``qkv_up_proj_and_rope_apply``).

    >>> from collections import namedtuple
    >>> O = namedtuple("O", "name")
    >>> module_recompute_fractions([O("ln2"), O("router"), O("experts"), O("bda2")], {"layernorm", "moe"}, True)
    (1.0, 1.0, 1.0, 0.0)
    >>> module_recompute_fractions([O("ln2"), O("fc1"), O("act"), O("fc2")], {"mlp"}, False)
    (0.0, 1.0, 1.0, 1.0)
    """
    up = mla_up_share(model) if model is not None and model.is_mla and "mla_up_proj" in modules else 0.0
    out = []
    for op in ops:
        if moe and "moe_act" in modules and "moe" not in modules and op.name == "experts":
            out.append(op.act_s / op.fwd_s if op.fwd_s else 0.0)  # moe_act: the experts' activation alone
            continue
        on = moe and (("layernorm" in modules and op.name == "ln2") or ("moe" in modules and op.name in MOE_BLOCK_OPS))
        on = on or (not moe and "mlp" in modules and op.name in ("fc1", "act", "fc2"))
        out.append(1.0 if on else up if op.name == "qkv" else (1.0 if up and op.name == "rope" else 0.0))
    return tuple(out)


def mla_up_share(model: ModelSpec) -> float:
    """The up projections' share of an MLA layer's Q/K/V projection FLOPs (:attr:`ModelSpec.attn_params` without
    the output projection): ``q_lora x heads (d + d_rope)`` and ``kv_lora x heads (d + d_v)`` of the weights; the
    down projections (``h x q_lora``, ``h x (kv_lora + d_rope)``) stay.

    >>> from costmodel.spec.presets import load_model
    >>> round(mla_up_share(load_model("deepseek-v3")), 3)
    0.783
    """
    h = model.hidden
    up = model.kv_lora_rank * model.heads * (model.head_dim + model.v_head_dim)
    if model.q_lora_rank:
        up += model.q_lora_rank * model.heads * (model.head_dim + model.qk_rope_head_dim)
    return up / (model.attn_params - model.heads * model.v_head_dim * h)
