"""One choice's tables: per stage position, arrays over the layer count, in seconds and in ticks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compose.step import step_time

from ..choice import Choice
from .probe import stage_weight
from .ticks import ticks


@dataclass
class StageTable:
    """Per position (``first``/``mid``/``last``/``only``) arrays indexed by the layer count ``n``.

    ``time_s`` is the stage's micro-batch time, ``dp_s`` its exposed DP/ZeRO reduction and gather,
    ``opt_s`` its optimizer step, ``mem_bytes`` its peak memory, ``valid`` whether ``n`` layers
    are allowed there (multiple of ``vp``, dense layers on the first stage, fits in memory).
    ``stall_s``: a fourth step-level term, the step charging its most exposed stage's (fine-grained
    activation offloading's reloads over the step, :meth:`search.tables.Tables.fg_stall_s`); ``None`` (and
    ``stall_ticks`` ``None``) for a plan without one, whose objective has the three terms alone.
    """

    choice: Choice
    lead: float  # m - 1/v: micro-batch times the slowest stage sets (costmodel.compose.step.pipeline_s)
    kinds: tuple
    time_s: dict
    dp_s: dict
    opt_s: dict
    mem_bytes: dict
    valid: dict
    res_s: float = 1e-6
    m: int = 1  # micro-batches per step
    stall_s: dict | None = None

    def __post_init__(self):
        # the solver's integer tables, at the problem's one resolution (see :func:`ticks`)
        self.time_ticks = {k: ticks(self.lead * v, self.res_s) for k, v in self.time_s.items()}
        # the stages' share of the first micro-batch's pass (sum over the stages of time / v), the
        # middle stages' together
        pp, vp = self.choice.shape.pp, self.choice.vp
        self.sum_ticks = {k: ticks(stage_weight(k, pp) * v / vp, self.res_s) for k, v in self.time_s.items()}
        self.dp_ticks = {k: ticks(v, self.res_s) for k, v in self.dp_s.items()}
        self.opt_ticks = {k: ticks(v, self.res_s) for k, v in self.opt_s.items()}
        self.stall_ticks = None if self.stall_s is None else {k: ticks(v, self.res_s) for k, v in self.stall_s.items()}

    def max_terms(self) -> tuple[str, ...]:
        """The tick tables whose maximum over the stage positions the objective adds."""
        return ("time_ticks", "dp_ticks", "opt_ticks") + (() if self.stall_ticks is None else ("stall_ticks",))

    def step_s(self, split) -> float:
        """Table step time of ``split`` (a :class:`~search.candidates.Split`) in seconds."""
        ns = [split.count("first" if k == "only" else k) for k in self.kinds]

        def at(table):
            return np.array([table[k][n] for k, n in zip(self.kinds, ns)])

        pp = self.choice.shape.pp
        step = step_time(
            at(self.time_s),
            at(self.dp_s),
            at(self.opt_s),
            self.m,
            pp,
            self.choice.vp,
            [stage_weight(k, pp) for k in self.kinds],
        )
        return step if self.stall_s is None else step + float(np.max(at(self.stall_s)))

    def fits(self, split) -> bool:
        return all(self.valid[k][split.count("first" if k == "only" else k)] for k in self.kinds)
