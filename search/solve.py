"""The search pipeline: pins -> cost tables -> presolve -> CP-SAT -> plans re-scored by ``evaluate``.

CP-SAT proves the optimum of the fast (analytic) model. With ``rescore`` the plans whose analytic
objective lies within :data:`RESCORE_BAND` of that optimum are then scheduled by the op-graph
engine (the default engine of ``evaluate``) and the best of them under the graph is the answer;
the result keeps both objectives, so "proven optimal" still means the analytic optimum.

A space of at most :data:`SMALL_SPACE` choices (every variable pinned, or nearly) is scored
exhaustively instead: the exact optimum as fast as ``evaluate``. ``time_limit_s`` bounds the
whole search: table building, presolve, CP-SAT and the re-score.

>>> from costmodel.presets import load_model, load_cluster
>>> from costmodel.specs import Workload
>>> from search.problem import Problem, Limits
>>> p = Problem(model=load_model("gpt-1.7b"), cluster=load_cluster("a100-80g").with_gpus(16),
...             workload=Workload(global_batch=64, seq_len=2048))
>>> r = solve(p, SolveOptions(top_k=2))
>>> r.status, len(r.plans), r.best.agreement < 0.005, r.plans[0].objective_s <= r.plans[1].objective_s
('OPTIMAL', 2, True, True)
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ortools.sat.python import cp_model

from costmodel.errors import SpecError
from costmodel.estimate import evaluate
from costmodel.memory_margin import MEMORY_MARGIN, at_risk
from costmodel.uncertainty import NOISE_SD

from .cpsat import Space, build_model, tie_break
from .exhaustive import Scored, all_choices, best_splits
from .explain import explain_infeasible
from .act_offload_choice import better as act_offload_if_faster
from .offload_choice import when_nothing_fits
from .pins import check_pins, refusal
from .presolve import presolve
from .problem import Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Plan, SolveResult, binding_constraints, config_of
from .tables import Tables

#: The analytic-vs-graph error band: plans whose analytic objective is within this fraction of the
#: analytic optimum are re-scored by the op-graph engine. It stands for the measured p90 relative
#: disagreement of the two engines (``benchmarks/engine_agreement.py``: 1.88%, RESULTS section 2).
RESCORE_BAND = 0.02
#: Among the re-scored plans, those whose op-graph step time is within this fraction of the fastest
#: are one answer to the model: the one with the least peak memory is chosen (issue 24: the fastest
#: sat at 97-98% of HBM where a leaner plan cost well under 1%). It is the run-to-run variation of
#: a measured step time the bands floor on (``costmodel.uncertainty.NOISE_SD``, 1%): a gain below
#: it cannot be seen on the cluster, the memory it costs can (an out-of-memory restart).
MEMORY_TIE = NOISE_SD
#: at most this many plans are re-scored by the op-graph engine (each takes ~0.05-0.5 s)
RESCORE_MAX = 20
#: a space of at most this many choices is scored exhaustively, without presolve or CP-SAT
SMALL_SPACE = 64
#: presolve leaving more choices than this (weak bounds, e.g. fine-grained MoE) answers with its
#: best incumbents (FEASIBLE, with the gap) instead of a CP-SAT model it could not solve in time
CPSAT_MAX_CHOICES = 20000


@dataclass(frozen=True, kw_only=True)
class SolveOptions:
    """Solver options, all explicit (STYLE.md item 11).

    time_limit_s : wall-clock budget of the whole search (tables, presolve, CP-SAT, re-score);
        past it the best plan found so far is returned (FEASIBLE, with its gap).
    workers : CP-SAT search workers. seed : CP-SAT random seed; with an optimal answer the plan
        is also canonicalised (ties broken by a fixed order), so it does not depend on workers.
    top_k : plans to return: the best and the next best distinct choices (no-good cuts).
    presolve_bounds : discard choices by lower bound before CP-SAT (dominance and memory
        screens always apply); off, CP-SAT holds every choice that can fit.
    probes : at most this many choices presolve solves exactly, best bound first, for the
        incumbents whose objective sets the pruning threshold (None: no cap, a best-first branch
        and bound; a cap leaves more choices to CP-SAT).
    rescore : re-score the plans within ``band`` of the analytic optimum with the op-graph engine
        (at most ``rescore_max``) and answer the best under it (``recommend`` does): of those within
        ``memory_tie`` of the fastest op-graph time, the one with the least peak memory (0: the fastest).
    memory_margin : the memory model's measured margin (:mod:`costmodel.memory_margin`): with
        ``rescore``, when the fastest re-scored plan is above it (at risk) and a plan that keeps it is
        within ``band`` of the fastest op-graph time, the answer is chosen among those that keep it
        (0: no preference). The fit test stays HBM less the headroom.
    small_space : a space of at most this many choices is scored exhaustively (exact, no presolve
        or CP-SAT); -1: never. Off too without ``presolve_bounds`` (then CP-SAT holds every choice).
    offload : when no plan fits, search again with optimizer CPU offload (:mod:`search.offload_choice`);
        off for ``evaluate``'s completion of a stated plan (its offload is what the user states).
    act_offload : when the answer is a ``pp = 1`` plan that recomputes, or none fits, look for a faster one with
        activation CPU offload (:mod:`search.act_offload_choice`); off for ``evaluate``'s completion, as ``offload``.
    """

    time_limit_s: float = 10.0
    workers: int = 2
    seed: int = 0
    top_k: int = 1
    presolve_bounds: bool = True
    probes: int | None = None
    explain: bool = True
    rescore: bool = False
    band: float = RESCORE_BAND
    memory_tie: float = MEMORY_TIE
    memory_margin: float = MEMORY_MARGIN
    rescore_max: int = RESCORE_MAX
    small_space: int = SMALL_SPACE
    offload: bool = True
    act_offload: bool = True


@dataclass
class _Part:
    """The answer over one sub-space, in integer ticks, before plans are built."""

    status: str
    found: list = field(default_factory=list)  # Scored, best first (the top_k)
    near: list = field(default_factory=list)  # Scored within the band of the part's optimum
    bound: float | None = None  # ticks below every plan of the part (inf: none fits)
    stats: dict = field(default_factory=dict)
    solver_s: float = 0.0


def _solver(options: SolveOptions, time_left_s: float) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(0.05, time_left_s)
    s.parameters.num_workers = options.workers
    s.parameters.random_seed = options.seed
    # OR-Tools' own SIGINT handler outlives the solve and leaves SIG_DFL behind: the next Ctrl-C then
    # kills the process silently (exit 130, no cleanup: `planner sweep` could not say what it wrote)
    s.parameters.catch_sigint_signal = False
    return s


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
        return SolveResult(INFEASIBLE, explanation=str(e), stats={"refused": e.field},
                           time_s=time.perf_counter() - start)
    tables = tables or Tables(p)
    most = options.small_space if options.presolve_bounds else -1  # no bounds asked: CP-SAT holds them all
    small = list(itertools.islice(all_choices(p), most + 1)) if most >= 0 else []
    exhaustive = 0 <= len(small) <= most
    if exhaustive:
        parts = [_solve_small(p, small, tables, options)]
    else:
        parts = [_solve_space(p, tables, options, deadline)]
    res = _finish(p, parts, tables, options, start, deadline, exhaustive=exhaustive)
    res = _keep_margin(p, res, options, start, deadline, tables)
    res = act_offload_if_faster(p, res, options, solve, start, deadline)  # activation CPU offload, if it wins
    return when_nothing_fits(p, res, options, solve, start, deadline)  # optimizer CPU offload, if nothing fits


def _keep_margin(p: Problem, res: SolveResult, options: SolveOptions, start: float, deadline: float,
                 tables: Tables) -> SolveResult:
    """Issue 24 item 6: when the re-scored answer is at risk (its peak within the memory model's
    measured margin of the usable HBM, :mod:`costmodel.memory_margin`) and no re-scored plan kept the
    margin, the same problem is solved once more with the margin as a hard limit; its answer is taken
    when it is within the re-score band of the at-risk one (a gain the model cannot tell from its own
    engines' disagreement does not buy an out-of-memory risk). Either way the result records the
    other: ``margin_alternative_s`` is the op-graph step time of the plan not chosen."""
    if not options.rescore or not options.memory_margin or res.margin_kept is not False or not res.plans:
        return res
    if res.status != OPTIMAL or time.perf_counter() >= deadline:  # no time left to look: report it at risk
        return res
    lean = p.with_margin(options.memory_margin)
    alt = solve(lean, replace(options, memory_margin=0.0, act_offload=False, time_limit_s=max(0.05, deadline - time.perf_counter())),
                tables.with_problem(lean))  # the times already tabled, the fits anew
    if not alt.plans or alt.graph_objective_s is None:
        return res
    if alt.keeps_margin_for(res, options.band):
        alt.memory_margin, alt.margin_kept = options.memory_margin, True
        alt.margin_alternative_s = res.graph_objective_s
        alt.time_s = time.perf_counter() - start
        return alt
    res.margin_alternative_s = alt.graph_objective_s
    res.time_s = time.perf_counter() - start
    return res


def _solve_small(p: Problem, choices: list, tables: Tables, options: SolveOptions) -> _Part:
    """Every choice of a small space (a fully pinned plan: one) with its best splits: exact."""
    t0 = time.perf_counter()
    scored = []
    for c in choices:
        scored += best_splits(tables.stage_table(c), p.model.layers, max(options.top_k, 1))
    scored.sort(key=lambda sc: (sc.objective, sc.choice, sc.split))
    stats = {"space": len(choices), "model_choices": len(choices), "kept": len(choices), "probed": len(choices),
             "exhaustive_s": time.perf_counter() - t0}
    if not scored:
        return _Part(INFEASIBLE, bound=math.inf, stats=stats)
    return _Part(OPTIMAL, found=_distinct(scored, options.top_k), near=scored, bound=scored[0].objective,
                 stats=stats)


def _distinct(scored: list, k: int) -> list:
    """The ``k`` best, one split per choice."""
    out, seen = [], set()
    for sc in scored:
        if sc.choice not in seen:
            seen.add(sc.choice)
            out.append(sc)
        if len(out) == k:
            break
    return out


def _solve_space(p: Problem, tables: Tables, options: SolveOptions, deadline: float) -> _Part:
    """Presolve and CP-SAT over ``p``, stopping at ``deadline``."""
    slack = options.band if options.rescore else 0.0
    probes = None if options.probes is None else max(options.probes, 2 * options.top_k)
    pre = presolve(p, tables, options.top_k, probes=probes, bounds=options.presolve_bounds, slack=slack,
                   deadline=deadline)
    stats = dict(pre.counts, presolve_s=pre.time_s, resolution_s=tables.res_s)
    if pre.timed_out:
        stats["timed_out"] = "presolve"
    unexplored = math.inf if not pre.timed_out else pre.unexplored_ticks  # None: unknown
    if not pre.choices:
        if pre.incumbents:  # timed out with plans in hand
            return _Part(FEASIBLE, found=pre.incumbents[:options.top_k], near=list(pre.incumbents),
                         bound=unexplored, stats=stats)
        return _Part(INFEASIBLE if not pre.timed_out else UNKNOWN, bound=unexplored, stats=stats)
    spent = pre.timed_out and time.perf_counter() >= deadline  # no time left to build and solve a model
    if len(pre.choices) > CPSAT_MAX_CHOICES or (spent and pre.incumbents):  # presolve's best
        stats["model_choices"] = 0
        if not spent:
            stats["too_many_choices"] = len(pre.choices)
        bound = min(pre.lower_ticks[c] for c in pre.choices)
        if pre.timed_out:
            bound = None if unexplored is None else min(bound, unexplored)
        if pre.incumbents:
            return _Part(FEASIBLE, found=pre.incumbents[:options.top_k], near=list(pre.incumbents), bound=bound,
                         stats=stats)
        return _Part(UNKNOWN, bound=bound, stats=stats)
    hint = (pre.incumbents[0].choice, pre.incumbents[0].split) if pre.incumbents else None
    space = Space(p.model.layers, {c: tables.stage_table(c) for c in pre.choices}, pre.lower_ticks, hint)
    model, v = build_model(space, options)
    stats["model_choices"] = len(space.tables)
    found, solver_s = [], 0.0
    status, bound = UNKNOWN, None
    for i in range(options.top_k):
        solver = _solver(options, deadline - time.perf_counter())
        t0 = time.perf_counter()
        code = solver.solve(model)
        solver_s += time.perf_counter() - t0
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if i == 0:
                status = UNKNOWN if code == cp_model.UNKNOWN else INFEASIBLE
            break
        if i == 0:
            status = OPTIMAL if code == cp_model.OPTIMAL else FEASIBLE
            bound = int(solver.best_objective_bound)
        choice, split, obj = v.extract(solver)
        if code == cp_model.OPTIMAL:  # canonical among equal-cost plans
            tb_model = model.clone()
            tb_vars = _cloned_vars(v, tb_model)
            tie_break(tb_model, tb_vars, obj, p.model.layers)
            tb = _solver(options, max(1.0, deadline - time.perf_counter()))
            if tb.solve(tb_model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                choice, split, _ = tb_vars.extract(tb)
        found.append(Scored(obj, choice, split))
        for c in _twins(space, choice):  # next: a choice with different costs
            model.add(v.x[c] == 0)
    if not found and pre.incumbents:  # CP-SAT ran out of time: fall back on presolve's incumbents
        found = pre.incumbents[:options.top_k]
        status = FEASIBLE
    elif status != OPTIMAL and pre.incumbents and pre.incumbents[0].objective < found[0].objective:
        # CP-SAT stopped short of what presolve already holds: keep the better plans
        found = sorted({(sc.objective, sc.choice, sc.split) for sc in found + pre.incumbents})
        found = [Scored(*f) for f in found][:options.top_k]
    if not found:
        proven = status == INFEASIBLE and not pre.timed_out
        return _Part(INFEASIBLE if proven else UNKNOWN, bound=unexplored, stats=stats, solver_s=solver_s)
    if bound is None:
        bound = min(pre.lower_ticks[c] for c in pre.choices)
    if status == OPTIMAL:
        bound = found[0].objective
    if pre.timed_out:  # the choices presolve did not reach may hold better plans
        status = FEASIBLE
        bound = None if unexplored is None else min(bound, unexplored)
    near = list(found)
    if options.rescore:
        t0 = time.perf_counter()
        near += _near(p, tables, found[0].objective, pre, options, deadline)
        stats["near_s"] = time.perf_counter() - t0
    return _Part(status, found=found, near=near, bound=bound, stats=stats, solver_s=solver_s)


def _near(p: Problem, tables: Tables, optimum: int, pre, options: SolveOptions, deadline: float) -> list:
    """Each choice's best split whose objective is within the band of ``optimum`` (choices in
    order of their lower bound; presolve kept those whose bound allows it)."""
    limit = math.floor(optimum * (1 + options.band))
    out, objectives = [], []  # objectives: sorted, to stop once rescore_max plans beat every bound left
    for c in sorted(list(pre.choices) + list(pre.near), key=lambda c: (pre.lower_ticks[c], c)):
        if pre.lower_ticks[c] > limit or time.perf_counter() > deadline:
            break
        for sc in best_splits(tables.stage_table(c, valid_only=True), p.model.layers, 1):
            if sc.objective <= limit:
                out.append(sc)
                bisect.insort(objectives, sc.objective)
                if len(objectives) >= options.rescore_max:
                    limit = objectives[options.rescore_max - 1]
    return out


def _finish(p: Problem, parts: list, tables: Tables, options: SolveOptions, start: float, deadline: float,
            exhaustive: bool = False) -> SolveResult:
    """Merge the parts, build and re-score the plans, explain an empty answer."""
    stats = _merged_stats(parts)
    if exhaustive:
        stats["exhaustive"] = True
    solver_s = sum(pt.solver_s for pt in parts)
    found = sorted({(sc.objective, sc.choice, sc.split) for pt in parts for sc in pt.found})
    if not found:
        unknown = any(pt.status == UNKNOWN for pt in parts)
        res = SolveResult(UNKNOWN if unknown else INFEASIBLE, stats=stats, solver_time_s=solver_s)
        if unknown:
            res.explanation = (f"time limit {options.time_limit_s:g} s reached before any plan was found "
                               "(raise --time-limit, or pin more variables)")
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
    res.bound_s = res.objective_s if status == OPTIMAL else (None if bound is None or bound == math.inf
                                                             else min(bound, optimum) * tables.res_s)
    top = _distinct([Scored(*f) for f in found], options.top_k)
    graphs: dict = {}  # Scored -> its op-graph estimate, from the re-score
    if options.rescore:
        res.band = options.band
        top = _rescore(p, parts, top, optimum, options, deadline, res, graphs)
    for sc in top:
        res.plans.append(_plan(p, sc, tables.res_s, graphs.get(sc)))
    res.time_s = time.perf_counter() - start
    return res


def _plan(p: Problem, sc: Scored, res_s: float, graph=None) -> Plan:
    cfg = config_of(sc.choice, sc.split, p.limits.flash_attention, p.limits.fused_elementwise)
    est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")  # what the tables encode
    if graph is None:  # the op-graph schedule (the re-score has it already)
        graph = evaluate(p.model, p.cluster, p.workload, cfg, engine="graph")
    return Plan(sc.choice, sc.split, cfg, sc.objective * res_s, est, tuple(binding_constraints(p, sc.choice, est)),
                graph_step_time_s=graph.step_time_s, graph_overlap=dict(graph.overlap), graph_estimate=graph)


def _rescore(p: Problem, parts: list, top: list, optimum: int, options: SolveOptions, deadline: float,
             res: SolveResult, graphs: dict) -> list:
    """The plans within the band of ``optimum`` (at most ``rescore_max``, best analytic first),
    scheduled by the op-graph engine while time is left (the analytic best always); the answer
    is the best under the graph, then the rest of ``top`` by graph time, then by objective (the
    op-graph estimates are left in ``graphs``, for the plans)."""
    limit = optimum * (1 + options.band)
    pool = sorted({(sc.objective, sc.choice, sc.split) for pt in parts for sc in pt.near + pt.found
                   if sc.objective <= limit})
    pool = _distinct(top[:1] + [Scored(*f) for f in pool], options.rescore_max)  # the analytic best first
    graph_s = {}
    t0 = time.perf_counter()
    for i, sc in enumerate(pool):
        if i and time.perf_counter() > deadline:
            break
        cfg = config_of(sc.choice, sc.split, p.limits.flash_attention, p.limits.fused_elementwise)
        graphs[sc] = evaluate(p.model, p.cluster, p.workload, cfg, engine="graph")
        graph_s[sc] = graphs[sc].step_time_s
    ranked = sorted(graph_s, key=lambda sc: (graph_s[sc], sc.objective, sc.choice, sc.split))
    res.within_band = len(pool)
    res.stats["rescore_s"] = time.perf_counter() - t0
    fastest = ranked[0]
    # issue 24 item 6: a gain inside the band does not buy a plan within the memory model's measured
    # error of the HBM; then the choice is among the plans that keep the margin, if any is that close
    usable = p.hbm_cap_bytes
    safe = [sc for sc in ranked if graph_s[sc] <= graph_s[fastest] * (1 + options.band)
            and not at_risk(graphs[sc].peak_memory_bytes, usable, options.memory_margin)]
    pool = safe if safe else ranked
    tie = [sc for sc in pool if graph_s[sc] <= graph_s[pool[0]] * (1 + options.memory_tie)]
    chosen = min(tie, key=lambda sc: (graphs[sc].peak_memory_bytes, graph_s[sc], sc.objective, sc.choice, sc.split))
    ranked = [chosen] + [sc for sc in ranked if sc is not chosen]
    res.rescored = len(graph_s)
    res.rescored_graph_s = tuple(graph_s[sc] for sc in ranked)
    res.memory_tie = options.memory_tie
    res.memory_margin = options.memory_margin
    res.margin_kept = not at_risk(graphs[chosen].peak_memory_bytes, usable, options.memory_margin)
    res.fastest_graph_s = graph_s[fastest]
    res.graph_objective_s = graph_s[chosen]
    res.analytic_best_graph_s = graph_s[pool[0]]
    seen = {sc.choice for sc in ranked}
    rest = [sc for sc in top if sc.choice not in seen]
    return (ranked + rest)[:options.top_k]


def _merged_stats(parts: list) -> dict:
    stats: dict = {}
    for pt in parts:
        for k, v in pt.stats.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "resolution_s":
                stats[k] = stats.get(k, 0) + v
            else:
                stats.setdefault(k, v)
    return stats


def _twins(space: Space, choice) -> list:
    """``choice`` and the choices with the same cost tables (e.g. ZeRO-1 and ZeRO-2, which differ
    in memory only): the same plan to the objective, so not an alternative."""
    t = space.tables[choice]
    same = []
    for c, u in space.tables.items():
        if c.shape == choice.shape and u.kinds == t.kinds and all(
                np.array_equal(getattr(u, a)[k], getattr(t, a)[k])
                for a in ("time_ticks", "sum_ticks", "dp_ticks", "opt_ticks") for k in t.kinds):
            same.append(c)
    return same


def _cloned_vars(v, model):
    """``v`` pointing at the same variable indices of a cloned model."""
    from .cpsat import Vars
    get = model.get_bool_var_from_proto_index
    geti = model.get_int_var_from_proto_index
    out = Vars({c: get(x.index) for c, x in v.x.items()},
               {pos: {n: get(y.index) for n, y in ys.items()} for pos, ys in v.y.items()},
               {pos: geti(n.index) for pos, n in v.n.items()},
               {k: geti(t.index) for k, t in v.terms.items()}, geti(v.objective.index), v.upper)
    return out
