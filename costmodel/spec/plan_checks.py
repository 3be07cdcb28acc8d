"""The values a :class:`costmodel.spec.plan.ParallelConfig` field may take, and the checks its fields pass.

This module owns the plan's vocabularies (frameworks, recompute modes, dtypes, ...) and the field checks
``ParallelConfig.__post_init__`` runs, in order, after it has filled in the framework's defaults; each check
raises :class:`costmodel.spec.errors.SpecError` naming the field, the value and what it may be. The checks take
the plan as ``cfg`` (untyped: importing ``plan`` here would close an import cycle).
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.bounds import _positive_int

#: the frameworks a plan can name (their rules: :mod:`costmodel.frameworks.rules`)
FRAMEWORKS = ("megatron", "deepspeed", "fsdp2")
DEFAULT_FRAMEWORK = "megatron"
RECOMPUTE = ("none", "selective", "full", "op_sac")
#: Megatron-Core ``--recompute-modules`` this model charges (``TransformerConfig.recompute_modules`` at
#: d98e8a64; default ``["core_attn"]``): the core attention; ``layernorm``, the pre-MLP norm's output of an MoE
#: layer, discarded after use and recomputed (``CheckpointWithoutOutput``; the input norm is fused into the QKV
#: GEMM in the Transformer Engine spec, an ``IdentityOp``, so nothing to discard there); ``moe``, the whole MoE
#: layer checkpointed (router, dispatch, experts, combine: ``moe_layer.py``, ``moe_layer_recompute``); ``mla_up_proj``,
#: MLA's up projections and RoPE (``CheckpointWithoutOutput``: the Q, K, V the core attention read are discarded after
#: its forward and recomputed from the latents, ``multi_latent_attention.py``); ``mlp``, the dense MLP checkpointed
#: (``transformer_layer.py``: ``recompute_mlp`` only ``if not self.is_moe_layer``); ``moe_act``, the routed experts'
#: activation function (``moe/experts.py``: ``CheckpointWithoutOutput`` around the activation, its output, the
#: expert fc2's input, discarded after fc2's forward and recomputed in backward; Megatron-Core requires
#: ``--moe-grouped-gemm``, ``transformer_config.py``). Megatron's other choices (``shared_experts``, ...) are not
#: charged, so not accepted
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe", "mla_up_proj", "mlp", "moe_act")
#: Megatron-Core ``--offload-modules`` choices (``TransformerConfig.__post_init__`` ``allowed_modules`` at d98e8a64)
MEGATRON_OFFLOAD_MODULES = (
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
    "expert_fc1",
    "moe_act",
    "fused_group_mlp",
    "gdp_qkv",
)
#: the ones this model charges (:mod:`costmodel.physics.mechanics.fg_offload`): the routed experts' fc1 input and
#: activation input (``moe/experts.py`` at d98e8a64); the attention-side, norm, fused-MLP and GDP groups are not
OFFLOAD_MODULES = ("expert_fc1", "moe_act")
EP_DISPATCHERS = ("alltoall", "deepep", "hybridep")
CP_IMPLS = ("ring", "torch")
#: dtypes gradients are accumulated and data-parallel reduced in (:func:`costmodel.physics.memory.stage_memory.grad_elem_bytes`)
GRAD_DTYPES = ("fp32", "fp16", "bf16")
LOSS_IMPLS = ("fused", "fp32", "te")  # ParallelConfig.loss_impl
PP_GRAD_REDUCES = ("step", "microbatch")  # ParallelConfig.pp_grad_reduce
SP_SAVED_INPUTS = ("sharded", "gathered")  # ParallelConfig.sp_saved_inputs
MODULE_LAYOUTS = ("fused", "hf")  # ParallelConfig.module_layout
OPTIMIZER_DTYPES = ("fp32", "bf16")

#: pieces per overlappable collective beyond which a plan is refused (a sanity bound: the frameworks
#: that chunk run chunks = tp, and the op graph holds a node per piece: Llama-3-8B on 16 GPUs at
#: tp=8, chunks=256 evaluates in 1.4 s (the whole command), 100,000 ran over ten minutes at 2 GB, issue 24)
MAX_CHUNKS = 256


def check_fields(cfg) -> None:
    """Every field's check, in order (degrees, flags, choices, recompute, precision, offload, stages, bucket)."""
    for f in ("tp", "pp", "dp", "ep", "cp", "mb", "vp", "chunks"):
        v = getattr(cfg, f)
        if type(v) is not int or v < 1:  # only then can it be wrong (the search builds many plans)
            _positive_int(f, v)
    if cfg.chunks > MAX_CHUNKS:
        raise SpecError(
            "chunks",
            cfg.chunks,
            f"at most {MAX_CHUNKS} (a sanity bound: Megatron-Core and FSDP2 "
            "run chunks = tp; the op graph holds a piece per chunk of every collective)",
        )
    for f in ("sp", "flash_attention", "fused_elementwise", "fsdp_copies", "pp_free_stage_inputs", "ep_overlap"):
        if type(getattr(cfg, f)) is not bool:
            raise SpecError(f, getattr(cfg, f), "true or false")
    fn = cfg.fused_norm
    if not (fn is None or (type(fn) is bool and (fn or not cfg.fused_elementwise))):
        raise SpecError("fused_norm", cfg.fused_norm, "true, or false only with fused_elementwise false, or unset")
    if cfg.zero not in (0, 1, 2, 3) or isinstance(cfg.zero, bool):
        raise SpecError("zero", cfg.zero, "one of 0, 1, 2, 3")
    if cfg.ep_dispatcher not in EP_DISPATCHERS:
        raise SpecError("ep_dispatcher", cfg.ep_dispatcher, f"one of {', '.join(EP_DISPATCHERS)}")
    if cfg.cp_impl not in CP_IMPLS:
        raise SpecError("cp_impl", cfg.cp_impl, f"one of {', '.join(CP_IMPLS)}")
    if cfg.framework not in FRAMEWORKS:
        raise SpecError("framework", cfg.framework, f"one of {', '.join(FRAMEWORKS)}")
    if cfg.grad_dtype not in GRAD_DTYPES:
        raise SpecError("grad_dtype", cfg.grad_dtype, f"one of {', '.join(GRAD_DTYPES)}")
    if cfg.loss_impl not in LOSS_IMPLS:
        raise SpecError("loss_impl", cfg.loss_impl, f"one of {', '.join(LOSS_IMPLS)}")
    if cfg.loss_impl == "te" and cfg.framework != "megatron":
        raise SpecError(
            "loss_impl", cfg.loss_impl, "fused or fp32 unless framework=megatron (te: Megatron-Core's flag)"
        )
    if cfg.pp_grad_reduce != "step" and (
        cfg.pp_grad_reduce not in PP_GRAD_REDUCES or cfg.framework != "fsdp2" or cfg.zero != 2
    ):
        raise SpecError(
            "pp_grad_reduce",
            cfg.pp_grad_reduce,
            f"one of {', '.join(PP_GRAD_REDUCES)} ('microbatch' only with framework=fsdp2 and zero=2: "
            "the other frameworks' ZeRO stages fix when gradients are reduced)",
        )
    if cfg.sp_saved_inputs not in SP_SAVED_INPUTS or (cfg.sp_saved_inputs == "gathered" and cfg.framework != "fsdp2"):
        raise SpecError(
            "sp_saved_inputs",
            cfg.sp_saved_inputs,
            f"one of {', '.join(SP_SAVED_INPUTS)} ('gathered' only with framework=fsdp2: PyTorch "
            "DTensor tensor parallelism)",
        )
    if cfg.module_layout not in MODULE_LAYOUTS or (cfg.module_layout != "fused" and cfg.framework == "megatron"):
        raise SpecError(
            "module_layout",
            cfg.module_layout,
            f"one of {', '.join(MODULE_LAYOUTS)} ('fused' only under framework=megatron)",
        )
    if cfg.fsdp_copies and cfg.framework != "fsdp2":
        raise SpecError("fsdp_copies", cfg.fsdp_copies, "false unless framework=fsdp2 (FSDP2's per-parameter copies)")
    if cfg.recompute not in RECOMPUTE:
        raise SpecError("recompute", cfg.recompute, f"one of {', '.join(RECOMPUTE)}")
    if cfg.recompute_layers is not None:
        _positive_int("recompute_layers", cfg.recompute_layers, allow_zero=True)
        if cfg.recompute != "full":
            raise SpecError("recompute_layers", cfg.recompute_layers, "unset unless recompute='full'")
    if cfg.recompute_modules is not None:
        mods = tuple(cfg.recompute_modules) if isinstance(cfg.recompute_modules, (list, tuple)) else None
        bad = [m for m in (mods or ()) if m not in RECOMPUTE_MODULES]
        if mods is None or not mods or bad:
            raise SpecError(
                "recompute_modules",
                bad[0] if bad else cfg.recompute_modules,
                f"a non-empty list of {', '.join(RECOMPUTE_MODULES)}",
            )
        if cfg.recompute != "selective" or cfg.framework != "megatron":
            raise SpecError(
                "recompute_modules",
                ",".join(mods),
                "unset unless recompute='selective' under framework=megatron (Megatron-Core's --recompute-modules)",
            )
        object.__setattr__(cfg, "recompute_modules", tuple(dict.fromkeys(mods)))
    if cfg.optimizer_dtype not in OPTIMIZER_DTYPES:
        raise SpecError("optimizer_dtype", cfg.optimizer_dtype, f"one of {', '.join(OPTIMIZER_DTYPES)}")
    if cfg.optimizer_dtype == "bf16" and not (
        cfg.framework == "fsdp2" or (cfg.framework == "megatron" and cfg.zero == 1)
    ):
        raise SpecError(
            "optimizer_dtype",
            cfg.optimizer_dtype,
            "fp32 unless framework=fsdp2 (a BF16 model under "
            "torch.optim.Adam) or framework=megatron with zero=1 (NeMo's distributed_fused_adam with "
            "optim.dtype bf16); Megatron's other optimizers and DeepSpeed keep an FP32 master copy",
        )
    if not isinstance(cfg.fp8_param_gather, bool):
        raise SpecError("fp8_param_gather", cfg.fp8_param_gather, "true or false")
    if cfg.fp8_param_gather and cfg.optimizer_dtype != "fp32":
        # NeMo megatron_base_model.py (r2.0.0rc1): with fp8_params distributed_fused_adam stores a parameter copy
        # in the optimizer dtype (store_params=True), a layout this model does not charge
        raise SpecError(
            "fp8_param_gather",
            cfg.fp8_param_gather,
            "false with optimizer_dtype=bf16 (FP8 "
            "parameters make NeMo's distributed_fused_adam keep a BF16 parameter copy; not modelled)",
        )
    if cfg.fp8_param_gather and (cfg.framework != "megatron" or cfg.zero < 1):
        # megatron/training/arguments.py at d98e8a64: "--fp8-param-gather only supported with distributed
        # optimizer, torch fsdp2, megatron fsdp, or inference mode"
        raise SpecError(
            "fp8_param_gather",
            cfg.fp8_param_gather,
            "false unless framework=megatron with zero >= 1 (the distributed optimizer or Megatron FSDP)",
        )
    if cfg.optimizer_offload_fraction != 0.0 or cfg.overlap_cpu_optimizer_d2h_h2d is not False:
        check_offload(cfg)
    if cfg.activation_offload_layers != 0:
        check_act_offload(cfg)
    if cfg.offload_modules is not None:
        check_fg_offload(cfg)
    if cfg.ep_overlap:
        check_ep_overlap(cfg)
    if cfg.layers_per_stage is not None and cfg.layout is None:
        lps = tuple(cfg.layers_per_stage)
        object.__setattr__(cfg, "layers_per_stage", lps)
        if len(lps) != cfg.pp or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in lps):
            raise SpecError(
                "layers_per_stage",
                ",".join(map(str, lps)),
                f"{cfg.pp} integers >= 1, one per pipeline stage (pp={cfg.pp}; a stage holds at least one layer)",
            )
    if not isinstance(cfg.bucket_bytes, (int, float)) or not 0 <= cfg.bucket_bytes < float("inf"):  # nan, inf too
        raise SpecError("bucket_mb", cfg.bucket_bytes, "a non-negative size in MB (0 = no overlap)")


def check_ep_overlap(cfg) -> None:
    """Megatron-Core's refusals of ``--overlap-moe-expert-parallel-comm`` that need no model
    (``megatron/core/transformer/transformer_config.py@d98e8a6`` ``__post_init__``; the pipeline, MTP and
    MoE-layer checks, which a layer's own config does not carry: :func:`costmodel.physics.validity.validate_config`)."""
    rules = (
        (cfg.framework != "megatron", "false unless framework=megatron (Megatron-Core's combined 1F1B schedule)"),
        (cfg.ep < 2, "false with ep=1 (it is only supported with expert model parallelism)"),
        (cfg.recompute == "full", "false with full recompute (disable full recomputation)"),
        (cfg.recompute_layers is not None, "false with a recompute layer count (recompute_num_layers must be None)"),
        ("moe" in (cfg.recompute_modules or ()), "false with moe in the recompute modules"),
    )
    for broken, allowed in rules:
        if broken:
            raise SpecError("ep_overlap", True, allowed)


def check_act_offload(cfg) -> None:
    """Megatron's refusals of ``--cpu-offloading-num-layers`` that need no model
    (``megatron/core/transformer/transformer_config.py@d98e8a64 __post_init__``; :mod:`costmodel.physics.mechanics.act_offload`)."""
    n = cfg.activation_offload_layers
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise SpecError(
            "activation_offload_layers", n, "an integer >= 0 (Megatron --cpu-offloading-num-layers; 0 = off)"
        )
    if cfg.framework != "megatron":
        raise SpecError(
            "activation_offload_layers",
            n,
            "0 unless framework=megatron (Megatron-Core's --cpu-offloading-num-layers)",
        )
    if cfg.pp > 1:
        raise SpecError(
            "activation_offload_layers",
            n,
            "0 with pp > 1 (Megatron: no support for pipeline parallelism with CPU offloading)",
        )
    if cfg.recompute != "none" or cfg.recompute_modules is not None:
        raise SpecError(
            "activation_offload_layers",
            n,
            "0 with recompute (Megatron: CPU offloading does not work when activation recomputation is enabled)",
        )


def check_fg_offload(cfg) -> None:
    """Megatron-Core's refusals of ``--fine-grained-activation-offloading --offload-modules`` that need no model
    (``transformer_config.py@d98e8a64 __post_init__``), and the choices not modelled here."""
    mods = tuple(cfg.offload_modules) if isinstance(cfg.offload_modules, (list, tuple)) else None
    unknown = [m for m in (mods or ()) if m not in MEGATRON_OFFLOAD_MODULES]
    if mods is None or not mods or unknown:  # Megatron: "Invalid choices for offload_modules", or none given
        raise SpecError(
            "offload_modules",
            unknown[0] if unknown else cfg.offload_modules,
            f"a non-empty list of {', '.join(OFFLOAD_MODULES)} (Megatron --offload-modules)",
        )
    other = [m for m in mods if m not in OFFLOAD_MODULES]
    if other:
        raise SpecError(
            "offload_modules",
            other[0],
            f"one of {', '.join(OFFLOAD_MODULES)} (Megatron's {other[0]} offload is not modelled)",
        )
    rules = (
        (cfg.framework != "megatron", "unset unless framework=megatron (Megatron-Core's --offload-modules)"),
        (
            cfg.activation_offload_layers != 0,
            "unset with activation_offload_layers (Megatron: fine_grained_activation_offloading cannot be "
            "enabled with cpu_offloading)",
        ),
        (
            "moe" in (cfg.recompute_modules or ()),
            "unset with moe in the recompute modules (Megatron: cannot offload inside a recomputed MoE layer)",
        ),
        (
            cfg.recompute == "full",
            "unset with full recompute (a checkpointed layer saves only its input: not modelled)",
        ),
    )
    for broken, allowed in rules:
        if broken:
            raise SpecError("offload_modules", ",".join(mods), allowed)
    object.__setattr__(cfg, "offload_modules", tuple(dict.fromkeys(mods)))


def check_offload(cfg) -> None:
    """Megatron's refusals of ``--optimizer-cpu-offload`` / ``--overlap-cpu-optimizer-d2h-h2d`` that need no model."""
    # megatron/training/arguments.py@d98e8a64 validate_args: --optimizer-cpu-offload asserts
    # --use-precision-aware-optimizer (and --fp8-recipe delayed with --fp8-param-gather);
    # megatron/core/optimizer/__init__.py@d98e8a64: the precision-aware optimizer needs the distributed
    # optimizer; optimizer_config.py@d98e8a64: and --optimizer adam
    f = cfg.optimizer_offload_fraction
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "a number from 0 to 1 (the fraction of the optimizer state on the CPU; 0 = no offload)",
        )
    object.__setattr__(cfg, "optimizer_offload_fraction", float(f))
    if type(cfg.overlap_cpu_optimizer_d2h_h2d) is not bool:
        raise SpecError("overlap_cpu_optimizer_d2h_h2d", cfg.overlap_cpu_optimizer_d2h_h2d, "true or false")
    if f > 0 and (cfg.framework != "megatron" or cfg.zero != 1):
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "0 unless framework=megatron with zero=1 (Megatron's "
            "--optimizer-cpu-offload needs --use-precision-aware-optimizer, which needs the "
            "distributed optimizer)",
        )
    if f > 0 and cfg.optimizer_dtype != "fp32":
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "0 with optimizer_dtype=bf16 (Megatron's HybridDeviceOptimizer keeps FP32 master weights)",
        )
    if f > 0 and cfg.fp8_param_gather:
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "0 with fp8_param_gather (Megatron needs --fp8-recipe delayed then, a recipe this model does not take)",
        )
    if cfg.overlap_cpu_optimizer_d2h_h2d and f == 0:
        raise SpecError("overlap_cpu_optimizer_d2h_h2d", True, "false unless optimizer_offload_fraction > 0")
