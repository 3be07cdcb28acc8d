"""What gpt-oss's architecture costs as the training frameworks run it (issues 38/39), beyond the layer of
:mod:`costmodel.physics.kernels.compute`: the sliding window on some layers, the fused attention's head-dimension
efficiency on devices without a shape fit, the attention sinks, the routed experts' linear biases, the clamped
activation and YaRN RoPE (``ModelSpec.sliding_window``, ``attention_sinks``, ``linear_bias``,
``activation_clamp``, ``rope_scaling``).

Each charge is a count of the memory-bound passes the framework's code makes, cited where it is defined; the
attention ratios are read from the measured context-attention tables (:mod:`costmodel.physics.tables.attention`).
"""

from __future__ import annotations

import math
from functools import lru_cache

from costmodel.physics.kernels.gemm import elementwise_time_s
from costmodel.physics.kernels.kernel_fits import NATIVE_ATTENTION, REF_HEAD_DIM, TILE, attention_fit, device_family
from costmodel.physics.tables.attention import attention_lookup
from costmodel.spec.specs import DeviceSpec, ModelSpec

#: RoPE with YaRN scaling under Megatron-Core (``ModelSpec.rope_scaling == "yarn"``, ordinary attention): the fused
#: RoPE is off, so the eager ``_apply_rotary_pos_emb_bshd`` runs on q and k (NVIDIA/Megatron-LM@0d8e0714
#: megatron/core/models/common/embeddings/rope_utils.py: ``apply_rotary_pos_emb`` takes the unfused path when
#: ``mscale != 1`` even with ``apply_rope_fusion``; Megatron-Bridge's ``validate_rope_fusion_compatibility`` turns
#: the fusion off for any ``position_embedding_type`` but ``rope``, NVIDIA-NeMo/Megatron-Bridge@7af9601c9
#: src/megatron/bridge/utils/fusions.py; gpt-oss's provider sets ``position_embedding_type="yarn"``). Per BF16
#: element of q and k: forward ``t * cos`` (4 B), ``_rotate_half``'s negation of one half (2) and cat (4), ``* sin``
#: (4), the add (6) and the final cat with the empty pass-through part (4) = 24 B in 6 kernels; backward the two
#: products (4 + 4), the negation (2), the chunk's cat (4), the sum of the two branches (6) and the slice's
#: backward into a zeroed tensor (6) = 26 B in 7 kernels. (MLA's RoPE is Megatron-Core's own MLA path: not this.)
YARN_ROPE_UNFUSED = (24, 26, 6, 7)
#: YaRN RoPE under NeMo AutoModel's gpt-oss (``rope_fusion: true``): Transformer Engine's fused RoPE, then the
#: YaRN concentration as a separate product on q and on k, ``q * concentration`` (nemo_automodel/components/models/
#: gpt_oss/rope_utils.py ``apply_rotary_emb_qk`` @cb976544): read 2 B, write 2 per element forward and the same
#: backward, 2 kernels each.
YARN_ROPE_CONCENTRATION = (4, 4, 2, 2)
#: The gated activation's clamp (``ModelSpec.activation_clamp``) as Megatron-Core runs it: ``TEGroupedMLP`` calls
#: ``weighted_bias_quick_geglu_impl`` (``bias_activation_fusion=True`` in Megatron-Bridge's ``GPTOSSProvider``,
#: NVIDIA-NeMo/Megatron-Bridge@7af9601c9 src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py), which clamps
#: *before* the compiled kernel in eager PyTorch (NVIDIA/Megatron-LM@0d8e0714
#: megatron/core/fusions/fused_bias_geglu.py: ``x_glu.clamp(max=v)``, ``x_linear.clamp(-v, v)``, ``torch.cat``).
#: Per FFN unit of one token-slot (the fc1 output is ``2 f`` wide, BF16): forward, two clamps over ``f`` each
#: (read 2 B + write 2 B) and the cat over ``2 f`` (read 2 + write 2) = 16 B in 3 kernels; backward, two clamp
#: backwards (read the gradient and the input, write: 6 B over ``f`` each) and the chunk's backward, a cat over
#: ``2 f`` (4 B) = 20 B in 3 kernels. NeMo AutoModel compiles the clamp into its activation
#: (``quick_geglu_deepep``, ``torch.compile(fullgraph=True)``, NVIDIA-NeMo/Automodel@cb976544
#: nemo_automodel/components/moe/experts.py): nothing beyond the fused activation's bytes there.
CLAMP_BYTES = {"megatron": (16, 20, 3, 3)}
#: The routed experts' biases (``ModelSpec.linear_bias``), added per local expert in eager PyTorch, as
#: (forward B per FFN unit, forward B per hidden unit, backward B per FFN unit, backward B per hidden unit) of one
#: token-slot, and (forward, backward) kernels per local expert:
#:
#: * ``megatron``: fc1's bias is Transformer Engine ``GroupedLinear``'s own (``skip_bias_add=False``: the cuBLAS
#:   epilogue in forward, the bias gradient fused into the BF16 wgrad grouped GEMM, NVIDIA/TransformerEngine@v2.9
#:   transformer_engine/pytorch/module/grouped_linear.py ``use_bias`` / ``grouped_gemm_wgrad``): free. fc2's is
#:   returned (``skip_bias_add=True``) and added by ``TEGroupedMLP._apply_bias`` (Megatron-LM@0d8e0714
#:   megatron/core/transformer/moe/experts.py): per local expert ``t + b * p`` over its rows, then ``torch.cat``;
#:   ``p`` are the router's probabilities in the input's dtype (BF16: ``moe_router_dtype`` unset for gpt-oss).
#:   Forward: ``b * p`` (write 2 B), the add (read 2 + 2, write 2), the cat (read 2, write 2) = 12 B per hidden
#:   unit; backward: the gradients of ``b`` and ``p`` (a multiply, 4 B, and a reduction, 2 B, each) and the
#:   split's backward, a cat (4 B) = 16 B;
#: * ``fsdp2`` (NeMo AutoModel's ``GroupedExpertsDeepEP`` with ``experts: gmm``, the GPT-OSS benchmark configs
#:   examples/llm_benchmark/gpt_oss/*.yaml @cb976544): ``_apply_bias`` after both grouped GEMMs (experts.py
#:   @cb976544: ``grouped_gemm.ops.gmm`` has no bias). fc1: ``t + b`` and the cat over ``2 f`` = 16 B forward per
#:   FFN unit; backward the bias reduction (2 B) and the cat (4 B) over ``2 f`` = 12 B. fc2: ``t + b * p`` with
#:   the DeepEP dispatcher's FP32 probabilities (``assert self.dispatched_probs.dtype == torch.float32``,
#:   nemo_automodel/components/moe/megatron/token_dispatcher.py @cb976544), so the sum is FP32: ``b * p`` (write
#:   4 B), the add (read 2 + 4, write 4), the cat (read 4, write 4), ``.to(bf16)`` (read 4, write 2) = 28 B per
#:   hidden unit; backward the cast back (6 B), the gradient of ``t`` cast to BF16 (6 B), those of ``b`` and ``p``
#:   (12 B each in FP32) and the split's cat (4 B) = 40 B.
EXPERT_BIAS_BYTES = {"megatron": ((0, 12, 0, 16), (2, 4)), "fsdp2": ((16, 28, 12, 40), (3, 6))}
#: The attention sinks (``ModelSpec.attention_sinks``) under NeMo AutoModel's FlexAttention
#: (``backend.attn: flex`` in the GPT-OSS benchmark configs): FlexAttention returns the log-sum-exp and the output
#: is rescaled eagerly, ``out * sigmoid(lse - w)`` then ``.to(q.dtype)`` (nemo_automodel/components/attention/
#: flex_attention.py @cb976544): the product is FP32 (read 2 B, write 4) and cast back (read 4, write 2) = 12 B
#: per output element forward in 3 kernels; backward the cast (6 B), the output's gradient (read 4, write 4 ... 2)
#: and the scale's (a product and a reduction over the head dimension, 6 B) = 20 B in 4 kernels. Megatron-Core
#: runs the sinks inside cuDNN's fused attention (Transformer Engine ``softmax_type="learnable"``: FlashAttention
#: is disabled for it, cuDNN >= 9.13.1 takes it with a sliding window, ``sdpa_options.set_sink_token``,
#: TransformerEngine@v2.9 dot_product_attention/utils.py and common/fused_attn/fused_attn.cpp): not charged.
SINK_RESCALE = {"fsdp2": (12, 20, 3, 4)}


def _per_gpu_heads(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) of one GPU's attention under ``tp`` (KV heads replicated when ``tp > kv_heads``)."""
    q = max(1, model.heads // tp)
    kv = max(1, model.kv_heads // tp)
    return q, (kv if q % kv == 0 else q)


def _has_native_fit(dev: DeviceSpec) -> bool:
    kernel = NATIVE_ATTENTION.get(device_family(dev))
    return bool(kernel) and attention_fit(dev, kernel, "fwd") is not None


@lru_cache(maxsize=1024)
def head_dim_time_ratio(model: ModelSpec, dev: DeviceSpec, b: int, s: int, tp: int) -> float:
    """Forward time per FLOP of the fused attention at the model's head dimension over that at
    :data:`~costmodel.physics.kernels.kernel_fits.REF_HEAD_DIM` (128), the shape a preset's ``attention_efficiency``
    describes, read from the measured context-attention tables (:mod:`costmodel.physics.tables.attention`, causal,
    the same batch, sequence and heads) on devices whose native kernel has no shape fit
    (:data:`~costmodel.physics.kernels.kernel_fits.ATTENTION_FITS`: Blackwell); 1 elsewhere (the fit's head-dimension
    factor applies there), for MLA (its ``d_qk != d_v`` has no table), and without a table.

    On H100 the tables agree with the cuDNN forward fit: head dim 64 at 0.80 (4K) / 0.82 (8K) of head dim 128's
    FLOP rate, the fit's ``d0 = 48`` 0.79. On B200 / GB200 / GB300 head dim 64 reaches 0.60 / 0.57 / 0.65 of it at
    8K tokens (64 heads, 8 KV heads). Forward only: the H100 cuDNN backward fit has no head-dimension term
    (``d0 = 0``), so none is taken to the backward here.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> oss = load_model("gpt-oss-120b")
    >>> round(head_dim_time_ratio(oss, load_cluster("gb200-nvl72").device, 1, 8192, 1), 2)
    1.74
    >>> head_dim_time_ratio(oss, load_cluster("h100-sxm").device, 1, 8192, 1)
    1.0
    """
    d = model.head_dim
    if model.is_mla or d == REF_HEAD_DIM or _has_native_fit(dev):
        return 1.0
    q, kv = _per_gpu_heads(model, tp)
    try:
        t_d, _ = attention_lookup(dev, "bf16", b, s, q, kv, d)
        t_ref, _ = attention_lookup(dev, "bf16", b, s, q, kv, REF_HEAD_DIM)
    except ValueError:
        return 1.0
    if not t_d or not t_ref:
        return 1.0
    return (t_d / d) / (t_ref / REF_HEAD_DIM)


@lru_cache(maxsize=1024)
def window_time_ratio(model: ModelSpec, dev: DeviceSpec, b: int, s: int, tp: int) -> float:
    """Time of a fused causal attention within ``model.sliding_window`` keys over the same attention on the whole
    causal sequence (``s`` tokens, ``b`` sequences, one GPU's heads): from the measured context-attention tables
    where they hold the window (:mod:`costmodel.physics.tables.attention`: windows of 128, 1024 and 8192 tokens on
    Hopper and Blackwell), else the tile count (each 128-row query tile visits ``ceil(w / 128) + 1`` key tiles
    against ``(s + 128) / 2`` keys on average causal, the kernels skipping the tiles wholly outside the mask:
    cuDNN's sliding window, FlexAttention's block mask). The tables' per-tile overheads make a window of 128 at
    8K tokens cost 0.26-0.32 of the full causal kernel on B200 / GB200 / GB300 (0.26 on H100), not the tile count's
    0.06.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> oss = load_model("gpt-oss-120b")
    >>> round(window_time_ratio(oss, load_cluster("gb200-nvl72").device, 1, 8192, 1), 2)
    0.26
    """
    w = model.sliding_window
    if not w or w >= s:
        return 1.0
    q, kv = _per_gpu_heads(model, tp)
    if not model.is_mla:
        try:
            t_w, _ = attention_lookup(dev, "bf16", b, s, q, kv, model.head_dim, w)
            t_full, _ = attention_lookup(dev, "bf16", b, s, q, kv, model.head_dim)
        except ValueError:
            t_w = t_full = None
        if t_w and t_full:
            return min(1.0, t_w / t_full)
    return min(1.0, (math.ceil(w / TILE) + 1) * TILE / ((s + TILE) / 2))


def sink_rescale_s(model: ModelSpec, dev: DeviceSpec, n: float, tp: int, stack: str | None) -> tuple[float, float]:
    """(forward, backward) seconds of the attention sinks' eager rescale of the attention output where the
    framework runs one (:data:`SINK_RESCALE`), for ``n`` tokens on one GPU; zeros elsewhere."""
    if not model.attention_sinks or stack not in SINK_RESCALE:
        return 0.0, 0.0
    bf, bb, kf, kb = SINK_RESCALE[stack]
    elems = n * model.heads / tp * model.head_dim
    return elementwise_time_s(bf * elems, dev, kf), elementwise_time_s(bb * elems, dev, kb)


def clamp_bytes(model: ModelSpec, stack: str | None) -> tuple[int, int, int, int]:
    """(forward B, backward B per FFN unit of a token-slot, forward kernels, backward kernels) of the activation
    clamp's passes outside the fused activation (:data:`CLAMP_BYTES`); zeros where none run."""
    if model.activation_clamp is None or not model.is_moe:
        return (0, 0, 0, 0)
    return CLAMP_BYTES.get(stack or "", (0, 0, 0, 0))


def expert_bias_bytes(model: ModelSpec, stack: str | None) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """The routed experts' eager bias passes (:data:`EXPERT_BIAS_BYTES`); zeros where none run."""
    if not model.linear_bias or not model.is_moe:
        return (0, 0, 0, 0), (0, 0)
    return EXPERT_BIAS_BYTES.get(stack or "", ((0, 0, 0, 0), (0, 0)))


def rope_pass_s(model: ModelSpec, dev: DeviceSpec, stack: str | None, qk_elements: float) -> tuple[float, float]:
    """(forward, backward) seconds of YaRN RoPE's eager passes over ``qk_elements`` elements of q and k under the
    framework (:data:`YARN_ROPE_UNFUSED`, :data:`YARN_ROPE_CONCENTRATION`); () where none run (MLA: its own path)."""
    if model.rope_scaling != "yarn" or model.is_mla or stack not in ("megatron", "fsdp2"):
        return ()
    bf, bb, kf, kb = YARN_ROPE_UNFUSED if stack == "megatron" else YARN_ROPE_CONCENTRATION
    return elementwise_time_s(bf * qk_elements, dev, kf), elementwise_time_s(bb * qk_elements, dev, kb)


def expert_passes_s(
    model: ModelSpec, dev: DeviceSpec, stack: str | None, slots: float, f: float, active: int
) -> tuple[float, float, float, float]:
    """(clamp forward, clamp backward, bias forward, bias backward) seconds of the routed experts' eager passes
    over ``slots`` token-slots of FFN width ``f`` on ``active`` local experts (:func:`clamp_bytes`,
    :func:`expert_bias_bytes`)."""
    h = model.hidden
    cf, cb, ckf, ckb = clamp_bytes(model, stack)
    clamp = (
        (elementwise_time_s(cf * slots * f, dev, ckf), elementwise_time_s(cb * slots * f, dev, ckb))
        if cf
        else (0.0, 0.0)
    )
    (bff, bfh, bbf, bbh), (bkf, bkb) = expert_bias_bytes(model, stack)
    bias = (0.0, 0.0)
    if bff or bfh:
        bias = (
            elementwise_time_s((bff * f + bfh * h) * slots, dev, bkf * active + 1),
            elementwise_time_s((bbf * f + bbh * h) * slots, dev, bkb * active + 1),
        )
    return (*clamp, *bias)


def attention_arch_factors(model: ModelSpec, dev: DeviceSpec, b: int, s: int, cp: int, tp: int) -> tuple[float, float]:
    """(forward, backward) multipliers of the fused attention's time for the model's architecture: the head
    dimension's forward efficiency (:func:`head_dim_time_ratio`, at the kernel's ``s / cp`` keys) and, without
    context parallelism, the sliding window's layers at the measured windowed / full ratio
    (:func:`window_time_ratio`; an average layer: every layer is charged the mean of the two kinds)."""
    hd = head_dim_time_ratio(model, dev, b, int(s / cp), tp)
    if not model.sliding_window or cp != 1:
        return hd, 1.0
    share = model.sliding_window_layers / model.layers
    mix = 1.0 - share + share * window_time_ratio(model, dev, b, s, tp)
    return hd * mix, mix
