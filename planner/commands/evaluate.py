"""``planner evaluate``: predict one training step (or, with ``--mode infer``, serving) of a given parallel plan.

A plan that does not fit in memory is not an error: the report says ``fits`` no and
names the stages that overflow. One over the HBM only by the assumed allocator fragmentation allowance is
``tight`` (:mod:`costmodel.physics.memory.verdict`): evaluated with a one-line warning naming the peak with and
without it; ``--json`` carries ``memory_verdict`` (``fits``, ``tight``, ``does not fit``). An invalid plan (e.g.
tp not dividing heads) exits 2.
With ``--mode infer`` it reports TTFT, TPOT, tokens/s, KV cache, the largest concurrency
that fits and the overlap of prefill and decode (:mod:`costmodel.serving.inference`).
``--report FILE.html`` also writes a training plan as a self-contained HTML report (:mod:`planner.report_flag`).
"""

from __future__ import annotations

import argparse
import sys

from costmodel.spec.errors import SpecError
from costmodel.physics.kernels.flops import with_convention
from costmodel.serving.inference import evaluate_inference
from costmodel.trust.serving_band import with_serving_bands

from ..args import add_flop_args
from ..args import add_config_args, add_inference_args, add_output_args, add_problem_args, choice_arg
from ..flags import config_from_args, inference_batch, inference_options, problem_from_args, speculation_from_args
from ..emit import FORMATS, deepspeed_config, emit_text, megatron_args, refuse_unless_runnable, torchtitan_lines
from ..completion import chosen_line, stated_plan
from ..tuning import fmt_knob
from ..emit_arch import model_args_tokens
from ..emit_serving import launch_for_estimate
from ..inference_report import inference_text, launch_lines
from ..report import estimate_json, estimate_text, print_json
from ..report_flag import add_report_arg, refuse_serving, write_report_of

NAME = "evaluate"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME,
        help="predict step time, throughput, MFU, memory and overlap of one plan",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    add_problem_args(p, infer=True)
    add_config_args(p, dispatcher=True)
    add_completion_args(p)
    add_inference_args(p, engine=True)
    p.add_argument(
        "--emit",
        type=choice_arg("emit", FORMATS),
        metavar="{" + ",".join(FORMATS) + "}",
        help="print the plan as Megatron-LM arguments (megatron, the stage split included), a DeepSpeed "
        "config (deepspeed) or torchtitan settings for PyTorch FSDP2 (fsdp2)",
    )
    add_flop_args(p)
    add_output_args(p)
    add_report_arg(p)
    return p


def add_completion_args(p: argparse.ArgumentParser) -> None:
    """How the knobs a command line leaves out are filled (``evaluate`` and ``explain`` alike):
    ``--framework-defaults`` and the framework's own configuration inputs."""
    p.add_argument(
        "--framework-defaults",
        action="store_true",
        help="fill the tuning knobs you do not state (mb, vp, sp, zero, recompute, bucket, chunks, the "
        "stage split) with the framework's own defaults; without it they are chosen as recommend "
        "would, with everything you state pinned (the output lists what was chosen)",
    )
    g = p.add_argument_group("the framework's own configuration (literal: what it omits is the framework's default)")
    g.add_argument(
        "--megatron-args",
        metavar="LINE|@FILE",
        help="Megatron-LM arguments (--tensor-model-parallel-size 8 ...), @file or a file path; with the "
        "model's shape arguments --model may be left out",
    )
    g.add_argument("--deepspeed-config", metavar="FILE", help="DeepSpeed JSON config (ds.json)")
    g.add_argument("--torchtitan-config", metavar="FILE", help="torchtitan v0.2.2 job TOML (as --emit fsdp2 writes)")
    for a in p._actions:  # the Megatron line may state the model
        if a.dest == "model":
            a.required = False


INFER_ONLY = (
    "input_len",
    "output_len",
    "kv_dtype",
    "prefill_tokens",
    "ttft_ms",
    "tpot_ms",
    "engine",
    "max_seqs",
    "request_rate",
    "arrival_cv",
    "spec_tokens",
    "spec_accept",
    "spec_method",
)


#: training settings ``evaluate --mode infer`` refuses: the serving replay reads none of them (checked: each left a
#: Mixtral serving prediction unchanged); ``flash_attention`` is refused only as ``--no-flash-attention``
SERVING_IGNORES = (
    "bucket_mb",
    "loss_impl",
    "activation_offload_layers",
    "pp_free_stage_inputs",
    "dma",
    "flash_attention",
    "cp_impl",
)


def _run_infer(args: argparse.Namespace) -> int:
    for f in ("megatron_args", "deepspeed_config", "torchtitan_config"):
        if getattr(args, f, None) is not None:
            raise SpecError(f, getattr(args, f)[:40], "unset with --mode infer (a training configuration)")
    if args.emit:
        raise SpecError("emit", args.emit, "unset with --mode infer (serving launch arguments are printed)")
    for f in SERVING_IGNORES:  # training settings the serving replay does not read: a mistake, not a no-op
        if getattr(args, f, None) not in (None, True if f == "flash_attention" else None):
            v = str(args.dma) if f == "dma" else getattr(args, f)  # the assignment as --dma writes it
            raise SpecError(f, v, "unset with --mode infer (a training setting; serving does not read it)")
    model, cluster, workload = problem_from_args(args)
    config = config_from_args(args, cluster.num_gpus or None, model.layers)
    workload = inference_batch(args, workload, config)
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    opts = dict(inference_options(args), speculation=speculation_from_args(args, model))
    est = with_serving_bands(evaluate_inference(model, cluster, workload, config, **opts))
    # with --engine: that engine's launch; without: vLLM's scheduler was simulated, and the same
    # layout is printed for vLLM and SGLang as before
    engines = (args.engine,) if args.engine else ("vllm", "sglang")
    launch = launch_for_estimate(est, workload, args.prefill_tokens, engines=engines)
    if args.json:
        print_json({**estimate_json(est, model, cluster, workload), "launch": launch})
    else:
        print(inference_text(est, model, cluster, workload) + "\n\n" + "\n".join(launch_lines(launch)))
    return 0


def run(args: argparse.Namespace) -> int:
    refuse_serving(args)
    if args.mode == "infer":
        return _run_infer(args)
    for f in INFER_ONLY:
        if getattr(args, f, None) is not None:
            raise SpecError(f, getattr(args, f), "unset unless --mode infer")
    plan = stated_plan(args)  # the one path explain shares: same plan, step time and band for the same flags
    model, cluster, workload, config = plan.model, plan.cluster, plan.workload, plan.estimate.config
    chosen, spread, source = plan.chosen, plan.spread, plan.source
    est = with_convention(plan.estimate, model, workload, args.mfu_convention)
    if args.json:
        d = estimate_json(est, model, cluster, workload, completion_log_sd=spread)
        d["chosen"] = chosen
        d["completion_spread_log_sd"] = spread
        d["chosen_how"] = plan.chosen_how
        d["config"]["layers_per_stage"] = list(config.layers_per_stage or ())
        if source is not None:
            d["config_source"] = source
        if args.emit:
            refuse_unless_runnable(args.emit, config)
        if args.emit == "megatron":
            d["megatron_args"] = [
                t
                for a in megatron_args(
                    config, workload.global_batch, model.layers, workload.recipe, model.is_moe, model.mtp_layers
                )
                for t in a
            ]
            d["megatron_model_args"] = model_args_tokens(model, config, workload)  # architecture + attention
        elif args.emit == "deepspeed":
            d["deepspeed_config"] = deepspeed_config(config, workload.global_batch, workload.dtype)
        elif args.emit == "fsdp2":
            d["torchtitan_config"] = torchtitan_lines(
                config, workload, model.layers, moe=model.is_moe, mtp_layers=model.mtp_layers
            )
        print_json(d)
    elif args.emit:
        text, notes = emit_text(args.emit, config, workload, model.layers, model.is_moe, model=model)
        print(text)
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
    else:
        print(estimate_text(est, model, cluster, workload, completion_log_sd=spread))
        if source is not None:
            print(source_line(source))
        if chosen:
            print(chosen_line(plan))
    write_report_of(args, estimate=est, model=model, cluster=cluster, workload=workload)
    return 0


def source_line(source: dict) -> str:
    """Where each knob came from (``from the Megatron line: tp=8 ...; framework defaults: ...``)."""
    parts = [
        f"{where}: " + " ".join(f"{k}={_fmt(v)}" for k, v in source[key].items())
        for key, where in (
            ("stated", "from " + source["from"]),
            ("flags", "from the planner's flags"),
            ("framework_defaults", "framework defaults"),
        )
        if source[key]
    ]
    return "; ".join(parts)


_fmt = fmt_knob  # the one formatting of a knob's value (planner.tuning)
