"""Emitted torchtitan TOML and DeepSpeed JSON read back: the same plan and the same predicted step time.

    python -m benchmarks.emit_roundtrip_other [--only published|recommend|stated] [--cases NAME,...]

Three kinds of plans:

* every usable published row whose framework is ``fsdp2`` or ``deepspeed`` (``benchmarks/published``, set
  ``all``): the plan as :func:`benchmarks.published.predict` prices it (op-graph engine), emitted as
  ``planner recommend ... --emit <framework>`` prints it (:func:`planner.emit.emit_text`);
* the answers of ``planner recommend ... --framework F --emit F`` for the stated problems of :data:`PROBLEMS`
  (dense Llama and MoE models, 8 to 64 GPUs, ZeRO 0-3, recompute choices, TP with async TP, CP, PP with an uneven
  split, EP with DeepEP, FP8, the BF16 optimizer, the FP32 loss, eager kernels; for DeepSpeed TP, PP, EP, Hugging
  Face modules, unfused attention): the command line runs in-process, and the plan it emits is the one its
  ``_emit`` is given, its text what it prints;
* the plans of :data:`STATED`, which no search answer or published row has (PyTorch's CP, a BF16 model at dp 1,
  a model with an MTP layer), priced as ``planner evaluate`` prices them.

Each emitted text is written to a file and read back as ``planner evaluate --torchtitan-config FILE`` /
``--deepspeed-config FILE --model M --cluster C --gpus N`` reads it (:func:`planner.completion.stated_plan`),
with, for DeepSpeed, the planner flags of :data:`SCRIPT_FIELDS` (what the JSON does not hold: the training
script states it). Compared: every :class:`~costmodel.spec.plan.ParallelConfig` field (less :data:`EXCLUDED`;
those of :data:`BY_MEANING` by what they mean), the workload (global batch, sequence length, recipe), the model
(a configuration may drop its MTP layers) and the predicted step time of the same engine within :data:`REL_TOL`;
then what the format's own parser states (``stated <key>``, before ``evaluate`` takes it: a key
``planner/framework_plan.py`` drops still counts) against the plan, and the emitted keys against the real
configuration schemas: torchtitan v0.2.2's ``JobConfig`` dataclasses (:data:`TORCHTITAN_V022_SCHEMA`, whose
``ConfigManager`` refuses any other key) and DeepSpeed edaa72212's top-level, ``zero_optimization`` and precision
keys (a key it would ignore is a difference, ``keys``).

Printed per plan: ``same``, ``differs`` (each field that differs, original -> read back, and the step time's
change), ``emit refused`` (the emitter has no words for the plan, with its one-line reason) or ``read refused``.
Exit 1 when an emitted plan does not read back identical.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import tomllib
import warnings
from dataclasses import dataclass, fields

from benchmarks import flags_roundtrip as F
from benchmarks.flags_roundtrip import detail
from benchmarks import results_io
from benchmarks.published import load_set, predict
from costmodel.spec.errors import PlannerError
from costmodel.spec.plan import ParallelConfig

#: relative tolerance of the step time read back (the same engine on the same plan: equal up to rounding)
REL_TOL = F.REL_TOL
#: each format's ``evaluate`` flag
READ_FLAG = {"fsdp2": "--torchtitan-config", "deepspeed": "--deepspeed-config"}
#: ParallelConfig fields left out of the comparison, each with its reason
EXCLUDED = {
    "dma": "the DMA engines each communication stream runs on: no framework has a setting for it (--emit says it "
    "in a note, planner.emit.dma_notes), so it reads back unset; no plan here names one",
}
#: the fields compared
COMPARED = tuple(f.name for f in fields(ParallelConfig) if f.name not in EXCLUDED)
#: compared fields whose value is compared by what it means, each with its reason (:func:`meaning`)
BY_MEANING = {
    "layout": "compared as the layout the plan runs (costmodel.spec.layout.of): unset stands for the layout of "
    "layers_per_stage and vp, which the formats state",
    "sp": "compared as sequence parallelism in effect (ParallelConfig.sp_on: it needs tp > 1)",
    "ep_dispatcher": "compared where ep > 1: at ep 1 no token is dispatched",
    "pp_free_stage_inputs": "compared where pp > 1; at pp 1 it changes nothing",
    "zero": "compared where dp * cp > 1: with one data-parallel rank and no CP ranks no ZeRO stage shards or "
    "reduces anything (the same step time and memory), and torchtitan applies no fully_shard",
    "bucket_bytes": "compared where the cost model reads it: under fsdp2 where gradients are reduced once per step "
    "(DDP at zero 0, FSDP2 without resharding under a pipeline: 100 MB, torchtitan's; FSDP2 reducing every "
    "micro-batch reduce-scatters per fully_shard unit whatever the bucket), under deepspeed with zero >= 1 "
    "(reduce_bucket_size; stage 0 all-reduces after backward, priced alike whatever the bucket); with dp * cp = 1 "
    "nothing is reduced (elsewhere the same step time and memory whatever the bucket)",
    "module_layout": "under fsdp2 not compared: FSDP2 gathers a block as one unit whatever its modules (the cost "
    "model reads it for DeepSpeed's per-module fetches only); every DeepSpeed plan's is compared",
}
#: plan fields a DeepSpeed JSON does not hold, which the training script states (Megatron-DeepSpeed's arguments,
#: the model code): the read-back takes them from the planner flags (as ``evaluate --deepspeed-config`` asks),
#: each with its reason; every other field comes from the JSON or DeepSpeed's defaults
SCRIPT_FIELDS = {
    "deepspeed": {
        "tp": "the tensor-parallel degree (Megatron-DeepSpeed --tensor-model-parallel-size; no DeepSpeed JSON key)",
        "pp": "the pipeline degree (Megatron-DeepSpeed --pipeline-model-parallel-size, PipelineModule(num_stages))",
        "ep": "the expert-parallel degree (deepspeed.moe.layer.MoE(ep_size=...) in the model code)",
        "sp": "Megatron-DeepSpeed's --sequence-parallel (a model-code setting)",
        "recompute": "which activations are recomputed: the model code's checkpointing calls (the JSON's "
        "activation_checkpointing section only configures deepspeed.checkpointing, and states full recompute)",
        "seq": "the sequence length (the data loader's; no DeepSpeed JSON key)",
        "dtype": "FP8 GEMMs (Transformer Engine layers in the model code; the JSON states BF16 or FP16 only)",
        "module_layout": "fused or Hugging Face modules: how the model code builds its layers",
        "flash_attention": "the attention kernel (the model code's: Megatron-DeepSpeed --use-flash-attn)",
        "loss_impl": "how the model code computes the cross-entropy (fused vocab-parallel or an FP32 upcast)",
    },
    "fsdp2": {},
}


def _fields(text: str) -> dict:
    return dict.fromkeys(text.split())


#: torchtitan v0.2.2's job-config dataclasses (``torchtitan/config/job_config.py`` at tag v0.2.2, 73a0e69, the version
#: planner/inputs/torchtitan.py cites) as ``{key: None (a field) or {...} (a nested table)}``, for the sections
#: ``--emit fsdp2`` may write: ``ConfigManager._dict_to_dataclass`` (``config/manager.py``) raises
#: ``ValueError("Invalid field names ...")`` for a key no dataclass has, a whole section too
TORCHTITAN_V022_SCHEMA = {
    "parallelism": _fields(
        "data_parallel_replicate_degree data_parallel_shard_degree fsdp_reshard_after_forward tensor_parallel_degree "
        "disable_loss_parallel enable_async_tensor_parallel pipeline_parallel_degree module_fqns_per_model_part "
        "pipeline_parallel_first_stage_less_layers pipeline_parallel_last_stage_less_layers "
        "pipeline_parallel_layers_per_stage pipeline_parallel_schedule pipeline_parallel_schedule_csv "
        "pipeline_parallel_microbatch_size pipeline_parallel_expert_parallel_overlap context_parallel_degree "
        "context_parallel_load_balancer context_parallel_rotate_method expert_parallel_degree "
        "expert_tensor_parallel_degree expert_parallel_comm_backend"
    ),
    "training": _fields(
        "dataset dataset_path local_batch_size global_batch_size seq_len max_norm steps enable_cpu_offload dtype "
        "mixed_precision_param mixed_precision_reduce gc_freq gc_debug dataloader"
    ),
    "model": _fields("name flavor hf_assets_path tokenizer_path converters print_after_conversion"),
    "activation_checkpoint": _fields(
        "mode selective_ac_option per_op_sac_force_recompute_mm_shapes_by_fqns early_stop memory_budget "
        "visualize_memory_budget_pareto preserve_rng_state determinism_check debug"
    ),
    "compile": _fields("enable components backend"),
    "quantize": {
        "linear": {
            "float8": _fields(
                "enable_fsdp_float8_all_gather precompute_float8_dynamic_scale_for_fsdp recipe_name filter_fqns emulate"
            ),
            "mx": _fields("mxfp8_dim1_cast_kernel_choice recipe_name filter_fqns"),
        },
        "grouped_mm": {"float8": _fields("fqns"), "mx": _fields("recipe_name fqns")},
    },
}
#: DeepSpeed edaa72212's ``bf16`` / ``fp16`` section fields (``deepspeed/runtime/precision_config.py``
#: ``DeepSpeedBF16Config``, ``DeepSpeedFP16Config``), the two ``--emit deepspeed`` writes besides ``zero_optimization``
DEEPSPEED_PRECISION = {
    "bf16": _fields(
        "enabled immediate_grad_update check_grad_overflow bf16_master_weights_and_grads bf16_optimizer_states"
    ),
    "fp16": _fields(
        "enabled auto_cast loss_scale initial_scale_power loss_scale_window hysteresis consecutive_hysteresis "
        "min_loss_scale fp16_master_weights_and_grads"
    ),
}


def _unknown(table: dict, schema: dict, where: str = "") -> list[str]:
    bad = []
    for k, v in table.items():
        if k not in schema:
            bad.append(where + k)
        elif isinstance(schema[k], dict) and isinstance(v, dict):
            bad += _unknown(v, schema[k], f"{where}{k}.")
    return bad


def unknown_keys(fmt: str, text: str) -> list[str]:
    """Keys of the emitted ``text`` the real parser would refuse or ignore (empty: all are real): torchtitan
    v0.2.2's dataclasses (:data:`TORCHTITAN_V022_SCHEMA`), DeepSpeed edaa72212's top-level keys and
    ``DeepSpeedZeroConfig`` fields (``planner.inputs.deepspeed``'s lists, read at that commit) and precision
    sections (:data:`DEEPSPEED_PRECISION`)."""
    if fmt == "fsdp2":
        return _unknown(tomllib.loads(text), TORCHTITAN_V022_SCHEMA)
    from planner.inputs import deepspeed as ds

    d = json.loads(text)
    schema = {k: None for k in ds.DEEPSPEED_KEYS}
    schema.update(DEEPSPEED_PRECISION, zero_optimization=dict.fromkeys(ds.DEEPSPEED_ZERO_KEYS))
    return _unknown(d, schema)


def meaning(model, c: ParallelConfig, k: str):
    """Field ``k`` of plan ``c`` as compared: its value, or for :data:`BY_MEANING` what it means for ``model``."""
    if k == "zero":
        return c.zero if c.dp * c.cp > 1 else None
    if k == "bucket_bytes":
        from costmodel.frameworks.rules import of

        moot = c.dp * c.cp == 1 or (of(c).step_grad is None if c.framework == "fsdp2" else c.zero == 0)
        return None if moot else c.bucket_bytes
    if k == "module_layout":
        return None if c.framework == "fsdp2" else c.module_layout
    return F.meaning(model, c, k)


def differences(want, got, model, workload, back_workload, back_model=None) -> dict:
    """``{field: (original, read back)}`` of the compared fields, the workload's and the model's that differ (a
    configuration may change what the model trains: its MTP layers, token dropping, dropout)."""
    pairs = {k: (meaning(model, want, k), meaning(model, got, k)) for k in COMPARED}
    for k in ("global_batch", "seq_len", "recipe"):
        pairs[f"workload.{k}"] = (getattr(workload, k), getattr(back_workload, k))
    if back_model is not None:
        for f in fields(model):
            pairs[f"model.{f.name}"] = (getattr(model, f.name), getattr(back_model, f.name))
    return {k: (a, b) for k, (a, b) in pairs.items() if a != b}


def script_flags(fmt: str, c: ParallelConfig, workload) -> list[str]:
    """The planner flags ``evaluate`` is given beside the configuration: the :data:`SCRIPT_FIELDS` of ``c``."""
    out = []
    for k in SCRIPT_FIELDS[fmt]:
        if k == "seq":
            out += ["--seq", str(workload.seq_len)]
        elif k == "dtype":
            out += ["--dtype", workload.recipe]
        elif k == "sp":
            out.append("--sp" if c.sp else "--no-sp")
        elif k == "flash_attention":
            out += [] if c.flash_attention else ["--no-flash-attention"]
        else:
            out += ["--" + k.replace("_", "-"), str(getattr(c, k))]
    return out


def read_back(fmt: str, text: str, model, cluster, gpus: int, flags: list[str]):
    """``planner evaluate --<format>-config FILE --gpus N FLAGS`` on ``model`` and ``cluster``: the stated plan."""
    from planner.cli import build_parser
    from planner.completion import stated_plan

    with tempfile.NamedTemporaryFile("w", suffix=".toml" if fmt == "fsdp2" else ".json", delete=False) as f:
        f.write(text)
    try:
        args = build_parser().parse_args(
            ["evaluate", READ_FLAG[fmt], f.name, "--model", "spec", "--cluster", "spec", "--gpus", str(gpus)]
            + flags
            + ["--json"]
        )
        args.model, args.cluster = model, cluster  # the specs themselves, as a --model/--cluster file gives them
        return stated_plan(args)
    finally:
        os.unlink(f.name)


def roundtrip_estimate(est, model, cluster, workload, text: str | None = None) -> dict:
    """The round trip of the plan of estimate ``est``: emitted (``text``: as already printed) and read back.
    ``status`` (``same``, ``differs``, ``emit refused``, ``read refused``), ``fields`` (:func:`differences`,
    ``keys`` for keys the real parser lacks), ``rel`` (read-back step time / original - 1) and ``why``."""
    from planner.emit import emit_text

    fmt = est.config.framework
    out = {
        "framework": fmt,
        "plan": plan_text(est.config),
        "config": est.config,
        "recipe": workload.recipe,
        "gpus": est.config.gpus,
        "fields": {},
        "rel": None,
        "why": "",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tight or framework-refused plan is still priced, with a warning
        if text is None:
            try:
                text, _notes = emit_text(fmt, est.config, workload, model.layers, model.is_moe, model=model)
            except PlannerError as e:
                return {**out, "status": "emit refused", "why": str(e)}
        out["text"] = text
        try:
            back = read_back(fmt, text, model, cluster, est.config.gpus, script_flags(fmt, est.config, workload))
        except PlannerError as e:
            return {**out, "status": "read refused", "why": str(e)}
    diff = differences(est.config, back.estimate.config, model, workload, back.workload, back.model)
    diff.update(stated_differences(fmt, text, est.config, model, workload))
    bad_keys = unknown_keys(fmt, text)
    if bad_keys:
        diff["keys"] = ("real keys", ",".join(bad_keys))
    rel = back.estimate.step_time_s / est.step_time_s - 1
    same = not diff and abs(rel) <= REL_TOL
    return {**out, "status": "same" if same else "differs", "fields": diff, "rel": rel}


#: the parser's stated keys (CLI names) that are another ParallelConfig field or the workload's
STATED_AS = {"bucket_mb": "bucket_bytes", "dtype": "workload.recipe", "seq": "workload.seq_len"}


def stated_differences(fmt: str, text: str, c: ParallelConfig, model, workload) -> dict:
    """``{"stated <key>": (the plan's, the configuration's)}`` where what the format's parser reads from ``text``
    (:data:`planner.inputs.PARSERS`, before ``evaluate`` makes it a plan) is not the plan's value (by
    :func:`meaning`): a configuration that states another plan than the one emitted, even where ``evaluate``
    then drops the stated key (it takes only the keys ``planner.framework_plan`` names)."""
    from dataclasses import replace

    from costmodel.spec.units import MB
    from planner.inputs import PARSERS

    parse, _inline = PARSERS[READ_FLAG[fmt].lstrip("-").replace("-", "_")]
    out = {}
    for k, v in parse(text).stated.items():
        name = STATED_AS.get(k, k)
        if fmt == "deepspeed" and k == "dtype":  # the JSON's half precision; FP8 GEMMs are the model code's
            want, got = "fp16" if workload.dtype == "fp16" else "bf16", v
        elif name.startswith("workload."):
            want, got = getattr(workload, name.split(".")[1]), v
        elif name in COMPARED:
            try:
                stated = replace(c, **{name: v * MB if name == "bucket_bytes" else v})
                want, got = meaning(model, c, name), meaning(model, stated, name)
            except PlannerError as e:
                want, got = meaning(model, c, name), f"{v} ({e})"
        else:
            continue
        if want != got:
            out[f"stated {k}"] = (want, got)
    return out


# --------------------------------------------------------------------------- the plans
def published_rows(name: str = "all") -> list:
    """The usable rows of set ``name`` whose plan runs under FSDP2 or DeepSpeed."""
    return [r for r in load_set(name) if not r.skip and r.fixed.get("framework") in READ_FLAG]


def roundtrip_row(row) -> dict:
    """One published plan's round trip (``status`` ``no prediction`` where it has none)."""
    out = {"case": f"row {row.row_id}", "what": f"{row.source} {row.label}"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est, why = predict(row)
    if est is None:
        return {
            **out,
            "framework": row.fixed["framework"],
            "plan": "",
            "status": "no prediction",
            "fields": {},
            "rel": None,
            "why": why,
        }
    return {**out, **roundtrip_estimate(est, row.model, row.cluster, row.workload)}


@dataclass(frozen=True)
class Problem:
    """A stated problem ``planner recommend`` answers for ``framework``: its command line less the framework."""

    name: str
    framework: str
    argv: tuple[str, ...]

    def command(self) -> list[str]:
        return ["recommend", *self.argv, "--framework", self.framework, "--emit", self.framework]


def _p(name: str, fw: str, model: str, gpus: int, gb: int, seq: int, *rest: str, cluster: str = "h100-sxm"):
    argv = ("--model", model, "--cluster", cluster, "--gpus", str(gpus), "--global-batch", str(gb), "--seq", str(seq))
    return Problem(name, fw, argv + rest)


#: the stated problems (each answered by the search, then emitted and read back). The rule: for each format, one
#: problem per setting it states (each ZeRO stage it runs, each recompute choice, each parallel degree, an uneven
#: split, the precision, the optimizer dtype, the MoE dispatcher) on dense Llama and MoE models, 8 to 64 GPUs; a
#: degree the problem is not about is pinned to 1 so that the search cannot move the case elsewhere
PROBLEMS = (
    # torchtitan (FSDP2)
    _p("tt-8b-16", "fsdp2", "llama3-8b", 16, 64, 4096),
    _p("tt-3b-ddp", "fsdp2", "mpt-3b", 8, 64, 2048, "--zero", "0", "--tp", "1", "--pp", "1", "--cp", "1"),
    _p("tt-8b-zero2", "fsdp2", "llama3-8b", 16, 64, 4096, "--zero", "2", "--pp", "1"),
    _p("tt-8b-full", "fsdp2", "llama3-8b", 16, 64, 8192, "--recompute", "full", "--cp", "1"),
    _p("tt-8b-none", "fsdp2", "llama3-8b", 8, 32, 2048, "--recompute", "none", "--cp", "1"),
    _p("tt-8b-opsac", "fsdp2", "llama3-8b", 16, 64, 4096, "--recompute", "op_sac", "--cp", "1"),
    _p("tt-70b-tp8", "fsdp2", "llama3-70b", 64, 128, 4096, "--tp", "8", "--cp", "1", "--pp", "1"),
    _p(
        "tt-70b-tp4-async", "fsdp2", "llama3-70b", 64, 128, 4096, "--tp", "4", "--chunks", "4", "--cp", "1", "--pp", "1"
    ),
    _p("tt-70b-pp4", "fsdp2", "llama3-70b", 64, 128, 4096, "--pp", "4", "--vp", "1", "--cp", "1"),
    _p("tt-70b-pp4-vp2", "fsdp2", "llama3-70b", 64, 128, 4096, "--pp", "4", "--vp", "2", "--cp", "1"),
    _p(
        "tt-8b-pp3-uneven",
        "fsdp2",
        "llama3-8b",
        24,
        48,
        4096,
        "--pp",
        "3",
        "--layers-per-stage",
        "10,12,10",
        "--cp",
        "1",
    ),
    _p("tt-8b-cp4", "fsdp2", "llama3-8b", 16, 16, 32768, "--cp", "4"),
    _p("tt-8b-fp8", "fsdp2", "llama3-8b", 16, 64, 4096, "--dtype", "fp8-tensorwise", "--tp", "1", "--cp", "1"),
    _p("tt-8b-fp8-delayed", "fsdp2", "llama3-8b", 16, 64, 4096, "--dtype", "fp8", "--tp", "1", "--cp", "1"),
    _p("tt-8b-bf16-opt", "fsdp2", "llama3-8b", 8, 32, 4096, "--optimizer-dtype", "bf16", "--cp", "1"),
    _p("tt-8b-loss-fp32", "fsdp2", "llama3-8b", 16, 64, 4096, "--loss-impl", "fp32", "--cp", "1"),
    _p("tt-8b-eager", "fsdp2", "llama3-8b", 16, 64, 4096, "--stack", "torchtitan-2024", "--cp", "1"),
    _p("tt-mixtral-ep8", "fsdp2", "mixtral-8x7b", 32, 64, 4096, "--ep", "8", "--cp", "1"),
    _p("tt-gptoss-deepep", "fsdp2", "gpt-oss-20b", 16, 64, 4096, "--ep", "8", "--ep-dispatcher", "deepep", "--cp", "1"),
    # DeepSpeed
    _p("ds-3b-zero0", "deepspeed", "mpt-3b", 8, 64, 2048, "--zero", "0", "--tp", "1", "--pp", "1"),
    _p("ds-8b-zero1", "deepspeed", "llama3-8b", 16, 64, 4096, "--zero", "1", "--tp", "1", "--pp", "1"),
    _p("ds-8b-zero2", "deepspeed", "llama3-8b", 16, 64, 4096, "--zero", "2", "--tp", "1", "--pp", "1"),
    _p("ds-8b-zero3", "deepspeed", "llama3-8b", 16, 64, 4096, "--zero", "3", "--tp", "1", "--pp", "1"),
    _p("ds-13b-full", "deepspeed", "llama2-13b", 32, 128, 4096, "--recompute", "full", "--tp", "1", "--pp", "1"),
    _p("ds-70b-tp8-sel", "deepspeed", "llama3-70b", 64, 128, 4096, "--tp", "8", "--recompute", "selective"),
    _p("ds-13b-tp4-sel", "deepspeed", "llama2-13b", 16, 64, 4096, "--tp", "4", "--recompute", "selective"),
    _p("ds-13b-pp2", "deepspeed", "llama2-13b", 16, 64, 4096, "--tp", "2", "--pp", "2"),
    _p("ds-13b-pp2-b0", "deepspeed", "llama2-13b", 16, 64, 4096, "--tp", "2", "--pp", "2", "--bucket-mb", "0"),
    _p("ds-70b-pp4", "deepspeed", "llama3-70b", 64, 128, 4096, "--tp", "4", "--pp", "4"),
    _p("ds-70b-pp4-b0", "deepspeed", "llama3-70b", 64, 128, 4096, "--tp", "4", "--pp", "4", "--bucket-mb", "0"),
    _p("ds-8b-fp8", "deepspeed", "llama3-8b", 16, 64, 4096, "--dtype", "fp8", "--tp", "1", "--pp", "1"),
    _p(
        "ds-8b-hf",
        "deepspeed",
        "llama3-8b",
        16,
        64,
        4096,
        "--zero",
        "3",
        "--module-layout",
        "hf",
        "--tp",
        "1",
        "--pp",
        "1",
    ),
    _p("ds-8b-noflash", "deepspeed", "llama3-8b", 16, 64, 2048, "--no-flash-attention", "--tp", "1", "--pp", "1"),
    _p("ds-8b-loss-fp32", "deepspeed", "llama3-8b", 16, 64, 4096, "--loss-impl", "fp32", "--tp", "1", "--pp", "1"),
    _p("ds-mixtral-ep8", "deepspeed", "mixtral-8x7b", 32, 64, 4096, "--ep", "8", "--tp", "1", "--pp", "1"),
)


#: stated plans no search answer and no published row has, priced as ``planner evaluate`` prices them (the rule: a
#: plan field one format states that :data:`PROBLEMS` cannot reach): ``(name, model, gpus, global batch, sequence,
#: recipe, ParallelConfig keywords)``
STATED = (
    # PyTorch's context_parallel, what torchtitan runs (the search prices CP as Transformer Engine's ring)
    (
        "tt-8b-cp2-torch",
        "llama3-8b",
        16,
        32,
        16384,
        "bf16",
        dict(dp=8, cp=2, mb=1, zero=3, recompute="op_sac", framework="fsdp2", cp_impl="torch"),
    ),
    # a BF16 model without master weights, pipelined at dp 1 (mixed precision from training.dtype, not FSDP)
    (
        "tt-8b-pp2-dp1-bf16",
        "llama3-8b",
        2,
        16,
        4096,
        "bf16",
        dict(pp=2, dp=1, mb=1, zero=2, recompute="full", framework="fsdp2", optimizer_dtype="bf16"),
    ),
    # a model trained with a multi-token-prediction layer, which torchtitan v0.2.2 has no module for
    (
        "tt-8b-mtp1",
        "llama3-8b+mtp1",
        16,
        64,
        4096,
        "bf16",
        dict(dp=16, mb=2, zero=3, recompute="op_sac", framework="fsdp2"),
    ),
)


def roundtrip_stated(case) -> dict:
    """One stated plan's round trip (:data:`STATED`; ``model+mtpN``: the model with N MTP layers)."""
    from dataclasses import replace

    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from planner.completion import priced

    name, model_name, gpus, gb, seq, recipe, kw = case
    base, _, mtp = model_name.partition("+mtp")
    model, cluster = load_model(base), load_cluster("h100-sxm").with_gpus(gpus)
    if mtp:
        model = replace(model, mtp_layers=int(mtp))
    workload = Workload(global_batch=gb, seq_len=seq, dtype=recipe)
    out = {"case": name, "what": f"{model_name} {gpus} GPUs {kw}"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = priced(model, cluster, workload, ParallelConfig(**kw))
    return {**out, **roundtrip_estimate(est, model, cluster, workload)}


def plan_text(c: ParallelConfig) -> str:
    """The plan's degrees and main knobs, short (printed beside each case)."""
    parts = [f"{k}{getattr(c, k)}" for k in ("tp", "pp", "dp", "cp", "ep", "vp") if getattr(c, k) > 1 or k == "dp"]
    parts += [f"mb{c.mb}", f"z{c.zero}", c.recompute]
    if c.chunks > 1:
        parts.append(f"chunks{c.chunks}")
    return " ".join(parts)


def recommend_and_emit(problem: Problem):
    """Run ``planner recommend ... --emit F`` in-process: ``(exit code, printed text, the emitted plan's
    (config, model, cluster, workload), stderr)``; the plan is the one ``recommend_report._emit`` is given."""
    from planner import recommend_report
    from planner.cli import main
    from planner.commands import recommend as rec

    seen = {}
    real_render, real_emit = rec.render, recommend_report._emit

    def render(result, args, model, cluster, workload):
        seen["cluster"] = cluster
        return real_render(result, args, model, cluster, workload)

    def emit(fmt, config, workload, model):
        seen.update(config=config, workload=workload, model=model)
        return real_emit(fmt, config, workload, model)

    out, err = io.StringIO(), io.StringIO()
    rec.render, recommend_report._emit = render, emit
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = main(problem.command())
    finally:
        rec.render, recommend_report._emit = real_render, real_emit
    return code, out.getvalue(), seen, err.getvalue()


def roundtrip_problem(problem: Problem) -> dict:
    """One stated problem's round trip: the plan ``recommend --emit`` printed, read back."""
    from planner.completion import priced

    out = {"case": problem.name, "what": " ".join(problem.argv), "framework": problem.framework, "plan": ""}
    code, text, seen, err = recommend_and_emit(problem)
    why = err.strip().splitlines()[-1].removeprefix("planner: error: ") if err.strip() else f"exit {code}"
    if "config" not in seen:
        return {**out, "status": "no plan", "fields": {}, "rel": None, "why": why}
    if code != 0:
        return {
            **out,
            "plan": plan_text(seen["config"]),
            "status": "emit refused",
            "fields": {},
            "rel": None,
            "why": why,
        }
    model, cluster, workload = seen["model"], seen["cluster"], seen["workload"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = priced(model, cluster, workload, seen["config"])
    return {**out, **roundtrip_estimate(est, model, cluster, workload, text=text)}


# --------------------------------------------------------------------------- report
def run_cases(only: str | None = None, names: set | None = None) -> list[dict]:
    results = []
    if only in (None, "published"):
        for row in published_rows():
            if names is None or f"row {row.row_id}" in names or row.row_id in names:
                results.append(roundtrip_row(row))
    if only in (None, "recommend"):
        for p in PROBLEMS:
            if names is None or p.name in names:
                results.append(roundtrip_problem(p))
    if only in (None, "stated"):
        for case in STATED:
            if names is None or case[0] in names:
                results.append(roundtrip_stated(case))
    return results


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("published", "recommend", "stated"), help="only one kind of plan")
    ap.add_argument("--cases", help="only these cases (row ids or problem names, comma-separated)")
    args = ap.parse_args(argv)
    names = set(args.cases.split(",")) if args.cases else None
    print(
        f"compared: every ParallelConfig field but {', '.join(EXCLUDED)}, the workload, the model, what each format's "
        "parser states, the keys against the real parsers' (torchtitan v0.2.2 JobConfig, DeepSpeed edaa72212) and "
        f"the step time within {REL_TOL:g} relative"
    )
    for k, why in EXCLUDED.items():
        print(f"  not compared: {k}: {why}")
    for k, why in BY_MEANING.items():
        print(f"  {k}: {why}")
    for fmt, fs in SCRIPT_FIELDS.items():
        for k, why in fs.items():
            print(f"  {fmt}: {k} from the planner flags: {why}")
    print(f"\n{'case':18} {'fw':9} {'plan':34} {'status':13} detail")
    results = []
    for r in run_cases(args.only, names):
        results.append(r)
        print(f"{r['case'][:18]:18} {r['framework']:9} {r['plan'][:34]:34} {r['status']:13} {detail(r)}")
    counts, by_field = {}, {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        for k in r["fields"]:
            by_field[k] = by_field.get(k, 0) + 1
    bad = counts.get("differs", 0) + counts.get("read refused", 0)
    print(
        f"\n{len(results)} plans: {counts.get('same', 0)} read back identical (config, workload and step time), "
        f"{counts.get('differs', 0)} differ, {counts.get('read refused', 0)} not read back, "
        f"{counts.get('emit refused', 0)} not emitted, "
        f"{counts.get('no prediction', 0) + counts.get('no plan', 0)} without a plan"
    )
    if by_field:
        print("fields that differ: " + ", ".join(f"{k} ({n})" for k, n in sorted(by_field.items())))
    results_io.record(
        "emit_roundtrip_other",
        argv,
        enabled=record_results and not args.only and not args.cases,
        title="emitted torchtitan TOML and DeepSpeed JSON read back by evaluate: same plan and step time",
        headline={
            "plans": len(results),
            "published plans": sum(r["case"].startswith("row ") for r in results),
            "recommended plans": sum(r["case"] in {p.name for p in PROBLEMS} for r in results),
            "stated plans": sum(r["case"] in {c[0] for c in STATED} for r in results),
            **F.readback_counts(counts, COMPARED),
        },
        table=[
            {
                "case": r["case"],
                "framework": r["framework"],
                "plan": r["plan"],
                "status": r["status"],
                "detail": detail(r),
            }
            for r in results
            if r["status"] != "same"
        ],
        targets=[{"name": "every emitted plan reads back with the same config and step time", "met": not bad}],
        inputs=[
            "costmodel",
            "planner",
            "search",
            "benchmarks/emit_roundtrip_other.py",
            "benchmarks/flags_roundtrip.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
