"""KV-cache size: bytes per token, per sequence and per GPU, for GQA and MLA models.

One place for these formulas (the decode attention op in :mod:`costmodel.physics.kernels.compute` and the
inference memory model in :mod:`costmodel.serving.inference` both read them).

* Multi-head / grouped-query attention caches K and V of every KV head in every layer:
  ``2 * layers * kv_heads * head_dim * bytes`` per token (Ainslie et al. 2023, GQA). Under
  tensor parallelism each GPU holds ``kv_heads / tp`` heads, or one replicated head when
  ``tp > kv_heads`` (Megatron-LM / vLLM replicate KV heads across the extra ranks).
* Multi-head latent attention caches the compressed latent and the decoupled RoPE key:
  ``layers * (kv_lora_rank + qk_rope_head_dim) * bytes`` per token (DeepSeek-AI 2024,
  DeepSeek-V2, arXiv 2405.04434, section 2.1.3 and Table 1: ``(d_c + d_h^R) l`` elements).
  The latent is shared by all heads, so every TP rank holds all of it (replicated).

>>> from costmodel.spec.presets import load_model
>>> kv_bytes_per_token(load_model("llama3-70b"), "bf16")     # 2 * 80 * 8 * 128 * 2
327680
>>> kv_bytes_per_token(load_model("deepseek-v3"), "bf16")    # 61 * (512 + 64) * 2
70272
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ModelSpec
from costmodel.spec.units import DTYPE_BYTES

#: formats the KV cache may be stored in
KV_DTYPES = ("bf16", "fp16", "fp8")


def kv_dtype_bytes(kv_dtype: str) -> int:
    """Bytes per cached element; raises SpecError for an unknown format."""
    if kv_dtype not in KV_DTYPES:
        raise SpecError("kv_dtype", kv_dtype, f"one of {', '.join(KV_DTYPES)}")
    return DTYPE_BYTES[kv_dtype]


def kv_elements_per_token_layer(model: ModelSpec, tp: int = 1) -> float:
    """Cached elements per token and layer held by one GPU of a ``tp``-way tensor-parallel group."""
    if model.is_mla:
        return float(model.kv_lora_rank + model.qk_rope_head_dim)
    heads_per_gpu = model.kv_heads / min(tp, model.kv_heads)
    return 2.0 * heads_per_gpu * model.head_dim


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16", tp: int = 1, layers: int | None = None) -> int | float:
    """KV-cache bytes one token occupies over ``layers`` layers (default: all) on one GPU of a
    ``tp``-way group; with ``tp = 1`` this is the model's whole per-token cache."""
    n = model.layers if layers is None else layers
    total = n * kv_elements_per_token_layer(model, tp) * kv_dtype_bytes(kv_dtype)
    return int(total) if float(total).is_integer() else total
