"""Activation CPU offload as a plan option the search chooses (issue 21): where nothing fits without it, or where
the answer is a ``pp = 1`` plan that recomputes (offload could buy its recompute back).

Megatron-Core's ``--cpu-offloading-num-layers N`` (:mod:`costmodel.physics.mechanics.act_offload`) moves the saved activations of
the first ``N`` layers to the host; Megatron runs it only at ``pp = 1`` without recompute. A problem that states
``N`` (``Problem.options``, ``recommend --activation-offload-layers N``) is searched with it like any plan option:
``Problem`` pins ``pp = 1`` and ``recompute = none``, the tables charge the stall (``Tables.timing``) and the freed
bytes (``stage_memory``), as ``evaluate`` does.

A problem that states none is searched without it first; :func:`better` then searches the plans with it, in one
search of the problem pinned at ``pp = 1`` without recompute where each plan offloads the fewest layers ``N``
that make it fit (``search.problem.FEWEST_FITTING``: ``Tables.with_fewest_fitting`` charges that ``N``'s freed
bytes and stall; the memory bounds take off the most ``L - 1`` layers can free). That is the optimum over every
plan with offload: a plan's memory falls with ``N`` (fewer than its fewest do not fit) and its stall
(:func:`costmodel.physics.mechanics.act_offload.schedule_s`) does not fall as ``N`` grows (``tests/test_act_offload_search.py``), so
more layers are never faster. When that optimum beats the answer without offload, its ``N`` is searched as a
stated option (re-scored as the first search), which answers.

Cost: the pinned search runs only when the answer is ``pp = 1`` with recompute or none fits (RESULTS section 45:
Qwen3-30B-A3B / 64 H100 of ``benchmarks/search_speed.py`` is such a case).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from costmodel.physics.mechanics import offload
from costmodel.physics.memory.stage_memory import memory_per_stage

from .problem import FEWEST_FITTING, Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, SolveResult, binding_constraints


def offerable(p: Problem) -> bool:
    """Whether a problem may get activation offload: Megatron, none stated, ``pp = 1`` and no recompute allowed,
    at least two layers (``N < L``) and a device whose host link is known."""
    lim = p.limits
    return (
        p.framework == "megatron"
        and "activation_offload_layers" not in dict(p.options)
        and "offload_modules" not in dict(p.options)  # Megatron refuses both
        and lim.allows("pp", 1)
        and lim.allows("recompute", "none")
        and p.model.layers >= 2
        and offload.host_link_bytes_per_s(p.cluster) > 0
    )


def with_offload(p: Problem, n: int) -> Problem:
    """``p`` with ``n`` offloaded layers as a plan option (:data:`search.problem.FEWEST_FITTING`: each plan's
    fewest that fit); ``Problem`` pins ``pp = 1`` and no recompute."""
    return replace(p, options=tuple(sorted({**dict(p.options), "activation_offload_layers": n}.items())))


def fewest_layers(p: Problem, config) -> int | None:
    """The fewest offloaded layers ``N`` (``1 <= N < L``) with which ``config`` (``pp = 1``, no recompute) fits
    ``p``'s HBM less headroom (the stage's total bytes, as the tables' fit test), or ``None`` when even ``L - 1``
    does not; memory falls with ``N`` (``costmodel.physics.memory.stage_memory.stage_memory``), so a bisection finds it."""

    def fits(n: int) -> bool:
        c = replace(config, activation_offload_layers=n)
        return max(m.total_bytes for m in memory_per_stage(p.model, p.workload, c, p.cluster.device)) <= p.hbm_cap_bytes

    lo, hi = 1, p.model.layers - 1
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def _fewest_answer(p: Problem, fit: Problem, best_s: float, inner, deadline: float, solve):
    """``(stats, answer)``: the search of ``fit`` (``p`` or ``p`` with more headroom) where each plan offloads the
    fewest layers that make it fit, and, where its optimum beats ``best_s``, the search of ``p`` with that
    optimum's layer count stated (``None`` otherwise)."""
    r = solve(
        with_offload(fit, FEWEST_FITTING),
        replace(
            inner,
            rescore=False,
            explain=False,
            memory_margin=0.0,
            top_k=1,
            time_limit_s=max(0.05, deadline - time.perf_counter()),
        ),
    )
    stats = {
        "best_s": r.objective_s if r.plans else None,
        "status": r.status,
        "chosen": None,
        "without_s": None if math.isinf(best_s) else best_s,
    }
    n = fewest_layers(fit, r.best.config) if r.plans and r.objective_s < best_s else None
    if n is None or time.perf_counter() >= deadline:
        return stats, None
    out = solve(with_offload(p, n), replace(inner, time_limit_s=deadline - time.perf_counter()))
    if not out.plans or out.objective_s >= best_s:
        return stats, None
    stats["chosen"] = n
    if r.status != OPTIMAL and out.status == OPTIMAL:
        out.status, out.bound_s = FEASIBLE, None
    return stats, out


def better(p: Problem, res: SolveResult, options, solve, start: float, deadline: float) -> SolveResult:
    """``res``, or the answer with activation offload where it is faster (module docstring):
    ``stats.activation_offload`` says what was looked at. Runs only with ``options.act_offload``, on a problem
    :func:`offerable`, when ``res`` is a ``pp = 1`` plan that recomputes or no plan fits (not a refused pin).

    The fewest layers that fit leave a plan at the edge of the HBM: where the answer is at risk (within the memory
    model's measured margin, ``search.solve._keep_margin``), the layer count that keeps the margin is searched too
    and answers when its op-graph time is within the re-score band."""
    if not options.act_offload or not offerable(p) or res.stats.refused is not None:
        return res
    if res.plans:
        c = res.best.config
        if c.pp != 1 or c.recompute == "none":
            return res
        best_s = res.objective_s
    elif res.status == INFEASIBLE:
        best_s = math.inf
    else:
        return res
    inner = replace(options, offload=False, act_offload=False, pinned_tight=False)
    stats, out = _fewest_answer(p, p, best_s, inner, deadline, solve)
    if out is not None and out.margin_kept is False and out.graph_objective_s is not None:
        kept, alt = _fewest_answer(p, p.with_margin(options.memory_margin), best_s, inner, deadline, solve)
        if alt is not None and alt.margin_kept and alt.keeps_margin_for(out, options.band):
            alt.margin_alternative_s, kept["margin_chosen_over"] = out.graph_objective_s, stats["chosen"]
            stats, out = kept, alt
    if out is not None:
        if res.status not in (OPTIMAL, INFEASIBLE) and out.status == OPTIMAL:  # the plans without it: not proven
            out.status, out.bound_s = FEASIBLE, None
        out.stats.activation_offload = stats
        # what binds, against the user's problem (the offload's pins are the re-search's, not the user's)
        out.plans = [replace(pl, binding=tuple(binding_constraints(p, pl.choice, pl.estimate))) for pl in out.plans]
        out.time_s = time.perf_counter() - start
        return out
    res.stats.activation_offload = stats
    if stats["status"] not in (OPTIMAL, INFEASIBLE) and res.status == OPTIMAL:  # not searched to the end in time
        res.status, res.bound_s = FEASIBLE, None
    if not res.plans:
        res.explanation += (
            f"; activation CPU offload (Megatron --cpu-offloading-num-layers, up to "
            f"{p.model.layers - 1} layers, pp = 1 without recompute) does not make a plan fit either"
        )
    res.time_s = time.perf_counter() - start
    return res
