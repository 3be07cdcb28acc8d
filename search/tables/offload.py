"""Activation CPU offload in the tables: the bytes it frees and the stall it adds on a ``pp = 1`` stage; the
exposed reloads of fine-grained activation offloading on every stage."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.physics.mechanics import act_offload, fg_offload
from costmodel.physics.memory.stage_memory import offloaded_layer_bytes

from ..choice import Choice
from .probe import probe_split


class OffloadTerms:
    """The activation-offload terms of :class:`search.tables.Tables` (mixed in; reads ``p``, fills
    ``_parts``)."""

    def offloaded_bytes(self, choice: Choice) -> float:
        """Activation bytes the choice's CPU offload frees (0 without it): ``N`` layers' of the one micro-batch a
        ``pp = 1`` stage holds, as :func:`costmodel.physics.memory.stage_memory.stage_memory` frees them (with the fewest fitting, at
        most ``L - 1``); the memory bounds (:meth:`search.bounds.Bounds._stored`) take them off, so that they stay
        below the tables' memory."""
        n = (
            self.p.model.layers - 1
            if self._fewest_fitting(choice)
            else choice.config_options().get("activation_offload_layers", 0)
        )
        return n * self._offloaded_layer(choice) if n else 0.0

    def _offloaded_layer(self, choice: Choice) -> float:
        key = ("offloaded", choice.shape, choice.mb, choice.sp, choice.options)
        if key not in self._parts:
            c = choice.config(self.p.limits.flash_attention, (self.p.model.layers,), self.p.limits.fused_elementwise)
            self._parts[key] = min(offloaded_layer_bytes(self.p.model, self.p.workload, c))
        return self._parts[key]

    @staticmethod
    def _fewest_fitting(choice: Choice) -> bool:
        """Whether the choice offloads the fewest layers that make it fit (``search.problem.FEWEST_FITTING``)."""
        return (
            choice.shape.pp == 1
            and choice.recompute == "none"
            and dict(choice.options).get("activation_offload_layers", 0) < 0
        )

    def with_fewest_fitting(self, choice: Choice, time, fwd, bwd, mem):
        """``(time, mem)`` over ``n`` of a ``pp = 1`` choice of :meth:`_fewest_fitting`, at its one count ``n = L``
        with the fewest offloaded layers ``N`` that make it fit (:meth:`fewest_layers`): the freed bytes (with the
        allocator's fragmentation on them, :func:`costmodel.physics.memory.stage_memory.reserved_bytes`) off its memory and the stall
        on its micro-batch, as ``evaluate`` charges the plan with ``N`` (none where it fits without, left
        unfitting where ``L - 1`` do not make it fit)."""
        L = self.p.model.layers
        n = self.fewest_layers(choice, mem[L])
        if not n or n >= L:
            return time, mem
        time, mem = time.copy(), mem.copy()
        mem[L] -= n * self._offloaded_layer(choice) * (1 + self.p.fragmentation)
        time[L] += self.offload_stall_s(choice, n, fwd, bwd)
        return time, mem

    def offload_stall_s(self, choice: Choice, n: int, fwd, bwd) -> float:
        """The stall per micro-batch an offload of ``n`` layers adds to a ``pp = 1`` stage whose forward and
        backward (with recompute) over ``n = L`` are ``fwd[L]``, ``bwd[L]``: the one place ``evaluate`` charges
        it (:func:`costmodel.physics.mechanics.act_offload.step_exposed_s`)."""
        p, L = self.p, self.p.model.layers
        c = replace(
            choice.config(p.limits.flash_attention, (L,), p.limits.fused_elementwise), activation_offload_layers=n
        )
        return act_offload.step_exposed_s(p.model, p.cluster, p.workload, c, fwd[L], bwd[L], 1)[1]

    def fg_stall_s(self, choice: Choice, kind: str):
        """Fine-grained activation offloading's exposed reloads (``offload_modules``) of a stage at ``kind`` over
        ``n``, times the micro-batches: the step charges the most exposed stage's
        (:func:`costmodel.physics.mechanics.fg_offload.step_exposed_s`), a max over the stages as the DP and
        optimizer terms are (:class:`search.tables.StageTable` ``stall_s``); from the one formula ``evaluate``
        charges (:func:`costmodel.physics.mechanics.fg_offload.counts_exposed_s`) at the stage's layers (the MTP
        layers on the last, :func:`costmodel.physics.memory.stage_contents.layer_counts`) and its forward and
        backward with recompute. ``None`` without the option."""
        p = self.p
        if not choice.config_options().get("offload_modules"):
            return None
        key = ("fg",) + self._timing_key(choice, kind)
        if key not in self._parts:
            _, fwd, bwd, rec = self.timing(choice, kind)
            lps, _ = probe_split(p, choice, kind, self._probe_n(choice, kind))
            c = choice.config(p.limits.flash_attention, lps, p.limits.fused_elementwise)
            nd, nm = self.counts(kind, np.arange(p.model.layers + 1))
            mtp = self.mtp_on(kind)  # each of the kind of the model's last layer (stage_contents.chunk_counts)
            nd, nm = (nd, nm + mtp) if p.model.is_moe else (nd + mtp, nm)
            _, exposed = fg_offload.counts_exposed_s(p.model, p.cluster, p.workload, c, nd, nm, fwd, bwd + rec)
            m = choice.micro_batches(p.workload.global_batch)
            self._parts[key] = m * np.broadcast_to(np.asarray(exposed, dtype=float), fwd.shape).copy()
        return self._parts[key]

    def fewest_layers(self, choice: Choice, mem_bytes: float) -> int:
        """The fewest layers ``N`` (0 to ``L - 1``) whose offload brings ``mem_bytes``, a ``pp = 1`` stage's memory
        without offload, within the HBM cap, each freeing :meth:`_offloaded_layer` bytes and their fragmentation
        (``stage_memory``); ``L`` where even ``L - 1`` do not."""
        over = mem_bytes - self.p.hbm_cap_bytes
        if over <= 0:
            return 0
        per = self._offloaded_layer(choice) * (1 + self.p.fragmentation)
        n = max(1, math.ceil(over / per)) if per > 0 else self.p.model.layers
        return n if n < self.p.model.layers else self.p.model.layers
