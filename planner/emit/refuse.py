"""What an emitted format must reproduce: the evaluated plan, exactly, or a refusal naming why (one line).

Every format (:data:`FORMATS`) is the framework the plan was evaluated for; a plan that framework cannot
run, or whose settings the format has no words for, is refused before anything is printed.
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError

from .megatron import grad_dtype_args

FORMATS = ("megatron", "deepspeed", "fsdp2")


def refuse_unless_runnable(fmt: str, c: ParallelConfig) -> None:
    """Raise :class:`SpecError` (one line) unless ``fmt`` reproduces exactly the evaluated plan
    ``c``: the format must be the plan's framework (its semantics were charged) and the plan
    runnable by it (:func:`costmodel.frameworks.rules.check`)."""
    if fmt != c.framework:
        raise SpecError(
            "emit",
            fmt,
            f"{c.framework}, the framework the plan was evaluated for "
            f"(or evaluate it with --framework {fmt}: each framework's ZeRO runs differently)",
        )
    frameworks.check(c)
    if fmt == "deepspeed" and c.layers_per_stage is not None and len(set(c.layers_per_stage)) > 1:
        raise SpecError(
            "emit",
            fmt,
            f"megatron for an uneven stage split {c.layers_per_stage} ({fmt} is emitted with even stages only)",
        )
    _refuse_half_gradients(fmt, c.grad_dtype)
    if fmt == "megatron":  # its only chunked overlap: TE userbuffers, a ring exchange of tp steps
        frameworks.check_userbuffers_chunks(tp=c.tp, sp=c.sp_on, chunks=c.chunks)
        _refuse_unstated_kernels(c)
    if fmt == "fsdp2" and c.pp > 1 and c.pp_grad_reduce != "step":
        # torch.distributed.pipelining turns gradient sync off for every micro-batch but the last
        # (stage.py, backward_maybe_with_nosync); torchtitan has no setting that reduce-scatters per micro-batch
        raise SpecError(
            "pp_grad_reduce",
            c.pp_grad_reduce,
            "step for --emit fsdp2 with pp > 1 (torchtitan's "
            "pipeline schedule reduces gradients once per step; no torchtitan setting runs it per "
            "micro-batch)",
        )
    if fmt == "fsdp2" and c.cp > 1 and c.cp_impl != "torch":
        # torchtitan's CP is PyTorch's context_parallel (torchtitan/distributed/utils.py create_context_parallel_ctx
        # at v0.2.2); the ring exchange is Transformer Engine's (Megatron-Core, NeMo AutoModel's FSDP2)
        raise SpecError(
            "cp_impl",
            c.cp_impl,
            "torch for --emit fsdp2 (torchtitan's context parallelism is PyTorch's context_parallel; recommend and "
            "evaluate price it so with --emit fsdp2)",
        )
    if fmt == "fsdp2" and c.sp_on and c.sp_saved_inputs != "gathered":
        # torchtitan's TP is DTensor's: PrepareModuleInput all-gathers the block input and aten.mm saves it
        raise SpecError(
            "sp_saved_inputs",
            c.sp_saved_inputs,
            "gathered for --emit fsdp2 with sequence parallelism "
            "(torchtitan's DTensor TP saves the all-gathered GEMM inputs; it has no setting that keeps "
            "them sharded)",
        )
    if c.pp_free_stage_inputs and c.pp > 1:
        raise SpecError(
            "pp_free_stage_inputs",
            True,
            f"false for --emit {fmt} (no setting of it frees a pipeline "
            "stage's received input; Megatron-Core's deallocate_pipeline_outputs frees the outputs)",
        )
    if fmt in ("deepspeed", "fsdp2") and c.recompute_layers is not None:
        raise SpecError(
            "emit",
            fmt,
            f"megatron for full recompute of {c.recompute_layers} layers per stage "
            f"({fmt} recomputes every layer or none)",
        )
    if fmt == "fsdp2":
        _refuse_unstated_torchtitan(c)
    if fmt == "deepspeed":
        _refuse_unstated_deepspeed(c)


#: the one bucket torchtitan runs: its DDP's (``replicate(model, device_mesh=dp_mesh, bucket_cap_mb=100)``,
#: ``torchtitan/models/llama3/infra/parallelize.py`` ``apply_ddp`` at v0.2.2; no job-config key sets it), and what
#: the planner prices FSDP2's per-block reduction as (:data:`costmodel.frameworks.rules.FIXED_BUCKET_MB`)
TORCHTITAN_BUCKET_BYTES = frameworks.FIXED_BUCKET_MB["fsdp2"] * 1e6


def _refuse_unstated_torchtitan(c: ParallelConfig) -> None:
    """Plan fields torchtitan v0.2.2's job config has no words for, off the values it runs (``torchtitan/config/
    job_config.py`` and ``models/llama3/infra/parallelize.py`` at 73a0e69): before, the TOML was written without
    them and ran another plan (``benchmarks/emit_roundtrip_other.py`` reads every emitted TOML back)."""
    if not c.flash_attention:
        raise SpecError(
            "flash_attention",
            False,
            "true for --emit fsdp2 (torchtitan's attention is F.scaled_dot_product_attention's flash kernel or "
            "FlexAttention; no setting of it stores the s x s scores)",
        )
    if c.norms_fused != c.fused_elementwise:
        raise SpecError(
            "fused_norm",
            c.fused_norm,
            "unset for --emit fsdp2 (torchtitan v0.2.2 has no fused RMSNorm, removed in 37c4b818: its norms are "
            "compiled with the model or run eager with it)",
        )
    if c.chunks > 1 and not c.fused_elementwise:
        raise SpecError(
            "chunks",
            c.chunks,
            "1 for --emit fsdp2 with eager element-wise ops (async TP needs 'model' in compile.components, "
            "torchtitan maybe_enable_async_tp, and the compiled model runs fused element-wise kernels)",
        )
    if not c.fsdp_copies:
        raise SpecError(
            "fsdp_copies",
            False,
            "true for --emit fsdp2 (FSDP2's fully_shard copies each gathered parameter out of the all-gather "
            "buffer and each gradient into the reduce-scatter buffer; no torchtitan setting gathers into a flat "
            "buffer, as FSDP1 does)",
        )
    if c.recompute == "selective":
        raise SpecError(
            "recompute",
            c.recompute,
            "none, full or op_sac for --emit fsdp2 (torchtitan has no attention-only selective recompute; "
            'selective_ac_option = "op" is op_sac)',
        )
    if c.dp * c.cp > 1 and frameworks.of(c).step_grad and c.bucket_bytes != TORCHTITAN_BUCKET_BYTES:
        raise SpecError(
            "bucket_mb",
            c.bucket_bytes / 1e6,
            "100 for --emit fsdp2 where the gradients are reduced once per step, DDP at zero 0 or FSDP2 without "
            "resharding under a pipeline (torchtitan's DDP runs bucket_cap_mb=100, apply_ddp, and FSDP2 reduces per "
            "fully_shard block, priced as 100 MB buckets: costmodel.frameworks.rules.FIXED_BUCKET_MB; no job-config "
            "key sets another)",
        )
    if c.ep > 1 and c.ep_dispatcher not in ("alltoall", "deepep"):
        raise SpecError(
            "ep_dispatcher",
            c.ep_dispatcher,
            "alltoall or deepep for --emit fsdp2 (torchtitan's expert_parallel_comm_backend is 'standard' or 'deepep')",
        )


def _refuse_unstated_deepspeed(c: ParallelConfig) -> None:
    """Plan fields neither DeepSpeed's JSON nor the planner flags the training script's settings are read back
    from (``evaluate --deepspeed-config``) can state, off the values DeepSpeed runs."""
    if c.ep > 1 and c.ep_dispatcher != "alltoall":
        raise SpecError(
            "ep_dispatcher",
            c.ep_dispatcher,
            "alltoall for --emit deepspeed (deepspeed.moe dispatches tokens with one all-to-all, "
            "moe/sharded_moe.py _AllToAll; DeepSpeed has no DeepEP or HybridEP dispatcher)",
        )
    _refuse_eager_kernels(
        c,
        "true for --emit deepspeed (the element-wise kernels are the model code's; no DeepSpeed JSON key "
        "or planner flag states them eager)",
    )


def _refuse_eager_kernels(c: ParallelConfig, allowed: str) -> None:
    """Refuse a plan charged with eager element-wise kernels or unfused norms, naming the first (``allowed``: what
    the format runs, and why)."""
    if not c.fused_elementwise or not c.norms_fused:
        raise SpecError("fused_elementwise" if not c.fused_elementwise else "fused_norm", False, allowed)


def _refuse_unstated_kernels(c: ParallelConfig) -> None:
    """Plan fields a Megatron-LM line has no words for, off the values Megatron-Core runs: before, the line was
    written without them and ran another plan (``benchmarks/flags_roundtrip.py`` reads every emitted line back)."""
    # Transformer Engine's norms are fused kernels whatever the flags (TENorm, LayerNormLinear); the opt-outs
    # (--no-bias-swiglu-fusion, --no-rope-fusion, ...) unfuse some element-wise ops, not the set the plan charges
    _refuse_eager_kernels(
        c,
        "true for --emit megatron (Megatron-Core runs fused norms and element-wise kernels; "
        "no set of its flags runs them one PyTorch operator at a time, as the plan is charged)",
    )


def _refuse_half_gradients(fmt: str, grad_dtype: str) -> None:
    if fmt in ("deepspeed", "fsdp2") and grad_dtype != "fp32":
        raise SpecError(
            "emit",
            fmt,
            f"megatron for {grad_dtype} gradient reduction ({fmt} is emitted with FP32 gradient reduction only)",
        )


def refuse_unstated_gradients(fmt: str, grad_dtype: str, dtype: str) -> None:
    """Raise :class:`SpecError` unless ``fmt`` can state gradients reduced in ``grad_dtype`` for a
    ``dtype`` run: ``recommend --emit`` checks it before searching for plans that all have it."""
    _refuse_half_gradients(fmt, grad_dtype)
    if fmt == "megatron":
        grad_dtype_args(ParallelConfig(grad_dtype=grad_dtype), dtype)
