"""How the parts of the 80% band are combined: every candidate rule, leave-one-source-out (issue 23, bands 3).

    python -m benchmarks.band_rules [--set dev|all]

The band (:mod:`costmodel.trust.uncertainty`) rests on out-of-source residuals, the plan's sensitivity to the
uncertain constants, a run-to-run noise floor, a drift beyond the largest measured run and, outside the
data, the band of every measured run pooled. This script predicts the rows once (as
``band_coverage.py`` does: ``--set dev`` with the constants held out over the dev rows only, the
selection set; ``--set all``: dev and the unsealed new set) and prints, for each candidate way of
combining those parts (:data:`CANDIDATES`), the share of measured step times inside the band and the
median band width ((hi - lo) / predicted), each source's rows banded from the other sources' residuals
only. It checks first that its ``shipped`` candidate reproduces ``costmodel.trust.uncertainty.band_detail`` on
every row (the candidates re-state the rule here; the shipped one is the package's).

The candidates (``Rule`` fields): ``combine`` ``max`` (the shipped rule: the residual half-width floored
by ``z * sens_log_sd`` and ``z * NOISE_SD``, the three being estimates of one error) or ``quadrature``
(the earlier rule: ``share`` of the sensitivity and the noise added in quadrature, the full sensitivity on
a device without residuals) or ``linear`` (widths added, the over-widening form); ``drift`` (pool sds per
doubling beyond the largest measured run); ``outside`` (``pooled``: the band of every measured run when the
plan lies outside the data, never narrower than its own; ``own``: the plan's own pool only); ``sources``
(sources a centre pool needs); ``scale`` (a uniform factor on the half-width: a tuned constant, printed
only as a diagnostic of what the width target would take, never shipped).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass

from benchmarks.band_coverage import predicted_rows, stored
from costmodel.trust import band_spread as BS
from costmodel.trust import uncertainty as U
from costmodel.trust.band_scope import scope


@dataclass(frozen=True, kw_only=True)
class Rule:
    combine: str = "max"
    share: float = 1.0  # sensitivity share on a device with residuals (quadrature and linear only)
    noise: bool = True
    drift: float = U.DRIFT_PER_DOUBLING
    outside: str = "pooled"
    sources: int = BS.MIN_SOURCES
    scale: float = 1.0


CANDIDATES = {
    "shipped: max(residual, sensitivity, noise)": Rule(),
    "before: residual + 0.5 sens + noise, quadrature": Rule(combine="quadrature", share=0.5),
    "quadrature, sensitivity share 0": Rule(combine="quadrature", share=0.0),
    "quadrature, sensitivity share 0.25": Rule(combine="quadrature", share=0.25),
    "quadrature, sensitivity share 0.75": Rule(combine="quadrature", share=0.75),
    "quadrature, share 0.5, no noise floor": Rule(combine="quadrature", share=0.5, noise=False),
    "linear sum of the parts, share 0.5": Rule(combine="linear", share=0.5),
    "max, no noise floor": Rule(noise=False),
    "max, drift 0.5 sd per doubling": Rule(drift=0.5),
    "max, no drift": Rule(drift=0.0),
    "max, outside: own pool only": Rule(outside="own"),
    "max, pool >= 2 sources": Rule(sources=2),
    "max, pool >= 4 sources": Rule(sources=4),
    "max x 0.9 (tuned scale: diagnostic only)": Rule(scale=0.9),
    "max x 0.95 (tuned scale: diagnostic only)": Rule(scale=0.95),
}


def spread(keys, residuals, sources):
    """:func:`costmodel.trust.band_spread.centre_and_spread` with a centre pool of ``sources`` sources."""
    pool, _ = BS.pool_rows(keys, residuals, BS.MIN_POOL, sources)
    if not pool:
        return 0.0, 0.0
    var_w, _, _ = BS.within_pool(keys, residuals)
    return (
        sum(r["log_residual"] for r in pool) / len(pool),
        U._norm_ppf(0.9) * math.sqrt(BS.between_variance(pool) + var_w),
    )


def band(rule: Rule, regime, residuals, components) -> tuple[float, float]:
    """``(lo, hi)`` in ``ln(measured / predicted)`` of ``regime`` under ``rule``."""
    z = U._norm_ppf(0.9)
    mean, half = spread(regime.keys(), residuals, rule.sources)
    sd_pool = half / z
    where = scope(
        regime.keys(),
        regime.gpus,
        regime.stack or "",
        regime.mechanisms,
        residuals,
        components,
        device_name=regime.device_name or None,
    )
    if where.outside and rule.outside == "pooled":
        o_mean, o_half = spread({}, residuals, rule.sources)
        if o_half > half:
            mean, half = o_mean, o_half
    covered = any(r["regime"].get("device") == regime.device for r in residuals)
    noise = z * U.NOISE_SD if rule.noise else 0.0
    drift = z * rule.drift * sd_pool * math.log2(where.scale_ratio)
    if rule.combine == "max":
        half = math.sqrt(max(half, z * regime.sens_log_sd, noise) ** 2 + drift**2)
    else:
        sens = z * (rule.share if covered else 1.0) * regime.sens_log_sd
        half = (
            half + sens + noise + drift
            if rule.combine == "linear"
            else math.sqrt(half**2 + sens**2 + noise**2 + drift**2)
        )
    half *= rule.scale
    return min(-mean - half, 0.0), max(-mean + half, 0.0)


def score(rule: Rule, rows, residuals, components) -> dict:
    """``{set: (inside, n, median width)}`` and ``dev+new``, leave-one-source-out."""
    by = {}
    for x in rows:
        pool = [r for r in residuals if r["source"] != x["row"].source]
        lo, hi = band(rule, x["regime"], pool, components)
        r = math.log(x["row"].measured_s / x["est"].step_time_s)
        by.setdefault(getattr(x["row"], "set", "dev"), []).append((lo <= r <= hi, math.exp(hi) - math.exp(lo)))
    if len(by) > 1:
        by["dev+new"] = [v for vs in list(by.values()) for v in vs]
    return {k: (sum(ok for ok, _ in vs), len(vs), statistics.median(w for _, w in vs)) for k, vs in by.items()}


def check_shipped(rows, residuals, components) -> None:
    for x in rows:
        pool = [r for r in residuals if r["source"] != x["row"].source]
        mine = band(CANDIDATES["shipped: max(residual, sensitivity, noise)"], x["regime"], pool, components)
        lo, hi, _ = U.band_detail(x["regime"], residuals=pool, components=components)
        if abs(mine[0] - lo) > 1e-9 or abs(mine[1] - hi) > 1e-9:
            raise SystemExit(f"band_rules: the shipped candidate differs from band_detail on row {x['row'].row_id}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("dev", "all"), default="dev")
    args = ap.parse_args(argv)
    rows = predicted_rows("graph", args.set)
    doc = stored(rows, "graph")
    check_shipped(rows, doc["rows"], doc["components"])
    print(
        f"leave-one-source-out, --set {args.set} (inside/rows = share, median width); shipped rule checked "
        "against costmodel.trust.uncertainty.band_detail on every row"
    )
    for name, rule in CANDIDATES.items():
        s = score(rule, rows, doc["rows"], doc["components"])
        print(
            f"{name:<48} "
            + " | ".join(f"{k} {i}/{n} = {100 * i / n:.0f}% at {100 * w:.1f}%" for k, (i, n, w) in s.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
