"""What a search returns: plans re-scored by ``costmodel.evaluate``, the solve status, and why.

Every :class:`Plan` carries both the objective the solver optimised (the integer tables, in
seconds) and ``evaluate``'s step time of the same config; ``agreement`` is their relative
difference (tested <= 0.5%). :func:`binding_constraints` says what stopped the plan from being
faster: a stage's memory close to HBM, a user limit it sits on, TP held inside a node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from costmodel.physics.memory.verdict import FITS, TIGHT
from costmodel.spec.plan import ParallelConfig
from costmodel.training.estimate import Estimate
from costmodel.spec.units import GiB

from .candidates import Split, tp_values
from .problem import Problem
from .choice import Choice
from .stats import SearchStats

OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN = "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"
#: a stage at or above this fraction of usable HBM is reported as memory-bound
MEMORY_BINDING = 0.9


@dataclass(frozen=True)
class Plan:
    """One recommended plan: the choice, its stage split, the config, and its re-scored estimate."""

    choice: Choice
    split: Split
    config: ParallelConfig
    objective_s: float  # the solver's objective (integer tables) in seconds
    estimate: Estimate  # costmodel.evaluate(engine="analytic") of ``config``: what the tables encode
    binding: tuple = ()
    graph_step_time_s: float | None = None  # the same plan scheduled by the op-graph engine
    graph_overlap: dict | None = None
    graph_estimate: Estimate | None = None  # costmodel.evaluate(engine="graph") of ``config``

    @property
    def reported(self) -> Estimate:
        """The estimate reported to users: the default engine's (the op graph, as ``evaluate``
        reports it), else the analytic one the tables encode."""
        return self.graph_estimate if self.graph_estimate is not None else self.estimate

    @property
    def agreement(self) -> float:
        """|objective - evaluate| / evaluate."""
        return abs(self.objective_s - self.estimate.step_time_s) / self.estimate.step_time_s

    def to_dict(self) -> dict:
        """:attr:`reported`'s keys (``engine`` says which), with the analytic step time the solver's
        ``objective_s`` agrees with (``agreement``) beside it."""
        d = self.reported.to_dict()
        d["config"]["layers_per_stage"] = list(self.config.layers_per_stage or ())
        d["analytic_step_time_s"] = self.estimate.step_time_s
        d["objective_s"] = self.objective_s
        d["agreement"] = self.agreement
        d["binding"] = list(self.binding)
        d["graph_step_time_s"] = self.graph_step_time_s
        d["graph_overlap"] = self.graph_overlap
        return d


@dataclass
class SolveResult:
    """The answer to one problem: plans best first, the solve status and its proof."""

    status: str
    plans: list = field(default_factory=list)
    objective_s: float | None = None
    bound_s: float | None = None
    time_s: float = 0.0  # wall time of the whole search (tables, presolve, CP-SAT)
    solver_time_s: float = 0.0  # CP-SAT alone
    stats: SearchStats = field(default_factory=SearchStats)  # what the search counted and timed
    explanation: str = ""  # for an infeasible problem: why
    changes: list = field(default_factory=list)  # smallest changes that make it feasible
    # the op-graph re-score (search.solve, ``rescore``): plans within ``band`` of the analytic optimum
    band: float | None = None  # the band, a fraction of the analytic optimum
    within_band: int = 0  # plans found within the band (at most SolveOptions.rescore_max)
    rescored: int = 0  # of those, scheduled by the op-graph engine before the time limit
    rescored_graph_s: tuple = ()  # their op-graph step times, the answer's first, then fastest first
    graph_objective_s: float | None = None  # the chosen plan's op-graph step time
    analytic_best_graph_s: float | None = None  # the analytic optimum's op-graph step time
    fastest_graph_s: float | None = None  # the fastest re-scored plan's (the chosen one is within memory_tie)
    memory_tie: float | None = None  # fraction of the fastest op-graph time within which less memory wins
    memory_margin: float | None = None  # the memory model's measured margin the choice preferred to keep
    margin_kept: bool | None = None  # the chosen plan's peak is at or below HBM less headroom, less the margin
    margin_alternative_s: float | None = None  # op-graph time of the plan on the other side of the margin, if solved
    margin_alternative: Plan | None = None  # that plan (the fast one at risk, or the safe one), shown beside the answer
    margin_cost: float | None = None  # SolveOptions.margin_cost_or_band: what keeping the margin may cost (inf: any)
    robust: dict | None = None  # search.robust: step time per scenario of the robust and nominal plans
    #: set only when the answer is a pinned plan over HBM less headroom only by the assumed fragmentation allowance
    #: (search.solve._pinned_tight): the one-line warning (costmodel.physics.memory.verdict.tight_warning)
    memory_warning: str = ""

    @property
    def memory_verdict(self) -> str | None:
        """The answer's memory verdict against HBM less headroom (:mod:`costmodel.physics.memory.verdict`): ``fits``,
        ``tight`` (a pinned plan accepted with :attr:`memory_warning`), or None without an answer."""
        if not self.plans:
            return None
        return TIGHT if self.memory_warning else FITS

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def keeps_margin_for(self, at_risk: "SolveResult", band: float) -> bool:
        """Whether this answer, solved with the memory margin as a hard limit, replaces ``at_risk`` (an answer within
        the margin of the HBM): its op-graph time is within ``band`` of ``at_risk``'s, so the gain the model gives
        up is one it cannot tell from its own engines' disagreement (``search.solve._keep_margin``)."""
        return (
            bool(self.plans)
            and self.graph_objective_s is not None
            and at_risk.graph_objective_s is not None
            and self.graph_objective_s <= at_risk.graph_objective_s * (1 + band)
        )

    @property
    def gap(self) -> float | None:
        if self.objective_s is None or self.bound_s is None or self.objective_s <= 0:
            return None
        return max(0.0, (self.objective_s - self.bound_s) / self.objective_s)

    def solve_dict(self) -> dict:
        """The ``solve`` object of the JSON output (DESIGN.md)."""
        return {
            "status": self.status,
            "time_s": self.time_s,
            "objective_s": self.objective_s,
            "bound_s": self.bound_s,
            "gap": self.gap,
            "solver_time_s": self.solver_time_s,
            "stats": self.stats.to_dict(),
            "explanation": self.explanation,
            "changes": list(self.changes),
            "memory_verdict": self.memory_verdict,
            **({"memory_warning": self.memory_warning} if self.memory_warning else {}),
            **self.rescore_dict(),
            **({"robust": self.robust} if self.robust else {}),
        }

    def rescore_dict(self) -> dict:
        """Both objectives: the analytic optimum CP-SAT proved (``objective_s``, ``bound_s``) and the
        op-graph step time of the chosen plan, with the band the re-scored plans came from."""
        if self.band is None:
            return {}
        chosen = self.best.objective_s if self.best else None
        return {
            "engine": "graph",
            "band": self.band,
            "within_band": self.within_band,
            "rescored": self.rescored,
            "graph_objective_s": self.graph_objective_s,
            "chosen_objective_s": chosen,
            "analytic_best_graph_s": self.analytic_best_graph_s,
            "fastest_graph_s": self.fastest_graph_s,
            "memory_tie": self.memory_tie,
            "memory_margin": self.memory_margin,
            "margin_kept": self.margin_kept,
            "margin_alternative_s": self.margin_alternative_s,
            "prefer": None if self.margin_cost is None else ("safe" if math.isinf(self.margin_cost) else "fast"),
        }


def config_of(
    choice: Choice, split: Split, flash_attention: bool = True, fused_elementwise: bool = True
) -> ParallelConfig:
    """The :class:`ParallelConfig` of a plan; an even split is left implicit (``layers_per_stage=None``)."""
    lps = split.layers_per_stage(choice.shape.pp)
    even = len(set(lps)) == 1 and lps[0] % choice.vp == 0  # Megatron's even split: no layout needed
    return choice.config(flash_attention, None if even else lps, fused_elementwise)


def binding_constraints(p: Problem, plan_choice: Choice, est: Estimate) -> list[str]:
    """Human-readable constraints the plan sits on."""
    out = []
    cap = p.hbm_cap_bytes
    peak = max(est.memory, key=lambda m: m["total_bytes"])
    if peak["total_bytes"] >= MEMORY_BINDING * cap:
        what = "HBM" if not p.limits.headroom_bytes else f"HBM less {p.limits.headroom_bytes / GiB:.1f} GiB headroom"
        out.append(
            f"memory of stage {peak['stage']} at {100 * peak['total_bytes'] / cap:.0f}% of {what} "
            f"({peak['total_bytes'] / GiB:.1f} of {cap / GiB:.1f} GiB)"
        )
    s, lim = plan_choice.shape, p.limits
    if not lim.tp_across_nodes and s.tp == p.cluster.domain:
        wider = [t for t in tp_values(_across(p)) if t > s.tp]
        if wider:
            out.append(f"tp limited to {s.tp} GPUs per NVLink domain (tp={wider[0]} would span domains)")
    values = {
        "tp": s.tp,
        "pp": s.pp,
        "dp": s.dp,
        "ep": s.ep,
        "cp": s.cp,
        "vp": plan_choice.vp,
        "mb": plan_choice.mb,
        "sp": plan_choice.sp,
        "zero": plan_choice.zero,
        "recompute": plan_choice.recompute,
        "chunks": plan_choice.chunks,
        "bucket_mb": plan_choice.bucket_mb,
    }
    act_offload = dict(p.options).get("activation_offload_layers")
    for var, v in values.items():
        if act_offload and var in ("pp", "recompute"):  # the Problem's pins (search.problem._act_offload_limits)
            out.append(
                f"{var}={v} with activation offload (Megatron runs --cpu-offloading-num-layers "
                f"{act_offload} only at pp=1 without recompute)"
            )
        elif var in lim.fixed:
            out.append(f"{var}={v} fixed by the user")
        elif var in lim.maximum and v == lim.maximum[var]:
            out.append(f"{var} at its maximum {v} (user limit)")
        elif var in lim.minimum and v == lim.minimum[var]:
            out.append(f"{var} at its minimum {v} (user limit)")
    if plan_choice.mb == lim.mb_max:
        out.append(f"mb at the largest candidate ({lim.mb_max}; --mb-max)")
    if plan_choice.vp == lim.vp_max and s.pp > 1:
        out.append(f"vp at the largest candidate ({lim.vp_max}; --vp-max)")
    if lim.exclude:
        out.append("excluded by the user: " + ", ".join(f"{k}={','.join(map(str, v))}" for k, v in lim.exclude.items()))
    return out


def _across(p: Problem) -> Problem:
    from dataclasses import replace

    return replace(p, limits=replace(p.limits, tp_across_nodes=True))
