"""Days to a token budget for one plan: steps x step time, stretched by checkpoints, failures and restarts.

``time_to_train(estimate, model, cluster, workload, train_tokens)`` takes one evaluated plan
(:func:`costmodel.api.evaluate`) and returns :class:`TimeToTrain`: the days, the goodput (effective training time
ratio: failure-free compute over wall time, the Llama 3 report's "effective training time"), the checkpoint interval
and where the lost time goes (checkpoint writes, lost work, restarts). The plan enters three ways: its step time,
its checkpoint (bytes per rank, write and read times: :mod:`costmodel.objectives.checkpoint`) and its GPU count (the
job's failure rate: :mod:`costmodel.objectives.failures`). The interval is Daly's unless ``interval_s`` pins it,
rounded to whole steps, and never shorter than an asynchronous checkpoint's write (the next cannot start before the
last is written). No search or CLI state: a search can call it per plan (a few model-state sums and closed forms).

>>> from costmodel.api import evaluate
>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> from costmodel.spec.workload import Workload
>>> m, cl, w = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(64), Workload(global_batch=256, seq_len=8192)
>>> t = time_to_train(evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic"), m, cl, w, 1e12)
>>> 0.9 < t.goodput < 1, t.interval_rule, t.days > 0
(True, 'Daly 2006', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from costmodel.objectives.checkpoint import (
    DEFAULT_NODE_STORAGE_GBPS,
    DEFAULT_STORAGE_GBPS,
    CheckpointCost,
    checkpoint_cost,
    mode_of,
)
from costmodel.objectives.failures import (
    DEFAULT_RESTART_S,
    LLAMA3_FAILURES_PER_GPU_HOUR,
    LostTime,
    daly_interval_s,
    lost_time,
    mtbf_s,
)
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.training.estimate import Estimate

DAY_S = 86400.0


@dataclass(frozen=True)
class TimeToTrain:
    """One plan's run to ``train_tokens`` with failures and checkpoints (seconds unless named otherwise)."""

    days: float
    goodput: float  # failure-free compute / wall time (the effective training time ratio)
    wall_s: float
    steps: int
    step_time_s: float
    gpus: int
    train_tokens: float
    interval_s: float  # compute between checkpoints
    interval_steps: int
    interval_rule: str  # "Daly 2006", "pinned", "write-bound" or "no failures"
    mtbf_s: float  # the job's mean time between failures
    restart_s: float  # one restart: job relaunch and NCCL init + reading the checkpoint
    restart_parts: dict
    lost: LostTime
    checkpoint: CheckpointCost
    inputs: dict
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.wall_s / 3600.0

    def to_dict(self) -> dict:
        lost = self.lost
        return {
            "days": self.days,
            "goodput": self.goodput,
            "wall_s": self.wall_s,
            "steps": self.steps,
            "step_time_s": self.step_time_s,
            "gpus": self.gpus,
            "gpu_hours": self.gpu_hours,
            "train_tokens": self.train_tokens,
            "interval_s": self.interval_s,
            "interval_steps": self.interval_steps,
            "interval_rule": self.interval_rule,
            "mtbf_s": self.mtbf_s,
            "failures": lost.failures,
            "restart_s": self.restart_s,
            "restart_parts": dict(self.restart_parts),
            "lost_s": {
                "checkpoint_writes": lost.checkpoint_s,
                "lost_work": lost.lost_work_s,
                "restarts": lost.restart_s,
            },
            "lost_work_per_failure_s": lost.lost_work_s / lost.failures if lost.failures else 0.0,
            "checkpoint": self.checkpoint.to_dict(),
            "inputs": dict(self.inputs),
            "assumptions": list(self.assumptions),
        }


def time_to_train(
    estimate: Estimate,
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    train_tokens: float,
    *,
    failure_rate: float = LLAMA3_FAILURES_PER_GPU_HOUR,
    storage_gbps: float = DEFAULT_STORAGE_GBPS,
    node_storage_gbps: float = DEFAULT_NODE_STORAGE_GBPS,
    async_ckpt="sync",
    interval_s: float | None = None,
    restart_s: float = DEFAULT_RESTART_S,
    host_gbps: float | None = None,
    fully_parallel: bool = True,
) -> TimeToTrain:
    """The run of ``estimate``'s plan to ``train_tokens`` tokens (module docstring).

    ``failure_rate``: failures per GPU-hour (default: the Llama 3 snapshot's). ``storage_gbps`` /
    ``node_storage_gbps``: aggregate and per-node storage bandwidth, GB/s. ``async_ckpt``: ``"sync"``, ``"async"``
    or ``"async_pinned"`` (``True`` / ``False`` for async / sync). ``interval_s``: compute between checkpoints, pinned
    (default: Daly's optimum). ``restart_s``: one restart outside the checkpoint read (job relaunch and NCCL init;
    default assumed); the read is the plan's and is added. ``host_gbps``: the device-to-host link, GB/s, one
    direction (default by device). ``fully_parallel``: replicated state written spread over the replicas."""
    if not isinstance(estimate, Estimate):
        raise SpecError(
            "estimate",
            type(estimate).__name__,
            "a training Estimate (costmodel.api.evaluate of a workload in mode 'train')",
        )
    if workload.mode != "train":
        raise SpecError("workload.mode", workload.mode, "'train' (time to train needs a training step)")
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float)) or not 0 < train_tokens < math.inf:
        raise SpecError("train_tokens", train_tokens, "a positive finite number of tokens")
    for name, value in (("restart_s", restart_s),):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise SpecError(name, value, "a non-negative finite number of seconds")
    if interval_s is not None and (
        isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not 0 < interval_s < math.inf
    ):
        raise SpecError("interval_s", interval_s, "a positive finite number of seconds, or None (Daly's optimum)")
    mode = mode_of(async_ckpt)
    c, step = estimate.config, estimate.step_time_s
    gpus = c.gpus
    steps = math.ceil(train_tokens / workload.tokens)
    compute = steps * step
    window = max(0.0, step - estimate.breakdown.get("optimizer_s", 0.0))
    ckpt = checkpoint_cost(
        model,
        cluster,
        c,
        mode=mode,
        storage_gbps=storage_gbps,
        node_storage_gbps=node_storage_gbps,
        host_gbps=host_gbps,
        fully_parallel=fully_parallel,
        window_s=window,
    )
    mtbf = mtbf_s(failure_rate, gpus)
    delta = ckpt.blocking_s
    lag = ckpt.durable_s - delta if mode != "sync" else 0.0  # written after training resumed
    if interval_s is not None:
        tau, rule = float(interval_s), "pinned"
    elif mtbf == math.inf:
        tau, rule = compute, "no failures"
    else:
        tau, rule = daly_interval_s(delta, mtbf), "Daly 2006"
    n = max(1, round(tau / step))
    if lag > n * step and rule != "pinned":  # the next checkpoint starts only once the last is written
        n, rule = math.ceil(lag / step), "write-bound"
    tau = n * step
    restart = restart_s + ckpt.load_s
    lost = lost_time(compute, tau, delta, mtbf, restart, lag)
    inputs = {
        "failure_rate_per_gpu_hour": failure_rate,
        "storage_gbps": storage_gbps,
        "node_storage_gbps": node_storage_gbps,
        "async_ckpt": mode,
        "interval_s": interval_s,
        "restart_s": restart_s,
        "host_gbps": host_gbps,
        "fully_parallel": fully_parallel,
    }
    return TimeToTrain(
        lost.wall_s / DAY_S,
        lost.goodput,
        lost.wall_s,
        steps,
        step,
        gpus,
        float(train_tokens),
        tau,
        n,
        rule,
        mtbf,
        restart,
        {"job_and_nccl_s": restart_s, "checkpoint_load_s": ckpt.load_s},
        lost,
        ckpt,
        inputs,
        _assumptions(inputs, ckpt),
    )


def _assumptions(inputs: dict, ckpt: CheckpointCost) -> tuple[str, ...]:
    out = []
    if inputs["failure_rate_per_gpu_hour"] == LLAMA3_FAILURES_PER_GPU_HOUR:
        out.append(
            "failure rate: 419 unexpected interruptions / (54 days x 24 h x 16,384 H100) = 1.97e-5 per "
            "GPU-hour (Llama 3 report, arXiv 2407.21783, section 3.3.4); planned interruptions not charged"
        )
    if inputs["restart_s"] == DEFAULT_RESTART_S:
        out.append(
            f"restart outside the checkpoint read: {DEFAULT_RESTART_S:g} s ASSUMED (5 min detection and "
            "relaunch + 1 min NCCL init; not measured)"
        )
    out.extend(ckpt.sources)
    if ckpt.mode != "sync":
        out.append("the background checkpoint write is assumed not to slow training")
    out.append("Poisson failures, Daly's complete model (Daly 2006); interval rounded to whole steps")
    return tuple(out)
