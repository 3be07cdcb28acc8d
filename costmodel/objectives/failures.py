"""Failures of a synchronous training job and what they cost: the failure rate, the restart, the checkpoint
interval by Young and Daly, and the expected wall-clock time lost to checkpoints, rework and restarts.

**Failure rate.** Per GPU-hour; a job of ``g`` GPUs stops at ``g`` times the rate (one GPU's failure stops the
synchronous job), so its mean time between failures is ``M = 1 / (rate * g)`` hours. The default is the Llama 3
report's (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, section 3.3.4): "During a 54-day
snapshot period of pre-training, we experienced a total of 466 job interruptions. Of these, 47 were planned
interruptions ... The remaining 419 were unexpected interruptions", on the 16,384-H100 job:

>>> 54 * 24 * 16384                                    # GPU-hours in the snapshot
21233664
>>> LLAMA3_FAILURES_PER_GPU_HOUR == 419 / 21233664
True
>>> round(LLAMA3_FAILURES_PER_GPU_HOUR, 10), round(1 / LLAMA3_FAILURES_PER_GPU_HOUR)   # about one per 50,700 GPU-hours
(1.97328e-05, 50677)
>>> round(mtbf_s(LLAMA3_FAILURES_PER_GPU_HOUR, 16384) / 3600, 2)                      # the job: one every 3.1 hours
3.09

The 47 planned interruptions (maintenance, after a checkpoint) are not charged.

**Restart.** Failure detection and relaunch, NCCL initialisation and reading the checkpoint back. The first two
are *assumed* (:data:`DEFAULT_JOB_RESTART_S`, :data:`DEFAULT_NCCL_INIT_S`: no source states them for a job of this
size; the Llama 3 report says only that job startup time was reduced, section 3.3.4); the read is the plan's
(:class:`costmodel.objectives.checkpoint.CheckpointCost` ``load_s``).

**Expected wall time.** Daly's complete model for Poisson failures (Daly 2006, "A higher order estimate of the
optimum checkpoint interval for restart dumps", Future Generation Computer Systems 22(3):303-312): compute
``T_s`` in segments of ``tau`` seconds, each followed by a checkpoint that stops training ``delta`` seconds; a
failure loses the segment so far and costs a restart ``R`` (failures may strike during restarts too):
``T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau`` (:func:`lost_time` splits it into checkpoint writes,
lost work and restarts). At first order a failure loses half a segment, ``(tau + delta) / 2``, plus the restart.
An asynchronous checkpoint is durable ``durable_s`` after it starts, so a failure loses ``durable_s - delta`` more
work (the previous checkpoint is the last whole one): charged as rework after each restart (``rework_s``).

**Interval.** Young (1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9):530-531):
``tau = sqrt(2 delta M)``. Daly (2006, the higher-order estimate minimising the model above): ``tau = sqrt(2 delta
M) [1 + (1/3) sqrt(delta / 2M) + (1/9) (delta / 2M)] - delta`` for ``delta < 2M``, ``tau = M`` otherwise; its
leading terms are ``sqrt(2 delta M) - delta``, the form for ``delta << M``. Daly's figures 3-5 (``delta`` = 5 min,
``M`` = 24 h, 6 h, 15 min) give 117, 57 and 9.1 minutes:

>>> [round(daly_interval_s(5 * 60, m * 60) / 60, 1) for m in (24 * 60, 6 * 60, 15)]
[116.7, 56.7, 9.1]
>>> round(young_interval_s(5 * 60, 24 * 3600) / 60)
120
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.spec.errors import SpecError

#: unexpected interruptions in the Llama 3 405B pre-training snapshot (arXiv 2407.21783, section 3.3.4)
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
#: the snapshot's days and the job's H100 GPUs (same section; section 3.3.1: 16K H100 GPUs)
LLAMA3_SNAPSHOT_DAYS, LLAMA3_GPUS = 54, 16384
#: failures per GPU-hour: 419 / (54 days * 24 h * 16,384 GPUs)
LLAMA3_FAILURES_PER_GPU_HOUR = LLAMA3_UNEXPECTED_INTERRUPTIONS / (LLAMA3_SNAPSHOT_DAYS * 24 * LLAMA3_GPUS)
#: detecting the failure, replacing the node and relaunching every process: 5 minutes, ASSUMED (not measured)
DEFAULT_JOB_RESTART_S = 300.0
#: NCCL communicator initialisation: 1 minute, ASSUMED; for scale, Meta reports NCCL's ring building alone taking
#: "several dozens of seconds at 100K scale" (NVIDIA/nccl pull request 1789, "NCCL Fast Init")
DEFAULT_NCCL_INIT_S = 60.0
#: the restart outside the checkpoint read (assumed, the two above)
DEFAULT_RESTART_S = DEFAULT_JOB_RESTART_S + DEFAULT_NCCL_INIT_S


def mtbf_s(failure_rate_per_gpu_hour: float, gpus: int) -> float:
    """Mean time between failures of a synchronous job on ``gpus`` GPUs, seconds (inf at rate 0)."""
    _non_negative("failure_rate", failure_rate_per_gpu_hour)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("gpus", gpus, "a positive integer")
    if failure_rate_per_gpu_hour == 0:
        return math.inf
    return 3600.0 / (failure_rate_per_gpu_hour * gpus)


def young_interval_s(delta_s: float, mtbf: float) -> float:
    """Young's optimum compute time between checkpoints, ``sqrt(2 delta M)``."""
    return math.sqrt(2.0 * delta_s * mtbf)


def daly_interval_s(delta_s: float, mtbf: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (module docstring); ``M`` for ``delta >= 2M``."""
    _non_negative("checkpoint_s", delta_s)
    _positive("mtbf_s", mtbf)
    if mtbf == math.inf:
        return math.inf
    if delta_s >= 2.0 * mtbf:
        return mtbf
    x = delta_s / (2.0 * mtbf)
    return math.sqrt(2.0 * delta_s * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


@dataclass(frozen=True)
class LostTime:
    """Where the wall-clock time of a run goes under Daly's model (seconds; ``failures`` is a count)."""

    compute_s: float  # the failure-free compute
    checkpoint_s: float  # training stopped for the checkpoints that completed
    lost_work_s: float  # compute (and checkpoints) redone after failures, the async lag included
    restart_s: float  # restarts, failures during restarts included
    failures: float  # expected failures over the run

    @property
    def wall_s(self) -> float:
        return self.compute_s + self.checkpoint_s + self.lost_work_s + self.restart_s

    @property
    def goodput(self) -> float:
        """The effective training time ratio: failure-free compute over wall time."""
        return self.compute_s / self.wall_s

    def to_dict(self) -> dict:
        return {
            "compute_s": self.compute_s,
            "checkpoint_writes_s": self.checkpoint_s,
            "lost_work_s": self.lost_work_s,
            "restarts_s": self.restart_s,
            "failures": self.failures,
            "wall_s": self.wall_s,
            "goodput": self.goodput,
        }


def lost_time(
    compute_s: float, interval_s: float, delta_s: float, mtbf: float, restart_s: float, rework_s: float = 0.0
) -> LostTime:
    """Daly's expected wall time of ``compute_s`` of compute checkpointed every ``interval_s`` (stopping
    ``delta_s`` each) on a job whose mean time between failures is ``mtbf``, each failure costing ``restart_s``
    and ``rework_s`` of extra rework (an asynchronous checkpoint's lag), split by where it goes.

    >>> t = lost_time(3600 * 100, 600, 10, 3 * 3600, 300)
    >>> math.isclose(t.wall_s, expected_wall_s(3600 * 100, 600, 10, 3 * 3600, 300))
    True
    >>> round(t.lost_work_s / t.failures), (600 + 10) / 2    # per failure, about half a segment (first order)
    (294, 305.0)
    """
    for name, value in (
        ("compute_s", compute_s),
        ("checkpoint_s", delta_s),
        ("restart_s", restart_s),
        ("rework_s", rework_s),
    ):
        _non_negative(name, value)
    _positive("interval_s", interval_s)
    _positive("mtbf_s", mtbf)
    segments = compute_s / interval_s
    if mtbf == math.inf:
        return LostTime(compute_s, segments * delta_s, 0.0, 0.0, 0.0)
    seg = interval_s + delta_s
    fails = math.expm1(seg / mtbf)  # expected failures while running one segment
    failed_runs = mtbf * fails - seg  # time spent in the attempts that failed
    after = restart_s + rework_s
    recover = fails * mtbf * math.expm1(after / mtbf)  # restarts and the async rework, failures in them included
    rework = recover * rework_s / after if after else 0.0
    wall = segments * (seg + failed_runs + recover)
    return LostTime(
        compute_s, segments * delta_s, segments * (failed_runs + rework), segments * (recover - rework), wall / mtbf
    )


def expected_wall_s(compute_s: float, interval_s: float, delta_s: float, mtbf: float, restart_s: float) -> float:
    """Daly's complete model as he writes it: ``M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau``."""
    if mtbf == math.inf:
        return compute_s * (interval_s + delta_s) / interval_s
    return mtbf * math.exp(restart_s / mtbf) * math.expm1((interval_s + delta_s) / mtbf) * compute_s / interval_s


def _non_negative(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise SpecError(name, value, "a non-negative finite number")


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SpecError(name, value, "a positive number")
