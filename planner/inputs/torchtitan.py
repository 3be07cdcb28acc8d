"""A torchtitan v0.2.2 job-config TOML (``torchtitan/config/job_config.py`` at tag v0.2.2, 73a0e69) read
into planner fields for ``evaluate --torchtitan-config`` (:mod:`planner.inputs`): the format
``--emit fsdp2`` writes (:func:`planner.emit.torchtitan_lines`). Keys absent take that version's
defaults (:data:`costmodel.frameworks.defaults.TORCHTITAN_V022_DEFAULTS`); unknown keys of the sections
read are refused by name.
"""

from __future__ import annotations

import tomllib

from costmodel.spec.errors import SpecError
from costmodel.frameworks.defaults import TORCHTITAN_V022_DEFAULTS

from .base import FrameworkInput


#: the v0.2.2 job-config keys read, by section (torchtitan/config/job_config.py at 73a0e69)
TORCHTITAN_READ = {
    "parallelism": {
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "expert_parallel_comm_backend",
    },
    "activation_checkpoint": {
        "mode",
        "selective_ac_option",
        "per_op_sac_force_recompute_mm_shapes_by_fqns",
        "early_stop",
        "memory_budget",
        "visualize_memory_budget_pareto",
        "preserve_rng_state",
        "determinism_check",
        "debug",
    },
    "compile": {"enable", "components", "backend"},
}
SCHEDULES = {"1F1B": False, "Interleaved1F1B": True}


def _count(section: dict, sec: str, key: str, default, *, auto: bool = False):
    """``section[key]`` (else ``default``) as a positive integer; ``auto``: -1 too (torchtitan's "the rest" /
    "local x DP"). A string, float, 0 or inf was a TypeError, ZeroDivisionError or OverflowError traceback."""
    v = section.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not (v >= 1 or (auto and v == -1)):
        raise SpecError(f"torchtitan_config.{sec}.{key}", v, "a positive integer" + (" or -1" if auto else ""))
    return v


def parse_torchtitan_text(text: str) -> FrameworkInput:
    """Planner fields of a torchtitan v0.2.2 job TOML (keys absent: that version's defaults)."""
    try:
        t = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError("torchtitan_config", str(e).splitlines()[0], "torchtitan job-config TOML") from None
    for sec, keys in TORCHTITAN_READ.items():
        for k in t.get(sec, {}):
            if k not in keys:
                raise SpecError(f"torchtitan_config.{sec}", k, "a key of torchtitan v0.2.2's job config")
    dflt = TORCHTITAN_V022_DEFAULTS
    par, tr, ac = t.get("parallelism", {}), t.get("training", {}), t.get("activation_checkpoint", {})
    for sec, given in (("parallelism", par), ("training", tr), ("activation_checkpoint", ac)):
        if not isinstance(given, dict):
            raise SpecError(f"torchtitan_config.{sec}", given, "a TOML table")
    rep = _count(par, "parallelism", "data_parallel_replicate_degree", dflt["data_parallel_replicate_degree"])
    shard = _count(par, "parallelism", "data_parallel_shard_degree", dflt["data_parallel_shard_degree"], auto=True)
    if rep > 1 and shard not in (1,):
        raise SpecError(
            "torchtitan_config.parallelism.data_parallel_shard_degree",
            shard,
            "1 with data_parallel_replicate_degree > 1 (HSDP is not modelled)",
        )
    s = {"framework": "fsdp2"}
    for key, name in (
        ("tp", "tensor_parallel_degree"),
        ("pp", "pipeline_parallel_degree"),
        ("cp", "context_parallel_degree"),
        ("ep", "expert_parallel_degree"),
    ):
        s[key] = _count(par, "parallelism", name, 1)
    s["sp"] = s["tp"] > 1  # torchtitan's TP is always sequence-parallel
    if rep > 1 or shard > 1:
        s["dp"] = rep * shard
    pp = s["pp"]
    policy = par.get("fsdp_reshard_after_forward", dflt["fsdp_reshard_after_forward"])
    if policy not in ("default", "always", "never"):
        raise SpecError("torchtitan_config.parallelism.fsdp_reshard_after_forward", policy, "default, always or never")
    s["zero"] = 0 if rep > 1 else (3 if policy == "always" or (policy == "default" and pp == 1) else 2)
    s["chunks"] = s["tp"] if par.get("enable_async_tensor_parallel", False) and s["tp"] > 1 else 1
    sched = par.get("pipeline_parallel_schedule", dflt["pipeline_parallel_schedule"])
    if pp > 1 and sched not in SCHEDULES:
        raise SpecError("torchtitan_config.parallelism.pipeline_parallel_schedule", sched, "1F1B or Interleaved1F1B")
    if par.get("pipeline_parallel_layers_per_stage") is not None:
        _count(par, "parallelism", "pipeline_parallel_layers_per_stage", None)
    deferred = {
        "layers_per_stage": par.get("pipeline_parallel_layers_per_stage"),
        "less": (
            par.get("pipeline_parallel_first_stage_less_layers", 1),
            par.get("pipeline_parallel_last_stage_less_layers", 1),
        ),
        "interleaved": pp > 1 and SCHEDULES.get(sched, False),
    }
    parts = par.get("module_fqns_per_model_part")
    if pp > 1 and parts is not None:
        # the modules of every virtual stage, stated: pipeline_llm takes them as they are (the layers-per-stage and
        # less-layers keys only feed generate_llm_fqn_per_model_part, which is then not called)
        s["layout"] = model_parts_layout(parts, pp, interleaved=deferred["interleaved"])
        s["vp"] = len(parts) // pp
        deferred.update(layers_per_stage=None, less=(0, 0), interleaved=False)
    local = _count(tr, "training", "local_batch_size", dflt["local_batch_size"])
    s["mb"] = (
        local
        if pp == 1
        else _count(par, "parallelism", "pipeline_parallel_microbatch_size", dflt["pipeline_parallel_microbatch_size"])
    )
    deferred["local_batch"] = local
    deferred["global_batch"] = _count(tr, "training", "global_batch_size", dflt["global_batch_size"], auto=True)
    if "seq_len" in tr:
        s["seq"] = _count(tr, "training", "seq_len", None)
    param = tr.get("mixed_precision_param", dflt["mixed_precision_param"])
    if param != "bfloat16":
        raise SpecError("torchtitan_config.training.mixed_precision_param", param, "bfloat16 (the planner's dtypes)")
    model_dtype = tr.get("dtype", "float32")
    if model_dtype not in ("float32", "bfloat16"):
        raise SpecError("torchtitan_config.training.dtype", model_dtype, "float32 or bfloat16")
    if model_dtype == "bfloat16":  # train.py builds the model in BF16: AdamW updates it in place, no FP32 master
        s["optimizer_dtype"] = "bf16"
    s["dtype"] = _recipe(t)
    if s["ep"] > 1:  # "No effect for non-MoE models or when ep = 1"
        backend = par.get("expert_parallel_comm_backend", "standard")
        if backend not in ("standard", "deepep"):
            raise SpecError("torchtitan_config.parallelism.expert_parallel_comm_backend", backend, "standard or deepep")
        s["ep_dispatcher"] = "deepep" if backend == "deepep" else "alltoall"
    if s["cp"] > 1:  # PyTorch's context_parallel (distributed/context_parallel.py), not Transformer Engine's ring
        rotate = par.get("context_parallel_rotate_method", "allgather")
        if rotate != "allgather":
            raise SpecError(
                "torchtitan_config.parallelism.context_parallel_rotate_method",
                rotate,
                "allgather (the K/V exchange modelled: cp_impl torch)",
            )
        s["cp_impl"] = "torch"
    mode = ac.get("mode", dflt["mode"])
    option = str(ac.get("selective_ac_option", dflt["selective_ac_option"]))
    if mode == "none":
        s["recompute"] = "none"
    elif mode == "full":
        s["recompute"] = "full"
    elif mode == "selective" and option == "op":
        s["recompute"] = "op_sac"
    elif mode == "selective" and option.isdigit() and int(option) >= 1:
        s["recompute"] = "full"  # layer SAC: every option-th block fully checkpointed (apply_ac, ac_freq)
        deferred["ac_freq"] = int(option)
    else:
        raise SpecError(
            "torchtitan_config.activation_checkpoint.mode",
            f"{mode}/{option}",
            "none, full, or selective with selective_ac_option 'op' or a positive integer",
        )
    compiled = _compiled(t.get("compile", {}))
    s["fused_elementwise"] = "model" in compiled  # each TransformerBlock compiled: fused element-wise kernels
    # components/loss.py: cross_entropy(pred.float(), labels), compiled with "loss" (fused), else eager FP32 softmax
    s["loss_impl"] = "fused" if "loss" in compiled else "fp32"
    if s["chunks"] > 1 and "model" not in compiled:
        raise SpecError(
            "torchtitan_config.parallelism.enable_async_tensor_parallel",
            True,
            "false without compile.enable and 'model' in compile.components (torchtitan maybe_enable_async_tp: "
            "'Async TP requires 'model' in --compile.components and --compile.enable')",
        )
    if t.get("model", {}).get("norm_type") == "fused_rmsnorm" and not s["fused_elementwise"]:
        s["fused_norm"] = True  # torchtitan 2024-04..2025-02: its Triton RMSNorm beside eager ops (ParallelConfig)
    s["bucket_mb"] = 100  # FSDP2 reduce-scatters per module, overlapped (costmodel.frameworks.defaults)
    # torchtitan v0.2.2 trains no multi-token-prediction module (models/deepseek_v3 has none): a model's MTP layers
    # are not run
    return FrameworkInput(source="torchtitan_config", stated=s, deferred=deferred, mtp_layers=0)


def _compiled(compile_section) -> set:
    """What ``[compile]`` compiles: ``components`` (default model and loss) when ``enable``, else nothing."""
    if not isinstance(compile_section, dict):
        raise SpecError("torchtitan_config.compile", compile_section, "a TOML table")
    if not compile_section.get("enable", TORCHTITAN_V022_DEFAULTS["enable"]):
        return set()
    components = compile_section.get("components", ["model", "loss"])
    components = components.split(",") if isinstance(components, str) else components
    if not isinstance(components, list) or not set(components) <= {"model", "loss"}:
        raise SpecError("torchtitan_config.compile.components", components, "a list of model and loss")
    return set(components)


#: the converters read (``model.converters``; torchtitan v0.2.2 ``components/quantization``): the float8 linear
#: converter with dynamic per-tensor scaling (``quantize.linear.float8``; ``float8``, its name before the
#: quantization refactor 8a2686c4, runs the same Float8Linear)
FLOAT8_LINEAR = ("quantize.linear.float8", "float8")


def _recipe(t: dict) -> str:
    """The precision recipe of the TOML: ``fp8-tensorwise`` for torchao's Float8Linear with its default
    (tensorwise: dynamic per-tensor scales, ``Float8LinearConfig()``), else ``bf16``; converters the planner has no
    recipe for (row-wise float8, MX, grouped-GEMM FP8) are refused."""
    model = t.get("model", {})
    converters = model.get("converters", []) if isinstance(model, dict) else []
    converters = converters.split(",") if isinstance(converters, str) else converters
    if not isinstance(converters, list):
        raise SpecError("torchtitan_config.model.converters", converters, "a list of converter names")
    other = [c for c in converters if c not in FLOAT8_LINEAR]
    if other:
        raise SpecError(
            "torchtitan_config.model.converters",
            ",".join(map(str, other)),
            "quantize.linear.float8 only (MX and grouped-GEMM FP8 converters are not modelled)",
        )
    if not converters:
        return "bf16"
    float8 = (
        (((t.get("quantize") or {}).get("linear") or {}).get("float8") or {})
        if isinstance(t.get("quantize"), dict)
        else {}
    )
    recipe = float8.get("recipe_name") if isinstance(float8, dict) else None
    if recipe not in (None, "tensorwise"):
        raise SpecError(
            "torchtitan_config.quantize.linear.float8.recipe_name",
            recipe,
            "tensorwise or unset (row-wise scaling is not a planner recipe)",
        )
    return "fp8-tensorwise"


def model_parts_layout(parts, pp: int, *, interleaved: bool) -> str:
    """The planner layout (Megatron-Core's text, :mod:`costmodel.spec.layout`) of torchtitan's
    ``module_fqns_per_model_part``: one list of module names per virtual stage, stage ``k`` on rank ``k % pp``
    (``pipeline_module_split._get_stage_indices``, style "loop" for 1F1B and Interleaved1F1B), ``tok_embeddings``
    the embedding, ``layers.<i>`` decoder layers in model order, ``norm`` with ``output`` the head and loss.

    >>> model_parts_layout([["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "norm", "output"]], 2,
    ...                    interleaved=False)
    'Ett|tL'
    """
    from costmodel.spec.layout import Layout, VirtualStage

    key = "torchtitan_config.parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not parts or not all(isinstance(p, list) and p for p in parts):
        raise SpecError(key, parts, "a list of non-empty lists of module names, one per virtual stage")
    if len(parts) % pp or (not interleaved and len(parts) != pp):
        raise SpecError(
            key,
            f"{len(parts)} parts",
            f"{pp} parts with 1F1B (one stage per rank), a multiple of pipeline_parallel_degree={pp} with "
            "Interleaved1F1B (pipeline_module_split: num_stages divisible by the PP degree)",
        )
    stages, nxt = [], 0
    for names in parts:
        head = {n for n in names if n in ("norm", "output")}
        ids = sorted(int(n[7:]) for n in names if isinstance(n, str) and n.startswith("layers.") and n[7:].isdigit())
        other = [n for n in names if n not in head and n != "tok_embeddings" and not str(n).startswith("layers.")]
        if (
            other
            or len(ids) + len(head) + names.count("tok_embeddings") != len(names)
            or ids != list(range(nxt, nxt + len(ids)))
        ):
            raise SpecError(
                key,
                ",".join(map(str, names)),
                f"tok_embeddings, layers.<i> in model order (layers.{nxt} next, each once), norm or output",
            )
        decoder, nxt = len(ids), nxt + len(ids)
        if head and head != {"norm", "output"}:
            raise SpecError(key, ",".join(sorted(head)), "norm and output in the same part (the head and the loss)")
        stages.append(VirtualStage(decoder=decoder, embedding="tok_embeddings" in names, loss=bool(head)))
    return str(Layout(pp=pp, stages=stages))
