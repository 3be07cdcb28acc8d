"""The DP/ZeRO exposure bound: the least level at which stages whose exposure stays within it hold every layer."""

from __future__ import annotations

import math

import numpy as np

from costmodel.compose.step import dp_exposure, even_pieces

from ..candidates import stage_kinds, stage_unit
from ..choice import Choice
from ..tables import stage_weight
from .terms import STAGE_OF


class DPBound:
    """The DP/ZeRO exposure bound of :class:`search.bounds.Bounds` (mixed in; reads the shared terms and the
    tables' affine terms and buckets, fills ``_dp_free`` and ``_spans``)."""

    def dp_lb_s(self, c: Choice, caps: dict | None = None) -> float:
        """DP/ZeRO exposure: the least level ``delta`` such that stages whose bound
        ``g(n) = max(0, t_grad - (1 + i) window) + max(0, t_param - fwd)`` (stage ``i``'s 1F1B
        head start, ``i = 1`` for the middle stages) stays within ``delta`` can hold all layers.
        Without ``caps`` (every count a split allows) it reads no memory: memoised per choice in the
        tables' memory-free caches, so the margin solve (:meth:`search.tables.Tables.with_problem`)
        takes the first solve's values."""
        if caps is not None:
            return self._dp_lb_s(c, caps)
        out = self._dp_free.get(c)
        if out is None:
            out = self._dp_free[c] = self._dp_lb_s(c, None)
        return out

    def dp_span_lb_s(self, members: list[Choice]) -> float:
        """A DP/ZeRO exposure bound below :meth:`dp_lb_s` (without caps) of each of ``members``:
        choices of one shape, micro-batch, interleave, ZeRO stage, bucket size and DMA assignment that
        differ in sp, chunks and recompute. Their DP traffic is the same (:meth:`search.tables.Tables.affine`
        and ``dp_buckets`` read none of those), and :func:`costmodel.compose.step.dp_exposure` is nonincreasing in
        a stage's forward and backward windows, so the exposure at the widest per-layer and per-position
        windows any of them has bounds each one's, at one computation for all of them."""
        c = members[0]
        # the windows read only sp, chunks and recompute of the compute twin (with a DMA assignment's own
        # extras, the recompute count too): one entry per variant, shared by the spans of every bucket size
        # (and ZeRO stage, where the twin drops it) of the group
        twin = self.compute_twin(c)
        own = c.dma is not None
        variants = {
            (m.sp, m.chunks, m.recompute, -1 if not own or m.recompute_layers is None else m.recompute_layers): m
            for m in members
        }
        key = (c.shape, c.mb, c.vp, twin.zero, c.dma, tuple(sorted(variants)))
        span = self._spans.get(key)
        if span is None:
            span = {}
            for kind in stage_kinds(c.shape.pp):
                rows = []
                for m in variants.values():
                    dl, ml = self.layers(self.compute_twin(m))
                    _, x_fwd, x_bwd = self.extras(m, kind, exact=True)
                    rows.append((dl[2], ml[2], dl[3] + dl[4], ml[3] + ml[4], x_fwd, x_bwd))
                span[kind] = tuple(max(col) for col in zip(*rows))
            self._spans[key] = span
        return self._dp_lb_s(c, None, span)

    def _dp_lb_s(self, c: Choice, caps: dict | None, span: dict | None = None) -> float:
        """:meth:`dp_lb_s`; ``span`` (per position: forward and backward-window seconds per dense and MoE
        layer and outside the layers, :meth:`dp_span_lb_s`) replaces ``c``'s own windows."""
        p, s = self.p, c.shape
        L, pp, vp = p.model.layers, s.pp, c.vp
        kinds = stage_kinds(pp)
        u = stage_unit(p, vp)  # layer-count step of a stage
        if caps is None:
            caps = {
                k: (
                    L if k == "only" else (max(u, p.model.dense_layers) if k == "first" else u),
                    L if pp == 1 else L - (pp - 1) * u,
                )
                for k in kinds
            }
        if span is None:
            dl, ml = self.layers(self.compute_twin(c))  # only the compute entries (windows) are used
        k = c.recompute_layers
        g, held = {}, {}
        for kind in kinds:
            lo, hi = caps[kind]
            held[kind] = np.arange(u * math.ceil(lo / u), hi + 1, u)
            if not len(held[kind]):
                return 0.0
        # only the layer counts some position may hold: the buckets are probed there alone
        # (every term below is elementwise in n, so each entry is the full array's)
        n = np.unique(np.concatenate(list(held.values())))
        rows = []  # per position: the arguments of its exact DP/ZeRO exposure over those n
        for kind in kinds:
            nd, nm = self.counts(kind, n)
            if span is None:
                kd, km = (np.minimum(nd, k), np.minimum(nm, k)) if k is not None else (nd, nm)
                _, x_fwd, x_bwd = self.extras(c, kind, exact=True)
                fwd = nd * dl[2] + nm * ml[2] + x_fwd
                window = nd * dl[3] + nm * ml[3] + x_bwd + kd * dl[4] + km * ml[4]
            else:
                f_d, f_m, w_d, w_m, x_fwd, x_bwd = span[kind]
                fwd, window = nd * f_d + nm * f_m + x_fwd, nd * w_d + nm * w_m + x_bwd
            a, b = self.t.affine(c, kind), self.t.dp_buckets(c, kind, at=n)
            k_first, k_rest = even_pieces(b["buckets"], vp) if b["pieces"] is None else b["pieces"]
            rows.append(
                [
                    a["t_grad"][n],
                    a["t_param"][n],
                    b["lat_grad"],
                    b["lat_param"],
                    b["buckets"],
                    window,
                    fwd,
                    k_first,
                    k_rest,
                ]
            )
        # every position in one call, one row each (dp_exposure is elementwise: the same values as
        # one call per position, as search.tables builds them)
        cols = np.empty((9, len(rows), len(n)))  # filled by broadcast assignment: fewer numpy calls than stacking
        for j, r in enumerate(rows):
            for i in range(9):
                cols[i, j] = r[i]
        stages = np.array([[STAGE_OF.get(kind, pp - 1)] for kind in kinds])
        ex, zx, _, _ = dp_exposure(*cols[:7], stages, pp, vp, n, pieces=(cols[7], cols[8]))
        gks = ex + zx
        for i, kind in enumerate(kinds):
            g[kind] = gks[i][np.searchsorted(n, held[kind])]
        levels = np.unique(np.concatenate(list(g.values())))
        # at every level at once: the most layers each position may hold with g <= level (-1: none),
        # and whether the stages then hold all L; the least level that does (else the highest)
        total = np.zeros(len(levels), dtype=np.int64)
        ok = np.ones(len(levels), dtype=bool)
        for kind in kinds:
            most = np.where(g[kind][None, :] <= levels[:, None], held[kind][None, :], -1).max(axis=1)
            ok &= most >= 0
            total += stage_weight(kind, pp) * most
        enough = ok & (total >= L)
        return float(levels[int(np.argmax(enough))] if enough[-1] else levels[-1])
