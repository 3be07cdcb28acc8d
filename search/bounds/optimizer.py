"""The optimizer step's bound: the largest stage's, or the smallest first / last stage's."""

from __future__ import annotations

from costmodel.physics.memory.stage_contents import expert_dp

from ..candidates import stage_kinds, stage_unit
from ..choice import Choice
from ..offload_choice import optimizer_s


class OptimizerBound:
    """The optimizer bound of :class:`search.bounds.Bounds` (mixed in; reads ``t.state`` and
    :meth:`largest_stage`, fills ``_opt``)."""

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
        return max(
            self._opt_s(c, kinds[0], min(max(vp, d), L)),
            self._opt_s(c, kinds[-1], L if pp == 1 else vp),
            min(self._opt_s(c, kind, min(n_big, L)) for kind in kinds),
        )
