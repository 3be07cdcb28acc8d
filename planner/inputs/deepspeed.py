"""A DeepSpeed JSON config (``evaluate --deepspeed-config``) read into planner fields: keys absent take
DeepSpeed edaa72212's defaults (``deepspeed/runtime/config.py``, ``deepspeed/runtime/zero/config.py``).

>>> fi = parse_deepspeed_text('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, '
...                           '"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}')
>>> fi.stated["zero"], fi.stated["bucket_mb"], fi.deferred["micro_batch"]
(2, 0.0, 2)
"""

from __future__ import annotations

import json

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.frameworks.defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.spec.units import MB

from ..megatron_values import as_bool, as_int
from .base import FrameworkInput

#: top-level keys DeepSpeed edaa72212 reads (deepspeed/runtime/config.py DeepSpeedConfig._initialize_params and
#: the section configs it builds; docs/_pages/config-json.md)
DEEPSPEED_KEYS = frozenset(
    (
        "train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps managed_gradient_accumulation "
        "optimizer scheduler communication_data_type seq_parallel_communication_data_type gradient_allreduce_op "
        "prescale_gradients gradient_predivide_factor sparse_gradients fp16 bf16 bfloat16 amp torch_autocast "
        "gradient_clipping zero_optimization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer "
        "activation_checkpointing flops_profiler comms_logger steps_per_print wall_clock_breakdown memory_breakdown "
        "dump_state dataloader_drop_last disable_allgather graph_harvesting sparse_attention pipeline "
        "progressive_layer_drop eigenvalue quantize_training weight_quantization compression_training "
        "data_efficiency curriculum_learning checkpoint data_types aio tensor_parallel expert_parallel "
        "hybrid_engine autotuning elasticity tensorboard wandb comet csv_monitor monitor_config nebula "
        "datastates compile timers use_data_before_expert_parallelism log_level sequence_parallel_size"
    ).split()
)
#: ``DeepSpeedZeroConfig`` fields and aliases at edaa72212 (deepspeed/runtime/zero/config.py; the model
#: forbids others: ``extra="forbid"`` in deepspeed/runtime/config_utils.py)
DEEPSPEED_ZERO_KEYS = frozenset(
    (
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
        "log_trace_cache_warnings enable_sanity_checks save_muon_momentum_buffer_in_memory leaf_module"
    ).split()
)


def _enabled(d: dict, key: str) -> bool:
    v = d.get(key)
    return isinstance(v, dict) and as_bool(f"deepspeed_config.{key}.enabled", v.get("enabled", False))


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
            raise SpecError(
                "deepspeed_config.zero_optimization",
                k,
                "a field of DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py)",
            )
    for k in ("offload_param", "offload_optimizer"):
        dev = (z.get(k) or {}).get("device", "none") if isinstance(z.get(k) or {}, dict) else z[k]
        if str(dev).lower() not in ("none", "null"):
            raise SpecError(f"deepspeed_config.zero_optimization.{k}.device", dev, "none (offloading is not modelled)")
    if int(d.get("sequence_parallel_size", 1) or 1) != 1:
        raise SpecError(
            "deepspeed_config.sequence_parallel_size",
            d["sequence_parallel_size"],
            "1 (DeepSpeed-Ulysses is not modelled)",
        )
    stage = as_int("deepspeed_config.zero_optimization.stage", z.get("stage", 0))
    if stage not in (0, 1, 2, 3):
        raise SpecError("deepspeed_config.zero_optimization.stage", stage, "one of 0, 1, 2, 3")
    # DeepSpeedZeroConfig.overlap_comm_valid: unset means stage == 3. Stage 0 builds no ZeRO optimizer, whose
    # setting it is: engine.py (edaa72212) all-reduces the gradients after backward (allreduce_gradients ->
    # buffered_allreduce_fallback), never overlapped
    overlap = (
        as_bool("deepspeed_config.zero_optimization.overlap_comm", z["overlap_comm"])
        if z.get("overlap_comm") is not None
        else stage == 3
    ) and stage > 0
    bf16 = _enabled(d, "bf16") or _enabled(d, "bfloat16")
    fp16 = _enabled(d, "fp16")
    if bf16 and fp16:
        raise SpecError("deepspeed_config.fp16", "enabled", "off with bf16 enabled (DeepSpeed refuses both)")
    # engine.py communication_data_type: the stated one, else the half dtype the run trains in, else FP32
    comm = d.get("communication_data_type")
    if comm is not None and str(comm).lower() not in ("fp32", "fp16", "bf16"):
        raise SpecError("deepspeed_config.communication_data_type", comm, "one of fp16, bf16, fp32")
    grad = str(comm).lower() if comm is not None else "fp16" if fp16 else "bf16" if bf16 else "fp32"
    elems = as_int(
        "deepspeed_config.zero_optimization.reduce_bucket_size",
        z.get("reduce_bucket_size", DEEPSPEED_REDUCE_BUCKET_ELEMENTS),
    )
    stated = {
        "framework": "deepspeed",
        "zero": stage,
        "grad_dtype": grad,
        "bucket_mb": elems * grad_elem_bytes(ParallelConfig(grad_dtype=grad)) / MB if overlap else 0.0,
    }
    if not (bf16 or fp16):
        raise SpecError(
            "deepspeed_config.bf16",
            None,
            "enabled, or fp16 (without them DeepSpeed trains in FP32, which the planner does not model)",
        )
    stated["dtype"] = "bf16" if bf16 else "fp16"
    if "activation_checkpointing" in d:
        ac = d["activation_checkpointing"] or {}
        if as_bool("deepspeed_config.activation_checkpointing.cpu_checkpointing", ac.get("cpu_checkpointing", False)):
            raise SpecError(
                "deepspeed_config.activation_checkpointing.cpu_checkpointing",
                True,
                "false (checkpoint offloading is not modelled)",
            )
        stated["recompute"] = "full"  # the section configures deepspeed.checkpointing, which the model calls per layer
    batch = {
        k: (None if d.get(n) is None else as_int(f"deepspeed_config.{n}", d[n]))
        for k, n in (
            ("train_batch", "train_batch_size"),
            ("micro_batch", "train_micro_batch_size_per_gpu"),
            ("grad_acc", "gradient_accumulation_steps"),
        )
    }
    if batch["train_batch"] is None and batch["micro_batch"] is None:
        raise SpecError(
            "deepspeed_config.train_batch_size",
            None,
            "given, or train_micro_batch_size_per_gpu (DeepSpeed needs one of them)",
        )
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
        raise SpecError(
            "deepspeed_config.train_batch_size",
            train_batch,
            f"train_micro_batch_size_per_gpu x "
            f"gradient_accumulation_steps x DP = {micro_batch} x {grad_acc} x {dp} (DeepSpeed asserts it)",
        )
    return train_batch, micro_batch
