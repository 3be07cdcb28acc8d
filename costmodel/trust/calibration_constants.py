"""The efficiency constants a calibration fits: where each lives in a cluster, its bounds and typical error.

A :class:`Constant` names a field of the cluster's device or links; :data:`CONSTANTS` lists those a real cluster
changes; :func:`get_value` reads one and :func:`apply` replaces some, refusing values outside their bounds with a
:class:`CalibrationError`. The fit itself: :mod:`costmodel.trust.calibration`.

>>> from costmodel.spec.presets import load_cluster
>>> cl = load_cluster("a100-80g")
>>> get_value(cl, "intra_link_efficiency")
0.78
>>> get_value(apply(cl, {"gemm_efficiency": 0.8}), "gemm_efficiency")
0.8
>>> apply(cl, {"gemm_efficiency": 1.5})
Traceback (most recent call last):
...
costmodel.trust.calibration_constants.CalibrationError: gemm_efficiency=1.5: must be within its bounds [0.3, 0.95]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec


class CalibrationError(SpecError):
    """A calibration request the runs cannot answer (too many constants, unknown name...)."""


@dataclass(frozen=True)
class Constant:
    """One calibratable constant: where it lives in a :class:`ClusterSpec` and its bounds.

    ``part`` is ``device``, ``intra_link`` or ``inter_link``; ``attr`` the field there.
    ``lo``/``hi`` are physical bounds; ``rel_scale`` (or ``abs_scale``) a typical error of
    the constant, used for finite differences and to rank constants by their effect.
    """

    name: str
    part: str
    attr: str
    lo: float
    hi: float
    rel_scale: float = 0.1
    abs_scale: float = 0.0
    meaning: str = ""

    def scale_of(self, value: float) -> float:
        return self.abs_scale or self.rel_scale * max(abs(value), 1e-3)


#: the constants a user's cluster changes, in the order reports list them
CONSTANTS: dict[str, Constant] = {
    c.name: c
    for c in (
        Constant(
            "gemm_efficiency",
            "device",
            "gemm_efficiency",
            0.3,
            0.95,
            meaning="fraction of BF16/FP16 peak a large GEMM sustains",
        ),
        Constant(
            "fp8_gemm_efficiency",
            "device",
            "fp8_gemm_efficiency",
            0.2,
            0.95,
            meaning="fraction of FP8 peak a large GEMM sustains",
        ),
        Constant(
            "attention_efficiency",
            "device",
            "attention_efficiency",
            0.2,
            0.95,
            meaning="fraction of BF16 peak a fused attention kernel sustains",
        ),
        Constant(
            "mem_bw_efficiency",
            "device",
            "mem_bw_efficiency",
            0.4,
            0.98,
            meaning="fraction of HBM bandwidth an element-wise kernel sustains",
        ),
        Constant(
            "comm_compute_interference",
            "device",
            "comm_compute_interference",
            0.0,
            0.5,
            abs_scale=0.05,
            meaning="compute throughput lost while an SM-based collective runs",
        ),
        Constant(
            "intra_link_efficiency",
            "intra_link",
            "efficiency",
            0.3,
            1.0,
            meaning="fraction of NVLink bandwidth collectives achieve",
        ),
        Constant(
            "inter_link_efficiency",
            "inter_link",
            "efficiency",
            0.3,
            1.0,
            meaning="fraction of NIC bandwidth collectives achieve",
        ),
    )
}


def constant(name: str) -> Constant:
    """The :class:`Constant` called ``name``; a :class:`CalibrationError` names the allowed ones."""
    if name not in CONSTANTS:
        raise CalibrationError("fit", name, f"one of {', '.join(CONSTANTS)}")
    return CONSTANTS[name]


def get_value(cluster: ClusterSpec, name: str) -> float:
    """The current value of constant ``name`` in ``cluster``."""
    c = constant(name)
    return float(getattr(getattr(cluster, c.part), c.attr))


def apply(cluster: ClusterSpec, values: dict) -> ClusterSpec:
    """``cluster`` with the given constants replaced (each checked against its bounds)."""
    parts = {}
    for name, v in values.items():
        c = constant(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not c.lo <= v <= c.hi:
            raise CalibrationError(name, v, f"within its bounds [{c.lo:g}, {c.hi:g}]")
        parts.setdefault(c.part, {})[c.attr] = float(v)
    return replace(cluster, **{p: replace(getattr(cluster, p), **kw) for p, kw in parts.items()})
