"""One plan's objectives at once, and the scalar a search minimises for each (``--objective``).

``plan_objectives(estimate, model, cluster, workload, train_tokens)`` runs :func:`~costmodel.objectives.
time_to_train.time_to_train` once and prices its wall time (:mod:`costmodel.objectives.cost`) and energy
(:mod:`costmodel.objectives.energy`) from it; :meth:`PlanObjectives.value` is what ``recommend --objective
step|time-to-train|cost|energy`` would minimise: the step time, the wall-clock seconds, the dollars, the kWh. A
device without a default price gets ``cost = None`` (and a note) unless ``gpu_hour_usd`` is given; asking for its
cost then raises.

>>> from costmodel.api import evaluate
>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> from costmodel.spec.workload import Workload
>>> m, cl, w = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(64), Workload(global_batch=256, seq_len=8192)
>>> p = plan_objectives(evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic"), m, cl, w, 1e12)
>>> p.value("cost") == p.cost.usd, p.value("time-to-train") == p.time_to_train.wall_s
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.objectives.cost import RunCost, gpu_hour_price, run_cost
from costmodel.objectives.energy import DEFAULT_IDLE_FRACTION, DEFAULT_PUE, RunEnergy, activity, run_energy
from costmodel.objectives.time_to_train import TimeToTrain, time_to_train
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.training.estimate import Estimate

#: what a search may minimise: the step, the wall-clock days to the token budget, the dollars, the energy
OBJECTIVES = ("step", "time-to-train", "cost", "energy")


@dataclass(frozen=True)
class PlanObjectives:
    """One plan's step time, time to train, cost and energy."""

    step_time_s: float
    time_to_train: TimeToTrain
    cost: RunCost | None
    energy: RunEnergy
    notes: tuple[str, ...] = ()

    def value(self, objective: str) -> float:
        """The number ``objective`` minimises: seconds per step, wall seconds, USD or kWh."""
        if objective not in OBJECTIVES:
            raise SpecError("objective", objective, f"one of {', '.join(OBJECTIVES)}")
        if objective == "cost" and self.cost is None:
            raise SpecError("gpu_hour_usd", None, "given for objective 'cost' on this device (no default price)")
        return {
            "step": lambda: self.step_time_s,
            "time-to-train": lambda: self.time_to_train.wall_s,
            "cost": lambda: self.cost.usd,
            "energy": lambda: self.energy.kwh,
        }[objective]()

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "time_to_train": self.time_to_train.to_dict(),
            "cost": None if self.cost is None else self.cost.to_dict(),
            "energy": self.energy.to_dict(),
            "notes": list(self.notes),
        }


def plan_objectives(
    estimate: Estimate,
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    train_tokens: float,
    *,
    gpu_hour_usd: float | None = None,
    pue: float = DEFAULT_PUE,
    tdp_w: float | None = None,
    idle_fraction: float = DEFAULT_IDLE_FRACTION,
    other_w_per_gpu: float = 0.0,
    **time_to_train_options,
) -> PlanObjectives:
    """``estimate``'s plan run to ``train_tokens`` tokens: time (``time_to_train_options`` as
    :func:`~costmodel.objectives.time_to_train.time_to_train` takes them), dollars and energy."""
    ttt = time_to_train(estimate, model, cluster, workload, train_tokens, **time_to_train_options)
    device = cluster.device.name
    notes = []
    cost = None
    try:
        gpu_hour_price(device, gpu_hour_usd)
    except SpecError:
        if gpu_hour_usd is not None:
            raise
        notes.append(f"no cost: no default GPU-hour price for {device!r} (give gpu_hour_usd)")
    else:
        cost = run_cost(
            gpus=ttt.gpus, wall_s=ttt.wall_s, train_tokens=train_tokens, device_name=device, gpu_hour_usd=gpu_hour_usd
        )
    lost = ttt.lost
    energy = run_energy(
        gpus=ttt.gpus,
        active_s=lost.compute_s + lost.lost_work_s,
        idle_s=lost.checkpoint_s + lost.restart_s,
        activity=activity(estimate),
        train_tokens=train_tokens,
        device_name=device,
        pue=pue,
        tdp_w=tdp_w,
        idle_fraction=idle_fraction,
        other_w_per_gpu=other_w_per_gpu,
    )
    return PlanObjectives(estimate.step_time_s, ttt, cost, energy, tuple(notes))
