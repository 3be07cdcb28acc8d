"""What ``planner recommend`` prints for a search's answer (:func:`planner.recommend`'s result): the plans side
by side with the solve's proof and the constraints they sit on, the ``--json`` object, the emitted framework
arguments of the best plan, and the comparison with a ``--baseline``.

The best plan arrives with its 80% band attached (:func:`planner.api.recommend`, the one place it is
attached); the other plans' band column is computed here for display (:func:`costmodel.trust.uncertainty.band_for`).
"""

from __future__ import annotations

import argparse
import sys

from costmodel.spec.errors import InfeasibleConfig
from costmodel.physics.memory.stage_memory import FRAGMENTATION
from costmodel.spec.units import GiB
from costmodel.training.estimate import DEFAULT_ENGINE

from .emit import deepspeed_config, emit_text, megatron_args, refuse_unless_runnable, torchtitan_lines
from .emit_arch import model_args_tokens
from .objective_report import objective_lines, objective_view, objectives_json, pareto_lines
from .report import ENGINE_NAMES, _s, estimate_json, model_label, print_json, stack_line, table
from .tuning import fmt_knob, recommend_choices
from .moe_report import dispatcher_lines, ep_overlap_gain, ep_overlap_lines
from .no_plan_line import no_plan_line
from .solve_report import solve_lines


def render(result, args: argparse.Namespace, model, cluster, workload) -> int:
    """Print ``result`` as the flags ``args`` ask (``--top``, ``--json``, ``--emit``, ``--baseline``); the exit
    code. Plans that differ only in knobs that change nothing are left out first (:func:`without_twins`;
    ``planner recommend`` asks the search for more than ``--top`` so that none is missing), and a problem
    with no plan raises :class:`InfeasibleConfig` with the reason and the smallest changes."""
    result.plans, same = without_twins(result.plans)
    ranking, front = objective_view(result, args)  # the --pareto front over every candidate, before the cut
    result.plans, groups = grouped(result.plans)  # bucket- or chunk-only variants: one row (issue 42 item 9)
    result.plans, groups = result.plans[: args.top], groups[: args.top]  # more were asked for: no gap
    result.variants = groups
    if not result.plans:
        what = "infeasible" if result.status == "INFEASIBLE" else "unsolved"
        if args.json:
            print_json({"status": what, "solve": result.solve_dict(), "alternatives": []})
        # the binding reason and the smallest change in one short line; --json keeps every detail
        raise InfeasibleConfig(no_plan_line(f"problem={what}", result.explanation, result.changes))
    best = result.best
    comparison = None
    if args.baseline:
        from .baseline import compare_with_baseline

        comparison = compare_with_baseline(
            model, cluster, workload, best.reported, args.baseline, engine=best.reported.engine
        )
    if args.emit and not args.json:
        if args.top > 1:  # the plans first, then the flags of the best
            print(plans_table(result, model, cluster, workload) + "\n")
        return _emit(args.emit, best.config, workload, model)
    if args.json:
        d = estimate_json(best.reported, model, cluster, workload)  # the numbers evaluate --json gives
        d["config"]["layers_per_stage"] = list(best.config.layers_per_stage or ())
        d["analytic_step_time_s"] = best.estimate.step_time_s  # what CP-SAT's tables encode
        d["graph_step_time_s"] = best.graph_step_time_s
        d["solve"] = result.solve_dict()
        d["binding"] = list(best.binding)
        if getattr(result, "dispatchers", None):
            d["dispatchers"] = result.dispatchers
        gain = ep_overlap_gain(best, model, cluster, workload)
        if gain is not None:
            d["ep_overlap_step_time_s"] = {"with": gain[0], "without": gain[1]}
        d["objective_s"], d["agreement"] = best.objective_s, best.agreement
        d["variants"] = variants_json(groups[0])
        d["alternatives"] = [
            {**p.to_dict(), "variants": variants_json(g)} for p, g in zip(result.plans[1:], groups[1:])
        ]
        beside = margin_beside(result)
        if beside is not None:  # the plan on the other side of the memory margin (issue 42 item 5)
            d["margin_alternative"] = {**beside.to_dict(), "keeps_margin": not result.margin_kept}
        d["pinned"], d["chosen"] = recommend_choices(args, best.config)
        if comparison is not None:
            d["baseline"] = comparison.to_dict()
        if ranking is not None:
            d["objectives"] = objectives_json(ranking, result.plans, front)
        if args.emit:
            refuse_unless_runnable(args.emit, best.config)
        if args.emit == "megatron":
            d["megatron_args"] = [
                t
                for a in megatron_args(
                    best.config, workload.global_batch, model.layers, workload.recipe, model.is_moe, model.mtp_layers
                )
                for t in a
            ]
            d["megatron_model_args"] = model_args_tokens(model, best.config, workload)  # architecture + attention
        elif args.emit == "deepspeed":
            d["deepspeed_config"] = deepspeed_config(best.config, workload.global_batch, workload.dtype)
        elif args.emit == "fsdp2":
            d["torchtitan_config"] = torchtitan_lines(
                best.config, workload, model.layers, moe=model.is_moe, mtp_layers=model.mtp_layers
            )
        print_json(d)
        return 0
    print(report_text(result, model, cluster, workload))
    print(choices_line(*recommend_choices(args, best.config)))
    for note in same:
        print(f"note: {note}")
    if ranking is not None:
        print("\n".join(objective_lines(ranking, best.config) + (pareto_lines(front, ranking) if front else [])))
    if comparison is not None:
        b = comparison.baseline.config
        print(
            f"\nbaseline tp={b.tp} pp={b.pp} dp={b.dp} ep={b.ep} cp={b.cp} vp={b.vp} mb={b.mb} zero={b.zero} "
            f"recompute={b.recompute}: {comparison.baseline.step_time_s:.2f} s ({ENGINE_NAMES[comparison.baseline.engine]}); "
            f"{comparison.message}"
        )
        for n in comparison.band_notes:
            print(f"note: band: {n}")
        if comparison.defaults:
            print(
                "baseline: not stated, at the defaults: "
                + " ".join(f"{k}={fmt_knob(v)}" for k, v in comparison.defaults.items())
            )
        if comparison.baseline_band_s:
            lo, hi = comparison.baseline_band_s
            print(f"baseline: 80% band {lo:.2f} - {hi:.2f} s")
            for n in comparison.baseline_band_notes:
                if n not in comparison.band_notes:
                    print(f"note: baseline band: {n}")
    return 0


def choices_line(pinned: dict, chosen: dict) -> str:
    """``pinned by you: tp=8; chosen by the planner: pp=1 ...`` (the best plan's knobs, by who set them)."""
    parts = [
        f"{who}: " + " ".join(f"{k}={fmt_knob(v)}" for k, v in d.items())
        for who, d in (("pinned by you", pinned), ("chosen by the planner", chosen))
        if d
    ]
    return "; ".join(parts)


def without_twins(plans: list) -> tuple[list, list[str]]:
    """``plans`` less those that differ from an earlier one only in knobs that change nothing
    (the same step time under both engines and the same peak memory, e.g. the bucket size under
    ZeRO-3), and one note per plan left out naming the knobs."""
    kept, notes = [], []
    for p in plans:
        twin = next((k for k in kept if _same_numbers(k, p)), None)
        if twin is None:
            kept.append(p)
            continue
        a, b = twin.config.to_dict(), p.config.to_dict()
        knobs = ", ".join(f"{k}={b[k]:g}" if isinstance(b[k], float) else f"{k}={b[k]}" for k in a if a[k] != b[k])
        notes.append(
            f"a plan with {knobs} left out: the same step time and memory as plan "
            f"{'best' if twin is kept[0] else '#' + str(kept.index(twin) + 1)} (those knobs change nothing there)"
        )
    return kept, notes


#: the knobs whose variants share one row of the top-K tables (issue 42 item 9): plans that differ only in the
#: gradient bucket size or the chunk counts are one plan to the user, so the K slots show structurally different plans
VARIANT_KNOBS = ("bucket_bytes", "chunks")


def _structure(config) -> dict:
    return {k: v for k, v in vars(config).items() if k not in VARIANT_KNOBS}


def grouped(plans: list) -> tuple[list, list[list]]:
    """``plans`` less those that differ from an earlier one only in :data:`VARIANT_KNOBS`, and for each plan kept
    its group: itself first, then the variants folded into its row."""
    kept, groups = [], []
    for p in plans:
        key = _structure(p.config)
        i = next((i for i, k in enumerate(kept) if _structure(k.config) == key), None)
        if i is None:
            kept.append(p)
            groups.append([p])
        else:
            groups[i].append(p)
    return kept, groups


def variants_json(group: list) -> list[dict]:
    """The variants folded into a plan's row (``--json``): their knobs and numbers."""
    return [
        {
            "bucket_mb": v.config.bucket_bytes / 1e6,
            "chunks": v.config.chunks,
            "step_time_s": v.reported.step_time_s,
            "analytic_step_time_s": v.estimate.step_time_s,
            "peak_memory_bytes": v.reported.peak_memory_bytes,
        }
        for v in group[1:]
    ]


def _knob_cell(group: list | None, plan, get, fmt) -> str:
    """The plan's value of a knob, with the range over its row's variants when they differ (``160 (25-160)``)."""
    own = fmt(get(plan.config))
    values = sorted({get(v.config) for v in group or [plan]})
    return own if len(values) == 1 else f"{own} ({fmt(values[0])}-{fmt(values[-1])})"


def _bucket(group, plan) -> str:
    return _knob_cell(group, plan, lambda c: c.bucket_bytes / 1e6, lambda v: f"{v:g}")


def _chunks(group, plan) -> str:
    return _knob_cell(group, plan, lambda c: c.chunks, str)


def variant_lines(labels: list, groups: list) -> list[str]:
    """One line per row that holds variants: how many and what they run."""
    out = []
    for label, g in zip(labels, groups):
        if len(g) > 1:
            t = [v.reported.step_time_s for v in g]
            also = ", ".join(f"bucket {v.config.bucket_bytes / 1e6:g} MB x {v.config.chunks} chunks" for v in g[1:])
            out.append(
                f"{label}: the same plan with {also} runs {_s(min(t))}-{_s(max(t))} s (one column: a range in the "
                "bucket MB or chunks cell, the plan's own value first)"
            )
    return out


def margin_beside(result):
    """The plan on the other side of the memory margin (:attr:`search.result.SolveResult.margin_alternative`: the
    faster plan at risk beside a safe answer, or the safe plan beside a fast one), when it is not already shown."""
    alt = getattr(result, "margin_alternative", None)
    if alt is None or any(p.config == alt.config for p in result.plans):
        return None
    return alt


def _same_numbers(a, b, rel: float = 1e-9) -> bool:
    def close(x, y):
        return abs(x - y) <= rel * max(abs(x), abs(y))

    return (
        close(a.reported.step_time_s, b.reported.step_time_s)
        and close(a.estimate.step_time_s, b.estimate.step_time_s)
        and close(a.estimate.peak_memory_bytes, b.estimate.peak_memory_bytes)
    )


def _emit(fmt: str, config, workload, model) -> int:
    text, notes = emit_text(
        fmt, config, workload, model.layers, model.is_moe, model=model
    )  # refuses unless it is the evaluated plan
    print(text)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    return 0


def _band(plan, model, cluster, workload):
    """The 80% band of ``plan``'s measured step time around its reported (op-graph) prediction, or
    None: the band :func:`planner.recommend` attached to the best plan (the band ``--json`` gives), else
    :func:`costmodel.trust.uncertainty.band_for`'s, when present."""
    if plan.reported.step_time_band_s:
        return plan.reported.step_time_band_s
    try:
        from costmodel.trust.uncertainty import band_for

        return band_for(model, cluster, workload, plan.reported)
    except Exception:  # no band model (or no residuals): the column is left out
        return None


def plans_table(result, model, cluster, workload) -> str:
    """The top plans, one row each: degrees, predicted step time (op graph, analytic), the 80%
    band when the band model is there, and peak memory (what ``--emit --top K`` prints first)."""
    groups = getattr(result, "variants", None) or [None] * len(result.plans)
    bands = [_band(p, model, cluster, workload) for p in result.plans]
    with_band = all(b is not None for b in bands)
    headers = (
        [
            "#",
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vp",
            "mb",
            "sp",
            "zero",
            "recompute",
            "chunks",
            "bucket MB",
            "step s (op graph)",
            "step s (analytic)",
        ]
        + (["80% band s"] if with_band else [])
        + ["peak GiB"]
    )
    rows = []
    for i, (p, b, g) in enumerate(zip(result.plans, bands, groups)):
        c, e = p.config, p.estimate
        rec = c.recompute + (f"({c.recompute_layers})" if c.recompute_layers is not None else "")
        row = [
            "best" if i == 0 else f"#{i + 1}",
            c.tp,
            c.pp,
            c.dp,
            c.cp,
            c.ep,
            c.vp,
            c.mb,
            "on" if c.sp_on else "off",
            c.zero,
            rec,
            _chunks(g, p),
            _bucket(g, p),
            "-" if p.graph_step_time_s is None else _s(p.graph_step_time_s),
            _s(e.step_time_s),
        ]
        row += [f"{_s(b[0])}-{_s(b[1])}"] if with_band else []
        rows.append(row + [f"{e.peak_memory_bytes / GiB:.1f}"])
    title = (
        f"{model_label(model)} on {cluster.num_gpus} x {cluster.device.name}, global batch {workload.global_batch} x "
        f"{workload.seq_len} tokens: top {len(rows)} plans ({result.status})"
    )
    return title + "\n" + table(headers, rows)


def _plan_column(plan, band=None, group=None) -> list:
    c, e, sp = plan.config, plan.estimate, plan.split
    if c.pp == 1:
        stages = "-"
    else:
        stages = f"{sp.first}/{sp.mid}x{c.pp - 2}/{sp.last}" if c.pp > 2 else f"{sp.first}/{sp.last}"
    rec = c.recompute + (f" ({c.recompute_layers}/stage)" if c.recompute_layers is not None else "")
    r = plan.reported
    return [
        c.tp,
        c.pp,
        c.dp,
        c.cp,
        c.ep,
        c.vp,
        c.mb,
        "on" if c.sp_on else "off",
        c.zero,
        rec,
        _bucket(group, plan),
        _chunks(group, plan),
        stages,
        _s(r.step_time_s),
        _s(e.step_time_s),
        "-" if band is None else f"{_s(band[0])}-{_s(band[1])}",
        f"{r.tokens_per_s:,.0f}",
        f"{100 * r.mfu:.1f}",
        f"{r.peak_memory_bytes / GiB:.1f}",
        c.framework,
    ]


def _rows(engine: str) -> list[str]:
    """Row names of the plan table: the reported numbers say the engine that computed them."""
    name = ENGINE_NAMES[engine]
    return [
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "vp (interleave)",
        "micro-batch",
        "sequence parallel",
        "ZeRO stage",
        "recompute",
        "bucket MB",
        "chunks",
        "layers first/mid/last",
        f"step time s ({name})",
        "step time s (analytic)",
        f"80% band s ({name})",
        f"tokens/s ({name})",
        f"MFU % ({name})",
        "peak memory GiB",
        "framework",
    ]


def report_text(result, model, cluster, workload) -> str:
    groups = getattr(result, "variants", None) or [None] * len(result.plans)
    cols = [_plan_column(p, _band(p, model, cluster, workload), g) for p, g in zip(result.plans, groups)]
    headers = [""] + ["best" if i == 0 else f"#{i + 1}" for i in range(len(cols))]
    shown = list(result.plans)
    beside = margin_beside(result)
    if beside is not None:  # issue 42 item 5: the other side of the memory margin, beside the answer
        cols.append(_plan_column(beside, _band(beside, model, cluster, workload)))
        headers.append("faster, at risk" if result.margin_kept else "keeps margin")
        shown.append(beside)
    engine = result.plans[0].reported.engine
    rows = [[name] + [col[i] for col in cols] for i, name in enumerate(_rows(engine))]
    lines = [
        f"{model_label(model)} on {cluster.num_gpus} x {cluster.device.name} ({cluster.name}), global batch "
        f"{workload.global_batch} x {workload.seq_len} tokens, {workload.recipe}",
        stack_line(cluster),
        "",
        table(headers, rows),
        "",
        *solve_lines(result),
        f"engine: step time, band, tokens/s and MFU are the {ENGINE_NAMES[engine]}'s"
        + (
            " (the default engine, as evaluate reports them); CP-SAT proves the analytic optimum"
            if engine == DEFAULT_ENGINE
            else ""
        ),
        f"MFU counts {result.plans[0].reported.flop_convention} (--mfu-convention)",
    ]
    for i, p in enumerate(shown):
        if p.binding:
            lines.append(f"{headers[i + 1]}: " + "; ".join(p.binding))
    lines += variant_lines(headers[1:], [g for g in groups if g is not None])
    lines += ep_overlap_lines(result.plans[0], model, cluster, workload)
    lines += dispatcher_lines(result)
    best = result.plans[0].reported
    reserved = max((m.get("reserved_bytes", 0.0) for m in best.memory), default=0.0)
    if reserved:
        lines.append(
            f"memory: peak includes {reserved / GiB:.1f} GiB reserved per GPU (CUDA context, cuBLAS "
            f"workspaces, NCCL buffers of each communicator, {100 * FRAGMENTATION:g}% allocator fragmentation); "
            "--headroom-gib keeps more free"
        )
    if result.memory_warning:  # a pinned plan over only by the assumed allowance (search.solve._pinned_tight)
        lines.append(f"{result.memory_warning} (accepted because every degree is pinned; a free search rejects it)")
    lines += [f"note: {n}" for n in best.notes if "MFU" in n]  # best: with its band (planner.recommend)
    lines += [f"note: band: {n}" for n in best.band_notes]
    if getattr(best, "evidence_summary", ""):  # how each part of the best plan's prediction is known (issue 38)
        lines.append(f"note: {best.evidence_summary}")
    return "\n".join(lines)
