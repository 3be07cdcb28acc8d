"""The report's sections beyond one plan: the search's answer (how it was found, the runner-ups and whether each
is within the best plan's band), "why not" the user's baseline (the step-time terms where it loses), the objectives
of a months-long run (:mod:`costmodel.objectives`) and the assumptions behind every number (the software stack, the
presets' stated assumptions, the defaults)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from costmodel.frameworks.stacks import load_stack
from costmodel.objectives import PlanObjectives, plan_objectives
from costmodel.spec.errors import PlannerError, SpecError
from costmodel.spec.presets import preset_info, preset_names
from costmodel.spec.units import GiB
from costmodel.training.estimate import DEFAULT_ENGINE
from costmodel.trust.memory_margin import MEMORY_MARGIN

from ..report import ENGINE_NAMES, model_label
from . import plots
from .plan_view import degrees


def _band(plan, model, cluster, workload):
    """The plan's 80% band: the one attached to the best plan, else computed for display, else None."""
    if plan.reported.step_time_band_s:
        return tuple(plan.reported.step_time_band_s)
    try:
        from costmodel.trust.uncertainty import band_for

        return band_for(model, cluster, workload, plan.reported)
    except Exception:  # no band model for this plan: the cell is left empty, as the text report does
        return None


def runner_ups(result, model, cluster, workload) -> list[dict]:
    """One row per plan of the answer, the best first: its degrees, step time under both engines, band, how much
    slower than the best and whether that is within the best plan's 80% band (then the model cannot tell them
    apart), memory, throughput and the constraints it sits on."""
    best = result.plans[0].reported
    lo, hi = best.step_time_band_s if best.step_time_band_s else (None, None)
    rows = []
    for i, p in enumerate(result.plans):
        r, c = p.reported, p.config
        rows.append(
            {
                "label": "best" if i == 0 else f"#{i + 1}",
                "degrees": degrees(c),
                "zero": c.zero,
                "recompute": c.recompute,
                "sp": "on" if c.sp_on else "off",
                "step_s": r.step_time_s,
                "engine": ENGINE_NAMES.get(r.engine, r.engine),
                "analytic_s": p.estimate.step_time_s,
                "band": _band(p, model, cluster, workload),
                "vs_best_pct": 100 * (r.step_time_s / best.step_time_s - 1),
                "within_band": i > 0 and hi is not None and lo <= r.step_time_s <= hi,
                "peak_gib": r.peak_memory_bytes / GiB,
                "tokens_per_s": r.tokens_per_s,
                "mfu": r.mfu,
                "binding": list(p.binding),
            }
        )
    return rows


def solve_view(result) -> dict:
    """How the answer was found and what is proven (the text report's solve lines), status and gap."""
    from ..solve_report import solve_lines

    try:
        lines = solve_lines(result) if result.plans else []
    except (AttributeError, TypeError, KeyError):  # a result built by hand without the search's statistics
        lines = []
    return {
        "status": result.status,
        "gap": result.gap,
        "objective_s": result.objective_s,
        "bound_s": result.bound_s,
        "time_s": result.time_s,
        "lines": lines,
    }


def baseline_view(comparison) -> dict:
    """The user's plan beside the recommendation: the verdict (is the gain outside the band), both plans' headline
    numbers, and "why not": the step-time terms where the baseline spends more (or less), largest first."""
    base, rec = comparison.baseline, comparison.recommended
    keys = list(dict.fromkeys(list(rec.breakdown) + list(base.breakdown)))
    diffs = [
        {
            "name": k.removesuffix("_s"),
            "recommended_s": rec.breakdown.get(k, 0.0),
            "baseline_s": base.breakdown.get(k, 0.0),
            "diff_s": base.breakdown.get(k, 0.0) - rec.breakdown.get(k, 0.0),
        }
        for k in keys
    ]
    diffs = sorted((d for d in diffs if abs(d["diff_s"]) > 1e-6 * rec.step_time_s), key=lambda d: -abs(d["diff_s"]))
    side = [
        {"what": what, "recommended": f(rec), "baseline": f(base)}
        for what, f in (
            ("plan", lambda e: degrees(e.config) + f" zero={e.config.zero} recompute={e.config.recompute}"),
            ("step time s", lambda e: f"{e.step_time_s:.4g}"),
            ("tokens/s", lambda e: f"{e.tokens_per_s:,.0f}"),
            ("MFU %", lambda e: f"{100 * e.mfu:.1f}"),
            ("peak memory GiB", lambda e: f"{e.peak_memory_bytes / GiB:.1f}"),
            ("fits", lambda e: "yes" if e.fits else "NO"),
        )
    ]
    return {
        "message": comparison.message,
        "gain": comparison.gain,
        "outside_band": comparison.outside_band,
        "band": tuple(comparison.band_s),
        "baseline_band": comparison.baseline_band_s,
        "side": side,
        "diffs": diffs,
        "defaults": dict(comparison.defaults),
        "band_notes": list(comparison.band_notes),
    }


def compare_baseline(baseline, best_estimate, model, cluster, workload):
    """A :class:`planner.baseline.Comparison` as given, or one computed from a baseline plan (text, fields or a
    ParallelConfig) against the best plan."""
    from ..baseline import Comparison, compare_with_baseline

    if isinstance(baseline, Comparison):
        return baseline
    return compare_with_baseline(model, cluster, workload, best_estimate, baseline, engine=best_estimate.engine)


def objectives_of(objectives, estimates: list, model, cluster, workload) -> list:
    """One :class:`PlanObjectives` per estimate (None where not known): ``objectives`` is a PlanObjectives (the
    first plan's), a sequence of them (one per plan), or the keywords of :func:`costmodel.objectives.plan_objectives`
    with ``train_tokens`` (computed here for every plan)."""
    if objectives is None:
        return [None] * len(estimates)
    if isinstance(objectives, PlanObjectives):
        return [objectives] + [None] * (len(estimates) - 1)
    if isinstance(objectives, Mapping):
        options = dict(objectives)
        if "train_tokens" not in options:
            raise SpecError("objectives", sorted(options), "the keywords of plan_objectives with train_tokens")
        tokens = options.pop("train_tokens")
        return [plan_objectives(e, model, cluster, workload, tokens, **options) for e in estimates]
    if isinstance(objectives, Sequence) and all(o is None or isinstance(o, PlanObjectives) for o in objectives):
        return (list(objectives) + [None] * len(estimates))[: len(estimates)]
    raise SpecError(
        "objectives",
        type(objectives).__name__,
        "a PlanObjectives, a list of them, or the keywords of costmodel.objectives.plan_objectives with train_tokens",
    )


def objective_row(label: str, o: PlanObjectives) -> dict:
    t = o.time_to_train
    return {
        "label": label,
        "days": t.days,
        "goodput": t.goodput,
        "interval_s": t.interval_s,
        "interval_steps": t.interval_steps,
        "interval_rule": t.interval_rule,
        "usd": None if o.cost is None else o.cost.usd,
        "usd_per_mtok": None if o.cost is None else o.cost.usd_per_million_tokens,
        "kwh": o.energy.kwh,
        "j_per_token": o.energy.j_per_token,
        "step_s": o.step_time_s,
    }


def objectives_view(per_plan: list, labels: list[str]) -> dict | None:
    """The objectives table (a row per plan that has them) and the first plan's details: time lost by cause (a
    plot), the checkpoint, failures and restarts, price and power, with their sources and assumptions."""
    first = per_plan[0] if per_plan else None
    if first is None:
        return None
    t, cost, energy = first.time_to_train, first.cost, first.energy
    ck, lost = t.checkpoint, t.lost
    details = [
        ("train tokens", f"{t.train_tokens:,.4g}"),
        ("steps", f"{t.steps:,}"),
        ("GPU-hours", f"{t.gpu_hours:,.0f}"),
        ("job MTBF", f"{t.mtbf_s / 3600:,.2f} h" if t.mtbf_s != float("inf") else "no failures"),
        ("expected failures", f"{lost.failures:,.1f}"),
        ("checkpoint interval", f"{t.interval_s / 60:,.1f} min ({t.interval_steps:,} steps; {t.interval_rule})"),
        (
            "checkpoint",
            f"{ck.mode}: {ck.total_bytes / 1e9:,.1f} GB in all, at most "
            f"{max(ck.bytes_per_rank, default=0) / 1e9:,.2f} GB per rank ({ck.writers})",
        ),
        (
            "checkpoint blocks training",
            f"{ck.blocking_s:,.1f} s (write {ck.write_s:,.1f} s, device-to-host "
            f"{ck.d2h_s:,.2f} s, on storage after {ck.durable_s:,.1f} s)",
        ),
        (
            "restart",
            f"{t.restart_s:,.0f} s ("
            + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:,.0f} s" for k, v in t.restart_parts.items())
            + ")",
        ),
        ("lost work per failure", f"{lost.lost_work_s / lost.failures / 60:,.1f} min" if lost.failures else "-"),
    ]
    if cost is not None:
        details.append(("price", f"${cost.gpu_hour_usd:g} per GPU-hour ({cost.price_source})"))
    details += [
        (
            "board power",
            f"{energy.board_w:,.0f} W computing, {energy.idle_w:,.0f} W stopped, of "
            f"{energy.tdp_w:,.0f} W (activity {100 * energy.activity:.0f}%)",
        ),
        ("PUE", f"{energy.pue:g}"),
    ]
    sources = list(t.assumptions) + list(energy.sources) + ([cost.price_source] if cost else []) + list(first.notes)
    rows = [objective_row(label, o) for label, o in zip(labels, per_plan) if o is not None]
    return {
        "rows": rows,
        "details": details,
        "sources": list(dict.fromkeys(sources)),
        "lost_plot": plots.lost_time_svg(lost),
        "inputs": dict(t.inputs),
    }


def _listed(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _preset_text(kind: str, name: str) -> dict:
    """A preset's description, sources, notes and stated assumptions (empty for a spec that is not a preset)."""
    doc = preset_info(kind, name) if name in preset_names(kind) else {}
    return {
        "description": " ".join(_listed(doc.get("description"))),
        "sources": _listed(doc.get("sources")) + _listed(doc.get("source")),
        "notes": _listed(doc.get("notes")),
        "assumptions": _listed(doc.get("assumptions")),
    }


def assumptions_view(model, cluster, workload, est=None) -> dict:
    """What the numbers assume: the software stack, the model and cluster presets (with their stated
    assumptions and sources), the workload and the defaults the answer used."""
    try:
        stack = load_stack(cluster.stack)
        stack_d = {"name": stack.name, "title": stack.title, "source": stack.source}
    except PlannerError:
        stack_d = {"name": str(cluster.stack), "title": "", "source": ""}
    defaults = [
        ("engine of the reported numbers", ENGINE_NAMES.get(est.engine if est else DEFAULT_ENGINE)),
        ("memory margin", f"{100 * MEMORY_MARGIN:g}% of HBM (the memory model's largest measured under-prediction)"),
    ]
    if est is not None:
        defaults += [
            ("MFU convention", est.flop_convention),
            ("framework", est.config.framework),
            ("gradient dtype", est.config.grad_dtype),
        ]
    dev = cluster.device
    return {
        "stack": stack_d,
        "model": {"label": model_label(model), **_preset_text("models", model.name)},
        "cluster": {
            "name": cluster.name,
            "device": dev.name,
            "gpus_per_node": cluster.gpus_per_node,
            "hbm_gib": dev.hbm_bytes / GiB,
            **_preset_text("clusters", cluster.name),
        },
        "workload": [
            ("global batch", f"{workload.global_batch} sequences"),
            ("sequence", f"{workload.seq_len} tokens"),
            ("tokens per step", f"{workload.tokens:,}"),
            ("dtype", workload.dtype),
        ],
        "defaults": defaults,
    }
