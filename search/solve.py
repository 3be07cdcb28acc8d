"""The search pipeline: cost tables -> presolve -> CP-SAT -> plans re-scored by ``evaluate``.

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

import time
from dataclasses import dataclass, replace

import numpy as np

from ortools.sat.python import cp_model

from costmodel.estimate import evaluate

from .cpsat import Space, build_model, tie_break
from .explain import explain_infeasible
from .presolve import presolve
from .problem import Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Plan, SolveResult, binding_constraints, config_of
from .tables import Tables


@dataclass(frozen=True, kw_only=True)
class SolveOptions:
    """Solver options, all explicit (STYLE.md item 11).

    time_limit_s : wall-clock budget of the CP-SAT solves (presolve is not interrupted).
    workers : CP-SAT search workers. seed : CP-SAT random seed; with an optimal answer the plan
        is also canonicalised (ties broken by a fixed order), so it does not depend on workers.
    top_k : plans to return: the best and the next best distinct choices (no-good cuts).
    presolve_bounds : discard choices by lower bound before CP-SAT (dominance and memory
        screens always apply); off, CP-SAT holds every choice that can fit.
    probes : choices presolve solves exactly, best bound first, for the incumbents whose
        objective sets the pruning threshold (more probes: fewer choices left to CP-SAT).
    """

    time_limit_s: float = 10.0
    workers: int = 2
    seed: int = 0
    top_k: int = 1
    presolve_bounds: bool = True
    probes: int = 16
    explain: bool = True


def _solver(options: SolveOptions, time_left_s: float) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(0.05, time_left_s)
    s.parameters.num_workers = options.workers
    s.parameters.random_seed = options.seed
    return s


def solve(p: Problem, options: SolveOptions = SolveOptions(), tables: Tables | None = None) -> SolveResult:
    """Best plan (and the next ``top_k - 1``) of ``p``, with status, bound and explanation.

    With several bucket sizes to choose from, each is solved on its own and the answers merged:
    exact (the optimum is the best of the per-bucket optima, the bound the least of their
    bounds), and each sub-space keeps presolve's dominance and bounds tight.
    """
    buckets = sorted(set(float(b) for b in p.limits.bucket_mb_options))
    if tables is None and "bucket_mb" not in p.limits.fixed and len(buckets) > 1:
        start = time.perf_counter()
        subs = [solve(replace(p, limits=replace(p.limits, bucket_mb_options=(b,))), options) for b in buckets]
        return _merge(subs, options.top_k, time.perf_counter() - start)
    start = time.perf_counter()
    tables = tables or Tables(p)
    pre = presolve(p, tables, options.top_k, probes=max(options.probes, 2 * options.top_k),
                   bounds=options.presolve_bounds)
    stats = dict(pre.counts, presolve_s=pre.time_s, resolution_s=tables.res_s)
    if not pre.choices:
        res = SolveResult(INFEASIBLE, time_s=time.perf_counter() - start, stats=stats)
        if options.explain:
            res.explanation, res.changes = explain_infeasible(p)
        res.time_s = time.perf_counter() - start
        return res
    hint = (pre.incumbents[0].choice, pre.incumbents[0].split) if pre.incumbents else None
    space = Space(p.model.layers, {c: tables.stage_table(c) for c in pre.choices}, pre.lower_ticks, hint)
    model, v = build_model(space, options)
    stats["model_choices"] = len(space.tables)
    found, solver_s = [], 0.0
    status, bound = UNKNOWN, None
    deadline = start + options.time_limit_s + pre.time_s
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
        found.append((obj, choice, split))
        for c in _twins(space, choice):  # next: a choice with different costs
            model.add(v.x[c] == 0)
    if not found and pre.incumbents:  # CP-SAT ran out of time: fall back on presolve's incumbents
        found = [(s.objective, s.choice, s.split) for s in pre.incumbents[:options.top_k]]
        status = FEASIBLE
    res = SolveResult(status if found else INFEASIBLE, stats=stats, solver_time_s=solver_s)
    for obj, choice, split in found:
        cfg = config_of(choice, split, p.limits.flash_attention)
        est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")  # what the tables encode
        graph = evaluate(p.model, p.cluster, p.workload, cfg, engine="graph")  # the op-graph schedule
        res.plans.append(Plan(choice, split, cfg, obj * tables.res_s, est, tuple(binding_constraints(p, choice, est)),
                              graph_step_time_s=graph.step_time_s, graph_overlap=dict(graph.overlap)))
    if found:
        res.objective_s = found[0][0] * tables.res_s
        res.bound_s = (bound if bound is not None else min(pre.lower_ticks.values())) * tables.res_s
        if status == OPTIMAL:
            res.bound_s = res.objective_s
    elif options.explain:
        res.explanation, res.changes = explain_infeasible(p)
    res.time_s = time.perf_counter() - start
    return res


def _merge(subs: list, top_k: int, time_s: float) -> SolveResult:
    """One answer from per-bucket answers: best plans first (a plan whose cost does not depend on
    the bucket appears once), status OPTIMAL only if every part was proven, bound the least."""
    solved = [r for r in subs if r.plans]
    if not solved:
        subs[0].time_s = time_s
        return subs[0]
    plans, seen = [], set()
    for plan in sorted((pl for r in solved for pl in r.plans), key=lambda pl: pl.objective_s):
        no_dp = not plan.estimate.comm_link_s.get("dp") and not plan.estimate.comm_link_s.get("zero")
        key = replace(plan.config, bucket_bytes=0) if no_dp else plan.config  # the bucket changes nothing
        if key in seen:
            continue
        seen.add(key)
        plans.append(plan)
    statuses = {r.status for r in subs if r.status != INFEASIBLE}
    status = OPTIMAL if statuses == {OPTIMAL} else FEASIBLE
    stats = {}
    for r in subs:
        for k, v in r.stats.items():
            if isinstance(v, (int, float)) and k != "resolution_s":
                stats[k] = stats.get(k, 0) + v
            else:
                stats.setdefault(k, v)
    bounds = [r.bound_s for r in solved if r.bound_s is not None]
    res = SolveResult(status, plans=plans[:top_k], objective_s=plans[0].objective_s,
                      bound_s=min(bounds) if bounds else None, time_s=time_s,
                      solver_time_s=sum(r.solver_time_s for r in subs), stats=stats)
    if status == OPTIMAL:
        res.bound_s = res.objective_s if res.bound_s is None else min(res.bound_s, res.objective_s)
    return res


def _twins(space: Space, choice) -> list:
    """``choice`` and the choices with the same cost tables (e.g. ZeRO-1 and ZeRO-2, which differ
    in memory only): the same plan to the objective, so not an alternative."""
    t = space.tables[choice]
    same = []
    for c, u in space.tables.items():
        if c.shape == choice.shape and u.kinds == t.kinds and all(
                np.array_equal(getattr(u, a)[k], getattr(t, a)[k])
                for a in ("time_ticks", "dp_ticks", "opt_ticks") for k in t.kinds):
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
