"""A :class:`~planner.inputs.FrameworkInput` made into the problem and plan ``evaluate`` scores.

What the configuration states is fixed; a planner flag may add what it cannot state (and is refused
when it says otherwise); every knob left is the framework's default
(:func:`costmodel.frameworks.defaults.framework_defaults`). :func:`resolve` returns the sources of
every knob, for the report (``config_source``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.frameworks.defaults import (
    TORCHTITAN_V022_DEFAULTS,
    framework_defaults,
    megatron_ddp_bucket_elements,
    megatron_global_batch,
)
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.spec.specs import ModelSpec
from costmodel.frameworks.stacks import apply_stack
from costmodel.spec.units import MB

from .flags import FIXABLE, config_from_args, stack_of, with_mtp_layers
from .tuning import TUNING  # the tuning knobs, filled from the framework's defaults when unstated
from .inputs import FrameworkInput
from .inputs.deepspeed import deepspeed_batch
from .inputs.megatron import check_model
from .problem import make_workload, resolve_cluster, resolve_model

#: knobs a configuration may state (CLI dest names): the degrees and tuning knobs (:data:`planner.flags.FIXABLE` but
#: ``dma``, which no configuration states), then these; ``fused_elementwise`` is not a flag
CLI_KEYS = tuple(k for k in FIXABLE if k != "dma") + (
    "framework",
    "grad_dtype",
    "flash_attention",
    "ep_dispatcher",
    "ep_overlap",
    "cp_impl",  # --cp-impl: torchtitan's TOML states torch (context_parallel_degree > 1); a flag saying ring is refused
    "optimizer_dtype",  # --optimizer-dtype: torchtitan's training.dtype = "bfloat16" (a BF16 model, no FP32 master)
    "fp8_param_gather",  # --fp8-param-gather: was read from the line and dropped here (its plan re-ran 0.8% slower)
    "recompute_modules",  # --recompute-modules: was dropped here (the published Qwen3 plans re-ran -7.3% to +23.5%)
    "loss_impl",  # --cross-entropy-loss-fusion --cross-entropy-fusion-impl te: was not read (26 published plans)
    # the offloads (planner.megatron_args offload_fields, act_offload_fields, fg_offload_fields), dropped here before:
    "optimizer_offload_fraction",  # --optimizer-cpu-offload --optimizer-offload-fraction F
    "overlap_cpu_optimizer_d2h_h2d",  # --overlap-cpu-optimizer-d2h-h2d
    "activation_offload_layers",  # --cpu-offloading-num-layers N
    "offload_modules",  # --fine-grained-activation-offloading --offload-modules M ...
    "first_stage_layers",
    "last_stage_layers",
    "account_for_embedding",
    "account_for_loss",
    "layers_per_stage",
    "layout",  # --pipeline-model-parallel-layout: was refused (the published DeepSeek-V3 plans that state one)
    "global_batch",
    "seq",
    "gpus",
)


#: CLI keys whose parsed value is a list of tokens, each a tuple of module names (``nargs='+'`` of comma-separated
#: lists: ``--recompute-modules layernorm moe_act`` -> ``[("layernorm",), ("moe_act",)]``), where a configuration
#: states, and the plan holds, one tuple (``("layernorm", "moe_act")``)
MODULE_LISTS = ("recompute_modules", "offload_modules")


def to_cli(k: str, v):
    """A stated value (the plan's form) as the planner's command line parses it: a module tuple as one token.

    >>> to_cli("recompute_modules", ("layernorm", "moe_act")), to_cli("tp", 8)
    ([('layernorm', 'moe_act')], 8)
    """
    return [tuple(v)] if k in MODULE_LISTS and v is not None else v


def from_cli(k: str, v):
    """A parsed command-line value in the plan's form (:func:`to_cli` undone): module tokens joined, in order.

    >>> from_cli("recompute_modules", [("layernorm",), ("moe_act",)])
    ('layernorm', 'moe_act')
    """
    return tuple(m for tok in v for m in tok) if k in MODULE_LISTS and v is not None else v


def _flag(k: str) -> str:
    return "--" + k.replace("_", "-")


def _refuse_contradictions(fi: FrameworkInput, args: argparse.Namespace) -> None:
    for k, v in fi.stated.items():
        cli = from_cli(k, getattr(args, k, None))
        if k == "dtype":
            cli = None if cli == "bf16" else cli  # argparse's default: not told apart from unstated
        if k == "layout" and cli is not None:  # the same layout however it is spelt (the stated one is formatted)
            from costmodel.spec.layout import parse

            try:
                cli = str(parse(cli, fi.stated.get("pp") or 1))
            except SpecError:
                pass  # another rank count: differs, refused below
        if cli is not None and cli != v and k in CLI_KEYS + ("dtype",):
            raise SpecError(k, cli, f"{v!r} as {fi.label} states it (or drop {_flag(k)})")


def _fp8_class(dtype) -> bool:
    """Whether ``--dtype`` names a recipe with FP8-class GEMMs (fp8, fp8-tensorwise, mxfp8, nvfp4 ...)."""
    from costmodel.spec.precision import RECIPES

    return dtype in RECIPES and RECIPES[dtype].gemm_class == "fp8"


def _set(ns, k, v, sources, where):
    setattr(ns, k, to_cli(k, v))  # as the planner's flag would give it (config_from_args reads those)
    sources[where][k] = v


def resolve(fi: FrameworkInput, args: argparse.Namespace):
    """``(model, cluster, workload, config, config_source)`` for ``evaluate`` with a framework input."""
    if fi.source == "deepspeed_config" and fi.stated.get("dtype") == "bf16" and _fp8_class(args.dtype):
        # the JSON's bf16 is the run's half precision; FP8 GEMMs are the model code's (Transformer Engine layers)
        fi = replace(fi, stated={k: v for k, v in fi.stated.items() if k != "dtype"})
    _refuse_contradictions(fi, args)
    if getattr(args, "mode", "train") != "train":
        raise SpecError("mode", args.mode, f"train with --{fi.source.replace('_', '-')} (a training configuration)")
    src = {"from": fi.label, "stated": {}, "flags": {}, "framework_defaults": {}}
    ns = argparse.Namespace(**vars(args))
    for k, v in fi.stated.items():
        if k in CLI_KEYS + ("dtype",):
            _set(ns, k, v, src, "stated")
    if "offload_modules" in fi.stated:  # the modules come with their switch (planner.flags.fg_offload_modules)
        ns.fine_grained_activation_offloading = True
    for k in CLI_KEYS:
        if k not in fi.stated and getattr(args, k, None) not in (None, False):
            src["flags"][k] = from_cli(k, getattr(args, k))
    if args.model is None and fi.model is None:
        raise SpecError("model", None, f"given (--model NAME|FILE; {fi.label} does not state the whole shape)")
    model = resolve_model(args.model) if args.model is not None else ModelSpec(name="megatron-args", **fi.model)
    check_model(fi, model, args.model or "")
    if fi.mtp_layers is not None and getattr(args, "mtp_layers", None) is None and model.mtp_layers != fi.mtp_layers:
        model = replace(model, mtp_layers=fi.mtp_layers)  # Megatron trains MTP only with --mtp-num-layers
    if model.is_moe and fi.moe_drop and any(getattr(model, k) != v for k, v in fi.moe_drop.items()):
        model = replace(model, **fi.moe_drop)  # the line's token dropping (dropless when unstated) is what runs
    model = with_mtp_layers(model, args)
    if fi.dropout and any(getattr(model, k) != v for k, v in fi.dropout.items()):
        model = replace(model, **fi.dropout)  # the line's dropout (Megatron's 0.1 when unstated) is what runs
    if args.cluster is None:
        raise SpecError("cluster", None, "given (--cluster NAME|FILE)")
    cluster = resolve_cluster(args.cluster, ns.gpus)
    cluster = apply_stack(stack_of(ns, cluster), cluster)
    gpus = cluster.num_gpus or None
    for k in ("tp", "pp", "cp", "ep"):  # unstated degrees: 1, every framework's default
        if getattr(ns, k, None) is None and not (k == "pp" and getattr(ns, "layers_per_stage", None)):
            _set(ns, k, 1, src, "framework_defaults")
    tp, cp = ns.tp, ns.cp
    pp = ns.pp or len(ns.layers_per_stage)
    if getattr(ns, "dp", None) is None and gpus and gpus % (tp * pp * cp):  # dp was floored, to 0 where they exceed it
        raise SpecError("tp*pp*cp", tp * pp * cp, f"a divisor of gpus={gpus} (tp={tp} pp={pp} cp={cp}), or give dp")
    dp = getattr(ns, "dp", None) or (gpus // (tp * pp * cp) if gpus else None)
    d = fi.deferred
    if fi.source == "deepspeed_config":
        gb, mb = deepspeed_batch(d["train_batch"], d["micro_batch"], d["grad_acc"], dp)
        if args.global_batch is not None and args.global_batch != gb:
            raise SpecError("global_batch", args.global_batch, f"{gb} as {fi.label} states it (or drop --global-batch)")
        dp = dp or gb // (mb * (d["grad_acc"] or 1))
        _set(ns, "global_batch", gb, src, "stated")
        _set(ns, "mb", mb, src, "stated")
    if dp is None:
        raise SpecError("gpus", None, f"given (the data-parallel size {fi.label} runs over)")
    if not gpus:
        gpus = tp * pp * cp * dp
        cluster = cluster.with_gpus(gpus)
    if d.get("megatron_bucket"):  # --overlap-grad-reduce without --ddp-bucket-size
        elems = megatron_ddp_bucket_elements(dp)
        _set(
            ns,
            "bucket_mb",
            elems * grad_elem_bytes(ParallelConfig(grad_dtype=ns.grad_dtype or "fp32")) / MB,
            src,
            "stated",
        )
    if fi.source == "torchtitan_config":
        _torchtitan_batch_and_stages(fi, args, ns, src, dp, model.layers)
    if fi.source == "megatron_args" and ns.global_batch is None:
        _set(ns, "global_batch", megatron_global_batch(ns.mb or 1, dp), src, "framework_defaults")
    if fi.source == "torchtitan_config" and ns.seq is None:
        _set(ns, "seq", TORCHTITAN_V022_DEFAULTS["seq_len"], src, "framework_defaults")
    defaults = framework_defaults(
        ns.framework,
        dp=dp,
        pp=pp,
        global_batch=ns.global_batch or 1,
        zero=ns.zero,
        tp=tp,
        grad_dtype=ns.grad_dtype or "fp32",
    )
    for k in TUNING:
        if getattr(ns, k, None) is None and k in defaults:
            _set(ns, k, defaults[k], src, "framework_defaults")
    workload = make_workload(ns.global_batch, ns.seq, ns.dtype)
    config = config_from_args(ns, gpus, model.layers)
    for k in ("fused_elementwise", "fused_norm", "cp_impl"):  # settings a configuration states, not flags
        if k in fi.stated:
            config = replace(config, **{k: fi.stated[k]})
            src["stated"][k] = fi.stated[k]
    src["flags"] = {k: v for k, v in src["flags"].items() if k not in src["stated"]}
    return model, cluster, workload, config, src


def _torchtitan_batch_and_stages(fi, args, ns, src, dp: int, layers: int) -> None:
    d, pp = fi.deferred, ns.pp or 1
    gb = d["global_batch"] if d["global_batch"] > 0 else d["local_batch"] * dp  # -1: local x DP, no accumulation
    if args.global_batch is not None and args.global_batch != gb:
        raise SpecError("global_batch", args.global_batch, f"{gb} as {fi.label} states it (or drop --global-batch)")
    _set(ns, "global_batch", gb, src, "stated")
    per_stage = layers // pp
    if pp > 1:
        if tuple(d["less"]) == (1, 1):  # torchtitan counts the embedding and the output as one layer each
            _set(ns, "account_for_embedding", True, src, "stated")
            _set(ns, "account_for_loss", True, src, "stated")
        elif tuple(d["less"]) != (0, 0):
            raise SpecError(
                "torchtitan_config.parallelism.pipeline_parallel_first_stage_less_layers",
                d["less"][0],
                "0 or 1 with last_stage_less_layers the same",
            )
        lps = d["layers_per_stage"]
        if d["interleaved"] and not lps:
            raise SpecError(
                "torchtitan_config.parallelism.pipeline_parallel_layers_per_stage", None, "given with Interleaved1F1B"
            )
        if lps:
            total = layers + (2 if tuple(d["less"]) == (1, 1) else 0)
            if total % (pp * lps):
                raise SpecError(
                    "torchtitan_config.parallelism.pipeline_parallel_layers_per_stage",
                    lps,
                    f"a divisor of layers/pp = {total}/{pp}",
                )
            vp = total // (pp * lps)
            if not d["interleaved"] and vp != 1:
                raise SpecError(
                    "torchtitan_config.parallelism.pipeline_parallel_layers_per_stage",
                    lps,
                    f"{total // pp} with 1F1B (one stage per rank)",
                )
            _set(ns, "vp", vp, src, "stated")
            per_stage = total // pp
    else:
        _set(ns, "vp", 1, src, "stated")
    if d.get("ac_freq", 1) > 1:  # layer SAC: every ac_freq-th transformer block fully checkpointed
        _set(ns, "recompute_layers", per_stage // d["ac_freq"], src, "stated")
