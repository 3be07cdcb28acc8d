"""FLOP accounting per training step: model FLOPs (for MFU) and hardware FLOPs (for HFU).

Conventions (:data:`CONVENTIONS`, the one used is stated in every report): GEMM and attention
FLOPs only, ``2`` FLOPs per multiply-add, backward = 2x forward, and the attention core
(``QK^T`` and ``softmax(QK^T) V``) counted

* ``causal`` (the default): over the half of the ``s x s`` score matrix a causal mask keeps, as
  Megatron-LM's current ``num_floating_point_operations`` does
  (``megatron/training/training.py`` at d98e8a64, ``standard_self_attn_core_term``: "/ 2  # causal
  mask (only half of the mask is non-zero)") and the MFU users compare against (Megatron-Core
  2025 and the Megatron-MoE ModelZoo report it; ``benchmarks/published.py`` converts those
  sources with this count);
* ``full``: over the whole ``s x s`` matrix, Korthikanti et al. 2023's model FLOPs
  ``72 B L s h^2 (1 + s/(6h) + V/(12 h L))`` and Narayanan et al. 2021 Eq. 3 (Megatron-Core
  r0.8.0 counted this way too).

Both are generalised to GQA, SwiGLU and MoE (routed experts counted ``topk`` times). The two
differ only in the attention core, so only long sequences tell them apart. Hardware FLOPs add
the recomputed forward: the whole layer stack under full recompute (Narayanan et al. 2021,
Eq. 3 counts this), the attention core under selective, with the same attention count.
The step time does not depend on the convention: :mod:`costmodel.physics.kernels.compute` charges the kernels.

>>> from costmodel.spec.presets import load_model
>>> from costmodel.spec.workload import Workload
>>> m = load_model("gpt3-175b")
>>> w = Workload(global_batch=1536, seq_len=2048)
>>> B, L, s, h, V = 1536, 96, 2048, 12288, 51200
>>> ref = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
>>> abs(model_flops_per_step(m, w, "full") / ref - 1) < 0.001
True
>>> causal = 72 * B * L * s * h**2 * (1 + s / (12 * h) + V / (12 * h * L))
>>> abs(model_flops_per_step(m, w) / causal - 1) < 0.001
True
"""

from __future__ import annotations

from costmodel.physics.kernels.compute import attention_flops
from costmodel.physics.kernels.recompute import op_sac_matmuls
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload

#: FLOP convention -> (share of the full s x s attention core counted, the sentence reports print)
CONVENTIONS = {
    "causal": (
        0.5,
        "GEMM + attention FLOPs, causal attention (half the s x s scores), backward = 2x forward "
        "(Megatron-LM num_floating_point_operations; HFU adds recomputed forward FLOPs)",
    ),
    "full": (
        1.0,
        "GEMM + attention FLOPs, full s x s attention, backward = 2x forward "
        "(Korthikanti et al. 2023 model FLOPs; HFU adds recomputed forward FLOPs)",
    ),
}
DEFAULT_CONVENTION = "causal"
CONVENTION = CONVENTIONS[DEFAULT_CONVENTION][1]


def attention_share(convention: str) -> float:
    """The share of the full ``s x s`` attention core that ``convention`` counts."""
    if convention not in CONVENTIONS:
        raise SpecError("flop_convention", convention, f"one of {', '.join(CONVENTIONS)}")
    return CONVENTIONS[convention][0]


def layer_forward_flops_per_token(
    model: ModelSpec, moe: bool, seq_len: int, convention: str = DEFAULT_CONVENTION
) -> float:
    """Forward FLOPs of one layer per token: ``2 x`` active weights, plus attention."""
    weights = model.attn_params
    if moe:
        weights += (model.topk + model.shared_experts) * model.expert_params + model.hidden * model.experts
    else:
        weights += model.mlp_params(model.ffn_hidden)
    return 2.0 * weights + attention_share(convention) * attention_flops(model, 1, seq_len, 1)


def forward_flops_per_token(
    model: ModelSpec, seq_len: int, convention: str = DEFAULT_CONVENTION
) -> tuple[float, float]:
    """(layer stack, LM head) forward FLOPs per token, the model's MTP modules included as Megatron-LM
    counts them (``training.py`` ``num_floating_point_operations`` @d98e8a64: each MTP depth adds a decoder
    layer of the last layer's kind, its norms and ``eh_proj`` ``3h + 2h^2`` FMAs, and one more logit pass:
    ``* (mtp_num_layers + 1)``)."""
    k, h = model.mtp_layers, model.hidden
    dense = model.layers - model.moe_layers + (0 if model.is_moe else k)
    stack = dense * layer_forward_flops_per_token(model, False, seq_len, convention)
    if model.moe_layers:
        stack += (model.moe_layers + k) * layer_forward_flops_per_token(model, True, seq_len, convention)
    stack += 2.0 * k * (3 * h + 2 * h * h)
    return stack, 2.0 * h * model.vocab * (1 + k)


def model_flops_per_step(model: ModelSpec, w: Workload, convention: str = DEFAULT_CONVENTION) -> float:
    stack, head = forward_flops_per_token(model, w.seq_len, convention)
    return 3.0 * (stack + head) * w.tokens


def op_sac_flops_per_token(
    model: ModelSpec, dtype: str, flash: bool, seq_len: int, convention: str = DEFAULT_CONVENTION
) -> float:
    """Forward FLOPs per token that per-op selective checkpointing replays over the layer stack:
    the 2nd, 4th, 6th matmul of each block (every matmul in FP8), and the attention core when it is
    not a saved FlashAttention kernel (:func:`costmodel.physics.kernels.recompute.op_sac_fractions`). Counted with the
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
        per_layer += attention_share(convention) * attention_flops(model, 1, seq_len, 1)
    return model.layers * per_layer


def hardware_flops_per_step(
    model: ModelSpec, w: Workload, c: ParallelConfig, convention: str = DEFAULT_CONVENTION
) -> float:
    stack, _ = forward_flops_per_token(model, w.seq_len, convention)
    extra = 0.0
    if c.recompute == "full":
        frac = 1.0 if c.recompute_layers is None else c.recompute_layers * c.pp / model.layers
        extra = stack * frac
    elif c.recompute == "selective":
        extra = model.layers * attention_share(convention) * attention_flops(model, 1, w.seq_len, 1)
    elif (
        c.recompute == "op_sac"
    ):  # the replayed matmuls (costmodel.physics.kernels.recompute.op_sac_fractions), per token
        extra = op_sac_flops_per_token(model, w.dtype, c.flash_attention, w.seq_len, convention)
    return model_flops_per_step(model, w, convention) + extra * w.tokens


def with_convention(est, model: ModelSpec, w: Workload, convention: str):
    """``est`` (an :class:`~costmodel.training.estimate.Estimate`) with its MFU, HFU and TFLOP/s counted by
    ``convention`` (:data:`CONVENTIONS`); the step time is the same."""
    from dataclasses import replace

    attention_share(convention)
    if est.flop_convention == CONVENTIONS[convention][1]:
        return est
    model_flops = model_flops_per_step(model, w, convention)
    hw_flops = hardware_flops_per_step(model, w, est.config, convention)
    scale_m = model_flops / (est.model_tflops_per_gpu * est.step_time_s * est.config.gpus * 1e12)
    scale_h = hw_flops / (est.hardware_tflops_per_gpu * est.step_time_s * est.config.gpus * 1e12)
    return replace(
        est,
        mfu=est.mfu * scale_m,
        model_tflops_per_gpu=est.model_tflops_per_gpu * scale_m,
        hfu=est.hfu * scale_h,
        hardware_tflops_per_gpu=est.hardware_tflops_per_gpu * scale_h,
        flop_convention=CONVENTIONS[convention][1],
    )
