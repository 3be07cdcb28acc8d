"""``planner explain``: why communication is or is not hidden, per strategy (op-graph scheduler).

Prints, for the slowest pipeline stage over one step, each strategy's link time ``T_comm``,
the compute window it could hide behind, the achieved overlap ``r``, the exposed time, the
critical condition ``T_comm <= T_compute`` and, where communication stays exposed, which of
the source document's three prerequisites failed (data dependency, no free DMA engine,
synchronous issue). ``--trace FILE`` writes a Chrome trace-event JSON (open it in Perfetto or
chrome://tracing) with one lane per resource; ``--gantt FILE.png`` draws the same timeline.
Takes the flags of ``planner evaluate`` and resolves them the same way (:func:`planner.completion.stated_plan`):
the knobs a training command line leaves out are chosen as ``recommend`` would (or, with
``--framework-defaults``, the framework's own; a ``--megatron-args`` / ``--deepspeed-config`` /
``--torchtitan-config`` input is read literally), so ``explain`` explains the very plan, step time and
band ``evaluate`` prints, and lists what was chosen. ``--mode infer`` explains one forward pass.
"""

from __future__ import annotations

from costmodel.physics.comm.groups import placement

import argparse
import os

from costmodel.spec.errors import SpecError
from costmodel.engines.graph.explain import explain, format_explain, tp_feasibility
from costmodel.engines.graph.trace import write_chrome_trace, write_gantt

from costmodel.spec.layout import of as layout_of
from search.layout import with_best_layout

from ..arg_types import nonempty_arg
from ..args import add_config_args, add_inference_args, add_output_args, add_problem_args, int_arg
from ..flags import config_from_args, inference_batch, problem_from_args
from ..completion import chosen_line, stated_plan
from ..report import dma_assignment_json, model_json, model_label, print_json, stack_json, stack_line, with_trust
from .evaluate import INFER_ONLY, add_completion_args

NAME = "explain"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME,
        help="overlap table per strategy, with the blocking prerequisite; Chrome trace / Gantt of one step",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    add_problem_args(p, infer=True)
    add_config_args(p, dispatcher=True)
    add_completion_args(p)
    add_inference_args(p, targets=False)
    g = p.add_argument_group("timeline")
    g.add_argument(
        "--trace",
        type=nonempty_arg("trace", "a file path"),
        metavar="FILE",
        help="write a Chrome trace-event JSON of one step of one stage",
    )
    g.add_argument(
        "--gantt",
        type=nonempty_arg("gantt", "a file path"),
        metavar="FILE.png",
        help="draw the same timeline as a PNG, SVG or PDF (by the file's suffix; needs matplotlib)",
    )
    g.add_argument(
        "--stage", type=int_arg("stage", 0), metavar="I", help="pipeline stage to trace (default: the slowest)"
    )
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="step time at +-20%% of NVLink, NIC and HBM bandwidth, GEMM efficiency and DMA engine "
        "count, and the values where the plan's bottleneck changes (training)",
    )
    add_output_args(p)
    return p


#: file suffixes ``--gantt`` draws (matplotlib picks the format by the suffix)
GANTT_SUFFIXES = (".png", ".svg", ".pdf")


def check_output(flag: str, path: str, suffixes: tuple = ()) -> None:
    """Refuse, before any work, an output path that cannot be written as asked (SpecError naming the flag)."""
    field = flag.lstrip("-")
    if os.path.isdir(path):
        raise SpecError(
            field,
            path,
            f"a file path, not a directory ({flag} {os.path.join(path, 'step' + (suffixes or ('.json',))[0])})",
        )
    if suffixes and os.path.splitext(path)[1].lower() not in suffixes:
        raise SpecError(
            field, path, f"a file name ending in {', '.join(suffixes[:-1])} or {suffixes[-1]} ({flag} FILE.png)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise SpecError(field, path, f"a path in an existing directory ({flag}: no directory {parent})")


def _write(flag: str, path: str, write, *args, **kwargs) -> None:
    try:
        write(path, *args, **kwargs)
    except OSError as e:
        raise SpecError(flag.lstrip("-"), path, f"a writable file path ({flag}: {e.strerror or e})") from None


def placement_line(config, cluster) -> str:
    """Where each parallel group runs: inside one NVLink domain (NVLink/NVSwitch) or across domains (the NICs)."""
    dom, gpn = cluster.domain, cluster.gpus_per_node
    where = []
    for dim, size, lay in placement(config.tp, config.cp, config.dp, config.ep, config.pp, dom):
        if lay.scope == "intra":
            where.append(f"{dim} {size} inside one domain")
        elif dim == "pp":
            where.append(f"{dim} {size}: stages in different domains")
        else:
            where.append(f"{dim} {size}: {lay.intra} per domain x {lay.inter} domains")
    bw_in, bw_out = cluster.intra_link.bw_bytes_per_s / 1e9, cluster.inter_link.bw_bytes_per_s / 1e9
    head = f"placement (NVLink domain of {dom} GPUs" + (f", {gpn} per host" if dom > gpn else "")
    return f"{head}; {bw_in:g} GB/s NVLink inside it, {bw_out:g} GB/s NIC per GPU across): " + (
        "; ".join(where) or "one GPU per group"
    )


def run(args: argparse.Namespace) -> int:
    if args.mode != "infer":  # as evaluate refuses them: a serving flag in training mode was silently ignored
        for f in INFER_ONLY:
            if getattr(args, f, None) is not None:
                raise SpecError(f, getattr(args, f), "unset unless --mode infer")
    if args.trace:
        check_output("--trace", args.trace)
    if args.gantt:
        check_output("--gantt", args.gantt, GANTT_SUFFIXES)
    pp = _stated_pp(args)
    if args.stage is not None and pp is not None and args.stage >= pp:  # before any search or pricing
        raise SpecError("stage", args.stage, f"a pipeline stage index below pp={pp}")
    plan = None
    if args.mode == "infer":
        for f in ("framework_defaults", "megatron_args", "deepspeed_config", "torchtitan_config"):
            if getattr(args, f, None) not in (None, False):
                raise SpecError(f, str(getattr(args, f))[:40], "unset with --mode infer (training inputs)")
        model, cluster, workload = problem_from_args(args)
        config = config_from_args(args, cluster.num_gpus or None, model.layers)
        workload = inference_batch(args, workload, config)
        if not cluster.num_gpus:
            cluster = cluster.with_gpus(config.gpus)
        config = with_best_layout(model, cluster, workload, config)  # layers not divisible by pp*vp, no split given
    else:  # evaluate's path: the same plan, step time and band for the same flags
        plan = stated_plan(args)
        model, cluster, workload, config = plan.model, plan.cluster, plan.workload, plan.estimate.config
    if args.stage is not None and args.stage >= config.pp:
        raise SpecError("stage", args.stage, f"a pipeline stage index below pp={config.pp}")
    rows = explain(model, cluster, workload, config)
    tp = tp_feasibility(model, cluster, workload, config) if config.tp > 1 else None
    written = []
    if args.trace:
        _write("--trace", args.trace, write_chrome_trace, model, cluster, workload, config, stage=args.stage)
        written.append(args.trace)
    if args.gantt:
        _write("--gantt", args.gantt, write_gantt, model, cluster, workload, config, stage=args.stage)
        written.append(args.gantt)
    sens = _sensitivity(args, model, cluster, workload, config)
    trust = _trust(plan)
    if args.json:
        print_json(
            {
                "status": "ok",
                "model": model_json(model),
                "config": {**config.to_dict(), "sp": config.sp_on},
                "layout": str(layout_of(model, config)),
                "overlap": rows,
                "tp_feasibility": tp,
                "written": written,
                "dma_assignment": dma_assignment_json(model, cluster, workload, config),
                "placement": [
                    {"group": d, "size": n, "per_domain": g.intra, "domains": g.inter}
                    for d, n, g in placement(config.tp, config.cp, config.dp, config.ep, config.pp, cluster.domain)
                ],
                "stack": stack_json(cluster),
                **{k: v for k, v in trust.items() if not k.startswith("_")},
                **({"sensitivity": [r.to_dict() for r in sens]} if sens is not None else {}),
            }
        )
        return 0
    print(
        f"{model_label(model)} on {cluster.num_gpus} x {cluster.device.name}, {workload.mode}, "
        f"config: tp={config.tp} pp={config.pp} dp={config.dp} ep={config.ep} cp={config.cp} "
        f"sp={'on' if config.sp_on else 'off'} mb={config.mb} vp={config.vp} chunks={config.chunks} "
        f"zero={config.zero} recompute={config.recompute} bucket_mb={config.bucket_bytes / 1e6:g}"
        + (" ep_overlap=on" if config.ep_overlap else "")
        + (f" layout={layout_of(model, config)}" if config.pp > 1 else "")
    )
    print(placement_line(config, cluster) + "\n")
    print(format_explain(rows))
    print(stack_line(cluster))
    for line in _trust_lines(trust):
        print(line)
    if sens is not None:
        from ..sensitivity_report import sensitivity_text

        print("\n" + sensitivity_text(sens))
    for path in written:
        print(f"wrote {path}")
    return 0


def _stated_pp(args) -> int | None:
    """The pipeline degree the flags state (the completion never chooses degrees; unstated, pp is 1),
    or None when a framework configuration states it."""
    if any(getattr(args, f, None) is not None for f in ("megatron_args", "deepspeed_config", "torchtitan_config")):
        return None
    if getattr(args, "pp", None):
        return args.pp
    return len(args.layers_per_stage) if getattr(args, "layers_per_stage", None) else 1


def _trust(plan) -> dict:
    """What a training plan's explained numbers rest on (issue 23): the knobs the planner chose
    (``chosen``, ``chosen_how``, as ``planner evaluate`` lists them), and the plan's step time with its
    80% band, widened by the completions' spread, and the band's notes (beyond the data, in words).
    Empty for inference (its knobs are not these)."""
    if plan is None:
        return {}
    est = with_trust(plan.estimate, plan.model, plan.cluster, plan.workload, completion_log_sd=plan.spread)
    out = {
        "step_time_s": est.step_time_s,
        "engine": est.engine,
        "step_time_band_s": list(est.step_time_band_s),
        "band_notes": list(est.band_notes),
        "chosen": dict(plan.chosen),
        "chosen_how": plan.chosen_how,
        "completion_spread_log_sd": plan.spread,
        "_chosen_line": chosen_line(plan),
    }
    if plan.source is not None:
        out["config_source"] = plan.source
    return out


def _trust_lines(trust: dict) -> list[str]:
    lines = []
    if "step_time_s" in trust:
        lo, hi = trust["step_time_band_s"]
        lines.append(
            f"step time {trust['step_time_s']:.4g} s ({trust['engine']} engine), 80% band {lo:.4g} - {hi:.4g} s"
        )
        lines += [f"  band: {n}" for n in trust["band_notes"]]
    if trust.get("config_source") is not None:
        from .evaluate import source_line

        lines.append(source_line(trust["config_source"]))
    if trust.get("_chosen_line"):
        lines.append(trust["_chosen_line"])
    return lines


def _sensitivity(args, model, cluster, workload, config):
    """``--sensitivity``: :func:`costmodel.trust.sensitivity.sensitivity` rows of a training plan, else None."""
    if not getattr(args, "sensitivity", False):
        return None
    if workload.mode != "train":
        from costmodel.spec.errors import SpecError

        raise SpecError("sensitivity", True, "used with training plans (--mode train)")
    from costmodel.trust.sensitivity import sensitivity

    return sensitivity(model, cluster, workload, config)
