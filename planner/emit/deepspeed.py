"""A plan as a DeepSpeed configuration (JSON: ``docs/_pages/config-json.md``, ``deepspeed/runtime/zero/config.py``)
for its ZeRO, batch and precision part, and what the JSON cannot say (notes: the degrees the training script sets).

DeepSpeed sizes buckets in *elements* (``reduce_bucket_size``: "number of elements reduced/allreduced at a
time"), as Megatron-Core does: :func:`planner.emit.megatron.bucket_elements`.
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.spec.workload import Workload

from .megatron import bucket_elements


def deepspeed_config(c: ParallelConfig, global_batch: int, dtype: str = "bf16") -> dict:
    """A DeepSpeed configuration (JSON object) for the ZeRO, batch and precision part of ``c``.

    Tensor, pipeline, context and expert parallel degrees are not DeepSpeed JSON keys (they are
    set by the training script, e.g. Megatron-DeepSpeed's ``--tensor-model-parallel-size``).
    """
    frameworks.check_fields("deepspeed", zero=c.zero, pp=c.pp, vp=c.vp, cp=c.cp, chunks=c.chunks)
    m = micro_batches(Workload(global_batch=global_batch, seq_len=1), c)
    # DeepSpeed overlaps the gradient reduction only in its ZeRO optimizer, and not under its pipeline engine
    # (engine.py at edaa72212: stage 0 all-reduces after backward, buffered_allreduce_fallback; with a
    # PipelineModule "overlapped communication ... will be disabled"): there the JSON states no overlap and no
    # bucket, what DeepSpeed runs (read back as bucket 0; a plan priced with one differs: the search's to mend)
    overlap = c.bucket_bytes > 0 and c.zero > 0 and c.pp == 1
    zero = {"stage": c.zero, "overlap_comm": overlap, "contiguous_gradients": True, "reduce_scatter": True}
    if overlap:
        zero["reduce_bucket_size"] = bucket_elements(c)
        zero["allgather_bucket_size"] = bucket_elements(c)
        if c.zero == 3:
            zero["stage3_prefetch_bucket_size"] = bucket_elements(c)
    out = {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": c.mb,
        "gradient_accumulation_steps": m,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype in ("bf16", "fp8")},
        "fp16": {"enabled": dtype == "fp16"},
    }
    # the plan's FP32 gradient reduction: unset, DeepSpeed reduces in the half dtype it trains in
    # (deepspeed/runtime/engine.py at edaa72212, communication_data_type: fp16, else bf16, else fp32)
    if c.grad_dtype == "fp32" and dtype in ("bf16", "fp16", "fp8"):
        out["communication_data_type"] = "fp32"
    return out


def deepspeed_notes(c: ParallelConfig) -> list[str]:
    degrees = (("tp", c.tp), ("pp", c.pp), ("cp", c.cp), ("ep", c.ep), ("vp", c.vp))
    parts = [f"{name}={v}" for name, v in degrees if v > 1]
    if c.sp_on:
        parts.append("sequence parallelism on (Megatron-DeepSpeed --sequence-parallel)")
    if c.pp > 1:  # the even split the plan was evaluated with (Megatron-DeepSpeed GPTModelPipe's default)
        parts.append("PipelineModule(partition_method='type:transformer'): equal transformer layers per stage")
    notes = []
    if parts:
        notes.append("set " + ", ".join(parts) + " in the training script (not DeepSpeed JSON keys)")
    if c.recompute != "none":
        notes.append(f"recompute={c.recompute}: enable activation checkpointing in the model code")
    return notes
