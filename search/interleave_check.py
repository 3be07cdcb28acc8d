"""The interleaved closed form's blind spot, checked where it shows: an answer with ``vp > 1`` that the op graph
times more than the re-score band above its analytic objective is compared with the best plan without
interleaving, and the faster of the two under the op graph answers.

The search's objective prices a pipeline by :func:`costmodel.compose.step.pipeline_s`, which sees a stage through
the sum of its model chunks. Megatron's interleaved order pairs each chunk's forward with another chunk's backward,
so unequal chunks within a stage stall its neighbours, which the sum cannot show
(:func:`costmodel.engines.graph.pipeline.simulate` schedules every chunk: ``p = 8, v = 4, m = 64`` with chunks 1.5 /
0.5 / 1 / 1 on every stage runs 12.2% above the closed form; ``benchmarks/notes/2026-12-06-answer-vs-published-and-
speculation.md``). A MoE model has such chunks by construction (dense first layers, the MTP module and the LM head
on the last chunk), so the search can rank a deep interleave first on an optimism of 10-20% that the re-score band
(2%, the engines' measured disagreement elsewhere) never reaches past: DeepSeek-V3 / 256 B200 answered TP2 PP8 VP4
at 8.23 s analytic, 9.80 s op graph, while the best plan without interleaving schedules at 9.03 s.

Without interleaving (``vp = 1``) the closed form is exact when the last stage is the slowest or the stages are
equal and above the schedule otherwise (:mod:`costmodel.compose.step`), so its optimum is a plan the blind spot
cannot flatter. The check solves the problem once more with ``vp_max = 1`` and the answer's TP, CP and EP pinned
(the layers as the answer shards them, whose times the closed form gets right: the pipeline, its depth, DP,
micro-batch, split, recompute and ZeRO are chosen again; the times and bounds already tabled), looking only for
plans whose analytic objective is within the band of the answer's op-graph time (a cutoff that ends the search at
once where none is that fast), and answers with that plan when the op graph times it faster than the interleaved
answer. DeepSeek-V3 / 1,152 GB200: 0.15 s (a free search at ``vp = 1`` took 3-4 s).

It runs only where the blind spot is seen: the answer interleaves, its op-graph time is more than ``band`` above its
analytic objective, ``vp`` is not pinned and time is left; once per search (the margin solve's answer is checked by
the search that runs it). A ``vp`` between 1 and the answer's is not searched: its closed form has the same blind
spot.
"""

from __future__ import annotations

import time
from dataclasses import replace

from .options import SolveOptions
from .problem import Problem
from .result import SolveResult, binding_constraints
from .tables import Tables

#: plans without interleaving the check re-scores at most (best analytic first): their closed form is exact or above
#: the schedule, so the analytic order holds but for the engines' disagreement (each re-score is 0.05-0.5 s)
FLAT_RESCORED = 4


def seen(res: SolveResult, options: SolveOptions) -> float | None:
    """How far above its analytic objective the op graph times ``res``'s interleaved answer (a fraction), when that
    is more than ``options.band``; ``None`` otherwise (no answer, not interleaved, not re-scored, or within the band)."""
    if (
        not (options.rescore and options.interleave_check)
        or not res.plans
        or res.graph_objective_s is None
        or res.best.config.vp <= 1
    ):
        return None
    gap = res.graph_objective_s / res.best.objective_s - 1
    return gap if gap > options.band else None


def without_interleaving(
    p: Problem, res: SolveResult, options: SolveOptions, solve, tables: Tables, start: float, deadline: float
) -> SolveResult:
    """``res``, or the best plan without interleaving when the op graph times it faster (module docstring).
    ``res.stats.interleave_check`` records what was compared."""
    gap = seen(res, options)
    if gap is None or "vp" in p.limits.fixed or time.perf_counter() >= deadline:
        return res
    c = res.best.config
    # the layers as the answer shards them (their times are what the closed form gets right); the pipeline re-chosen
    fixed = {**p.limits.fixed, "tp": c.tp, "cp": c.cp, "ep": c.ep}
    flat = replace(p, limits=replace(p.limits, vp_max=1, fixed=fixed))
    alt = solve(
        flat,
        replace(
            options,
            time_limit_s=max(0.05, deadline - time.perf_counter()),
            # only plans that may beat the answer: an analytic objective within the band of its op-graph time
            cutoff_s=res.graph_objective_s * (1 + options.band),
            explain=False,
            offload=False,
            act_offload=False,
            pinned_tight=False,
            rescore_max=min(options.rescore_max, FLAT_RESCORED),
        ),
        tables.with_limits(flat),
    )
    check = {
        "vp": res.best.config.vp,
        "objective_s": res.best.objective_s,
        "graph_s": res.graph_objective_s,
        "gap": gap,
        "flat_objective_s": alt.best.objective_s if alt.plans else None,
        "flat_graph_s": alt.graph_objective_s,
        "chosen": False,
    }
    if alt.plans and alt.graph_objective_s is not None and alt.graph_objective_s < res.graph_objective_s:
        check["chosen"] = True
        # the proof stays the first search's: the analytic optimum of the whole space, its bound and its op-graph
        # time (the answer is a plan the check took over it, as the re-score takes one within the band)
        alt.status, alt.objective_s, alt.bound_s = res.status, res.objective_s, res.bound_s
        alt.analytic_best_graph_s = res.analytic_best_graph_s
        alt.stats.interleave_check = check
        # what binds, against the user's problem (vp_max = 1 is the check's limit, not the user's)
        alt.plans = [replace(pl, binding=tuple(binding_constraints(p, pl.choice, pl.estimate))) for pl in alt.plans]
        alt.time_s = time.perf_counter() - start
        return alt
    res.stats.interleave_check = check
    res.time_s = time.perf_counter() - start
    return res
