"""The groups of a training search and the choices each expands to, for :func:`search.presolve.presolve`.

A group ``(shape, mb, vp)`` fixes the pipeline multiplier (:func:`_groups`); :class:`Expander` lists its choices
after dominance (chunk counts Pareto-best per layer sub-choice, :func:`_dominant_chunks`; every bucket size,
:func:`_dominant_buckets`) and bounds a whole group from below before any of its choices is looked at."""

from __future__ import annotations

from search.bounds import Bounds
from search.candidates import (
    bucket_values,
    chunk_values,
    dma_values,
    mb_values,
    recompute_values,
    shapes,
    sp_values,
    vp_values,
    zero_values,
)
from search.choice import Choice
from search.exhaustive import max_stage_layers
from search.problem import Problem
from search.stats import PresolveCounts
from search.tables import Tables


_MISSING = object()


def _dominant_chunks(tables: Tables, base: Choice, chunk_opts: list[int]) -> list[int]:
    """Chunk counts not dominated on (U, R) of dense and MoE layers; all of them if the
    compute or activations differ between counts (then chunks is not a pure overlap knob)."""
    if len(chunk_opts) == 1:
        return chunk_opts
    moe = tables.p.model.is_moe
    vecs = {}
    for ch in chunk_opts:
        c = Choice(
            base.shape,
            base.mb,
            base.vp,
            base.sp,
            ch,
            base.zero,
            base.recompute,
            None,
            base.bucket_mb,
            base.framework,
            base.dma,
            base.grad_dtype,
            base.options,
        )
        vecs[ch] = [tables.layer(c, False)] + ([tables.layer(c, True)] if moe else [])
    ref = vecs[chunk_opts[0]]
    if any(v[i][2:] != ref[i][2:] for v in vecs.values() for i in range(len(ref))):
        return chunk_opts
    cost = {ch: [x for lay in v for x in lay[:2]] for ch, v in vecs.items()}
    return [
        a
        for a in chunk_opts
        if not any(all(x <= y for x, y in zip(cost[b], cost[a])) and cost[b] != cost[a] for b in chunk_opts)
        and not any(cost[b] == cost[a] and b < a for b in chunk_opts)
    ]


def _dominant_buckets(opts: list[float]) -> list[float]:
    """Every bucket size stays: smaller buckets overlap more but pay one collective latency each
    (:func:`costmodel.compose.step.bucketed_s`), so none dominates."""
    return list(opts)


def _groups(p: Problem):
    """``(shape, mb, vp)``: the choices that fix the multiplier ``M = m + (p-1)/v``."""
    for s in shapes(p):
        yield from _shape_groups(p, s)


def _shape_groups(p: Problem, s, vps=None):
    """The groups of shape ``s`` (:func:`_groups`); ``vps(pp, m)``: :func:`search.candidates.vp_values` (cached)."""
    for mb in mb_values(p, s.dp):
        m = p.workload.global_batch // (s.dp * mb)
        for vp in vp_values(p, s.pp, m) if vps is None else vps(s.pp, m):
            yield s, mb, vp


class Expander:
    """The choices of a group after dominance (chunks per layer sub-choice, smallest bucket)."""

    def __init__(self, p: Problem, tables: Tables, counts: PresolveCounts):
        self.p, self.t, self.counts = p, tables, counts
        self._chunks: dict = tables.shared.setdefault("presolve.chunks", {})
        # the memory-free caches below, looked up once (every one of ~13,000 groups asks each of them)
        self._values: dict = tables.shared.setdefault("presolve.values", {})
        self._sp_chunks: dict = tables.shared.setdefault("presolve.sp_chunks", {})
        self._recomputes: dict = tables.shared.setdefault("presolve.recomputes", {})
        self._group_lb: dict = tables.shared.setdefault("presolve.group_lb", {})
        self._group_lists: dict = tables.shared.setdefault("presolve.group_lists", {})
        self._subgroups: dict = tables.shared.setdefault("presolve.subgroups", {})  # choices(): no memory read

    def groups(self) -> list:
        """:func:`_groups`, listed once per tables (the margin solve's presolve walks them again)."""
        out = self._group_lists.get(None)
        if out is None:
            out = self._group_lists[None] = [q for s in shapes(self.p) for q in self.shape_groups(s)]
        return out

    def shape_groups(self, s) -> list:
        """:func:`_shape_groups`, listed once per shape."""
        out = self._group_lists.get(s)
        if out is None:
            out = self._group_lists[s] = list(_shape_groups(self.p, s, self._vps))
        return out

    def _vps(self, pp: int, m: int) -> list:
        """:func:`search.candidates.vp_values`, once per (pp, micro-batches): the shapes' groups share them."""
        key = ("vp", pp, m)
        out = self._group_lists.get(key)
        if out is None:
            out = self._group_lists[key] = vp_values(self.p, pp, m)
        return out

    def values(self, s) -> tuple[list, list, list, list]:
        """(ZeRO stages, sp, chunk counts, bucket sizes) shape ``s`` may take (search.candidates),
        computed once per shape: every group of the shape asks."""
        cache = self._values
        if s not in cache:
            p = self.p
            cache[s] = (zero_values(p, s), sp_values(p, s), chunk_values(p, s), bucket_values(p, s))
        return cache[s]

    def sp_chunks(self, s, sp: bool) -> list:
        """:func:`search.candidates.chunk_values` of shape ``s`` with ``sp``, once per pair."""
        cache = self._sp_chunks
        if (s, sp) not in cache:
            cache[(s, sp)] = chunk_values(self.p, s, sp)
        return cache[(s, sp)]

    def recomputes(self, pp: int, vp: int) -> list:
        """:func:`search.candidates.recompute_values` for a stage of ``pp`` stages of ``vp`` chunks
        (all layers on one stage without a pipeline), once per (pp, vp)."""
        cache = self._recomputes
        if (pp, vp) not in cache:
            p = self.p
            cache[(pp, vp)] = recompute_values(p, max_stage_layers(p, pp, vp))
        return cache[(pp, vp)]

    def chunks(self, base: Choice, opts: list[int]) -> list[int]:
        s = base.shape
        z3 = base.per_microbatch()
        key = (s.tp, s.cp, s.ep, s.dp if z3 else 1, base.mb, base.sp, base.recompute, z3, base.dma)
        if key not in self._chunks:
            self._chunks[key] = _dominant_chunks(self.t, base, opts)
        return self._chunks[key]

    def choices(self, s, mb: int, vp: int, pruned=None):
        """The group's choices after dominance, as lists of choices that differ only in bucket size
        (the quick bound does not depend on it); with ``pruned(choice, any_chunks) -> bool`` (a bound test) a
        sub-group (sp, ZeRO, assignment, recompute) is skipped whole when the bound of its choice with
        the most chunks over every chunk count (``pruned(choice, True)``,
        :meth:`search.bounds.Bounds.pipeline_lb_s` ``any_chunks``) is pruned: more chunks never
        expose more communication, but each piece pays a kernel launch (:mod:`costmodel.physics.comm.split_overhead`)."""
        subs = self._subgroups.get((s, mb, vp))
        if subs is None:
            subs = self._subgroups[(s, mb, vp)] = list(self._sub_groups(s, mb, vp))
        for sub in subs:
            rep, n, args = sub[0], sub[1], sub[2]
            if pruned is not None and pruned(rep, True):
                self.counts.bound += n
                continue
            if len(sub) == 3:  # its choices after dominance, once
                sub += self._dominant(*args)
            self.counts.dominated += sub[3]
            yield from sub[4]

    def _sub_groups(self, s, mb: int, vp: int):
        """The sub-groups of :meth:`choices` in its order: ``[the choice its bound test takes, choices before
        dominance, what builds them]``; :meth:`choices` appends ``dominated, lists`` when it first builds them
        (kept per tables: the margin solve's presolve expands most of the same groups again)."""
        p = self.p
        zeros, sps, _, buckets = self.values(s)
        kept_buckets = _dominant_buckets(buckets)
        recs = self.recomputes(s.pp, vp)
        for sp in sps:
            chunk_opts = self.sp_chunks(s, sp)
            if not chunk_opts:  # e.g. a pinned chunk count Megatron runs only with sequence parallelism
                continue
            for zero in zeros:
                for a in dma_values(p, s, zero):
                    for kind, k in recs:
                        rep = Choice(
                            s,
                            mb,
                            vp,
                            sp,
                            max(chunk_opts),
                            zero,
                            kind,
                            k,
                            kept_buckets[0],
                            p.framework,
                            a,
                            p.grad_dtype,
                            p.options,
                        )
                        yield [rep, len(chunk_opts) * len(buckets), (s, mb, vp, sp, zero, a, kind, k)]

    def _dominant(self, s, mb: int, vp: int, sp: bool, zero: int, a, kind: str, k) -> list:
        """``[dominated count, lists of choices differing in bucket size]`` of one sub-group (:meth:`choices`)."""
        p = self.p
        _, _, _, buckets = self.values(s)
        kept_buckets = _dominant_buckets(buckets)
        chunk_opts = self.sp_chunks(s, sp)
        base = Choice(
            s, mb, vp, sp, chunk_opts[0], zero, kind, k, kept_buckets[0], p.framework, a, p.grad_dtype, p.options
        )
        chs = self.chunks(base, chunk_opts)
        lists = [
            [Choice(s, mb, vp, sp, ch, zero, kind, k, b, p.framework, a, p.grad_dtype, p.options) for b in kept_buckets]
            for ch in chs
        ]
        return [len(chunk_opts) * len(buckets) - len(chs) * len(kept_buckets), lists]

    def group_lb_s(self, bounds: Bounds, s, mb: int, vp: int, level: int = 0) -> float | None:
        """A bound below every choice of the group, at one of two levels of work (each a bound on its
        own, the second tighter as a rule), so best-first search screens a group's memory only once it
        comes first (``tests/test_presolve_bounds.py``: every level <= the group's exact optimum).

        Level 0, pipeline: the fastest layers (no recompute, no ZeRO-3 gathers unless only ZeRO-3
        fits, the most chunks less their kernel launches: ``any_chunks``), best sp. Level 1 screens
        memory with the leanest choice (most ZeRO sharding, full recompute, sequence parallel): None
        if that cannot fit; else the pipeline bound over only the ZeRO stages whose leanest choice
        fits. It prunes most groups that memory forces onto ZeRO-3 (DeepSeek-V3 / 2048 H800: 1,527 of
        the 1,753 it screens). The optimizer and the DP exposure enter each choice's own bounds
        (:meth:`search.bounds.Bounds.quick_lb_s`, ``strong_lb_s``), not the group's: a group-level DP
        exposure bound (a third level, until issue 22's ninth pass) pruned 0, 1 and 7 of the 121, 226
        and 213 groups it was computed for (GPT-3 / 1024 A100, DeepSeek-V3 / 2048 H800, Qwen3-30B-A3B /
        64 H100) at 0.4 s of DeepSeek-V3's 2.2 s; without it each of the 24 ``search_scaling`` cases
        keeps its optimum and is faster."""
        key = (s, mb, vp)
        if level == 0:  # bucket- and memory-free; every group of the shape at once (:meth:`_shape_lbs`)
            out = self._group_lb.get(key, _MISSING)
            if out is _MISSING:
                self._group_lb.update(self._shape_lbs(bounds, s))
                out = self._group_lb.get(key, _MISSING)
            if out is _MISSING:  # not a group :func:`_groups` lists
                out = self._group_lb[key] = self._pipeline_lb_s(bounds, s, mb, vp)
            return out
        return self._pipeline_lb_s(bounds, s, mb, vp, screened=True)

    def _shape_lbs(self, bounds: Bounds, s) -> dict:
        """The level-0 bound of every group of shape ``s`` (:func:`_shape_groups`), each equal to
        :meth:`_pipeline_lb_s`'s (``tests/test_presolve_bounds.py``): the same choices, bounded together by
        :meth:`search.bounds.Bounds.pipeline_lbs_s` (DeepSeek-V3 / 1,152 GB200: 21,188 groups of 1,338 shapes)."""
        out, at = {}, []
        for q in self.shape_groups(s):
            if self._fast_choices(*q, built=False):
                at.append(q)
            else:
                out[q] = None
        if at:
            lbs = bounds.pipeline_lbs_s(self._fast_choices(*at[0]), [(mb, vp) for _, mb, vp in at])
            out.update(zip(at, lbs.min(axis=1).tolist()))
        return out

    def _fast_choices(self, s, mb: int, vp: int, zeros=None, built: bool = True) -> list | bool | None:
        """The choices whose :meth:`search.bounds.Bounds.pipeline_lb_s` ``any_chunks`` the level-0 (or, with the
        ZeRO stages that fit, ``zeros``, the level-1) bound takes the least of: the fastest layers (no
        recompute, no ZeRO-3 unless only it fits, the most chunks), one per sp; None if the group has none
        (not ``built``: whether it has them). They differ between the groups of a shape only in mb and vp."""
        p = self.p
        all_zeros, sps, chunk_opts, opts = self.values(s)
        zeros = all_zeros if zeros is None else zeros
        if not (zeros and sps and self.recomputes(s.pp, vp) and chunk_opts and opts):
            return None
        if not built:
            return True
        bucket = next((b for b in opts if b > 0), opts[0])
        ch, z_fast = max(chunk_opts), min(zeros, key=lambda z: z == 3)
        return [
            Choice(
                s,
                mb,
                vp,
                sp,
                ch,
                z_fast,
                "none",
                None,
                bucket,
                p.framework,
                grad_dtype=p.grad_dtype,
                options=p.options,
            )
            for sp in sps
        ]

    def _slow_rec(self, s, vp: int) -> str:
        recs = self.recomputes(s.pp, vp)
        return "full" if ("full", None) in recs else ("selective" if ("selective", None) in recs else recs[0][0])

    def _pipeline_lb_s(self, bounds: Bounds, s, mb: int, vp: int, screened: bool = False) -> float | None:
        """The level 0 or, ``screened``, level 1 bound; None if no choice of the group can be built or fit."""
        p = self.p
        zeros, sps, chunk_opts, opts = self.values(s)
        recs = self.recomputes(s.pp, vp)
        if not (zeros and sps and recs and chunk_opts and opts):
            return None
        # a positive bucket for the pipeline and memory probes (neither depends on the bucket size)
        bucket = next((b for b in opts if b > 0), opts[0])
        if screened:  # the ZeRO stages whose leanest choice (full recompute, sp) fits in memory
            slow_rec = self._slow_rec(s, vp)
            zeros = bounds.fitting_zeros(
                Choice(
                    s,
                    mb,
                    vp,
                    max(sps),
                    1,
                    zeros[0],
                    slow_rec,
                    None,
                    bucket,
                    p.framework,
                    grad_dtype=p.grad_dtype,
                    options=p.options,
                ),
                zeros,
            )
            if not zeros:
                return None
        return min(bounds.pipeline_lb_s(c, any_chunks=True) for c in self._fast_choices(s, mb, vp, zeros))
