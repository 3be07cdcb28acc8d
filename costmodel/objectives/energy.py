"""Energy of a run: GPU board power at the plan's predicted utilisation, times the facility's PUE.

**Board power.** Linear between idle and the board's power limit in the fraction of the time the GPU computes:
``P = P_idle + (TDP - P_idle) * a``, the form Fan, Weber and Barroso fit to servers against CPU utilisation ("Power
provisioning for a warehouse-sized computer", ISCA 2007: ``P(u) = P_idle + (P_busy - P_idle) u``), here with the
GPU's compute kernels for the CPU: ``a`` is the share of the step in compute, recompute, interference-slowed compute
and the optimizer (:func:`activity`, from the step's breakdown: the bubble and exposed communication count as idle),
what DCGM's SM activity measures (``DCGM_FI_PROF_SM_ACTIVE``: the fraction of time at least one warp is resident on
an SM). Busy is the board's power limit (:mod:`costmodel.objectives.hardware`, from NVIDIA's datasheets): large
GEMMs run Hopper at its power limit (the h100-sxm preset: an isolated BF16 GEMM "sustains about 700 TFLOP/s ... at
the power limit"). Idle is :data:`DEFAULT_IDLE_FRACTION` of TDP, ASSUMED. For scale: an 8-GPU H100 node training
drew at most 76% of its 10.2 kW rating (Newkirk et al. 2025, arXiv 2506.14551).

**Run.** The GPUs draw ``P`` while the job computes (the failure-free compute and the lost work redone) and idle
power while it stops (checkpoint writes, restarts). The host CPUs, memory, NICs and switches are not counted
(``other_w_per_gpu``, 0 unless stated). The facility multiplies by its PUE (total power / IT power): default
:data:`DEFAULT_PUE`, the industry average of the Uptime Institute Global Data Center Survey 2024 (1.56; hyperscale
AI sites report lower, e.g. 1.1): stated, overridable.

>>> e = run_energy(gpus=1000, active_s=3600, idle_s=0, activity=1.0, train_tokens=1e9, device_name="H100-SXM5-80GB")
>>> round(e.gpu_kwh), round(e.kwh), round(e.j_per_token, 4)      # 1000 x 700 W x 1 h, x 1.56
(700, 1092, 3.9312)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.objectives.hardware import board_tdp_w
from costmodel.spec.errors import SpecError
from costmodel.training.estimate import Estimate

#: idle board power as a fraction of TDP: ASSUMED (no datasheet states an idle power)
DEFAULT_IDLE_FRACTION = 0.1
#: power usage effectiveness: "average annual PUE ... 1.56" at respondents' largest data center, Uptime Institute
#: Global Data Center Survey 2024
DEFAULT_PUE = 1.56
#: the step's breakdown terms in which the GPU computes (costmodel.training.estimate: the rest is bubble or exposed
#: communication)
BUSY_TERMS = ("compute_s", "recompute_s", "interference_s", "optimizer_s")
J_PER_KWH = 3.6e6


def activity(estimate: Estimate) -> float:
    """The share of ``estimate``'s step in which the GPU computes (:data:`BUSY_TERMS` over the step time)."""
    if not isinstance(estimate, Estimate):
        raise SpecError("estimate", type(estimate).__name__, "a training Estimate")
    busy = sum(estimate.breakdown.get(k, 0.0) for k in BUSY_TERMS)
    return min(1.0, max(0.0, busy / estimate.step_time_s))


def board_power_w(tdp_w: float, activity_share: float, idle_fraction: float = DEFAULT_IDLE_FRACTION) -> float:
    """Board power at ``activity_share`` of the time computing: linear from ``idle_fraction * tdp_w`` to ``tdp_w``.

    >>> board_power_w(700, 0.0), board_power_w(700, 0.5), board_power_w(700, 1.0)
    (70.0, 385.0, 700.0)
    """
    _fraction("activity", activity_share)
    _fraction("idle_fraction", idle_fraction)
    idle = idle_fraction * tdp_w
    return idle + (tdp_w - idle) * activity_share


@dataclass(frozen=True)
class RunEnergy:
    """Energy of one run (kWh at the meter, J per token) and the powers it used."""

    kwh: float
    gpu_kwh: float  # the boards (and other_w_per_gpu), before PUE
    j_per_token: float
    board_w: float  # one GPU while the job computes
    idle_w: float  # one GPU while it stops
    tdp_w: float
    activity: float
    pue: float
    sources: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "kwh": self.kwh,
            "gpu_kwh": self.gpu_kwh,
            "j_per_token": self.j_per_token,
            "board_w": self.board_w,
            "idle_w": self.idle_w,
            "tdp_w": self.tdp_w,
            "activity": self.activity,
            "pue": self.pue,
            "sources": list(self.sources),
        }


def run_energy(
    *,
    gpus: int,
    active_s: float,
    idle_s: float,
    activity: float,
    train_tokens: float,
    device_name: str,
    pue: float = DEFAULT_PUE,
    tdp_w: float | None = None,
    idle_fraction: float = DEFAULT_IDLE_FRACTION,
    other_w_per_gpu: float = 0.0,
) -> RunEnergy:
    """Energy of ``gpus`` GPUs computing ``active_s`` seconds at ``activity`` and stopped ``idle_s`` seconds, for
    ``train_tokens`` tokens (module docstring). ``tdp_w`` replaces the device's board power limit."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("gpus", gpus, "a positive integer")
    for name, value in (("active_s", active_s), ("idle_s", idle_s), ("other_w_per_gpu", other_w_per_gpu)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise SpecError(name, value, "a non-negative finite number")
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float)) or not 0 < train_tokens < math.inf:
        raise SpecError("train_tokens", train_tokens, "a positive finite number")
    if isinstance(pue, bool) or not isinstance(pue, (int, float)) or not 1 <= pue < math.inf:
        raise SpecError("pue", pue, "a number >= 1 (total facility power / IT power)")
    tdp, tdp_source = board_tdp_w(device_name, tdp_w)
    busy_w, idle_w = board_power_w(tdp, activity, idle_fraction), board_power_w(tdp, 0.0, idle_fraction)
    gpu_j = gpus * (busy_w * active_s + idle_w * idle_s + other_w_per_gpu * (active_s + idle_s))
    sources = (
        f"board power limit {tdp:g} W ({tdp_source})",
        f"idle {idle_w:g} W = {idle_fraction:g} x TDP"
        + (" (ASSUMED)" if idle_fraction == DEFAULT_IDLE_FRACTION else " (stated)"),
        "board power linear in compute activity between idle and TDP (Fan, Weber & Barroso, ISCA 2007)",
        f"PUE {pue:g}"
        + (" (Uptime Institute Global Data Center Survey 2024 average)" if pue == DEFAULT_PUE else " (stated)"),
        "host CPUs, memory, NICs and switches not counted"
        if not other_w_per_gpu
        else f"other IT power {other_w_per_gpu:g} W per GPU (stated)",
    )
    return RunEnergy(
        gpu_j * pue / J_PER_KWH,
        gpu_j / J_PER_KWH,
        gpu_j * pue / train_tokens,
        busy_w,
        idle_w,
        tdp,
        activity,
        pue,
        sources,
    )


def _fraction(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(name, value, "a fraction in [0, 1]")
