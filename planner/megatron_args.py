"""Megatron-LM / NeMo arguments -> the planner's config, workload and model fields (one mapping).

Megatron-LM prints its arguments at start-up (``  tensor_model_parallel_size ...... 8``) and
takes them on the command line (``--tensor-model-parallel-size 8``); NeMo prints its YAML
config (``tensor_model_parallel_size: 8``). All three give a dict of underscore names to the
values as text, which :func:`config_fields`, :func:`workload_fields` and :func:`model_fields`
translate. Settings absent from the dict take the defaults of the Megatron-LM release that
prints them (e.g. no ``overlap_grad_reduce``: the gradient all-reduce is not overlapped).

>>> args = parse_command_line("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
...                           "--sequence-parallel --use-distributed-optimizer --micro-batch-size 2")
>>> sorted(config_fields(args).items())
[('chunks', 1), ('mb', 2), ('pp', 4), ('recompute', 'none'), ('sp', True), ('tp', 8), ('zero', 1)]
"""

from __future__ import annotations

import shlex

from costmodel.spec.plan_checks import RECOMPUTE_MODULES
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.spec.units import MB

from .layout_args import split_fields
from .megatron_offload import act_offload_fields, fg_offload_fields, offload_fields
from .megatron_values import _get_int, _none, as_bool

#: NeMo config names -> the Megatron-LM argument name they set
SYNONYMS = {
    "encoder_seq_length": "seq_length",
    "activations_checkpoint_granularity": "recompute_granularity",
    "activations_checkpoint_method": "recompute_method",
    "activations_checkpoint_num_layers": "recompute_num_layers",
    "ub_tp_comm_overlap": "tp_comm_overlap",
    "overlap_grad_sync": "overlap_grad_reduce",
    "tensor_parallel_size": "tensor_model_parallel_size",
    "pipeline_parallel_size": "pipeline_model_parallel_size",
}
#: Megatron-LM arguments that take a list of values (``nargs='*'``)
LIST_ARGS = ("recompute_modules", "offload_modules")
#: Megatron-Core's default DDP bucket: 40M FP32 gradient elements (DistributedDataParallelConfig)
DEFAULT_BUCKET_BYTES = 40e6 * 4


def normalise(args: dict) -> dict:
    """Lower-case underscore keys, NeMo synonyms mapped to Megatron names, values stripped."""
    out = {}
    for k, v in args.items():
        k = SYNONYMS.get(k.strip().lower().replace("-", "_"), k.strip().lower().replace("-", "_"))
        out.setdefault(k, v.strip() if isinstance(v, str) else v)
    return out


def parse_command_line(text: str) -> dict:
    """``--name value`` / ``--flag`` pairs of a Megatron-LM command line as ``{name: text}``.

    A flag without a value (``--sequence-parallel``) is ``"True"``; tokens that are not
    options (``torchrun``, ``pretrain_gpt.py``) are skipped.
    """
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise SpecError("baseline", text, f"a command line with balanced quotes ({e})") from None
    out, i = {}, 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--") and len(t) > 2:
            name, eq, value = t[2:].partition("=")
            if not eq:
                if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    value = tokens[i + 1]
                    i += 1
                    while (
                        name.replace("-", "_") in LIST_ARGS
                        and i + 1 < len(tokens)
                        and not tokens[i + 1].startswith("--")
                    ):
                        value += " " + tokens[i + 1]  # nargs='*': every value up to the next option
                        i += 1
                else:
                    value = "True"
            out[name.replace("-", "_")] = value
        i += 1
    return normalise(out)


def config_fields(args: dict, layers: int | None = None) -> dict:
    """Parallel-config fields (keys of :class:`~costmodel.spec.plan.ParallelConfig`) set by ``args``.

    ``layers`` (the model's depth) turns ``num_layers_per_virtual_pipeline_stage`` into ``vp``.
    """
    a = normalise(args)
    f = {}
    for key, name in (
        ("tp", "tensor_model_parallel_size"),
        ("pp", "pipeline_model_parallel_size"),
        ("dp", "data_parallel_size"),
        ("cp", "context_parallel_size"),
        ("ep", "expert_model_parallel_size"),
        ("mb", "micro_batch_size"),
        ("vp", "virtual_pipeline_model_parallel_size"),
    ):
        v = _get_int(a, name)
        if v is not None:
            f[key] = v
    stages = _get_int(a, "num_virtual_stages_per_pipeline_rank")  # arguments.py: sets the interleave itself
    if "vp" not in f and stages:
        f["vp"] = stages
    per_chunk = _get_int(a, "num_layers_per_virtual_pipeline_stage")
    if "vp" not in f and per_chunk:
        layers = layers or _get_int(a, "num_layers")
        if not layers:
            raise SpecError(
                "num_layers_per_virtual_pipeline_stage", per_chunk, "given with the model's num_layers (or give vp)"
            )
        pp = f.get("pp", 1)
        if layers % (pp * per_chunk):
            raise SpecError(
                "num_layers_per_virtual_pipeline_stage", per_chunk, f"a divisor of num_layers/pp = {layers}/{pp}"
            )
        f["vp"] = layers // (pp * per_chunk)
    f.update(split_fields(a, f.get("pp", 1), layers or _get_int(a, "num_layers"), f.get("vp")))  # layout_args
    if "sequence_parallel" in a:
        f["sp"] = as_bool("sequence_parallel", a["sequence_parallel"])
    mfsdp = next((k for k in ("use_megatron_fsdp", "use_custom_fsdp") if k in a and as_bool(k, a[k])), None)
    if "use_torch_fsdp2" in a and as_bool("use_torch_fsdp2", a["use_torch_fsdp2"]):
        f["zero"] = 3
    elif mfsdp:  # Megatron FSDP (arguments.py: v1 also turns use_distributed_optimizer on)
        strategy = str(a.get("data_parallel_sharding_strategy", "no_shard")).strip().lower()
        if strategy != "optim_grads_params":
            raise SpecError(
                "data_parallel_sharding_strategy",
                strategy,
                "optim_grads_params with Megatron FSDP (the sharding the cost model charges as zero=3)",
            )
        f["zero"] = 3
    elif "use_distributed_optimizer" in a:
        f["zero"] = 1 if as_bool("use_distributed_optimizer", a["use_distributed_optimizer"]) else 0
    gran = a.get("recompute_granularity")
    if _none(gran):
        f["recompute"] = "none"
    elif str(gran).lower() in ("full", "selective"):
        f["recompute"] = str(gran).lower()
        n = _get_int(a, "recompute_num_layers")
        if f["recompute"] == "full" and str(a.get("recompute_method", "")).lower() == "block" and n is not None:
            f["recompute_layers"] = n
    else:
        raise SpecError("recompute_granularity", gran, "full, selective or None")
    # FP8 or NVFP4 parameters (ParallelConfig.fp8_param_gather is either: --emit megatron writes --fp4-param-gather
    # for NVFP4, arguments.py at d98e8a64; TransformerConfig's field, which its printed config names, is fp4_param)
    gathers = [k for k in ("fp8_param_gather", "fp4_param_gather", "fp4_param") if k in a]
    if gathers:
        f["fp8_param_gather"] = any(as_bool(k, a[k]) for k in gathers)
    fp4 = a.get("fp4_format", a.get("fp4"))
    fp4_gather = next((k for k in gathers if k != "fp8_param_gather" and as_bool(k, a[k])), None)
    if fp4_gather and (_none(fp4) or str(fp4).lower() in ("false", "0")):
        raise SpecError(
            fp4_gather,
            a[fp4_gather],
            "unset without --fp4-format (Megatron-LM validate_args: it must be used together with --fp4-format)",
        )
    loss = loss_impl(a)
    if loss is not None:
        f["loss_impl"] = loss
    f.update(offload_fields(a))
    f.update(act_offload_fields(a))
    f.update(fg_offload_fields(a))
    if f["recompute"] == "selective" and not _none(a.get("recompute_modules")):
        # as stated, Megatron's default (core_attn) too: the plan's None and ("core_attn",) recompute the same, and a
        # plan that names the modules reads back naming them
        f["recompute_modules"] = recompute_modules(a["recompute_modules"])
    grad = grad_dtype(a)
    if grad != "fp32" or any(
        k in a for k in ("bf16", "fp16", "grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32")
    ):
        f["grad_dtype"] = grad  # stated by the arguments (a line without a dtype flag states none)
    if "overlap_grad_reduce" in a:
        if as_bool("overlap_grad_reduce", a["overlap_grad_reduce"]):
            elems = _get_int(a, "ddp_bucket_size")  # gradient elements, in the dtype they are reduced in
            f["bucket_mb"] = (
                elems * grad_elem_bytes(ParallelConfig(grad_dtype=grad)) if elems else DEFAULT_BUCKET_BYTES
            ) / MB
        else:
            f["bucket_mb"] = 0.0
    tp = f.get("tp", 1)
    f["chunks"] = tp if tp > 1 and "tp_comm_overlap" in a and as_bool("tp_comm_overlap", a["tp_comm_overlap"]) else 1
    flash = flash_attention(a)
    if flash is not None:
        f["flash_attention"] = flash
    dispatcher = moe_dispatcher(a, f.get("ep", 1))
    if dispatcher is not None:
        f["ep_dispatcher"] = dispatcher
    if "overlap_moe_expert_parallel_comm" in a and as_bool(
        "overlap_moe_expert_parallel_comm", a["overlap_moe_expert_parallel_comm"]
    ):
        f["ep_overlap"] = True  # costmodel.compose.ep_overlap
    return f


def loss_impl(a: dict) -> str | None:
    """``ParallelConfig.loss_impl`` of normalised arguments ``a``: ``te`` for ``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te`` (Transformer Engine's cross-entropy, the gradient written over the logits:
    ``language_module.py`` ``compute_language_model_loss``), None otherwise (the plan's default, ``fused``: Megatron-Core's
    vocab-parallel cross-entropy, unfused or ``native``-fused alike, keeps the FP32 softmax; ``model_parallel_config.py``
    at d98e8a64: ``cross_entropy_loss_fusion`` defaults to False, ``cross_entropy_fusion_impl`` to ``native``).

    >>> loss_impl({"cross_entropy_loss_fusion": "True", "cross_entropy_fusion_impl": "te"}), loss_impl({"cross_entropy_fusion_impl": "te"})
    ('te', None)
    """
    if "cross_entropy_loss_fusion" not in a or not as_bool("cross_entropy_loss_fusion", a["cross_entropy_loss_fusion"]):
        return None  # the fusion off: the impl is not read
    impl = (
        "native" if _none(a.get("cross_entropy_fusion_impl")) else str(a["cross_entropy_fusion_impl"]).strip().lower()
    )
    if impl not in ("native", "te"):
        raise SpecError("cross_entropy_fusion_impl", a["cross_entropy_fusion_impl"], "native or te")
    return "te" if impl == "te" else None


def flash_attention(args: dict) -> bool | None:
    """Whether the run's attention kernel is fused (never stores the s x s scores:
    ``ParallelConfig.flash_attention``), as the Megatron-LM that printed ``args`` chooses it; None
    when the arguments do not say (the planner's default, fused, stands).

    Megatron-LM at d98e8a64 parses ``--use-flash-attn`` and reads it nowhere (``arguments.py``
    defines it; no other module reads ``use_flash_attn``): the kernel follows ``transformer_impl``
    (``gpt_builders.py`` ``_get_transformer_layer_spec``: ``transformer_engine`` builds TE's
    ``DotProductAttention``, ``local`` Megatron's own unfused ``DotProductAttention``) and
    ``attention_backend`` (``megatron/core/models/common/language_module/language_module.py``:
    TE's flash, fused and unfused kernels are opt-out flags that ``auto`` leaves all on, so TE runs
    a fused kernel; ``unfused`` and ``local`` turn the fused ones off). Legacy models
    (``use_legacy_models True`` / ``use_mcore_models False`` in older logs) with
    ``transformer_impl local`` ran ``ParallelAttention``, which used FlashAttention only with
    ``--use-flash-attn`` (``megatron/legacy/model/transformer.py``, removed in 8de82388); with
    ``transformer_engine`` they ran TE's ``TransformerLayer``, fused like the rest.

    >>> flash_attention({"use_flash_attn": "False", "attention_backend": "AttnBackend.auto",
    ...                  "transformer_impl": "transformer_engine"})
    True
    >>> flash_attention({"attention_backend": "AttnBackend.unfused"}), flash_attention({"transformer_impl": "local"})
    (False, False)
    """
    a = normalise(args)
    backend = str(a.get("attention_backend", "")).strip().lower().rpartition(".")[2]
    impl = str(a.get("transformer_impl", "")).strip().lower()
    if backend and backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise SpecError("attention_backend", a["attention_backend"], "one of auto, flash, fused, unfused, local")
    if backend in ("unfused", "local"):
        return False
    legacy = ("use_legacy_models" in a and as_bool("use_legacy_models", a["use_legacy_models"])) or (
        "use_mcore_models" in a and not as_bool("use_mcore_models", a["use_mcore_models"])
    )
    if impl == "local":
        if legacy and "use_flash_attn" in a:
            return as_bool("use_flash_attn", a["use_flash_attn"])
        return False
    if impl or backend:  # transformer_engine (or another TE-based impl), or a TE backend named
        return True
    if "use_flash_attn" in a:  # a log older than transformer_impl: the legacy flag decided
        return as_bool("use_flash_attn", a["use_flash_attn"])
    return None


def moe_dispatcher(a: dict, ep: int) -> str | None:
    """``ParallelConfig.ep_dispatcher`` of normalised arguments ``a`` (None without expert
    parallelism: nothing to dispatch over). Megatron-Core's ``TransformerConfig``: the dispatcher
    type defaults to ``allgather``; ``flex`` runs the ``moe_flex_dispatcher_backend`` (default
    ``deepep``; ``moe_enable_deepep`` is its deprecated spelling). What the cost model does not
    charge is refused, naming the argument: the AllGather dispatcher and the NCCL EP backend."""
    if ep <= 1:  # a dense model's logged arguments print the default dispatcher too
        return None
    kind = str(a.get("moe_token_dispatcher_type", "")).lower()
    if kind in ("", "none", "allgather"):
        raise SpecError(
            "moe_token_dispatcher_type",
            kind or None,
            "alltoall or flex (Megatron's default, the AllGather dispatcher, is not modelled)",
        )
    deepep_flag = "moe_enable_deepep" in a and as_bool("moe_enable_deepep", a["moe_enable_deepep"])
    if kind == "alltoall" and not deepep_flag:
        return "alltoall"
    if kind != "flex":
        raise SpecError(
            "moe_token_dispatcher_type",
            kind,
            "flex with moe_enable_deepep (DeepEP runs only in the flex dispatcher)"
            if deepep_flag
            else "alltoall or flex",
        )
    backend = str(a.get("moe_flex_dispatcher_backend", "deepep")).lower()
    if backend not in ("deepep", "hybridep"):
        raise SpecError(
            "moe_flex_dispatcher_backend", backend, "deepep or hybridep (the NCCL EP backend is not modelled)"
        )
    return backend


def recompute_modules(v) -> tuple[str, ...]:
    """``--recompute-modules`` as a tuple: from a command line (``layernorm moe``) or Megatron-LM's
    printed arguments (``['layernorm', 'moe']``); only :data:`costmodel.spec.plan_checks.RECOMPUTE_MODULES`.

    >>> recompute_modules("['layernorm', 'moe']"), recompute_modules("layernorm moe")
    (('layernorm', 'moe'), ('layernorm', 'moe'))
    """
    names = tuple(m for m in str(v).strip("[]() ").replace(",", " ").replace("'", " ").replace('"', " ").split() if m)
    bad = [m for m in names if m not in RECOMPUTE_MODULES]
    if bad or not names:
        raise SpecError(
            "recompute_modules", bad[0] if bad else v, f"modules this planner charges: {', '.join(RECOMPUTE_MODULES)}"
        )
    return names


def grad_dtype(args: dict) -> str:
    """The dtype the run reduces gradients in (``ParallelConfig.grad_dtype``), as Megatron-LM's
    ``arguments.py`` decides it: ``--grad-reduce-in-bf16`` reduces in BF16; otherwise
    ``--accumulate-allreduce-grads-in-fp32`` (which ``--bf16`` turns on) reduces in FP32 and without
    it an FP16 run reduces its FP16 gradients (the flag's default is off).

    >>> grad_dtype({"bf16": "True"}), grad_dtype({"fp16": "True"}), grad_dtype({"bf16": "True", "grad_reduce_in_bf16": "True"})
    ('fp32', 'fp16', 'bf16')
    """
    a = normalise(args)
    if "grad_reduce_in_bf16" in a and as_bool("grad_reduce_in_bf16", a["grad_reduce_in_bf16"]):
        return "bf16"
    fp16 = "fp16" in a and as_bool("fp16", a["fp16"])
    if "accumulate_allreduce_grads_in_fp32" in a:
        return (
            "fp32"
            if as_bool("accumulate_allreduce_grads_in_fp32", a["accumulate_allreduce_grads_in_fp32"])
            else ("fp16" if fp16 else "fp32")
        )  # BF16 runs: forced on (an older log prints it False)
    return "fp16" if fp16 else "fp32"


#: Megatron-LM's --fp8-recipe values -> the planner's --dtype (costmodel.spec.precision); ``custom`` has no
#: model here and reads as plain fp8
FP8_RECIPES = {"delayed": "fp8", "tensorwise": "fp8-tensorwise", "blockwise": "fp8-blockwise", "mxfp8": "mxfp8"}


def workload_fields(args: dict) -> dict:
    """``global_batch``, ``seq``, ``dtype`` and ``gpus`` where ``args`` states them."""
    a = normalise(args)
    out = {}
    for key, name in (("global_batch", "global_batch_size"), ("seq", "seq_length"), ("gpus", "world_size")):
        v = _get_int(a, name)
        if v is not None:
            out[key] = v
    devices, nodes = _get_int(a, "devices"), _get_int(a, "num_nodes")
    if "gpus" not in out and devices and nodes:  # NeMo's trainer section
        out["gpus"] = devices * nodes
    fp8 = a.get("fp8", a.get("fp8_format"))
    precision = str(a.get("precision", "")).strip().lower()  # NeMo's trainer.precision (PyTorch Lightning)
    fp4 = a.get("fp4_format", a.get("fp4"))
    if not _none(fp4) and str(fp4).lower() not in ("false", "0"):  # --fp4-format e2m1: NVFP4 (the only fp4_recipe)
        out["dtype"] = "nvfp4"
    elif not _none(fp8) and str(fp8).lower() not in ("false", "0"):
        # --fp8-recipe (transformer_config.py at d98e8a64; default delayed, the planner's plain fp8)
        out["dtype"] = FP8_RECIPES.get(str(a.get("fp8_recipe") or "delayed").lower(), "fp8")
    elif ("bf16" in a and as_bool("bf16", a["bf16"])) or precision in ("bf16", "bf16-mixed", "bf16-true"):
        out["dtype"] = "bf16"
    elif ("fp16" in a and as_bool("fp16", a["fp16"])) or precision in ("16", "16-mixed", "fp16"):
        out["dtype"] = "fp16"
    elif "bf16" in a and "fp16" in a:  # both stated off: Megatron-LM trains in FP32
        out["dtype"] = "fp32"
    return out
