"""Presolve: shrink the space the CP-SAT model holds without losing any optimal plan.

Three exact reductions, each counted in :class:`Presolved`:

* **dominance** — options that only enter one term and never make it worse: the chunk count
  only changes per-layer exposed communication (kept: the counts that are Pareto-best per
  layer sub-choice). Bucket sizes are all kept: more buckets overlap more but each pays a
  collective latency;
* **memory** — a choice whose smallest possible stage already overflows HBM;
* **bounds** — a choice whose lower bound exceeds an incumbent's exact objective. The bound
  relaxes the split: the slowest stage is at least the mean stage and at least the stage that
  must hold ``ceil(L / p)`` layers; the optimizer at least that stage's; DP exposure at least 0.

The exhaustive baseline skips all three, so equal optima on random instances test them. The groups and the
choices each expands to after dominance: :mod:`search.group_expander`; here the best-first queue over them.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

from search.group_expander import Expander
from .bounds import Bounds
from .exhaustive import Scored, best_splits
from .problem import Problem
from .choice import Choice
from .stats import PresolveCounts
from .tables import Tables


@dataclass
class Presolved:
    choices: list  # kept choices, by increasing lower bound
    lower_ticks: dict  # choice -> lower bound (ticks)
    incumbents: list  # exact Scored plans found while presolving, best first
    counts: PresolveCounts = field(default_factory=PresolveCounts)
    time_s: float = 0.0
    near: list = field(default_factory=list)  # choices above the pruning threshold within the slack
    timed_out: bool = False  # the deadline stopped it before every choice was bounded
    unexplored_ticks: int | None = None  # with timed_out: a bound below every choice not looked at


def _span_key(c: Choice) -> tuple:
    """What a choice's DP traffic depends on within its problem (:meth:`search.bounds.Bounds.dp_span_lb_s`)
    and whether it recomputes: the choices that share it share one DP exposure bound, taken at their widest
    windows (recomputing widens the backward window by about a forward, so recomputing and plain choices
    are spanned apart: together the plain ones' bound would be taken at the recomputing ones' windows)."""
    return c.shape, c.mb, c.vp, c.zero, c.bucket_mb, c.dma, c.recompute != "none"


def _seeds(tables: Tables) -> tuple[dict, dict]:
    """(group -> bound from an earlier presolve to start from, group -> bound to record this one's refinements in).

    A presolve records its refined group bounds (level 1; ``inf`` where the leanest choice does not fit)
    with the HBM cap they were screened at, in the caches :meth:`search.tables.Tables.with_problem` shares; a
    later presolve of the same problem at a cap no larger (the margin solve, :func:`search.solve._keep_margin`)
    starts each group from its recorded bound: its plans are a subset of the earlier problem's, at the same
    times. The first record stays (the largest cap, so the one every later solve may read)."""
    cap = tables.p.hbm_cap_bytes
    seen = tables.shared.get("presolve.refined")
    if seen is None:
        refined: dict = {}
        tables.shared["presolve.refined"] = (cap, refined)
        return {}, refined
    return (seen[1] if cap <= seen[0] else {}), {}


def presolve(
    p: Problem,
    tables: Tables,
    top_k: int = 1,
    probes: int | None = None,
    bounds: bool = True,
    slack: float = 0.0,
    deadline: float | None = None,
    cutoff_s: float | None = None,
) -> Presolved:
    """Reduce the space by best-first branch and bound over choices.

    Groups ``(shape, mb, vp)`` are expanded in order of their bound; each choice enters a heap
    with its cheap bound, which is refined (memory screen, water levels, DP exposure) when it
    reaches the top. A refined top that no unexpanded group can beat is solved exactly
    (its best splits) for an incumbent, and its exact optimum becomes its bound: best-first branch
    and bound, so the incumbent reaches the optimum as soon as the bounds allow (``probes``: at most
    that many exact solves; a cap of 16 left Qwen3-30B-A3B / 64 H100 with an incumbent 8% above the
    optimum and 2,673 choices CP-SAT could not prove in 60 s; uncapped it is proven in 3-4 s with
    one choice left). The ``top_k``-th incumbent prunes every group and choice whose bound is
    larger (``bounds=False``: no pruning by bound, only by memory, and 2 x ``top_k`` exact solves).

    ``slack`` (a fraction): choices whose bound lies above the pruning threshold ``ub`` but within
    ``ub * (1 + slack)`` are kept aside in ``near`` (not for the CP-SAT model: for re-scoring the
    plans near the optimum). ``deadline`` (``time.perf_counter()`` seconds): with half the time
    gone and no plan yet, presolve dives (solves the best refined choice at once instead of
    waiting for it to beat every group left; Qwen3-30B-A3B / 1,024 H100 with 10 s ran 14.5 s to
    its first plan, now 10.2 s); past the deadline, presolve stops expanding; ``timed_out`` is set
    and ``unexplored_ticks`` bounds every choice it did not look at (``None``: not even the group
    bounds were all computed, so nothing is proven). ``cutoff_s``: the pruning threshold before any incumbent
    (choices bounded above it are pruned; ``SolveOptions.cutoff_s``).
    """
    start = time.perf_counter()
    counts = PresolveCounts()
    use_bounds = bounds
    bounds, ex, res = Bounds(tables), Expander(p, tables, counts), tables.res_s
    # a group holds every DMA assignment: its bound is taken where each stream has all engines
    gbounds = bounds if tables.relaxed() is tables else Bounds(tables.relaxed())
    out = Presolved([], {}, [], counts)

    def to_ticks(x):
        return math.floor(x / res) - 4  # the objective sums up to 6 rounded table terms

    def late() -> bool:  # past the deadline with a plan in hand (or far past it without)
        if deadline is None:
            return False
        now = time.perf_counter()
        return now > deadline and (bool(incumbents) or now > deadline + max(1.0, deadline - start))

    def diving() -> bool:  # half the time gone without a plan: solve the best refined choice at once
        return deadline is not None and not incumbents and time.perf_counter() > (start + deadline) / 2

    incumbents: list[Scored] = []
    # exact solves: uncapped with bounds (branch and bound); without, a few for the CP-SAT hint
    cap = probes if probes is not None else (math.inf if use_bounds else 2 * top_k)
    # group bounds a presolve of these tables' problem at a cap at least this one's refined (the margin
    # solve's: every plan fitting under the smaller cap fits under the larger one, at the same time, so
    # a bound there bounds it here); this presolve's refinements are recorded for the next one
    seeds, refined = _seeds(tables)
    groups = []
    for q in ex.groups():
        if groups and deadline is not None and time.perf_counter() > deadline:
            # the group bounds are not all known: nothing below can be proven
            out.timed_out, out.unexplored_ticks = True, None
            break
        groups.append((ex.group_lb_s(gbounds, *q), q))
    counts.groups = len(groups)
    # best first; a group is refined when it comes up (level 1: the memory screen) and goes back in line
    # if that raised it above the next one
    groups = [
        (max(glb, seeds.get(q, glb)), 0, q) for glb, q in groups if glb is not None
    ]  # None: an option list is empty
    if seeds:  # the groups whose leanest choice did not fit at the larger cap
        kept_groups = [g for g in groups if g[0] < math.inf]
        counts.groups_memory += len(groups) - len(kept_groups)
        groups = kept_groups
    heapq.heapify(groups)
    ub = math.inf if cutoff_s is None else math.floor(cutoff_s / res)
    lower: dict = {}  # choice -> refined bound (ticks); once probed, its exact optimum
    heap: list = []  # (bound, level: 0 quick, 1 with its span's DP bound, 2 refined, choice)
    spans: dict = {}  # a group's pushed choices by what their DP traffic depends on (_span_key)
    span_lb: dict = {}  # span -> its DP exposure bound (Bounds.dp_span_lb_s), once its first choice is popped
    pushed = 0

    def thr() -> float:  # choices up to here are kept (for CP-SAT up to ub, near up to thr)
        return ub if ub == math.inf else math.floor(ub * (1 + slack))

    def refine(c):
        caps = bounds.caps(c)
        if caps is None:
            counts.memory += 1
            return None
        lower[c] = to_ticks(bounds.strong_lb_s(c, caps))
        return lower[c]

    while groups:
        glb, level, q = heapq.heappop(groups)
        if late():
            if not out.timed_out:
                out.timed_out, out.unexplored_ticks = True, to_ticks(glb)
            break
        if to_ticks(glb) > thr():
            counts.groups_bound += len(groups) + 1
            break
        if level == 0:  # refined once it comes first: the memory screen (level 1)
            g_refined = ex.group_lb_s(gbounds, *q, level=1)
            if g_refined is not None:
                g_refined = max(g_refined, seeds.get(q, g_refined))
            refined[q] = math.inf if g_refined is None else g_refined
            if g_refined is None:
                counts.groups_memory += 1
                continue
            if to_ticks(g_refined) > thr():
                counts.groups_bound += 1
                continue
            if groups and g_refined > groups[0][0] and not diving():
                heapq.heappush(groups, (g_refined, 1, q))
                continue
        for cs in ex.choices(*q, pruned=lambda c, any_chunks=False: to_ticks(bounds.quick_lb_s(c, any_chunks)) > thr()):
            lb = to_ticks(bounds.quick_lb_s(cs[0]))
            if lb > thr():
                counts.bound += len(cs)
            else:
                pushed += len(cs)
                for c in cs:
                    heapq.heappush(heap, (lb, 0, c))
                    spans.setdefault(_span_key(c), []).append(c)
        next_glb = to_ticks(groups[0][0]) if groups else math.inf
        while (
            heap
            and (heap[0][0] <= min(ub, next_glb) or diving())
            and (counts.probed < cap or (use_bounds and ub == math.inf))
            and not late()
        ):
            lb, level, c = heapq.heappop(heap)
            if level == 0:  # its memory screen, then the DP exposure its span shares (one computation for
                # the span), before its own bounds
                if bounds.caps(c) is None:
                    counts.memory += 1
                    continue
                key = _span_key(c)
                if key not in span_lb:
                    span_lb[key] = bounds.dp_span_lb_s(spans[key])
                raised = lb + math.floor(span_lb[key] / res)  # at most to_ticks(quick + span)
                if raised > lb:
                    heapq.heappush(heap, (raised, 1, c))
                    continue
            if level < 2:
                lb = refine(c)
                if lb is not None:
                    heapq.heappush(heap, (lb, 2, c))
                continue
            counts.probed += 1
            exact = best_splits(tables.stage_table(c), p.model.layers, 1)
            # the choice's own optimum is its tightest bound (none: no split fits, it is dropped)
            if exact:
                lower[c] = exact[0].objective
            else:
                del lower[c]
                counts.memory += 1
            incumbents += exact
            incumbents.sort(key=lambda sc: (sc.objective, sc.choice, sc.split))
            values = sorted({sc.objective for sc in incumbents})  # twins share a value: count values
            if len(values) >= top_k and use_bounds:
                ub = min(ub, values[top_k - 1])
    for lb, level, c in heap:
        if lb <= thr() and level < 2:
            if late():  # not refined: its quick bound still bounds it
                if not out.timed_out:
                    out.timed_out, out.unexplored_ticks = True, lb
                elif out.unexplored_ticks is not None:
                    out.unexplored_ticks = min(out.unexplored_ticks, lb)
                continue
            refine(c)
    kept = sorted((c for c in lower if lower[c] <= ub), key=lambda c: (lower[c], c))
    near = sorted((c for c in lower if ub < lower[c] <= thr()), key=lambda c: (lower[c], c))
    counts.bound += pushed - counts.memory - len(kept) - len(near)
    counts.kept = len(kept)
    if near:
        counts.near = len(near)
    out.choices, out.lower_ticks, out.incumbents, out.near = kept, lower, incumbents, near
    out.time_s = time.perf_counter() - start
    return out
