"""The tuning knobs each framework runs when its configuration does not set them.

``planner evaluate --framework-defaults`` fills the knobs a user did not state with these, as the
framework version would (issue 23); plain ``evaluate`` chooses them as ``recommend`` would instead.
Each value is read from the framework's code at the commit cited beside it.

>>> framework_defaults("megatron", dp=8, pp=1, global_batch=64)["bucket_mb"]
0
>>> framework_defaults("deepspeed", dp=8, pp=1, global_batch=64, zero=3)["bucket_mb"]
2000.0
>>> framework_defaults("deepspeed", dp=8, pp=1, global_batch=64, zero=3, grad_dtype="bf16")["bucket_mb"]
1000.0
>>> framework_defaults("fsdp2", dp=8, pp=1, global_batch=64)["mb"]
8
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.plan_checks import FRAMEWORKS
from costmodel.spec.units import GRAD_BYTES
from costmodel.spec.units import MB

#: DeepSpeed ``reduce_bucket_size`` default, 5e8 elements (deepspeed/runtime/zero/config.py at
#: edaa72212: ``reduce_bucket_size: int = Field(pp_int(5e8))``). The elements are of the communication
#: dtype: the ZeRO optimizer copies each gradient into a bucket buffer of ``communication_data_type``
#: (``stage_1_and_2.py@edaa72212`` lines 546 and 869; ``engine.py`` lines 1405-1416: the stated one,
#: else the half dtype the run trains in), so in bytes it is 5e8 x the plan's gradient element bytes
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 5e8


def megatron_global_batch(mb: int, dp: int) -> int:
    """Megatron-LM's ``--global-batch-size`` when unset: ``micro_batch_size * data_parallel_size``
    (``megatron/training/arguments.py`` validate_args at d98e8a64; no accumulation)."""
    return mb * dp


def megatron_ddp_bucket_elements(dp: int) -> int:
    """Megatron-Core's DDP bucket with ``--overlap-grad-reduce`` and no ``--ddp-bucket-size``, in gradient
    elements: ``max(40000000, 1000000 * dp_group.size())`` (``megatron/core/distributed/
    distributed_data_parallel.py`` at d98e8a64; ``dp_group`` is the data-parallel group without
    context parallelism), so the bucket grows with the DP size beyond 40.

    >>> megatron_ddp_bucket_elements(8), megatron_ddp_bucket_elements(128)
    (40000000, 128000000)
    """
    return max(40_000_000, 1_000_000 * dp)


#: torchtitan v0.2.2 job-config defaults the TOML input needs (``torchtitan/config/job_config.py`` at
#: 73a0e69): ``Training.local_batch_size = 8``, ``global_batch_size = -1`` (local x DP, no accumulation),
#: ``Parallelism.data_parallel_shard_degree = -1`` (the GPUs left),
#: ``fsdp_reshard_after_forward = "default"``
#: (``parallelize.py``: reshard unless pipelined), ``pipeline_parallel_microbatch_size = 1``,
#: ``pipeline_parallel_schedule = "1F1B"``, ``ActivationCheckpoint.mode = "selective"`` with
#: ``selective_ac_option = "2"`` (every second layer fully checkpointed), ``Compile.enable = False``,
#: ``Training.mixed_precision_param = "bfloat16"``, ``Training.seq_len = 2048``
TORCHTITAN_V022_DEFAULTS = {
    "local_batch_size": 8,
    "seq_len": 2048,
    "global_batch_size": -1,
    "data_parallel_replicate_degree": 1,
    "data_parallel_shard_degree": -1,
    "fsdp_reshard_after_forward": "default",
    "pipeline_parallel_microbatch_size": 1,
    "pipeline_parallel_schedule": "1F1B",
    "mode": "selective",
    "selective_ac_option": "2",
    "enable": False,
    "mixed_precision_param": "bfloat16",
}


def framework_defaults(
    framework: str,
    *,
    dp: int,
    pp: int,
    global_batch: int,
    zero: int | None = None,
    tp: int = 1,
    grad_dtype: str = "fp32",
) -> dict:
    """``{knob: value}`` for ``mb vp sp zero recompute bucket_mb chunks`` as ``framework`` runs them
    unset; ``zero`` (when stated) changes what DeepSpeed and FSDP2 overlap. ``bucket_mb`` 0 means
    one gradient reduction after backward (no overlap).

    * ``megatron`` (Megatron-LM ``megatron/training/arguments.py`` and
      ``megatron/core/distributed/distributed_data_parallel.py`` at d98e8a64): ``--micro-batch-size``
      has no default (validate_args asserts it is set): 1, as every example script; no interleaving,
      no sequence parallelism, no distributed optimizer (ZeRO 0), no recompute; ``--overlap-grad-reduce``
      off, so the gradients are reduced in one piece after backward (``bucket_size = None``); no
      ``--tp-comm-overlap`` (1 chunk).
    * ``deepspeed`` (``deepspeed/runtime/zero/config.py`` at edaa72212): ZeRO stage 0;
      ``overlap_comm`` defaults to ``stage == 3``, in ``reduce_bucket_size`` = 5e8-element buckets;
      ``gradient_accumulation_steps`` 1, so the micro-batch is the whole local batch. The bucket in
      bytes is 5e8 elements of the plan's gradient dtype ``grad_dtype`` (the dtype ``--emit`` states
      as ``communication_data_type``, so the emitted ``reduce_bucket_size`` is DeepSpeed's 5e8).
    * ``fsdp2`` (torchtitan at b5bcd76): ``fully_shard`` with ``reshard_after_forward`` (ZeRO 3, 2
      under PP), per-op selective activation checkpointing (``Trainer.Config.activation_checkpoint``
      defaults to ``SelectiveAC``: ``recompute='op_sac'``), no gradient accumulation (micro-batch =
      local batch; under PP ``pipeline_parallel_microbatch_size`` 1), TP always sequence-parallel,
      ``enable_async_tensor_parallel`` off (1 chunk), FSDP2's per-module reduce-scatter overlapped.
    """
    if framework not in FRAMEWORKS:
        raise SpecError("framework", framework, f"one of {', '.join(FRAMEWORKS)}")
    local = max(1, global_batch // max(1, dp))
    if framework == "megatron":
        return {
            "mb": 1,
            "vp": 1,
            "sp": False,
            "zero": 0 if zero is None else zero,
            "recompute": "none",
            "bucket_mb": 0,
            "chunks": 1,
        }
    if framework == "deepspeed":
        z = 0 if zero is None else zero
        elem = GRAD_BYTES if grad_dtype == "fp32" else 2  # costmodel.physics.memory.stage_memory.grad_elem_bytes
        bucket = DEEPSPEED_REDUCE_BUCKET_ELEMENTS * elem / MB if z == 3 else 0
        return {"mb": local, "vp": 1, "sp": False, "zero": z, "recompute": "none", "bucket_mb": bucket, "chunks": 1}
    z = (2 if pp > 1 else 3) if zero is None else zero
    return {
        "mb": 1 if pp > 1 else local,
        "vp": 1,
        "sp": tp > 1,
        "zero": z,
        "recompute": "op_sac",
        "bucket_mb": 100,
        "chunks": 1,
    }
