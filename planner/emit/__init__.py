"""A plan as framework settings: Megatron-LM / Megatron-Core arguments (:mod:`planner.emit.megatron`), a DeepSpeed
config (:mod:`planner.emit.deepspeed`) or torchtitan TOML for FSDP2 (:mod:`planner.emit.torchtitan`), refused
unless the format reproduces exactly the evaluated plan (:mod:`planner.emit.refuse`).

Argument names are those of Megatron-LM's ``megatron/training/arguments.py`` (``_add_distributed_args``,
``_add_training_args``, ``_add_moe_args``, ``_add_transformer_engine_args``) and of DeepSpeed's
configuration JSON (``docs/_pages/config-json.md``, ``deepspeed/runtime/zero/config.py``);
``tests/test_emit.py`` checks every emitted name against those documented lists.

Units: both frameworks size buckets in *elements*, not bytes (Megatron-Core
``DistributedDataParallelConfig.bucket_size``: "maximum number of parameters in each bucket";
DeepSpeed ``reduce_bucket_size``: "number of elements reduced/allreduced at a time"). The plan's
bucket is bytes of gradients (:func:`costmodel.physics.memory.stage_memory.grad_elem_bytes` per element, FP32 by default).

>>> from costmodel.spec.plan import ParallelConfig
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
--tp-comm-overlap-cfg tp_comm_overlap.yaml \\
--recompute-granularity selective \\
--use-distributed-optimizer \\
--overlap-grad-reduce \\
--overlap-param-gather \\
--ddp-bucket-size 10000000 \\
--bf16
>>> deepspeed_config(ParallelConfig(tp=8, pp=4, dp=2, zero=1, framework="deepspeed"), global_batch=64)["zero_optimization"]["stage"]
1
"""

from __future__ import annotations

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.workload import Workload

from .deepspeed import deepspeed_config, deepspeed_notes
from .megatron import megatron_args, megatron_notes, megatron_text
from .refuse import FORMATS, refuse_unless_runnable, refuse_unstated_gradients
from .torchtitan import TORCHTITAN_HEADER, torchtitan_lines, torchtitan_notes

__all__ = [
    "FORMATS",
    "emit_text",
    "dma_notes",
    "refuse_unless_runnable",
    "refuse_unstated_gradients",
    "megatron_args",
    "deepspeed_config",
    "torchtitan_lines",
]


def emit_text(
    fmt: str, c: ParallelConfig, workload: Workload, layers: int, moe: bool = False, model=None
) -> tuple[str, list[str]]:
    """``(text, notes)``: the plan as Megatron-LM arguments (shell lines), a DeepSpeed config
    (JSON) or torchtitan TOML, and what the format cannot express exactly; refuses
    (:class:`SpecError`) unless the format reproduces exactly the evaluated plan. ``moe``: the
    model has routed experts; ``model`` (a :class:`~costmodel.spec.specs.ModelSpec`): Megatron-LM's
    lines start with its architecture (:mod:`planner.emit_arch`)."""
    import json

    refuse_unless_runnable(fmt, c)
    if fmt == "fsdp2":
        mtp = model.mtp_layers if model is not None else 0
        text = "\n".join([TORCHTITAN_HEADER] + torchtitan_lines(c, workload, layers, moe=moe, mtp_layers=mtp))
        notes = torchtitan_notes(c)
    elif fmt == "megatron":
        from ..emit_arch import with_model_lines

        mtp = model.mtp_layers if model is not None else 0
        text, notes = megatron_text(c, workload.global_batch, layers, workload.recipe, moe, mtp), megatron_notes(c)
        text, notes = with_model_lines(text, notes, c, workload, model)
    else:
        text, notes = (
            json.dumps(deepspeed_config(c, workload.global_batch, workload.dtype), indent=2),
            deepspeed_notes(c),
        )
    return text, notes + dma_notes(c)


def dma_notes(c: ParallelConfig) -> list[str]:
    """The plan's DMA-engine assignment (:mod:`costmodel.physics.comm.dma`), which no framework has a flag for:
    said in a comment when the plan names one (unset: the engines split evenly)."""
    if c.dma is None:
        return []
    return [
        f"DMA engines per stream (no framework flag: bind each stream's communicator/queue to them): "
        f"{c.dma}; the prediction assumes this assignment"
    ]
