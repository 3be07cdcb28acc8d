"""How far to trust a predicted step time: the 80% band.

Meaning. ``band(estimate, regime)`` returns ``(lo_s, hi_s)`` such that, for plans like those the
model was validated on, the measured step time falls inside ``[lo_s, hi_s]`` for about 80% of
runs (10% below, 10% above). It is a statement about the cost model's error, not about
run-to-run noise of one job. tokens/s and MFU bands are the same interval inverted
(:func:`derived_bands`).

Where it comes from. Three estimates of *one* error, of which the band takes the largest (log space;
errors are ratios), then two widenings for what no residual contains:

1. *Out-of-source validation residuals of the plan's regime.* ``costmodel/trust/data/residuals.json``
   holds ``ln(predicted / measured)`` of every usable published row outside the sealed split
   (written by ``benchmarks/band_coverage.py --set all --write``), each row predicted with the
   constants fitted per device family and dtype *without its own source*
   (``benchmarks/calibrate.py``'s leave-one-source-out fit), and tagged with its regime: dense/MoE, ZeRO stage bucket
   (0, 1-2, 3), scale bucket (GPUs 1-8, 9-64, 65-512, 513+) and device family. The residuals are
   read as centre + source effect + row noise (:mod:`costmodel.trust.band_spread`). The centre and the
   between-source spread come from the plan's pool: the rows of its regime, backing off to coarser
   regimes (dropping scale, then ZeRO, then device) until it holds :data:`MIN_POOL` (9) rows from
   :data:`~costmodel.trust.band_spread.MIN_SOURCES` (3) sources; the band is centred on the pool's signed
   mean residual (the model's bias on runs like this; the prediction itself is not corrected), and
   the between-source variance is that of each source's mean about the mean of the *other*
   sources (the error a centre makes on a new source). The within-source variance comes from the
   most specific regime with 8 degrees of freedom about its sources' means, however few its
   sources (one source's MoE runs still say how far one MoE run falls from the next). Half-width:
   ``z(0.9) * sqrt(between + within)``. A biased regime gets a band off-centre (never excluding
   the estimate), a regime whose sources disagree or whose runs scatter a wide one.
2. *Sensitivity to the uncertain constants.* The change of this plan's step time for a typical
   error of each calibratable constant (:mod:`costmodel.trust.calibration`: ~10% of an efficiency,
   0.05 of the interference), in quadrature: ``z(0.9) * sens_log_sd``.
3. *Run-to-run variation*, :data:`NOISE_SD`.

Why the largest and not their sum (issue 23, bands 3; ``benchmarks/RESULTS.md`` section 30): the
residuals are out-of-source errors of these very predictions, made with constants fitted without the
row's source, so they already contain the constants' errors and the run-to-run noise; adding the
sensitivity and the noise to them counted those twice (the earlier rule added half the sensitivity,
``VALIDATED_SHARE`` = 0.5, an assumption, in quadrature). Each of 2 and 3 is a floor on the total
error (the total error is at least the constants' part of it), so each stands where the residuals
are fewer or narrower than it: a device without validation rows, a plan far more sensitive than the
runs its pool holds.

A calibrated cluster (``planner calibrate``; the file's ``calibrated`` section) bases part 1 on
the calibration's leave-one-out residuals (three or more runs), pooled with the validation
spread as :data:`PRIOR_RUNS` runs of prior evidence, and drops the fitted constants from
part 2: the band narrows when the calibration predicts held-out runs well and widens when it
does not.

Two widenings, in quadrature (no residual contains them), each with a note in words (:func:`band_detail`):

4. *Unstated knobs.* ``completion_log_sd``: the log-sd of the step times of the plausible
   completions of what the user stated (``planner evaluate``: the best completions the pinned
   search returns); 0 with nothing unstated.
5. *Beyond the data* (:mod:`costmodel.trust.band_scope`). A device, stack, regime or mechanism without
   measured runs or component data: part 1 is the band of every measured run pooled (never narrower
   than the plan's own pool; :func:`outside_band`). More
   GPUs than the largest measured run of the regime: the pool's sd is added again per doubling
   beyond it (:data:`DRIFT_PER_DOUBLING`; an assumption, not fitted: no data lies there).

A band never excludes its own estimate: ``lo <= 0 <= hi`` in log space.

>>> r = Regime(kind="dense", zero="0", scale="9-64", device="a100", sens_log_sd=0.0)
>>> lo, hi = band_log(r, residuals=[{"regime": {"kind": "dense", "zero": "0", "scale": "9-64",
...                   "device": "a100"}, "log_residual": e} for e in (-0.02, 0.0, 0.01, 0.03, -0.01, 0.02)])
>>> -0.06 < lo < 0 < hi < 0.06
True
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from costmodel.trust.band_spread import KEYS, MIN_POOL, _norm_ppf, centre_and_spread, normal_interval, pool_rows  # noqa: F401
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.trust.band_spread import t_quantile

RESIDUALS = Path(__file__).parent / "data" / "residuals.json"
LEVEL = 0.8
#: run-to-run variation of a measured step time (log sd), a floor on every band
NOISE_SD = 0.01
#: weight of the validation spread next to a calibration's leave-one-out residuals, in runs
PRIOR_RUNS = 3
#: log-sd added per doubling of GPUs beyond the largest measured run of a regime, in units of the
#: regime pool's sd (an assumption stated, not fitted: by construction no measurement lies there)
DRIFT_PER_DOUBLING = 1.0
SCALES = ((8, "1-8"), (64, "9-64"), (512, "65-512"))


@dataclass(frozen=True)
class Regime:
    """Where a plan sits for the purpose of its error band (see the module doc).

    kind : ``dense`` or ``moe``. zero : ``0``, ``1-2`` or ``3``. scale : GPU-count bucket.
    device : device family (``a100``, ``h100``...). sens_log_sd : log-sd of the step time from
    the uncertain constants' typical errors (a floor on the band, :func:`band_detail`).
    calibration_log_residuals / calibrated_constants : from a calibrated cluster.
    """

    kind: str
    zero: str
    scale: str
    device: str
    sens_log_sd: float = 0.0
    calibration_log_residuals: tuple = ()
    calibrated_constants: tuple = ()
    sens_by_constant: tuple = ()  # ((name, log change for a typical error), ...)
    gpus: int = 0  # the plan's GPU count (0: unknown, no scale check)
    stack: str = ""  # ClusterSpec.stack ("": no stack check)
    mechanisms: tuple = ()  # costmodel.trust.band_scope.mechanisms of the plan
    device_name: str = ""
    completion_log_sd: float = 0.0  # spread of the plausible completions of unstated knobs

    def keys(self) -> dict:
        return {"kind": self.kind, "device": self.device, "zero": self.zero, "scale": self.scale}


def device_family(cluster: ClusterSpec) -> str:
    """``A100-SXM4-80GB`` -> ``a100``; the first token of the device name, lower case."""
    return re.split(r"[-_ ]", cluster.device.name.strip().lower() or "device")[0]


def scale_bucket(gpus: int) -> str:
    for top, name in SCALES:
        if gpus <= top:
            return name
    return f"{SCALES[-1][0] + 1}+"


def zero_bucket(zero: int) -> str:
    return "0" if zero == 0 else ("3" if zero == 3 else "1-2")


def regime_keys(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig) -> dict:
    return {
        "kind": "moe" if model.is_moe else "dense",
        "device": device_family(cluster),
        "zero": zero_bucket(config.zero),
        "scale": scale_bucket(config.gpus),
    }


def regime_of(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, engine: str = "analytic"
) -> Regime:
    """The :class:`Regime` of a training plan, with its sensitivity to the uncertain constants.

    Costs 14 evaluations of the plan by ``engine`` (central differences of 7 constants).
    """
    if workload.mode != "train":
        raise SpecError("mode", workload.mode, "train (bands cover training steps)")
    from costmodel.trust.calibration import MeasuredRun, sensitivity_matrix
    from costmodel.trust.calibration_constants import CONSTANTS

    names = [n for n in CONSTANTS if n not in cluster.calibrated_constants]
    run = MeasuredRun(model=model, workload=workload, config=config, measured_s=1.0, label="plan")
    S = sensitivity_matrix([run], cluster.with_gpus(config.gpus), names, engine)[0] if names else []
    by = tuple((n, float(s)) for n, s in zip(names, S))
    sd = math.sqrt(sum(s * s for _, s in by))
    from costmodel.trust.band_scope import mechanisms

    return Regime(
        **regime_keys(model, cluster, config),
        sens_log_sd=sd,
        calibration_log_residuals=tuple(cluster.calibration_log_residuals),
        calibrated_constants=tuple(cluster.calibrated_constants),
        sens_by_constant=by,
        gpus=config.gpus,
        stack=cluster.stack,
        device_name=cluster.device.name,
        mechanisms=mechanisms(model.is_moe, config.ep, workload.dtype, config.optimizer_offload_fraction > 0),
    )


# --------------------------------------------------------------------------- residuals
@lru_cache(maxsize=1)
def _document() -> dict:
    try:
        return json.loads(RESIDUALS.read_text())
    except OSError:
        return {}


def _stored() -> tuple:
    return tuple(_document().get("rows", ()))


def stored_components() -> list:
    """``[component, device class, dtype]`` of the component data (``benchmarks/data/components``)
    as summarised in ``residuals.json`` (:mod:`costmodel.trust.band_scope`)."""
    return [tuple(c) for c in _document().get("components", ())]


def stored_residuals() -> list[dict]:
    """Rows of ``costmodel/trust/data/residuals.json`` (``regime``, ``log_residual``, ``source``, ``row_id``)."""
    return list(_stored())


def pool_for(regime: Regime, residuals) -> tuple[list[float], dict]:
    """The residuals of the most specific regime with :data:`MIN_POOL` rows, and the keys it matched
    (:func:`costmodel.trust.band_spread.pool_rows`)."""
    pool, keys = pool_rows(regime.keys(), residuals)
    return [r["log_residual"] for r in pool], keys


def _interval(values, level: float) -> tuple[float, float, float]:
    """(mean, half-width, n) of the normal prediction interval of ``values`` at ``level``
    (:func:`costmodel.trust.band_spread.normal_interval`; the serving bands use it)."""
    mean, half = normal_interval(values, level)
    return mean, half, len(values)


def _calibrated_interval(cal, pool, level: float) -> tuple[float, float]:
    """(mean, half-width) of a calibrated cluster: its leave-one-out residuals pooled with the
    validation pool's spread, which counts as :data:`PRIOR_RUNS` runs' worth of evidence
    (a normal model with a conjugate prior on the variance; the mean shrinks towards 0 as the
    fit removed the cluster's bias)."""
    n, k = len(cal), PRIOR_RUNS
    m0 = sum(pool) / len(pool)
    var0 = sum((v - m0) ** 2 for v in pool) / max(len(pool) - 1, 1)
    var = (k * var0 + sum(e * e for e in cal)) / (k + n)
    mean = sum(cal) / (n + k)
    return mean, t_quantile(0.5 + level / 2, n + k - 1) * math.sqrt(var) * math.sqrt(1 + 1 / n)


def outside_band(residuals, level: float = LEVEL) -> tuple[float, float, int]:
    """``(centre, half-width, rows)`` of the band of a plan outside the measured regimes: every measured run
    pooled, its spread the error the pooled centre makes on a source it did not see
    (:func:`costmodel.trust.band_spread.centre_and_spread` with no regime key): regimes taken as exchangeable,
    the one assumption that lets measured runs speak for an unmeasured regime."""
    c, half, n, _ = centre_and_spread({}, residuals, level)
    return c, half, n


def band_detail(regime: Regime, level: float = LEVEL, residuals=None, components=None) -> tuple:
    """``(lo, hi, notes)``: :func:`band_log`'s interval and the sentences saying what widened it."""
    from costmodel.trust.band_scope import scope

    if not 0 < level < 1:
        raise SpecError("level", level, "a fraction in (0, 1)")
    residuals = stored_residuals() if residuals is None else list(residuals)
    components = stored_components() if components is None else list(components)
    if not residuals:
        raise SpecError("residuals", 0, f"validation residuals in {RESIDUALS} (run benchmarks/band_coverage.py)")
    pool, _ = pool_for(regime, residuals)
    mean, half, _, _ = centre_and_spread(regime.keys(), residuals, level)  # the bias, then the spread about it
    z = _norm_ppf(0.5 + level / 2)
    sd_pool = half / z  # the spread as a normal sd, the unit of the scale drift
    where = scope(
        regime.keys(),
        regime.gpus,
        regime.stack or "",
        regime.mechanisms,
        residuals,
        components,
        device_name=regime.device_name or None,
    )
    notes = list(where.notes)
    if where.outside:
        o_mean, o_half, n = outside_band(residuals, level)
        if o_half > half:  # never narrower than the plan's own (backed-off) pool
            mean, half = o_mean, o_half
        notes.append(
            f"band of all {n} measured runs pooled, as a new source's error "
            f"(80% band +-{100 * (math.exp(half) - 1):.0f}% about its centre)"
        )
    cal = list(regime.calibration_log_residuals)
    if len(cal) >= 3:
        mean, half = _calibrated_interval(cal, pool, level)
    # one error, three estimates of it (module doc): the residuals already hold the constants' errors and
    # the run noise, so the sensitivity and the noise floor it, never add to it
    half = max(half, z * regime.sens_log_sd, z * NOISE_SD)
    drift = DRIFT_PER_DOUBLING * sd_pool * math.log2(where.scale_ratio)
    comp = regime.completion_log_sd
    if comp > 0:
        notes.append(
            f"unstated knobs: band widened by the spread of the plausible completions "
            f"(log sd {comp:.3f}: +-{100 * (math.exp(z * comp) - 1):.1f}% at 80%)"
        )
    half = math.sqrt(half**2 + (z * drift) ** 2 + (z * comp) ** 2)  # beyond what any residual holds
    # residual = ln(pred/meas): measured = predicted * exp(-residual); the estimate stays inside
    return min(-mean - half, 0.0), max(-mean + half, 0.0), tuple(notes)


def pool_bias(regime: Regime, residuals=None) -> tuple[float, int, dict]:
    """``(mean ln(measured / predicted), rows, regime keys matched)`` of the validation pool
    :func:`band_log` draws ``regime``'s band from (no calibration)."""
    residuals = stored_residuals() if residuals is None else list(residuals)
    if not residuals:
        return 0.0, 0, {}
    pool, keys = pool_for(regime, residuals)
    return -sum(pool) / len(pool), len(pool), keys


def bias_note(
    model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, estimate_s: float, band_s: tuple[float, float]
) -> str | None:
    """A sentence when ``band_s`` lies on one side of the estimate (its regime's validation runs
    measured consistently slower or faster than predicted), else None."""
    lo, hi = band_s
    if lo < estimate_s * (1 - 1e-9) and hi > estimate_s * (1 + 1e-9):
        return None
    cl = cluster if cluster.num_gpus else cluster.with_gpus(config.gpus)
    bias, n, keys = pool_bias(Regime(**regime_keys(model, cl, config)))
    where = ", ".join(f"{k}={v}" for k, v in keys.items()) or "all regimes"
    side = "slower" if bias > 0 else "faster"
    return (
        f"the 80% band lies {'above' if bias > 0 else 'below'} the estimate: validation runs like this one "
        f"({where}; {n} rows) measured {100 * abs(math.expm1(bias)):.0f}% {side} than predicted on average"
    )


def band_log(regime: Regime, level: float = LEVEL, residuals=None, components=None) -> tuple[float, float]:
    """``(lo, hi)`` in ``ln(measured / predicted)``: the band is ``predicted * exp([lo, hi])``."""
    lo, hi, _ = band_detail(regime, level, residuals, components)
    return lo, hi


def band(estimate, regime: Regime, level: float = LEVEL, residuals=None, components=None) -> tuple[float, float]:
    """``(lo_s, hi_s)``: the ``level`` (80%) band of the measured step time of ``estimate``'s plan."""
    lo, hi = band_log(regime, level, residuals, components)
    t = estimate.step_time_s
    return t * math.exp(lo), t * math.exp(hi)


def derived_bands(estimate, step_band: tuple[float, float]) -> dict:
    """Bands of tokens/s and MFU implied by a step-time band (both scale with 1 / step time)."""
    lo, hi = step_band
    t = estimate.step_time_s
    return {
        "step_time_band_s": [lo, hi],
        "tokens_per_s_band": [estimate.tokens_per_s * t / hi, estimate.tokens_per_s * t / lo],
        "mfu_band": [estimate.mfu * t / hi, estimate.mfu * t / lo],
    }


def assess(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    estimate,
    level: float = LEVEL,
    completion_log_sd: float = 0.0,
) -> tuple:
    """``(lo_s, hi_s, notes)``: the band of a training plan's estimate and the sentences saying where
    it rests on unstated choices or lies beyond the data. The one entry point of ``evaluate``,
    ``recommend`` (and ``--baseline``) and ``sweep``."""
    cl = cluster if cluster.num_gpus else cluster.with_gpus(estimate.config.gpus)
    regime = replace(regime_of(model, cl, workload, estimate.config), completion_log_sd=completion_log_sd)
    lo, hi, notes = band_detail(regime, level)
    t = estimate.step_time_s
    return t * math.exp(lo), t * math.exp(hi), list(notes)


def band_for(model: ModelSpec, cluster: ClusterSpec, workload: Workload, estimate, level: float = LEVEL):
    """Convenience: ``(lo_s, hi_s)`` of :func:`assess`."""
    lo, hi, _ = assess(model, cluster, workload, estimate, level)
    return lo, hi
