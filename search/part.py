"""One search space solved into a :class:`Part`, in integer ticks before plans are built: a small space scored
exhaustively, a large one by presolve and CP-SAT (with the near plans the re-score takes)."""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ortools.sat.python import cp_model

from .cpsat import Space, Vars, build_model, tie_break
from .exhaustive import Scored, best_splits
from .options import CPSAT_MAX_CHOICES, SolveOptions
from .presolve import presolve
from .problem import Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN
from .stats import SearchStats
from .tables import Tables


@dataclass
class Part:
    """The answer over one sub-space, in integer ticks, before plans are built."""

    status: str
    found: list = field(default_factory=list)  # Scored, best first (the top_k)
    near: list = field(default_factory=list)  # Scored within the band of the part's optimum
    bound: float | None = None  # ticks below every plan of the part (inf: none fits)
    stats: SearchStats = field(default_factory=SearchStats)
    solver_s: float = 0.0


def solver_for(options: SolveOptions, time_left_s: float) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(0.05, time_left_s)
    s.parameters.num_workers = options.workers
    s.parameters.random_seed = options.seed
    # OR-Tools' own SIGINT handler outlives the solve and leaves SIG_DFL behind: the next Ctrl-C then
    # kills the process silently (exit 130, no cleanup: `planner sweep` could not say what it wrote)
    s.parameters.catch_sigint_signal = False
    return s


def solve_small(p: Problem, choices: list, tables: Tables, options: SolveOptions) -> Part:
    """Every choice of a small space (a fully pinned plan: one) with its best splits: exact."""
    t0 = time.perf_counter()
    scored = []
    for c in choices:
        scored += best_splits(tables.stage_table(c), p.model.layers, max(options.top_k, 1))
    scored.sort(key=lambda sc: (sc.objective, sc.choice, sc.split))
    stats = SearchStats(space=len(choices))  # then set in the order the JSON has them
    stats.model_choices = stats.kept = stats.probed = len(choices)
    stats.exhaustive_s = time.perf_counter() - t0
    if not scored:
        return Part(INFEASIBLE, bound=math.inf, stats=stats)
    return Part(OPTIMAL, found=distinct(scored, options.top_k), near=scored, bound=scored[0].objective, stats=stats)


def distinct(scored: list, k: int) -> list:
    """The ``k`` best, one split per choice."""
    out, seen = [], set()
    for sc in scored:
        if sc.choice not in seen:
            seen.add(sc.choice)
            out.append(sc)
        if len(out) == k:
            break
    return out


def solve_space(p: Problem, tables: Tables, options: SolveOptions, deadline: float) -> Part:
    """Presolve and CP-SAT over ``p``, stopping at ``deadline``."""
    slack = options.band if options.rescore else 0.0
    probes = None if options.probes is None else max(options.probes, 2 * options.top_k)
    pre = presolve(
        p,
        tables,
        options.top_k,
        probes=probes,
        bounds=options.presolve_bounds,
        slack=slack,
        deadline=deadline,
        cutoff_s=options.cutoff_s,
    )
    stats = SearchStats.of_presolve(pre.counts, pre.time_s, tables.res_s)
    if pre.timed_out:
        stats.timed_out = "presolve"
    unexplored = math.inf if not pre.timed_out else pre.unexplored_ticks  # None: unknown
    if not pre.choices:
        if pre.incumbents:  # timed out with plans in hand
            return Part(
                FEASIBLE,
                found=pre.incumbents[: options.top_k],
                near=list(pre.incumbents),
                bound=unexplored,
                stats=stats,
            )
        return Part(INFEASIBLE if not pre.timed_out else UNKNOWN, bound=unexplored, stats=stats)
    spent = pre.timed_out and time.perf_counter() >= deadline  # no time left to build and solve a model
    if len(pre.choices) > CPSAT_MAX_CHOICES or (spent and pre.incumbents):  # presolve's best
        stats.model_choices = 0
        if not spent:
            stats.too_many_choices = len(pre.choices)
        bound = min(pre.lower_ticks[c] for c in pre.choices)
        if pre.timed_out:
            bound = None if unexplored is None else min(bound, unexplored)
        if pre.incumbents:
            return Part(
                FEASIBLE, found=pre.incumbents[: options.top_k], near=list(pre.incumbents), bound=bound, stats=stats
            )
        return Part(UNKNOWN, bound=bound, stats=stats)
    hint = (pre.incumbents[0].choice, pre.incumbents[0].split) if pre.incumbents else None
    space = Space(p.model.layers, {c: tables.stage_table(c) for c in pre.choices}, pre.lower_ticks, hint)
    model, v = build_model(space, options)
    stats.model_choices = len(space.tables)
    found, solver_s = [], 0.0
    status, bound = UNKNOWN, None
    for i in range(options.top_k):
        solver = solver_for(options, deadline - time.perf_counter())
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
            tb = solver_for(options, max(1.0, deadline - time.perf_counter()))
            if tb.solve(tb_model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                choice, split, _ = tb_vars.extract(tb)
        found.append(Scored(obj, choice, split))
        for c in _twins(space, choice):  # next: a choice with different costs
            model.add(v.x[c] == 0)
    if not found and pre.incumbents:  # CP-SAT ran out of time: fall back on presolve's incumbents
        found = pre.incumbents[: options.top_k]
        status = FEASIBLE
    elif status != OPTIMAL and pre.incumbents and pre.incumbents[0].objective < found[0].objective:
        # CP-SAT stopped short of what presolve already holds: keep the better plans
        found = sorted({(sc.objective, sc.choice, sc.split) for sc in found + pre.incumbents})
        found = [Scored(*f) for f in found][: options.top_k]
    if not found:
        proven = status == INFEASIBLE and not pre.timed_out
        return Part(INFEASIBLE if proven else UNKNOWN, bound=unexplored, stats=stats, solver_s=solver_s)
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
        stats.near_s = time.perf_counter() - t0
    return Part(status, found=found, near=near, bound=bound, stats=stats, solver_s=solver_s)


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


def _twins(space: Space, choice) -> list:
    """``choice`` and the choices with the same cost tables (e.g. ZeRO-1 and ZeRO-2, which differ
    in memory only): the same plan to the objective, so not an alternative."""
    t = space.tables[choice]
    same = []
    for c, u in space.tables.items():
        if (
            c.shape == choice.shape
            and u.kinds == t.kinds
            and all(
                np.array_equal(getattr(u, a)[k], getattr(t, a)[k])
                for a in ("time_ticks", "sum_ticks", "dp_ticks", "opt_ticks")
                for k in t.kinds
            )
            and (u.stall_ticks is None) == (t.stall_ticks is None)
            and (t.stall_ticks is None or all(np.array_equal(u.stall_ticks[k], t.stall_ticks[k]) for k in t.kinds))
        ):
            same.append(c)
    return same


def _cloned_vars(v, model):
    """``v`` pointing at the same variable indices of a cloned model."""
    get = model.get_bool_var_from_proto_index
    geti = model.get_int_var_from_proto_index
    out = Vars(
        {c: get(x.index) for c, x in v.x.items()},
        {pos: {n: get(y.index) for n, y in ys.items()} for pos, ys in v.y.items()},
        {pos: geti(n.index) for pos, n in v.n.items()},
        {k: geti(t.index) for k, t in v.terms.items()},
        geti(v.objective.index),
        v.upper,
    )
    return out
