"""A plan as torchtitan job-config TOML for PyTorch FSDP2 (``torchtitan/config/job_config.py``), the format
``evaluate --torchtitan-config`` reads back (:mod:`planner.inputs.torchtitan`).
"""

from __future__ import annotations

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.layout import Layout, from_split
from costmodel.spec.workload import Workload


def torchtitan_lines(
    c: ParallelConfig, workload: Workload, layers: int, *, moe: bool = False, mtp_layers: int = 0
) -> list[str]:
    """The plan as torchtitan job-config TOML (``torchtitan/config/job_config.py``: ``Parallelism``,
    ``Training``, ``Model``, ``Quantize``, ``ActivationCheckpoint``, ``Compile``): FSDP2 shards over ``dp``
    (zero 2/3) or DDP replicates (zero 0); zero=3 reshards after forward (``fsdp_reshard_after_forward =
    "always"``), zero=2 not (``"never"``); chunked TP overlap is async TP, which needs the model compiled. With a
    pipeline, the even split the plan was evaluated with: ``pipeline_parallel_layers_per_stage`` layers per
    virtual stage and the embedding / output not counted as layers (torchtitan's ``pipeline_llm`` counts each as
    one layer by default, ``pipeline_parallel_first/last_stage_less_layers = 1``); an uneven split (per-rank
    counts, a layout) as ``module_fqns_per_model_part`` (:func:`torchtitan_model_parts`). Each plan field the
    TOML states, and the reason: :func:`torchtitan_fields`; what it cannot state is refused before
    (:func:`planner.emit.refuse.refuse_unless_runnable`). ``moe`` (the model has routed experts; ep > 1 implies
    it) and ``mtp_layers`` (the MTP layers the plan was priced with) refuse what torchtitan does not train: FP8
    experts under the dense float8 converter, and MTP modules.

    >>> print("\\n".join(torchtitan_lines(ParallelConfig(tp=8, pp=2, dp=4, sp=True, zero=3, framework="fsdp2"),
    ...                                    Workload(global_batch=64, seq_len=4096), 32)[:5]))
    [parallelism]
    data_parallel_replicate_degree = 1
    data_parallel_shard_degree = 4
    fsdp_reshard_after_forward = "always"
    tensor_parallel_degree = 8
    """
    frameworks.check_fields("fsdp2", zero=c.zero, tp=c.tp, sp=c.sp_on, chunks=c.chunks)
    if mtp_layers:
        raise SpecError(
            "mtp_layers",
            mtp_layers,
            "0 for --emit fsdp2 (torchtitan v0.2.2 trains no multi-token-prediction module; --mtp-layers 0 plans "
            "without it)",
        )
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
    ]
    if c.ep > 1:  # "No effect for non-MoE models or when ep = 1"
        out.append(f'expert_parallel_comm_backend = "{"deepep" if c.ep_dispatcher == "deepep" else "standard"}"')
    out += [
        "",
        "[training]",
        f"global_batch_size = {workload.global_batch}",
        # gradient accumulation = global / (local * dp); with PP the local batch is split into
        # pipeline micro-batches of pipeline_parallel_microbatch_size
        f"local_batch_size = {c.mb if c.pp == 1 else workload.global_batch // c.dp}",
        f"seq_len = {workload.seq_len}",
        f'mixed_precision_param = "{_torchtitan_param_dtype(workload.dtype)}"',
    ]
    if c.optimizer_dtype == "bf16":  # the model built in BF16, updated in place: no FP32 master copy
        out.append('dtype = "bfloat16"')
    converter = _torchtitan_converter(workload.recipe, c, moe or c.ep > 1)
    if converter:
        out += [
            "",
            "[model]",
            f'converters = ["{converter}"]',
            "",
            "[quantize.linear.float8]",
            'recipe_name = "tensorwise"',
        ]
    out += [
        "",
        "[activation_checkpoint]",
        f'mode = "{"selective" if c.recompute == "op_sac" else c.recompute}"',
    ]
    if c.recompute == "op_sac":  # torchtitan's per-op selective checkpointing
        out.append('selective_ac_option = "op"')
    components = [name for name, on in (("model", c.fused_elementwise), ("loss", c.loss_impl == "fused")) if on]
    out += ["", "[compile]", f"enable = {'true' if components else 'false'}"]
    if components:
        out.append("components = [" + ", ".join(f'"{n}"' for n in components) + "]")
    return out


def torchtitan_fields() -> dict[str, str]:
    """``{plan field: the job-config key that states it}`` for the fields :func:`torchtitan_lines` writes beyond
    the degrees, batch and split, each with what torchtitan v0.2.2 runs (73a0e69)."""
    return {
        "optimizer_dtype": 'training.dtype = "bfloat16" builds the model in BF16 and AdamW updates it in place, '
        "no FP32 master copy (train.py: set_default_dtype(training.dtype) around the model's construction); "
        "unset (float32): mixed precision",
        "ep_dispatcher": 'parallelism.expert_parallel_comm_backend = "deepep" (DeepEP kernels) or "standard" '
        "(all-to-all)",
        "fused_elementwise": 'compile.components holds "model": each TransformerBlock compiled (apply_compile), '
        "its element-wise ops fused; without it they run eager",
        "loss_impl": 'compile.components holds "loss": cross_entropy(pred.float(), labels) compiled (fused); '
        "without it the eager FP32 log-softmax runs (loss_impl fp32; components/loss.py build_cross_entropy_loss)",
        "workload.recipe": 'model.converters = ["quantize.linear.float8"] with quantize.linear.float8.recipe_name '
        '"tensorwise": every nn.Linear but the output head in FP8 with dynamic per-tensor scales (fp8-tensorwise)',
        "cp_impl": "context_parallel_degree > 1 runs PyTorch's context_parallel, K/V all-gathered (cp_impl torch)",
    }


def _torchtitan_converter(recipe: str, c: ParallelConfig, moe: bool) -> str | None:
    """The ``model.converters`` entry of a recipe: ``quantize.linear.float8`` for FP8 with dynamic per-tensor
    scaling, none for BF16; another recipe is refused. torchao's Float8Linear scales each tensor from its current
    amax (``Float8LinearConfig()``, tensorwise; delayed scaling left torchao in 2025), so the planner's ``fp8``
    (delayed scaling, Megatron's default) has no torchtitan setting. With TP it is refused: torchtitan v0.2.2
    turns on its Float8 TP plan only for a converter named ``"float8"`` (``parallelize.py``: ``"float8" in
    job_config.model.converters``), a name its converter registry lacks, so FP8 with TP runs BF16 all-gathers the
    plan is not priced with. For an MoE model (``moe``) it is refused: the converter swaps ``nn.Linear`` modules,
    not the experts' grouped weights (``quantize.grouped_mm.float8`` scales them row-wise, a prototype that refuses
    PP and CP), so the experts run BF16 GEMMs."""
    if recipe == "bf16":
        return None
    if recipe != "fp8-tensorwise":
        raise SpecError(
            "dtype",
            recipe,
            "bf16 or fp8-tensorwise for --emit fsdp2 (torchtitan's float8 converter scales each tensor dynamically, "
            "torchao Float8LinearConfig tensorwise; no torchtitan setting runs delayed, blockwise or FP4 recipes)",
        )
    if c.tp > 1:
        raise SpecError(
            "dtype",
            recipe,
            "bf16 for --emit fsdp2 with tp > 1 (torchtitan v0.2.2 applies its Float8 TP plan only for a converter "
            'named "float8", which its registry lacks: quantize.linear.float8 with TP gathers BF16 inputs)',
        )
    if moe:
        raise SpecError(
            "dtype",
            recipe,
            "bf16 for --emit fsdp2 with routed experts (quantize.linear.float8 swaps nn.Linear modules, not the "
            "experts' grouped GEMMs, which stay BF16; quantize.grouped_mm.float8 scales row-wise)",
        )
    return "quantize.linear.float8"


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
    """Nothing the TOML leaves out: a plan it cannot state is refused (attention-only selective recompute too,
    :func:`planner.emit.refuse.refuse_unless_runnable`)."""
    del c
    return []
