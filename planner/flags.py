"""What the parsed flags mean: the problem's specs, the plan, the search's constraints and plan options.

:mod:`planner.args` defines the flags (argument groups, converters, errors as :class:`SpecError`);
this module turns a parsed ``argparse.Namespace`` into specs (:func:`problem_from_args`), a
:class:`ParallelConfig` (:func:`config_from_args`) and ``recommend``'s constraints
(:func:`constraints_from_args`, read by :func:`planner.limits.limits_of`, as the API's keywords are).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from costmodel.frameworks.rules import check_fields, required_zero
from costmodel.spec.errors import SpecError
from costmodel.frameworks.stacks import DEFAULT_STACK, apply_stack, era_pins, stack_config, with_measured_kernels
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB
from costmodel.spec.plan_checks import FRAMEWORKS
from search.problem import VARIABLES

from .problem import SPLIT_KEYS, make_config, make_workload, resolve_cluster, resolve_model, stage_split

#: the config flags that pin a search variable (:data:`search.problem.VARIABLES`: what ``recommend`` may fix, bound
#: or exclude), each named as its :class:`ParallelConfig` field
FIXABLE = VARIABLES


def problem_from_args(args: argparse.Namespace):
    """``(model, cluster sized to --gpus, workload)`` from the problem arguments.

    With ``--mode infer`` the workload serves ``--input-len``/``--output-len`` requests;
    ``global_batch`` is 1 when ``--global-batch`` is unset (see :func:`inference_batch`).
    """
    model = resolve_model(args.model) if args.model is not None else _missing("model")
    model = with_mtp_layers(model, args)
    cluster = resolve_cluster(args.cluster, args.gpus) if args.cluster is not None else _missing("cluster")
    cluster = apply_stack(stack_of(args, cluster), cluster)
    if getattr(args, "kernels", "fitted") == "measured":
        cluster = with_measured_kernels(stack_of(args, cluster), cluster)
    if getattr(args, "mode", "train") == "infer":
        if args.seq is not None:
            raise SpecError("seq", args.seq, "unset with --mode infer (give --input-len and --output-len)")
        for f, what in (("input_len", "prompt"), ("output_len", "generated")):
            if getattr(args, f) is None:
                raise SpecError(
                    f, None, f"given with --mode infer (--{f.replace('_', '-')} N, {what} tokens per request)"
                )
        return (
            model,
            cluster,
            Workload(
                mode="infer",
                global_batch=args.global_batch or 1,
                dtype=args.dtype,
                input_len=args.input_len,
                output_len=args.output_len,
            ),
        )
    return model, cluster, make_workload(args.global_batch, args.seq, args.dtype)


def with_mtp_layers(model, args: argparse.Namespace):
    """``model`` with the model flags given: ``--mtp-layers`` (its own MTP modules otherwise), ``--moe-capacity-factor``
    and ``--moe-pad-to-capacity`` (the model's token dropping otherwise, dropless unless its file says)."""
    from dataclasses import replace

    given = {
        f: getattr(args, a, None)
        for f, a in (
            ("mtp_layers", "mtp_layers"),
            ("moe_capacity_factor", "moe_capacity_factor"),
            ("moe_pad_to_capacity", "moe_pad_to_capacity"),
        )
    }
    given = {f: v for f, v in given.items() if v is not None and v != getattr(model, f)}
    return replace(model, **given) if given else model


def inference_batch(args: argparse.Namespace, workload, config):
    """The serving workload with ``--global-batch`` defaulting to one request per replica (``dp``)."""
    if args.global_batch is None:
        from dataclasses import replace

        return replace(workload, global_batch=config.dp)
    return workload


def split_from_args(args: argparse.Namespace, layers: int) -> tuple[int, ...] | None:
    """The stage split the split flags state for a model of ``layers`` layers (None: even)."""
    return stage_split(
        layers,
        getattr(args, "pp", None),
        getattr(args, "vp", None),
        layers_per_stage=getattr(args, "layers_per_stage", None),
        **{k: getattr(args, k, None) for k in SPLIT_KEYS},
    )


#: optimizer CPU offload (:mod:`costmodel.physics.mechanics.offload`), ``ParallelConfig`` fields a plan states (recommend: plan
#: options; unstated, :mod:`search.offload_choice` offers them where nothing fits)
OFFLOAD_FIELDS = ("optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d")


def offload_fields(args: argparse.Namespace) -> dict:
    """The :data:`OFFLOAD_FIELDS` the command line gives."""
    return {k: getattr(args, k) for k in OFFLOAD_FIELDS if getattr(args, k, None) is not None}


#: the memory mechanisms of :func:`add_memory_args`, as ``ParallelConfig`` fields
MEMORY_FIELDS = (
    "recompute_modules",
    "fp8_param_gather",
    "optimizer_dtype",
    "loss_impl",
    "pp_grad_reduce",
    "sp_saved_inputs",
    "pp_free_stage_inputs",
)


def memory_fields(args: argparse.Namespace) -> dict:
    """The :data:`MEMORY_FIELDS` the command line gives (``recompute_modules`` as a tuple)."""
    out = {k: getattr(args, k, None) for k in MEMORY_FIELDS}
    if out["recompute_modules"] is not None:  # each token a comma-separated list (_module_list)
        out["recompute_modules"] = tuple(m for tok in out["recompute_modules"] for m in tok)
    return {k: v for k, v in out.items() if v is not None}


def inference_options(args: argparse.Namespace) -> dict:
    """Keyword options of :func:`costmodel.serving.inference.evaluate_inference` from the command line."""
    opts = {"kv_dtype": args.kv_dtype or "bf16"}
    if args.prefill_tokens is not None:
        opts["prefill_tokens"] = args.prefill_tokens
    if getattr(args, "arrival_cv", None) is not None:
        if getattr(args, "request_rate", None) is None:
            raise SpecError("arrival_cv", args.arrival_cv, "given with --request-rate (open-loop arrivals)")
        opts["arrival_cv"] = args.arrival_cv
    for flag in ("engine", "max_seqs", "request_rate"):
        if getattr(args, flag, None) is not None:
            opts[flag] = getattr(args, flag)
    for flag in ("ttft_ms", "tpot_ms"):
        if getattr(args, flag, None) is not None:
            opts[flag.replace("_ms", "_target_s")] = getattr(args, flag) / 1e3
    return opts


def speculation_from_args(args: argparse.Namespace, model):
    """The :class:`costmodel.serving.speculative.Speculation` of ``--spec-tokens --spec-accept --spec-method``
    for ``model``, or ``None``."""
    from costmodel.serving.speculative import speculation_for

    return speculation_for(
        model,
        getattr(args, "spec_tokens", None),
        getattr(args, "spec_accept", None),
        getattr(args, "spec_method", None),
    )


def fg_offload_modules(args: argparse.Namespace) -> tuple[str, ...] | None:
    """``--fine-grained-activation-offloading --offload-modules M ...`` as ``ParallelConfig.offload_modules``; one
    without the other refused (Megatron ignores the modules without the flag and asserts on the flag alone)."""
    on, mods = getattr(args, "fine_grained_activation_offloading", None), getattr(args, "offload_modules", None)
    if mods is not None:
        mods = tuple(dict.fromkeys(m for tok in mods for m in tok))  # each token a comma-separated list
    if bool(on) != (mods is not None):
        raise SpecError(
            "offload_modules",
            ",".join(mods) if mods else "unset",
            "given with --fine-grained-activation-offloading, and that flag with it (Megatron-LM reads neither alone)",
        )
    return mods


def config_from_args(args: argparse.Namespace, gpus: int | None, layers: int | None = None):
    """The :class:`ParallelConfig` of the config arguments; ``dp`` defaults to gpus/(tp*pp*cp).

    ``--sp`` with tp = 1 is refused: sequence parallelism splits activations over the
    tensor-parallel group, and there is none. ``layers`` (the model's) turns the split flags
    into ``layers_per_stage``; ``--layers-per-stage`` alone sets ``pp`` to its length.
    """
    keys = FIXABLE + ("flash_attention", "grad_dtype", "ep_dispatcher", "ep_overlap", "module_layout")
    fields = {**{k: getattr(args, k, None) for k in keys}, **memory_fields(args), **offload_fields(args)}
    if getattr(args, "activation_offload_layers", None) is not None:  # costmodel.physics.mechanics.act_offload
        fields["activation_offload_layers"] = args.activation_offload_layers
    fg = fg_offload_modules(args)
    if fg is not None:  # costmodel.physics.mechanics.fg_offload
        fields["offload_modules"] = fg
    fields["framework"] = framework_from_args(args)
    era = era_pins(stack_of(args))  # what the stack's framework version runs for lack of a choice
    era.pop("exclude", None)  # (search limits: a stated plan is evaluated as stated)
    era.pop("uneven_stages", None)
    for k, v in {**stack_config(stack_of(args)), **era}.items():
        if k != "framework" and fields.get(k) is None:
            fields[k] = v
    if fields["zero"] is None:  # unstated: the one stage the stated optimizer options run on, if any
        fields["zero"] = required_zero(
            fields["framework"], fields.get("optimizer_dtype", "fp32"), fields.get("optimizer_offload_fraction") or 0.0
        )
    lps = getattr(args, "layers_per_stage", None)
    if lps is not None and fields["pp"] is None:
        fields["pp"] = len(lps)
    layout = getattr(args, "layout", None)
    if layout is not None:
        layout_fields(args, fields, layout)
    elif layers is not None:
        fields["layers_per_stage"] = stage_split(
            layers, fields["pp"], fields["vp"], layers_per_stage=lps, **{k: getattr(args, k, None) for k in SPLIT_KEYS}
        )
    config = make_config(gpus, **fields)
    if getattr(args, "sp", None) is True and config.tp == 1:
        raise SpecError("sp", True, "off when tp=1 (sequence parallelism needs --tp 2 or more)")
    impl = cp_impl_of(args)
    if config.cp > 1 and impl is not None:
        config = replace(config, cp_impl=impl)
    return config


def cp_impl_of(args: argparse.Namespace) -> str | None:
    """The plan's context-parallel exchange (``ParallelConfig.cp_impl``): ``--cp-impl`` as stated, else torch for
    ``--emit fsdp2``, else ``None`` (unstated: the ring). ``--emit fsdp2`` writes a torchtitan job, whose CP is
    PyTorch's ``context_parallel`` (``torchtitan/distributed/utils.py`` at v0.2.2, ``create_context_parallel_ctx``),
    not the ring of Transformer Engine that Megatron-Core and NeMo AutoModel's FSDP2 run: ``--cp-impl ring`` with
    it is refused."""
    impl, emit = getattr(args, "cp_impl", None), getattr(args, "emit", None)
    if emit == "fsdp2":
        if impl not in (None, "torch"):
            raise SpecError(
                "cp_impl",
                impl,
                "torch or unset with --emit fsdp2 (torchtitan v0.2.2 runs PyTorch's context_parallel, not the ring)",
            )
        return "torch"
    if impl == "torch":
        check_fields(framework_from_args(args), cp_impl=impl)
    return impl


def stack_of(args: argparse.Namespace, cluster=None) -> str:
    """``--stack``, else the stack a cluster file was prepared for, else :data:`DEFAULT_STACK`."""
    return getattr(args, "stack", None) or (cluster.stack if cluster is not None else DEFAULT_STACK)


def constraints_from_args(args: argparse.Namespace) -> dict:
    """``recommend``'s flags as the constraints of :func:`planner.limits.limits_of` (the translation the API
    and :class:`planner.Planner` use): given config flags pin their variable, ``--pp-max``/``--tp-max`` bound
    it, ``--no-zero3`` excludes ZeRO-3, the search flags and the stack's kernels set the ``Limits`` fields,
    and the split flags pin a stage split."""
    out = {k: getattr(args, k) for k in FIXABLE if getattr(args, k, None) is not None}
    out.update({k: v for k, v in (("pp_max", args.pp_max), ("tp_max", args.tp_max)) if v is not None})
    if args.no_zero3:
        out["exclude"] = {"zero": (3,)}
    for k, v in era_pins(stack_of(args)).items():  # the stack's version lacks the rest, unless stated
        if k == "exclude" and getattr(args, "recompute", None) is None:
            out["exclude"] = {**out.get("exclude", {}), **v}
        elif k != "exclude" and k not in out:
            out[k] = v
    kernels = stack_config(stack_of(args))
    flash = args.flash_attention if args.flash_attention is not None else kernels["flash_attention"]
    out.update(
        headroom_bytes=args.headroom_gib * GiB,
        tp_across_nodes=args.tp_across_nodes,
        flash_attention=flash,
        mb_max=args.mb_max,
        fused_elementwise=kernels["fused_elementwise"],
        vp_max=args.vp_max,
    )
    for k in ("layers_per_stage",) + SPLIT_KEYS:
        if getattr(args, k, None) is not None:
            out[k] = getattr(args, k)
    return out


def limits_from_args(args: argparse.Namespace, layers: int):
    """:class:`search.problem.Limits` of the flags (:func:`constraints_from_args`, for a model of ``layers``
    layers)."""
    from .limits import limits_of

    return limits_of(layers, constraints_from_args(args))[0]


def plan_options(args: argparse.Namespace, model=None) -> tuple:
    """:attr:`search.problem.Problem.options` of the flags: the stated EP dispatcher, memory mechanisms
    (:data:`MEMORY_FIELDS`; every plan runs them: the modules those with selective recompute, the FP8 gather
    those with ZeRO >= 1), optimizer CPU offload (:data:`OFFLOAD_FIELDS`) and activation CPU offload."""
    # a stated offload fraction or layer count is a plan option every plan runs (search.offload_choice,
    # search.act_offload_choice; Problem pins ZeRO-1, or pp = 1 without recompute); a stated 0 is no offload
    offload = {k: v for k, v in offload_fields(args).items() if v}
    if getattr(args, "activation_offload_layers", None):
        offload["activation_offload_layers"] = args.activation_offload_layers
    overlap = getattr(args, "ep_overlap", None)
    if overlap is None and model is not None and model.is_moe and model.mtp_layers <= 1:
        # unstated: an MoE model's EP plans run the all-to-all overlap where Megatron-Core runs it, and the report
        # states what it gives (planner.recommend_report); --no-ep-overlap plans without it
        overlap = framework_from_args(args) == "megatron" and stack_of(args) == DEFAULT_STACK
    given = {
        "ep_dispatcher": getattr(args, "ep_dispatcher", None),
        "ep_overlap": overlap or None,  # off: the default, no option
        "module_layout": getattr(args, "module_layout", None),
        "offload_modules": fg_offload_modules(args),  # a stated plan option every plan runs, not searched
        "cp_impl": "torch" if cp_impl_of(args) == "torch" else None,  # plans with cp > 1 (search.choice); ring: default
        **memory_fields(args),
        **offload,
    }
    return tuple((k, v) for k, v in given.items() if v is not None)


def problem_of(args: argparse.Namespace, model, cluster, workload):
    """The search problem of ``recommend``'s flags: stated config flags pinned, the rest free."""
    from search.problem import Problem

    return Problem(
        model=model,
        cluster=cluster,
        workload=workload,
        limits=limits_from_args(args, model.layers),
        framework=framework_from_args(args),
        grad_dtype=getattr(args, "grad_dtype", None) or "fp32",
        options=plan_options(args, model),
    )


def layout_fields(args: argparse.Namespace, fields: dict, layout: str) -> None:
    """``--layout``: the one way the split is stated (Megatron-Core refuses it with the first/last or
    account-for flags, TransformerConfig.__post_init__), for ``--pp`` ranks; a ``--vp`` given must be its
    virtual stages per rank (transformer_config.py: "virtual_pipeline_model_parallel_size conflicts")."""
    for k in ("layers_per_stage",) + SPLIT_KEYS:
        if getattr(args, k, None) not in (None, False):
            raise SpecError(k, getattr(args, k), "unset with --layout (give the split one way)")
    if fields["pp"] is None:
        raise SpecError("pp", None, "given with --layout (the layout's virtual stages are read for pp ranks)")
    from costmodel.spec.layout import parse

    lay = parse(layout, fields["pp"])
    if fields["vp"] is not None and fields["vp"] != lay.vp:
        raise SpecError(
            "vp",
            fields["vp"],
            f"{lay.vp}, the layout's virtual stages per rank ({len(lay.stages)} stages / pp={fields['pp']}), or unset",
        )
    fields["layout"] = lay


def framework_from_args(args: argparse.Namespace) -> str:
    """``--framework``, else the training format of ``--emit`` (the plan is evaluated for the
    framework it is emitted for), else the stack's framework (``megatron`` under the default stack);
    both given and different is refused."""
    fw, emit = getattr(args, "framework", None), getattr(args, "emit", None)
    if emit not in FRAMEWORKS:
        emit = None
    if fw and emit and fw != emit:
        raise SpecError(
            "emit", emit, f"{fw} with --framework {fw} (the plan is evaluated for the framework it is emitted for)"
        )
    return fw or emit or stack_config(stack_of(args))["framework"]


def check_contradictions(args: argparse.Namespace) -> None:
    """Refuse flags that contradict each other (SpecError naming the first one)."""
    if getattr(args, "no_zero3", False) and getattr(args, "zero", None) == 3:
        raise SpecError("zero", 3, "0, 1 or 2 with --no-zero3 (ZeRO-3 excluded), or drop --no-zero3")


def _missing(field: str):
    raise SpecError(field, None, f"given (--{field} NAME|FILE)")
