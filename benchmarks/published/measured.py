"""The measured step time of a published row: stated, from throughput, or from the TFLOP/s converted back with the
source's own FLOP count (:data:`CONVENTION`)."""

from __future__ import annotations

from .cells import cell_num


def flops_narayanan_eq3(model, batch: int, seq: int) -> float:
    """Narayanan et al. 2021 (arXiv 2104.04473) Eq. 3: GEMM FLOPs incl. the recompute forward."""
    B, s, l, h, V = batch, seq, model.layers, model.hidden, model.vocab
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def flops_megatron_core(model, batch: int, seq: int, causal: bool = False) -> float:
    """Megatron-Core ``training.num_floating_point_operations``: model FLOPs (no recompute).

    ``12 B s L h^2 [ (1 + g/a + s/h) q/h + (f/h) k_routed m_gated + (f_sh/h) m_gated + V/(2Lh) ]``
    with q = heads x head_dim, g/a = kv_heads/heads, k_routed = top-k (1 for dense), m_gated = 3/2
    for SwiGLU. r0.8.0 (the 2024 README) counts attention in full; the 2025 version
    (``transformer_flops``, "causal mask (only half of the mask is non-zero)") halves the s/h term.
    MoE layers and leading dense layers are averaged over L. An MLA model's count is
    :func:`_mla_flops_per_token`'s."""
    B, s, L, h = batch, seq, model.layers, model.hidden
    if model.is_mla:
        return B * s * _mla_flops_per_token(model, s, causal)
    q_ratio = model.heads * model.head_dim / h
    gated = 1.5 if model.activation == "swiglu" else 1.0
    if model.is_moe:
        dense, moe = model.dense_layers, L - model.dense_layers
        per_moe = model.moe_ffn_hidden * (model.topk + model.shared_experts)
        mlp = (dense * model.ffn_hidden + moe * per_moe) / L / h * gated
    else:
        mlp = model.ffn_hidden / h * gated
    attn = (1 + model.kv_heads / model.heads + s / h / (2 if causal else 1)) * q_ratio
    return 12 * B * s * L * h * h * (attn + mlp + model.vocab / (2 * L * h))


def _mla_flops_per_token(model, seq: int, causal: bool) -> float:
    """Megatron-Core ``num_floating_point_operations`` of an MLA model per token (``transformer_flops`` at
    NVIDIA/Megatron-LM@1d9edcf8, ``megatron/training/training.py``): ``12 h (f g dense + f_moe k g moe + f_sh g moe)``
    over the layers, ``6 x`` the MLA block per layer (q and kv low-rank projections with their norms, the RoPE key,
    the output projection, and the core attention ``s a (d_qk + d_rope) / 2 + s a d_v / 2`` with the causal halving),
    ``6 (3h + 2h^2)`` per MTP layer, and ``6 h V (mtp + 1)`` for the logits; MTP layers count as MoE layers."""
    h, a, L, mtp = model.hidden, model.heads, model.layers, model.mtp_layers
    qk, rope, v = model.head_dim, model.qk_rope_head_dim, model.v_head_dim
    gated = 1.5 if model.activation == "swiglu" else 1.0
    dense, moe = model.dense_layers, L - model.dense_layers + mtp
    n = L + mtp
    shared = model.shared_experts * model.moe_ffn_hidden
    mlp = 12 * h * gated * (model.ffn_hidden * dense + (model.moe_ffn_hidden * model.topk + shared) * moe)
    q = model.q_lora_rank * (h + a * (qk + rope) + 1) if model.q_lora_rank else h * a * (qk + rope)
    half = 2 if causal else 1
    block = (
        q
        + model.kv_lora_rank * (h + a * (qk + v) + 1)
        + h * rope
        + a * v * h
        + seq * a * (qk + rope) / half
        + seq * a * v / half
    )
    return mlp + 6 * n * block + 6 * mtp * (3 * h + 2 * h * h) + 6 * h * model.vocab * (mtp + 1)


def flops_nemo_llama(model, batch: int, seq: int) -> float:
    """NeMo ``utils/flops_formulas.llama2`` (GQA Llama, attention counted in full):
    ``gbs s L h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(L h))``."""
    B, s, L, h = batch, seq, model.layers, model.hidden
    g = model.kv_heads / model.heads
    return B * s * L * h * h * (12 + 12 * g + 18 * model.ffn_hidden / h + 12 * s / h + 6 * model.vocab / (L * h))


def flops_palm(model, batch: int, seq: int) -> float:
    """PaLM (Chowdhery et al. 2022, Appendix B) model FLOPs: ``(6N + 12 L H Q T)`` per token,
    N = all parameters, H x Q = heads x head_dim, T = sequence (attention counted in full)."""
    per_token = 6 * model.params + 12 * model.layers * model.heads * model.head_dim * seq
    return batch * seq * per_token


#: source -> (FLOP count used by its TFLOP/s column, name); None: the source gives no usable rate
CONVENTION = {
    "narayanan2021": (flops_narayanan_eq3, "Narayanan 2021 Eq. 3"),
    "megatron_readme_2020": (flops_narayanan_eq3, "Narayanan 2021 Eq. 3"),
    "megatron_readme_2024": (
        lambda m, B, s: flops_megatron_core(m, B, s, causal=False),
        "Megatron-Core r0.8.0 num_floating_point_operations",
    ),
    "moe_modelzoo_qwen3": (
        lambda m, B, s: flops_megatron_core(m, B, s, causal=True),
        "Megatron-Core 2025 num_floating_point_operations (causal)",
    ),
    "moe_modelzoo_blackwell": (
        lambda m, B, s: flops_megatron_core(m, B, s, causal=True),
        "Megatron-Core 2025 num_floating_point_operations (causal)",
    ),
    "nemo_longseq": (flops_nemo_llama, "NeMo flops_formulas.llama2"),
    "nemo_2407": (flops_nemo_llama, "NeMo flops_formulas.llama2"),
    "llama3_2024": (flops_palm, "PaLM 6N + 12LHQT"),
    "mcore_dsv3_gb200_guide_2025": (
        lambda m, B, s: flops_megatron_core(m, B, s, causal=True),
        "Megatron-Core 1d9edcf8 num_floating_point_operations (MLA, causal)",
    ),
}


def measured_step_s(r: dict, model, seq: int, gpus: int, batch: int) -> tuple[float | None, str]:
    """Measured seconds per step of CSV row ``r`` and how it was obtained."""
    if cell_num(r["iteration_time_s"]):
        return float(r["iteration_time_s"]), "iteration time"
    if cell_num(r["tokens_per_sec_per_gpu"]) and cell_num(r["tokens_per_batch"]):
        return float(r["tokens_per_batch"]) / (float(r["tokens_per_sec_per_gpu"]) * gpus), "tokens/s/GPU"
    conv = CONVENTION.get(r["source_key"])
    if cell_num(r["tflops_per_gpu"]) and conv and model is not None:
        fn, name = conv
        return fn(model, batch, seq) / (float(r["tflops_per_gpu"]) * 1e12 * gpus), f"TFLOP/s via {name}"
    return None, ""
