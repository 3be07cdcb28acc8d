"""A plan as torchtitan job-config TOML for PyTorch FSDP2 (``torchtitan/config/job_config.py``), the format
``evaluate --torchtitan-config`` reads back (:mod:`planner.inputs.torchtitan`).
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.layout import Layout, from_split
from costmodel.spec.workload import Workload


def torchtitan_lines(c: ParallelConfig, workload: Workload, layers: int) -> list[str]:
    """The plan as torchtitan job-config TOML (``torchtitan/config/job_config.py``: ``Parallelism``,
    ``Training``, ``ActivationCheckpoint``): FSDP2 shards over ``dp`` (zero 2/3) or DDP replicates
    (zero 0); zero=3 reshards after forward (``fsdp_reshard_after_forward = "always"``), zero=2 not
    (``"never"``); chunked TP overlap is async TP, which needs ``torch.compile``. With a pipeline,
    the even split the plan was evaluated with: ``pipeline_parallel_layers_per_stage`` layers per
    virtual stage and the embedding / output not counted as layers (torchtitan's ``pipeline_llm``
    counts each as one layer by default, ``pipeline_parallel_first/last_stage_less_layers = 1``); an uneven
    split (per-rank counts, a layout) as ``module_fqns_per_model_part`` (:func:`torchtitan_model_parts`).

    >>> print("\\n".join(torchtitan_lines(ParallelConfig(tp=8, pp=2, dp=4, sp=True, zero=3, framework="fsdp2"),
    ...                                    Workload(global_batch=64, seq_len=4096), 32)[:5]))
    [parallelism]
    data_parallel_replicate_degree = 1
    data_parallel_shard_degree = 4
    fsdp_reshard_after_forward = "always"
    tensor_parallel_degree = 8
    """
    frameworks.check_fields("fsdp2", zero=c.zero, tp=c.tp, sp=c.sp_on, chunks=c.chunks)
    shard = c.zero >= 2
    out = [
        "[parallelism]",
        f"data_parallel_replicate_degree = {1 if shard else c.dp}",
        f"data_parallel_shard_degree = {c.dp if shard else 1}",
    ]
    if shard:
        out.append(f'fsdp_reshard_after_forward = "{"always" if c.zero == 3 else "never"}"')
    out += [
        f"tensor_parallel_degree = {c.tp}",
        f"enable_async_tensor_parallel = {'true' if c.chunks > 1 and c.tp > 1 else 'false'}",
        f"pipeline_parallel_degree = {c.pp}",
    ]
    if c.pp > 1:
        out += [
            f'pipeline_parallel_schedule = "{"Interleaved1F1B" if c.vp > 1 else "1F1B"}"',
            f"pipeline_parallel_microbatch_size = {c.mb}",
        ]
        lay = c.layout or (from_split(tuple(c.layers_per_stage), c.vp) if c.layers_per_stage is not None else None)
        if lay is None or len({s.decoder for s in lay.stages}) == 1:
            out += [
                f"pipeline_parallel_layers_per_stage = {layers // (c.pp * c.vp)}",
                "pipeline_parallel_first_stage_less_layers = 0",
                "pipeline_parallel_last_stage_less_layers = 0",
            ]
        else:
            out.append(f"module_fqns_per_model_part = {torchtitan_model_parts(lay)}")
    out += [
        f"context_parallel_degree = {c.cp}",
        f"expert_parallel_degree = {c.ep}",
        "",
        "[training]",
        f"global_batch_size = {workload.global_batch}",
        # gradient accumulation = global / (local * dp); with PP the local batch is split into
        # pipeline micro-batches of pipeline_parallel_microbatch_size
        f"local_batch_size = {c.mb if c.pp == 1 else workload.global_batch // c.dp}",
        f"seq_len = {workload.seq_len}",
        f'mixed_precision_param = "{_torchtitan_param_dtype(workload.dtype)}"',
        "",
        "[activation_checkpoint]",
        f'mode = "{"selective" if c.recompute == "op_sac" else c.recompute}"',
    ]
    if c.recompute in ("selective", "op_sac"):  # op_sac is torchtitan's per-op selective checkpointing
        out.append('selective_ac_option = "op"')
    if (c.chunks > 1 and c.tp > 1) or c.fused_elementwise:  # async TP needs it; fused element-wise ops are compiled
        out += ["", "[compile]", "enable = true"]
    elif c.fused_norm:  # v0.2.2 has no fused_rmsnorm (removed in 37c4b818, 2025-02): its norms run eager
        out.insert(0, "# the plan's fused RMSNorm (fused_norm) is not in this torchtitan: its norms run eager, slower")
    return out


#: the torchtitan whose job-config TOML :func:`torchtitan_lines` writes (``torchtitan/config/job_config.py``
#: at tag v0.2.2, 73a0e69); torchtitan main after it (b5bcd76) takes Python ``Trainer.Config``
#: functions instead (``torchtitan/config/README.md``), with ``--section.option`` flags kept for old scripts
TORCHTITAN_VERSION = "v0.2.2"
TORCHTITAN_HEADER = (
    f"# torchtitan {TORCHTITAN_VERSION} job config (TOML, --job.config_file): torchtitan main after "
    f"{TORCHTITAN_VERSION} configures runs with Python Trainer.Config functions instead"
)


def torchtitan_model_parts(lay: Layout) -> str:
    """torchtitan's ``module_fqns_per_model_part`` (v0.2.2 ``config/job_config.py``) of an uneven split, as
    TOML: one list of module names per virtual stage, in stage order; torchtitan's looped schedules
    (Interleaved1F1B, 1F1B) put stage ``k`` on rank ``k % pp`` (``distributed/pipeline_parallel.py``
    ``pipeline_module_split._get_stage_indices``, style "loop"), the order of :class:`costmodel.spec.layout.Layout`,
    so each virtual stage holds the layers the plan was evaluated with. A stage with no module is refused.

    >>> torchtitan_model_parts(from_split((3, 2), 1))
    '[["tok_embeddings", "layers.0", "layers.1", "layers.2"], ["layers.3", "layers.4", "norm", "output"]]'
    """
    parts = []
    for k, s in enumerate(lay.stages):
        names = (
            (["tok_embeddings"] if s.embedding else [])
            + [f"layers.{i}" for i in lay.layer_ids(k % lay.pp, k // lay.pp)]
            + (["norm", "output"] if s.loss else [])
        )
        if not names or s.mtp:
            raise SpecError(
                "layers_per_stage",
                ",".join(map(str, lay.per_rank())),
                f"a split whose every virtual stage holds a layer, the embedding or the loss, and no MTP "
                f"layer, for --emit fsdp2 (virtual stage {k} of rank {k % lay.pp} holds {s.text() or 'nothing'})",
            )
        parts.append(names)
    return "[" + ", ".join("[" + ", ".join(f'"{n}"' for n in names) + "]" for names in parts) + "]"


def _torchtitan_param_dtype(dtype: str) -> str:
    """torchtitan's ``mixed_precision_param`` (``Literal["bfloat16", "float32"]`` at v0.2.2 and at main):
    FP16 has no torchtitan setting, so it is refused; FP8 runs keep BF16 parameters."""
    if dtype == "fp16":
        raise SpecError(
            "dtype",
            dtype,
            "bf16 or fp8 for --emit fsdp2 (torchtitan's mixed_precision_param allows bfloat16 or float32 only)",
        )
    return "bfloat16"


def torchtitan_notes(c: ParallelConfig) -> list[str]:
    notes = []
    if c.recompute == "selective":
        notes.append(
            'torchtitan has no attention-only selective recompute; selective_ac_option = "op" replays '
            "more (every second matmul, element-wise ops): evaluate recompute=op_sac for that"
        )
    return notes
