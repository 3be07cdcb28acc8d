"""Memory per GPU on each pipeline stage: weights, gradients, optimizer state, activations.

Model state (Rajbhandari et al. 2020, "ZeRO", section 3.1, with Megatron-LM's FP32 gradient
buffer): BF16 weights 2 B, FP32 main gradients 4 B, Adam FP32 master/m/v 12 B per parameter.
ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also the weights, over
the data-parallel ranks (dense parameters over ``dp * cp``, experts over the expert-data-parallel ranks).

Activations per layer, the output head and the loss: :mod:`costmodel.physics.memory.activations`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.physics.kernels import dropout as _dropout, mtp
from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.spec.stages import in_flight_profile
from costmodel.spec.hardware import DeviceSpec
from costmodel.spec.specs import ModelSpec
from costmodel.spec.precision import bytes_per_element
from costmodel.spec.workload import Workload
from costmodel.physics.memory.stage_contents import chunk_counts, expert_dp, layer_counts, layer_params, stage_params
from costmodel.physics.memory.activations import (
    activation_bytes_per_layer,
    lm_head_saved_bytes,
    offloaded_group_bytes,
    loss_bytes_per_logit,
    op_sac_bytes_per_layer,
)
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


def reserved_bytes(c: ParallelConfig, activations_bytes=0.0, fragmentation: float = FRAGMENTATION):
    """Memory outside the model state and activations on one GPU: CUDA context, cuBLAS
    workspaces, NCCL buffers of every communicator the plan creates, and allocator
    fragmentation (``fragmentation`` of the activations, :data:`FRAGMENTATION` unless the search
    tests a pinned plan without the assumed allowance: ``costmodel.physics.memory.verdict``).
    Works on numpy arrays of activations.

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
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + nccl + allowance_bytes(activations_bytes, fragmentation)


def allowance_bytes(activations_bytes, fragmentation: float = FRAGMENTATION):
    """The allocator fragmentation allowance :func:`reserved_bytes` charges on a stage's ``activations_bytes``:
    ``fragmentation`` of them (:data:`FRAGMENTATION`, an assumption)."""
    return fragmentation * activations_bytes


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


#: bytes per GEMM weight of Transformer Engine's cached FP8 copy on Hopper: the row-wise data for the
#: forward GEMM and the column-wise (transposed) data for the data-gradient GEMM, one byte each
FP8_WEIGHT_COPY_BYTES = 2
#: per-tensor FP8 recipes (one scale per tensor): the ones whose column-wise copy is a transpose a Blackwell GEMM
#: does without (:attr:`costmodel.spec.hardware.DeviceSpec.fp8_transpose`)
PER_TENSOR_FP8 = ("fp8", "fp8-tensorwise")


def fp8_weight_cache_bytes(
    model: ModelSpec, w: Workload, c: ParallelConfig, stage: int, device: DeviceSpec | None = None
) -> float:
    """FP8 weight bytes one GPU of ``stage`` keeps beyond the BF16 weights :func:`model_state_bytes` charges.

    Transformer Engine quantizes each GEMM weight once per step and caches it across micro-batches when
    Megatron-Core passes ``is_first_microbatch`` (``transformer_engine/pytorch/module/linear.py`` at d0067d0:
    ``cache_name = "weight"``, kept in ``self._fp8_workspaces``; Megatron-Core ``extensions/transformer_engine.py``
    at d98e8a64 passes it unless ``--disable-parameter-transpose-cache``): :func:`weight_copy_bytes` per weight.
    With ``--fp8-param-gather`` the weights *are* FP8 parameters, no copy: row-wise + transposed, as many bytes as
    the BF16 weights charged; on a device without :attr:`~costmodel.spec.hardware.DeviceSpec.fp8_transpose` a
    per-tensor FP8 parameter is its row-wise byte alone (``Float8Quantizer::create_tensor``, TE@70f536662), one
    byte less per GEMM weight (negative). The GEMM weights are the layers' attention, MLP and expert matrices (not
    the embedding, the LM head, norms or the router), sharded under ZeRO-3 as the weights are. ``device`` None:
    a Hopper-class device.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> m = load_model("llama3-70b")
    >>> fp8_weight_cache_bytes(m, Workload(global_batch=8, seq_len=4096, dtype="bf16"), ParallelConfig(tp=8), 0)
    0.0
    >>> w, c = Workload(global_batch=8, seq_len=4096, dtype="fp8"), ParallelConfig(tp=8, pp=4, dp=2, zero=1)
    >>> hopper, blackwell = (fp8_weight_cache_bytes(m, w, c, 1, load_cluster(n).device) for n in ("h100-sxm", "b200"))
    >>> hopper == 2 * blackwell, fp8_weight_cache_bytes(m, w, replace(c, fp8_param_gather=True), 1)
    (True, 0.0)
    >>> fp8_weight_cache_bytes(m, w, replace(c, fp8_param_gather=True), 1, load_cluster("b200").device) == -blackwell
    True
    """
    if w.dtype != "fp8" or c.framework != "megatron":
        return 0.0
    no_transpose = device is not None and not device.fp8_transpose and w.recipe in PER_TENSOR_FP8
    if c.fp8_param_gather and not no_transpose:
        return 0.0
    n_dense, n_moe = layer_counts(model, c, stage)
    dense = n_dense * (model.attn_params + model.mlp_params(model.ffn_hidden)) / c.tp
    dense += n_moe * (model.attn_params + model.shared_experts * model.expert_params) / c.tp
    expert = n_moe * layer_params(model, c, True)[1] if n_moe else 0.0
    if frameworks.of(c).shard_weights:  # as model_state_bytes shards the weights
        dense, expert = dense / (c.dp * c.cp), expert / expert_dp(c)
    per = 1 - WEIGHT_BYTES if c.fp8_param_gather else weight_copy_bytes(w, device)
    return per * (dense + expert)


def weight_copy_bytes(w: Workload, device: DeviceSpec | None = None) -> float:
    """Bytes per GEMM weight of the quantized copy Transformer Engine caches for recipe ``w.recipe``: the
    row-wise and the column-wise copy with their scales (:func:`costmodel.spec.precision.bytes_per_element`):
    FP8 per-tensor :data:`FP8_WEIGHT_COPY_BYTES` (2; 1 on a device without
    :attr:`~costmodel.spec.hardware.DeviceSpec.fp8_transpose`, whose column-wise usage is the row-wise data),
    FP8 blockwise 2 x (1 + 4 / 128^2), MXFP8 2 x (1 + 1 / 32), NVFP4 2 x (0.5 + 1 / 16).

    >>> weight_copy_bytes(Workload(global_batch=8, seq_len=4096, dtype="mxfp8"))
    2.0625
    """
    if w.recipe in PER_TENSOR_FP8:
        return FP8_WEIGHT_COPY_BYTES if device is None or device.fp8_transpose else FP8_WEIGHT_COPY_BYTES / 2
    return bytes_per_element(w.recipe)


def stage_memory(
    model: ModelSpec, w: Workload, c: ParallelConfig, stage: int, device: DeviceSpec | None = None
) -> StageMemory:
    """Peak memory of one GPU of ``stage`` during a training step on ``device`` (None: a Hopper-class
    device; only its FP8 layouts matter, :func:`fp8_weight_cache_bytes`)."""
    weights, grads, optim = model_state_bytes(model, c, stage)
    weights += fp8_weight_cache_bytes(model, w, c, stage, device)
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
    profile = in_flight_profile(c.pp, m, c.vp, stage, int(c.ep_overlap))
    acts = max(sum(k_c * b for k_c, b in zip(held, stored)) for held in profile) + working
    if c.activation_offload_layers:  # pp = 1, no recompute: TE keeps at most L - N layers' activations on the GPU,
        # so N layers' leave it (costmodel.physics.mechanics.act_offload; of the smaller layer kind where dense and MoE mix)
        acts -= c.activation_offload_layers * min(offloaded_layer_bytes(model, w, c))
    if c.offload_modules and n_moe:  # the offloaded groups left the held layers (activation_bytes_per_layer) but the
        # last MoE layer's of the first chunk in backward: kept on the GPU so its reload cannot stall the compute
        # (PipelineOffloadManager.post_warmup_callback's margin, one group per name; fg_offload)
        acts += sum(offloaded_group_bytes(model, w, c, copied=False).values())
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


def memory_per_stage(
    model: ModelSpec, w: Workload, c: ParallelConfig, device: DeviceSpec | None = None
) -> list[StageMemory]:
    return [stage_memory(model, w, c, s, device) for s in range(c.pp)]
