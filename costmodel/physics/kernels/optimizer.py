"""The GPU optimizer step's time (moved out of :mod:`costmodel.physics.kernels.compute`, which re-exports it)."""

from __future__ import annotations

from costmodel.physics.kernels.gemm import elementwise_time_s
from costmodel.spec.specs import DeviceSpec

#: HBM bytes an Adam step moves per parameter, by the optimizer's dtype (``ParallelConfig.optimizer_dtype``):
#: FP32 master, m, v and gradient read (16 B), master, m, v written (12 B) and the BF16 weight (2 B)
#: (Rajbhandari et al. 2020, section 3.1 state layout); BF16 parameter, m, v and gradient read (8 B), the
#: three written (6 B)
ADAM_STEP_BYTES = {"fp32": 30.0, "bf16": 14.0}


def optimizer_time_s(params_local: float, dev: DeviceSpec, optimizer_dtype: str = "fp32") -> float:
    """Adam step over ``params_local`` parameters, HBM-bound (:data:`ADAM_STEP_BYTES` per parameter)."""
    return elementwise_time_s(ADAM_STEP_BYTES[optimizer_dtype] * params_local, dev, kernels=4)
