"""Per-layer terms of the tables: one layer's times and stored bytes per micro-batch."""

from __future__ import annotations

from costmodel.engines.analytic import layer_timing
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.memory.activations import activation_bytes_per_layer

from ..choice import Choice


def _timed_options(moe: bool, ep: int) -> tuple[str, ...]:
    """The plan options :func:`costmodel.engines.analytic.layer_timing` reads of a layer: the recompute modules and the
    CP exchange, and of an MoE layer with ``ep > 1`` the EP dispatcher and the EP overlap
    (``tests/test_search_tables.py``)."""
    layer = ("recompute_modules", "cp_impl")
    return layer + ("ep_dispatcher", "ep_overlap") if moe and ep > 1 else layer


class LayerTerms:
    """The per-layer terms of :class:`search.tables.Tables` (mixed in; reads ``p``, fills the
    ``_layer`` and ``_parts`` caches)."""

    def layer(self, choice: Choice, moe: bool, exact: bool = False) -> tuple[float, ...]:
        """``(U, R, fwd, bwd, rec, act_bytes)`` of one layer and micro-batch: U = fwd + bwd + exposed
        communication + interference; R = recompute time (with its repeated communication).

        The EP all-to-all overlap (an MoE layer with ``ep > 1`` and ``ep_overlap``) charges its all-to-alls as
        paired in the share of the passes the combined schedule pairs, which the plan's ``pp``, ``vp`` and
        micro-batch count set (:func:`costmodel.compose.ep_overlap.paired_fraction`): ``exact`` the layer of the
        choice's own (what :meth:`search.tables.Tables.timing` charges, as ``evaluate`` does); otherwise a floor
        shared by every ``pp``, ``vp`` and DP degree (the bounds' caches are keyed without them): the lesser of
        the layer at the largest share any of them pairs (one stage, one chunk, all the batch's micro-batches)
        and of the layer without pairing; the layer's cost is linear in the share between the two."""
        overlap = choice.dma is None and moe and choice.shape.ep > 1 and bool(choice.config_options().get("ep_overlap"))
        if not overlap:
            return self._layer_of(choice, moe, None)
        if exact:
            return self._layer_of(choice, moe, "exact")
        paired, unpaired = self._layer_of(choice, moe, "most_paired"), self._layer_of(choice, moe, "unpaired")
        return tuple(min(a, b) for a, b in zip(paired, unpaired))

    def _layer_of(self, choice: Choice, moe: bool, overlap: str | None) -> tuple[float, ...]:
        """:meth:`layer` timed on a layer config: ``overlap`` None (no EP overlap to price), ``"exact"`` (the
        choice's ``pp``, ``vp`` and DP degree), ``"most_paired"`` (one stage, one chunk and DP 1 but ZeRO-3's)
        or ``"unpaired"`` (without the overlap)."""
        s = choice.shape
        z3 = choice.per_microbatch()
        key = (
            s.tp,
            s.cp,
            s.ep,
            s.dp if z3 else 1,
            choice.mb,
            choice.sp,
            choice.chunks,
            choice.recompute,
            z3,
            moe,
            choice.dma,
            choice.grad_dtype,
            choice.options,
        )
        if overlap == "exact":
            key += (overlap, s.pp, choice.vp, s.dp)
        elif overlap is not None:
            key += (overlap,)
        if key not in self._layer:
            if choice.dma is None:
                opts = {k: v for k, v in choice.config_options().items() if k in _timed_options(moe, s.ep)}
                if overlap == "unpaired":
                    opts.pop("ep_overlap")
                pipe = {"pp": s.pp, "vp": choice.vp, "dp": s.dp} if overlap == "exact" else {"dp": key[3]}
                c = ParallelConfig(
                    tp=s.tp,
                    cp=s.cp,
                    ep=s.ep,
                    mb=choice.mb,
                    sp=choice.sp,
                    chunks=choice.chunks,
                    recompute=choice.recompute,
                    zero=choice.zero if z3 else 0,
                    flash_attention=self.p.limits.flash_attention,
                    framework=choice.framework,
                    grad_dtype=choice.grad_dtype,
                    fused_elementwise=self.p.limits.fused_elementwise,
                    # the timing reads the recompute modules, and the EP dispatcher and overlap only of an MoE
                    # layer with expert parallelism (costmodel.engines.analytic): the other layers are left
                    # without them, so that searches under each dispatcher share their timings; the pipeline
                    # and DP degree only with the overlap (its paired share, :meth:`layer`)
                    **pipe,
                    **opts,
                )
            else:  # an assignment names the plan's streams: a layer of the plan itself
                c = choice.config(self.p.limits.flash_attention, fused_elementwise=self.p.limits.fused_elementwise)
            p, coef = self.p, self.p.cluster.device.comm_compute_interference
            lt = layer_timing(p.model, p.cluster, p.workload, c, moe)
            u = lt.fwd_s + lt.bwd_s + lt.ledger.total_exposed_s + lt.ledger.interference_s(coef)
            r = lt.recompute_s + lt.recompute_ledger.total_exposed_s + lt.recompute_ledger.interference_s(coef)
            self._layer[key] = (u, r, lt.fwd_s, lt.bwd_s, lt.recompute_s, self.activations(choice, moe))
        return self._layer[key]

    def activations(self, choice: Choice, moe: bool) -> float:
        """Activation bytes one layer stores per micro-batch (the last entry of :meth:`layer`), without
        the layer's timing: the memory screens need only this, and it does not depend on chunks,
        ZeRO stage, bucket or DMA assignment."""
        s = choice.shape
        key = ("act", s.tp, s.cp, s.ep, choice.mb, choice.sp, choice.recompute, choice.framework, choice.options, moe)
        if key not in self._parts:
            c = choice.config(self.p.limits.flash_attention, fused_elementwise=self.p.limits.fused_elementwise)
            self._parts[key] = activation_bytes_per_layer(self.p.model, self.p.workload, c, moe)
        return self._parts[key]

    def layer_input_bytes(self, choice: Choice) -> float:
        """Bytes one fully recomputed layer keeps per micro-batch: its BF16 input, sharded by SP
        (Korthikanti et al. 2023, section 5: full recompute stores only each layer's input)."""
        s = choice.shape
        tokens = choice.mb * self.p.workload.seq_len / s.cp
        return 2 * self.p.model.hidden * tokens / (s.tp if choice.sp and s.tp > 1 else 1)
