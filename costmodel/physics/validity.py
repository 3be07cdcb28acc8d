"""The plan checks that need more than the plan itself: divisibility against the model and the cluster, the
framework's rules, the layout against the model, the DMA assignment against the device (:func:`validate_config`)."""

from __future__ import annotations

from costmodel.physics.comm import dma as _dma
from costmodel.spec import layout as _layout
from costmodel.spec.errors import SpecError
from costmodel.spec.precision import check_supported
from costmodel.frameworks.rules import check as check_framework, check_moe_sequence_parallel
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.plan import ParallelConfig, micro_batches


#: micro-batches per step beyond which a plan is refused (a sanity bound: the pipeline schedule
#: of one step holds every micro-batch; 100,000 evaluate in seconds, millions would not)
MAX_MICRO_BATCHES = 100_000


def validate_config(model: ModelSpec, cluster: ClusterSpec, workload: Workload, c: ParallelConfig) -> None:
    """Raise :class:`SpecError` naming the first divisibility rule ``c`` breaks.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> m, cl = load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64)
    >>> validate_config(m, cl, Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8, dp=1))
    >>> validate_config(m, cl, Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=7, pp=8, dp=1))
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: tp=7: must be a divisor of heads=96
    """
    dev = getattr(cluster, "device", None)  # runs.py validates a run's plan before its cluster is known
    if workload.recipe not in ("bf16", "fp16", "fp8") and dev is not None:
        # a recipe the GPU lacks, refused in one line (``fp8`` on Ampere keeps its old behaviour: timed at
        # the BF16 peak, DeviceSpec.peak_flops_per_s)
        check_supported(workload.recipe, dev.name, dev.peak_fp8_flops_per_s)
    if c.activation_offload_layers >= model.layers and c.activation_offload_layers:  # transformer_config.py@d98e8a64
        raise SpecError(
            "activation_offload_layers",
            c.activation_offload_layers,
            f"an integer from 0 to {model.layers - 1} (Megatron offloads fewer layers than num_layers={model.layers})",
        )
    if c.offload_modules and not model.is_moe:  # the modules are the routed experts' (moe/experts.py@d98e8a64)
        raise SpecError("offload_modules", ",".join(c.offload_modules), f"unset for {model.name}, a dense model")
    if model.heads % c.tp:
        raise SpecError("tp", c.tp, f"a divisor of heads={model.heads}")
    if model.kv_heads % c.tp and c.tp % model.kv_heads:
        raise SpecError("tp", c.tp, f"a divisor or multiple of kv_heads={model.kv_heads}")
    if model.ffn_hidden % c.tp:
        raise SpecError("tp", c.tp, f"a divisor of ffn_hidden={model.ffn_hidden}")
    if c.layout is not None:
        _layout.validate(c.layout, model.layers, model.mtp_layers)
    elif c.layers_per_stage is not None:
        if sum(c.layers_per_stage) != model.layers:
            raise SpecError(
                "layers_per_stage",
                ",".join(map(str, c.layers_per_stage)),
                f"{c.pp} counts summing to layers={model.layers} (they sum to {sum(c.layers_per_stage)})",
            )
    elif model.layers % (c.pp * c.vp):
        raise SpecError(
            "pp*vp",
            c.pp * c.vp,
            f"a divisor of layers={model.layers} (pp={c.pp}, vp={c.vp}), "
            "or give a layout (--layout) or the layers of each stage (--layers-per-stage)",
        )
    if c.vp > 1 and c.pp == 1:
        raise SpecError("vp", c.vp, "1 when pp=1 (interleaving needs a pipeline)")
    if c.ep_overlap and not model.is_moe:
        raise SpecError("ep_overlap", True, "false for a dense model (it hides the MoE all-to-alls)")
    if c.ep_overlap and c.pp > 1 and c.vp < 2:  # transformer_config.py@d98e8a6
        raise SpecError("ep_overlap", True, "false with pp > 1 and no interleaving (vp >= 2 must be specified)")
    if c.ep_overlap and model.mtp_layers > 1:  # transformer_config.py@d98e8a6
        raise SpecError("ep_overlap", True, f"false with more than one MTP layer (mtp_layers={model.mtp_layers})")
    if workload.global_batch % (c.dp * c.mb):
        raise SpecError(
            "global_batch", workload.global_batch, f"a multiple of dp*mb={c.dp * c.mb} (dp={c.dp}, mb={c.mb})"
        )
    m = micro_batches(workload, c)
    if m > MAX_MICRO_BATCHES:
        raise SpecError(
            "global_batch",
            workload.global_batch,
            f"at most {MAX_MICRO_BATCHES:,} micro-batches per step: global_batch/(dp*mb) = {m:,} "
            f"(dp={c.dp}, mb={c.mb}; a sanity bound, raise mb or dp)",
        )
    if c.vp > 1 and m % c.pp:
        raise SpecError(
            "global_batch",
            workload.global_batch,
            f"such that micro-batches ({m}) are a multiple of pp={c.pp} with interleaving (vp={c.vp})",
        )
    if c.ep > 1:
        if not model.is_moe:
            raise SpecError("ep", c.ep, "1 for a dense model")
        if model.experts % c.ep:
            raise SpecError("ep", c.ep, f"a divisor of experts={model.experts}")
        if (c.tp * c.dp * c.cp) % c.ep:
            raise SpecError("ep", c.ep, f"a divisor of tp*dp*cp={c.tp * c.dp * c.cp} (EP is folded inside DP and TP)")
    if c.cp > 1 and workload.seq_len % (2 * c.cp):
        raise SpecError("cp", c.cp, f"such that seq_len={workload.seq_len} divides into 2*cp load-balanced chunks")
    seq = workload.input_len if workload.mode == "infer" and workload.input_len else workload.seq_len
    if c.sp and c.tp > 1 and (seq // c.cp) % c.tp:
        what = "input_len" if seq is not workload.seq_len else "seq_len"
        raise SpecError("sp", c.sp, f"off unless {what}/cp is a multiple of tp={c.tp} ({what}={seq})")
    if cluster.num_gpus and c.gpus != cluster.num_gpus:
        raise SpecError(
            "tp*pp*dp*cp",
            c.gpus,
            f"equal to the GPU count {cluster.num_gpus} (tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp})",
        )
    if c.fp8_param_gather and workload.dtype != "fp8":
        # megatron/training/arguments.py at d98e8a64: --fp8-param-gather quantizes the parameters with the FP8 recipe
        raise SpecError(
            "fp8_param_gather", True, f"false unless dtype=fp8 (FP8 parameters of an FP8 run; dtype={workload.dtype})"
        )
    if "mla_up_proj" in (c.recompute_modules or ()) and not model.is_mla:
        # transformer_config.py at d98e8a64: "mla_up_proj in recompute_modules is only supported with MLA"
        raise SpecError(
            "recompute_modules",
            "mla_up_proj",
            "modules without mla_up_proj for a model without multi-latent attention (Megatron-Core refuses it)",
        )
    most = max(c.layers_per_stage) if c.layers_per_stage else model.layers // c.pp
    if c.recompute_layers is not None and c.recompute_layers > most:
        raise SpecError("recompute_layers", c.recompute_layers, f"at most layers per stage = {most}")
    if workload.mode == "train":
        check_framework(c)  # the settings c.framework can run (costmodel.frameworks.rules)
        check_moe_sequence_parallel(c.framework, moe=model.is_moe, tp=c.tp, sp=c.sp_on)
        _dma.check(cluster, c, model)  # the DMA assignment suits the plan and the device
