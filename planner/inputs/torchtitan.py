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
    converters = t.get("model", {}).get("converters", [])
    converters = converters.split(",") if isinstance(converters, str) else converters
    s["dtype"] = "fp8" if any("float8" in c for c in converters) else "bf16"
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
    s["fused_elementwise"] = bool(t.get("compile", {}).get("enable", dflt["enable"]))
    if t.get("model", {}).get("norm_type") == "fused_rmsnorm" and not s["fused_elementwise"]:
        s["fused_norm"] = True  # torchtitan 2024-04..2025-02: its Triton RMSNorm beside eager ops (ParallelConfig)
    s["bucket_mb"] = 100  # FSDP2 reduce-scatters per module, overlapped (costmodel.frameworks.defaults)
    return FrameworkInput(source="torchtitan_config", stated=s, deferred=deferred)
