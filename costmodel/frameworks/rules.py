"""Frameworks are real: what each training framework can run and what its ZeRO stages communicate.

A plan is run by a framework (``ParallelConfig.framework``): Megatron-Core, DeepSpeed or PyTorch
FSDP2 as torchtitan drives it. :func:`semantics` says, for a framework and ZeRO stage, which
data-parallel collectives run per micro-batch and which once per step, and which model state is
sharded; the cost model (:mod:`costmodel.engines.analytic`, :mod:`costmodel.physics.memory.stage_memory`,
:mod:`costmodel.engines.graph.builders`) charges exactly that. :func:`check` raises :class:`SpecError`
naming the rule a plan breaks for its framework; the search (:mod:`search.candidates`) only
enumerates what :func:`zero_stages` / :func:`allows` accept, and ``--emit`` prints the same plan.

Megatron-Core (``megatron/training/arguments.py``, ``megatron/core/distributed``):

* zero=0: DDP, FP32 gradient buffer all-reduced once per step in buckets (``--overlap-grad-reduce``).
* zero=1: distributed optimizer (``--use-distributed-optimizer``): the full FP32 gradient buffer
  is kept, reduce-scattered once per step, parameters all-gathered after the step
  (``--overlap-param-gather``); only optimizer state (FP32 master + Adam) is sharded.
* zero=2: none. Megatron's distributed optimizer is ZeRO-1; the ZeRO-2-like Megatron FSDP
  ``optim_grads`` strategy is not offered by this planner (refused, see :func:`check`).
* zero=3: Megatron FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy
  optim_grads_params``): parameters gathered per module in forward and again in backward, and
  gradients reduce-scattered after *every* backward (``megatron_fsdp.py``, ``_post_backward``:
  ``grad_reduce_every_bprop`` for ``optim_grads``/``optim_grads_params``). ``arguments.py``
  refuses PP only with ``--use-torch-fsdp2``, not with Megatron FSDP.

DeepSpeed (``deepspeed/runtime/zero/stage_1_and_2.py``, ``stage3.py``, ``pipe/engine.py``):

* zero=1: gradients reduced once at the accumulation boundary, updated partitions all-gathered.
* zero=2: gradients reduce-scattered in buckets *every* micro-batch during backward
  (``reduce_ipg_grads`` from the backward hooks, ``overlap_comm``), only the shard kept; the
  updated partitions all-gathered after the step.
* zero=3: parameters gathered per module (prefetched) in forward and backward, gradients
  reduce-scattered per micro-batch.
* The pipeline engine (``PipelineEngine.__init__``: "ZeRO-2 and ZeRO-3 are incompatible with
  pipeline parallelism") needs zero <= 1 with pp > 1; it has no interleaved schedule (vp = 1),
  no ring context parallelism and no TP communication overlap (chunks = 1).

FSDP2 / torchtitan (``torchtitan/models/llama3/infra/parallelize.py``, ``apply_fsdp``):

* zero=0: replicated data parallelism (``data_parallel_replicate_degree``, DDP).
* zero=1: none (FSDP2 shards parameters; there is no optimizer-only sharding).
* zero=2: ``reshard_after_forward=False``: parameters gathered once per micro-batch in forward
  and kept unsharded through backward (a full copy of the stage's weights), gradients
  reduce-scattered per micro-batch; under a pipeline schedule (pp > 1) gathered and
  reduce-scattered once per step (:data:`_FSDP_NO_RESHARD_PP`), or per micro-batch as without one
  when the plan states ``pp_grad_reduce='microbatch'`` (FSDP1-style ZeRO-2 under PP, as Meta's
  Llama 3 framework runs: ``ParallelConfig.pp_grad_reduce``).
* zero=3: ``reshard_after_forward=True``: gathered in forward and again in backward,
  reduce-scattered per micro-batch.
* TP is always sequence-parallel in torchtitan (norms as ``SequenceParallel``); chunked TP
  overlap exists only as async TP (``enable_async_tensor_parallel``: PyTorch's fused
  all-gather / reduce-scatter matmuls, one step per TP rank, so ``chunks = tp``); PP with FSDP2
  is allowed.

>>> semantics("deepspeed", 2).reduce_per_microbatch, semantics("megatron", 1).reduce_per_microbatch
(True, False)
>>> check_fields("deepspeed", zero=2, pp=4)
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: zero=2: must be 0 or 1 with pp=4 under framework=deepspeed (DeepSpeed's pipeline engine accepts ZeRO <= 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.spec.errors import SpecError
from costmodel.frameworks.degrees import check_degrees
from costmodel.spec.plan_checks import FRAMEWORKS, DEFAULT_FRAMEWORK


@dataclass(frozen=True)
class Semantics:
    """What a framework's ZeRO stage communicates and shards (per data-parallel group).

    Attributes
    ----------
    gather_forward, gather_backward : each layer's parameters all-gathered per micro-batch in
        forward / again in backward (FSDP, ZeRO-3).
    reduce_per_microbatch : gradients reduce-scattered during every micro-batch's backward.
    step_grad : the once-per-step gradient collective after the last backward
        (``"allreduce"``, ``"reducescatter"`` or ``None``).
    step_param_gather : updated parameters all-gathered after the optimizer step.
    shard_weights, shard_grads, shard_optimizer : model state sharded over data parallelism.
    unsharded_weights : gathered BF16 weights kept: ``"two_layers"`` (current and prefetched
        layer), ``"stage"`` (all of the stage's layers, kept from forward to backward) or ``None``.
    """

    gather_forward: bool = False
    gather_backward: bool = False
    reduce_per_microbatch: bool = False
    step_grad: str | None = "allreduce"
    step_param_gather: bool = False
    shard_weights: bool = False
    shard_grads: bool = False
    shard_optimizer: bool = False
    unsharded_weights: str | None = None

    @property
    def per_microbatch(self) -> bool:
        """Any DP collective inside each micro-batch (charged in the layer ledger)."""
        return self.gather_forward or self.gather_backward or self.reduce_per_microbatch


_DDP = Semantics()
_DISTOPT = Semantics(step_grad="reducescatter", step_param_gather=True, shard_optimizer=True)
_ZERO2 = Semantics(
    reduce_per_microbatch=True, step_grad=None, step_param_gather=True, shard_grads=True, shard_optimizer=True
)
_FSDP_NO_RESHARD = Semantics(
    gather_forward=True,
    reduce_per_microbatch=True,
    step_grad=None,
    shard_weights=True,
    shard_grads=True,
    shard_optimizer=True,
    unsharded_weights="stage",
)
_FSDP = Semantics(
    gather_forward=True,
    gather_backward=True,
    reduce_per_microbatch=True,
    step_grad=None,
    shard_weights=True,
    shard_grads=True,
    shard_optimizer=True,
    unsharded_weights="two_layers",
)

# FSDP2 without resharding inside a pipeline schedule: torch.distributed.pipelining runs every
# micro-batch but the last with gradient sync and reshard-after-backward off
# (``stage.py``, ``backward_maybe_with_nosync``: ``set_requires_gradient_sync(False)``,
# ``set_reshard_after_backward(False)``), so parameters are gathered once per step and gradients
# reduce-scattered once, after the last backward (Llama 3 paper, section 3.3.2: no resharding
# after forward, no per-micro-batch gathers); the stage's weights and gradients stay unsharded.
_FSDP_NO_RESHARD_PP = Semantics(step_grad="reducescatter", step_param_gather=True, shard_optimizer=True)

_SEMANTICS = {
    "megatron": {0: _DDP, 1: _DISTOPT, 3: _FSDP},
    "deepspeed": {0: _DDP, 1: _DISTOPT, 2: _ZERO2, 3: _FSDP},
    "fsdp2": {0: _DDP, 2: _FSDP_NO_RESHARD, 3: _FSDP},
}

#: why a ZeRO stage does not exist in a framework
_NO_STAGE = {
    ("megatron", 2): "0, 1 or 3 under framework=megatron (Megatron-Core has no ZeRO-2: its distributed optimizer, "
    "zero=1, keeps a full FP32 gradient buffer; zero=3 is Megatron FSDP; DeepSpeed runs ZeRO-2)",
    ("fsdp2", 1): "0, 2 or 3 under framework=fsdp2 (FSDP2 has no optimizer-only sharding; zero=2 is "
    "reshard_after_forward=False)",
}


def _framework(name: str) -> str:
    if name not in FRAMEWORKS:
        raise SpecError("framework", name, f"one of {', '.join(FRAMEWORKS)}")
    return name


#: the recomputation each framework states exactly, so the search offers only these: Megatron-LM
#: ``--recompute-granularity selective|full``; DeepSpeed (Megatron-DeepSpeed's same flags);
#: torchtitan's ``[activation_checkpoint] mode = "selective"`` with ``selective_ac_option = "op"``
#: is per-op (``op_sac``) and ``mode = "full"`` every layer: it has no attention-only selective mode
_RECOMPUTE = {
    "megatron": ("none", "selective", "full"),
    "deepspeed": ("none", "selective", "full"),
    "fsdp2": ("none", "op_sac", "full"),
}


def recompute_kinds(framework: str) -> tuple[str, ...]:
    """The recomputation kinds the search offers under ``framework`` (what its flags state exactly)."""
    return _RECOMPUTE[_framework(framework)]


def refuse_unsearchable_recompute(framework: str, recompute: str) -> None:
    """Raise :class:`SpecError` for a pinned recomputation the search cannot offer under ``framework``."""
    kinds = recompute_kinds(framework)
    if recompute not in kinds:
        why = (
            "torchtitan has no attention-only selective recompute; its selective_ac_option = 'op' is op_sac"
            if framework == "fsdp2"
            else "per-op selective checkpointing is torchtitan's, on FSDP2: framework=fsdp2"
        )
        raise SpecError(
            "recompute", recompute, f"{', '.join(kinds[:-1])} or {kinds[-1]} under framework={framework} ({why})"
        )


#: DP bucket sizes (MB) a framework fixes rather than exposes: torchtitan wraps replicated data
#: parallelism as ``replicate(model, device_mesh=dp_mesh, bucket_cap_mb=100)``
#: (``torchtitan/models/llama3/infra/parallelize.py``, ``apply_ddp``); FSDP2 issues its collectives
#: per ``fully_shard`` unit (one transformer block), which no configuration key changes
FIXED_BUCKET_MB = {"fsdp2": 100.0}


def zero_stages(framework: str, pp: int = 1) -> tuple[int, ...]:
    """ZeRO stages ``framework`` runs with ``pp`` pipeline stages."""
    stages = tuple(sorted(_SEMANTICS[_framework(framework)]))
    if framework == "deepspeed" and pp > 1:  # pipe/engine.py: ZeRO-2/3 incompatible with pipeline parallelism
        stages = tuple(z for z in stages if z <= 1)
    return stages


def semantics(framework: str, zero: int) -> Semantics:
    """The :class:`Semantics` of ``zero`` under ``framework`` (a refused stage raises)."""
    s = _SEMANTICS[_framework(framework)].get(zero)
    if s is None:
        raise SpecError("zero", zero, _NO_STAGE.get((framework, zero), f"one of {zero_stages(framework)}"))
    return s


def check_fields(
    framework: str,
    *,
    zero: int = 0,
    pp: int = 1,
    vp: int = 1,
    tp: int = 1,
    cp: int = 1,
    sp: bool = False,
    chunks: int = 1,
    recompute: str = "none",
    cp_impl: str = "ring",
) -> None:
    """Raise :class:`SpecError` naming the first rule the settings break under ``framework`` (one part of a plan; the
    degrees together: :func:`check_degrees`)."""
    semantics(framework, zero)
    if cp_impl == "torch" and framework != "fsdp2":
        # PyTorch's context_parallel is torchtitan's (torchtitan/distributed/utils.py, create_context_parallel_ctx);
        # Megatron-Core's CP is Transformer Engine's (cp_comm_type p2p/a2a/allgather), DeepSpeed has none
        raise SpecError(
            "cp_impl", cp_impl, f"ring under framework={framework} (PyTorch's context_parallel is torchtitan's: fsdp2)"
        )
    if recompute == "op_sac" and framework != "fsdp2":
        raise SpecError(
            "recompute",
            recompute,
            f"none, selective or full under framework={framework} (per-op "
            "selective checkpointing is torchtitan's, on FSDP2: framework=fsdp2)",
        )
    if framework == "deepspeed":
        if pp > 1 and zero >= 2:
            raise SpecError(
                "zero",
                zero,
                f"0 or 1 with pp={pp} under framework=deepspeed (DeepSpeed's pipeline engine accepts ZeRO <= 1)",
            )
        if vp > 1:
            raise SpecError("vp", vp, "1 under framework=deepspeed (its pipeline engine has no interleaved schedule)")
        if cp > 1:
            raise SpecError(
                "cp",
                cp,
                "1 under framework=deepspeed (no ring-attention context parallelism; "
                "Ulysses sequence parallelism is a different scheme)",
            )
        if chunks > 1:
            raise SpecError("chunks", chunks, "1 under framework=deepspeed (no chunked TP/EP communication overlap)")
    if framework == "fsdp2":
        if tp > 1 and not sp:
            raise SpecError("sp", sp, "on with tp > 1 under framework=fsdp2 (torchtitan's TP is sequence-parallel)")
        if chunks > 1 and tp == 1:
            raise SpecError("chunks", chunks, "1 under framework=fsdp2 unless tp > 1 (chunked overlap is async TP)")
        if chunks > 1 and chunks != tp:  # torch's fused all-gather/reduce-scatter matmuls: one step per TP rank
            raise SpecError(
                "chunks",
                chunks,
                f"1 or tp={tp} under framework=fsdp2 (async TP decomposes each "
                "AllGather/ReduceScatter into one step per TP rank)",
            )


def userbuffers(framework: str, device) -> bool:
    """Whether ``framework`` chunks TP communication with Transformer Engine's userbuffers on
    ``device``: Megatron-Core's ``--tp-comm-overlap`` on a GPU whose intra-node collectives run on
    its SMs (NVIDIA). On hardware with collective DMA engines of their own (``sg2262-like``) the
    chunk count stays a co-design variable of the model."""
    return framework == "megatron" and device.engines_for("intra").uses_compute


def check_userbuffers_chunks(*, tp: int, sp: bool, chunks: int) -> None:
    """Raise :class:`SpecError` unless Megatron-Core with Transformer Engine userbuffers runs
    ``chunks`` exactly. TE's ``initialize_ub`` overlaps the forward AllGathers (``qkv_fprop``,
    ``fc1_fprop``) and the backward ones (``proj_dgrad``, ``fc2_dgrad``) by ring exchange, one step
    per TP rank, and forbids the ``pipeline`` method for an AllGather; the forward ReduceScatters
    (``proj_fprop``, ``fc2_fprop``) pipeline in ``num_splits`` pieces (4 unless
    ``--tp-comm-overlap-cfg`` sets it: :func:`planner.emit.megatron_args` does, to ``tp``).
    Megatron-LM asserts sequence parallelism with ``--tp-comm-overlap``, and has no chunked
    collective without TP (no chunked EP combine)."""
    if chunks <= 1:
        return
    if tp == 1:
        raise SpecError(
            "chunks",
            chunks,
            "1 with tp=1 under framework=megatron (its chunked overlap is TP "
            "communication overlap; it has no chunked EP combine)",
        )
    if not sp:
        raise SpecError(
            "chunks",
            chunks,
            "1 without sequence parallelism under framework=megatron (--tp-comm-overlap needs --sequence-parallel)",
        )
    if chunks != tp:
        raise SpecError(
            "chunks",
            chunks,
            f"1 or tp={tp} under framework=megatron (Transformer Engine's "
            "userbuffers overlap each AllGather by ring exchange, one step per TP rank)",
        )


def moe_needs_sp(framework: str, *, moe: bool, tp: int) -> bool:
    """Whether ``framework`` trains an MoE model with ``tp`` only with sequence parallelism:
    Megatron-Core's ``MoELayer.forward`` raises in training when the attention TP group is larger
    than one and ``sequence_parallel`` is off (``megatron/core/transformer/moe/moe_layer.py`` at
    d98e8a64)."""
    return framework == "megatron" and moe and tp > 1


def check_moe_sequence_parallel(framework: str, *, moe: bool, tp: int, sp: bool) -> None:
    """Raise :class:`SpecError` for a plan :func:`moe_needs_sp` rules out."""
    if moe_needs_sp(framework, moe=moe, tp=tp) and not sp:
        raise SpecError(
            "sp",
            False,
            f"on for an MoE model with tp={tp} under framework=megatron (Megatron-Core's "
            "MoE layer refuses to train with TP but without sequence parallelism)",
        )


def chunk_options(framework: str, tp: int, options, device=None) -> list[int]:
    """The chunk counts to consider from ``options`` under ``framework`` on ``device``: under FSDP2
    chunked overlap is async TP and under Megatron-Core on NVIDIA GPUs it is Transformer Engine's
    userbuffers (:func:`check_userbuffers_chunks`), both with one count, ``tp`` (offered when
    ``options`` has any count > 1)."""
    opts = sorted(set(options) | {1})
    if framework == "fsdp2" or (device is not None and userbuffers(framework, device)):
        return [1, tp] if tp > 1 and opts[-1] > 1 else [1]
    return opts


def allows(framework: str, var: str, value, *, pp: int = 1, tp: int = 1, cp: int = 1, dp: int = 1, ep: int = 1) -> bool:
    """Whether the search may consider ``var = value`` under ``framework`` (shape ``pp``, ``tp``, ``cp``, ``dp``,
    ``ep``)."""
    try:
        if var == "zero":
            # the ZeRO rule only: the search's shapes already hold the data-parallel one (search.candidates.shapes)
            check_degrees(framework, tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, zero=value, bf16_model=True)
            return value in zero_stages(framework, pp)
        if var == "sp":
            check_fields(framework, tp=tp, sp=value)
        elif var == "chunks":
            check_fields(framework, tp=tp, sp=True, chunks=value)
        elif var in ("vp", "cp"):
            check_fields(framework, **{var: value})
    except SpecError:
        return False
    return True


def check(c) -> None:
    """Raise :class:`SpecError` if plan ``c`` (a :class:`~costmodel.spec.plan.ParallelConfig`) is
    not runnable by ``c.framework``."""
    check_fields(
        c.framework,
        zero=c.zero,
        pp=c.pp,
        vp=c.vp,
        tp=c.tp,
        cp=c.cp,
        sp=c.sp_on,
        chunks=c.chunks,
        recompute=c.recompute,
        cp_impl=c.cp_impl if c.cp > 1 else "ring",
    )
    check_degrees(
        c.framework, tp=c.tp, pp=c.pp, cp=c.cp, dp=c.dp, ep=c.ep, zero=c.zero, bf16_model=c.optimizer_dtype == "bf16"
    )


def check_runnable(c, device) -> None:
    """:func:`check`, and on ``device`` the chunk counts the framework's chunked overlap runs
    (Megatron-Core's Transformer Engine userbuffers: :func:`check_userbuffers_chunks`), the rule
    the search's candidates (:func:`chunk_options`) and ``--emit`` hold every plan to."""
    check(c)
    if userbuffers(c.framework, device):
        check_userbuffers_chunks(tp=c.tp, sp=c.sp_on, chunks=c.chunks)


def lookup(framework: str, zero: int) -> Semantics:
    """The semantics charged for ``zero`` under ``framework``, or (a stage the framework lacks,
    met only by code that costs plans without validating them) the one DeepSpeed runs."""
    table = _SEMANTICS.get(framework, _SEMANTICS[DEFAULT_FRAMEWORK])
    return table.get(zero) or _SEMANTICS["deepspeed"][zero]


def of(c) -> Semantics:
    """The semantics plan ``c`` is charged (:func:`lookup` of its framework and ZeRO stage; FSDP2
    without resharding under a pipeline schedule syncs once per step, unless ``c.pp_grad_reduce`` is
    ``'microbatch'``: then it runs as without a pipeline, :data:`_FSDP_NO_RESHARD`, gathering each
    micro-batch's parameters in its forward and reduce-scattering its gradients in its backward)."""
    if c.framework == "fsdp2" and c.zero == 2 and c.pp > 1 and getattr(c, "pp_grad_reduce", "step") == "step":
        return _FSDP_NO_RESHARD_PP
    return lookup(c.framework, c.zero)


def required_zero(framework: str, optimizer_dtype: str = "fp32", optimizer_offload_fraction: float = 0.0) -> int | None:
    """The one ZeRO stage a plan with these optimizer options can run on, or None where they allow any: under
    Megatron-Core BF16 Adam state (NeMo's ``distributed_fused_adam``) and optimizer CPU offload (the
    distributed optimizer's ``HybridDeviceOptimizer``) are both ZeRO-1 (:class:`ParallelConfig` refuses other
    stages). What an unstated ``zero`` is filled with, before any search, where such an option is stated.

    >>> required_zero("megatron", "bf16"), required_zero("megatron", "fp32", 0.5), required_zero("fsdp2", "bf16")
    (1, 1, None)
    """
    if framework == "megatron" and (optimizer_dtype != "fp32" or optimizer_offload_fraction):
        return 1
    return None


def recipe_dispatcher(framework: str, cluster) -> str:
    """The MoE token dispatcher ``framework``'s own recipes run on ``cluster``, which a search tries first (the
    other dispatchers are timed on its answer and searched when faster: ``planner.api``). Megatron-Core on an NVLink
    domain wider than a node (GB200/GB300 NVL72): ``hybridep``, the flex dispatcher's HybridEP backend that every
    DeepSeek-V3 and Qwen3 GB200/GB300 performance config of Megatron-Bridge sets
    (``moe_flex_dispatcher_backend="hybridep"``, NVIDIA-NeMo/Megatron-Bridge@7af9601c9 (v0.2.0)
    ``scripts/performance/configs/``; their B200 configs keep the all-to-all). Elsewhere ``alltoall``."""
    if framework == "megatron" and cluster.domain > cluster.gpus_per_node:
        return "hybridep"
    return "alltoall"
