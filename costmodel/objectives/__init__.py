"""What a team decides a plan on beyond one step (issue 41): the days to a token budget with failures and
checkpoints, the dollars and the energy of the run. One concept a module: ``hardware`` (a device's power and host
link), ``checkpoint`` (what each rank writes and how long a checkpoint stops training), ``failures`` (failure
rate, restart, the Young/Daly interval and the expected lost time), ``time_to_train``, ``cost``, ``energy`` and
``run`` (the three at once, and the scalar a search minimises). Every default is cited or marked assumed, and
each result says which inputs it used.

Nothing below imports this folder. May import: ``costmodel.api`` and below (a sibling of ``costmodel.trust``).
"""

from costmodel.objectives.checkpoint import CheckpointCost, checkpoint_cost
from costmodel.objectives.cost import RunCost, run_cost
from costmodel.objectives.energy import RunEnergy, run_energy
from costmodel.objectives.failures import LLAMA3_FAILURES_PER_GPU_HOUR
from costmodel.objectives.run import OBJECTIVES, PlanObjectives, plan_objectives
from costmodel.objectives.time_to_train import TimeToTrain, time_to_train

__all__ = [
    "CheckpointCost",
    "checkpoint_cost",
    "RunCost",
    "run_cost",
    "RunEnergy",
    "run_energy",
    "LLAMA3_FAILURES_PER_GPU_HOUR",
    "OBJECTIVES",
    "PlanObjectives",
    "plan_objectives",
    "TimeToTrain",
    "time_to_train",
]
