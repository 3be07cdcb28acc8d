"""Memory screens: a stage's peak memory bounded below, and the layer counts each position may hold under the
HBM cap."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.physics.memory.stage_memory import reserved_bytes
from costmodel.spec.stages import in_flight_chunks

from ..candidates import stage_kinds, stage_unit
from ..choice import Choice
from ..tables import stage_weight
from .terms import STAGE_OF


class MemoryBound:
    """The memory bound and screens of :class:`search.bounds.Bounds` (mixed in; fills ``_bytes``, and ``_caps``
    and ``_screens``, the only caches that read the HBM cap)."""

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
        extra = int(bool(c.config_options().get("ep_overlap")))  # one more warm-up forward (costmodel.spec.stages)
        chunks = in_flight_chunks(s.pp, c.micro_batches(p.workload.global_batch), c.vp, stage, extra)
        acts = stored / c.vp * chunks
        _, r1 = self._reserve(c)
        out = self._bytes[key] = (acts, r1 * acts)
        return out

    def _stored(self, c: Choice, kind: str):
        """Activation bytes a stage at ``kind`` stores per micro-batch over its layer count ``n``: they
        depend on the layers' shape (tp, cp, ep), not on pp or dp, so the groups of every pp and dp
        share them (:meth:`_mem_acts` scales them by the in-flight chunks)."""
        s = c.shape
        key = (
            "stored",
            s.tp,
            s.cp,
            s.ep,
            c.mb,
            c.sp,
            c.recompute,
            c.recompute_layers,
            c.framework,
            c.options,
            kind,
            s.pp == 1,
        )  # (an activation offload runs at pp = 1 only)
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
        """:func:`costmodel.physics.memory.stage_memory.reserved_bytes` of ``c``'s shape as ``r0 + r1 * activations``
        (affine in the activations), once per shape."""
        key = ("reserve", c.shape)
        if key not in self._bytes:
            cfg = c.config()
            r0 = reserved_bytes(cfg, 0.0, self.p.fragmentation)
            self._bytes[key] = (r0, reserved_bytes(cfg, 1.0, self.p.fragmentation) - r0)
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
            if (
                sum(stage_weight(k, pp) * o[k][1] for k in kinds) < L
                or sum(stage_weight(k, pp) * o[k][0] for k in kinds) > L
            ):
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
            hi = (
                len(fits) - 1 - int(np.argmax(fits[::-1])) if fits[0] else -1
            )  # the most that fits; memory grows with n
            hi = min(hi, L) // vp * vp if hi >= 0 else -1
            if hi < lo:
                return None
            out[kind] = (lo, hi)
        pp = c.shape.pp
        if (
            sum(stage_weight(k, pp) * out[k][1] for k in kinds) < L
            or sum(stage_weight(k, pp) * out[k][0] for k in kinds) > L
        ):
            return None
        return out
