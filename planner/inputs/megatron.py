"""Megatron-LM arguments (``evaluate --megatron-args``) read into planner fields through the shared parser
of ``--baseline`` and ``calibrate`` (:mod:`planner.megatron_args`), checked against the argument names of
Megatron-LM d98e8a64 (``planner/data/megatron_arguments_d98e8a64.txt``).
"""

from __future__ import annotations

import shlex
from importlib import resources

from costmodel.spec.errors import SpecError

from .. import megatron_args as mg
from .. import megatron_model as mm
from ..megatron_values import _get_int, _none, as_bool
from .base import FrameworkInput


def megatron_names() -> frozenset:
    text = resources.files("planner").joinpath("data/megatron_arguments_d98e8a64.txt").read_text()
    return frozenset(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


#: arguments the planner does not model: refused rather than predicted without them
MEGATRON_REFUSED = {
    "cpu_offloading": "unset (activation offloading is not modelled)",
}


#: ``torchrun`` options (``torch/distributed/run.py``), skipped before the script: ``nproc_per_node`` x
#: ``nnodes`` is the world size when both are numbers
TORCHRUN = frozenset(
    (
        "nnodes nproc_per_node node_rank master_addr master_port rdzv_backend rdzv_endpoint rdzv_id "
        "rdzv_conf standalone max_restarts monitor_interval start_method role log_dir redirects tee "
        "local_addr logs_specs run_path no_python module local_ranks_filter"
    ).split()
)


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as e:
        raise SpecError("megatron_args", text[:40], f"a command line with balanced quotes ({e})") from None


def check_megatron_flags(tokens: list[str]) -> None:
    """Refuse (one line naming it) an option Megatron-LM d98e8a64 does not define; a launcher's options
    (:data:`TORCHRUN`, or anything before a ``*.py`` script) are not Megatron's."""
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), -1)
    known = megatron_names()
    for t in tokens[script + 1 :]:
        if not (t.startswith("--") and len(t) > 2):
            continue
        name = t[2:].partition("=")[0].replace("-", "_")
        base = name.removeprefix("no_").removeprefix("disable_")
        if script < 0 and name in TORCHRUN:
            continue
        if name not in known and base not in known:
            raise SpecError(
                "megatron_args",
                t.partition("=")[0],
                "an argument of Megatron-LM d98e8a64 (megatron/training/arguments.py)",
            )
        if name in MEGATRON_REFUSED:
            raise SpecError("megatron_args", t.partition("=")[0], MEGATRON_REFUSED[name])


def parse_megatron_text(text: str) -> FrameworkInput:
    """Planner fields of a Megatron-LM argument line (flags absent: Megatron-LM's defaults)."""
    if "--" not in text:
        raise SpecError(
            "megatron_args",
            text[:40],
            "Megatron-LM arguments (--tensor-model-parallel-size 8 ...), @file or a file path",
        )
    tokens = _tokens(text)
    check_megatron_flags(tokens)
    a = mg.parse_command_line(shlex.join(tokens))
    layers = _get_int(a, "num_layers")
    try:
        stated = mg.config_fields(a, layers)
        stated.update(mg.workload_fields(a))
        if "layers_per_stage" not in stated and "layout" not in stated:  # the shared parser read no split
            for key, name in (
                ("first_stage_layers", "decoder_first_pipeline_num_layers"),
                ("last_stage_layers", "decoder_last_pipeline_num_layers"),
            ):
                if _get_int(a, name):
                    stated[key] = _get_int(a, name)
            for key, name in (
                ("account_for_embedding", "account_for_embedding_in_pipeline_split"),
                ("account_for_loss", "account_for_loss_in_pipeline_split"),
            ):
                if name in a and as_bool(name, a[name]):
                    stated[key] = True
        model = None if mm.missing_shape(a) else mm.model_fields(a)
        mm.mtp_layers(a)
        mm.dropout_fields(a)
        mm.drop_fields(a)
    except SpecError as e:
        raise SpecError(f"megatron_args.{e.field}", e.value, e.allowed) from None
    stated["framework"] = "megatron"
    if stated.get("tp", 1) == 1 and stated.get("sp"):  # arguments.py validate_args: no sequence parallelism at tp=1
        stated["sp"] = False
    per_node, nodes = (a.get(k, "") for k in ("nproc_per_node", "nnodes"))
    if "gpus" not in stated and str(per_node).isdigit() and str(nodes).isdigit():
        stated["gpus"] = int(per_node) * int(nodes)
    for key, name in (("recompute", "recompute_granularity"), ("chunks", "tp_comm_overlap")):
        if name not in a:  # unstated: the framework's default fills it (and is listed as such)
            stated.pop(key, None)
    if stated.get("dtype", "fp32") == "fp32":  # arguments.py: params_dtype is FP32 without --bf16/--fp16
        raise SpecError(
            "megatron_args.bf16",
            None,
            "given (--bf16, --fp16 or --fp8-format: without them Megatron-LM "
            "trains in FP32, which the planner does not model)",
        )
    deferred = {}
    if stated.get("bucket_mb") and _none(a.get("ddp_bucket_size")):
        deferred["megatron_bucket"] = True  # Megatron-Core sizes it from the DP group
    shape = {
        n: _get_int(a, n)
        for n in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "ffn_hidden_size",
            "num_query_groups",
            "num_experts",
        )
        if _get_int(a, n)
    }
    return FrameworkInput(
        source="megatron_args",
        stated=stated,
        model=model,
        stated_model=shape,
        deferred=deferred,
        mtp_layers=mm.mtp_layers(a),
        dropout=mm.dropout_fields(a),
        moe_drop=mm.drop_fields(a),
    )


#: ModelSpec fields each Megatron shape argument states
SHAPE_FIELDS = {
    "num_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "ffn_hidden_size": "ffn_hidden",
    "num_query_groups": "kv_heads",
    "num_experts": "experts",
}


def check_model(fi: FrameworkInput, model, model_name: str) -> None:
    """Refuse a ``--model`` whose shape differs from what the configuration states (one line)."""
    for name, value in fi.stated_model.items():
        have = getattr(model, SHAPE_FIELDS[name], None)
        if name == "num_query_groups" and not have:
            have = model.heads
        if have is not None and have != value:
            raise SpecError(
                f"megatron_args.{name}",
                value,
                f"{have}, the {SHAPE_FIELDS[name]} of --model {model_name} (or drop one of them)",
            )
