"""Compute cost of one transformer layer on one GPU, per micro-batch: FLOPs, bytes and time per op.

Each op is timed with a roofline and a per-kernel overhead; GEMM shapes through :mod:`costmodel.physics.kernels.gemm`.

MoE layers (Megatron-Core ``--moe-grouped-gemm``, alltoall or allgather dispatcher) also pay,
per layer and micro-batch: the router's softmax/top-k/aux-loss kernels, the token permute and
unpermute (gathers/scatters of ``topk`` copies of every token), one device-to-host copy of
``tokens_per_expert`` that the host needs before it can size the AllToAll-V and the grouped
GEMM, and the ragged per-expert row counts of the grouped GEMM (each expert's rows end in a
partial tile). The slowest expert-parallel rank sets the pace (``ModelSpec.moe_imbalance``).

Layer structure and GEMM shapes follow Megatron-LM (Shoeybi et al. 2019, Fig. 3): column-
parallel QKV and MLP-in, row-parallel attention-out and MLP-out, each split by ``tp``.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> from costmodel.spec.workload import Workload
>>> ops = layer_ops(load_model("gpt3-175b"), load_cluster("a100-80g").device,
...                 Workload(global_batch=8, seq_len=2048), ParallelConfig(tp=8, mb=1))
>>> [o.name for o in ops][:4]
['ln1', 'qkv', 'attn_core', 'attn_out']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from costmodel.physics.kernels import dropout as _dropout
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.kernels.kernel_fits import attention_shape_factor
from costmodel.physics.kernels.arch_passes import attention_arch_factors, expert_passes_s, rope_pass_s, sink_rescale_s
from costmodel.physics.kernels.optimizer import ADAM_STEP_BYTES, optimizer_time_s  # noqa: F401  (re-exported)
from costmodel.physics.kernels.kvcache import kv_dtype_bytes, kv_elements_per_token_layer
from costmodel.spec.specs import DeviceSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.physics.kernels.measured import table_evidence
from costmodel.physics.kernels.decode_attention import decode_attention_evidence, decode_attention_fixed_s, mla_table_s
from costmodel.physics.kernels.gemm import TE_GROUPED_GEMM_STREAMS, gemm_time_s, elementwise_time_s, grouped_gemm_time_s
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.physics.kernels.gemm import ACT_BYTES, gemm_class

#: A blocking device-to-host copy of ``tokens_per_expert`` (Megatron-Core token dispatcher,
#: ``tokens_per_expert.cpu()`` / the ``.tolist()`` of the AllToAll-V splits and grouped-GEMM sizes):
#: the copy call alone costs 5-7 us (Wu et al. 2026, "DualPath", arXiv 2602.21548, section 5.2,
#: measured cudaMemcpyAsync per-call latency); the GPU has drained its queue by then, so the
#: launches of the kernels that follow are exposed too (counted as 3 kernel overheads below).
HOST_COPY_S = 7e-6
SYNC_EXPOSED_LAUNCHES = 3  # kernels launched into the empty queue after the sync (assumption)
#: PyTorch eager element-wise ops of a Llama block (``ParallelConfig.fused_elementwise=False``): HBM
#: bytes per element of the forward and kernel launches, read from torchtitan's model as benchmarked in
#: Dec 2024 (``torchtitan/models/norms.py`` RMSNorm, ``models/llama/model.py`` apply_rotary_emb and
#: FeedForward at 327b72b, 2024-12-11), one kernel per operator as eager PyTorch runs them:
#:
#: * RMSNorm ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w``: upcast (read 2 B,
#:   write 4), pow (4 + 4), mean (4), multiply (4 + 4), downcast (4 + 2), weight (2 + 2) = 36 B per
#:   element in 8 kernels (two on the row statistics); a fused norm reads and writes once, 4 B;
#: * rotary embedding on q and k, ``view_as_complex(x.float()) * freqs`` then ``type_as``: upcast (2 + 4),
#:   complex multiply (4 + 4), downcast (4 + 2) = 20 B per q/k element, 3 kernels each; fused stacks
#:   apply it inside the attention prologue or a fused kernel (not charged there);
#: * SwiGLU ``silu(w1 x) * w3 x``: silu (2 + 2), multiply (4 + 2) = 10 B per FFN element in 2 kernels
#:   (fused: read gate and up, write once, 6 B).
#:
#: ``torch.compile`` (torchtitan ``training.compile``) fuses each chain into one Triton kernel, which is
#: the fused case. Residual adds are one kernel either way.
EAGER_NORM_BYTES, EAGER_NORM_KERNELS = 36, 8
EAGER_ROPE_BYTES, EAGER_ROPE_KERNELS = 20, 6
EAGER_SWIGLU_BYTES, EAGER_SWIGLU_KERNELS = 10, 2


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel of a layer's forward pass on one GPU, with its backward.

    ``fwd_s`` is the forward time; ``bwd_s`` the whole backward (for a GEMM: data-gradient
    plus weight-gradient); ``wgrad_s`` the weight-gradient part alone, the window in which a
    data-gradient collective can hide (Megatron's asynchronous TP all-reduce).
    ``block`` is ``attn`` or ``mlp``; ``comm_after`` names the TP collective that follows it.
    """

    name: str
    kind: str  # gemm | attention | elementwise
    block: str
    fwd_flops: float
    fwd_s: float
    bwd_s: float
    wgrad_s: float = 0.0
    comm_after: str = ""
    act_s: float = 0.0  # the routed experts' activation function inside an ``experts`` op (Megatron's moe_act)
    evidence: str = ""  # an op timed from the measured tables (a GEMM: the weakest of its three GEMMs)


def _gemm(
    name, block, m, n, k, dev, dtype, comm_after="", groups: int = 1, ragged: bool = False, streams: int | None = None
) -> Op:
    """A GEMM (or a grouped GEMM of ``groups`` problems, as for MoE experts) with its backward.

    ``ragged``: the groups' row counts ``m`` vary (routed tokens per expert): forward and dgrad
    are M-grouped with a partial last tile per group; wgrad reduces over those rows (its K is
    ``m``, short for fine-grained experts)."""
    t = grouped_gemm_time_s(m, n, k, dev, dtype, groups, ragged, streams)
    ev = table_evidence(((m, n, k), (m, k, n), (k, n, m)), dev, dtype) if dev.kernel_table and groups == 1 else ""
    # backward: dgrad (m x n)@(n x k) and wgrad (k x m)@(m x n), same FLOPs as forward each
    dgrad = grouped_gemm_time_s(m, k, n, dev, dtype, groups, ragged, streams)
    wgrad = grouped_gemm_time_s(k, n, m, dev, dtype, groups, False, streams)
    if gemm_class(dtype) == "fp8":
        # Transformer Engine casts each GEMM input to FP8 with a fused cast+transpose: forward
        # reads the BF16 input (2 B) and writes the FP8 copy and its transpose (1 B + 1 B);
        # backward does the same for the output gradient (NVIDIA Transformer Engine docs, FP8 primer).
        t += elementwise_time_s(4 * m * k * groups, dev)
        dgrad += elementwise_time_s(4 * m * n * groups, dev)
    return Op(name, "gemm", block, 2.0 * m * n * k * groups, t, dgrad + wgrad, wgrad, comm_after, evidence=ev)


def _elementwise(name, block, bytes_fwd, dev, kernels=1) -> Op:
    t = elementwise_time_s(bytes_fwd, dev, kernels)
    return Op(name, "elementwise", block, 0.0, t, 2 * t)


def attention_flops(model: ModelSpec, tokens_q: float, seq_kv: float, tp: int, mla_absorbed: bool = False) -> float:
    """Forward FLOPs of scores and context, ``4 * s_q * s_kv * heads * d`` (no causal saving).

    This is the FLOP-counting convention of Narayanan et al. 2021, Eq. 3 (the ``s/6h`` term).
    ``mla_absorbed``: MLA decoding with the up-projections absorbed into the query and output
    projections (DeepSeek-V2, arXiv 2405.04434, section 2.1.2), so every head attends over the
    cached latent: scores over ``kv_lora_rank + qk_rope_head_dim``, context over ``kv_lora_rank``.
    """
    if mla_absorbed and model.is_mla:
        d_qk, d_v = model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    else:
        d_qk = model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0)
        d_v = model.v_head_dim if model.is_mla else model.head_dim
    return 2.0 * tokens_q * seq_kv * (model.heads / tp) * (d_qk + d_v)


def _decode_attention(model, dev, b: int, s: int, tp: int, kv_bytes: int) -> Op:
    """One new query per sequence against a cache of ``s`` tokens (inference decode step).

    A FlashDecoding-style kernel reads the whole KV cache once, so it is HBM-bound unless
    many query heads share each cached byte (MLA): roofline of FLOPs and cache bytes, plus the call's
    fixed time (the KV-cache write and the decode kernel at small context, measured per GPU:
    :func:`costmodel.physics.kernels.decode_attention.decode_attention_fixed_s`; for MLA the GQA tables'
    figure is assumed), or MLA as the serving engine's measured kernel runs it where it has a table (``mla_table_s``;
    beyond one cached token: the serving step's probe of a call holding no work stays the roofline's)."""
    flops = attention_flops(model, b, s, tp, mla_absorbed=True)
    cache_bytes = b * s * kv_elements_per_token_layer(model, tp) * kv_bytes
    rate, bw = dev.peak_bf16_flops_per_s * dev.attention_efficiency, dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency
    t, ev = (mla_table_s(model, dev, b, s, tp, kv_bytes) if s > 1 else None) or (
        max(flops / rate, cache_bytes / bw) + decode_attention_fixed_s(dev),
        "assumed" if model.is_mla else decode_attention_evidence(dev),
    )
    return Op("attn_core", "attention", "attn", flops, t, 0.0, evidence=ev)


def _attention_core(model, dev, b: int, s: int, tp: int, cp: int, flash: bool, train: bool = True) -> Op:
    """Attention scores and context of ``b`` sequences of ``s`` tokens, split ``tp`` ways by head and
    ``cp`` ways by query (``flash``: fused FlashAttention, else Megatron's unfused kernels)."""
    sq = s / cp  # queries held by this GPU (context parallel shards the sequence)
    heads = model.heads / tp
    flops = attention_flops(model, b * sq, s, tp)
    if flash:
        # FlashAttention (Dao 2022): fused, skips the masked half of a causal mask; runs in BF16.
        # Backward is 2.5x the forward FLOPs (5 matmuls instead of 2). ``attention_efficiency`` is the
        # kernel's at causal 16k tokens, head dim 128; other shapes scale by the kernel's measured shape
        # factor (costmodel.physics.kernels.kernel_fits, fitted to benchmarks/data/components/kernels.csv). Under context
        # parallelism each ring step is a kernel over s/cp keys, the diagonal step causal and the others
        # full blocks (Liu et al. 2023; taken as full blocks of s/cp keys: an approximation).
        rate = dev.peak_bf16_flops_per_s * dev.attention_efficiency
        d = model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0)
        kv, causal = s / cp, cp == 1
        f_fwd, f_bwd = attention_arch_factors(model, dev, b, s, cp, tp)  # sliding window, head dim (arch_passes)
        fwd = f_fwd * 0.5 * flops / (rate * attention_shape_factor(dev, kv, d, causal, "fwd"))
        bwd = f_bwd * 2.5 * 0.5 * flops / (rate * attention_shape_factor(dev, kv, d, causal, "bwd"))
        return Op("attn_core", "attention", "attn", flops, fwd + dev.kernel_overhead_s, bwd + dev.kernel_overhead_s)
    # Unfused (Megatron 2021/22): batched QK^T and PV GEMMs over full s x s scores, with the
    # fused scale-mask-softmax (read 2 B, write 2 B per score) and dropout (read 2, write 2 + 1 B mask),
    # which does not run at attention_dropout 0 or in inference (costmodel.physics.kernels.dropout)
    d = model.head_dim
    bmm = gemm_time_s(sq, s, d, dev, "bf16", batch=int(b * heads)) + gemm_time_s(
        sq, d, s, dev, "bf16", batch=int(b * heads)
    )
    scores = b * heads * sq * s
    per_score, kernels = _dropout.score_kernel_bytes(model.attention_dropout, train)
    ew = elementwise_time_s(per_score * scores, dev, kernels=kernels)
    return Op("attn_core", "attention", "attn", flops, bmm + ew, 2 * bmm + 2 * ew)


def layer_ops(
    model: ModelSpec,
    dev: DeviceSpec,
    w: Workload,
    c: ParallelConfig,
    moe: bool = False,
    *,
    decode: bool = False,
    kv_dtype: str = "bf16",
) -> tuple[Op, ...]:
    """The forward ops of one (dense or MoE) layer on one GPU for one micro-batch, in order.

    ``decode``: an inference decode step, one new token for each of ``c.mb`` sequences whose
    KV cache (in ``kv_dtype``) holds ``w.seq_len`` tokens; GEMMs then have ``m = c.mb`` rows.
    """
    kv_bytes = kv_dtype_bytes(kv_dtype) if decode else 0
    return _layer_ops(
        model,
        dev,
        w.seq_len,
        w.recipe,  # the recipe: its GEMMs time at its rate (costmodel.physics.kernels.gemm.recipe_rate_factor)
        c.tp,
        c.cp,
        c.mb,
        c.sp_on,
        c.ep,
        moe,
        c.flash_attention,
        decode,
        kv_bytes,
        w.mode == "infer",
        c.fused_elementwise,
        c.framework,
        c.norms_fused,
    )


@lru_cache(maxsize=4096)
def _layer_ops(
    model, dev, seq_len, dtype, tp, cp, mb, sp, ep, moe, flash, decode=False, kv_bytes=0, serving=False, fused=True,
    framework="megatron", fused_norm=True,
):  # fmt: skip
    h = model.hidden
    n = mb if decode else mb * seq_len / cp  # tokens on this GPU
    n_sp = n / tp if sp else n  # tokens held by element-wise ops (sequence parallel shards them)
    tp_comm = "rs" if sp else "ar"
    ops: list[Op] = []
    norm_b, norm_k = (2 * ACT_BYTES, 1) if fused_norm else (EAGER_NORM_BYTES, EAGER_NORM_KERNELS)  # fused, or eager
    ops.append(_elementwise("ln1", "attn", norm_b * n_sp * h, dev, norm_k))
    if model.is_mla:
        qkv_width = (model.attn_params - model.heads * model.v_head_dim * h) / h / tp
        o_in = model.heads * model.v_head_dim / tp
        qk_width = model.heads * model.qk_rope_head_dim / tp + model.qk_rope_head_dim
    else:
        kv_rep = min(tp, model.kv_heads)
        qkv_width = model.heads * model.head_dim / tp + 2 * model.kv_dim / kv_rep
        o_in = model.heads * model.head_dim / tp
        qk_width = model.heads * model.head_dim / tp + model.kv_dim / kv_rep
    ops.append(_gemm("qkv", "attn", n, qkv_width, h, dev, dtype))
    stack = None if serving or decode else framework  # the training framework's eager passes
    if not fused:
        ops.append(_elementwise("rope", "attn", EAGER_ROPE_BYTES * n * qk_width, dev, EAGER_ROPE_KERNELS))
    elif rope := rope_pass_s(model, dev, stack, n * qk_width):  # YaRN's eager passes
        ops.append(Op("rope", "elementwise", "attn", 0.0, *rope))
    ops.append(
        _decode_attention(model, dev, mb, seq_len, tp, kv_bytes)
        if decode
        else _attention_core(model, dev, mb, seq_len, tp, cp, flash, not serving)
    )
    sink_f, sink_b = sink_rescale_s(model, dev, n, tp, stack) if flash and not decode else (0.0, 0.0)
    if sink_f:
        ops.append(Op("sink_rescale", "elementwise", "attn", 0.0, sink_f, sink_b))
    ops.append(_gemm("attn_out", "attn", n, h, o_in, dev, dtype, comm_after=tp_comm))
    # bias-dropout-add: read out and residual, write sum, 1-byte mask (none at hidden_dropout 0, costmodel.physics.kernels.dropout)
    bda_bytes = (3 * ACT_BYTES + _dropout.mask_bytes(model.hidden_dropout, not serving)) * n_sp * h
    ops.append(_elementwise("bda1", "attn", bda_bytes, dev))
    ops.append(_elementwise("ln2", "mlp", norm_b * n_sp * h, dev, norm_k))
    gated = model.activation == "swiglu"
    if moe:
        ops.extend(_moe_ops(model, dev, dtype, n, tp, ep, gated, tp_comm, not serving, n_sp, stack))
    else:
        f = model.ffn_hidden / tp
        ops.append(_gemm("fc1", "mlp", n, f * (2 if gated else 1), h, dev, dtype))
        act_b, act_k = (
            (EAGER_SWIGLU_BYTES, EAGER_SWIGLU_KERNELS) if gated and not fused else ((3 if gated else 2) * ACT_BYTES, 1)
        )
        ops.append(_elementwise("act", "mlp", act_b * n * f, dev, act_k))
        ops.append(_gemm("fc2", "mlp", n, h, f, dev, dtype, comm_after=tp_comm))
    ops.append(_elementwise("bda2", "mlp", bda_bytes, dev))
    return tuple(ops)


def _moe_ops(
    model: ModelSpec, dev, dtype, n, tp, ep, gated, tp_comm, host_sync: bool = True, n_route: float | None = None,
    stack: str | None = None,
) -> list[Op]:  # fmt: skip
    """Router, token permutation, routed experts (grouped GEMM over this GPU's experts), shared experts.

    With EP each GPU holds ``experts / ep`` whole experts and receives ``n * topk`` token-slots in
    total across the EP group; tokens are first split across TP ranks (Megatron-Core requires
    sequence parallelism for MoE with TP), so each GPU handles ``n * topk / tp`` slots on average
    and the slowest EP rank ``moe_imbalance`` times that. Without EP every TP rank runs all
    ``n * topk`` slots on a ``1/tp`` slice of each expert, and imbalance only moves work between
    the experts of one GPU.

    ``host_sync``: training frameworks copy ``tokens_per_expert`` to the host once per MoE layer
    and forward (recompute repeats it); serving engines run MoE under CUDA graphs without it, and so does
    Megatron-Core when padding to capacity (``ModelSpec.moe_pad_to_capacity``: static shapes, its dispatcher keeps
    ``cuda_sync_point = "no_sync"``, token_dispatcher.py@d98e8a6 ``preprocess``).

    ``stack``: the training framework (``ParallelConfig.framework``) whose eager passes over the experts' rows are
    charged (:func:`costmodel.physics.kernels.arch_passes.expert_passes_s`); None: none (serving).

    ``n_route``: the tokens this GPU routes (default ``n``). Under sequence parallelism each TP rank
    routes its own ``n / tp`` shard: Megatron-Core ``MoELayer.forward`` requires sequence parallelism
    with TP in training and ``MoELayer.route`` applies the router to the layer's input as it arrives,
    the ``[s/tp, b, h]`` shard; only the routing metadata is gathered over TP x EP afterwards
    (``MoEAlltoAllTokenDispatcher.preprocess``: ``gather_from_sequence_parallel_region`` of the
    per-expert counts), NVIDIA/Megatron-LM megatron/core/transformer/moe/moe_layer.py and
    token_dispatcher.py @d98e8a6.
    """
    h = model.hidden
    etp = tp if ep == 1 else 1
    nr = n if n_route is None else n_route
    ops = [_gemm("router", "mlp", nr, model.experts, h, dev, "bf16")]
    # Router scores, top-k and the auxiliary load-balancing loss (Megatron-Core
    # transformer/moe/router.py: TopKRouter.routing -> topk_softmax_with_capacity and
    # switch_load_balancing_loss_func; Fedus et al. 2022, eq. 4), in FP32 over n x experts:
    # softmax (read + write 8 B), top-k (read 4 B; write k indices and probs, 12 B each), the
    # aux-loss scores (a second softmax, 8 B), their sum over tokens (4 B) and the routing map
    # (write + read 2 B): 22 B per score plus 12 B per slot, about 6 unfused kernels.
    router_bytes = 22 * nr * model.experts + 12 * nr * model.topk
    ops.append(_elementwise("router_topk", "mlp", router_bytes, dev, kernels=6))
    if host_sync and not model.moe_pad_to_capacity:
        t_sync = HOST_COPY_S + SYNC_EXPOSED_LAUNCHES * dev.kernel_overhead_s
        ops.append(Op("tokens_per_expert_sync", "elementwise", "mlp", 0.0, t_sync, 0.0))
    local = n * model.topk / (tp if ep > 1 else 1)  # token-slots this GPU routes (its own tokens)
    slots = local * moe_imbalance(model, ep, local * ep / model.experts)  # the slowest EP rank's slots
    # Permute: gather topk copies of each token row into expert order (Megatron-Core
    # moe_utils.permute: index_select; Transformer Engine moe_permute), read + write of
    # ``topk * n`` BF16 rows; its backward is the matching scatter, the same bytes.
    perm = elementwise_time_s(2 * ACT_BYTES * local * h, dev)
    ops.append(Op("permute", "elementwise", "mlp", 0.0, perm, perm))
    local_experts = model.experts // ep
    # Experts that receive a token: all of them at training sizes; in a small decode batch only
    # those the routed tokens pick (a token misses an expert with probability 1 - topk/experts),
    # and only their weights are read.
    tokens_routed = local * ep / model.topk
    hit = 1.0 - (1.0 - model.topk / model.experts) ** tokens_routed
    active = max(1, min(local_experts, math.ceil(local_experts * hit - 1e-9)))
    per_expert = slots / active
    f = model.moe_ffn_hidden / etp
    # one grouped GEMM (Megatron-Core --moe-grouped-gemm) runs the tiles of all active local
    # experts at once; their token counts are data-dependent (ragged)
    ragged = active > 1
    # training: TE's multi-stream grouped GEMM; serving engines run one fused/grouped MoE kernel
    streams = TE_GROUPED_GEMM_STREAMS if host_sync else None
    up = _gemm(
        "expert_fc1",
        "mlp",
        per_expert,
        f * (2 if gated else 1),
        h,
        dev,
        dtype,
        groups=active,
        ragged=ragged,
        streams=streams,
    )
    down = _gemm("expert_fc2", "mlp", per_expert, h, f, dev, dtype, groups=active, ragged=ragged, streams=streams)
    act = _elementwise("expert_act", "mlp", (3 if gated else 2) * ACT_BYTES * slots * f, dev)
    clamp_f, clamp_b, bias_f, bias_b = expert_passes_s(model, dev, stack, slots, f, active)
    # the clamp's eager passes are inside the activation's recompute region (moe_act)
    act = Op(act.name, act.kind, act.block, 0.0, act.fwd_s + clamp_f, act.bwd_s + clamp_b)
    fwd, bwd = up.fwd_s + down.fwd_s + act.fwd_s, up.bwd_s + down.bwd_s + act.bwd_s
    fwd, bwd = fwd + bias_f, bwd + bias_b  # the experts' biases, added per local expert
    if ep > 1 and local_experts > 1:
        # tokens arriving from the EP ranks are regrouped by local expert before the GEMM and back
        # after it (Megatron-Core MoEAlltoAllTokenDispatcher: sort_chunks_by_idxs), read + write
        sort = elementwise_time_s(2 * ACT_BYTES * slots * h, dev)
        fwd, bwd = fwd + 2 * sort, bwd + 2 * sort
    ops.append(
        Op(
            "experts",
            "gemm",
            "mlp",
            up.fwd_flops + down.fwd_flops,
            fwd,
            bwd,
            up.wgrad_s + down.wgrad_s,
            comm_after="a2a" if ep > 1 else tp_comm,
            act_s=act.fwd_s,
        )
    )
    # Unpermute: scale each slot by its router probability and sum the topk copies back into token
    # order (moe_utils.unpermute: mul + scatter_add): read ``topk * n`` rows, write them weighted,
    # accumulate; backward is the matching gather.
    unperm = elementwise_time_s(2 * ACT_BYTES * local * h + ACT_BYTES * n * h / (tp if ep > 1 else 1), dev, kernels=2)
    ops.append(Op("unpermute", "elementwise", "mlp", 0.0, unperm, unperm))
    if model.shared_experts:
        fs = model.shared_experts * model.moe_ffn_hidden / tp
        ops.append(_gemm("shared_fc1", "mlp", n, fs * (2 if gated else 1), h, dev, dtype))
        ops.append(_gemm("shared_fc2", "mlp", n, h, fs, dev, dtype))
    return ops


def head_ops(model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig) -> tuple[Op, ...]:
    """LM head GEMM and vocab-parallel cross-entropy on the last stage (per micro-batch).

    Cross-entropy reads the BF16 logits and writes FP32 softmax (Megatron computes it in FP32).
    """
    n = c.mb * w.seq_len / c.cp
    v = model.vocab / c.tp
    head = _gemm("lm_head", "head", n, v, model.hidden, dev, w.dtype, comm_after="")
    ce = _elementwise("cross_entropy", "head", (ACT_BYTES + 4 + 4) * n * v, dev, kernels=3)
    return head, ce


def embedding_op(model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig) -> Op:
    """Embedding lookup on the first stage: a gather of ``n x h`` rows (memory-bound)."""
    n = c.mb * w.seq_len / c.cp
    return _elementwise("embedding", "embed", 3 * ACT_BYTES * n * model.hidden, dev)


@dataclass(frozen=True)
class CPExchange:
    """The K/V traffic of one attention under context parallelism (:func:`cp_exchange`).

    ``kv_bytes``: this GPU's K/V shard; ``gather_bytes``: the all-gathered K/V (0 for ``ring``);
    ``dkv_bytes``: one dK/dV transfer of the backward; ``dkv_sends``: how many the backward makes.
    """

    kv_bytes: float
    gather_bytes: float
    dkv_bytes: float
    dkv_sends: int


def cp_exchange(model: ModelSpec, tokens: float, tp: int, cp: int, cp_impl: str = "ring") -> CPExchange:
    """What context parallelism moves per attention for ``tokens`` queries on one GPU.

    * ``ring`` (Megatron-Core / Transformer Engine ring attention, Liu et al. 2023): the GQA K/V shard
      (``kv_heads`` heads, replicated when ``tp > kv_heads``) passes to the neighbour ``cp - 1`` times
      in forward, and again in backward followed by ``cp - 1`` dK/dV partial sums in BF16; each
      transfer hides behind one attention block.
    * ``torch`` (PyTorch ``torch.distributed.tensor.experimental.context_parallel`` as torchtitan
      327b72b runs it): torchtitan's Llama ``Attention.forward`` calls ``repeat_kv`` before
      ``F.scaled_dot_product_attention`` (``torchtitan/models/llama/model.py``), so the K/V that CP
      exchanges have the query head count; PyTorch's default rotater (``_cp_options.rotate_method =
      _RotateMethod.ALL_GATHER``; torchtitan's ``context_parallel_rotate_method`` defaults to
      ``allgather`` from c97876e, 2024-12-11) all-gathers every shard once, issued before the local
      block (``_templated_ring_attention``: ``exchange_buffers`` at ``i == 0``, the wait at ``i == 1``),
      so only the local block hides it; the backward gathers K/V again the same way and passes dK/dV
      with an all-to-all rotater in FP32 (``accum_dtype = torch.float32`` under ``convert_to_f32``)
      after every block, ``cp`` times: each hides behind the next block, the last is waited on after
      the loop (``_templated_ring_attention_backward``).
    """
    if cp_impl == "torch":
        kv = tokens * 2 * model.heads * model.head_dim / tp * ACT_BYTES
        return CPExchange(kv, cp * kv, 2 * kv, cp)
    kv = tokens * 2 * model.kv_dim / min(tp, model.kv_heads) * ACT_BYTES
    return CPExchange(kv, 0.0, kv, cp - 1)
