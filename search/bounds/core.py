"""The bounds of one problem's choices: their caches, shared with the tables, and the strong bound that adds them
up."""

from __future__ import annotations

import numpy as np

from costmodel.compose.step import pipeline_s

from ..candidates import stage_kinds
from ..choice import Choice
from ..tables import Tables, stage_weight
from .dp import DPBound
from .memory import MemoryBound
from .optimizer import OptimizerBound
from .pipeline import PipelineBound
from .terms import BoundTerms


class Bounds(BoundTerms, PipelineBound, OptimizerBound, MemoryBound, DPBound):
    """Lower bounds (seconds) and memory screens of choices, cached per sub-choice."""

    def __init__(self, tables: Tables):
        self.t = tables
        self.rt = tables.relaxed()  # the embedding / LM-head probes hold for every DMA assignment
        self.p = tables.p
        self._extras: dict = tables.shared.setdefault("bounds.extras", {})
        self._opt: dict = tables.shared.setdefault("bounds.opt", {})
        self._totals: dict = tables.shared.setdefault("bounds.totals", {})
        self._bytes: dict = tables.shared.setdefault("bounds.bytes", {})  # stored activations, reserve: no fit
        self._caps: dict = tables.fitted.setdefault("bounds.caps", {})  # what fits under the HBM cap
        self._dp_free: dict = tables.shared.setdefault("bounds.dp_free", {})
        self._spans: dict = tables.shared.setdefault("bounds.spans", {})  # dp_span_lb_s's widest windows
        self._screens: dict = tables.shared.setdefault("bounds.screens", {})  # fitting_zeros at a known cap
        self._largest: dict = tables.shared.setdefault("bounds.largest", {})
        self._quick: dict = tables.shared.setdefault("bounds.quick", {})  # quick_lb_s: no memory, so shared too
        self.n = np.arange(self.p.model.layers + 1)

    def strong_lb_s(self, c: Choice, caps: dict) -> float:
        """:meth:`quick_lb_s` plus the water level under memory caps and the DP exposure bound."""
        p, s = self.p, c.shape
        L, pp, vp = p.model.layers, s.pp, c.vp
        t_quick, o_lb = self._quick_parts(c)
        total = self._total_s(c)[0]
        if pp == 1:
            return t_quick + o_lb + self.dp_lb_s(c, caps)
        dl, ml = self.layers(c)
        slope = min(self.plain_floor(c)) + (min(dl[1], ml[1]) if c.recompute_layers is None else 0.0)
        p2p = self.p2p_floor_s(c)
        kinds = stage_kinds(pp)
        base = {k: self.extras(c, k, exact=True)[0] + p2p for k in kinds}

        terms = [(stage_weight(k, pp), caps[k][0], caps[k][1], base[k]) for k in kinds]

        def held(tau):  # layers the stages hold when filled up to time tau (summed in kinds order, from 0)
            h = 0
            for w, lo_k, hi_k, b in terms:
                h += w * min(hi_k, max(lo_k, (tau - b) / slope))
            return h

        lo, hi = 0.0, max(base.values()) + slope * L
        for _ in range(40):  # held() is nondecreasing in tau
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if held(mid) < L else (lo, mid)
        k = c.recompute_layers
        r_min = 0.0 if k is None else min(dl[1], ml[1])  # (with k None it is in the slope)
        lo = max([lo] + [base[kind] + caps[kind][0] * slope + min(caps[kind][0], k or 0) * r_min for kind in kinds])
        water = pipeline_s(lo, total, c.micro_batches(p.workload.global_batch), vp) * (1 - 1e-9)
        return max(t_quick, water) + o_lb + self.dp_lb_s(c, caps)
