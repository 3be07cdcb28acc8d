"""Optimizer CPU offload as a plan option the search chooses (issue 21): where nothing fits without it.

Megatron-Core's ``--optimizer-cpu-offload --optimizer-offload-fraction F`` (:mod:`costmodel.physics.mechanics.offload`) keeps F of
the distributed optimizer's FP32 master weights and Adam moments on the host. A problem whose options state a
fraction (``Problem.options``, ``recommend --optimizer-offload-fraction F``) is searched with it like any plan
option: every choice carries it, the tables charge it through :func:`optimizer_s` and ``Problem`` pins ZeRO-1.

A problem that states none is searched without offload first. Only when no plan fits
(:func:`when_nothing_fits`) is it searched again at each fraction of :data:`FRACTIONS`, the overlapped copies
on, and the fastest answer taken.

Why that loses nothing while a plan without offload fits, and costs a normal search nothing: offload changes
one term of a plan's step, the optimizer's (the layers, the pipeline and the DP collectives are those of the
same plan without it; :func:`costmodel.compose.stage_terms.stage_optimizer_s`), and it never lowers that term. For a shard
of ``L`` elements let the GPU Adam take ``g(L) = a L + k`` (:func:`costmodel.physics.kernels.compute.optimizer_time_s`: HBM
bytes per element ``a`` and kernel launches ``k``), the CPU Adam ``c f L`` and each copy ``b f L``
(:func:`costmodel.physics.mechanics.offload.offload_times_s`). In sequence the step is ``b f L + max(g((1 - f) L), c f L) +
b f L >= g(L) - a f L + 2 b f L >= g(L)`` since ``2 b >= a`` (a copy over the host link is slower per element
than the GPU Adam's HBM traffic: 8 B at 26-52 GB/s against 30 B at 2-8 TB/s, 8-30x); overlapped it is at least
``c f L >= g(L)`` once ``f c >= a + k / L``, at ``f >= 0.5`` every shard above ~3 x 10^4 elements (the CPU Adam
takes 60-240x the GPU Adam's time per element on the presets). ``tests/test_offload_search.py`` checks both on every
preset cluster with a host link. So a plan with offload is slower than the same plan without, whenever that
one fits; it can win only where its twin does not fit: when it buys a cheaper recompute or a smaller
pipeline that needs the memory, or makes any plan fit. This module takes the second case (no plan fits), where
the re-search is the only way to an answer; the first (some plan fits, a faster one would with offload) is not
searched, so that a search that finds a plan is not slowed (its cost would be a second search).
"""

from __future__ import annotations

import time
from dataclasses import replace

from costmodel.physics.mechanics import offload
from costmodel.spec.specs import ClusterSpec

from .choice import Choice
from .problem import Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, SolveResult, binding_constraints

#: the fractions offered when nothing fits without offload: half the optimizer state and all of it
#: (Megatron-LM d98e8a64 arguments.py: ``--optimizer-offload-fraction`` defaults to 1.0)
FRACTIONS = (0.5, 1.0)
#: the offload fields of ``Problem.options`` / ``ParallelConfig``
FIELDS = ("optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d")


def optimizer_s(choice: Choice, local_params, cluster: ClusterSpec):
    """The optimizer step of a stage of ``choice`` holding ``local_params`` elements of the shard (an array over
    its layer counts): :func:`costmodel.physics.mechanics.offload.shard_optimizer_s`, the function ``evaluate`` calls, with the
    choice's offload options (the optimizer dtype as the tables always read it: the problem's option)."""
    opts = choice.config_options()
    return offload.shard_optimizer_s(
        local_params,
        cluster,
        dict(choice.options).get("optimizer_dtype", "fp32"),
        opts.get("optimizer_offload_fraction", 0.0),
        opts.get("overlap_cpu_optimizer_d2h_h2d", False),
    )


def offered(p: Problem) -> list[Problem]:
    """The problems with offload, one per fraction of :data:`FRACTIONS` (the copies overlapped: the same memory,
    never slower, ``costmodel.physics.mechanics.offload.optimizer_step_s``), or none where the problem states offload already or
    cannot run it: framework megatron with ZeRO-1 allowed, FP32 Adam state and a device whose host link is
    known. An FP8 problem's chosen FP8 parameter gather (``Problem``) is dropped: Megatron runs it with
    offload only under the delayed recipe, not a plan field."""
    opts = dict(p.options)
    if (
        p.framework != "megatron"
        or any(k in opts for k in FIELDS)
        or opts.get("optimizer_dtype", "fp32") != "fp32"
        or not p.limits.allows("zero", 1)
        or offload.host_link_bytes_per_s(p.cluster) <= 0
    ):
        return []
    opts.pop("fp8_param_gather", None)
    return [
        replace(
            p,
            options=tuple(
                sorted({**opts, "optimizer_offload_fraction": f, "overlap_cpu_optimizer_d2h_h2d": True}.items())
            ),
        )
        for f in FRACTIONS
    ]


def _time_s(r: SolveResult) -> float:
    """The answer's step time as the solve ranked it (op-graph with the re-score, else analytic)."""
    return r.graph_objective_s if r.graph_objective_s is not None else r.objective_s


def when_nothing_fits(p: Problem, res: SolveResult, options, solve, start: float, deadline: float) -> SolveResult:
    """``res``, unless ``options.offload``, no plan of ``p`` fits (INFEASIBLE, not a refused pin) and
    :func:`offered` has problems: then the fastest answer of ``solve`` over those (each in the time left), its
    ``stats.optimizer_offload`` saying what was tried; OPTIMAL over the fractions only when every one was proven. ``res`` (its explanation
    extended) when none fits either."""
    if not options.offload or res.status != INFEASIBLE or res.plans or res.stats.refused is not None:
        return res
    tried, best, proven, bounds = [], None, True, []
    for q in offered(p):
        left = deadline - time.perf_counter()
        if left <= 0:
            proven = False
            break
        r = solve(q, replace(options, time_limit_s=left, explain=False, pinned_tight=False))
        f = dict(q.options)["optimizer_offload_fraction"]
        tried.append(
            {"fraction": f, "status": r.status, "time_s": r.time_s, "step_time_s": _time_s(r) if r.plans else None}
        )
        proven &= r.status in (OPTIMAL, INFEASIBLE)
        if r.plans:
            bounds.append(r.bound_s)
            if best is None or _time_s(r) < _time_s(best):
                best = r
    if not tried:
        return res
    info = {"without": INFEASIBLE, "fractions": list(FRACTIONS), "tried": tried}
    if best is None:
        res.stats.optimizer_offload = info
        res.explanation = res.explanation.rstrip(" .") + (  # a sentence of its own ("either Optimizer" ran on)
            ". Optimizer CPU offload (fraction "
            + ", ".join(f"{t['fraction']:g}" for t in tried)
            + ") does not make a plan fit either."
        )
        res.time_s = time.perf_counter() - start
        return res
    info["chosen"] = best.best.config.optimizer_offload_fraction
    best.stats.optimizer_offload = info
    # what binds, against the user's problem (the re-search pins ZeRO-1 itself, not the user)
    best.plans = [replace(pl, binding=tuple(binding_constraints(p, pl.choice, pl.estimate))) for pl in best.plans]
    if not proven:
        best.status = FEASIBLE
        best.bound_s = None if any(b is None for b in bounds) else min(bounds)
    best.time_s = time.perf_counter() - start
    return best
