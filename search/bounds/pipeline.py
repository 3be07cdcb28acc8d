"""The pipeline term's bound: every stage's micro-batch time summed, and a floor of the slowest stage."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.compose.step import pipeline_s
from costmodel.physics.kernels.compute import layer_ops
from costmodel.physics.comm.split_overhead import with_split_overheads

from ..candidates import pinned_split, splits, stage_kinds, stage_unit
from ..choice import Choice
from ..tables import stage_weight
from .terms import sends_floor


def lb_of(total, slow, pp: int, m, vp, most=max):
    """The pipeline bound of stages summing to ``total`` whose slowest is at least ``slow`` and the mean
    ``total / pp``: :func:`costmodel.compose.step.pipeline_s`. Scalars, or numpy arrays with ``most=np.maximum``
    (:meth:`PipelineBound.pipeline_lbs_s`)."""
    return pipeline_s(most(total / pp, slow), total, m, vp)


def with_sends(total, slow, x, pp: int):
    """``(total, slow)`` with every stage's PP sends' floor ``x`` added (:meth:`PipelineBound.p2p_floor_s`)."""
    return total + pp * x, slow + x


class PipelineBound:
    """The pipeline bound of :class:`search.bounds.Bounds` (mixed in; reads the shared terms, fills ``_totals``
    and ``_largest``)."""

    def quick_lb_s(self, c: Choice, any_chunks: bool = False) -> float:
        """Mean-stage and largest-stage pipeline bound plus the optimizer bound (no memory); with
        ``any_chunks``, of ``c`` at every chunk count up to its own (:meth:`pipeline_lb_s`). Memoised per choice in
        the tables' memory-free caches: the margin solve's presolve (:meth:`search.tables.Tables.with_problem`)
        asks again for most of the first presolve's choices."""
        key = (c, any_chunks)
        out = self._quick.get(key)
        if out is None:
            out = self._quick[key] = self.pipeline_lb_s(c, any_chunks) + self.opt_lb_s(c)
        return out

    def _quick_parts(self, c: Choice) -> tuple[float, float]:
        return self.pipeline_lb_s(c), self.opt_lb_s(c)

    def pipeline_lb_s(self, c: Choice, any_chunks: bool = False) -> float:
        """The pipeline term's bound (:func:`costmodel.compose.step.pipeline_s` of the floors below).

        ``any_chunks``: a bound for ``c`` at every chunk count ``<= c.chunks`` at once. More chunks
        never expose more communication, but each piece pays a kernel launch
        (:mod:`costmodel.physics.comm.split_overhead`), which also widens the windows SM collectives stretch:
        ``c``'s layers less their split overhead ``X`` times ``1 + 3 coef / (1 - coef)`` (at most
        three overlapped streams stretch over one window: TP/SP, CP or EP, ZeRO) are below the
        layers at any fewer chunks."""
        total, slow = self._total_s(c, any_chunks)
        return lb_of(total, slow, c.shape.pp, c.micro_batches(self.p.workload.global_batch), c.vp)

    def pipeline_lbs_s(self, base: list[Choice], at: list[tuple[int, int]]) -> np.ndarray:
        """:meth:`pipeline_lb_s` ``(c, any_chunks=True)`` of ``replace(b, mb=mb, vp=vp)`` for every ``(mb, vp)`` of
        ``at`` (rows) and choice ``b`` of ``base`` (columns) at once, equal to it bit for bit
        (``tests/test_presolve_bounds.py``): the level-0 group bounds of a whole shape
        (:meth:`search.group_expander.Expander.group_lb_s`). ``base`` shares one shape, takes no DMA assignment
        of its own and no partial recompute; the parts are looked up once per micro-batch size, choice and stage
        unit (a choice built only then), the PP sends' floor and the bound are taken over arrays."""
        p = self.p
        pp, gb = base[0].shape.pp, p.workload.global_batch
        assert all(b.dma is None and b.recompute_layers is None and b.shape == base[0].shape for b in base)
        parts: dict = {}
        sends: dict = {}  # mb -> (one send's seconds, micro-batches)
        total, slow, t, m, vp = [], [], [], [], []
        for mb, v in at:
            unit = stage_unit(p, v)
            for j, b in enumerate(base):
                out = parts.get((mb, j, unit))
                if out is None:
                    c = replace(b, mb=mb, vp=v)
                    out = parts[(mb, j, unit)] = self._parts(c, True)
                    if mb not in sends:
                        sends[mb] = (self.p2p_s(c), c.micro_batches(gb))
                total.append(out[0])
                slow.append(out[1])
            t_mb, m_mb = sends[mb]
            t.append(t_mb)
            m.append(m_mb)
            vp.append(v)
        t, m, vp = np.array(t)[:, None], np.array(m)[:, None], np.array(vp)[:, None]
        shape = (len(at), len(base))
        x = sends_floor(t, pp, m, vp) if pp > 1 else np.zeros((len(at), 1))
        total, slow = with_sends(np.reshape(total, shape), np.reshape(slow, shape), x, pp)
        return lb_of(total, slow, pp, m, vp, np.maximum)

    def _split_relief(self, c: Choice) -> tuple:
        """``((dU, dR) dense, (dU, dR) MoE)``: what :meth:`pipeline_lb_s` takes off ``c``'s layer
        terms for ``any_chunks``."""
        sh = c.shape
        key = (sh.tp, sh.cp, sh.ep, c.mb, c.sp, c.chunks, c.recompute != "none")
        cache = self.t.shared.setdefault("bounds.split_relief", {})
        if key in cache:
            return cache[key]
        coef = self.p.cluster.device.comm_compute_interference
        k = 1 + 3 * coef / (1 - coef)
        cfg = c.config(self.p.limits.flash_attention, fused_elementwise=self.p.limits.fused_elementwise)
        dev, ov = self.p.cluster.device, self.p.cluster.device.kernel_overhead_s

        def of(moe):
            ops = layer_ops(self.p.model, dev, self.p.workload, cfg, moe)
            split = with_split_overheads(ops, cfg, ov)
            xf = sum(o.fwd_s for o in split) - sum(o.fwd_s for o in ops)
            xb = sum(o.bwd_s for o in split) - sum(o.bwd_s for o in ops)
            return k * (xf + xb), (k * xf if c.recompute != "none" else 0.0)

        cache[key] = self._pair(of)
        return cache[key]

    def _total_s(self, c: Choice, any_chunks: bool = False) -> tuple[float, float]:
        """(every stage's micro-batch time summed, a floor of the slowest stage: the largest stage
        at its cheapest, and the first and last stages holding their fewest layers with the
        embedding / LM head), both at most their value for any split (0 floor when ``pp = 1``), each
        stage with its PP sends' floor (:meth:`p2p_floor_s`, added to the cached parts).

        The parts depend on ``vp`` only through the stage unit, unless a DMA assignment of its own
        takes the tables' extras: interleaves sharing it (DeepSeek-V3's 61 layers: VP 2, 4 and 8)
        share one entry."""
        out = self._parts(c, any_chunks)
        x = self.p2p_floor_s(c)  # every stage's sends (not in the parts: it reads vp and m)
        return with_sends(*out, x, c.shape.pp) if x else out

    def _parts(self, c: Choice, any_chunks: bool) -> tuple[float, float]:
        """:meth:`_total_parts`, cached (by the stage unit, not ``vp``, without a DMA assignment of its own)."""
        vp_key = stage_unit(self.p, c.vp) if c.dma is None else c.vp
        key = (
            c.shape,
            c.mb,
            vp_key,
            c.sp,
            c.chunks,
            c.recompute,
            c.recompute_layers,
            c.per_microbatch(),
            c.dma,
            any_chunks and c.chunks > 1,
        )
        out = self._totals.get(key)
        if out is None:
            out = self._totals[key] = self._total_parts(c, any_chunks and c.chunks > 1)
        return out

    def _layer_sums(self, c: Choice, any_chunks: bool) -> tuple:
        """``(sum of U, sum of R, least U, least R)`` over the model's layers (:meth:`layers`; ``U`` at
        :meth:`plain_floor`; with ``any_chunks`` less :meth:`_split_relief`), cached by
        :meth:`search.tables.Tables.layer`'s own key: every pp, dp (but ZeRO-3's) and vp shares them."""
        s = c.shape
        z3 = c.per_microbatch()
        key = (
            "layer_sums",
            s.tp,
            s.cp,
            s.ep,
            s.dp if z3 else 1,
            c.mb,
            c.sp,
            c.chunks,
            c.recompute,
            c.recompute_layers is None,
            z3,
            c.dma,
            c.grad_dtype,
            c.options,
            any_chunks,
        )
        out = self._totals.get(key)
        if out is None:
            L, d = self.p.model.layers, self.p.model.dense_layers
            dl, ml = self.layers(c)
            ud, um = self.plain_floor(c)
            if any_chunks:  # the relief lowers a layer's U whatever its recompute, so the floor's min too
                (du_d, dr_d), (du_m, dr_m) = self._split_relief(c)
                dl, ml = (
                    (max(0.0, dl[0] - du_d), max(0.0, dl[1] - dr_d)),
                    (max(0.0, ml[0] - du_m), max(0.0, ml[1] - dr_m)),
                )
                ud, um = max(0.0, ud - du_d), max(0.0, um - du_m)
            n_dense = d if self.p.model.is_moe else L
            out = self._totals[key] = (
                n_dense * ud + (L - n_dense) * um,
                n_dense * dl[1] + (L - n_dense) * ml[1],
                min(ud, um),
                min(dl[1], ml[1]),
            )
        return out

    def _total_parts(self, c: Choice, any_chunks: bool = False) -> tuple[float, float]:
        p, s = self.p, c.shape
        L, pp, vp, k = p.model.layers, s.pp, c.vp, c.recompute_layers
        u = stage_unit(p, vp)  # layer-count step of a stage
        u_sum, r_all, u_min, r_min, x_sum, x_first, x_last = self._k_free_parts(c, any_chunks)
        if k is None:
            r_sum = r_all
        else:  # concentrate the layers: (p-1) stages of vp layers and one with the rest
            r_sum = r_min * ((pp - 1) * min(u, k) + min(L - (pp - 1) * u, k))
        total = u_sum + r_sum + x_sum
        if pp == 1:
            return total, 0.0

        def floor(n):  # a stage of n layers, each at its cheapest
            return n * u_min + (n if k is None else min(n, k)) * r_min

        lo_first = u * math.ceil(max(1, p.model.dense_layers) / u)
        slow = max(floor(self.largest_stage(pp, vp, k)), x_first + floor(lo_first), x_last + floor(u))
        return total, slow

    def _k_free_parts(self, c: Choice, any_chunks: bool) -> tuple:
        """What :meth:`_total_parts` reads besides the recompute count ``k`` (a GPT-3 search asks for every
        ``k`` of one stage: ~12,000 totals over far fewer of these): :meth:`_layer_sums`, the positions'
        extras summed by their stage counts, the first and last stages' extras."""
        vp_key = stage_unit(self.p, c.vp) if c.dma is None else c.vp
        key = (
            "k_free",
            c.shape,
            c.mb,
            vp_key,
            c.sp,
            c.chunks,
            c.recompute,
            c.recompute_layers is None,
            c.per_microbatch(),
            c.dma,
            any_chunks,
        )
        out = self._totals.get(key)
        if out is None:
            pp = c.shape.pp
            kinds = stage_kinds(pp)
            x = {kind: self.extras(c, kind) for kind in kinds}
            x_sum = sum(stage_weight(kind, pp) * x[kind][0] for kind in kinds)
            out = self._totals[key] = self._layer_sums(c, any_chunks) + (
                x_sum,
                x["first"][0] if pp > 1 else 0.0,
                x["last"][0] if pp > 1 else 0.0,
            )
        return out

    def largest_stage(self, pp: int, vp: int, k: int | None = None) -> int:
        """The fewest layers the largest stage can hold over every split the search allows (first,
        equal middle stages, last; :func:`search.candidates.splits`), with partial recompute of
        ``k`` layers one stage holding at least ``k`` (:func:`search.cpsat.add_split`)."""
        key = (pp, vp, k)
        if key not in self._largest:
            p = self.p
            sizes = [
                max(sp)
                for sp in splits(
                    p.model.layers,
                    pp,
                    stage_unit(p, vp),
                    max(1, p.model.dense_layers),
                    p.limits.uneven_stages,
                    pinned_split(p),
                )
            ]
            sizes = [n for n in sizes if k is None or n >= k]
            self._largest[key] = min(sizes, default=p.model.layers)
        return self._largest[key]
