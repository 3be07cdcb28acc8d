"""The search's options (:class:`SolveOptions`) and the constants their defaults stand for."""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.trust.memory_margin import MEMORY_MARGIN
from costmodel.trust.uncertainty import NOISE_SD

#: The analytic-vs-graph error band: plans whose analytic objective is within this fraction of the
#: analytic optimum are re-scored by the op-graph engine. It stands for the measured p90 relative
#: disagreement of the two engines on random valid plans (``benchmarks/engine_agreement.py``'s ``Planner.space``
#: problems, RESULTS section 2: 1.88%, then 1.47%). Its search-split DeepSeek-V3 problem (2026-12-06) measures the
#: closed form's blind spot for unequal interleaved chunks (p90 3.9-4.2%, max 12-15%; with it the p90 of all
#: plans is 1.75-2.05%), which :mod:`search.interleave_check` answers: a band of 2.5% to cover it too cost the
#: rack-scale search its 3 s (DeepSeek-V3 / 1,152 GB200: 3.1-3.7 s against 2.6-2.8 s), so it stays 2%.
RESCORE_BAND = 0.02
#: Among the re-scored plans, those whose op-graph step time is within this fraction of the fastest
#: are one answer to the model: the one with the least peak memory is chosen (issue 24: the fastest
#: sat at 97-98% of HBM where a leaner plan cost well under 1%). It is the run-to-run variation of
#: a measured step time the bands floor on (``costmodel.trust.uncertainty.NOISE_SD``, 1%): a gain below
#: it cannot be seen on the cluster, the memory it costs can (an out-of-memory restart).
MEMORY_TIE = NOISE_SD
#: at most this many plans are re-scored by the op-graph engine (each takes ~0.05-0.5 s)
RESCORE_MAX = 20
#: a space of at most this many choices is scored exhaustively, without presolve or CP-SAT
SMALL_SPACE = 64
#: presolve leaving more choices than this (weak bounds, e.g. fine-grained MoE) answers with its
#: best incumbents (FEASIBLE, with the gap) instead of a CP-SAT model it could not solve in time
CPSAT_MAX_CHOICES = 20000


@dataclass(frozen=True, kw_only=True)
class SolveOptions:
    """Solver options, all explicit (STYLE.md item 11).

    time_limit_s : wall-clock budget of the whole search (tables, presolve, CP-SAT, re-score);
        past it the best plan found so far is returned (FEASIBLE, with its gap).
    workers : CP-SAT search workers. seed : CP-SAT random seed; with an optimal answer the plan
        is also canonicalised (ties broken by a fixed order), so it does not depend on workers.
    top_k : plans to return: the best and the next best distinct choices (no-good cuts).
    presolve_bounds : discard choices by lower bound before CP-SAT (dominance and memory
        screens always apply); off, CP-SAT holds every choice that can fit.
    probes : at most this many choices presolve solves exactly, best bound first, for the
        incumbents whose objective sets the pruning threshold (None: no cap, a best-first branch
        and bound; a cap leaves more choices to CP-SAT).
    rescore : re-score the plans within ``band`` of the analytic optimum with the op-graph engine
        (at most ``rescore_max``) and answer the best under it (``recommend`` does): of those within
        ``memory_tie`` of the fastest op-graph time, the one with the least peak memory (0: the fastest).
    memory_margin : the memory model's measured margin (:mod:`costmodel.trust.memory_margin`): with
        ``rescore``, when the fastest re-scored plan is above it (at risk) and a plan that keeps it is
        within ``band`` of the fastest op-graph time, the answer is chosen among those that keep it
        (0: no preference). The fit test stays HBM less the headroom.
    small_space : a space of at most this many choices is scored exhaustively (exact, no presolve
        or CP-SAT); -1: never. Off too without ``presolve_bounds`` (then CP-SAT holds every choice).
    offload : when no plan fits, search again with optimizer CPU offload (:mod:`search.offload_choice`);
        off for ``evaluate``'s completion of a stated plan (its offload is what the user states).
    act_offload : when the answer is a ``pp = 1`` plan that recomputes, or none fits, look for a faster one with
        activation CPU offload (:mod:`search.act_offload_choice`); off for ``evaluate``'s completion, as ``offload``.
    margin_cost : with ``rescore`` and ``memory_margin``, when the answer is at risk and no re-scored plan keeps the
        margin, the fastest plan that keeps it (solved again with the margin as a hard limit) is the answer when its
        op-graph time is within this fraction of the at-risk one's; the other plan is kept beside it
        (``SolveResult.margin_alternative``). ``None``: ``band`` (a gain the engines cannot tell apart);
        ``math.inf``: always, the safe plan is the answer (:data:`PREFER`, ``planner recommend --prefer``).
    pinned_tight : when no plan fits and the user pinned every degree, accept the plan that fits only without the
        assumed fragmentation allowance, ``tight`` (``search.solve._pinned_tight``, :mod:`costmodel.physics.memory.verdict`);
        off in the searches a search runs inside itself (the offloads', the margin's), whose answers must fit.
    interleave_check : compare an interleaved answer the op graph times beyond the band above its analytic objective
        with the best plan without interleaving (:mod:`search.interleave_check`); off in the margin solve, whose
        answer the search that runs it checks.
    cutoff_s : look only for plans whose analytic objective is at most this (seconds): presolve starts with it as
        its pruning threshold, so a search with none that fast ends at once, INFEASIBLE (``None``: no cutoff). For
        the searches a search runs inside itself to compare with a plan in hand (:mod:`search.interleave_check`).
    """

    time_limit_s: float = 10.0
    workers: int = 2
    seed: int = 0
    top_k: int = 1
    presolve_bounds: bool = True
    probes: int | None = None
    explain: bool = True
    rescore: bool = False
    band: float = RESCORE_BAND
    memory_tie: float = MEMORY_TIE
    memory_margin: float = MEMORY_MARGIN
    rescore_max: int = RESCORE_MAX
    small_space: int = SMALL_SPACE
    offload: bool = True
    act_offload: bool = True
    margin_cost: float | None = None
    pinned_tight: bool = True
    interleave_check: bool = True
    cutoff_s: float | None = None

    @property
    def margin_cost_or_band(self) -> float:
        """:attr:`margin_cost`, or the band when it is None."""
        return self.band if self.margin_cost is None else self.margin_cost


#: ``--prefer``: what the answer is when keeping the memory margin costs step time (issue 42 item 5):
#: ``safe`` (the default) answers the fastest plan that keeps the margin, whatever it costs, and shows the faster
#: at-risk plan beside it; ``fast`` answers the fastest plan unless keeping the margin costs no more than the band
#: (the answer before issue 42). ``--memory-margin 0`` asks for no margin at all.
PREFER = {"safe": math.inf, "fast": None}
#: the default of ``--prefer`` and of every entry point's ``prefer``
PREFER_DEFAULT = "safe"

#: The one statement of the options every entry point answers with (issue 42 item 1): ``planner recommend``,
#: :func:`planner.recommend`, :meth:`planner.Planner.recommend` and the sweep take their defaults from it, so one
#: problem gives one plan whichever asks: the op-graph re-score of the plans within the band, the memory margin
#: kept (the safe plan, :data:`PREFER`), a 10 s limit, 2 CP-SAT workers (the answer does not depend on them, see
#: ``seed``), seed 0.
#: The opt-out for autotuners that want speed is ``rescore=False`` (the analytic optimum CP-SAT proves, without the
#: op-graph re-score and so without the memory margin: a different plan from ``planner recommend``'s, at times).
ANSWER_OPTIONS = SolveOptions(rescore=True, margin_cost=PREFER[PREFER_DEFAULT])
