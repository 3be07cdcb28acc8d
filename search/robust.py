"""Robust plans: minimise the worst step time over scenarios of the uncertain constants.

``solve_robust(p, options)``:

1. the nominal optimum ``N`` (:func:`search.solve.solve`) and its worst step time over the
   scenarios (:func:`costmodel.trust.scenarios.scenarios`), ``R0``;
2. presolve with slack ``R0 / N - 1``: every choice whose *nominal* lower bound is at most ``R0``
   is kept. That loses no robust optimum: a choice's worst case is at least its nominal step
   time, which is at least its bound, and the nominal plan already achieves ``R0`` (the chunk
   dominance of presolve is judged on the nominal tables);
3. branch and bound over those choices in order of that bound: each choice's best split by its
   worst scenario (all splits, vectorised), until the bound exceeds the best worst case found;
4. one CP-SAT model over the choices the bound could not rule out and the stage split, with one
   cost table per scenario and the objective ``t >= T_s(choice, split)`` for every scenario
   (:mod:`search.cpsat`), which must agree (``stats.cpsat_agrees``).

The result is a :class:`~search.result.SolveResult` of the robust optimum, whose ``robust``
attribute holds, for the robust and the nominal plan, the step time in every scenario, and the
scenarios in which the top plans swap order.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from search.problem import Problem
>>> p = Problem(model=load_model("gpt-1.7b"), cluster=load_cluster("a100-80g").with_gpus(16),
...             workload=Workload(global_batch=64, seq_len=2048))
>>> r = solve_robust(p, SolveOptions(top_k=2, time_limit_s=30))
>>> r.status, r.robust["worst_s"] >= r.robust["nominal_plan"]["nominal"] * (1 - 1e-9)
('OPTIMAL', True)
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model

from costmodel.trust.scenarios import scenarios

from .bounds import Bounds
from .candidates import Split
from .cpsat import Space, build_model
from .exhaustive import Scored, split_objectives
from .presolve import presolve
from .problem import Problem
from .result import FEASIBLE, OPTIMAL, SolveResult
from .options import SolveOptions
from .part import solver_for
from .rescore import build_plan
from .solve import cyclic_gc_paused, solve
from .stats import SearchStats
from .tables import Tables

#: the CP-SAT confirmation runs when at most this many choices remain after the bound
CPSAT_MAX = 200


def scenario_times(tables: list, names: list, choice, split) -> dict:
    """Step time of ``(choice, split)`` in each scenario (the tables' closed form), by name."""
    return {n: t.stage_table(choice).step_s(split) for n, t in zip(names, tables)}


def robust_splits(tabs: list, layers: int, k: int = 1) -> list:
    """The ``k`` best splits of one choice by its worst step time over the scenarios' tables
    (every table allows the same layer counts: memory does not depend on the scenario)."""
    objs = [split_objectives(t, layers) for t in tabs]
    obj = np.max([o[0] for o in objs], axis=0)
    if not len(obj):
        return []
    nf, nm, nl = objs[0][1:]
    order = np.lexsort((nl, nm, nf, obj))[:k]
    return [Scored(int(obj[i]), tabs[0].choice, Split(int(nf[i]), int(nm[i]), int(nl[i]))) for i in order]


@cyclic_gc_paused()
def solve_robust(p: Problem, options: SolveOptions = SolveOptions()) -> SolveResult:
    """The plan with the least worst-case step time over the scenarios (see the module doc)."""
    start = time.perf_counter()
    deadline = start + options.time_limit_s
    # the nominal plan must fit: the robust search's own fit tests charge the fragmentation allowance
    nominal = solve(p, replace(options, rescore=False, pinned_tight=False, time_limit_s=options.time_limit_s / 3))
    if not nominal.plans:
        return nominal
    scen = scenarios(p.cluster)
    names = [n for n, _ in scen]
    tables = [Tables(replace(p, cluster=cl)) for _, cl in scen]
    L = p.model.layers
    nom = nominal.plans[0]
    nom_times = scenario_times(tables, names, nom.choice, nom.split)
    r0 = max(nom_times.values())
    slack = r0 / nominal.objective_s - 1 + 1e-9
    pre = presolve(p, tables[0], options.top_k, probes=options.probes, bounds=True, slack=slack, deadline=deadline)
    # a choice's worst case is at least its nominal bound and its bound in the all-pessimistic
    # scenario (Bounds.strong_lb_s of that scenario's tables)
    worst_bounds, res_s = Bounds(tables[-1]), tables[0].res_s
    lower = {}
    for c in sorted(set(pre.choices) | set(pre.near), key=lambda c: (pre.lower_ticks.get(c, 0), c)):
        lower[c] = pre.lower_ticks.get(c, 0)
        if time.perf_counter() < deadline:  # past it the nominal bound stands alone
            caps = worst_bounds.caps(c)
            if caps is not None:
                lower[c] = max(lower[c], math.floor(worst_bounds.strong_lb_s(c, caps) / res_s) - 4)
    cands = [nom.choice] + sorted((c for c in lower if c != nom.choice), key=lambda c: (lower[c], c))
    lower.setdefault(nom.choice, 0)
    # branch and bound in order of the bound (the nominal plan first: an incumbent in any case)
    found: list = []
    visited, timed_out = [], pre.timed_out
    for i, c in enumerate(cands):
        kth = sorted({sc.objective for sc in found})[: options.top_k]
        if i and len(kth) >= options.top_k and lower[c] > kth[-1]:
            break
        if time.perf_counter() > deadline and found:
            timed_out = True
            break
        visited.append(c)
        found += robust_splits([t.stage_table(c) for t in tables], L, 1)
        found.sort(key=lambda sc: (sc.objective, sc.choice, sc.split))
    res = SolveResult(
        FEASIBLE if timed_out else OPTIMAL,
        stats=SearchStats(
            robust_candidates=len(cands),
            robust_evaluated=len(visited),
            scenarios=len(names),
            presolve_s=pre.time_s,
            nominal_s=nominal.time_s,
        ),
    )
    # CP-SAT over the choices the bound could not rule out, one table per scenario, objective
    # t >= T_s for every scenario: it must agree with the branch and bound
    best_obj = found[0].objective
    close = [c for c in visited if lower.get(c, 0) <= best_obj]
    if not timed_out and len(close) <= CPSAT_MAX:
        space = Space(
            L,
            {c: tables[0].stage_table(c) for c in close},
            lower,
            (found[0].choice, found[0].split),
            [{c: t.stage_table(c) for c in close} for t in tables[1:]],
        )
        model, v = build_model(space, options)
        solver = solver_for(options, max(1.0, deadline - time.perf_counter()))
        code = solver.solve(model)
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            res.stats.cpsat_objective_ticks = int(solver.objective_value)
            res.stats.cpsat_agrees = int(solver.objective_value) == best_obj
            res.solver_time_s = solver.wall_time
    top = []
    for sc in found:
        if sc.choice not in {t.choice for t in top}:
            top.append(sc)
        if len(top) == options.top_k:
            break
    for sc in top:
        res.plans.append(build_plan(p, sc, tables[0].res_s))
    best = res.plans[0]
    res.objective_s = best_obj * tables[0].res_s
    res.bound_s = res.objective_s if res.status == OPTIMAL else None
    rob_times = scenario_times(tables, names, best.choice, best.split)
    tops = [scenario_times(tables, names, pl.choice, pl.split) for pl in res.plans]
    swaps = [
        n
        for n in names
        if len(tops) > 1 and sorted(range(len(tops)), key=lambda i: tops[i][n]) != list(range(len(tops)))
    ]
    res.robust = {
        "scenarios": names,
        "worst_s": max(rob_times.values()),
        "robust_plan": rob_times,
        "nominal_plan": nom_times,
        "nominal_config": nom.config.to_dict(),
        "same_as_nominal": best.choice == nom.choice and best.split == nom.split,
        "top_order_swaps_in": swaps,
        "tops": tops,
    }
    res.time_s = time.perf_counter() - start
    return res
