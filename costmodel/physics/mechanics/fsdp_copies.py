"""ZeRO-3 / FSDP per-layer groups and the memory-bound copies PyTorch FSDP2 runs around each layer's
collectives (:func:`zero3_groups`, :func:`fsdp2_copies_s`), and the seconds of those collectives
(:func:`zero3_collectives_s`)."""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.kernels.gemm import elementwise_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.units import WEIGHT_BYTES
from costmodel.physics.memory.stage_memory import grad_elem_bytes, param_gather_bytes
from costmodel.physics.mechanics.zero3_fetch import gather_pieces, reduce_pieces
from costmodel.physics.memory.stage_contents import expert_dp, layer_params
from costmodel.spec.specs import ClusterSpec, ModelSpec


def zero3_groups(model: ModelSpec, c: ParallelConfig, moe: bool) -> list[tuple[float, int, int]]:
    """``(parameters per GPU, group size, stride)`` a sharded layer gathers and reduce-scatters
    over: its dense part over the data-parallel group (DP x CP), its routed experts, already
    split over EP, only over the expert-data-parallel group that replicates them (FSDP/ZeRO-3
    shard each parameter over the ranks that hold a copy of it)."""
    dense, expert = layer_params(model, c, moe)
    groups = [(dense, c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp))]
    if expert > 0:
        groups.append((expert, expert_dp(c), group_stride("edp", c.tp, c.cp, c.dp, c.ep, c.expert_tp())))
    return [(params, size, stride) for params, size, stride in groups if size > 1 and params > 0]


def fsdp2_copies_s(model: ModelSpec, dev, c: ParallelConfig, moe: bool) -> tuple[float, float]:
    """(forward, backward) seconds of the memory-bound copies PyTorch FSDP2 runs on the compute
    stream around one layer's per-micro-batch collectives (``framework == "fsdp2"`` with
    ``c.fsdp_copies``; otherwise none).

    PyTorch ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``:
    ``foreach_all_gather_copy_out`` waits for each all-gather on the current (compute) stream and
    splits the flat gathered buffer back into the per-parameter unsharded tensors
    (``split_with_sizes_copy``: every gathered BF16 byte read and written once); ``foreach_reduce``
    copies the unsharded BF16 gradients into the flat reduce-scatter input in the reduce dtype
    (``foreach_reduce_scatter_copy_in`` / ``torch._chunk_cat``, in ``c.grad_dtype``, FP32 by default) on the
    current stream before the reduce-scatter stream waits for it. The all-gather copy-in (the
    local shard only, on its own ``all_gather_copy_in_stream``) and the shard-sized gradient
    divide/accumulate on the reduce-scatter stream are not on the compute stream and are not
    charged. FSDP1 (``FlatParameter``), Megatron FSDP and DeepSpeed ZeRO-3 gather into flat
    buffers whose views are the parameters: no copy-out (``fsdp_copies`` False). One copy per
    gather and per reduce the framework issues per micro-batch
    (:func:`costmodel.frameworks.rules.semantics`); the once-per-step gathers of FSDP2 under a pipeline
    schedule are not charged. Both engines charge it as compute (:func:`layer_timing`, the op
    graph's ``zero.copy.*`` node), never replayed by recompute (FSDP2's hooks skip the recomputed
    forward: ``_pre_forward`` returns early in ``TrainingState.PRE_BACKWARD``).
    """
    if not (c.fsdp_copies and c.framework == "fsdp2"):
        return 0.0, 0.0
    sem = frameworks.of(c)
    if not sem.per_microbatch:
        return 0.0, 0.0
    fwd = bwd = 0.0
    for params, _size, _stride in zero3_groups(model, c, moe):
        copy_out = elementwise_time_s(2 * WEIGHT_BYTES * params, dev)
        if sem.gather_forward:
            fwd += copy_out
        if sem.gather_backward:
            bwd += copy_out
        if sem.reduce_per_microbatch:
            bwd += elementwise_time_s((WEIGHT_BYTES + grad_elem_bytes(c)) * params, dev)
    return fwd, bwd


def zero3_collectives_s(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, moe: bool, zero) -> tuple:
    """``(all-gather, reduce-scatter)`` seconds of one sharded layer's ZeRO-3 / FSDP collectives over its groups
    (:func:`zero3_groups`) on the ``zero`` engines: the pieces of :func:`~costmodel.physics.mechanics.zero3_fetch.gather_pieces`
    and :func:`~costmodel.physics.mechanics.zero3_fetch.reduce_pieces` of the gathered parameter and gradient bytes."""
    t_ag = t_rs = 0.0
    # DeepSpeed: one all-gather per module, reduce-scatters per reduce bucket (costmodel.physics.mechanics.zero3_fetch)
    gathers, reduces = gather_pieces(model, c, moe), reduce_pieces(model, c, moe)
    for i, (_params, size, stride) in enumerate(zero3_groups(model, c, moe)):
        for p in gathers[i]:
            t_ag += collective_time_s("allgather", p * param_gather_bytes(c), size, stride, cluster, engines=zero)
        for p in reduces[i]:
            t_rs += collective_time_s("reducescatter", p * grad_elem_bytes(c), size, stride, cluster, engines=zero)
    return t_ag, t_rs
