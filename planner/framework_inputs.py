"""A plan read from the framework's own configuration (``evaluate --megatron-args / --deepspeed-config /
--torchtitan-config``, issue 23): literal semantics.

Every knob comes from the configuration, and what it omits is what that framework version runs
when the setting is absent (:mod:`costmodel.framework_defaults`): no overlap unless the
configuration turns it on. What a configuration cannot state (DeepSpeed JSON has no TP/PP degree;
its model code decides recompute) may come from the planner's flags; a planner flag for a knob
the configuration states is refused unless it says the same.

* Megatron-LM arguments (:mod:`planner.megatron_args`, the parser of ``--baseline`` and
  ``calibrate``), checked against the argument names of Megatron-LM d98e8a64
  (``planner/data/megatron_arguments_d98e8a64.txt``).
* DeepSpeed JSON (``deepspeed/runtime/config.py``, ``deepspeed/runtime/zero/config.py`` at edaa72212).
* torchtitan v0.2.2 job TOML (:mod:`planner.torchtitan_input`), the format ``--emit fsdp2`` writes.

>>> fi = parse_deepspeed_text('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, '
...                           '"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}')
>>> fi.stated["zero"], fi.stated["bucket_mb"], fi.deferred["micro_batch"]
(2, 0.0, 2)
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from importlib import resources

from costmodel.config import ParallelConfig
from costmodel.errors import SpecError
from costmodel.framework_defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from costmodel.memory import grad_elem_bytes
from costmodel.units import MB

from . import megatron_args as mg

LABELS = {"megatron_args": "the Megatron line", "deepspeed_config": "the DeepSpeed config",
          "torchtitan_config": "the torchtitan config"}


@dataclass(frozen=True, kw_only=True)
class FrameworkInput:
    """A framework configuration read into planner fields.

    source : the flag it came from (``megatron_args``, ``deepspeed_config``, ``torchtitan_config``).
    stated : planner knobs the configuration states or implies (CLI dest names: ``tp mb zero bucket_mb ...``,
        ``framework``, ``grad_dtype``, ``global_batch``, ``seq``, ``dtype``, ``gpus``).
    model : :class:`~costmodel.specs.ModelSpec` keywords where the configuration states the whole shape.
    stated_model : shape arguments as stated (``num_layers`` ...), checked against ``--model``.
    deferred : values resolved once the DP size is known (DeepSpeed's batch triple; Megatron's bucket
        that grows with DP; torchtitan's checkpoint frequency).
    """

    source: str
    stated: dict
    model: dict | None = None
    stated_model: dict = field(default_factory=dict)
    deferred: dict = field(default_factory=dict)
    mtp_layers: int | None = None  # Megatron's --mtp-num-layers (0 unset: no MTP); None: not stated by the source
    #: ``hidden_dropout``/``attention_dropout`` the configuration runs (Megatron's 0.1 each when unstated); None: the model's
    dropout: dict | None = None

    @property
    def label(self) -> str:
        return LABELS[self.source]


def read_text(field_name: str, value: str, *, inline_ok: bool) -> str:
    """The configuration text: ``@path`` or an existing path is read; otherwise (Megatron only) the text itself."""
    path = value[1:] if value.startswith("@") else value
    if value.startswith("@") or os.path.isfile(path) or not inline_ok:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as e:
            raise SpecError(field_name, value, f"a readable file ({e.strerror})") from None
    return value


# --------------------------------------------------------------------------- Megatron-LM
def megatron_names() -> frozenset:
    text = resources.files("planner").joinpath("data/megatron_arguments_d98e8a64.txt").read_text()
    return frozenset(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


#: arguments the planner does not model: refused rather than predicted without them
MEGATRON_REFUSED = {"pipeline_model_parallel_layout": "unset (the layout string is not read: give the split with "
                                                      "--decoder-first/last-pipeline-num-layers or --layers-per-stage)",
                    "cpu_offloading": "unset (activation offloading is not modelled)"}


#: ``torchrun`` options (``torch/distributed/run.py``), skipped before the script: ``nproc_per_node`` x
#: ``nnodes`` is the world size when both are numbers
TORCHRUN = frozenset(("nnodes nproc_per_node node_rank master_addr master_port rdzv_backend rdzv_endpoint rdzv_id "
                      "rdzv_conf standalone max_restarts monitor_interval start_method role log_dir redirects tee "
                      "local_addr logs_specs run_path no_python module local_ranks_filter").split())


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
    for t in tokens[script + 1:]:
        if not (t.startswith("--") and len(t) > 2):
            continue
        name = t[2:].partition("=")[0].replace("-", "_")
        base = name.removeprefix("no_").removeprefix("disable_")
        if script < 0 and name in TORCHRUN:
            continue
        if name not in known and base not in known:
            raise SpecError("megatron_args", t.partition("=")[0],
                            "an argument of Megatron-LM d98e8a64 (megatron/training/arguments.py)")
        if name in MEGATRON_REFUSED:
            raise SpecError("megatron_args", t.partition("=")[0], MEGATRON_REFUSED[name])


def parse_megatron_text(text: str) -> FrameworkInput:
    """Planner fields of a Megatron-LM argument line (flags absent: Megatron-LM's defaults)."""
    if "--" not in text:
        raise SpecError("megatron_args", text[:40], "Megatron-LM arguments (--tensor-model-parallel-size 8 ...), "
                        "@file or a file path")
    tokens = _tokens(text)
    check_megatron_flags(tokens)
    a = mg.parse_command_line(shlex.join(tokens))
    layers = mg._get_int(a, "num_layers")
    try:
        stated = mg.config_fields(a, layers)
        stated.update(mg.workload_fields(a))
        if "layers_per_stage" not in stated and "layout" not in stated:  # the shared parser read no split
            for key, name in (("first_stage_layers", "decoder_first_pipeline_num_layers"),
                              ("last_stage_layers", "decoder_last_pipeline_num_layers")):
                if mg._get_int(a, name):
                    stated[key] = mg._get_int(a, name)
            for key, name in (("account_for_embedding", "account_for_embedding_in_pipeline_split"),
                              ("account_for_loss", "account_for_loss_in_pipeline_split")):
                if name in a and mg.as_bool(name, a[name]):
                    stated[key] = True
        model = None if mg.missing_shape(a) else mg.model_fields(a)
        mg.mtp_layers(a)
        mg.dropout_fields(a)
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
        raise SpecError("megatron_args.bf16", None, "given (--bf16, --fp16 or --fp8-format: without them Megatron-LM "
                        "trains in FP32, which the planner does not model)")
    deferred = {}
    if stated.get("bucket_mb") and mg._none(a.get("ddp_bucket_size")):
        deferred["megatron_bucket"] = True  # Megatron-Core sizes it from the DP group
    shape = {n: mg._get_int(a, n) for n in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                                             "num_query_groups", "num_experts") if mg._get_int(a, n)}
    return FrameworkInput(source="megatron_args", stated=stated, model=model, stated_model=shape, deferred=deferred,
                          mtp_layers=mg.mtp_layers(a), dropout=mg.dropout_fields(a))


#: ModelSpec fields each Megatron shape argument states
SHAPE_FIELDS = {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
                "ffn_hidden_size": "ffn_hidden", "num_query_groups": "kv_heads", "num_experts": "experts"}


def check_model(fi: FrameworkInput, model, model_name: str) -> None:
    """Refuse a ``--model`` whose shape differs from what the configuration states (one line)."""
    for name, value in fi.stated_model.items():
        have = getattr(model, SHAPE_FIELDS[name], None)
        if name == "num_query_groups" and not have:
            have = model.heads
        if have is not None and have != value:
            raise SpecError(f"megatron_args.{name}", value, f"{have}, the {SHAPE_FIELDS[name]} of --model {model_name} "
                            "(or drop one of them)")


# --------------------------------------------------------------------------- DeepSpeed
#: top-level keys DeepSpeed edaa72212 reads (deepspeed/runtime/config.py DeepSpeedConfig._initialize_params and
#: the section configs it builds; docs/_pages/config-json.md)
DEEPSPEED_KEYS = frozenset((
    "train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps managed_gradient_accumulation "
    "optimizer scheduler communication_data_type seq_parallel_communication_data_type gradient_allreduce_op "
    "prescale_gradients gradient_predivide_factor sparse_gradients fp16 bf16 bfloat16 amp torch_autocast "
    "gradient_clipping zero_optimization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer "
    "activation_checkpointing flops_profiler comms_logger steps_per_print wall_clock_breakdown memory_breakdown "
    "dump_state dataloader_drop_last disable_allgather graph_harvesting sparse_attention pipeline "
    "progressive_layer_drop eigenvalue quantize_training weight_quantization compression_training "
    "data_efficiency curriculum_learning checkpoint data_types aio tensor_parallel expert_parallel "
    "hybrid_engine autotuning elasticity tensorboard wandb comet csv_monitor monitor_config nebula "
    "datastates compile timers use_data_before_expert_parallelism log_level sequence_parallel_size").split())
#: ``DeepSpeedZeroConfig`` fields and aliases at edaa72212 (deepspeed/runtime/zero/config.py; the model
#: forbids others: ``extra="forbid"`` in deepspeed/runtime/config_utils.py)
DEEPSPEED_ZERO_KEYS = frozenset((
    "stage contiguous_gradients reduce_scatter reduce_bucket_size use_multi_rank_bucket_allreduce "
    "allgather_partitions allgather_bucket_size overlap_comm load_from_fp32_weights elastic_checkpoint "
    "offload_param offload_optimizer zenflow sub_group_size cpu_offload_param cpu_offload_use_pin_memory "
    "cpu_offload prefetch_bucket_size stage3_prefetch_bucket_size param_persistence_threshold "
    "stage3_param_persistence_threshold model_persistence_threshold stage3_model_persistence_threshold "
    "max_live_parameters stage3_max_live_parameters max_reuse_distance stage3_max_reuse_distance "
    "gather_16bit_weights_on_model_save stage3_gather_16bit_weights_on_model_save module_granularity_threshold "
    "stage3_module_granularity_threshold use_all_reduce_for_fetch_params stage3_use_all_reduce_for_fetch_params "
    "allgather_sequential stage3_allgather_sequential stage3_gather_fp16_weights_on_model_save "
    "ignore_unused_parameters legacy_stage1 round_robin_gradients zero_hpz_partition_size zero_quantized_weights "
    "zero_quantized_nontrainable_weights zero_quantized_gradients zeropp_loco_param mics_shard_size "
    "mics_hierarchical_params_gather memory_efficient_linear pipeline_loading_checkpoint override_module_apply "
    "log_trace_cache_warnings enable_sanity_checks save_muon_momentum_buffer_in_memory leaf_module").split())


def _enabled(d: dict, key: str) -> bool:
    v = d.get(key)
    return isinstance(v, dict) and mg.as_bool(f"deepspeed_config.{key}.enabled", v.get("enabled", False))


def parse_deepspeed_text(text: str) -> FrameworkInput:
    """Planner fields of a DeepSpeed JSON config (keys absent: DeepSpeed edaa72212's defaults)."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError("deepspeed_config", f"line {e.lineno}", f"a JSON object ({e.msg})") from None
    if not isinstance(d, dict):
        raise SpecError("deepspeed_config", type(d).__name__, "a JSON object")
    for k in d:
        if k not in DEEPSPEED_KEYS:
            raise SpecError("deepspeed_config", k, "a key DeepSpeed edaa72212 reads (deepspeed/runtime/config.py)")
    z = d.get("zero_optimization", {})
    if not isinstance(z, dict):
        raise SpecError("deepspeed_config.zero_optimization", z, "a JSON object")
    for k in z:
        if k not in DEEPSPEED_ZERO_KEYS:
            raise SpecError("deepspeed_config.zero_optimization", k, "a field of DeepSpeedZeroConfig "
                            "(deepspeed/runtime/zero/config.py)")
    for k in ("offload_param", "offload_optimizer"):
        dev = (z.get(k) or {}).get("device", "none") if isinstance(z.get(k) or {}, dict) else z[k]
        if str(dev).lower() not in ("none", "null"):
            raise SpecError(f"deepspeed_config.zero_optimization.{k}.device", dev, "none (offloading is not modelled)")
    if int(d.get("sequence_parallel_size", 1) or 1) != 1:
        raise SpecError("deepspeed_config.sequence_parallel_size", d["sequence_parallel_size"],
                        "1 (DeepSpeed-Ulysses is not modelled)")
    stage = mg.as_int("deepspeed_config.zero_optimization.stage", z.get("stage", 0))
    if stage not in (0, 1, 2, 3):
        raise SpecError("deepspeed_config.zero_optimization.stage", stage, "one of 0, 1, 2, 3")
    # DeepSpeedZeroConfig.overlap_comm_valid: unset means stage == 3
    overlap = mg.as_bool("deepspeed_config.zero_optimization.overlap_comm", z["overlap_comm"]) \
        if z.get("overlap_comm") is not None else stage == 3
    bf16 = _enabled(d, "bf16") or _enabled(d, "bfloat16")
    fp16 = _enabled(d, "fp16")
    if bf16 and fp16:
        raise SpecError("deepspeed_config.fp16", "enabled", "off with bf16 enabled (DeepSpeed refuses both)")
    # engine.py communication_data_type: the stated one, else the half dtype the run trains in, else FP32
    comm = d.get("communication_data_type")
    if comm is not None and str(comm).lower() not in ("fp32", "fp16", "bf16"):
        raise SpecError("deepspeed_config.communication_data_type", comm, "one of fp16, bf16, fp32")
    grad = str(comm).lower() if comm is not None else "fp16" if fp16 else "bf16" if bf16 else "fp32"
    elems = mg.as_int("deepspeed_config.zero_optimization.reduce_bucket_size",
                      z.get("reduce_bucket_size", DEEPSPEED_REDUCE_BUCKET_ELEMENTS))
    stated = {"framework": "deepspeed", "zero": stage, "grad_dtype": grad,
              "bucket_mb": elems * grad_elem_bytes(ParallelConfig(grad_dtype=grad)) / MB if overlap else 0.0}
    if not (bf16 or fp16):
        raise SpecError("deepspeed_config.bf16", None, "enabled, or fp16 (without them DeepSpeed trains in FP32, "
                        "which the planner does not model)")
    stated["dtype"] = "bf16" if bf16 else "fp16"
    if "activation_checkpointing" in d:
        ac = d["activation_checkpointing"] or {}
        if mg.as_bool("deepspeed_config.activation_checkpointing.cpu_checkpointing", ac.get("cpu_checkpointing", False)):
            raise SpecError("deepspeed_config.activation_checkpointing.cpu_checkpointing", True,
                            "false (checkpoint offloading is not modelled)")
        stated["recompute"] = "full"  # the section configures deepspeed.checkpointing, which the model calls per layer
    batch = {k: (None if d.get(n) is None else mg.as_int(f"deepspeed_config.{n}", d[n])) for k, n in (
        ("train_batch", "train_batch_size"), ("micro_batch", "train_micro_batch_size_per_gpu"),
        ("grad_acc", "gradient_accumulation_steps"))}
    if batch["train_batch"] is None and batch["micro_batch"] is None:
        raise SpecError("deepspeed_config.train_batch_size", None, "given, or train_micro_batch_size_per_gpu "
                        "(DeepSpeed needs one of them)")
    return FrameworkInput(source="deepspeed_config", stated=stated, deferred=batch)


def deepspeed_batch(train_batch, micro_batch, grad_acc, dp: int | None) -> tuple[int, int]:
    """``(global_batch, micro_batch)`` as ``DeepSpeedConfig._set_batch_related_parameters`` resolves them
    over the data-parallel world size ``dp`` (and ``_batch_assertion``: train = micro x acc x dp).
    All three stated: ``dp`` is their quotient when unknown.

    >>> deepspeed_batch(512, None, 4, 16), deepspeed_batch(None, 2, None, 8), deepspeed_batch(64, 2, 4, None)
    ((512, 8), (16, 2), (64, 2))
    """
    if dp is None and not (train_batch and micro_batch and grad_acc):
        raise SpecError("gpus", None, "given (DeepSpeed resolves its batch over the data-parallel size)")
    if train_batch and micro_batch and grad_acc:
        pass
    elif train_batch and micro_batch:
        grad_acc = train_batch // micro_batch // dp
    elif train_batch and grad_acc:
        micro_batch = train_batch // dp // grad_acc
    elif micro_batch and grad_acc:
        train_batch = micro_batch * grad_acc * dp
    elif train_batch:
        grad_acc, micro_batch = 1, train_batch // dp
    else:
        grad_acc, train_batch = 1, micro_batch * dp
    if dp is None:
        dp = train_batch // (micro_batch * grad_acc) if micro_batch * grad_acc else 0
    if not micro_batch or train_batch != micro_batch * grad_acc * dp:
        raise SpecError("deepspeed_config.train_batch_size", train_batch, f"train_micro_batch_size_per_gpu x "
                        f"gradient_accumulation_steps x DP = {micro_batch} x {grad_acc} x {dp} (DeepSpeed asserts it)")
    return train_batch, micro_batch


def _parsers() -> dict:
    from .torchtitan_input import parse_torchtitan_text
    return {"megatron_args": (parse_megatron_text, True), "deepspeed_config": (parse_deepspeed_text, False),
            "torchtitan_config": (parse_torchtitan_text, False)}


PARSERS = ("megatron_args", "deepspeed_config", "torchtitan_config")


def from_args(args) -> FrameworkInput | None:
    """The framework input a command line names (at most one of the three flags), else None."""
    given = [k for k in PARSERS if getattr(args, k, None) is not None]
    if len(given) > 1:
        raise SpecError(given[1], getattr(args, given[1]), f"unset with --{given[0].replace('_', '-')} "
                        "(one framework configuration at a time)")
    if not given:
        return None
    parse, inline = _parsers()[given[0]]
    return parse(read_text(given[0], getattr(args, given[0]), inline_ok=inline))
