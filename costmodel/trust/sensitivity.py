"""How a plan's step time responds to the hardware constants, and where its bottleneck changes.

The co-design question of the source document: for one plan, what does +-20% of NVLink
bandwidth, NIC bandwidth, HBM bandwidth, achieved GEMM efficiency or the number of DMA engines
buy, and at what value of each does the plan's bottleneck (its largest step-time component in
:attr:`Estimate.breakdown`) change? For each knob :func:`sensitivity` evaluates the plan at
0.8x and 1.2x, and searches factors down to 1/8x and up to 8x (GEMM efficiency: up to 1.0)
for the nearest value where the bottleneck changes, refined by bisection on a log scale
(integer engine counts are stepped one by one).

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> rows = sensitivity(load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8),
...                    Workload(global_batch=16, seq_len=4096), ParallelConfig(tp=8, sp=True), engine="analytic")
>>> [r.knob for r in rows]
['nvlink_bw', 'nic_bw', 'hbm_bw', 'gemm_efficiency', 'dma_engines']
>>> rows[3].step_minus_s > rows[3].step_s > rows[3].step_plus_s
True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GB

DELTA = 0.2
FACTOR_RANGE = 8.0
#: grid of factors searched in each direction before bisection
GRID = (1.25, 1.6, 2.0, 3.0, 4.0, 6.0, 8.0)
BISECT_STEPS = 10


@dataclass(frozen=True)
class Knob:
    name: str
    label: str
    unit: str  # human unit of ``value``
    integer: bool = False


KNOBS = (
    Knob("nvlink_bw", "NVLink bandwidth", "GB/s"),
    Knob("nic_bw", "NIC bandwidth", "GB/s"),
    Knob("hbm_bw", "HBM bandwidth", "GB/s"),
    Knob("gemm_efficiency", "GEMM efficiency", "fraction"),
    Knob("dma_engines", "DMA engines", "count", integer=True),
)


def _gemm_field(cluster: ClusterSpec, dtype: str) -> str:
    dev = cluster.device
    return "fp8_gemm_efficiency" if dtype == "fp8" and dev.peak_fp8_flops_per_s else "gemm_efficiency"


def knob_value(cluster: ClusterSpec, knob: str, dtype: str = "bf16") -> float:
    """The knob's value in human units (GB/s, fraction, engine count of the first class)."""
    if knob == "nvlink_bw":
        return cluster.intra_link.bw_bytes_per_s / GB
    if knob == "nic_bw":
        return cluster.inter_link.bw_bytes_per_s / GB
    if knob == "hbm_bw":
        return cluster.device.hbm_bw_bytes_per_s / GB
    if knob == "gemm_efficiency":
        return getattr(cluster.device, _gemm_field(cluster, dtype))
    if knob == "dma_engines":
        return cluster.device.dma_engines[0].count
    raise ValueError(knob)


def scaled(cluster: ClusterSpec, knob: str, factor: float, dtype: str = "bf16") -> ClusterSpec:
    """``cluster`` with ``knob`` multiplied by ``factor`` (engine counts rounded, at least 1)."""
    dev = cluster.device
    if knob == "nvlink_bw":
        return replace(
            cluster, intra_link=replace(cluster.intra_link, bw_bytes_per_s=cluster.intra_link.bw_bytes_per_s * factor)
        )
    if knob == "nic_bw":
        return replace(
            cluster, inter_link=replace(cluster.inter_link, bw_bytes_per_s=cluster.inter_link.bw_bytes_per_s * factor)
        )
    if knob == "hbm_bw":
        return replace(cluster, device=replace(dev, hbm_bw_bytes_per_s=dev.hbm_bw_bytes_per_s * factor))
    if knob == "gemm_efficiency":
        f = _gemm_field(cluster, dtype)
        return replace(cluster, device=replace(dev, **{f: min(1.0, getattr(dev, f) * factor)}))
    if knob == "dma_engines":
        engines = tuple(replace(e, count=max(1, round(e.count * factor))) for e in dev.dma_engines)
        return replace(cluster, device=replace(dev, dma_engines=engines))
    raise ValueError(knob)


def bottleneck(estimate) -> str:
    """The largest component of the step-time breakdown (``compute_s``, ``bubble_s``, ...)."""
    return max(estimate.breakdown.items(), key=lambda kv: kv[1])[0]


@dataclass(frozen=True)
class Critical:
    """The knob's value (and factor of nominal) where the bottleneck becomes ``bottleneck``."""

    value: float
    factor: float
    bottleneck: str


@dataclass(frozen=True)
class SensitivityRow:
    knob: str
    label: str
    unit: str
    value: float  # nominal, human units
    step_s: float
    step_minus_s: float  # at factor_minus x value (1 - DELTA; engine counts rounded, at least 1)
    step_plus_s: float  # at factor_plus x value (1 + DELTA; GEMM efficiency at most 1)
    factor_minus: float
    factor_plus: float
    bottleneck: str
    critical_low: Critical | None  # nearest value below nominal where the bottleneck changes
    critical_high: Critical | None

    @property
    def elasticity(self) -> float:
        """d ln(step) / d ln(value), from the two points (0 when they coincide)."""
        span = math.log(self.factor_plus) - math.log(self.factor_minus)
        return (math.log(self.step_plus_s) - math.log(self.step_minus_s)) / span if span else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["elasticity"] = self.elasticity
        return d


def _max_factor(cluster, knob, dtype) -> float:
    if knob == "gemm_efficiency":
        return min(FACTOR_RANGE, 1.0 / knob_value(cluster, knob, dtype))
    return FACTOR_RANGE


def _critical(run, cluster, knob: Knob, dtype: str, nominal: str, up: bool) -> Critical | None:
    value = knob_value(cluster, knob.name, dtype)
    if knob.integer:
        counts = range(int(value) + 1, int(value * FACTOR_RANGE) + 1) if up else range(int(value) - 1, 0, -1)
        for c in counts:
            b = bottleneck(run(scaled(cluster, knob.name, c / value, dtype)))
            if b != nominal:
                return Critical(float(c), c / value, b)
        return None
    top = _max_factor(cluster, knob.name, dtype)
    grid = [g for g in GRID if g < top] + [top] if up else [1 / g for g in GRID]
    prev = 1.0
    for f in grid:
        b = bottleneck(run(scaled(cluster, knob.name, f, dtype)))
        if b != nominal:
            lo, hi = math.log(prev), math.log(f)  # nominal bottleneck at lo, another at hi
            for _ in range(BISECT_STEPS):
                mid = (lo + hi) / 2
                if bottleneck(run(scaled(cluster, knob.name, math.exp(mid), dtype))) == nominal:
                    lo = mid
                else:
                    hi = mid
            f = math.exp(hi)
            return Critical(value * f, f, bottleneck(run(scaled(cluster, knob.name, f, dtype))))
        prev = f
        if f >= top:
            break
    return None


def sensitivity(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    config: ParallelConfig,
    engine: str = "graph",
    knobs=None,
) -> list[SensitivityRow]:
    """One :class:`SensitivityRow` per knob (default all of :data:`KNOBS`) for a training plan."""
    from costmodel.api import evaluate

    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    dtype = workload.dtype

    def run(cl):
        return evaluate(model, cl, workload, config, engine=engine)

    base = run(cluster)
    nominal = bottleneck(base)
    rows = []
    for knob in KNOBS:
        if knobs is not None and knob.name not in knobs:
            continue
        value = knob_value(cluster, knob.name, dtype)
        plus = min(1 + DELTA, _max_factor(cluster, knob.name, dtype))
        if knob.integer:  # +-20% of a small count, at least one engine either way
            minus_c, plus_c = (
                max(1, min(value - 1, round(value * (1 - DELTA)))),
                max(value + 1, round(value * (1 + DELTA))),
            )
            minus_f, plus = minus_c / value, plus_c / value
        else:
            minus_f = 1 - DELTA
        rows.append(
            SensitivityRow(
                knob=knob.name,
                label=knob.label,
                unit=knob.unit,
                value=value,
                step_s=base.step_time_s,
                step_minus_s=run(scaled(cluster, knob.name, minus_f, dtype)).step_time_s,
                step_plus_s=run(scaled(cluster, knob.name, plus, dtype)).step_time_s,
                factor_minus=minus_f,
                factor_plus=plus,
                bottleneck=nominal,
                critical_low=_critical(run, cluster, knob, dtype, nominal, up=False),
                critical_high=_critical(run, cluster, knob, dtype, nominal, up=True),
            )
        )
    return rows
