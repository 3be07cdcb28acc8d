"""Scenarios of the uncertain constants, for plans that must hold up when the model is off.

A scenario moves a group of the calibratable constants (:data:`costmodel.trust.calibration_constants.CONSTANTS`)
by ``k`` of their typical errors in the pessimistic direction (efficiencies down, interference up),
within their physical bounds:

* ``compute``: GEMM (BF16 and FP8), attention and element-wise memory-bandwidth efficiency;
* ``network``: NVLink and NIC efficiency;
* ``interference``: the compute lost while SM-based collectives run;
* ``all``: the three together.

A constant a calibration fitted (``ClusterSpec.calibrated_constants``) moves by half as much: the
user's own runs pinned it down. ``recommend --robust`` minimises the worst step time over
``nominal`` and these scenarios (:mod:`search.robust`).

>>> from costmodel.spec.presets import load_cluster
>>> [name for name, _ in scenarios(load_cluster("a100-80g"))]
['nominal', 'compute', 'network', 'interference', 'all']
>>> dict(scenarios(load_cluster("a100-80g")))["compute"].device.gemm_efficiency < 0.71
True
"""

from __future__ import annotations

from costmodel.trust.calibration_constants import CONSTANTS, apply, get_value
from costmodel.spec.specs import ClusterSpec

GROUPS = {
    "compute": ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "mem_bw_efficiency"),
    "network": ("intra_link_efficiency", "inter_link_efficiency"),
    "interference": ("comm_compute_interference",),
}
#: typical errors each pessimistic scenario moves a constant by
K_TYPICAL = 1.0


def pessimistic(cluster: ClusterSpec, names, k: float = K_TYPICAL) -> ClusterSpec:
    """``cluster`` with each constant in ``names`` moved ``k`` typical errors the slow way."""
    fitted = set(getattr(cluster, "calibrated_constants", ()) or ())
    values = {}
    for name in names:
        c = CONSTANTS[name]
        v = get_value(cluster, name)
        step = k * c.scale_of(v) * (0.5 if name in fitted else 1.0)
        slower = v + step if name == "comm_compute_interference" else v - step
        values[name] = min(c.hi, max(c.lo, slower))
    return apply(cluster, values)


def scenarios(cluster: ClusterSpec, k: float = K_TYPICAL) -> list[tuple[str, ClusterSpec]]:
    """``[(name, cluster)]``: the nominal cluster, then one pessimistic scenario per group and all
    groups together."""
    out = [("nominal", cluster)]
    out += [(g, pessimistic(cluster, names, k)) for g, names in GROUPS.items()]
    out.append(("all", pessimistic(cluster, [n for names in GROUPS.values() for n in names], k)))
    return out
