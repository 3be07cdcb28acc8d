"""The search pipeline: pins -> cost tables -> presolve -> CP-SAT -> plans re-scored by ``evaluate``.

CP-SAT proves the optimum of the fast (analytic) model. With ``rescore`` the plans whose analytic
objective lies within :data:`RESCORE_BAND` of that optimum are then scheduled by the op-graph
engine (the default engine of ``evaluate``) and the best of them under the graph is the answer;
the result keeps both objectives, so "proven optimal" still means the analytic optimum.

A space of at most :data:`SMALL_SPACE` choices (every variable pinned, or nearly) is scored
exhaustively instead: the exact optimum as fast as ``evaluate``. ``time_limit_s`` bounds the
whole search: table building, presolve, CP-SAT and the re-score.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from search.problem import Problem, Limits
>>> p = Problem(model=load_model("gpt-1.7b"), cluster=load_cluster("a100-80g").with_gpus(16),
...             workload=Workload(global_batch=64, seq_len=2048))
>>> r = solve(p, SolveOptions(top_k=2))
>>> r.status, len(r.plans), r.best.agreement < 0.005, r.plans[0].objective_s <= r.plans[1].objective_s
('OPTIMAL', 2, True, True)
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import time
from dataclasses import replace

from costmodel.physics.memory.verdict import TIGHT, memory_verdict, tight_warning
from costmodel.spec.errors import SpecError

from .act_offload_choice import better as act_offload_if_faster
from .exhaustive import Scored, all_choices
from .explain import explain_infeasible
from .interleave_check import without_interleaving
from .offload_choice import when_nothing_fits
from .options import CPSAT_MAX_CHOICES, MEMORY_TIE, RESCORE_BAND, RESCORE_MAX, SMALL_SPACE, SolveOptions
from .part import distinct, solve_small, solve_space
from .pins import check_pins, refusal
from .problem import Problem
from .rescore import build_plan, rescore
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolveResult
from .stats import SearchStats
from .tables import Tables

__all__ = [
    "CPSAT_MAX_CHOICES",
    "MEMORY_TIE",
    "RESCORE_BAND",
    "RESCORE_MAX",
    "SMALL_SPACE",
    "SolveOptions",
    "cyclic_gc_paused",
    "solve",
]


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pause Python's cyclic garbage collector for the search, restoring it after.

    Presolve fills caches with hundreds of thousands of small objects; each full collection
    walks all of them again, which cost 15-20% of the search (DeepSeek-V3 / 2048 H800: 2.3 ->
    1.9 s plain). Reference counting still frees everything acyclic as it goes; the cyclic garbage
    one search leaves (its ``Tables``, whose relaxed copy points back at it: ~90,000 objects, a
    few MB) is collected once the collector runs again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@cyclic_gc_paused()
def solve(p: Problem, options: SolveOptions = SolveOptions(), tables: Tables | None = None) -> SolveResult:
    """Best plan (and the next ``top_k - 1``) of ``p``, with status, bound and explanation.

    A pin no plan can hold gives INFEASIBLE at once, the rule it breaks as the explanation
    (:func:`search.pins.check_pins`, which ``recommend`` calls first to refuse it as an input error).
    Bucket sizes are searched with the rest in one presolve (its group bounds hold for every
    bucket size; solving each size on its own repeated every group's work: 1.4x slower).
    """
    start = time.perf_counter()
    deadline = start + options.time_limit_s
    try:
        check_pins(p)
    except SpecError as e:  # a pin no plan can hold: infeasible, and the rule is the explanation
        return SolveResult(
            INFEASIBLE, explanation=str(e), stats=SearchStats(refused=e.field), time_s=time.perf_counter() - start
        )
    tables = tables or Tables(p)
    most = options.small_space if options.presolve_bounds else -1  # no bounds asked: CP-SAT holds them all
    small = list(itertools.islice(all_choices(p), most + 1)) if most >= 0 else []
    exhaustive = 0 <= len(small) <= most
    if exhaustive:
        parts = [solve_small(p, small, tables, options)]
    else:
        parts = [solve_space(p, tables, options, deadline)]
    res = _finish(p, parts, tables, options, start, deadline, exhaustive=exhaustive)
    res = _keep_margin(p, res, options, start, deadline, tables)
    res = without_interleaving(p, res, options, solve, tables, start, deadline)  # the closed form's blind spot
    res = act_offload_if_faster(p, res, options, solve, start, deadline)  # activation CPU offload, if it wins
    res = _pinned_tight(p, res, options, start, deadline)  # the user's plan over only by the assumed allowance
    return when_nothing_fits(p, res, options, solve, start, deadline)  # optimizer CPU offload, if nothing fits


def _pinned_tight(p: Problem, res: SolveResult, options: SolveOptions, start: float, deadline: float) -> SolveResult:
    """Issue 42: a plan whose every degree the user pinned (:attr:`search.problem.Problem.degrees_pinned`) and that
    fits only without the assumed fragmentation allowance is accepted, ``tight``
    (:mod:`costmodel.physics.memory.verdict`). Only where nothing else answers (INFEASIBLE, not a refused pin, after
    the activation offload looked) is the problem solved once more with the fit tests charging no allowance
    (:attr:`~search.problem.Problem.fragmentation_allowance` False; the offloads the user did not state not offered);
    its answer, if any, is the result with ``memory_verdict`` ``tight`` and ``memory_warning`` the one line that says
    so. It comes before the optimizer CPU offload (:func:`search.offload_choice.when_nothing_fits`): the plan the user
    pinned, as pinned and with the warning, rather than one with an offload they did not ask for (Megatron-Bridge's
    Llama 3.1 405B GB200 recipe, row 278, ran without one). A free search (some degree left to the search) never takes this path: it would exploit the
    optimism of leaving out an allowance whose size is assumed."""
    if (
        not options.pinned_tight
        or res.status != INFEASIBLE
        or res.plans
        or res.stats.refused is not None
        or not p.fragmentation_allowance
        or not p.degrees_pinned
        or time.perf_counter() >= deadline
    ):
        return res
    loose = replace(p, fragmentation_allowance=False)
    left = max(0.05, deadline - time.perf_counter())
    alt = solve(loose, replace(options, time_limit_s=left, offload=False, act_offload=False, explain=False))
    if not alt.plans:
        res.time_s = time.perf_counter() - start
        return res
    est = alt.best.reported
    peak, without = est.peak_memory_bytes, est.peak_memory_without_allowance_bytes
    if memory_verdict(peak, without, p.hbm_cap_bytes) != TIGHT:  # tables and evaluate disagree: not this path's
        res.time_s = time.perf_counter() - start
        return res
    alt.memory_warning = tight_warning(peak, without, p.hbm_cap_bytes)
    alt.time_s = time.perf_counter() - start
    return alt


def _keep_margin(
    p: Problem, res: SolveResult, options: SolveOptions, start: float, deadline: float, tables: Tables
) -> SolveResult:
    """Issue 24 item 6: when the re-scored answer is at risk (its peak within the memory model's
    measured margin of the usable HBM, :mod:`costmodel.trust.memory_margin`) and no re-scored plan kept the
    margin, the same problem is solved once more with the margin as a hard limit; its answer is taken
    when it is within ``margin_cost`` of the at-risk one (the re-score band by default: a gain the model cannot
    tell from its own engines' disagreement does not buy an out-of-memory risk; the entry points' default,
    issue 42 item 5: always). Either way the result records the other: ``margin_alternative_s`` is the op-graph
    step time of the plan not chosen, ``margin_alternative`` the plan."""
    if not options.rescore or not options.memory_margin or res.margin_kept is not False or not res.plans:
        return res
    if res.status != OPTIMAL or time.perf_counter() >= deadline:  # no time left to look: report it at risk
        return res
    lean = p.with_margin(options.memory_margin)
    alt = solve(
        lean,
        replace(
            options,
            memory_margin=0.0,
            act_offload=False,
            pinned_tight=False,
            interleave_check=False,  # the answer this solve chooses is checked once, after it
            time_limit_s=max(0.05, deadline - time.perf_counter()),
        ),
        tables.with_problem(lean),
    )  # the times already tabled, the fits anew
    if not alt.plans or alt.graph_objective_s is None:
        return res
    if alt.keeps_margin_for(res, options.margin_cost_or_band):
        alt.memory_margin, alt.margin_kept = options.memory_margin, True
        alt.margin_alternative_s, alt.margin_alternative = res.graph_objective_s, res.best
        alt.time_s = time.perf_counter() - start
        return alt
    res.margin_alternative_s, res.margin_alternative = alt.graph_objective_s, alt.best
    res.time_s = time.perf_counter() - start
    return res


def _finish(
    p: Problem,
    parts: list,
    tables: Tables,
    options: SolveOptions,
    start: float,
    deadline: float,
    exhaustive: bool = False,
) -> SolveResult:
    """Merge the parts, build and re-score the plans, explain an empty answer."""
    stats = SearchStats.merged([pt.stats for pt in parts])
    if exhaustive:
        stats.exhaustive = True
    solver_s = sum(pt.solver_s for pt in parts)
    found = sorted({(sc.objective, sc.choice, sc.split) for pt in parts for sc in pt.found})
    if not found:
        unknown = any(pt.status == UNKNOWN for pt in parts)
        res = SolveResult(UNKNOWN if unknown else INFEASIBLE, stats=stats, solver_time_s=solver_s)
        if unknown:
            res.explanation = (
                f"time limit {options.time_limit_s:g} s reached before any plan was found "
                "(raise --time-limit, or pin more variables)"
            )
        elif options.explain:
            why = refusal(p)
            if why is not None:
                res.explanation = f"no plan holds the pinned values together: {why}"
            else:
                res.explanation, res.changes = explain_infeasible(p, deadline=max(deadline, time.perf_counter() + 2))
        res.time_s = time.perf_counter() - start
        return res
    proven = all(pt.status in (OPTIMAL, INFEASIBLE) for pt in parts)
    status = OPTIMAL if proven else FEASIBLE
    bounds = [pt.bound for pt in parts if pt.status != INFEASIBLE]
    bound = None if any(b is None for b in bounds) else min(bounds)
    optimum = found[0][0]
    res = SolveResult(status, stats=stats, solver_time_s=solver_s)
    res.objective_s = optimum * tables.res_s
    res.bound_s = (
        res.objective_s
        if status == OPTIMAL
        else (None if bound is None or bound == math.inf else min(bound, optimum) * tables.res_s)
    )
    top = distinct([Scored(*f) for f in found], options.top_k)
    graphs: dict = {}  # Scored -> its op-graph estimate, from the re-score
    if options.rescore:
        res.band = options.band
        top = rescore(p, parts, top, optimum, options, deadline, res, graphs)
    for sc in top:
        res.plans.append(build_plan(p, sc, tables.res_s, graphs.get(sc)))
    res.time_s = time.perf_counter() - start
    return res
