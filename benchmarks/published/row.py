"""A published row as specs (:class:`Row`) and its prediction over the fields the source leaves to the planner."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import PlannerError
from costmodel.training.estimate import Estimate
from costmodel.api import evaluate
from costmodel.spec.workload import Workload


@dataclass
class Row:
    row_id: str
    source: str
    label: str
    model: object
    cluster: object
    workload: Workload
    fixed: dict  # stated config fields (and, for the new set, framework defaults)
    free: dict  # unstated fields: candidate values to choose from (development set only)
    measured_s: float | None
    skip: str = ""
    set: str = "dev"
    gpus: int = 0
    regimes: tuple = ()
    notes: list = field(default_factory=list)  # how unstated knobs were filled, approximations
    measured_how: str = ""

    def plan_options(self) -> tuple:
        """The run's plan options (:data:`search.problem.PLAN_OPTIONS`: its numerics, dispatcher, ...) as a
        search ``Problem`` takes them: what a search for this run keeps as the run had it."""
        from search.problem import PLAN_OPTIONS

        return tuple((k, self.fixed[k]) for k in PLAN_OPTIONS if k in self.fixed)


def predict(row: Row, engine: str = "graph") -> tuple[Estimate | None, str]:
    """Best estimate over the unstated fields (fits first, then fastest), by ``engine``.
    New-set rows have no free fields (one evaluation of the filled plan) except those of
    :data:`TUNED_TABLES`."""
    best, why = None, ""
    keys = list(row.free)
    for values in itertools.product(*(row.free[k] for k in keys)):
        cfg = dict(row.fixed, **dict(zip(keys, values)))
        try:
            est = evaluate(row.model, row.cluster, row.workload, ParallelConfig(**cfg), engine=engine)
        except PlannerError as e:
            why = str(e)
            continue
        if best is None or (est.fits, -est.step_time_s) > (best.fits, -best.step_time_s):
            best = est
    return best, "" if best else (why or "no valid config for the stated degrees")
