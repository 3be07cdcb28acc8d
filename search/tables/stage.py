"""A stage position's micro-batch time and peak memory over its layer count (the layers and the probe's extras)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.engines.analytic import stage_timing
from costmodel.spec.units import WEIGHT_BYTES
from costmodel.physics.memory.stage_memory import reserved_bytes, stage_memory
from costmodel.physics.memory.stage_contents import expert_dp
from costmodel.spec.stages import in_flight_profile
from costmodel.compose.schedule import interleaved_p2p_exposed_s

from ..choice import Choice, _semantics
from .probe import probe_split


class StageTerms:
    """The per-position timing and memory of :class:`search.tables.Tables` (mixed in; reads ``p``,
    the layer, affine and offload terms, fills ``_parts``)."""

    def counts(self, kind: str, n):
        """(dense, MoE) layers of a stage at ``kind`` holding ``n`` layers (leading dense layers
        on the first stage)."""
        model = self.p.model
        if not model.is_moe:
            return n, np.zeros_like(n)
        if kind in ("first", "only"):
            nd = np.minimum(n, model.dense_layers)
            return nd, n - nd
        return np.zeros_like(n), n

    def mtp_on(self, kind: str) -> int:
        """MTP layers a stage at ``kind`` holds besides its ``n`` decoder layers: the model's on the last
        stage (costmodel.spec.layout.from_chunks places them with the loss; their time and state are in the
        stage probe's extras)."""
        return self.p.model.mtp_layers if kind in ("last", "only") else 0

    def _probe_n(self, choice: Choice, kind: str) -> int:
        L, d = self.p.model.layers, self.p.model.dense_layers
        return L if kind == "only" else (max(choice.vp, d) if kind == "first" else choice.vp)

    def _expert_dp(self, choice: Choice) -> int:
        key = ("edp", choice.shape)
        if key not in self._parts:
            self._parts[key] = expert_dp(choice.config())
        return self._parts[key]

    def timing(self, choice: Choice, kind: str) -> tuple:
        """(micro-batch time, fwd, bwd, recompute) arrays over ``n``; shared by choices that
        differ only in bucket size or ZeRO stage 0-2."""
        s, p = choice.shape, self.p
        key = self._timing_key(choice, kind)
        if key in self._parts:
            return self._parts[key]
        n = np.arange(p.model.layers + 1)
        # the layers of the choice's own pipeline (the EP overlap's paired share, LayerTerms.layer)
        dense_l = self.layer(choice, False, exact=True)
        moe_l = self.layer(choice, True, exact=True) if p.model.is_moe else None
        nd, nm = self.counts(kind, n)
        k = choice.recompute_layers
        kd, km = (np.minimum(nd, k), np.minimum(nm, k)) if choice.recompute == "full" and k is not None else (nd, nm)

        def lin(i, cd, cm, d=dense_l, m=moe_l):
            return cd * d[i] + (cm * m[i] if m else 0)

        layers_time = lin(0, kd, km) + lin(1, kd, km)
        if choice.recompute == "full" and k is not None:  # the layers not recomputed: a plain layer's U
            plain = replace(choice, recompute="none", recompute_layers=None)
            layers_time = layers_time + lin(
                0,
                nd - kd,
                nm - km,
                self.layer(plain, False, exact=True),
                self.layer(plain, True, exact=True) if p.model.is_moe else None,
            )
        fwd, bwd, rec = lin(2, nd, nm), lin(3, nd, nm), lin(4, kd, km)
        # extras (embedding, LM head, PP send/recv) from one stage_timing probe at n0
        n0 = self._probe_n(choice, kind)
        lps, stage = probe_split(p, choice, kind, n0)
        st = stage_timing(
            p.model,
            p.cluster,
            p.workload,
            choice.config(p.limits.flash_attention, lps, p.limits.fused_elementwise),
            stage,
        )
        extras = (
            st.microbatch_s - st.ledger.exposed_s.get("pp", 0.0) - layers_time[n0],
            st.fwd_s - fwd[n0],
            st.bwd_s - bwd[n0],
        )
        self._parts[("x",) + key] = tuple(float(x) for x in extras)
        time = layers_time + extras[0]
        fwd, bwd, rec = fwd + extras[1], bwd + extras[2], rec + (st.recompute_s - rec[n0])
        n_off = choice.config_options().get("activation_offload_layers")
        if n_off:  # pp = 1: the one count n = L
            time = time.copy()
            time[p.model.layers] += self.offload_stall_s(choice, n_off, fwd, bwd + rec)
        if s.pp > 1:
            vp = choice.vp
            t_p2p = st.ledger.link_s.get("pp", 0.0) / (2 * vp)
            time = time + 2 * vp * (
                t_p2p
                if vp == 1
                else interleaved_p2p_exposed_s(t_p2p, fwd / vp, s.pp, choice.micro_batches(p.workload.global_batch), vp)
            )
        self._parts[key] = (time, fwd, bwd, rec)
        return self._parts[key]

    @staticmethod
    def _timing_key(choice: Choice, kind: str) -> tuple:
        """What a stage's timing depends on (not the ZeRO stage 0-2, bucket or memory)."""
        return (
            "t",
            choice.shape,
            choice.mb,
            choice.vp,
            choice.sp,
            choice.chunks,
            choice.recompute,
            choice.recompute_layers,
            choice.per_microbatch(),
            kind,
            choice.dma,
            choice.options,
        )

    def stage_extras(self, choice: Choice, kind: str) -> tuple[float, float, float]:
        """(time, forward, backward) a stage at ``kind`` adds to its layers in :meth:`timing` (the
        embedding / LM head, and whatever the stage probe charges beyond the per-layer terms),
        without its PP send/recv."""
        key = self._timing_key(choice, kind)
        if ("x",) + key not in self._parts:
            self.timing(choice, kind)
        return self._parts[("x",) + key]

    def memory(self, choice: Choice, kind: str):
        """Peak memory array over ``n``; shared by choices that differ only in chunks or bucket."""
        s, p = choice.shape, self.p
        key = (
            "m",
            s,
            choice.mb,
            choice.vp,
            choice.sp,
            choice.zero,
            choice.framework,
            choice.recompute,
            choice.recompute_layers,
            kind,
            choice.options,
        )
        if key in self._parts:
            return self._parts[key]
        model, w, L = p.model, p.workload, p.model.layers
        n = np.arange(L + 1)
        nd, nm = self.counts(kind, n)
        ad = self.activations(choice, False)
        am = self.activations(choice, True) if model.is_moe else 0.0
        k = choice.recompute_layers
        n0 = self._probe_n(choice, kind)
        lps, stage = probe_split(p, choice, kind, n0)
        m = choice.micro_batches(w.global_batch)
        # per model chunk (costmodel.spec.stages.chunk_layers: the shorter chunks first on stage 0, last
        # elsewhere), the dense layers first, the stage's first k recomputed: memory.stage_memory
        vp = choice.vp
        base, extra = np.divmod(n, vp)
        layer_input = self.layer_input_bytes(choice) if choice.recompute == "full" else 0.0
        kk = n if k is None else np.minimum(n, k)
        stored, before = [], np.zeros_like(n)
        for ch in range(vp):
            size = base + ((ch >= vp - extra) if stage == 0 else (ch < extra))
            dn = np.clip(nd - before, 0, size)
            mo = size - dn
            if choice.recompute == "full":
                kd = np.minimum(dn, np.maximum(0, kk - before))
                km = np.minimum(mo, np.maximum(0, kk - before - kd))
                stored.append((kd + km) * layer_input + (dn - kd) * ad + (mo - km) * am)
            else:
                stored.append(dn * ad + mo * am)
            before = before + size
        k_mtp = self.mtp_on(kind)  # its MTP layers (of the MoE kind in an MoE model), after the decoder layers
        if choice.recompute == "full":
            working = np.maximum(
                np.where(nd + (0 if model.is_moe else k_mtp) > 0, ad, 0.0),
                np.where(nm + (k_mtp if model.is_moe else 0) > 0, am, 0.0),
            )
        else:
            working = np.zeros(L + 1)
        acts = (
            np.max(
                [
                    sum(h * b for h, b in zip(held, stored))
                    for held in in_flight_profile(s.pp, m, vp, stage, _extra(choice))
                ],
                axis=0,
            )
            + working
        )
        sm = stage_memory(
            model, w, choice.config(p.limits.flash_attention, lps, p.limits.fused_elementwise), stage, p.cluster.device
        )
        acts = acts + (sm.activations_bytes - acts[n0])  # embedding output, logits of the probe
        a = self.affine(choice, kind)
        held = _semantics(choice.framework, choice.zero, s.pp, choice.config_options().get("pp_grad_reduce", "step"))
        held = held.unsharded_weights if s.dp * s.cp > 1 else None  # as memory.gathered_weight_bytes (frameworks.of)
        buffers = {
            None: 0.0,
            "stage": WEIGHT_BYTES * (a["dense"] + a["expert"]),  # memory.gathered_weight_bytes
            "two_layers": 2 * WEIGHT_BYTES * (a["dense"] + a["expert"]) / np.maximum(1, n + k_mtp),
        }[held]
        self._parts[key] = a["state"] + acts + buffers + reserved_bytes(choice.config(), acts, p.fragmentation)
        return self._parts[key]


def _extra(choice) -> int:
    """Warm-up forwards beyond Megatron-Core's count: one under the EP all-to-all overlap (costmodel.spec.stages)."""
    return int(bool(choice.config_options().get("ep_overlap")))
