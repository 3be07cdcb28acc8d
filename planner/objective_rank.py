"""Re-ranking a search's plans by what a run costs (issue 41): ``--objective time-to-train|cost|energy``.

The search minimises the step time. With another objective :func:`planner.api.recommend` asks it for the
:data:`CANDIDATES` fastest plans (those it finds, within its band) and :func:`rank` orders them by
:meth:`costmodel.objectives.PlanObjectives.value` of each plan's reported estimate (the op-graph engine's, as
``evaluate`` reports it), the step time breaking ties. The answer is the best *of those plans* by the objective:
a ranking, not a proof (a plan slower per step outside them could still win). :func:`pareto` keeps the candidates
no other candidate beats on every one of step time, cost (or time to train), energy and memory headroom.

>>> check_inputs({"pue": 1.2}) == {"pue": 1.2}
True
>>> check_inputs({"price": 3})
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: objective_inputs.price=3: must be one of gpu_hour_usd, pue, failure_rate, \
storage_gbps, async_ckpt, interval_s, restart_s
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from costmodel.objectives import OBJECTIVES, PlanObjectives, plan_objectives
from costmodel.objectives.checkpoint import MODES
from costmodel.spec.errors import SpecError

#: plans asked of the search when an objective other than the step time ranks them
CANDIDATES = 20
#: what ``objective_inputs`` may hold: those of :func:`costmodel.objectives.plan_objectives` (first two) and of
#: :func:`costmodel.objectives.time_to_train` (the rest)
INPUT_KEYS = ("gpu_hour_usd", "pue", "failure_rate", "storage_gbps", "async_ckpt", "interval_s", "restart_s")
#: what each objective minimises, in words
MEANING = {
    "step": "step time",
    "time-to-train": "time to train",
    "cost": "cost",
    "energy": "energy",
}


def check_objective(objective: str, train_tokens, pareto: bool = False) -> None:
    """SpecError unless ``objective`` is known and ``train_tokens`` is given where it is needed."""
    if objective not in OBJECTIVES:
        raise SpecError("objective", objective, f"one of {', '.join(OBJECTIVES)}")
    if train_tokens is None:
        if objective != "step" or pareto:
            what = f"--objective {objective}" if objective != "step" else "--pareto"
            raise SpecError("train_tokens", None, f"given (--train-tokens N) for {what}: the run's token budget")
        return
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float)) or not 0 < train_tokens < math.inf:
        raise SpecError("train_tokens", train_tokens, "a positive finite number of tokens")


def check_inputs(inputs: dict | None) -> dict:
    """``inputs`` checked by key and value (each value as its flag allows), as a new dict."""
    out = dict(inputs or {})
    for k, v in out.items():
        if k not in INPUT_KEYS:
            raise SpecError(f"objective_inputs.{k}", v, f"one of {', '.join(INPUT_KEYS)}")
        if k == "async_ckpt":
            if v not in MODES:
                raise SpecError("async_ckpt", v, f"one of {', '.join(MODES)}")
            continue
        number = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        ok = {
            "pue": lambda: v >= 1,
            "failure_rate": lambda: v >= 0,
            "restart_s": lambda: v >= 0,
        }.get(k, lambda: v > 0)
        if not number or not ok():
            allowed = {
                "pue": "a number >= 1 (facility power / IT power)",
                "failure_rate": "a finite number >= 0 of failures per GPU-hour",
                "restart_s": "a finite number >= 0 of seconds",
            }.get(k, "a positive finite number")
            raise SpecError(k, v, allowed)
    return out


def objectives_of(estimate, model, cluster, workload, train_tokens: float, inputs: dict) -> PlanObjectives:
    """:func:`costmodel.objectives.plan_objectives` of one estimate with ``inputs`` (:data:`INPUT_KEYS`)."""
    kw = dict(inputs)
    money = {k: kw.pop(k) for k in ("gpu_hour_usd", "pue") if k in kw}
    return plan_objectives(estimate, model, cluster, workload, train_tokens, **money, **kw)


@dataclass
class Ranking:
    """The candidates' objectives, best first by ``objective`` (``entries``: (config, PlanObjectives))."""

    objective: str
    train_tokens: float
    inputs: dict
    entries: list = field(default_factory=list)
    fastest_config: object = None  # the search's answer by step time

    @property
    def candidates(self) -> int:
        return len(self.entries)

    def of(self, config) -> PlanObjectives | None:
        return next((o for c, o in self.entries if c == config), None)

    def changed(self) -> bool:
        """Whether the objective chose another plan than the fastest."""
        return bool(self.entries) and self.entries[0][0] != self.fastest_config

    def headline(self) -> str:
        """One honest line: what was ranked, by what."""
        if self.objective == "step":
            return "the fastest plan's run (--objective step ranks by the step time alone)"
        what = MEANING[self.objective]
        tail = (
            "the fastest plan is also the best by it"
            if not self.changed()
            else "it differs from the fastest plan (the search's answer by step time)"
        )
        return (
            f"best of the {self.candidates} fastest plans by {what} (a ranking of the plans the search found within "
            f"its band, not a proof of the optimum by {what}); {tail}"
        )


def rank(plans: list, model, cluster, workload, objective: str, train_tokens: float, inputs: dict):
    """(``plans`` best first by ``objective``, their :class:`Ranking`); the step time breaks ties and keeps
    the search's order among equals."""
    if not plans:
        return plans, Ranking(objective, float(train_tokens), dict(inputs))
    scored = [(p, objectives_of(p.reported, model, cluster, workload, train_tokens, inputs)) for p in plans]
    if objective != "step":
        order = sorted(range(len(scored)), key=lambda i: (scored[i][1].value(objective), scored[i][1].step_time_s, i))
        scored = [scored[i] for i in order]
    ranking = Ranking(objective, float(train_tokens), dict(inputs), [(p.config, o) for p, o in scored], plans[0].config)
    return [p for p, _ in scored], ranking


def pareto(plans: list, ranking: Ranking) -> list[tuple]:
    """(plan, PlanObjectives, headroom bytes) of the candidates no other candidate matches or beats on step time,
    cost (time to train where the objective is time to train or no price is known), energy and memory headroom
    (HBM less the predicted peak), in the ranking's order."""
    rows = []
    for p in plans:
        o = ranking.of(p.config)
        if o is None:
            continue
        est = p.reported
        rows.append((p, o, est.hbm_bytes - est.peak_memory_bytes))
    money = second_axis(ranking, [o for _, o, _ in rows])

    def key(o, head):
        return (o.step_time_s, o.value(money), o.energy.kwh, -head)

    keys = [key(o, h) for _, o, h in rows]
    front = []
    for i, row in enumerate(rows):
        dominated = any(
            all(a <= b for a, b in zip(keys[j], keys[i])) and keys[j] != keys[i] for j in range(len(rows)) if j != i
        )
        if not dominated and keys[i] not in [key(o, h) for _, o, h in front]:
            front.append(row)
    return front


def second_axis(ranking: Ranking, objectives: list) -> str:
    """``cost`` unless the objective is time to train or a candidate has no price."""
    if ranking.objective == "time-to-train" or any(o.cost is None for o in objectives):
        return "time-to-train"
    return "cost"
