"""``write_report(path, ...)``: one self-contained HTML file for a recommend answer, an evaluated plan or a sweep.

The page is a Jinja2 template of this package (``templates/``; every value autoescaped), with its CSS inline and
every plot an inline SVG from matplotlib: it opens from disk with no network access.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from costmodel.spec.errors import SpecError

from .deps import jinja
from .plan_view import plan_view
from .sections import (
    assumptions_view,
    baseline_view,
    compare_baseline,
    objectives_of,
    objectives_view,
    runner_ups,
    solve_view,
)
from .sweep_view import sweep_view


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("overlap-planner")
    except Exception:  # not installed (a source checkout on sys.path)
        return "source"


def _problem(model, cluster, workload, gpus: int | None):
    """Specs from specs, preset names or files; the cluster sized to the plan's GPUs."""
    from ..problem import resolve_cluster, resolve_model

    if model is None or cluster is None or workload is None:
        missing = [n for n, v in (("model", model), ("cluster", cluster), ("workload", workload)) if v is None]
        raise SpecError(missing[0], None, "given with a result or an estimate (the problem it answers)")
    m, cl = resolve_model(model), resolve_cluster(cluster)
    if not cl.num_gpus and gpus:
        cl = cl.with_gpus(gpus)
    return m, cl, workload


def _title(kind: str, model, cluster, rows=None) -> str:
    if kind == "sweep":
        return f"Sweep: {len(rows)} cases"
    return f"{model.name} on {cluster.num_gpus} x {cluster.device.name}: {kind}"


def report_context(
    *,
    result=None,
    estimate=None,
    sweep_rows=None,
    model=None,
    cluster=None,
    workload=None,
    objectives=None,
    baseline=None,
    title: str | None = None,
    timeline: bool = True,
) -> dict:
    """The values the template renders (:func:`write_report`'s arguments)."""
    given = [n for n, v in (("result", result), ("estimate", estimate), ("sweep_rows", sweep_rows)) if v is not None]
    if len(given) != 1:
        raise SpecError("report", ", ".join(given) or None, "given exactly one of result, estimate or sweep_rows")
    ctx = {
        "kind": {"result": "recommend", "estimate": "evaluate", "sweep_rows": "sweep"}[given[0]],
        "version": _version(),
        "made": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "plan": None,
        "solve": None,
        "runner_ups": [],
        "baseline": None,
        "objectives": None,
        "assumptions": None,
        "sweep": None,
        "infeasible": None,
    }
    if sweep_rows is not None:
        ctx["sweep"] = sweep_view(sweep_rows)
        ctx["title"] = title or _title("sweep", None, None, ctx["sweep"]["rows"])
        return ctx
    if result is not None and not hasattr(result, "plans"):
        raise SpecError("result", type(result).__name__, "a search.result.SolveResult (planner.api.recommend's)")
    if estimate is not None and not hasattr(estimate, "breakdown"):
        raise SpecError("estimate", type(estimate).__name__, "a training Estimate (planner.api.evaluate's)")
    plans = list(result.plans) if result is not None else []
    best = plans[0].reported if plans else estimate
    m, cl, w = _problem(model, cluster, workload, best.config.gpus if best is not None else None)
    ctx["title"] = title or _title(ctx["kind"], m, cl)
    ctx["problem"] = {
        "model": m.name,
        "gpus": cl.num_gpus,
        "device": cl.device.name,
        "cluster": cl.name,
        "global_batch": w.global_batch,
        "seq": w.seq_len,
        "dtype": w.dtype,
    }
    ctx["assumptions"] = assumptions_view(m, cl, w, best)
    if result is not None:
        ctx["solve"] = solve_view(result)
        if not plans:
            ctx["infeasible"] = {"explanation": result.explanation, "changes": list(result.changes)}
            return ctx
        ctx["runner_ups"] = runner_ups(result, m, cl, w)
    ctx["plan"] = plan_view(best, m, cl, w, timeline=timeline)
    if baseline is not None:
        ctx["baseline"] = baseline_view(compare_baseline(baseline, best, m, cl, w))
    estimates = [p.reported for p in plans] if plans else [best]
    labels = [r["label"] for r in ctx["runner_ups"]] or ["plan"]
    ctx["objectives"] = objectives_view(objectives_of(objectives, estimates, m, cl, w), labels)
    return ctx


def _environment():
    j = jinja()
    env = j.Environment(
        loader=j.PackageLoader("planner.html_report", "templates"),
        autoescape=True,
        undefined=j.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        secs=fmt_s,
        pct=lambda x, d=1: "-" if x is None else f"{100 * x:.{d}f}",
        num=lambda x, d=0: "-" if x is None else f"{x:,.{d}f}",
    )
    return env


def fmt_s(x) -> str:
    """Seconds to four significant digits, without exponents."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.4g}" if 1e-4 <= abs(x) < 1e6 else f"{x:.3e}"


def render_html(**kwargs) -> str:
    """The report as one HTML string (:func:`write_report`'s keywords)."""
    ctx = report_context(**kwargs)
    return _environment().get_template("report.html").render(**ctx)


def write_report(
    path,
    *,
    result=None,
    estimate=None,
    sweep_rows=None,
    model=None,
    cluster=None,
    workload=None,
    objectives=None,
    baseline=None,
    title: str | None = None,
    timeline: bool = True,
) -> Path:
    """Write one self-contained HTML report to ``path`` and return it.

    Give exactly one of:

    result : a :class:`search.result.SolveResult` (:func:`planner.api.recommend`): the best plan in full, the
        solve, and the runner-ups with their bands; an infeasible answer shows why and the smallest changes.
    estimate : a training :class:`~costmodel.training.estimate.Estimate` (:func:`planner.api.evaluate`).
    sweep_rows : a sweep's records (:meth:`planner.sweep.ResultStore.read`) or its output directory.

    model, cluster, workload : the problem a result or an estimate answers (specs or preset names; unused for a
        sweep). objectives : a :class:`costmodel.objectives.PlanObjectives` of the best plan, a list of them (one per
        plan), or the keywords of :func:`costmodel.objectives.plan_objectives` with ``train_tokens`` (computed for
        every plan shown). baseline : the plan run today (text such as ``"tp=8,pp=8,mb=1"``, Megatron-LM arguments,
        fields or a ParallelConfig), or a :class:`planner.baseline.Comparison`: "why not" it. title : the page's
        title (default: the problem). timeline : draw the op-graph timeline of one step (the slowest stage).

    Raises :class:`SpecError` (one line) for a bad argument, an unwritable path, or a missing ``jinja2`` /
    ``matplotlib`` (``pip install 'overlap-planner[report]'``).
    """
    html = render_html(
        result=result,
        estimate=estimate,
        sweep_rows=sweep_rows,
        model=model,
        cluster=cluster,
        workload=workload,
        objectives=objectives,
        baseline=baseline,
        title=title,
        timeline=timeline,
    )
    out = Path(os.fspath(path))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        raise SpecError("report", str(out), f"a writable file path ({e.strerror})") from None
    return out
