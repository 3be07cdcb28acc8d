"""A plan as framework settings: Megatron-LM / Megatron-Core arguments, or a DeepSpeed config.

Argument names are those of Megatron-LM's ``megatron/training/arguments.py`` (``_add_distributed_args``,
``_add_training_args``, ``_add_moe_args``, ``_add_transformer_engine_args``) and of DeepSpeed's
configuration JSON (``docs/_pages/config-json.md``, ``deepspeed/runtime/zero/config.py``);
``tests/test_emit.py`` checks every emitted name against those documented lists.

Units: both frameworks size buckets in *elements*, not bytes (Megatron-Core
``DistributedDataParallelConfig.bucket_size``: "maximum number of parameters in each bucket";
DeepSpeed ``reduce_bucket_size``: "number of elements reduced/allreduced at a time"). The plan's
bucket is bytes of FP32 gradients (:data:`costmodel.memory.GRAD_BYTES` per element).

>>> from costmodel.config import ParallelConfig
>>> c = ParallelConfig(tp=8, pp=4, dp=2, mb=1, vp=2, sp=True, zero=1, chunks=8, recompute="selective",
...                    layers_per_stage=(22, 26, 26, 22))
>>> print(megatron_text(c, global_batch=64, layers=96))  # doctest: +NORMALIZE_WHITESPACE
--tensor-model-parallel-size 8 \\
--pipeline-model-parallel-size 4 \\
--context-parallel-size 1 \\
--micro-batch-size 1 \\
--global-batch-size 64 \\
--num-virtual-stages-per-pipeline-rank 2 \\
--decoder-first-pipeline-num-layers 22 \\
--decoder-last-pipeline-num-layers 22 \\
--sequence-parallel \\
--tp-comm-overlap \\
--recompute-granularity selective \\
--use-distributed-optimizer \\
--overlap-grad-reduce \\
--overlap-param-gather \\
--ddp-bucket-size 10000000 \\
--bf16
>>> deepspeed_config(c, global_batch=64)["zero_optimization"]["stage"]
1
"""

from __future__ import annotations

from costmodel.config import ParallelConfig, micro_batches
from costmodel.memory import GRAD_BYTES
from costmodel.specs import Workload

FORMATS = ("megatron", "deepspeed")


def bucket_elements(c: ParallelConfig) -> int:
    """The DP bucket as gradient elements (FP32, :data:`GRAD_BYTES` each)."""
    return int(round(c.bucket_bytes / GRAD_BYTES))


def megatron_args(c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16") -> list[list[str]]:
    """Megatron-LM arguments of plan ``c``, one ``[flag, value...]`` list per argument."""
    out = [["--tensor-model-parallel-size", str(c.tp)], ["--pipeline-model-parallel-size", str(c.pp)],
           ["--context-parallel-size", str(c.cp)]]
    if c.ep > 1:  # experts are not split by TP when they are spread over EP ranks (cost model assumption)
        out += [["--expert-model-parallel-size", str(c.ep)], ["--expert-tensor-parallel-size", "1"]]
    out += [["--micro-batch-size", str(c.mb)], ["--global-batch-size", str(global_batch)]]
    split = c.layers_per_stage
    if c.vp > 1:
        if split is None:
            out.append(["--num-layers-per-virtual-pipeline-stage", str(layers // (c.pp * c.vp))])
        else:
            out.append(["--num-virtual-stages-per-pipeline-rank", str(c.vp)])
    if split is not None and c.pp > 1:
        out += [["--decoder-first-pipeline-num-layers", str(split[0])],
                ["--decoder-last-pipeline-num-layers", str(split[-1])]]
    if c.sp_on:
        out.append(["--sequence-parallel"])
        if c.chunks > 1:  # Transformer Engine userbuffers: chunked AG/RS overlapped with GEMMs
            out.append(["--tp-comm-overlap"])
    if c.recompute == "selective":
        out.append(["--recompute-granularity", "selective"])
    elif c.recompute == "full":
        if c.recompute_layers is None:  # every layer: keep each layer's input, recompute the rest
            out += [["--recompute-granularity", "full"], ["--recompute-method", "uniform"],
                    ["--recompute-num-layers", "1"]]
        else:  # the first k layers of each stage
            out += [["--recompute-granularity", "full"], ["--recompute-method", "block"],
                    ["--recompute-num-layers", str(c.recompute_layers)]]
    if c.zero in (1, 2):
        out.append(["--use-distributed-optimizer"])
    elif c.zero == 3:
        out.append(["--use-torch-fsdp2"])
    if c.bucket_bytes > 0 and c.dp * c.cp > 1:
        out.append(["--overlap-grad-reduce"])
        if c.zero in (1, 2):
            out.append(["--overlap-param-gather"])
        out.append(["--ddp-bucket-size", str(bucket_elements(c))])
    out += {"bf16": [["--bf16"]], "fp16": [["--fp16"]], "fp8": [["--bf16"], ["--fp8-format", "hybrid"]]}[dtype]
    return out


def megatron_text(c: ParallelConfig, global_batch: int, layers: int, dtype: str = "bf16") -> str:
    """The arguments as shell lines ending in ``\\`` (paste into a ``pretrain_gpt.py`` command)."""
    lines = [" ".join(a) for a in megatron_args(c, global_batch, layers, dtype)]
    return " \\\n".join(lines)


def megatron_notes(c: ParallelConfig) -> list[str]:
    """What the arguments cannot express exactly."""
    notes = []
    if c.zero == 2:
        notes.append("ZeRO-2: Megatron's distributed optimizer shards optimizer state and reduce-scatters "
                     "gradients into their shard; it is the closest setting")
    if c.zero == 3 and c.pp > 1:
        notes.append("ZeRO-3 via --use-torch-fsdp2 is documented as not working with pipeline parallelism")
    if c.chunks > 1 and not c.sp_on and c.tp > 1:
        notes.append(f"chunks={c.chunks} without sequence parallelism has no Megatron flag (TP all-reduce overlap)")
    if c.layers_per_stage is not None and c.pp > 2 and len(set(c.layers_per_stage[1:-1])) > 1:
        notes.append("middle stages differ in size: use --pipeline-model-parallel-layout")
    return notes


def deepspeed_config(c: ParallelConfig, global_batch: int, dtype: str = "bf16") -> dict:
    """A DeepSpeed configuration (JSON object) for the ZeRO, batch and precision part of ``c``.

    Tensor, pipeline, context and expert parallel degrees are not DeepSpeed JSON keys (they are
    set by the training script, e.g. Megatron-DeepSpeed's ``--tensor-model-parallel-size``).
    """
    m = micro_batches(Workload(global_batch=global_batch, seq_len=1), c)
    zero = {"stage": c.zero, "overlap_comm": c.bucket_bytes > 0, "contiguous_gradients": True,
            "reduce_scatter": True}
    if c.bucket_bytes > 0:
        zero["reduce_bucket_size"] = bucket_elements(c)
        zero["allgather_bucket_size"] = bucket_elements(c)
        if c.zero == 3:
            zero["stage3_prefetch_bucket_size"] = bucket_elements(c)
    return {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": c.mb,
        "gradient_accumulation_steps": m,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype in ("bf16", "fp8")},
        "fp16": {"enabled": dtype == "fp16"},
    }


def deepspeed_notes(c: ParallelConfig) -> list[str]:
    degrees = (("tp", c.tp), ("pp", c.pp), ("cp", c.cp), ("ep", c.ep), ("vp", c.vp))
    parts = [f"{name}={v}" for name, v in degrees if v > 1]
    notes = []
    if parts:
        notes.append("set " + " ".join(parts) + " in the training script (not DeepSpeed JSON keys)")
    if c.recompute != "none":
        notes.append(f"recompute={c.recompute}: enable activation checkpointing in the model code")
    return notes
