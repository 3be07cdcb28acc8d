"""What the bounds share: a layer's terms at its cheapest, a position's extras outside its layers, the PP
sends' floor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.engines.analytic import stage_timing
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.compose.schedule import interleaved_p2p_exposed_s

from ..candidates import Shape
from ..choice import Choice
from ..tables import Tables, probe_split


STAGE_OF = {"first": 0, "only": 0, "mid": 1}


class BoundTerms:
    """The shared terms of :class:`search.bounds.Bounds` (mixed in; reads ``p``, ``t`` and ``rt``, fills
    ``_extras``)."""

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
            st = stage_timing(
                p.model,
                self.rt.p.cluster,
                p.workload,
                base.config(p.limits.flash_attention, lps, p.limits.fused_elementwise),
                stage,
            )
            dl, ml = self.layers(base, self.rt)
            nd, nm = self.counts(kind, n0)
            lay = [nd * dl[i] + nm * ml[i] for i in range(4)]
            self._extras[key] = (
                st.microbatch_s - st.ledger.exposed_s.get("pp", 0.0) - lay[0],
                st.fwd_s - lay[2],
                st.bwd_s - lay[3],
            )
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
            out = self._extras[key] = collective_time_s(
                "p2p", msg, s.pp, group_stride("pp", s.tp, s.cp, s.dp), p.cluster
            )
        return out

    def p2p_floor_s(self, c: Choice) -> float:
        """The least PP send/recv seconds of a stage's micro-batch time, as ``stage_timing`` charges its
        ``2 vp`` sends (:func:`sends_floor`)."""
        pp = c.shape.pp
        if pp == 1:
            return 0.0
        key = ("p2p_floor", c.shape, c.mb, c.vp)
        out = self._extras.get(key)
        if out is None:
            m = c.micro_batches(self.p.workload.global_batch)
            out = self._extras[key] = float(sends_floor(self.p2p_s(c), pp, m, c.vp))
        return out


def sends_floor(t, pp: int, m, vp):
    """The least seconds ``2 vp`` PP sends of ``t`` seconds each add to a stage's micro-batch time: each fully with
    ``vp = 1``; interleaved, :func:`costmodel.compose.schedule.interleaved_p2p_exposed_s`, linear in the hidden part
    ``min(t, chunk forward)``, so at its least at either end (no forward, or a forward covering the send), whatever
    the stage holds. Scalars or numpy arrays (``pp > 1``)."""
    ends = np.minimum(interleaved_p2p_exposed_s(t, 0.0, pp, m, vp), interleaved_p2p_exposed_s(t, t, pp, m, vp))
    return np.where(np.equal(vp, 1), 2 * t, 2 * vp * ends)
