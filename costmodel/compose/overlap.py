"""The unified overlap formula (source document, section 2; DIGEST.md).

``T_eff = T_compute + (1 - r) * T_comm``. A communication of ``T_comm`` that can hide behind a
compute window of ``T_compute`` and is split into ``pieces`` pipelined with as many pieces of
that compute (a piece of comm can only start once its piece of compute is done, or
vice versa) costs

    exposed = max(0, T_comm - T_compute) + min(T_comm, T_compute) / pieces

beyond the compute: the longer of the two sets the pace, and the first (or last) piece of the
shorter one cannot overlap. With ``pieces -> inf`` this reaches the critical condition of the
source, ``T_eff = max(T_compute, T_comm)`` (:data:`FREE`); with ``pieces = 0`` (:data:`SERIAL`: not
overlappable) it is serial. A plan's ``ParallelConfig.chunks`` (its communication chunk count) is one source of
``pieces``; gradient buckets and ring steps are others.

>>> exposed_s(1.0, 3.0, 1), exposed_s(1.0, 3.0, 4), exposed_s(3.0, 1.0, 4), exposed_s(1.0, 3.0, 0)
(1.0, 0.25, 2.25, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: the communication strategies a training ledger (and an op graph's communication nodes) accounts by, in report
#: order (serving's: :data:`costmodel.serving.phase.SERVING_STRATEGIES`)
TRAINING_STRATEGIES = ("tp", "sp", "cp", "ep", "pp", "dp", "zero")
#: ``pieces`` of a communication that cannot overlap (a data dependency or a synchronous issue)
SERIAL = 0
#: ``pieces`` of a communication that overlaps as finely as it likes: only the longer of the two sets the pace
FREE = float("inf")


def exposed_s(t_comm_s, t_window_s, pieces):
    """Exposed part of a communication pipelined in ``pieces`` with a compute window.

    ``pieces = SERIAL`` (0) means it cannot overlap at all (data dependency or synchronous issue).
    Any argument may be a numpy array (the result is then an array, broadcast).
    """
    if isinstance(t_comm_s, np.ndarray) or isinstance(t_window_s, np.ndarray) or isinstance(pieces, np.ndarray):
        t, w, k = np.asarray(t_comm_s, float), np.asarray(t_window_s, float), np.asarray(pieces, float)
        overlap = np.maximum(0.0, t - w) + np.minimum(t, w) / np.where(k > 0, k, 1.0)
        return np.where(t <= 0, 0.0, np.where((k <= 0) | (w <= 0), t, overlap))
    return _exposed_scalar_s(t_comm_s, t_window_s, pieces)


def _exposed_scalar_s(t_comm_s: float, t_window_s: float, pieces) -> float:
    """:func:`exposed_s` of plain numbers (no array checks: the ledger's hot path)."""
    if t_comm_s <= 0:
        return 0.0
    if pieces <= 0 or t_window_s <= 0:
        return t_comm_s
    return max(0.0, t_comm_s - t_window_s) + min(t_comm_s, t_window_s) / pieces


def overlap_rate(t_comm_s: float, t_exposed_s: float) -> float:
    """r = 1 - exposed / comm, in [0, 1] (1.0 when there is no communication)."""
    if t_comm_s <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - t_exposed_s / t_comm_s))


@dataclass(slots=True)
class CommLedger:
    """Raw and exposed communication seconds per strategy, and why any stays exposed.

    Strategies: ``tp`` (AllReduce), ``sp`` (AllGather + ReduceScatter), ``cp``, ``ep``, ``pp``,
    ``dp`` (gradient reduction), ``zero`` (parameter gathers).
    """

    link_s: dict = field(default_factory=dict)
    exposed_s: dict = field(default_factory=dict)
    hidden_sm_s: float = 0.0  # hidden time of SM-based comms added by ``add`` (slows compute)
    reasons: dict = field(default_factory=dict)
    stretch_s: float = 0.0  # compute slowdown of SM-based comms added by ``overlap``

    def add(
        self,
        strategy: str,
        t_comm: float,
        t_exposed: float,
        reason: str = "",
        times: float = 1.0,
        uses_compute: bool = True,
    ) -> None:
        if t_comm <= 0:
            return
        link, exposed = self.link_s, self.exposed_s
        link[strategy] = link.get(strategy, 0.0) + times * t_comm
        exposed[strategy] = exposed.get(strategy, 0.0) + times * t_exposed
        if uses_compute:
            self.hidden_sm_s += times * (t_comm - t_exposed)
        if reason and t_exposed > 1e-3 * t_comm:
            self.reasons.setdefault(strategy, reason)

    def overlap(
        self,
        strategy: str,
        t_comm: float,
        window_s: float,
        pieces,
        reason: str = "",
        coef: float = 0.0,
        times: float = 1.0,
        waits_s: float = 0.0,
    ) -> None:
        """Add a communication pipelined in ``pieces`` with a compute window of ``window_s``.

        An SM-based collective (``coef``: the device's ``comm_compute_interference``, 0 for a
        dedicated DMA engine) slows the compute it overlaps to ``1 - coef`` of its speed, as the
        op-graph scheduler does (:mod:`costmodel.engines.graph.scheduler`): the window stretches by
        ``coef * min(t_comm, window / (1 - coef))`` and the communication hides behind the
        stretched window, so a communication-bound op costs ``max(t_comm, stretched window)``.
        ``waits_s``: time in the window when compute waits on other communication (exposed
        elsewhere); this one progresses then too, without slowing compute.
        """
        if t_comm <= 0:
            return
        stretch = coef * min(t_comm, window_s / (1 - coef)) if coef > 0 and pieces > 0 and window_s > 0 else 0.0
        self.add(
            strategy, t_comm, _exposed_scalar_s(t_comm, window_s + stretch + waits_s, pieces), reason, times, False
        )
        self.stretch_s += times * stretch

    def interference_s(self, coef: float) -> float:
        """Compute slowdown by SM-based communication: ``coef`` per hidden second of what was
        ``add``-ed, plus the stretch of what was ``overlap``-ped."""
        return coef * self.hidden_sm_s + self.stretch_s

    def scaled(self, k: float) -> "CommLedger":
        return CommLedger(
            {s: v * k for s, v in self.link_s.items()},
            {s: v * k for s, v in self.exposed_s.items()},
            self.hidden_sm_s * k,
            dict(self.reasons),
            self.stretch_s * k,
        )

    def merge(self, other: "CommLedger") -> "CommLedger":
        link, exposed, reasons = dict(self.link_s), dict(self.exposed_s), dict(self.reasons)
        other_exposed = other.exposed_s
        for s, v in other.link_s.items():
            link[s] = link.get(s, 0.0) + v
            exposed[s] = exposed.get(s, 0.0) + other_exposed[s]
        for s, r in other.reasons.items():
            reasons.setdefault(s, r)
        return CommLedger(
            link, exposed, self.hidden_sm_s + other.hidden_sm_s, reasons, self.stretch_s + other.stretch_s
        )

    @property
    def total_exposed_s(self) -> float:
        return sum(self.exposed_s.values())

    def rates(self) -> dict:
        return {s: overlap_rate(self.link_s[s], self.exposed_s[s]) for s in sorted(self.link_s)}
