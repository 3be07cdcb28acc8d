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
from costmodel.spec.units import GiB
from costmodel.training.estimate import DEFAULT_ENGINE

from .emit import deepspeed_config, emit_text, megatron_args, refuse_unless_runnable, torchtitan_lines
from .emit_arch import model_args_tokens
from .objective_report import objective_lines, objective_view, objectives_json, pareto_lines
from .report import ENGINE_NAMES, _s, estimate_json, model_label, print_json, stack_line, table
from .tuning import fmt_knob, recommend_choices


def render(result, args: argparse.Namespace, model, cluster, workload) -> int:
    """Print ``result`` as the flags ``args`` ask (``--top``, ``--json``, ``--emit``, ``--baseline``); the exit
    code. Plans that differ only in knobs that change nothing are left out first (:func:`without_twins`;
    ``planner recommend`` asks the search for more than ``--top`` so that none is missing), and a problem
    with no plan raises :class:`InfeasibleConfig` with the reason and the smallest changes."""
    result.plans, same = without_twins(result.plans)
    ranking, front = objective_view(result, args)  # the --pareto front over every candidate, before the cut
    result.plans = result.plans[: args.top]  # more were asked for, so twins left out leave no gap
    if not result.plans:
        what = "infeasible" if result.status == "INFEASIBLE" else "unsolved"
        if args.json:
            print_json({"status": what, "solve": result.solve_dict(), "alternatives": []})
        changes = "; smallest changes: " + ", ".join(result.changes) if result.changes else ""
        raise InfeasibleConfig(f"problem={what}: {result.explanation}{changes}")
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
        d["objective_s"], d["agreement"] = best.objective_s, best.agreement
        d["alternatives"] = [p.to_dict() for p in result.plans[1:]]
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
                    best.config, workload.global_batch, model.layers, workload.dtype, model.is_moe, model.mtp_layers
                )
                for t in a
            ]
            d["megatron_model_args"] = model_args_tokens(model, best.config, workload)  # architecture + attention
        elif args.emit == "deepspeed":
            d["deepspeed_config"] = deepspeed_config(best.config, workload.global_batch, workload.dtype)
        elif args.emit == "fsdp2":
            d["torchtitan_config"] = torchtitan_lines(best.config, workload, model.layers)
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
    for i, (p, b) in enumerate(zip(result.plans, bands)):
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
            c.chunks,
            f"{c.bucket_bytes / 1e6:g}",
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


def _plan_column(plan, band=None) -> list:
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
        f"{c.bucket_bytes / 1e6:g}",
        c.chunks,
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


def _opt_s(x) -> str:
    return "-" if x is None else _s(x)


def solve_lines(result) -> list[str]:
    """How the answer was found and what is proven: the solve, the analytic optimum with its bound,
    and the op-graph re-score (both objectives and the band), so "OPTIMAL" keeps its exact meaning."""
    s, gap = result.stats, result.gap
    if s.exhaustive:
        how = (
            f"every plan of the {s.space or 0} choices the pins leave scored exactly "
            f"in {s.exhaustive_s or 0:.2f} s; no presolve or CP-SAT needed"
        )
    else:
        n = s.model_choices or 0
        how = (
            f"presolve {s.presolve_s or 0:.2f} s, branch and bound: {s.probed or 0} choices solved "
            f"exactly, {s.bound or 0} pruned by bound, {s.memory or 0} by memory, "
            f"{s.dominated or 0} dominated; CP-SAT {result.solver_time_s:.2f} s on the "
            f"{n} choice{'' if n == 1 else 's'} left"
        )
    if s.timed_out:
        how += "; the time limit stopped presolve: the best plan found so far"
    if result.robust:
        r = result.robust
        how = (
            f"robust over {len(r['scenarios'])} scenarios: branch and bound on {s.robust_evaluated or 0} of "
            f"{s.robust_candidates or 0} choices within the nominal plan's worst case"
            + ("; CP-SAT with one table per scenario agrees" if s.cpsat_agrees else "")
        )
    lines = [
        f"solve: {result.status} in {result.time_s:.2f} s ({how})",
        f"analytic optimum {_opt_s(result.objective_s)} s, best bound {_opt_s(result.bound_s)} s, gap "
        f"{'-' if gap is None else f'{100 * gap:.2f}%'}; evaluate (analytic tables) agrees within "
        f"{100 * max(p.agreement for p in result.plans):.3f}%",
    ]
    best = result.plans[0]
    if result.robust:
        r = result.robust
        proof = (
            "proven optimal over the scenarios"
            if result.status == "OPTIMAL"
            else f"not proven optimal ({result.status}: the time limit stopped the search)"
        )
        lines[-1] = f"worst-case step time {_opt_s(r['worst_s'])} s (analytic), {proof}"
        per = ", ".join(f"{n} {r['robust_plan'][n]:.2f}" for n in r["scenarios"])
        nom = ", ".join(f"{n} {r['nominal_plan'][n]:.2f}" for n in r["scenarios"])
        lines.append(f"robust plan by scenario (s): {per}")
        lines.append(
            "the nominal optimum is the robust plan"
            if r["same_as_nominal"]
            else f"the nominal optimum differs; by scenario (s): {nom}"
        )
        if r["top_order_swaps_in"]:
            lines.append("the top plans swap order in: " + ", ".join(r["top_order_swaps_in"]))
        return lines
    off = s.optimizer_offload
    if off and off.get("chosen"):  # search.offload_choice: nothing fit without it
        tried = ", ".join(
            f"{t['fraction']:g} ({t['status']}" + (f", {t['step_time_s']:.2f} s)" if t["step_time_s"] else ")")
            for t in off["tried"]
        )
        lines.append(
            f"optimizer CPU offload: no plan fits without it; searched again at fraction {tried}: "
            f"{off['chosen']:g} chosen, copies overlapped (Megatron --optimizer-cpu-offload "
            f"--optimizer-offload-fraction {off['chosen']:g} --overlap-cpu-optimizer-d2h-h2d)"
        )
    act = s.activation_offload
    if act:  # search.act_offload_choice: nothing fit without it, or the answer recomputed at pp=1
        why = (
            "no plan fits without it"
            if act["without_s"] is None
            else f"the best plan without it recomputes at pp=1 ({_opt_s(act['without_s'])} s analytic)"
        )
        found = (
            f"the best with it, each plan offloading the fewest layers that fit it, {_opt_s(act['best_s'])} s "
            f"({act['status']})"
            if act["best_s"] is not None
            else "no plan fits with it either"
        )
        lines.append(
            f"activation CPU offload: {why}; {found}: "
            + (
                f"{act['chosen']} layers chosen (Megatron --cpu-offloading-num-layers {act['chosen']})"
                if act["chosen"]
                else "not chosen"
            )
            + (
                f"; with more headroom, to keep the memory margin ({act['margin_chosen_over']} layers fit without it)"
                if act.get("margin_chosen_over")
                else ""
            )
        )
    if result.band is None:
        lines[-1] += f"; the op-graph scheduler re-scores the best plan at {_opt_s(best.graph_step_time_s)} s"
    else:
        left = result.within_band - result.rescored
        lines.append(
            f"op-graph re-score: {result.rescored} plan{'s' if result.rescored != 1 else ''} within "
            f"{100 * result.band:g}% of the analytic optimum"
            + (f" ({left} not reached before the time limit)" if left else "")
            + f"; the best under the op graph is the answer: {_opt_s(result.graph_objective_s)} s "
            + (
                f"(the least peak memory of the plans within {100 * result.memory_tie:g}% of the fastest, "
                f"{_opt_s(result.fastest_graph_s)} s) "
                if result.fastest_graph_s and result.graph_objective_s > result.fastest_graph_s
                else ""
            )
            + f"(analytic {_opt_s(best.objective_s)} s); the analytic optimum runs "
            f"{_opt_s(result.analytic_best_graph_s)} s under the op graph"
        )
        if result.memory_margin:
            lines.append(_margin_line(result))
    return lines


def _margin_line(result) -> str:
    pct = f"{100 * result.memory_margin:g}%"
    alt = result.margin_alternative_s
    if result.margin_kept:
        return (
            f"memory margin: the plan keeps {pct} of the usable HBM free beyond its predicted peak (the memory "
            "model's largest measured under-prediction; --memory-margin)"
            + (
                f"; the fastest plan without that margin runs {_opt_s(alt)} s "
                f"({100 * (alt / result.graph_objective_s - 1):+.1f}%), inside the {100 * result.band:g}% band"
                if alt
                else ""
            )
        )
    return (
        f"memory margin: at risk: the predicted peak is within {pct} of the usable HBM, the memory model's largest "
        "measured under-prediction; "
        + (
            f"the fastest plan that keeps the margin runs {_opt_s(alt)} s "
            f"({100 * (alt / result.graph_objective_s - 1):+.1f}%, beyond the {100 * result.band:g}% band)"
            if alt
            else "no plan that keeps it was found"
        )
        + "; --headroom-gib requires one"
    )


def report_text(result, model, cluster, workload) -> str:
    cols = [_plan_column(p, _band(p, model, cluster, workload)) for p in result.plans]
    headers = [""] + ["best" if i == 0 else f"#{i + 1}" for i in range(len(cols))]
    engine = result.plans[0].reported.engine
    rows = [[name] + [col[i] for col in cols] for i, name in enumerate(_rows(engine))]
    lines = [
        f"{model_label(model)} on {cluster.num_gpus} x {cluster.device.name} ({cluster.name}), global batch "
        f"{workload.global_batch} x {workload.seq_len} tokens, {workload.dtype}",
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
    for i, p in enumerate(result.plans):
        if p.binding:
            lines.append(f"{headers[i + 1]}: " + "; ".join(p.binding))
    best = result.plans[0].reported
    reserved = max((m.get("reserved_bytes", 0.0) for m in best.memory), default=0.0)
    if reserved:
        lines.append(
            f"memory: peak includes {reserved / GiB:.1f} GiB reserved per GPU (CUDA context, cuBLAS "
            "workspaces, NCCL buffers of each communicator, 5% allocator fragmentation); "
            "--headroom-gib keeps more free"
        )
    lines += [f"note: {n}" for n in best.notes if "MFU" in n]  # best: with its band (planner.recommend)
    lines += [f"note: band: {n}" for n in best.band_notes]
    return "\n".join(lines)
