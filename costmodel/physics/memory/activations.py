"""Activation bytes kept for backward: per layer, by the output head and by the loss of one micro-batch.

Activations generalise Korthikanti et al. 2023, Table 2, to GQA, SwiGLU and MoE: per layer and
token, ``10 h`` bytes replicated across TP (layer-norm inputs, QKV and MLP inputs, dropout masks;
divided by ``t`` under sequence parallelism), the Q/K/V, attention-output and MLP tensors split
by ``t`` (``24 h`` for GPT), and ``5 a s / t`` for materialised attention scores (absent with
FlashAttention or selective recompute). Full recompute keeps each layer's ``2 h`` input.

>>> from costmodel.spec.presets import load_model
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> m = load_model("gpt3-175b")
>>> w = Workload(global_batch=1, seq_len=2048)
>>> s, b, h, a, t = 2048, 1, 12288, 96, 8
>>> act = activation_bytes_per_layer(m, w, ParallelConfig(tp=8, sp=True, flash_attention=False))
>>> act == s * b * h / t * (34 + 5 * a * s / h)     # Korthikanti Table 2, "sequence parallel"
True
"""

from __future__ import annotations

from costmodel.physics.kernels import dropout as _dropout
from costmodel.physics.kernels.eager import eager_extra_bytes_per_token
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.physics.kernels.recompute import op_sac_matmuls
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ModelSpec
from costmodel.spec.precision import bytes_per_element
from costmodel.spec.workload import Workload


def activation_bytes_per_layer(model: ModelSpec, w: Workload, c: ParallelConfig, moe: bool = False) -> float:
    """Activation bytes one layer stores for backward, per micro-batch, on one GPU (no recompute
    of the layer as a whole; ``c.recompute == 'selective'`` drops what its modules recompute,
    :attr:`ParallelConfig.recomputed_modules`: the attention-score term by default)."""
    t = c.tp
    h = model.hidden
    tokens = c.mb * w.seq_len / c.cp
    x = saved_input_bytes(w, c)  # bytes of a saved GEMM input element
    rec = c.recomputed_modules
    # 2 LN inputs (4h), QKV input (2h, FP8 1h), MLP input (2h: under MoE the router keeps it in BF16; discarded by
    # Megatron's "layernorm" recompute, and by "moe" as well when both are on), 2 dropout masks (2h, none at
    # hidden_dropout 0: costmodel.physics.kernels.dropout) (a checkpointed dense MLP, Megatron "mlp", keeps its BF16 input)
    mlp_input = (2 if moe or "mlp" in rec else x) * h
    if moe and "layernorm" in rec:
        mlp_input = 0.0
    replicated = 4 * h + x * h + mlp_input + 2 * _dropout.mask_bytes(model.hidden_dropout, w.mode == "train") * h
    # under SP, the GEMM inputs the column-parallel linears keep whole, not sequence-sharded (c.sp_saved_inputs)
    gathered = gathered_gemm_input_bytes(model, w, c) * h if c.sp_on and c.sp_saved_inputs == "gathered" else 0.0
    if gathered:
        replicated -= x * h + mlp_input
    d_v = model.v_head_dim if model.is_mla else model.head_dim
    q = model.heads * (model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0))
    kv = (
        model.kv_heads * (model.head_dim + d_v)
        if not model.is_mla
        else model.heads * (model.head_dim + model.qk_rope_head_dim + d_v)
    )
    # Q, K, V, attention output (BF16, kept by the attention kernel); with FP8 inputs the output projection
    # keeps its own FP8 copy of that output besides
    split = 2 * q + 2 * kv + (2 + (x if x < 2 else 0)) * model.heads * d_v
    if model.is_mla and "mla_up_proj" in rec:  # Megatron "mla_up_proj": Q, K, V discarded after the core attention
        split -= 2 * q + 2 * kv
    gated = model.activation == "swiglu"
    mlp = (4 if gated else 2) * 1 + x  # per FFN unit: fc1 output (2 B, twice gated) and the fc2 input
    if moe:
        f = model.moe_ffn_hidden
        # Megatron "moe_act": the activation's output (the expert fc2's input, x bytes) discarded and recomputed
        expert_mlp = mlp - x if "moe_act" in rec else mlp
        slot = expert_mlp * f / c.expert_tp() + x * h  # expert MLP tensors + permuted input (the expert fc1's input)
        moe_layer = slot * routed_slots_per_token(model, w, c) + mlp * model.shared_experts * f / t + 4 * model.experts
        if c.offload_modules:  # on the host between the module's forward and its backward (offloaded_group_bytes)
            moe_layer -= sum(offloaded_group_bytes(model, w, c, copied=False).values()) / tokens
        if model.shared_experts and x < 2:  # the shared experts' fc1 keeps an FP8 copy of the (BF16) MLP input
            moe_layer += x * h / (t if c.sp_on else 1)
        # Megatron "moe" recompute: the checkpointed MoE layer keeps only its input (the MLP input above)
        per_token_split = split / t + (0.0 if "moe" in rec else moe_layer)
    else:
        f = model.ffn_hidden
        per_token_split = (split + (0.0 if "mlp" in rec else mlp * f)) / t  # Megatron "mlp": the MLP checkpointed
    per_token = replicated / (t if c.sp_on else 1) + gathered + per_token_split + eager_extra_bytes_per_token(model, c)
    if not c.flash_attention and "core_attn" not in rec:
        # softmax (2), dropout mask (1), dropout out (2) per score; the softmax only at attention_dropout 0
        per_token += (
            _dropout.saved_bytes_per_score(model.attention_dropout, w.mode == "train") * model.heads * w.seq_len / t
        )
    elif c.flash_attention:
        per_token += 4 * model.heads / t  # FP32 log-sum-exp per head
    return tokens * per_token


def routed_slots_per_token(model: ModelSpec, w: Workload, c: ParallelConfig) -> float:
    """Routed (token, expert) slots one GPU's experts hold per MoE layer, per token of its micro-batch: ``topk``
    (over ``t`` under EP with TP), the busiest EP rank's share (:func:`costmodel.physics.kernels.moe_load.moe_imbalance`)."""
    tokens = c.mb * w.seq_len / c.cp
    per_token = model.topk / (c.tp if c.ep > 1 else 1)
    return per_token * moe_imbalance(model, c.ep, tokens * per_token * c.ep / model.experts)


#: Megatron-Core's ``--min-offloaded-tensor-size`` default (elements): smaller saved tensors stay on the GPU
#: (``TransformerConfig.min_offloaded_tensor_size`` = 1024 * 1024; ``tensor_need_offloading_checker`` at d98e8a64)
MIN_OFFLOADED_ELEMENTS = 1024 * 1024


def offloaded_group_bytes(model: ModelSpec, w: Workload, c: ParallelConfig, copied: bool = True) -> dict[str, float]:
    """Bytes of one MoE layer and micro-batch each ``c.offload_modules`` group moves to the host, in forward order
    (Megatron-Core ``moe/experts.py`` at d98e8a64): ``expert_fc1`` the expert fc1's saved input (the permuted tokens,
    one tensor per local expert), ``moe_act`` the activation's input (the fc1 output, BF16, ``2f`` wide gated). A
    tensor under :data:`MIN_OFFLOADED_ELEMENTS` stays. ``copied``: the bytes the copy carries; else those
    :func:`activation_bytes_per_layer` counted and no longer holds. They differ for ``expert_fc1`` under the
    per-tensor and blockwise FP8 recipes: offloading it sets ``set_save_original_input`` (the BF16 input is kept,
    2 B, instead of the quantized one) unless the recipe is MXFP8 or NVFP4, whose quantized input
    (:func:`saved_input_bytes`) is kept and copied. The one formula of those bytes: the memory and the copies
    (:mod:`costmodel.physics.mechanics.fg_offload`) read it."""
    if not c.offload_modules:
        return {}
    routed = c.mb * w.seq_len / c.cp * routed_slots_per_token(model, w, c)
    f, h, x = model.moe_ffn_hidden / c.expert_tp(), model.hidden, saved_input_bytes(w, c)
    width = 2 if model.activation == "swiglu" else 1
    fc1 = x if (not copied or w.recipe in ("mxfp8", "nvfp4")) else 2
    groups = {
        "expert_fc1": (routed / max(1, model.experts // c.ep) * h, routed * fc1 * h),
        "moe_act": (routed * width * f, routed * 2 * width * f),
    }
    return {m: b for m, (n, b) in groups.items() if m in c.offload_modules and n >= MIN_OFFLOADED_ELEMENTS}


def gathered_gemm_input_bytes(model: ModelSpec, w: Workload, c: ParallelConfig) -> float:
    """Bytes per token, in units of the hidden size, that the column-parallel GEMMs of one dense layer save of
    their all-gathered inputs under ``c.sp_saved_inputs == 'gathered'`` (PyTorch DTensor SP, as torchtitan
    applies it: ``parallelize_llama.py`` @9dec370 ``apply_tp``, ``"attention": prepare_module_input(
    input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None))`` then ``colwise_parallel()``
    for ``wq``/``wk``/``wv``, and the same for ``feed_forward`` with ``w1``/``w3``): the QKV input and the MLP
    input, one tensor each shared by its GEMMs, at the full sequence (not divided by ``t``). BF16 (2 B each);
    under Float8 torchtitan uses ``PrepareFloat8ModuleInput``, which casts to float8 *before* the Shard ->
    Replicate all-gather (torchao ``float8/float8_tensor_parallel.py``: "the float8 cast happens before the
    all-gather"), and ``matmul_with_hp_or_float8_args.forward`` saves that (float8) input as it came
    (``ctx.save_for_backward(input_hp, weight_hp_t)``): 1 B each. Megatron-Core instead saves the sharded
    input and all-gathers it again in backward (``sp_saved_inputs='sharded'``)."""
    return 2 * (1 if w.dtype == "fp8" else 2)


#: bytes of one saved GEMM-input element: BF16, or FP8 (:func:`fp8_saved_inputs`)
LINEAR_INPUT_BYTES = {False: 2, True: 1}


def saved_input_bytes(w: Workload, c: ParallelConfig) -> float:
    """Bytes of one saved GEMM-input element: :data:`LINEAR_INPUT_BYTES`, and for the blockwise, MXFP8 and
    NVFP4 recipes under Megatron-Core the one usage Transformer Engine keeps (``module/linear.py`` at d0067d0:
    "Discard row-wise data since it is not needed in backward pass", ``update_usage(rowwise_usage=False,
    columnwise_usage=True)``) with its block scales (:func:`costmodel.spec.precision.bytes_per_element`:
    FP8 blockwise 1 + 4/128, MXFP8 1 + 1/32, NVFP4 0.5 + 1/16).

    >>> saved_input_bytes(Workload(global_batch=8, seq_len=4096, dtype="nvfp4"), ParallelConfig())
    0.5625
    """
    fp8 = fp8_saved_inputs(w, c)
    if fp8 and w.recipe not in ("fp8", "fp8-tensorwise"):
        return bytes_per_element(w.recipe, weight=False, usages=1)
    return LINEAR_INPUT_BYTES[fp8]


def fp8_saved_inputs(w: Workload, c: ParallelConfig) -> bool:
    """Whether the GEMMs save their inputs for backward in FP8: Transformer Engine's FP8 linears under
    Megatron-Core (``w.dtype == 'fp8'``, ``framework='megatron'``) quantize the input and keep the FP8 copy
    (``transformer_engine/pytorch/module/linear.py`` at d0067d0: ``saved_inputmat = inputmat``, the
    quantized input; ``layernorm_linear.py``: ``ln_out_to_save = ln_out``, quantized by ``input_quantizer``;
    ``GroupedLinear`` likewise for the experts). torchao's ``Float8Linear`` (torchtitan, FSDP2) saves the
    high-precision input and casts again in backward: BF16."""
    return w.dtype == "fp8" and c.framework == "megatron"


def op_sac_bytes_per_layer(model: ModelSpec, w: Workload, c: ParallelConfig, moe: bool = False) -> float:
    """Activation bytes one dense layer keeps under torchtitan's per-op selective checkpointing
    (``recompute='op_sac'``; what is saved: :func:`costmodel.physics.kernels.recompute.op_sac_fractions`): the block's
    input (checkpoint input, sequence-sharded under SP), the BF16 outputs of the saved matmuls
    (``wq``, ``wv``, ``w1``, ``w2``), the FlashAttention output and FP32 log-sum-exp, and under SP the two
    reduce-scatter outputs. MoE layers (not in torchtitan 327b72b) are charged their whole activations
    (:func:`activation_bytes_per_layer`).

    FP8 saves the same: torchao's ``Float8Linear`` calls ``torch.mm`` on ``Float8Tensor`` arguments, which
    reaches the checkpoint's policy mode as ``aten.mm.default`` (a ``TorchDispatchMode`` sees an op before
    the subclass's ``__torch_dispatch__``, which only then calls ``_scaled_mm``; float8_experimental
    ``float8_ops.py``: ``@implements([aten.mm.default, aten.matmul.default]) def float8_mm``), so the
    every-second-``mm`` rule saves its BF16 output as in BF16 training. Measured: torchtitan's Llama 3.1 8B
    tables (``benchmarks/data/components/memory.csv`` cases 2-3 and 9-10) peak within 0.3% of each other
    with and without Float8. (:func:`costmodel.physics.kernels.recompute.op_sac_fractions` still replays every FP8 matmul in
    its time: not reconciled here.)"""
    if moe or model.is_mla or not c.flash_attention:
        return activation_bytes_per_layer(model, w, c, moe)
    t = c.tp
    h = model.hidden
    tokens = c.mb * w.seq_len / c.cp
    sp = c.tp if c.sp_on else 1
    per_token = 2 * h / sp + 2 * model.heads * model.head_dim / t + 4 * model.heads / t
    if c.sp_on:
        per_token += 2 * 2 * h / sp
    count = 0
    for name in ("qkv", "attn_out", "fc1", "fc2"):  # the dense block's GEMMs in forward order
        for width in op_sac_matmuls(model, name, t):
            count += 1
            if count % 2:
                per_token += 2 * width
    return tokens * per_token


def lm_head_saved_bytes(model: ModelSpec, c: ParallelConfig) -> float:
    """Bytes per token the output head saves for its backward, alive with the loss of a micro-batch: the final
    norm's input (the last layer's BF16 output, sequence-sharded under SP; RMSNorm/LayerNorm keep their input) and
    the LM-head GEMM's BF16 input (the normed output). Under SP Megatron-Core's ``ColumnParallelLinear`` keeps that
    input sequence-sharded and all-gathers it again in backward; PyTorch DTensor TP (torchtitan ``apply_tp``
    @9dec370: ``"output": ColwiseParallel(input_layouts=Shard(1), ...)``) all-gathers it first and ``aten.mm``
    saves the gathered tensor (``c.sp_saved_inputs == 'gathered'``); torchtitan keeps the head in BF16 under
    Float8 (``float8.py`` @9dec370: ``module_filter_fn=lambda mod, fqn: fqn != "output"``)."""
    sp = c.tp if c.sp_on else 1
    head_input = 2 if c.sp_on and c.sp_saved_inputs == "gathered" else 2 / sp
    return (2 / sp + head_input) * model.hidden


def loss_bytes_per_logit(c: ParallelConfig) -> int:
    """Peak bytes per logit element of the loss of one micro-batch, held on top of the stored activations.

    ``c.loss_impl='fused'``: the BF16 logits and the FP32 softmax of Megatron-Core's vocab-parallel
    cross-entropy (6 B). ``'fp32'``, torchtitan: ``cross_entropy(pred.flatten(0, 1).float(), labels)`` in eager
    PyTorch (train.py@9dec370 ``loss_fn``; ``del pred`` frees the BF16 logits before ``loss.backward()``):
    the FP32 ``log_softmax`` output is saved (4 B); in backward ``nll_loss_backward`` writes its FP32 gradient
    (4 B) and ``_log_softmax_backward_data`` the FP32 gradient of the logits (4 B) while both are alive: 12 B.
    Under TP torchtitan runs it as loss parallel (``output_layouts=Shard(-1)``, parallelize_llama.py@9dec370;
    ``--training.disable_loss_parallel`` off by default), whose fused backward (PyTorch
    ``torch/distributed/tensor/parallel/loss.py``, ``_nll_loss_and_log_softmax_backward``:
    ``grad_input = torch.zeros_like(x)`` ... ``return (grad_input + torch.exp(x)) * grad_output``) holds the
    saved output, ``grad_input``, their sum and the product at once: 16 B.
    torchtitan compiles the loss under ``training.compile`` from ``components/loss.py``@e7c0cae on: charged as
    ``'fused'``, for it holds the same 6 B. Checked with PyTorch 2.13's ``min_cut_rematerialization_partition``
    (the partitioner Inductor uses) on that function: the forward graph saves the FP32 ``_log_softmax`` output
    (4 B per logit, a reduction it will not recompute, not the BF16 input) and the backward graph returns the
    BF16 gradient (2 B), so 4 + 2 B in backward, the BF16 logits (2 B) + the FP32 output (4 B) in forward.

    ``'te'``: Transformer Engine's cross-entropy, Megatron-Core's loss under ``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te`` (``language_module.py`` ``compute_language_model_loss`` at
    NVIDIA/Megatron-LM@0d8e0714: ``te_parallel_cross_entropy``), computes the gradient in the forward and writes it
    over the BF16 logits (``transformer_engine/pytorch/triton/cross_entropy.py`` at NVIDIA/TransformerEngine@70f536662,
    v2.9: ``cross_entropy_kernel`` stores ``exp(X - m) / d`` into ``X_ptr`` in the logits' dtype;
    ``CrossEntropyFunction`` saves that tensor and its backward scales it in place, ``element_mul_kernel``); only
    per-token FP32 statistics (12 B a token, not a logit) besides: 2 B."""
    if c.loss_impl == "fp32":
        return 16 if c.tp > 1 else 12
    if c.loss_impl == "te":
        return 2
    return 6
