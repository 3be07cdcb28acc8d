"""Lower bounds on the table step time of a :class:`~search.choice.Choice` over all its splits.

Used by :mod:`search.presolve` to discard choices that cannot beat an incumbent, and to give
the CP-SAT model a per-choice bound. Each bound relaxes the stage split and leaves out terms
that are never negative, so it never exceeds the exact table objective (tests check this):

* **pipeline**: ``(m - 1/v) * slowest + sum / v`` (:func:`costmodel.step.pipeline_s`); the sum
  of the stages is at least ``total``, every layer, recompute, embedding and LM head once; the
  slowest stage at least the mean ``total / p``, at least the largest stage of any split the
  search allows (first, equal middle stages, last), and at least the "water level" ``tau`` at
  which stages filled up to ``tau`` (each capped by the layers its memory allows) hold all ``L``
  layers;
* **optimizer**: at least that of the largest stage (:meth:`Bounds.largest_stage`), or of the
  smallest first / last stage;
* **DP exposure**: on stage 0 (no 1F1B head start) at least ``max(0, t - window)`` for the
  gradient reduction and the parameter gather, minimised over stage 0's possible sizes.

Memory is bounded below by model state plus the stored activations of the in-flight
micro-batches and the reserve (no working layer, logits, embedding output or ZeRO-3 buffers).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.analytic import stage_timing
from costmodel.step import dp_exposure, even_pieces, pipeline_s
from costmodel.collectives import collective_time_s, group_stride
from costmodel.compute import ACT_BYTES, layer_ops
from costmodel.memory import reserved_bytes
from costmodel.stage_contents import expert_dp
from costmodel.pipeline import in_flight_chunks, interleaved_p2p_exposed_s
from costmodel.split_overhead import with_split_overheads

from .candidates import Shape, pinned_split, splits, stage_kinds, stage_unit

from .choice import Choice
from .offload_choice import optimizer_s
from .tables import Tables, probe_split, stage_weight

STAGE_OF = {"first": 0, "only": 0, "mid": 1}


class Bounds:
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
        self.n = np.arange(self.p.model.layers + 1)

    # ------------------------------------------------------------------ helpers
    def _pair(self, of) -> tuple:
        """``(of(dense), of(MoE))`` for the model's layers: an all-MoE model's dense entry is its MoE
        layer, a dense model's MoE entry its dense layer (then ``min`` over the two is the model's
        cheapest layer)."""
        m = self.p.model
        if not m.is_moe:
            d = of(False)
            return d, d
        moe = of(True)
        return (of(False) if m.dense_layers else moe), moe

    def layers(self, c: Choice, tables: Tables | None = None):
        """(dense layer, MoE layer) terms of :meth:`search.tables.Tables.layer` (:meth:`_pair`)."""
        t = tables or self.t
        return self._pair(lambda moe: t.layer(c, moe))

    def plain_floor(self, c: Choice) -> tuple[float, float]:
        """(dense, MoE) per-layer ``U`` floor: with partial recompute (``recompute_layers`` k) the stage runs k
        layers of ``c`` and the rest as plain layers (:meth:`search.tables.Tables.timing`), whose ``U`` can be
        the smaller one (their exposed communication differs), so the floor is the lesser of the two."""
        dl, ml = self.layers(c)
        if c.recompute_layers is None:
            return dl[0], ml[0]
        dp, mp = self.layers(replace(c, recompute="none", recompute_layers=None))
        return min(dl[0], dp[0]), min(ml[0], mp[0])

    def activations(self, c: Choice) -> tuple[float, float]:
        """(dense layer, MoE layer) activation bytes (:meth:`search.tables.Tables.activations`)."""
        return self._pair(lambda moe: self.t.activations(c, moe))

    @staticmethod
    def compute_twin(c: Choice) -> Choice:
        """A choice whose layers have ``c``'s forward, backward and recompute times, shared by
        every ZeRO stage and DP degree: a layer's compute does not depend on either (only its
        communication does), except for FSDP2's copy-out / copy-in, and an explicit DMA
        assignment names the ZeRO streams (``tests/test_search_tables.py`` holds the rule)."""
        if c.framework == "fsdp2" or c.dma is not None or c.zero == 0:
            return c
        return replace(c, zero=0)

    def counts(self, kind: str, n):
        """(dense, MoE) layers of a stage at ``kind`` holding ``n`` layers (dense layers first)."""
        if not self.p.model.is_moe:
            return n, n * 0
        nd = np.minimum(n, self.p.model.dense_layers) if kind in ("first", "only") else n * 0
        return nd, n - nd

    def extras(self, c: Choice, kind: str, exact: bool = False) -> tuple[float, float, float]:
        """(time, forward, backward) of a stage position outside its layers (embedding, LM head,
        loss), probed once per (tp, cp, mb, sp) on a plain two-stage (one-stage for ``only``)
        pipeline; the PP send/recv it includes is taken out (see :meth:`p2p_s`). A choice with a
        DMA assignment of its own (engine-bound devices: its streams may share engines with the
        stage's other traffic, which no shared probe reproduces) takes none in the quick bound and,
        with ``exact`` (the strong bound, far fewer calls), the tables' own."""
        if c.dma is not None:
            return self.t.stage_extras(c, kind) if exact else (0.0, 0.0, 0.0)
        s = c.shape
        key = (s.tp, s.cp, c.mb, c.sp, kind)
        if key not in self._extras:
            p = self.p
            if kind == "mid":
                self._extras[key] = (0.0, 0.0, 0.0)
                return self._extras[key]
            shape = Shape(s.tp, s.cp, 1 if kind == "only" else 2, 1, 1)
            base = Choice(shape, c.mb, 1, c.sp, 1, 0, "none", None, 40.0)
            n0 = p.model.layers if kind == "only" else max(1, p.model.dense_layers)
            lps, stage = probe_split(p, base, kind, n0)
            st = stage_timing(p.model, self.rt.p.cluster, p.workload, base.config(p.limits.flash_attention, lps, p.limits.fused_elementwise), stage)
            dl, ml = self.layers(base, self.rt)
            nd, nm = self.counts(kind, n0)
            lay = [nd * dl[i] + nm * ml[i] for i in range(4)]
            self._extras[key] = (st.microbatch_s - st.ledger.exposed_s.get("pp", 0.0) - lay[0],
                                 st.fwd_s - lay[2], st.bwd_s - lay[3])
        return self._extras[key]

    def p2p_s(self, c: Choice) -> float:
        """One PP send/recv of a micro-batch's activations, as ``stage_timing`` prices it."""
        s, p = c.shape, self.p
        if s.pp == 1:
            return 0.0
        key = ("p2p", s, c.mb)
        out = self._extras.get(key)
        if out is None:
            msg = c.mb * p.workload.seq_len / s.cp * p.model.hidden * ACT_BYTES / s.tp
            out = self._extras[key] = collective_time_s("p2p", msg, s.pp, group_stride("pp", s.tp, s.cp, s.dp),
                                                        p.cluster)
        return out

    def p2p_floor_s(self, c: Choice) -> float:
        """The least PP send/recv seconds of a stage's micro-batch time, as ``stage_timing`` charges its
        ``2 vp`` sends: each fully with ``vp = 1``; interleaved,
        :func:`costmodel.pipeline.interleaved_p2p_exposed_s`, linear in the hidden part ``min(t, chunk
        forward)``, so at its least at either end (no forward, or a forward covering the send), whatever
        the stage holds."""
        pp = c.shape.pp
        if pp == 1:
            return 0.0
        t = self.p2p_s(c)
        if c.vp == 1:
            return 2 * t
        key = ("p2p_floor", c.shape, c.mb, c.vp)
        out = self._extras.get(key)
        if out is None:
            m = c.micro_batches(self.p.workload.global_batch)
            out = self._extras[key] = 2 * c.vp * min(float(interleaved_p2p_exposed_s(t, f, pp, m, c.vp))
                                                     for f in (0.0, t))
        return out

    def _opt_s(self, c: Choice, kind: str, n: int) -> float:
        key = (c.shape, c.zero, c.framework, kind, n, c.options)
        if key not in self._opt:
            s = c.shape
            shard_d = s.dp * s.cp if c.zero >= 1 else 1
            shard_e = expert_dp(c.config()) if c.zero >= 1 else 1
            a = self.t.state(c, kind)
            # the tables' optimizer step (offload's too: nondecreasing in the shard, so the bound stays below)
            self._opt[key] = optimizer_s(c, a["dense"][n] / shard_d + a["expert"][n] / shard_e, self.p.cluster)
        return self._opt[key]

    # ------------------------------------------------------------------ the cheap bound
    def quick_lb_s(self, c: Choice, any_chunks: bool = False) -> float:
        """Mean-stage and largest-stage pipeline bound plus the optimizer bound (no memory); with
        ``any_chunks``, of ``c`` at every chunk count up to its own (:meth:`pipeline_lb_s`)."""
        return self.pipeline_lb_s(c, any_chunks) + self.opt_lb_s(c)

    def _quick_parts(self, c: Choice) -> tuple[float, float]:
        return self.pipeline_lb_s(c), self.opt_lb_s(c)

    def pipeline_lb_s(self, c: Choice, any_chunks: bool = False) -> float:
        """The pipeline term's bound (:func:`costmodel.step.pipeline_s` of the floors below).

        ``any_chunks``: a bound for ``c`` at every chunk count ``<= c.chunks`` at once. More chunks
        never expose more communication, but each piece pays a kernel launch
        (:mod:`costmodel.split_overhead`), which also widens the windows SM collectives stretch:
        ``c``'s layers less their split overhead ``X`` times ``1 + 3 coef / (1 - coef)`` (at most
        three overlapped streams stretch over one window: TP/SP, CP or EP, ZeRO) are below the
        layers at any fewer chunks."""
        total, slow = self._total_s(c, any_chunks)
        slow = max(total / c.shape.pp, slow)
        return pipeline_s(slow, total, c.micro_batches(self.p.workload.global_batch), c.vp)

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
        vp_key = stage_unit(self.p, c.vp) if c.dma is None else c.vp
        key = (c.shape, c.mb, vp_key, c.sp, c.chunks, c.recompute, c.recompute_layers, c.per_microbatch(), c.dma,
               any_chunks and c.chunks > 1)
        out = self._totals.get(key)
        if out is None:
            out = self._totals[key] = self._total_parts(c, any_chunks and c.chunks > 1)
        x = self.p2p_floor_s(c)  # every stage's sends (not in the parts: it reads vp and m)
        return (out[0] + c.shape.pp * x, out[1] + x) if x else out

    def _layer_sums(self, c: Choice, any_chunks: bool) -> tuple:
        """``(sum of U, sum of R, least U, least R)`` over the model's layers (:meth:`layers`; ``U`` at
        :meth:`plain_floor`; with ``any_chunks`` less :meth:`_split_relief`), cached by
        :meth:`search.tables.Tables.layer`'s own key: every pp, dp (but ZeRO-3's) and vp shares them."""
        s = c.shape
        z3 = c.per_microbatch()
        key = ("layer_sums", s.tp, s.cp, s.ep, s.dp if z3 else 1, c.mb, c.sp, c.chunks, c.recompute,
               c.recompute_layers is None, z3, c.dma, c.grad_dtype, c.options, any_chunks)
        out = self._totals.get(key)
        if out is None:
            L, d = self.p.model.layers, self.p.model.dense_layers
            dl, ml = self.layers(c)
            ud, um = self.plain_floor(c)
            if any_chunks:  # the relief lowers a layer's U whatever its recompute, so the floor's min too
                (du_d, dr_d), (du_m, dr_m) = self._split_relief(c)
                dl, ml = (max(0.0, dl[0] - du_d), max(0.0, dl[1] - dr_d)), (max(0.0, ml[0] - du_m), max(0.0, ml[1] - dr_m))
                ud, um = max(0.0, ud - du_d), max(0.0, um - du_m)
            n_dense = d if self.p.model.is_moe else L
            out = self._totals[key] = (n_dense * ud + (L - n_dense) * um, n_dense * dl[1] + (L - n_dense) * ml[1],
                                       min(ud, um), min(dl[1], ml[1]))
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
        key = ("k_free", c.shape, c.mb, vp_key, c.sp, c.chunks, c.recompute, c.recompute_layers is None,
               c.per_microbatch(), c.dma, any_chunks)
        out = self._totals.get(key)
        if out is None:
            pp = c.shape.pp
            kinds = stage_kinds(pp)
            x = {kind: self.extras(c, kind) for kind in kinds}
            x_sum = sum(stage_weight(kind, pp) * x[kind][0] for kind in kinds)
            out = self._totals[key] = self._layer_sums(c, any_chunks) + (
                x_sum, x["first"][0] if pp > 1 else 0.0, x["last"][0] if pp > 1 else 0.0)
        return out

    def largest_stage(self, pp: int, vp: int, k: int | None = None) -> int:
        """The fewest layers the largest stage can hold over every split the search allows (first,
        equal middle stages, last; :func:`search.candidates.splits`), with partial recompute of
        ``k`` layers one stage holding at least ``k`` (:func:`search.cpsat.add_split`)."""
        key = (pp, vp, k)
        if key not in self._largest:
            p = self.p
            sizes = [max(sp) for sp in splits(p.model.layers, pp, stage_unit(p, vp), max(1, p.model.dense_layers),
                                               p.limits.uneven_stages, pinned_split(p))]
            sizes = [n for n in sizes if k is None or n >= k]
            self._largest[key] = min(sizes, default=p.model.layers)
        return self._largest[key]

    def opt_lb_s(self, c: Choice) -> float:
        """Optimizer bound: the largest stage (:meth:`largest_stage`), the smallest first / last."""
        key = (c.shape, c.zero, c.framework, c.vp)
        if key not in self._opt:
            self._opt[key] = self._opt_lb(c)
        return self._opt[key]

    def _opt_lb(self, c: Choice) -> float:
        L, d, pp, vp = self.p.model.layers, self.p.model.dense_layers, c.shape.pp, stage_unit(self.p, c.vp)
        kinds = stage_kinds(pp)
        n_big = self.largest_stage(pp, c.vp)
        return max(self._opt_s(c, kinds[0], min(max(vp, d), L)), self._opt_s(c, kinds[-1], L if pp == 1 else vp),
                   min(self._opt_s(c, kind, min(n_big, L)) for kind in kinds))

    # ------------------------------------------------------------------ memory
    def mem_lb(self, c: Choice, kind: str):
        """Lower bound of a stage's peak memory for every layer count ``n`` (array over n)."""
        acts, r1_acts = self._mem_acts(c, kind)
        r0, _ = self._reserve(c)
        return self.t.state(c, kind)["state"] + acts + r0 + r1_acts

    def _mem_acts(self, c: Choice, kind: str) -> tuple:
        """(stored activations of the in-flight micro-batches, their reserve ``r1 * acts``) over n:
        what :meth:`mem_lb` adds to the model state, shared by every ZeRO stage (the caps of a
        group's ZeRO stages differ only in the state)."""
        key = ("acts", c.shape, c.mb, c.vp, c.sp, c.recompute, c.recompute_layers, c.framework, c.options, kind)
        out = self._bytes.get(key)
        if out is not None:
            return out
        p, s = self.p, c.shape
        stored = self._stored(c, kind)
        stage = STAGE_OF.get(kind, s.pp - 1)
        chunks = in_flight_chunks(s.pp, c.micro_batches(p.workload.global_batch), c.vp, stage)
        acts = stored / c.vp * chunks
        _, r1 = self._reserve(c)
        out = self._bytes[key] = (acts, r1 * acts)
        return out

    def _stored(self, c: Choice, kind: str):
        """Activation bytes a stage at ``kind`` stores per micro-batch over its layer count ``n``: they
        depend on the layers' shape (tp, cp, ep), not on pp or dp, so the groups of every pp and dp
        share them (:meth:`_mem_acts` scales them by the in-flight chunks)."""
        s = c.shape
        key = ("stored", s.tp, s.cp, s.ep, c.mb, c.sp, c.recompute, c.recompute_layers, c.framework, c.options, kind,
               s.pp == 1)  # (an activation offload runs at pp = 1 only)
        out = self._bytes.get(key)
        if out is None:
            n = self.n
            a_d, a_m = self.activations(c)
            nd, nm = self.counts(kind, n)
            if c.recompute == "full":
                li = self.t.layer_input_bytes(c)
                kk = n if c.recompute_layers is None else np.minimum(n, c.recompute_layers)
                out = kk * li + np.maximum(0, nd - kk) * a_d + (n - np.maximum(kk, nd)) * a_m
            else:  # less what an activation offload frees (a pp = 1 stage: its one count n = L)
                out = nd * a_d + nm * a_m - self.t.offloaded_bytes(c)
            self._bytes[key] = out
        return out

    def _reserve(self, c: Choice) -> tuple[float, float]:
        """:func:`costmodel.memory.reserved_bytes` of ``c``'s shape as ``r0 + r1 * activations``
        (affine in the activations), once per shape."""
        key = ("reserve", c.shape)
        if key not in self._bytes:
            cfg = c.config()
            r0 = reserved_bytes(cfg, 0.0)
            self._bytes[key] = (r0, reserved_bytes(cfg, 1.0) - r0)
        return self._bytes[key]

    def caps(self, c: Choice) -> dict | None:
        """``{kind: (fewest, most) layers}`` a stage may hold, or None when no split can fit
        (cached by what memory depends on: not chunks, bucket or DMA assignment)."""
        key = (c.shape, c.mb, c.vp, c.sp, c.zero, c.framework, c.recompute, c.recompute_layers)
        if key not in self._caps:
            self._caps[key] = self._caps_of(c)
        return self._caps[key]

    def fitting_zeros(self, c: Choice, zeros: list) -> list:
        """The ZeRO stages ``z`` of ``zeros`` for which :meth:`caps` of ``c`` at stage ``z`` is not None,
        their caps cached as :meth:`caps` caches them: the same arithmetic, but the stored activations and
        reserve, which the stages share, looked up once per position and the stages compared together."""
        key = (c.shape, c.mb, c.vp, c.sp, None, c.framework, c.recompute, c.recompute_layers)
        todo = [z for z in zeros if key[:4] + (z,) + key[5:] not in self._caps]
        if todo:
            cap, screens = self.p.hbm_cap_bytes, self._screens
            cs = {}
            for z in todo:
                k = key[:4] + (z,) + key[5:]
                seen = screens.get(k)  # (cap, caps, witness) of a screen at another cap (the first solve's)
                if seen is not None and cap <= seen[0] and (seen[1] is None or seen[2] <= cap):
                    self._caps[k] = seen[1]
                else:
                    cs[z] = replace(c, zero=z)
            if cs:
                for z, (caps, witness) in zip(cs, self._caps_of_many(list(cs.values()))):
                    k = key[:4] + (z,) + key[5:]
                    self._caps[k] = caps
                    screens[k] = (cap, caps, witness)
        return [z for z in zeros if self._caps[key[:4] + (z,) + key[5:]] is not None]

    def _caps_of_many(self, cs: list) -> list:
        """:meth:`_caps_of` of choices that differ only in the ZeRO stage (so in the model state only), each
        with its witness: the largest of the memory bounds the caps were read at (every position's at 0 layers
        and at the most that fit; inf when none fits).

        The witness makes a screen reusable at a smaller cap ``C'`` (the margin solve,
        :func:`search.solve._keep_margin`, screens the same groups with less HBM): fits shrink, so caps that
        are None stay None (0 layers already overflow, or the most that fit stays below the fewest a split
        needs, or the positions together hold fewer than ``L``); caps with witness ``<= C'`` are unchanged (at
        every position the most that fit still fits, nothing beyond it did, and the fewest is not read from
        memory). Only the screens whose witness lies between ``C'`` and the first cap are computed again: the
        groups whose memory sits within the margin of the cap."""
        c = cs[0]
        p, vp, L = self.p, stage_unit(self.p, c.vp), self.p.model.layers
        kinds = stage_kinds(c.shape.pp)
        out: list = [{} for _ in cs]
        witness = [0.0 for _ in cs]
        alive = list(range(len(cs)))
        r0, _ = self._reserve(c)
        for kind in kinds:
            lo = L if kind == "only" else (max(vp, p.model.dense_layers) if kind == "first" else vp)
            lo = vp * math.ceil(lo / vp)
            acts, r1_acts = self._mem_acts(c, kind)
            mem = np.stack([self.t.state(cs[i], kind)["state"] for i in alive]) + acts + r0 + r1_acts
            fits = mem <= p.hbm_cap_bytes
            last = fits.shape[1] - 1 - np.argmax(fits[:, ::-1], axis=1)
            still = []
            for j, i in enumerate(alive):
                hi = int(last[j]) if fits[j, 0] else -1  # the most that fits; memory grows with n
                if hi >= 0:
                    witness[i] = max(witness[i], float(mem[j, 0]), float(mem[j, hi]))
                hi = min(hi, L) // vp * vp if hi >= 0 else -1
                if hi < lo:
                    out[i] = None
                    continue
                out[i][kind] = (lo, hi)
                still.append(i)
            alive = still
            if not alive:
                break
        pp = c.shape.pp
        for i in alive:
            o = out[i]
            if sum(stage_weight(k, pp) * o[k][1] for k in kinds) < L or sum(stage_weight(k, pp) * o[k][0]
                                                                          for k in kinds) > L:
                out[i] = None
        return [(o, w if o is not None else math.inf) for o, w in zip(out, witness)]

    def _caps_of(self, c: Choice) -> dict | None:
        p, vp, L = self.p, stage_unit(self.p, c.vp), self.p.model.layers
        kinds = stage_kinds(c.shape.pp)
        out = {}
        for kind in kinds:
            lo = L if kind == "only" else (max(vp, p.model.dense_layers) if kind == "first" else vp)
            lo = vp * math.ceil(lo / vp)
            fits = self.mem_lb(c, kind) <= p.hbm_cap_bytes
            hi = len(fits) - 1 - int(np.argmax(fits[::-1])) if fits[0] else -1  # the most that fits; memory grows with n
            hi = min(hi, L) // vp * vp if hi >= 0 else -1
            if hi < lo:
                return None
            out[kind] = (lo, hi)
        pp = c.shape.pp
        if sum(stage_weight(k, pp) * out[k][1] for k in kinds) < L or sum(stage_weight(k, pp) * out[k][0]
                                                                            for k in kinds) > L:
            return None
        return out

    # ------------------------------------------------------------------ the strong bound
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
        and ``dp_buckets`` read none of those), and :func:`costmodel.step.dp_exposure` is nonincreasing in
        a stage's forward and backward windows, so the exposure at the widest per-layer and per-position
        windows any of them has bounds each one's, at one computation for all of them."""
        c = members[0]
        # the windows read only sp, chunks and recompute of the compute twin (with a DMA assignment's own
        # extras, the recompute count too): one entry per variant, shared by the spans of every bucket size
        # (and ZeRO stage, where the twin drops it) of the group
        twin = self.compute_twin(c)
        own = c.dma is not None
        variants = {(m.sp, m.chunks, m.recompute,
                     -1 if not own or m.recompute_layers is None else m.recompute_layers): m for m in members}
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
            caps = {k: (L if k == "only" else (max(u, p.model.dense_layers) if k == "first" else u),
                        L if pp == 1 else L - (pp - 1) * u) for k in kinds}
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
            rows.append([a["t_grad"][n], a["t_param"][n], b["lat_grad"], b["lat_param"], b["buckets"], window, fwd,
                         k_first, k_rest])
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
