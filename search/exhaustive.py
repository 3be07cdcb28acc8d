"""The exhaustive baseline: every choice and every stage split, scored with the same integer tables.

It enumerates the whole space of :mod:`search.candidates` (no dominance, no bounds), builds
each choice's :class:`~search.tables.StageTable` and scores every split with numpy. It is
what the CP-SAT search is tested against (equal optimal objectives on small instances) and
timed against (``benchmarks/search_speed.py``); ``time_limit_s`` caps it, and the result says
how much of the space it covered so a capped run can be extrapolated.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from search.problem import Problem, Limits
>>> p = Problem(model=load_model("gpt-1.7b"), cluster=load_cluster("a100-80g").with_gpus(8),
...             workload=Workload(global_batch=16, seq_len=2048),
...             limits=Limits(fixed={"tp": 2, "pp": 2, "cp": 1, "mb": 1, "zero": 1, "sp": True, "chunks": 2,
...                                  "bucket_mb": 25}))
>>> r = solve_exhaustive(p)
>>> r.complete, r.best.choice.shape.dp, r.best.split.first + r.best.split.last
(True, 2, 24)
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from .candidates import (
    Split,
    stage_unit,
    bucket_values,
    dma_values,
    mb_values,
    recompute_values,
    shapes,
    sp_chunk_pairs,
    splits,
    vp_values,
    zero_values,
)
from .problem import Problem
from .choice import Choice
from .tables import StageTable, Tables


@dataclass(frozen=True)
class Scored:
    """One plan of the search space with its integer objective (ticks of the problem resolution)."""

    objective: int
    choice: Choice
    split: Split


def max_stage_layers(p: Problem, pp: int, vp: int) -> int:
    return p.model.layers if pp == 1 else p.model.layers - (pp - 1) * stage_unit(p, vp)


def all_choices(p: Problem):
    """Every :class:`Choice` of the space, in a fixed order."""
    L = p.model.layers
    for s in shapes(p):
        per_shape = (sp_chunk_pairs(p, s), zero_values(p, s), bucket_values(p, s))
        for mb in mb_values(p, s.dp):
            m = p.workload.global_batch // (s.dp * mb)
            for vp in vp_values(p, s.pp, m):
                recs = recompute_values(p, max_stage_layers(p, s.pp, vp) if s.pp > 1 else L)
                for (sp, chunks), zero, bucket in itertools.product(*per_shape):
                    for a in dma_values(p, s, zero):
                        for kind, k in recs:
                            yield Choice(
                                s, mb, vp, sp, chunks, zero, kind, k, bucket, p.framework, a, p.grad_dtype, p.options
                            )


def split_objectives(t: StageTable, layers: int, dense_layers: int = 0):
    """All valid splits of one choice: ``(objective ticks, first, mid, last)`` arrays.

    ``objective = max_pos time + sum_stages share + max_pos dp + max_pos opt`` (``+ max_pos stall``
    with fine-grained activation offloading, :class:`search.tables.StageTable`) over the stage
    positions used (``time``: the slowest stage's ``(m - 1/v)`` micro-batches; ``share``: each
    stage's ``1/v`` of the first micro-batch's pass, :func:`costmodel.compose.step.pipeline_s`).
    """
    c = t.choice
    pp, k = c.shape.pp, c.recompute_layers
    if pp == 1:
        ok = t.valid["only"][layers]
        obj = t.sum_ticks["only"][layers] + sum(getattr(t, name)["only"][layers] for name in t.max_terms())
        arr = np.array([obj] if ok else [], dtype=np.int64)
        full = np.array([layers] if ok else [], dtype=np.int64)
        return arr, full, np.zeros_like(full), np.zeros_like(full)
    nf = np.flatnonzero(t.valid["first"])
    if pp == 2:
        nm_grid = np.zeros_like(nf)
        nf_grid = nf
    else:
        nm = np.flatnonzero(t.valid["mid"])
        nm = nm[(pp - 2) * nm < layers]
        nm_grid, nf_grid = (g.ravel() for g in np.meshgrid(nm, nf, indexing="ij"))
    nl_grid = layers - (pp - 2) * nm_grid - nf_grid
    ok = (nl_grid >= 0) & (nl_grid <= layers)
    nm_grid, nf_grid, nl_grid = nm_grid[ok], nf_grid[ok], nl_grid[ok]
    ok = t.valid["last"][nl_grid]
    if k is not None:
        ok &= np.maximum(np.maximum(nf_grid, nm_grid), nl_grid) >= k
    nm_grid, nf_grid, nl_grid = nm_grid[ok], nf_grid[ok], nl_grid[ok]
    share = t.sum_ticks
    obj = share["first"][nf_grid] + share["last"][nl_grid] + (share["mid"][nm_grid] if pp > 2 else 0)
    for name in t.max_terms():
        tab = getattr(t, name)
        term = np.maximum(tab["first"][nf_grid], tab["last"][nl_grid])
        if pp > 2:
            term = np.maximum(term, tab["mid"][nm_grid])
        obj = obj + term
    return np.asarray(obj, dtype=np.int64), nf_grid, nm_grid, nl_grid


def best_splits(t: StageTable, layers: int, k: int = 1) -> list[Scored]:
    """The ``k`` best splits of one choice (fewest ticks, then the first split in split order)."""
    obj, nf, nm, nl = split_objectives(t, layers)
    if not len(obj):
        return []
    order = np.lexsort((nl, nm, nf, obj))[:k]
    return [Scored(int(obj[i]), t.choice, Split(int(nf[i]), int(nm[i]), int(nl[i]))) for i in order]


@dataclass
class ExhaustiveResult:
    best: Scored | None
    top: list = field(default_factory=list)
    choices_done: int = 0
    choices_total: int = 0
    splits_done: int = 0
    time_s: float = 0.0
    complete: bool = True


def count_choices(p: Problem) -> int:
    return count_space(p)[0]


def count_space(p: Problem) -> tuple[int, int]:
    """(choices, plans) in the space, counted per ``(shape, mb, vp)`` without enumerating;
    plans count every stage split, before any memory check."""
    L, choices, plans = p.model.layers, 0, 0
    n_splits: dict = {}
    for s in shapes(p):
        per_shape = (
            len(sp_chunk_pairs(p, s))
            * len(bucket_values(p, s))
            * sum(len(dma_values(p, s, z)) for z in zero_values(p, s))
        )
        for mb in mb_values(p, s.dp):
            for vp in vp_values(p, s.pp, p.workload.global_batch // (s.dp * mb)):
                n = per_shape * len(recompute_values(p, max_stage_layers(p, s.pp, vp) if s.pp > 1 else L))
                key = (s.pp, vp)
                if key not in n_splits:
                    n_splits[key] = sum(1 for _ in splits(L, s.pp, stage_unit(p, vp), max(1, p.model.dense_layers)))
                choices += n
                plans += n * n_splits[key]
    return choices, plans


def solve_exhaustive(
    p: Problem, time_limit_s: float | None = None, top_k: int = 1, tables: Tables | None = None
) -> ExhaustiveResult:
    """Score every (choice, split); stop after ``time_limit_s`` (``complete`` is then False)."""
    start = time.perf_counter()
    tables = tables or Tables(p)
    res = ExhaustiveResult(best=None)
    top: list[Scored] = []
    for choice in all_choices(p):
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            res.complete = False
            break
        t = tables.stage_table(choice)
        obj, nf, nm, nl = split_objectives(t, p.model.layers)
        res.choices_done += 1
        res.splits_done += len(obj)
        if len(obj):
            i = int(np.argmin(obj))
            top.append(Scored(int(obj[i]), choice, Split(int(nf[i]), int(nm[i]), int(nl[i]))))
            if len(top) > 4 * top_k + 64:
                top = sorted(top, key=lambda s: s.objective)[:top_k]
    top = sorted(top, key=lambda s: s.objective)[:top_k]
    res.top, res.best = top, (top[0] if top else None)
    res.choices_total = count_choices(p) if not res.complete else res.choices_done
    res.time_s = time.perf_counter() - start
    return res
