"""A plan as Megatron-LM / Megatron-Core arguments (``megatron/training/arguments.py``: ``_add_distributed_args``,
``_add_training_args``, ``_add_moe_args``, ``_add_transformer_engine_args``), the stage split in Megatron's
own terms, and what the arguments cannot say exactly (notes).

Megatron-Core sizes buckets in *elements*, not bytes (``DistributedDataParallelConfig.bucket_size``:
"maximum number of parameters in each bucket"): :func:`bucket_elements`.
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec import precision
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.spec.layout import format_layout, from_split
from costmodel.spec.stages import megatron_split


def bucket_elements(c: ParallelConfig) -> int:
    """The DP bucket as gradient elements (:func:`costmodel.physics.memory.stage_memory.grad_elem_bytes` each)."""
    return int(round(c.bucket_bytes / grad_elem_bytes(c)))


#: the precision flags the recipes write (costmodel.spec.precision.Recipe.megatron), named here as string
#: constants so that planner.baseline.emitted_flags, which reads this module's source, knows them
PRECISION_FLAGS = ("--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--fp4-param-gather")


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


def megatron_args(
    c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16", moe: bool = False, mtp: int = 0
) -> list[list[str]]:
    """Megatron-LM arguments of plan ``c``, one ``[flag, value...]`` list per argument; ``moe``: the
    model has routed experts (so does any plan with ``ep > 1``); ``mtp``: its MTP modules (a layout
    string then places them; ``--mtp-num-layers`` is the model's, :mod:`planner.emit_arch`)."""
    out = [
        ["--tensor-model-parallel-size", str(c.tp)],
        ["--pipeline-model-parallel-size", str(c.pp)],
        ["--context-parallel-size", str(c.cp)],
    ]
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
            out += [
                ["--recompute-granularity", "full"],
                ["--recompute-method", "uniform"],
                ["--recompute-num-layers", "1"],
            ]
        else:  # the first k layers of each stage
            out += [
                ["--recompute-granularity", "full"],
                ["--recompute-method", "block"],
                ["--recompute-num-layers", str(c.recompute_layers)],
            ]
    if c.loss_impl == "te":  # arguments.py@d98e8a64 validate_args (168cb15d, core_v0.19.0); the parser still reads it
        raise SpecError(
            "loss_impl",
            c.loss_impl,
            "fused for --emit megatron (Megatron-LM d98e8a64's validate_args refuses Transformer Engine's "
            "cross-entropy, --cross-entropy-fusion-impl te, for 'known stability issues'; Megatron-Bridge's older "
            "Megatron-LM runs it: keep that line, or plan with --loss-impl fused)",
        )
    if c.loss_impl != "fused":  # Megatron-Core's vocab-parallel cross-entropy is the loss the plan is charged
        raise SpecError(
            "loss_impl",
            c.loss_impl,
            "fused for --emit megatron (Megatron-Core's vocab-parallel cross-entropy; fp32 is torchtitan's eager loss)",
        )
    if c.optimizer_dtype != "fp32":  # Megatron-LM's optimizers keep FP32 (or FP16) main params: --main-params-dtype
        raise SpecError(
            "optimizer_dtype",
            c.optimizer_dtype,
            "fp32 for --emit megatron (Megatron-LM's distributed "
            "optimizer keeps main params, --main-params-dtype fp32 or fp16; BF16 Adam state without a "
            "master copy is NeMo 1.x's distributed_fused_adam with optim.dtype bf16)",
        )
    frameworks.semantics("megatron", c.zero)  # Megatron-Core has no ZeRO-2: refused with the reason
    if c.zero == 1:  # megatron/core/optimizer/distrib_optimizer.py: full grad buffer, sharded optimizer
        out.append(["--use-distributed-optimizer"])
    elif c.zero == 3:  # Megatron FSDP (arguments.py: v1 turns on the distributed optimizer itself;
        # it needs the fsdp_dtensor checkpoint format); not --use-torch-fsdp2, which refuses pp > 1
        out += [
            ["--use-megatron-fsdp"],
            ["--data-parallel-sharding-strategy", "optim_grads_params"],
            ["--ckpt-format", "fsdp_dtensor"],
        ]
    out += offload_args(c)
    out += act_offload_args(c)
    out += fg_offload_args(c)
    if c.bucket_bytes > 0:  # at dp * cp = 1 too: with ep > 1 the experts' gradients are reduced over tp*dp*cp/ep ranks
        out.append(["--overlap-grad-reduce"])
        if c.zero in (1, 3):
            out.append(["--overlap-param-gather"])
        out.append(["--ddp-bucket-size", str(bucket_elements(c))])
    # the precision recipe's flags (costmodel.spec.precision: --fp8-format / --fp8-recipe / --fp4-format /
    # --fp4-recipe as transformer_config.py at d98e8a64 parses them; plain fp8 is the default delayed recipe)
    r = precision.recipe(dtype)
    out += [list(f) for f in r.megatron]
    if (
        c.fp8_param_gather and r.gemm_class == "fp8"
    ):  # FP8 parameters, no cached FP8 copy (costmodel.physics.memory.stage_memory.fp8_weight_cache_bytes);
        # NVFP4 parameters are --fp4-param-gather (transformer_config.py fp4_param at d98e8a64)
        out.append(["--fp4-param-gather" if r.name == "nvfp4" else "--fp8-param-gather"])
    return out + grad_dtype_args(c, dtype)


def offload_args(c: ParallelConfig) -> list[list[str]]:
    """Optimizer CPU offload (:mod:`costmodel.physics.mechanics.offload`) as Megatron-LM d98e8a64 takes it: ``--optimizer-cpu-offload``
    asserts ``--use-precision-aware-optimizer`` (arguments.py ``validate_args``); ``--optimizer-offload-fraction``
    defaults to 1.0 there, so it is always stated."""
    if c.optimizer_offload_fraction == 0.0:
        return []
    out = [
        ["--use-precision-aware-optimizer"],
        ["--optimizer-cpu-offload"],
        ["--optimizer-offload-fraction", repr(c.optimizer_offload_fraction)],
    ]
    if c.overlap_cpu_optimizer_d2h_h2d:
        out.append(["--overlap-cpu-optimizer-d2h-h2d"])
    return out


def act_offload_args(c: ParallelConfig) -> list[list[str]]:
    """Activation CPU offload (:mod:`costmodel.physics.mechanics.act_offload`): ``--cpu-offloading-num-layers N`` (Megatron-LM
    d98e8a64 arguments.py ``validate_args``: N > 0 sets ``cpu_offloading``; activations on, weights off by
    default, as charged)."""
    return [["--cpu-offloading-num-layers", str(c.activation_offload_layers)]] if c.activation_offload_layers else []


def fg_offload_args(c: ParallelConfig) -> list[list[str]]:
    """Fine-grained activation offloading (:mod:`costmodel.physics.mechanics.fg_offload`): ``--fine-grained-activation-
    offloading --offload-modules M ...`` (Megatron-LM d98e8a64 ``TransformerConfig``; the tuning knobs at their
    defaults, as charged: ``--min-offloaded-tensor-size`` 1M elements, ``--activation-offload-fraction`` 1)."""
    if not c.offload_modules:
        return []
    return [["--fine-grained-activation-offloading"], ["--offload-modules", *c.offload_modules]]


def moe_args(c: ParallelConfig) -> list[list[str]]:
    """The MoE layer as the cost model charges it (``costmodel.physics.kernels.compute._moe_ops``): one grouped GEMM
    over the local experts and the plan's token dispatcher. Megatron-Core's defaults are neither
    (``TransformerConfig``: ``moe_grouped_gemm=False``, ``moe_token_dispatcher_type="allgather"``);
    DeepEP is the flex dispatcher's ``deepep`` backend (``--moe-enable-deepep`` is deprecated); the EP overlap is
    ``--overlap-moe-expert-parallel-comm --delay-wgrad-compute`` (Megatron-Core's MoE README pairs them; the
    weight-gradient split is what :func:`costmodel.compose.ep_overlap.pair_exposed_s` times)."""
    out = [["--moe-grouped-gemm"]]
    if c.ep_overlap:  # costmodel.compose.ep_overlap: the experts' weight gradient runs beside the dispatch gradient
        out += [["--overlap-moe-expert-parallel-comm"], ["--delay-wgrad-compute"]]
    if c.ep_dispatcher == "deepep":
        return out + [["--moe-token-dispatcher-type", "flex"], ["--moe-flex-dispatcher-backend", "deepep"]]
    if c.ep_dispatcher == "hybridep":  # token_dispatcher.py@d98e8a6: "HybridEP only supports float32 probs"
        return out + [
            ["--moe-token-dispatcher-type", "flex"],
            ["--moe-flex-dispatcher-backend", "hybridep"],
            ["--moe-router-dtype", "fp32"],
        ]
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
        out += [
            ["--decoder-first-pipeline-num-layers", str(value[0])],
            ["--decoder-last-pipeline-num-layers", str(value[1])],
        ]
    elif form == "account":
        out += [
            [f]
            for f, on in (
                ("--account-for-embedding-in-pipeline-split", value[0]),
                ("--account-for-loss-in-pipeline-split", value[1]),
            )
            if on
        ]
    elif form == "layout":
        out.append(["--pipeline-model-parallel-layout", value])
    return out


def megatron_text(
    c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16", moe: bool = False, mtp: int = 0
) -> str:
    """The arguments as shell lines ending in ``\\`` (paste into a ``pretrain_gpt.py`` command);
    a value with shell characters (the layout's ``|``, ``(``, ``*``) is double-quoted."""

    def word(t: str) -> str:
        return f'"{t}"' if any(ch in t for ch in "|()*") else t

    lines = [" ".join(word(t) for t in a) for a in megatron_args(c, global_batch, layers, dtype, moe, mtp)]
    return " \\\n".join(lines)


def megatron_notes(c: ParallelConfig) -> list[str]:
    """What the arguments cannot express exactly."""
    notes = []
    if c.ep_overlap and c.zero != 3:  # arguments.py@d98e8a6 warns instead of asserting =1 with the EP overlap
        notes.append(
            "export CUDA_DEVICE_MAX_CONNECTIONS=32 (the EP all-to-all overlap needs more than one"
            + (
                "; Megatron-LM warns that on Hopper and before TP/CP prefer 1: the prediction assumes both overlap)"
                if c.tp > 1 or c.cp > 1
                else ")"
            )
        )
    elif (c.tp > 1 or c.cp > 1) and c.zero != 3:  # arguments.py asserts it before Blackwell
        notes.append(
            "export CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM requires it with TP or CP, and TP "
            "communication overlap relies on it)"
        )
    if c.zero == 3:  # arguments.py@d98e8a64 asserts it for --use-megatron-fsdp at any TP, TP 1 included
        notes.append(
            "unset CUDA_DEVICE_MAX_CONNECTIONS (or set it > 1): Megatron FSDP requires it at any TP"
            + (
                "; arguments.py warns that TP/CP prefer 1 (the prediction assumes both overlap)"
                if c.tp > 1 or c.cp > 1
                else ""
            )
        )
    if c.offload_modules:  # arguments.py@d98e8a64 validate_args asserts it with Transformer Engine >= 2.10
        notes.append("export NVTE_CPU_OFFLOAD_V1=1 (Megatron-LM requires it for fine-grained activation offloading)")
    if c.chunks > 1 and c.chunks != TE_PIPELINE_SPLITS:
        notes.append(
            f"write {TP_OVERLAP_CFG} first: echo '{tp_overlap_cfg(c.chunks)}' > {TP_OVERLAP_CFG} "
            f"(the forward ReduceScatters in {c.chunks} pieces, as predicted; TE's default is "
            f"{TE_PIPELINE_SPLITS})"
        )
    if c.chunks > 1 and c.ep > 1 and not c.ep_overlap:
        notes.append(
            f"the prediction also pipelines the EP combine all-to-all in {c.chunks} pieces with the expert "
            "GEMMs, which Megatron-Core does not do; it overlaps all-to-all across micro-batches instead "
            "(--overlap-moe-expert-parallel-comm: the planner's --ep-overlap prices that)"
        )
    if c.optimizer_offload_fraction > 0:
        notes.append(
            "optimizer CPU offload: the predicted optimizer step takes the host link's measured one-GPU copy rate "
            "(benchmarks/data/components/host_link.csv) and an assumed 200 GB/s of host memory bandwidth "
            "per node for the CPU Adam (costmodel.physics.mechanics.offload; not measured), and needs pinned host memory for "
            "the offloaded FP32 master weights and moments"
        )
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
    return (
        f"{{proj_fprop: {{method: pipeline, num_splits: {chunks}}}, "
        f"fc2_fprop: {{method: pipeline, num_splits: {chunks}}}}}"
    )
