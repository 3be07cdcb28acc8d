"""One case of a sweep, solved: ``solve_case(case) -> dict`` (the outcome, plan, estimate and solve columns).

Runs in a worker process (local pool or Ray). It never raises: a malformed case becomes
``status="error"`` with the one-line reason, a case with no plan that fits becomes
``status="infeasible"``, so the sweep goes on.

The plan comes from :func:`planner.api.recommend` (the CP-SAT search of ``planner recommend``)
with its defaults (:data:`search.options.ANSWER_OPTIONS`: the op-graph re-score and the memory margin, so
the plan is ``planner recommend``'s), the case's time limit and one CP-SAT worker (the sweep runs cases in
parallel; the answer does not depend on the workers); the best plan is re-scored by
:func:`costmodel.api.evaluate` (its 80% band attached by recommend), and its DMA
assignment and critical condition come from :func:`planner.sweep.codesign.critical_columns`.
"""

from __future__ import annotations

import time

from costmodel.spec.errors import PlannerError

from .grid import Case
from .schema import PLAN_NAMES


def _flatten(est: dict | None) -> dict:
    """The estimate columns of :mod:`planner.sweep.schema` from ``Estimate.to_dict()``."""
    if est is None:
        return {}
    b = est.get("breakdown", {})
    cols = {
        k: est.get(k)
        for k in (
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "hfu",
            "model_tflops_per_gpu",
            "peak_memory_bytes",
            "hbm_bytes",
            "fits",
        )
    }
    band = est.get("step_time_band_s") or (None, None)
    cols["step_time_band_lo_s"], cols["step_time_band_hi_s"] = band
    cols["band_notes"] = "; ".join(est.get("band_notes") or ()) or None  # inside the data: the sentence saying so
    cols["compute_s"] = b.get("compute_s")
    cols["bubble_s"] = b.get("bubble_s")
    cols["exposed_comm_s"] = sum(v for k, v in b.items() if k.endswith("_exposed_s"))
    return cols


def _plan(config: dict | None) -> dict:
    if config is None:
        return {}
    out = {k: config.get(k) for k in PLAN_NAMES}
    if out.get("layers_per_stage") is not None:
        out["layers_per_stage"] = list(out["layers_per_stage"])
    return out


def outcome(
    status: str,
    reason: str = "",
    *,
    config: dict | None = None,
    estimate: dict | None = None,
    solve: dict | None = None,
    model_params: int | None = None,
) -> dict:
    """The result of one case: every non-input, non-meta column, plus the nested ``estimate``."""
    s = solve or {}
    return {
        "model_params": model_params,
        "status": status,
        "reason": reason or None,
        **{k: None for k in PLAN_NAMES},
        **_plan(config),
        **_flatten(estimate),
        "solver": s.get("solver"),
        "solve_status": s.get("status"),
        "solve_time_s": s.get("time_s"),
        "objective_s": s.get("objective_s"),
        "bound_s": s.get("bound_s"),
        "gap": s.get("gap"),
        "estimate": estimate,
    }


def solve_case(case: Case) -> dict:
    """Plan one case; never raises (see the module docstring)."""
    t0 = time.perf_counter()
    params, stack = None, None
    try:
        model, cluster, workload = case.problem()
        params = model.params
        stack = cluster.stack
        out = _solve(case, model, cluster, workload)
    except (PlannerError, ValueError) as e:
        out = outcome("error", " ".join(str(e).split()), model_params=params)
    except Exception as e:  # a bug in the planner: record it, keep sweeping
        out = outcome("error", f"internal error: {type(e).__name__}: {' '.join(str(e).split())}", model_params=params)
    out["model_params"] = params
    out["stack"] = stack  # the software stack the numbers assume (None: the case did not load)
    out["case_time_s"] = time.perf_counter() - t0
    return out


def _solve(case: Case, model, cluster, workload) -> dict:
    """:func:`planner.api.recommend` with one CP-SAT worker (the sweep runs cases in parallel)."""
    from ..api import recommend

    r = recommend(
        model,
        cluster,
        workload,
        time_limit_s=case.time_limit_s,
        workers=1,
        seed=0,
        top_k=1,
        framework=case.framework,
        grad_dtype=case.grad_dtype,
        objective=case.objective,
        train_tokens=case.train_tokens,
        objective_inputs=dict(case.objective_inputs),
    )
    solve_info = {
        "solver": "cp-sat",
        "status": r.status,
        "time_s": r.time_s,
        "objective_s": r.objective_s,
        "bound_s": r.bound_s,
        "gap": r.gap,
    }
    if r.best is None:
        if r.status == "INFEASIBLE":
            reason = r.explanation or "no plan fits in memory"
            return outcome("infeasible", " ".join(reason.split()), solve=solve_info)
        return outcome(
            "unsolved", f"no plan found within the time limit of {case.time_limit_s:g} s ({r.status})", solve=solve_info
        )
    config = {
        **r.best.config.to_dict(),
        "sp": r.best.config.sp_on,  # sequence parallelism in effect (tp > 1)
        "optimizer_offload_fraction": r.best.config.optimizer_offload_fraction,
    }  # to_dict leaves out a 0
    est = r.best.reported  # the default engine's, as recommend reports, with the 80% band recommend attached
    out = outcome("ok", config=config, estimate=est.to_dict(), solve=solve_info)
    out["graph_step_time_s"] = est.step_time_s if est.engine == "graph" else None
    out["analytic_step_time_s"] = r.best.estimate.step_time_s
    from .codesign import critical_columns  # the DMA assignment and T_comm <= T_compute (planner explain's)

    out.update(critical_columns(model, cluster, workload, r.best.config))
    # no stream to assign (one GPU): null, as the CSV's empty cell reads back (it was never reached before a
    # one-GPU plan could fit, with optimizer offload)
    out["dma_assignment"] = out.get("dma_assignment") or None
    out.update(objective_columns(r.ranking, r.best.config))
    return out


def objective_columns(ranking, config) -> dict:
    """The objective columns (schema version 8) of the case's plan; none without a ranking (no --train-tokens)."""
    o = None if ranking is None else ranking.of(config)
    if o is None:
        return {}
    t, lost = o.time_to_train, o.time_to_train.lost
    return {
        "objective": ranking.objective,
        "train_tokens": ranking.train_tokens,
        "objective_candidates": ranking.candidates,
        "days": t.days,
        "goodput": t.goodput,
        "checkpoint_interval_s": t.interval_s,
        "checkpoint_interval_steps": t.interval_steps,
        "lost_checkpoint_s": lost.checkpoint_s,
        "lost_work_s": lost.lost_work_s,
        "lost_restart_s": lost.restart_s,
        "usd": None if o.cost is None else o.cost.usd,
        "usd_per_million_tokens": None if o.cost is None else o.cost.usd_per_million_tokens,
        "kwh": o.energy.kwh,
        "j_per_token": o.energy.j_per_token,
    }
