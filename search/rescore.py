"""The plans built and re-scored: each plan's ``evaluate`` (analytic, what the tables encode, and the op graph), and
the op-graph re-score of the plans within the band of the analytic optimum that chooses the answer."""

from __future__ import annotations

import time

from costmodel.api import evaluate
from costmodel.trust.memory_margin import at_risk

from .exhaustive import Scored
from .options import SolveOptions
from .part import distinct
from .problem import Problem
from .result import Plan, SolveResult, binding_constraints, config_of


def build_plan(p: Problem, sc: Scored, res_s: float, graph=None) -> Plan:
    cfg = config_of(sc.choice, sc.split, p.limits.flash_attention, p.limits.fused_elementwise)
    est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")  # what the tables encode
    if graph is None:  # the op-graph schedule (the re-score has it already)
        graph = evaluate(p.model, p.cluster, p.workload, cfg, engine="graph")
    return Plan(
        sc.choice,
        sc.split,
        cfg,
        sc.objective * res_s,
        est,
        tuple(binding_constraints(p, sc.choice, est)),
        graph_step_time_s=graph.step_time_s,
        graph_overlap=dict(graph.overlap),
        graph_estimate=graph,
    )


def rescore(
    p: Problem,
    parts: list,
    top: list,
    optimum: int,
    options: SolveOptions,
    deadline: float,
    res: SolveResult,
    graphs: dict,
) -> list:
    """The plans within the band of ``optimum`` (at most ``rescore_max``, best analytic first),
    scheduled by the op-graph engine while time is left (the analytic best always); the answer
    is the best under the graph, then the rest of ``top`` by graph time, then by objective (the
    op-graph estimates are left in ``graphs``, for the plans)."""
    limit = optimum * (1 + options.band)
    pool = sorted(
        {(sc.objective, sc.choice, sc.split) for pt in parts for sc in pt.near + pt.found if sc.objective <= limit}
    )
    pool = distinct(top[:1] + [Scored(*f) for f in pool], options.rescore_max)  # the analytic best first
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
    res.stats.rescore_s = time.perf_counter() - t0
    fastest = ranked[0]
    # issue 24 item 6: a gain inside the band does not buy a plan within the memory model's measured
    # error of the HBM; then the choice is among the plans that keep the margin, if any is that close
    usable = p.hbm_cap_bytes
    safe = [
        sc
        for sc in ranked
        if graph_s[sc] <= graph_s[fastest] * (1 + options.band)
        and not at_risk(graphs[sc].peak_memory_bytes, usable, options.memory_margin)
    ]
    pool = safe if safe else ranked
    tie = [sc for sc in pool if graph_s[sc] <= graph_s[pool[0]] * (1 + options.memory_tie)]
    chosen = min(tie, key=lambda sc: (graphs[sc].peak_memory_bytes, graph_s[sc], sc.objective, sc.choice, sc.split))
    ranked = [chosen] + [sc for sc in ranked if sc is not chosen]
    res.rescored = len(graph_s)
    res.rescored_graph_s = tuple(graph_s[sc] for sc in ranked)
    res.memory_tie = options.memory_tie
    res.memory_margin = options.memory_margin
    res.margin_cost = options.margin_cost_or_band
    res.margin_kept = not at_risk(graphs[chosen].peak_memory_bytes, usable, options.memory_margin)
    res.fastest_graph_s = graph_s[fastest]
    res.graph_objective_s = graph_s[chosen]
    res.analytic_best_graph_s = graph_s[pool[0]]
    seen = {sc.choice for sc in ranked}
    rest = [sc for sc in top if sc.choice not in seen]
    return (ranked + rest)[: options.top_k]
