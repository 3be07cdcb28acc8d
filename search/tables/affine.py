"""Per-stage quantities affine in the layer count: parameters, ZeRO model state and the DP collectives."""

from __future__ import annotations

import numpy as np

from costmodel.compose.stage_terms import dp_comm, dp_latency, grad_bytes
from costmodel.physics.memory.stage_memory import fp8_weight_cache_bytes, model_state_bytes
from costmodel.physics.memory.stage_contents import stage_params

from ..choice import Choice
from .probe import probe_split, with_layers_per_stage


class AffineTerms:
    """The affine terms of :class:`search.tables.Tables` (mixed in; reads ``p``, fills ``_affine``;
    the probe layer count is :meth:`search.tables.stage.StageTerms._probe_n`'s)."""

    def affine(self, choice: Choice, kind: str) -> dict:
        """Per-stage quantities affine in the layer count ``n``, as arrays over ``n``: dense and
        expert parameters and ZeRO model state bytes (:meth:`state`), and the DP gradient /
        parameter collective seconds, their latencies and the gradient bytes. They depend on the
        shape and ZeRO stage only (the collectives also on the DMA assignment)."""
        key = ("comm", choice.shape, choice.zero, choice.framework, kind, choice.dma, choice.options)
        if key not in self._affine:
            p, st = self.p, self.state(choice, kind)
            # the collectives from the (exactly affine) parameter counts, one time per count: NCCL's
            # ring / tree choice flips with the message size, so their seconds are not affine
            lps, stage = probe_split(p, choice, kind, self._probe_n(choice, kind))
            c = choice.plain_config(lps)
            params = (st["dense"], st["expert"])
            t_grad, t_param = dp_comm(p.model, p.cluster, c, stage, params)
            lat_grad, lat_param = dp_latency(p.model, p.cluster, c, stage, params)
            n = np.zeros(p.model.layers + 1)
            self._affine[key] = dict(
                st,
                t_grad=n + t_grad,
                t_param=n + t_param,
                lat_grad=n + lat_grad,
                lat_param=n + lat_param,
                grad_bytes=grad_bytes(p.model, c, stage, params),
            )
        return self._affine[key]

    def state(self, choice: Choice, kind: str) -> dict:
        """The part of :meth:`affine` memory screens and optimizer bounds need (no collectives):
        ``dense`` and ``expert`` parameters and ZeRO model ``state`` bytes of the stage."""
        key = ("state", choice.shape, choice.zero, choice.framework, kind, choice.options)
        if key not in self._affine:
            p = self.p

            def state(c, stage):
                dense, expert = stage_params(p.model, c, stage)
                return dict(
                    dense=dense,
                    expert=expert,
                    state=sum(model_state_bytes(p.model, c, stage))
                    + fp8_weight_cache_bytes(p.model, p.workload, c, stage, p.cluster.device),
                )

            self._affine[key] = self._fit(choice, kind, state)
        return self._affine[key]

    def _fit(self, choice: Choice, kind: str, of) -> dict:
        """``of(config, stage) -> {name: value}`` probed at two layer counts and extended to every
        ``n`` (an MoE first stage holding only the dense layers has no expert group, so
        ``n = dense_layers`` is probed on its own)."""
        p, d, L = self.p, self.p.model.dense_layers, self.p.model.layers
        split_dense = kind in ("first", "only") and p.model.is_moe and d > 0
        n0 = d + 1 if split_dense else 1
        vals, c = [], None
        for n in [n0, n0 + 1] + ([d] if split_dense else []):
            lps, stage = probe_split(p, choice, kind, n)
            # one validated config, its layer counts changed per probe (with_layers_per_stage)
            c = choice.plain_config(lps) if c is None else with_layers_per_stage(c, lps)
            vals.append(of(c, stage))
        n = np.arange(L + 1)
        out = {}
        for name in vals[0]:
            arr = vals[0][name] + (n - n0) * (vals[1][name] - vals[0][name])
            if len(vals) == 3:
                arr[d] = vals[2][name]
            out[name] = arr
        return out
