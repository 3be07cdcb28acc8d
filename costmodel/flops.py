"""FLOP accounting per training step: model FLOPs (for MFU) and hardware FLOPs (for HFU).

Convention (stated in every report): GEMM and attention FLOPs only, ``2`` FLOPs per
multiply-add, attention counted over the full ``s x s`` score matrix (no causal saving), and
backward = 2x forward. For a GPT this is exactly Korthikanti et al. 2023's model FLOPs,
``72 B L s h^2 (1 + s/(6h) + V/(12 h L))``, generalised to GQA, SwiGLU and MoE (routed experts
counted ``topk`` times). Hardware FLOPs add the recomputed forward: the whole layer stack under
full recompute (Narayanan et al. 2021, Eq. 3 counts this), the attention core under selective.

>>> from costmodel.presets import load_model
>>> from costmodel.specs import Workload
>>> m = load_model("gpt3-175b")
>>> w = Workload(global_batch=1536, seq_len=2048)
>>> B, L, s, h, V = 1536, 96, 2048, 12288, 51200
>>> ref = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
>>> abs(model_flops_per_step(m, w) / ref - 1) < 0.001
True
"""

from __future__ import annotations

from .compute import attention_flops, op_sac_matmuls
from .config import ParallelConfig
from .specs import ModelSpec, Workload

CONVENTION = ("GEMM + attention FLOPs, full s x s attention, backward = 2x forward "
              "(Korthikanti et al. 2023 model FLOPs; HFU adds recomputed forward FLOPs)")


def layer_forward_flops_per_token(model: ModelSpec, moe: bool, seq_len: int) -> float:
    """Forward FLOPs of one layer per token: ``2 x`` active weights, plus attention."""
    weights = model.attn_params
    if moe:
        weights += (model.topk + model.shared_experts) * model.expert_params + model.hidden * model.experts
    else:
        weights += model.mlp_params(model.ffn_hidden)
    return 2.0 * weights + attention_flops(model, 1, seq_len, 1)


def forward_flops_per_token(model: ModelSpec, seq_len: int) -> tuple[float, float]:
    """(layer stack, LM head) forward FLOPs per token."""
    dense = model.layers - model.moe_layers
    stack = dense * layer_forward_flops_per_token(model, False, seq_len)
    if model.moe_layers:
        stack += model.moe_layers * layer_forward_flops_per_token(model, True, seq_len)
    return stack, 2.0 * model.hidden * model.vocab


def model_flops_per_step(model: ModelSpec, w: Workload) -> float:
    stack, head = forward_flops_per_token(model, w.seq_len)
    return 3.0 * (stack + head) * w.tokens


def op_sac_flops_per_token(model: ModelSpec, dtype: str, flash: bool, seq_len: int) -> float:
    """Forward FLOPs per token that per-op selective checkpointing replays over the layer stack:
    the 2nd, 4th, 6th matmul of each block (every matmul in FP8), and the attention core when it is
    not a saved FlashAttention kernel (:func:`costmodel.compute.op_sac_fractions`). Counted with the
    dense block's shape for every layer (torchtitan 327b72b, the source of the policy, has no MoE)."""
    h = model.hidden
    inputs = {"qkv": h, "attn_out": model.heads * model.head_dim, "fc1": h, "fc2": model.ffn_hidden}
    count, per_layer = 0, 0.0
    for name in ("qkv", "attn_out", "fc1", "fc2"):
        for width in op_sac_matmuls(model, name, 1):
            count += 1
            if dtype == "fp8" or count % 2 == 0:
                per_layer += 2.0 * inputs[name] * width
    if not flash:
        per_layer += attention_flops(model, 1, seq_len, 1)
    return model.layers * per_layer


def hardware_flops_per_step(model: ModelSpec, w: Workload, c: ParallelConfig) -> float:
    stack, _ = forward_flops_per_token(model, w.seq_len)
    extra = 0.0
    if c.recompute == "full":
        frac = 1.0 if c.recompute_layers is None else c.recompute_layers * c.pp / model.layers
        extra = stack * frac
    elif c.recompute == "selective":
        extra = model.layers * attention_flops(model, 1, w.seq_len, 1)
    elif c.recompute == "op_sac":  # the replayed matmuls (costmodel.compute.op_sac_fractions), per token
        extra = op_sac_flops_per_token(model, w.dtype, c.flash_attention, w.seq_len)
    return model_flops_per_step(model, w) + extra * w.tokens
