"""The integer time of the solver: one resolution per problem, and seconds to ticks."""

from __future__ import annotations

import math

import numpy as np

from costmodel.physics.kernels.flops import model_flops_per_step

from ..problem import Problem


def resolution_s(p: Problem) -> float:
    """The one time resolution of the integer tables: a millionth of the order of magnitude of
    the ideal step time (model FLOPs at peak on all GPUs), so objectives are about 1e6 ticks."""
    # the resolution was set on the full-attention count; kept, so the integer tables stay as they were
    ideal = model_flops_per_step(p.model, p.workload, "full") / (
        p.gpus * p.cluster.device.peak_flops_per_s(p.workload.dtype)
    )
    return 10.0 ** (math.floor(math.log10(max(ideal, 1e-12))) - 6)


def ticks(seconds, res_s: float):
    """Seconds to integer ticks of ``res_s`` (the only conversion to the solver's integers)."""
    return np.rint(np.asarray(seconds, dtype=float) / res_s).astype(np.int64)
