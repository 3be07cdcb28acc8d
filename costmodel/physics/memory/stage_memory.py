"""Memory per GPU on each pipeline stage: weights, gradients, optimizer state, activations.

Model state (Rajbhandari et al. 2020, "ZeRO", section 3.1, with Megatron-LM's FP32 gradient
buffer): BF16 weights 2 B, FP32 main gradients 4 B, Adam FP32 master/m/v 12 B per parameter.
ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also the weights, over
the data-parallel ranks (dense parameters over ``dp * cp``, experts over the expert-data-parallel ranks).

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

from dataclasses import dataclass, replace

from costmodel.physics.kernels import dropout as _dropout, mtp
from costmodel.frameworks import rules as frameworks
from costmodel.physics.kernels.eager import eager_extra_bytes_per_token
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.physics.kernels.recompute import op_sac_matmuls
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.spec.stages import in_flight_profile
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from costmodel.physics.memory.stage_contents import chunk_counts, expert_dp, layer_counts, layer_params, stage_params
from costmodel.spec.units import GiB  # noqa: F401 (used by the doctests)
from costmodel.spec.units import WEIGHT_BYTES, GRAD_BYTES, OPTIM_BYTES

MiB = 2**20
#: CUDA context with PyTorch's and the framework's kernels loaded lazily (CUDA 11.7+
#: CUDA_MODULE_LOADING=LAZY); assumption, typical of ``nvidia-smi`` readings of an idle process
CUDA_CONTEXT_BYTES = 512 * MiB
#: cuBLAS workspaces: Transformer Engine allocates 32 MiB per stream on Hopper
#: (``get_cublas_workspace_size_bytes``), PyTorch its own; two of them
CUBLAS_WORKSPACE_BYTES = 2 * 32 * MiB
#: NCCL_BUFFSIZE, the buffer of one channel to one peer (NCCL documentation, environment
#: variables: default 4 MiB); a ring channel receives from one peer and sends to another
NCCL_BUFFSIZE_BYTES = 4 * MiB
NCCL_RING_CHANNELS = 16  # channels of one collective communicator on an NVSwitch node (assumption)
NCCL_P2P_CHANNELS_PER_PEER = 2  # NCCL_NCHANNELS_PER_NET_PEER default (NCCL docs)
#: allocator fragmentation, as a fraction of activation memory: the caching allocator cannot
#: reuse blocks freed between differently sized short-lived tensors (Rajbhandari et al. 2020,
#: ZeRO, section 3.2 "memory fragmentation", sees OOM with over 30% of memory free in extreme
#: cases; 5% on average is an assumption)
FRAGMENTATION = 0.05
#: the reserve of a plan with no communicators and no activations (kept for callers that need
#: a constant lower bound)
RESERVED_BYTES = CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES


def reserved_bytes(c: ParallelConfig, activations_bytes=0.0):
    """Memory outside the model state and activations on one GPU: CUDA context, cuBLAS
    workspaces, NCCL buffers of every communicator the plan creates, and allocator
    fragmentation (``FRAGMENTATION`` of the activations). Works on numpy arrays of activations.

    NCCL buffers: each collective communicator of more than one rank (TP, CP, DP, EP, and the
    expert-data-parallel group when it differs) keeps ``NCCL_RING_CHANNELS`` channels, each
    receiving from one peer (``NCCL_BUFFSIZE`` per channel per peer, NCCL docs); pipeline send/recv
    connects two peers and an EP all-to-all ``ep - 1`` peers with ``NCCL_P2P_CHANNELS_PER_PEER``
    channels each, buffers both ways.

    >>> c = ParallelConfig(tp=8, pp=4, dp=32)
    >>> # 512 MiB context + 64 MiB cuBLAS + 2 comms x 16 ch x 4 MiB + pp: 2 peers x 2 ch x 2 x 4 MiB + 5% of 10 GiB
    >>> reserved_bytes(c, 10 * GiB) / MiB == 512 + 64 + 2 * 16 * 4 + 2 * 2 * 2 * 4 + 0.05 * 10 * 1024
    True
    """
    comms = sum(1 for g in (c.tp, c.cp, c.dp * c.cp) if g > 1)
    edp = expert_dp(c)
    if c.ep > 1:
        comms += 1 + (1 if edp > 1 and edp != c.dp * c.cp else 0)
    nccl = comms * NCCL_RING_CHANNELS * NCCL_BUFFSIZE_BYTES
    peers = (2 if c.pp > 1 else 0) + (c.ep - 1 if c.ep > 1 else 0)
    nccl += peers * NCCL_P2P_CHANNELS_PER_PEER * 2 * NCCL_BUFFSIZE_BYTES
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + nccl + FRAGMENTATION * activations_bytes


@dataclass(frozen=True)
class StageMemory:
    """Peak bytes on one GPU of a pipeline stage."""

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    reserved_bytes: float = RESERVED_BYTES  # :func:`reserved_bytes` of the plan

    @property
    def allocated_bytes(self) -> float:
        """The tensors (what PyTorch reports as allocated): everything but :attr:`reserved_bytes`."""
        return self.total_bytes - self.reserved_bytes

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.buffers_bytes
            + self.reserved_bytes
        )

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "weights_bytes": self.weights_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "buffers_bytes": self.buffers_bytes,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "total_bytes": self.total_bytes,
        }


def model_state_bytes(model: ModelSpec, c: ParallelConfig, stage: int) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on one GPU of ``stage`` under ZeRO stage ``c.zero`` as
    ``c.framework`` shards it (:func:`costmodel.frameworks.rules.semantics`): Megatron's distributed
    optimizer (zero=1) keeps the full FP32 gradient buffer (``megatron/core/distributed/
    param_and_grad_buffer.py``) and shards only the optimizer state."""
    dense, expert = stage_params(model, c, stage)
    shard_d, shard_e = c.dp * c.cp, expert_dp(c)
    sem = frameworks.of(c)

    def sharded(nbytes_per_param: float, on: bool) -> float:
        if on:
            return nbytes_per_param * (dense / shard_d + expert / shard_e)
        return nbytes_per_param * (dense + expert)

    grad = grad_elem_bytes(c)
    if c.optimizer_dtype == "bf16" and sem.shard_grads:
        grad = 2  # FSDP2 keeps the sharded gradient in the parameter's dtype (reduced in FP32, then cast)
    weight, optim = WEIGHT_BYTES, optimizer_state_bytes(c)
    if c.framework == "fsdp2" and c.optimizer_dtype == "fp32":
        # torchtitan builds the model in FP32 (train.py@9dec370: meta init, ``to_empty``, no cast) and FSDP2's
        # ``MixedPrecisionPolicy(param_dtype=bf16)`` casts only what it all-gathers: the FP32 parameter *is*
        # the optimizer's master copy, no BF16 shard beside it (4 + 4 + 8 = 16 B per parameter, not 2 + 4 + 12).
        # (Charged so under a pipeline schedule too: the unsharded-weights variant, 2 + 12 / dp, put torchtitan's
        # measured 405B PP8 rows 10-20% under, benchmarks/component_memory.py cases 13-18; not kept)
        weight, optim = FSDP2_PARAM_BYTES, OPTIM_BYTES - FSDP2_PARAM_BYTES
    # optimizer CPU offload: the offloaded fraction's FP32 master and Adam moments live on the host
    # (costmodel.physics.mechanics.offload; HybridDeviceOptimizer._get_sub_optimizer_param_groups at Megatron-LM@d98e8a64)
    optim *= 1.0 - c.optimizer_offload_fraction
    return (sharded(weight, sem.shard_weights), sharded(grad, sem.shard_grads), sharded(optim, sem.shard_optimizer))


#: bytes of an FSDP2 parameter under torchtitan's mixed precision: FP32, the optimizer's master weights
FSDP2_PARAM_BYTES = 4


def optimizer_state_bytes(c: ParallelConfig) -> int:
    """Optimizer bytes per parameter: :data:`OPTIM_BYTES` (FP32 master, Adam m and v) with
    ``optimizer_dtype='fp32'``; with ``bf16`` only the two BF16 moments (``torch.optim.Adam`` keeps its
    state in the parameter's dtype; the BF16 parameter, counted as the weight, is the one it updates)."""
    return OPTIM_BYTES if c.optimizer_dtype == "fp32" else 4


def grad_elem_bytes(c: ParallelConfig) -> int:
    """Bytes of one gradient element as ``c`` accumulates and reduces it (``c.grad_dtype``):
    :data:`GRAD_BYTES` (FP32) by default, 2 for FP16 / BF16 gradients."""
    return GRAD_BYTES if c.grad_dtype == "fp32" else 2


def param_gather_bytes(c: ParallelConfig) -> int:
    """Bytes per parameter a data-parallel parameter all-gather moves: BF16, or one byte under
    ``c.fp8_param_gather`` (Megatron-Core keeps FP8 parameters in a ``torch.uint8`` buffer and all-gathers
    that: ``megatron/core/distributed/param_and_grad_buffer.py`` at d98e8a64, "param_dtype: storage dtype
    (torch.uint8 for FP8/NVFP4 parameters, else param.dtype)"). Only the GEMM weights are FP8 there; the
    embedding, LM head and norms, BF16, are charged one byte too (an approximation: their share of the
    gather is under-charged by half)."""
    return 1 if c.fp8_param_gather else WEIGHT_BYTES


def gathered_weight_bytes(model: ModelSpec, c: ParallelConfig, stage: int) -> float:
    """Unsharded BF16 weights held besides the shards: FSDP/ZeRO-3 the current and the prefetched
    layer; FSDP2 without resharding after forward (zero=2) the whole stage from forward to backward."""
    sem = frameworks.of(c)
    if sem.unsharded_weights is None or c.dp * c.cp <= 1:
        return 0.0
    dense, expert = stage_params(model, c, stage)
    if sem.unsharded_weights == "stage":
        return WEIGHT_BYTES * (dense + expert)
    n_dense, n_moe = layer_counts(model, c, stage)
    return 2 * WEIGHT_BYTES * (dense + expert) / max(1, n_dense + n_moe)


def activation_bytes_per_layer(model: ModelSpec, w: Workload, c: ParallelConfig, moe: bool = False) -> float:
    """Activation bytes one layer stores for backward, per micro-batch, on one GPU (no recompute
    of the layer as a whole; ``c.recompute == 'selective'`` drops what its modules recompute,
    :attr:`ParallelConfig.recomputed_modules`: the attention-score term by default)."""
    t = c.tp
    h = model.hidden
    tokens = c.mb * w.seq_len / c.cp
    x = LINEAR_INPUT_BYTES[fp8_saved_inputs(w, c)]  # bytes of a saved GEMM input element
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
        slot = mlp * f / c.expert_tp() + x * h  # expert MLP tensors + permuted input (the expert fc1's input)
        slots_per_token = model.topk / (t if c.ep > 1 else 1)
        # the busiest EP rank stores its share of the routed slots (costmodel.physics.kernels.moe_load.moe_imbalance)
        slots_per_token *= moe_imbalance(
            model, c.ep, tokens * model.topk / (t if c.ep > 1 else 1) * c.ep / model.experts
        )
        moe_layer = slot * slots_per_token + mlp * model.shared_experts * f / t + 4 * model.experts
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


def fp8_saved_inputs(w: Workload, c: ParallelConfig) -> bool:
    """Whether the GEMMs save their inputs for backward in FP8: Transformer Engine's FP8 linears under
    Megatron-Core (``w.dtype == 'fp8'``, ``framework='megatron'``) quantize the input and keep the FP8 copy
    (``transformer_engine/pytorch/module/linear.py`` at d0067d0: ``saved_inputmat = inputmat``, the
    quantized input; ``layernorm_linear.py``: ``ln_out_to_save = ln_out``, quantized by ``input_quantizer``;
    ``GroupedLinear`` likewise for the experts). torchao's ``Float8Linear`` (torchtitan, FSDP2) saves the
    high-precision input and casts again in backward: BF16."""
    return w.dtype == "fp8" and c.framework == "megatron"


#: bytes per GEMM weight of Transformer Engine's cached FP8 copy on Hopper: the row-wise data for the
#: forward GEMM and the column-wise (transposed) data for the data-gradient GEMM, one byte each
FP8_WEIGHT_COPY_BYTES = 2


def fp8_weight_cache_bytes(model: ModelSpec, w: Workload, c: ParallelConfig, stage: int) -> float:
    """FP8 weight copies one GPU of ``stage`` keeps beside its BF16 weights: Transformer Engine quantizes
    each GEMM weight once per step and caches it across micro-batches when Megatron-Core passes
    ``is_first_microbatch`` (``transformer_engine/pytorch/module/linear.py`` at d0067d0:
    ``cache_name = "weight"``, kept in ``self._fp8_workspaces``; Megatron-Core
    ``extensions/transformer_engine.py`` at d98e8a64 passes it unless ``--disable-parameter-transpose-cache``).
    With ``--fp8-param-gather`` the weights *are* FP8 parameters (row-wise + transposed, as many bytes as BF16):
    no copy. The GEMM weights are the layers' attention, MLP and expert matrices (not the embedding,
    the LM head, norms or the router), sharded under ZeRO-3 as the weights are.

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("llama3-70b")
    >>> fp8_weight_cache_bytes(m, Workload(global_batch=8, seq_len=4096, dtype="bf16"), ParallelConfig(tp=8), 0)
    0.0
    """
    if w.dtype != "fp8" or c.framework != "megatron" or c.fp8_param_gather:
        return 0.0
    n_dense, n_moe = layer_counts(model, c, stage)
    dense = n_dense * (model.attn_params + model.mlp_params(model.ffn_hidden)) / c.tp
    dense += n_moe * (model.attn_params + model.shared_experts * model.expert_params) / c.tp
    expert = n_moe * layer_params(model, c, True)[1] if n_moe else 0.0
    if frameworks.of(c).shard_weights:  # as model_state_bytes shards the weights
        dense, expert = dense / (c.dp * c.cp), expert / expert_dp(c)
    return FP8_WEIGHT_COPY_BYTES * (dense + expert)


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
    BF16 gradient (2 B), so 4 + 2 B in backward, the BF16 logits (2 B) + the FP32 output (4 B) in forward."""
    if c.loss_impl == "fp32":
        return 16 if c.tp > 1 else 12
    return 6


def stage_memory(model: ModelSpec, w: Workload, c: ParallelConfig, stage: int) -> StageMemory:
    """Peak memory of one GPU of ``stage`` during a training step."""
    weights, grads, optim = model_state_bytes(model, c, stage)
    weights += fp8_weight_cache_bytes(model, w, c, stage)
    m = micro_batches(w, c)
    per_chunk = chunk_counts(model, c, stage)
    n_dense, n_moe = map(sum, zip(*per_chunk))
    act = {
        False: activation_bytes_per_layer(model, w, c, False) if n_dense else 0.0,
        True: activation_bytes_per_layer(model, w, c, True) if n_moe else 0.0,
    }
    tokens = c.mb * w.seq_len / c.cp
    layer_input = 2 * model.hidden * tokens / (c.tp if c.sp_on else 1)
    sac = {
        moe: op_sac_bytes_per_layer(model, w, c, moe) if c.recompute == "op_sac" and n else 0.0
        for moe, n in ((False, n_dense), (True, n_moe))
    }
    k = n_dense + n_moe if c.recompute_layers is None else min(n_dense + n_moe, c.recompute_layers)
    stored, before = [], 0  # bytes each chunk stores per micro-batch; layers of the earlier chunks
    for nd, nm in per_chunk:
        if c.recompute == "full":  # the stage's first k layers (in chunk order) keep only their input
            kd = min(nd, max(0, k - before))
            km = min(nm, max(0, k - before - kd))
            stored.append((kd + km) * layer_input + (nd - kd) * act[False] + (nm - km) * act[True])
        elif c.recompute == "op_sac":  # saved op outputs
            stored.append(nd * sac[False] + nm * sac[True])
        else:
            stored.append(nd * act[False] + nm * act[True])
            if c.pp_free_stage_inputs and c.pp > 1 and nd + nm:
                # the chunk's received input, its first layer's norm input, freed after the chunk's forward
                # (ParallelConfig.pp_free_stage_inputs: Llama 3, arXiv 2407.21783 section 3.3.2)
                stored[-1] -= layer_input
        before += nd + nm
    # one layer re-materialised during its backward
    working = max(act[False], act[True]) if c.recompute in ("full", "op_sac") else 0.0
    if c.recompute not in ("full", "op_sac") and c.recomputed_modules - {"core_attn"}:
        plain = replace(c, recompute_modules=None)  # one layer's recomputed modules re-materialised during its backward
        working = max(
            activation_bytes_per_layer(model, w, plain, moe) - act[moe]
            for moe, n in ((False, n_dense), (True, n_moe))
            if n
        )
    # the peak over the schedule of the micro-batches each chunk holds (costmodel.spec.stages.in_flight_profile)
    profile = in_flight_profile(c.pp, m, c.vp, stage)
    acts = max(sum(k_c * b for k_c, b in zip(held, stored)) for held in profile) + working
    if c.activation_offload_layers:  # pp = 1, no recompute: TE keeps at most L - N layers' activations on the GPU,
        # so N layers' leave it (costmodel.physics.mechanics.act_offload; of the smaller layer kind where dense and MoE mix)
        acts -= c.activation_offload_layers * min(offloaded_layer_bytes(model, w, c))
    if stage == 0:  # embedding output and its dropout mask, per micro-batch in flight (of an average chunk, as
        # this model always charged it; the first chunk holds up to 2p, in_flight_profile); no mask at p = 0
        emb = 2 + _dropout.mask_bytes(model.hidden_dropout, w.mode == "train")
        acts += emb * model.hidden * tokens / (c.tp if c.sp_on else 1) * max(map(sum, profile)) / c.vp
    if stage == c.pp - 1 and w.mode == "train":  # the loss of one micro-batch (:func:`loss_bytes_per_logit`),
        # once per MTP depth too: process_mtp_loss keeps each depth's loss graph until the backward
        acts += mtp.heads_on(model, c, stage) * (
            loss_bytes_per_logit(c) * tokens * model.vocab / c.tp + lm_head_saved_bytes(model, c) * tokens
        )
    buffers = gathered_weight_bytes(model, c, stage)
    return StageMemory(stage, weights, grads, optim, acts, buffers, reserved_bytes(c, acts))


def offloaded_layer_bytes(model: ModelSpec, w: Workload, c: ParallelConfig) -> tuple[float, ...]:
    """Saved activations of one layer of each kind (dense, MoE) the stage holds: where they mix, the memory
    model frees the smaller per offloaded layer and the time model copies the larger (both conservative)."""
    per_chunk = chunk_counts(model, c, 0)
    n_dense, n_moe = map(sum, zip(*per_chunk))
    return tuple(activation_bytes_per_layer(model, w, c, moe) for moe, n in ((False, n_dense), (True, n_moe)) if n)


def memory_per_stage(model: ModelSpec, w: Workload, c: ParallelConfig) -> list[StageMemory]:
    return [stage_memory(model, w, c, s) for s in range(c.pp)]
