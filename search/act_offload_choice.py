"""Activation CPU offload as a plan option the search chooses (issue 21): where nothing fits without it.

Megatron-Core's ``--cpu-offloading-num-layers N`` (:mod:`costmodel.act_offload`) moves the saved activations of
the first ``N`` layers to the host; Megatron runs it only at ``pp = 1`` without recompute. A problem that states
``N`` (``Problem.options``, ``recommend --activation-offload-layers N``) is searched with it like any plan option:
``Problem`` pins ``pp = 1`` and ``recompute = none``, the tables charge the stall (``Tables.timing``) and the freed
bytes (``stage_memory``), as ``evaluate`` does.

A problem that states none is searched without it first; when no plan fits, :func:`better` searches the plans
with it. What makes that exact: offload changes two things of a ``pp = 1`` plan without recompute, its memory
(``N`` layers' activations leave the GPU) and its step (the stall :func:`costmodel.act_offload.schedule_s` adds,
never negative and not falling as ``N`` grows, ``tests/test_act_offload_search.py``). So for each plan ``x`` (a
*twin*: ``pp = 1``, no recompute, any memory) with time ``T0(x)`` without offload:

* every offload plan of ``x`` takes at least ``T(x, N_x)``, ``N_x`` the fewest layers that make ``x`` fit (fewer
  do not fit, more are no faster), and ``T(x, N_x) >= T0(x)``;
* the twins come in order of ``T0`` from one search of the relaxed problem (``pp = 1``, no recompute, no memory
  limit but the 16 TiB a device may declare; :func:`relaxed`), its ``top_k`` plans; once a twin's ``T0`` reaches
  the best ``T(x, N_x)`` found, no twin after it can be faster: the enumeration stops, proven.

The fastest twin's ``N`` is then searched as a stated option (one more search, re-scored as the first), whose
optimum is the optimum over every offload plan.

Not searched: a faster plan with offload where one without fits (a ``pp = 1`` answer that recomputes could
trade its recompute for offload). The same enumeration answers it, but its cost is the search's: on
Qwen3-30B-A3B / 64 H100 (``benchmarks/search_speed.py``, a ``pp = 1`` full-recompute answer) 64 twins lie
below the answer without reaching the stop (the relaxed optimum 2.11 s against 2.74 s), +3 s on a 1 s search;
``recommend --activation-offload-layers N`` states it instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from costmodel import offload
from costmodel.estimate import evaluate
from costmodel.memory import memory_per_stage
from costmodel.specs import MAX_HBM_BYTES

from .problem import Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, SolveResult, binding_constraints

#: twins taken from the relaxed search at first; doubled while the enumeration has not stopped, up to TWINS_MAX
TWINS = 8
TWINS_MAX = 64
#: the relaxed problem's HBM: the largest a device may declare (``costmodel.specs``' sanity bound, 16 TiB), so the
#: twins are every plan whose memory without offload stays below it (16 TiB per GPU: no plan that could fit)
UNLIMITED_BYTES = MAX_HBM_BYTES


def offerable(p: Problem) -> bool:
    """Whether a problem may get activation offload: Megatron, none stated, ``pp = 1`` and no recompute allowed,
    at least two layers (``N < L``) and a device whose host link is known."""
    lim = p.limits
    return (p.framework == "megatron" and "activation_offload_layers" not in dict(p.options)
            and lim.allows("pp", 1) and lim.allows("recompute", "none") and p.model.layers >= 2
            and offload.host_link_bytes_per_s(p.cluster) > 0)


def relaxed(p: Problem) -> Problem:
    """The twins' problem: ``p`` at ``pp = 1`` without recompute and without a memory limit (the HBM
    :data:`UNLIMITED_BYTES`); time never reads the HBM size, so its plans' times are ``p``'s."""
    dev = replace(p.cluster.device, hbm_bytes=UNLIMITED_BYTES)
    return replace(p, cluster=replace(p.cluster, device=dev),
                   limits=replace(p.limits, fixed={**p.limits.fixed, "pp": 1, "recompute": "none"}))


def fewest_layers(p: Problem, config) -> int | None:
    """The fewest offloaded layers ``N`` (``1 <= N < L``) with which ``config`` (``pp = 1``, no recompute) fits
    ``p``'s HBM less headroom (the fit test of the tables: the stage's total bytes), or ``None`` when even
    ``L - 1`` does not; memory falls with ``N`` (``costmodel.memory.stage_memory``), so a bisection finds it."""
    def fits(n: int) -> bool:
        c = replace(config, activation_offload_layers=n)
        return max(m.total_bytes for m in memory_per_stage(p.model, p.workload, c)) <= p.hbm_cap_bytes

    lo, hi = 1, p.model.layers - 1
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def _twins(p: Problem, q: Problem, options, solve, best_s: float, deadline: float) -> dict:
    """The enumeration of the module docstring: ``{"bound_s", "twins", "best": (N, s) or None, "proven"}``."""
    info = {"bound_s": None, "twins": 0, "best": None, "proven": False}
    seen, k = 0, TWINS
    cluster = p.cluster
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return info
        r = solve(q, replace(options, top_k=k, rescore=False, explain=False, offload=False, act_offload=False,
                             memory_margin=0.0, time_limit_s=left))
        if not r.plans or r.status != OPTIMAL:  # no twin at all, or not proven in the time left
            info["proven"] = not r.plans and r.status == INFEASIBLE
            return info
        info["bound_s"] = r.objective_s
        for plan in r.plans[seen:]:
            if plan.objective_s >= best_s:  # no twin from here on is faster (module docstring)
                info["proven"] = True
                return info
            info["twins"] += 1
            n = fewest_layers(p, plan.config)
            if n is None:
                continue
            t = evaluate(p.model, cluster, p.workload, replace(plan.config, activation_offload_layers=n),
                         engine="analytic").step_time_s
            if t < best_s:
                best_s, info["best"] = t, (n, t)
        if len(r.plans) < k:  # every twin seen
            info["proven"] = True
            return info
        if k >= TWINS_MAX:
            return info
        seen, k = len(r.plans), 2 * k


def better(p: Problem, res: SolveResult, options, solve, start: float, deadline: float) -> SolveResult:
    """``res``, or the fastest answer with activation offload when no plan of ``res`` fits (INFEASIBLE, not a
    refused pin) and one with it does (module docstring); ``stats['activation_offload']`` says what was looked
    at. Runs only with ``options.act_offload``, on a problem :func:`offerable`."""
    if not options.act_offload or not offerable(p) or "refused" in res.stats:
        return res
    if res.plans or res.status != INFEASIBLE:
        return res
    info = _twins(p, relaxed(p), options, solve, math.inf, deadline)
    stats = {"bound_s": info["bound_s"], "twins": info["twins"], "proven": info["proven"], "chosen": None}
    if info["best"] is not None and time.perf_counter() < deadline:
        n, stats["twin_s"] = info["best"]
        q = replace(p, options=tuple(sorted({**dict(p.options), "activation_offload_layers": n}.items())))
        r = solve(q, replace(options, offload=False, act_offload=False,
                             time_limit_s=deadline - time.perf_counter()))
        if r.plans:
            stats["chosen"] = n
            r.stats["activation_offload"] = stats
            # what binds, against the user's problem (the offload's pins are the re-search's, not the user's)
            r.plans = [replace(pl, binding=tuple(binding_constraints(p, pl.choice, pl.estimate))) for pl in r.plans]
            if not info["proven"] and r.status == OPTIMAL:  # a twin past the ones seen may be faster
                r.status, r.bound_s = FEASIBLE, info["bound_s"]
            r.time_s = time.perf_counter() - start
            return r
    res.stats["activation_offload"] = stats
    res.explanation += (f"; activation CPU offload (Megatron --cpu-offloading-num-layers, up to {p.model.layers - 1} "
                        "layers, pp = 1 without recompute) does not make a plan fit either.")
    res.time_s = time.perf_counter() - start
    return res
