"""A plan as framework settings: Megatron-LM / Megatron-Core arguments, or a DeepSpeed config.

Argument names are those of Megatron-LM's ``megatron/training/arguments.py`` (``_add_distributed_args``,
``_add_training_args``, ``_add_moe_args``, ``_add_transformer_engine_args``) and of DeepSpeed's
configuration JSON (``docs/_pages/config-json.md``, ``deepspeed/runtime/zero/config.py``);
``tests/test_emit.py`` checks every emitted name against those documented lists.

Units: both frameworks size buckets in *elements*, not bytes (Megatron-Core
``DistributedDataParallelConfig.bucket_size``: "maximum number of parameters in each bucket";
DeepSpeed ``reduce_bucket_size``: "number of elements reduced/allreduced at a time"). The plan's
bucket is bytes of gradients (:func:`costmodel.physics.memory.stage_memory.grad_elem_bytes` per element, FP32 by default).

>>> from costmodel.spec.plan import ParallelConfig
>>> c = ParallelConfig(tp=8, pp=4, dp=2, mb=1, vp=2, sp=True, zero=1, chunks=8, recompute="selective",
...                    layers_per_stage=(22, 26, 26, 22))
>>> print(megatron_text(c, global_batch=64, layers=96))  # doctest: +NORMALIZE_WHITESPACE
--tensor-model-parallel-size 8 \\
--pipeline-model-parallel-size 4 \\
--context-parallel-size 1 \\
--micro-batch-size 1 \\
--global-batch-size 64 \\
--num-virtual-stages-per-pipeline-rank 2 \\
--decoder-first-pipeline-num-layers 22 \\
--decoder-last-pipeline-num-layers 22 \\
--sequence-parallel \\
--tp-comm-overlap \\
--tp-comm-overlap-cfg tp_comm_overlap.yaml \\
--recompute-granularity selective \\
--use-distributed-optimizer \\
--overlap-grad-reduce \\
--overlap-param-gather \\
--ddp-bucket-size 10000000 \\
--bf16
>>> deepspeed_config(ParallelConfig(tp=8, pp=4, dp=2, zero=1, framework="deepspeed"), global_batch=64)["zero_optimization"]["stage"]
1
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.spec.errors import SpecError
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.spec.layout import Layout, format_layout, from_split
from costmodel.spec.stages import megatron_split
from costmodel.spec.workload import Workload

FORMATS = ("megatron", "deepspeed", "fsdp2")


def refuse_unless_runnable(fmt: str, c: ParallelConfig) -> None:
    """Raise :class:`SpecError` (one line) unless ``fmt`` reproduces exactly the evaluated plan
    ``c``: the format must be the plan's framework (its semantics were charged) and the plan
    runnable by it (:func:`costmodel.frameworks.rules.check`)."""
    if fmt != c.framework:
        raise SpecError("emit", fmt, f"{c.framework}, the framework the plan was evaluated for "
                        f"(or evaluate it with --framework {fmt}: each framework's ZeRO runs differently)")
    frameworks.check(c)
    if fmt == "deepspeed" and c.layers_per_stage is not None and len(set(c.layers_per_stage)) > 1:
        raise SpecError("emit", fmt, f"megatron for an uneven stage split {c.layers_per_stage} "
                        f"({fmt} is emitted with even stages only)")
    _refuse_half_gradients(fmt, c.grad_dtype)
    if fmt == "megatron":  # its only chunked overlap: TE userbuffers, a ring exchange of tp steps
        frameworks.check_userbuffers_chunks(tp=c.tp, sp=c.sp_on, chunks=c.chunks)
    if fmt == "fsdp2" and c.pp > 1 and c.pp_grad_reduce != "step":
        # torch.distributed.pipelining turns gradient sync off for every micro-batch but the last
        # (stage.py, backward_maybe_with_nosync); torchtitan has no setting that reduce-scatters per micro-batch
        raise SpecError("pp_grad_reduce", c.pp_grad_reduce, "step for --emit fsdp2 with pp > 1 (torchtitan's "
                        "pipeline schedule reduces gradients once per step; no torchtitan setting runs it per "
                        "micro-batch)")
    if fmt == "fsdp2" and c.sp_on and c.sp_saved_inputs != "gathered":
        # torchtitan's TP is DTensor's: PrepareModuleInput all-gathers the block input and aten.mm saves it
        raise SpecError("sp_saved_inputs", c.sp_saved_inputs, "gathered for --emit fsdp2 with sequence parallelism "
                        "(torchtitan's DTensor TP saves the all-gathered GEMM inputs; it has no setting that keeps "
                        "them sharded)")
    if c.pp_free_stage_inputs and c.pp > 1:
        raise SpecError("pp_free_stage_inputs", True, f"false for --emit {fmt} (no setting of it frees a pipeline "
                        "stage's received input; Megatron-Core's deallocate_pipeline_outputs frees the outputs)")
    if fmt in ("deepspeed", "fsdp2") and c.recompute_layers is not None:
        raise SpecError("emit", fmt, f"megatron for full recompute of {c.recompute_layers} layers per stage "
                        f"({fmt} recomputes every layer or none)")


def _refuse_half_gradients(fmt: str, grad_dtype: str) -> None:
    if fmt in ("deepspeed", "fsdp2") and grad_dtype != "fp32":
        raise SpecError("emit", fmt, f"megatron for {grad_dtype} gradient reduction "
                        f"({fmt} is emitted with FP32 gradient reduction only)")


def refuse_unstated_gradients(fmt: str, grad_dtype: str, dtype: str) -> None:
    """Raise :class:`SpecError` unless ``fmt`` can state gradients reduced in ``grad_dtype`` for a
    ``dtype`` run: ``recommend --emit`` checks it before searching for plans that all have it."""
    _refuse_half_gradients(fmt, grad_dtype)
    if fmt == "megatron":
        grad_dtype_args(ParallelConfig(grad_dtype=grad_dtype), dtype)


def bucket_elements(c: ParallelConfig) -> int:
    """The DP bucket as gradient elements (:func:`costmodel.physics.memory.stage_memory.grad_elem_bytes` each)."""
    return int(round(c.bucket_bytes / grad_elem_bytes(c)))


def grad_dtype_args(c: ParallelConfig, dtype: str) -> list[list[str]]:
    """Megatron-LM's gradient dtype flags (arguments.py: BF16 runs reduce in FP32 unless
    ``--grad-reduce-in-bf16``; FP16 runs reduce the FP16 gradients unless
    ``--accumulate-allreduce-grads-in-fp32``); a gradient dtype the run's dtype cannot have is refused."""
    half = "fp16" if dtype == "fp16" else "bf16"
    if c.grad_dtype == "fp32":
        return [["--accumulate-allreduce-grads-in-fp32"]] if dtype == "fp16" else []
    if c.grad_dtype != half:
        raise SpecError("grad_dtype", c.grad_dtype, f"fp32 or {half} for a {dtype} run")
    return [["--grad-reduce-in-bf16"]] if half == "bf16" else []


def megatron_args(c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16",
                  moe: bool = False, mtp: int = 0) -> list[list[str]]:
    """Megatron-LM arguments of plan ``c``, one ``[flag, value...]`` list per argument; ``moe``: the
    model has routed experts (so does any plan with ``ep > 1``); ``mtp``: its MTP modules (a layout
    string then places them; ``--mtp-num-layers`` is the model's, :mod:`planner.emit_arch`)."""
    out = [["--tensor-model-parallel-size", str(c.tp)], ["--pipeline-model-parallel-size", str(c.pp)],
           ["--context-parallel-size", str(c.cp)]]
    if c.ep > 1:  # experts are not split by TP when they are spread over EP ranks (cost model assumption)
        out += [["--expert-model-parallel-size", str(c.ep)], ["--expert-tensor-parallel-size", "1"]]
    if moe or c.ep > 1:
        out += moe_args(c)
    out += [["--micro-batch-size", str(c.mb)], ["--global-batch-size", str(global_batch)]]
    out += pipeline_split_args(c, layers, mtp)
    if c.sp_on:
        out.append(["--sequence-parallel"])
        if c.chunks > 1:  # Transformer Engine userbuffers: chunked AG/RS overlapped with GEMMs
            out.append(["--tp-comm-overlap"])
            if c.chunks != TE_PIPELINE_SPLITS:  # the ReduceScatters' pieces (the AllGathers take tp steps)
                out.append(["--tp-comm-overlap-cfg", TP_OVERLAP_CFG])
    if c.recompute == "selective":
        out.append(["--recompute-granularity", "selective"])
        if c.recompute_modules is not None:  # Megatron-Core TransformerConfig.recompute_modules
            out.append(["--recompute-modules", *c.recompute_modules])
    elif c.recompute == "full":
        if c.recompute_layers is None:  # every layer: keep each layer's input, recompute the rest
            out += [["--recompute-granularity", "full"], ["--recompute-method", "uniform"],
                    ["--recompute-num-layers", "1"]]
        else:  # the first k layers of each stage
            out += [["--recompute-granularity", "full"], ["--recompute-method", "block"],
                    ["--recompute-num-layers", str(c.recompute_layers)]]
    if c.loss_impl != "fused":  # Megatron-Core's vocab-parallel cross-entropy is the loss the plan is charged
        raise SpecError("loss_impl", c.loss_impl, "fused for --emit megatron (Megatron-Core's vocab-parallel "
                        "cross-entropy; fp32 is torchtitan's eager loss)")
    if c.optimizer_dtype != "fp32":  # Megatron-LM's optimizers keep FP32 (or FP16) main params: --main-params-dtype
        raise SpecError("optimizer_dtype", c.optimizer_dtype, "fp32 for --emit megatron (Megatron-LM's distributed "
                        "optimizer keeps main params, --main-params-dtype fp32 or fp16; BF16 Adam state without a "
                        "master copy is NeMo 1.x's distributed_fused_adam with optim.dtype bf16)")
    frameworks.semantics("megatron", c.zero)  # Megatron-Core has no ZeRO-2: refused with the reason
    if c.zero == 1:  # megatron/core/optimizer/distrib_optimizer.py: full grad buffer, sharded optimizer
        out.append(["--use-distributed-optimizer"])
    elif c.zero == 3:  # Megatron FSDP (arguments.py: v1 turns on the distributed optimizer itself;
        # it needs the fsdp_dtensor checkpoint format); not --use-torch-fsdp2, which refuses pp > 1
        out += [["--use-megatron-fsdp"], ["--data-parallel-sharding-strategy", "optim_grads_params"],
                ["--ckpt-format", "fsdp_dtensor"]]
    out += offload_args(c)
    out += act_offload_args(c)
    if c.bucket_bytes > 0 and c.dp * c.cp > 1:
        out.append(["--overlap-grad-reduce"])
        if c.zero in (1, 3):
            out.append(["--overlap-param-gather"])
        out.append(["--ddp-bucket-size", str(bucket_elements(c))])
    out += {"bf16": [["--bf16"]], "fp16": [["--fp16"]], "fp8": [["--bf16"], ["--fp8-format", "hybrid"]]}[dtype]
    if c.fp8_param_gather and dtype == "fp8":  # FP8 parameters, no cached FP8 copy (costmodel.physics.memory.stage_memory.fp8_weight_cache_bytes)
        out.append(["--fp8-param-gather"])
    return out + grad_dtype_args(c, dtype)


def offload_args(c: ParallelConfig) -> list[list[str]]:
    """Optimizer CPU offload (:mod:`costmodel.physics.mechanics.offload`) as Megatron-LM d98e8a64 takes it: ``--optimizer-cpu-offload``
    asserts ``--use-precision-aware-optimizer`` (arguments.py ``validate_args``); ``--optimizer-offload-fraction``
    defaults to 1.0 there, so it is always stated."""
    if c.optimizer_offload_fraction == 0.0:
        return []
    out = [["--use-precision-aware-optimizer"], ["--optimizer-cpu-offload"],
           ["--optimizer-offload-fraction", repr(c.optimizer_offload_fraction)]]
    if c.overlap_cpu_optimizer_d2h_h2d:
        out.append(["--overlap-cpu-optimizer-d2h-h2d"])
    return out


def act_offload_args(c: ParallelConfig) -> list[list[str]]:
    """Activation CPU offload (:mod:`costmodel.physics.mechanics.act_offload`): ``--cpu-offloading-num-layers N`` (Megatron-LM
    d98e8a64 arguments.py ``validate_args``: N > 0 sets ``cpu_offloading``; activations on, weights off by
    default, as charged)."""
    return [["--cpu-offloading-num-layers", str(c.activation_offload_layers)]] if c.activation_offload_layers else []


def moe_args(c: ParallelConfig) -> list[list[str]]:
    """The MoE layer as the cost model charges it (``costmodel.physics.kernels.compute._moe_ops``): one grouped GEMM
    over the local experts and the plan's token dispatcher. Megatron-Core's defaults are neither
    (``TransformerConfig``: ``moe_grouped_gemm=False``, ``moe_token_dispatcher_type="allgather"``);
    DeepEP is the flex dispatcher's ``deepep`` backend (``--moe-enable-deepep`` is deprecated)."""
    out = [["--moe-grouped-gemm"]]
    if c.ep_dispatcher == "deepep":
        return out + [["--moe-token-dispatcher-type", "flex"], ["--moe-flex-dispatcher-backend", "deepep"]]
    return out + [["--moe-token-dispatcher-type", "alltoall"]]


def split_form(c: ParallelConfig, layers: int, mtp: int = 0) -> tuple:
    """How Megatron-Core expresses the plan's layers per stage, as ``(form, values)``:

    ``("even", None)`` (no split flag), ``("first_last", (first, last))``
    (``--decoder-first/last-pipeline-num-layers``), ``("account", (embedding, loss))``
    (``--account-for-embedding/loss-in-pipeline-split``) or ``("layout", layout string)``
    (``--pipeline-model-parallel-layout``). Each form places exactly the layers
    :func:`costmodel.spec.stages.chunk_layers` puts in every model chunk.

    >>> split_form(ParallelConfig(pp=8, vp=8, layers_per_stage=(15,) + (16,) * 6 + (15,)), 126)
    ('account', (True, True))
    >>> split_form(ParallelConfig(pp=4, vp=2, layers_per_stage=(22, 26, 26, 22)), 96)
    ('first_last', (22, 22))
    >>> split_form(ParallelConfig(pp=4, vp=2, layers_per_stage=(5, 4, 4, 3)), 16)
    ('layout', 'Ett|(tt|)*3t*3|(tt|)*2tL')
    """
    split, pp, vp = c.layers_per_stage, c.pp, c.vp
    if c.layout is not None:  # its MTP layers with the loss is what Megatron does without a layout
        mtp = sum(s.mtp for s in c.layout.stages)
    if c.layout is not None and c.layout != from_split(split, vp, mtp):  # a layout no per-rank rule builds
        return ("layout", str(c.layout))
    if pp == 1 or split is None or (len(set(split)) == 1 and split[0] % vp == 0):
        return ("even", None)
    try:
        if megatron_split(layers, pp, vp, first=split[0], last=split[-1]) == split:
            return ("first_last", (split[0], split[-1]))
    except SpecError:
        pass
    for emb, loss in ((True, True), (True, False), (False, True)):
        try:
            if megatron_split(layers, pp, vp, embedding=emb, loss=loss) == split:
                return ("account", (emb, loss))
        except SpecError:
            pass
    return ("layout", pipeline_layout(split, vp, mtp))


def pipeline_layout(split: tuple[int, ...], vp: int, mtp: int = 0) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` string of a split: ``pp * vp`` virtual
    stages separated by ``|`` in the order ``vpp_rank * pp + pp_rank``, each its transformer layers
    (``t``, as many as :func:`costmodel.spec.stages.chunk_layers` gives), the embedding ``E`` first
    and the loss ``L`` last; runs of equal stages written ``(..|)*n`` and ``t*k`` for ``k > 2``
    (``megatron/core/transformer/pipeline_parallel_layer_layout.py``, ``parse_str_to_list``).

    >>> pipeline_layout((7, 8, 8, 8, 8, 8, 8, 6), 4)   # DeepSeek-V3's 61 layers, pp=8, vp=4
    'Et|(tt|)*22t|(tt|)*7tL'
    """
    return format_layout(from_split(tuple(split), vp, mtp))  # costmodel.spec.layout: the one formatter


def pipeline_split_args(c: ParallelConfig, layers: int, mtp: int = 0) -> list[list[str]]:
    """The interleave and stage-split arguments that reproduce ``c.vp`` and ``c.layers_per_stage``
    exactly (:func:`split_form`); Megatron-LM takes at most one of ``--num-layers-per-virtual-pipeline-stage``,
    ``--num-virtual-stages-per-pipeline-rank`` and ``--pipeline-model-parallel-layout`` (the layout
    implies the interleave), and the first/last flags never with the account-for flags."""
    form, value = split_form(c, layers, mtp)
    out = []
    if c.vp > 1 and form == "even":
        out.append(["--num-layers-per-virtual-pipeline-stage", str(layers // (c.pp * c.vp))])
    elif c.vp > 1 and form != "layout":
        out.append(["--num-virtual-stages-per-pipeline-rank", str(c.vp)])
    if form == "first_last":
        out += [["--decoder-first-pipeline-num-layers", str(value[0])],
                ["--decoder-last-pipeline-num-layers", str(value[1])]]
    elif form == "account":
        out += [[f] for f, on in (("--account-for-embedding-in-pipeline-split", value[0]),
                                  ("--account-for-loss-in-pipeline-split", value[1])) if on]
    elif form == "layout":
        out.append(["--pipeline-model-parallel-layout", value])
    return out


def megatron_text(c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16", moe: bool = False,
                  mtp: int = 0) -> str:
    """The arguments as shell lines ending in ``\\`` (paste into a ``pretrain_gpt.py`` command);
    a value with shell characters (the layout's ``|``, ``(``, ``*``) is double-quoted."""
    def word(t: str) -> str:
        return f'"{t}"' if any(ch in t for ch in "|()*") else t
    lines = [" ".join(word(t) for t in a) for a in megatron_args(c, global_batch, layers, dtype, moe, mtp)]
    return " \\\n".join(lines)


def megatron_notes(c: ParallelConfig) -> list[str]:
    """What the arguments cannot express exactly."""
    notes = []
    if (c.tp > 1 or c.cp > 1) and c.zero != 3:  # arguments.py asserts it before Blackwell
        notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM requires it with TP or CP, and TP "
                     "communication overlap relies on it)")
    if c.zero == 3:  # arguments.py@d98e8a64 asserts it for --use-megatron-fsdp at any TP, TP 1 included
        notes.append("unset CUDA_DEVICE_MAX_CONNECTIONS (or set it > 1): Megatron FSDP requires it at any TP"
                     + ("; arguments.py warns that TP/CP prefer 1 (the prediction assumes both overlap)"
                        if c.tp > 1 or c.cp > 1 else ""))
    if c.chunks > 1 and c.chunks != TE_PIPELINE_SPLITS:
        notes.append(f"write {TP_OVERLAP_CFG} first: echo '{tp_overlap_cfg(c.chunks)}' > {TP_OVERLAP_CFG} "
                     f"(the forward ReduceScatters in {c.chunks} pieces, as predicted; TE's default is "
                     f"{TE_PIPELINE_SPLITS})")
    if c.chunks > 1 and c.ep > 1:
        notes.append(f"the prediction also pipelines the EP combine all-to-all in {c.chunks} pieces with the expert "
                     "GEMMs, which Megatron-Core does not do; it overlaps all-to-all across micro-batches instead "
                     "(--overlap-moe-expert-parallel-comm, not modelled): see benchmarks/RESULTS.md section 6b")
    if c.optimizer_offload_fraction > 0:
        notes.append("optimizer CPU offload: the predicted optimizer step takes the host link's measured one-GPU copy rate "
                     "(benchmarks/data/components/host_link.csv) and an assumed 200 GB/s of host memory bandwidth "
                     "per node for the CPU Adam (costmodel.physics.mechanics.offload; not measured), and needs pinned host memory for "
                     "the offloaded FP32 master weights and moments")
    return notes


#: Transformer Engine's default pieces of a ``pipeline`` ReduceScatter overlap (``initialize_ub``:
#: ``num_splits=4 if method == "pipeline"``), and the file that sets them to the plan's chunks
TE_PIPELINE_SPLITS = 4
TP_OVERLAP_CFG = "tp_comm_overlap.yaml"


def tp_overlap_cfg(chunks: int) -> str:
    """The ``--tp-comm-overlap-cfg`` YAML (flow style, one line) that pipelines the forward
    ReduceScatters of each layer (``proj_fprop``, ``fc2_fprop``) in ``chunks`` pieces; the other
    overlaps keep TE's defaults (AllGathers by ring exchange, one step per TP rank = ``chunks``).

    >>> tp_overlap_cfg(8)
    '{proj_fprop: {method: pipeline, num_splits: 8}, fc2_fprop: {method: pipeline, num_splits: 8}}'
    """
    return (f"{{proj_fprop: {{method: pipeline, num_splits: {chunks}}}, "
            f"fc2_fprop: {{method: pipeline, num_splits: {chunks}}}}}")


def deepspeed_config(c: ParallelConfig, global_batch: int, dtype: str = "bf16") -> dict:
    """A DeepSpeed configuration (JSON object) for the ZeRO, batch and precision part of ``c``.

    Tensor, pipeline, context and expert parallel degrees are not DeepSpeed JSON keys (they are
    set by the training script, e.g. Megatron-DeepSpeed's ``--tensor-model-parallel-size``).
    """
    frameworks.check_fields("deepspeed", zero=c.zero, pp=c.pp, vp=c.vp, cp=c.cp, chunks=c.chunks)
    m = micro_batches(Workload(global_batch=global_batch, seq_len=1), c)
    zero = {"stage": c.zero, "overlap_comm": c.bucket_bytes > 0, "contiguous_gradients": True,
            "reduce_scatter": True}
    if c.bucket_bytes > 0:
        zero["reduce_bucket_size"] = bucket_elements(c)
        zero["allgather_bucket_size"] = bucket_elements(c)
        if c.zero == 3:
            zero["stage3_prefetch_bucket_size"] = bucket_elements(c)
    out = {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": c.mb,
        "gradient_accumulation_steps": m,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype in ("bf16", "fp8")},
        "fp16": {"enabled": dtype == "fp16"},
    }
    # the plan's FP32 gradient reduction: unset, DeepSpeed reduces in the half dtype it trains in
    # (deepspeed/runtime/engine.py at edaa72212, communication_data_type: fp16, else bf16, else fp32)
    if c.grad_dtype == "fp32" and dtype in ("bf16", "fp16", "fp8"):
        out["communication_data_type"] = "fp32"
    return out


def deepspeed_notes(c: ParallelConfig) -> list[str]:
    degrees = (("tp", c.tp), ("pp", c.pp), ("cp", c.cp), ("ep", c.ep), ("vp", c.vp))
    parts = [f"{name}={v}" for name, v in degrees if v > 1]
    if c.sp_on:
        parts.append("sequence parallelism on (Megatron-DeepSpeed --sequence-parallel)")
    if c.pp > 1:  # the even split the plan was evaluated with (Megatron-DeepSpeed GPTModelPipe's default)
        parts.append("PipelineModule(partition_method='type:transformer'): equal transformer layers per stage")
    notes = []
    if parts:
        notes.append("set " + ", ".join(parts) + " in the training script (not DeepSpeed JSON keys)")
    if c.recompute != "none":
        notes.append(f"recompute={c.recompute}: enable activation checkpointing in the model code")
    return notes


def torchtitan_lines(c: ParallelConfig, workload: Workload, layers: int) -> list[str]:
    """The plan as torchtitan job-config TOML (``torchtitan/config/job_config.py``: ``Parallelism``,
    ``Training``, ``ActivationCheckpoint``): FSDP2 shards over ``dp`` (zero 2/3) or DDP replicates
    (zero 0); zero=3 reshards after forward (``fsdp_reshard_after_forward = "always"``), zero=2 not
    (``"never"``); chunked TP overlap is async TP, which needs ``torch.compile``. With a pipeline,
    the even split the plan was evaluated with: ``pipeline_parallel_layers_per_stage`` layers per
    virtual stage and the embedding / output not counted as layers (torchtitan's ``pipeline_llm``
    counts each as one layer by default, ``pipeline_parallel_first/last_stage_less_layers = 1``); an uneven
    split (per-rank counts, a layout) as ``module_fqns_per_model_part`` (:func:`torchtitan_model_parts`).

    >>> print("\\n".join(torchtitan_lines(ParallelConfig(tp=8, pp=2, dp=4, sp=True, zero=3, framework="fsdp2"),
    ...                                    Workload(global_batch=64, seq_len=4096), 32)[:5]))
    [parallelism]
    data_parallel_replicate_degree = 1
    data_parallel_shard_degree = 4
    fsdp_reshard_after_forward = "always"
    tensor_parallel_degree = 8
    """
    frameworks.check_fields("fsdp2", zero=c.zero, tp=c.tp, sp=c.sp_on, chunks=c.chunks)
    shard = c.zero >= 2
    out = ["[parallelism]",
           f"data_parallel_replicate_degree = {1 if shard else c.dp}",
           f"data_parallel_shard_degree = {c.dp if shard else 1}"]
    if shard:
        out.append(f'fsdp_reshard_after_forward = "{"always" if c.zero == 3 else "never"}"')
    out += [
           f"tensor_parallel_degree = {c.tp}",
           f"enable_async_tensor_parallel = {'true' if c.chunks > 1 and c.tp > 1 else 'false'}",
           f"pipeline_parallel_degree = {c.pp}"]
    if c.pp > 1:
        out += [f'pipeline_parallel_schedule = "{"Interleaved1F1B" if c.vp > 1 else "1F1B"}"',
                f"pipeline_parallel_microbatch_size = {c.mb}"]
        lay = c.layout or (from_split(tuple(c.layers_per_stage), c.vp) if c.layers_per_stage is not None else None)
        if lay is None or len({s.decoder for s in lay.stages}) == 1:
            out += [f"pipeline_parallel_layers_per_stage = {layers // (c.pp * c.vp)}",
                    "pipeline_parallel_first_stage_less_layers = 0", "pipeline_parallel_last_stage_less_layers = 0"]
        else:
            out.append(f"module_fqns_per_model_part = {torchtitan_model_parts(lay)}")
    out += [f"context_parallel_degree = {c.cp}", f"expert_parallel_degree = {c.ep}", "",
            "[training]", f"global_batch_size = {workload.global_batch}",
            # gradient accumulation = global / (local * dp); with PP the local batch is split into
            # pipeline micro-batches of pipeline_parallel_microbatch_size
            f"local_batch_size = {c.mb if c.pp == 1 else workload.global_batch // c.dp}",
            f"seq_len = {workload.seq_len}",
            f'mixed_precision_param = "{_torchtitan_param_dtype(workload.dtype)}"', "",
            "[activation_checkpoint]", f'mode = "{"selective" if c.recompute == "op_sac" else c.recompute}"']
    if c.recompute in ("selective", "op_sac"):  # op_sac is torchtitan's per-op selective checkpointing
        out.append('selective_ac_option = "op"')
    if (c.chunks > 1 and c.tp > 1) or c.fused_elementwise:  # async TP needs it; fused element-wise ops are compiled
        out += ["", "[compile]", "enable = true"]
    return out


#: the torchtitan whose job-config TOML :func:`torchtitan_lines` writes (``torchtitan/config/job_config.py``
#: at tag v0.2.2, 73a0e69); torchtitan main after it (b5bcd76) takes Python ``Trainer.Config``
#: functions instead (``torchtitan/config/README.md``), with ``--section.option`` flags kept for old scripts
TORCHTITAN_VERSION = "v0.2.2"
TORCHTITAN_HEADER = (f"# torchtitan {TORCHTITAN_VERSION} job config (TOML, --job.config_file): torchtitan main after "
                     f"{TORCHTITAN_VERSION} configures runs with Python Trainer.Config functions instead")


def torchtitan_model_parts(lay: Layout) -> str:
    """torchtitan's ``module_fqns_per_model_part`` (v0.2.2 ``config/job_config.py``) of an uneven split, as
    TOML: one list of module names per virtual stage, in stage order; torchtitan's looped schedules
    (Interleaved1F1B, 1F1B) put stage ``k`` on rank ``k % pp`` (``distributed/pipeline_parallel.py``
    ``pipeline_module_split._get_stage_indices``, style "loop"), the order of :class:`costmodel.spec.layout.Layout`,
    so each virtual stage holds the layers the plan was evaluated with. A stage with no module is refused.

    >>> torchtitan_model_parts(from_split((3, 2), 1))
    '[["tok_embeddings", "layers.0", "layers.1", "layers.2"], ["layers.3", "layers.4", "norm", "output"]]'
    """
    parts = []
    for k, s in enumerate(lay.stages):
        names = (["tok_embeddings"] if s.embedding else []) + \
            [f"layers.{i}" for i in lay.layer_ids(k % lay.pp, k // lay.pp)] + (["norm", "output"] if s.loss else [])
        if not names or s.mtp:
            raise SpecError("layers_per_stage", ",".join(map(str, lay.per_rank())),
                            f"a split whose every virtual stage holds a layer, the embedding or the loss, and no MTP "
                            f"layer, for --emit fsdp2 (virtual stage {k} of rank {k % lay.pp} holds {s.text() or 'nothing'})")
        parts.append(names)
    return "[" + ", ".join("[" + ", ".join(f'"{n}"' for n in names) + "]" for names in parts) + "]"


def _torchtitan_param_dtype(dtype: str) -> str:
    """torchtitan's ``mixed_precision_param`` (``Literal["bfloat16", "float32"]`` at v0.2.2 and at main):
    FP16 has no torchtitan setting, so it is refused; FP8 runs keep BF16 parameters."""
    if dtype == "fp16":
        raise SpecError("dtype", dtype, "bf16 or fp8 for --emit fsdp2 (torchtitan's mixed_precision_param "
                        "allows bfloat16 or float32 only)")
    return "bfloat16"


def torchtitan_notes(c: ParallelConfig) -> list[str]:
    notes = []
    if c.recompute == "selective":
        notes.append("torchtitan has no attention-only selective recompute; selective_ac_option = \"op\" replays "
                     "more (every second matmul, element-wise ops): evaluate recompute=op_sac for that")
    return notes


def emit_text(fmt: str, c: ParallelConfig, workload: Workload, layers: int, moe: bool = False,
              model=None) -> tuple[str, list[str]]:
    """``(text, notes)``: the plan as Megatron-LM arguments (shell lines), a DeepSpeed config
    (JSON) or torchtitan TOML, and what the format cannot express exactly; refuses
    (:class:`SpecError`) unless the format reproduces exactly the evaluated plan. ``moe``: the
    model has routed experts; ``model`` (a :class:`~costmodel.spec.specs.ModelSpec`): Megatron-LM's
    lines start with its architecture (:mod:`planner.emit_arch`)."""
    import json

    refuse_unless_runnable(fmt, c)
    if fmt == "fsdp2":
        text = "\n".join([TORCHTITAN_HEADER] + torchtitan_lines(c, workload, layers))
        notes = torchtitan_notes(c)
    elif fmt == "megatron":
        from .emit_arch import with_model_lines
        mtp = model.mtp_layers if model is not None else 0
        text, notes = megatron_text(c, workload.global_batch, layers, workload.dtype, moe, mtp), megatron_notes(c)
        text, notes = with_model_lines(text, notes, c, workload, model)
    else:
        text, notes = json.dumps(deepspeed_config(c, workload.global_batch, workload.dtype), indent=2), deepspeed_notes(c)
    return text, notes + dma_notes(c)


def dma_notes(c: ParallelConfig) -> list[str]:
    """The plan's DMA-engine assignment (:mod:`costmodel.physics.comm.dma`), which no framework has a flag for:
    said in a comment when the plan names one (unset: the engines split evenly)."""
    if c.dma is None:
        return []
    return [f"DMA engines per stream (no framework flag: bind each stream's communicator/queue to them): "
            f"{c.dma}; the prediction assumes this assignment"]
