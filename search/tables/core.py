"""The cost tables of one problem: the caches of every term, shared or not across a margin solve, and the
assembly of one choice's :class:`StageTable`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.physics.comm import dma
from costmodel.compose.stage_terms import dp_interference
from costmodel.compose.step import dp_exposure

from ..candidates import stage_count_ok, stage_kinds
from ..choice import Choice
from ..offload_choice import optimizer_s
from ..problem import Problem
from .affine import AffineTerms
from .buckets import BucketTerms
from .layers import LayerTerms
from .offload import OffloadTerms
from .stage import StageTerms
from .stage_table import StageTable
from .ticks import resolution_s


_UNSET = object()  # Tables._relaxed before relaxed() is first asked
#: the ``shared`` caches keyed by a choice, a group ``(shape, mb, vp)``, a shape or a ``(pp, vp)``: what one group or
#: choice costs, whatever interleaves the limits allow (:meth:`Tables.with_limits`); the group and choice lists
#: (``presolve.group_lists``, ``presolve.refined``) are not among them
VP_FREE = (
    "bounds.extras",
    "bounds.opt",
    "bounds.totals",
    "bounds.bytes",
    "bounds.dp_free",
    "bounds.spans",
    "bounds.largest",
    "bounds.quick",
    "bounds.split_relief",
    "presolve.chunks",
    "presolve.values",
    "presolve.sp_chunks",
    "presolve.recomputes",
    "presolve.group_lb",
    "presolve.subgroups",
)


class Tables(LayerTerms, OffloadTerms, AffineTerms, BucketTerms, StageTerms):
    """Cost tables of one :class:`Problem`, cached by the sub-choices each quantity depends on."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.res_s = resolution_s(problem)
        self._layer: dict = {}
        self._affine: dict = {}
        self._stage: dict = {}
        self._valid_only: dict = {}  # stage_table(valid_only=True)
        self._parts: dict = {}
        # name -> cache of the search modules above (bounds, presolve): ``shared`` holds only times, bytes and
        # candidate lists (none reads the HBM cap), ``fitted`` what fits under the cap (memory screens)
        self.shared: dict = {}
        self.fitted: dict = {}
        self._relaxed = _UNSET  # relaxed(): the tables of the relaxed cluster (None: these)

    def with_problem(self, problem: Problem) -> "Tables":
        """Tables of ``problem``, the same problem as ``self``'s but for its memory headroom, sharing every cache
        that holds times and bytes (layers, affine terms, stage parts, and the search modules' ``shared``
        caches: bounds, level-0 group bounds, candidate lists; none reads the HBM cap) and none that holds a fit
        (the stage tables' ``valid``, the search modules' ``fitted`` memory screens): the margin solve of
        :func:`search.solve._keep_margin` then times nothing twice. The headroom enters the search only as
        :attr:`search.problem.Problem.hbm_cap_bytes`, which only the fit tests read (``StageTable.valid``,
        :meth:`search.bounds.Bounds.caps` / ``fitting_zeros``); the candidate lists read the limits' pins and
        options, not the headroom."""
        same = replace(problem, limits=replace(problem.limits, headroom_bytes=self.p.limits.headroom_bytes))
        if same != self.p:  # the caches' keys leave out everything else a problem fixes (flash attention, ...)
            raise ValueError("Tables.with_problem: only the memory headroom may differ")
        return self._sharing(problem, self.shared, Tables.with_problem)  # one dict: what either fills, both read

    def with_limits(self, problem: Problem) -> "Tables":
        """Tables of ``problem``, ``self``'s but for a smaller ``vp_max`` and more pins (:mod:`search.interleave_check`),
        sharing the caches keyed by a choice, a group ``(shape, mb, vp)`` or a shape, which neither changes (layers,
        affine terms, stage parts, :data:`VP_FREE`'s bounds), and none that lists groups or choices (those read
        them)."""
        same = replace(problem, limits=replace(problem.limits, vp_max=self.p.limits.vp_max, fixed=self.p.limits.fixed))
        if same != self.p:
            raise ValueError("Tables.with_limits: only vp_max and the pins may differ")
        shared = {name: self.shared.setdefault(name, {}) for name in VP_FREE}
        return self._sharing(problem, shared, Tables.with_limits)

    def _sharing(self, problem: Problem, shared: dict, derive) -> "Tables":
        """Tables of ``problem`` holding ``self``'s caches of times and bytes per choice and ``shared`` as their
        search modules' caches; the relaxed cluster's tables, once built, derived alike (``derive``, at the new
        limits; None: ``self``)."""
        out = Tables(problem)
        out._layer, out._affine, out._parts = self._layer, self._affine, self._parts
        out.shared = shared
        if self._relaxed is not _UNSET:
            rt = self._relaxed
            out._relaxed = None if rt is None else derive(rt, replace(rt.p, limits=problem.limits))
        return out

    def relaxed(self) -> "Tables":
        """Tables on a cluster where every engine-bound DMA class (:func:`search.candidates.dma_values`)
        has as many engines per stream as it has in all: each stream of any plan at least as fast
        as under any assignment (the cost model is monotone in engines, ``tests/test_dma.py``), so
        bounds computed here hold for every assignment. ``self`` when no class is engine-bound.

        ``self`` is stored as ``None``: a reference from the tables to themselves would make them
        cyclic garbage, left for the collector, whose first pass after the search (the search pauses
        it, :func:`search.solve.cyclic_gc_paused`) walked their ~300,000 objects (0.2 s of DeepSeek-V3
        / 2048 H800's 3.3 s); without the cycle reference counting frees them when the search returns."""
        if self._relaxed is _UNSET:
            dev = self.p.cluster.device
            if not any(e.bw_bytes_per_s > 0 and e.scopes for e in dev.dma_engines):
                self._relaxed = None
            else:
                n = len(dma.STREAMS)
                engines = tuple(replace(e, count=e.count * n) if e.bw_bytes_per_s > 0 else e for e in dev.dma_engines)
                cluster = replace(self.p.cluster, device=replace(dev, dma_engines=engines))
                out = self._relaxed = Tables(replace(self.p, cluster=cluster))
                out._relaxed = None
        out = self._relaxed
        return self if out is None else out

    def stage_table(self, choice: Choice, valid_only: bool = False) -> StageTable:
        """The choice's tables. ``valid_only``: a table whose DP entries are computed only where a
        stage may hold ``n`` layers (``valid``; 0 elsewhere), for readers that take valid entries
        alone (:func:`search.exhaustive.best_splits`: the re-score's near plans); the full table
        when it is built already. A CP-SAT space takes full tables (its twins compare whole arrays)."""
        if choice in self._stage:
            return self._stage[choice]
        if valid_only:
            if choice not in self._valid_only:
                self._valid_only[choice] = self._build(choice, valid_only=True)
            return self._valid_only[choice]
        self._stage[choice] = self._build(choice)
        return self._stage[choice]

    def _build(self, choice: Choice, valid_only: bool = False) -> StageTable:
        p, s = self.p, choice.shape
        L, d, vp = p.model.layers, p.model.dense_layers, choice.vp
        n = np.arange(L + 1)
        shard_d = s.dp * s.cp if choice.zero >= 1 else 1
        shard_e = self._expert_dp(choice) if choice.zero >= 1 else 1
        out = {name: {} for name in ("time", "dp", "opt", "mem", "valid", "stall")}
        coef = dp_interference(p.cluster, s)  # the DP reductions' slowdown of the last backward
        for kind in stage_kinds(s.pp):
            time, fwd, bwd, rec = self.timing(choice, kind)
            stage = {"first": 0, "only": 0, "mid": 1, "last": s.pp - 1}[kind]
            a = self.affine(choice, kind)
            opt = optimizer_s(choice, a["dense"] / shard_d + a["expert"] / shard_e, p.cluster)  # offload's too
            mem = self.memory(choice, kind)
            if kind == "only" and self._fewest_fitting(choice):
                time, mem = self.with_fewest_fitting(choice, time, fwd, bwd + rec, mem)
            valid = stage_count_ok(p, kind, vp, n, s.pp) & (mem <= p.hbm_cap_bytes)  # pinned split: its counts
            if kind in ("first", "only"):
                valid &= n >= d
            if kind == "only":
                valid &= n == L
            # DP / ZeRO exposure after the last backward (head start: ``stage`` backward steps); with
            # ``valid_only`` at the valid counts alone (elementwise in n: the full table's entries there)
            at = np.flatnonzero(valid) if valid_only else n
            dp = np.zeros(L + 1)
            if len(at):
                b = self.dp_buckets(choice, kind, at=at if valid_only else None)
                ex, zx, _, _ = dp_exposure(
                    a["t_grad"][at],
                    a["t_param"][at],
                    b["lat_grad"],
                    b["lat_param"],
                    b["buckets"],
                    (bwd + rec)[at],
                    fwd[at],
                    stage,
                    s.pp,
                    vp,
                    (n + self.mtp_on(kind))[at],
                    pieces=b["pieces"],
                    interference=coef,
                )
                dp[at] = ex + zx
            for name, arr in (("time", time), ("dp", dp), ("opt", opt), ("mem", mem), ("valid", valid)):
                out[name][kind] = arr
            stall = self.fg_stall_s(choice, kind)
            if stall is not None:
                out["stall"][kind] = stall
        m = choice.micro_batches(p.workload.global_batch)
        return StageTable(
            choice,
            m - 1.0 / vp,
            stage_kinds(s.pp),
            out["time"],
            out["dp"],
            out["opt"],
            out["mem"],
            out["valid"],
            self.res_s,
            m,
            out["stall"] or None,
        )
