"""Uncertainty bands on step time (costmodel.trust.uncertainty)."""

import json
import math
from dataclasses import replace

import pytest

from costmodel.trust import uncertainty as U
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

GPT3 = load_model("gpt3-175b")
A100 = load_cluster("a100-80g").with_gpus(64)
W = Workload(global_batch=64, seq_len=2048)
PLAN = ParallelConfig(tp=8, pp=8, vp=3, sp=True, recompute="selective")


def rows(values, source=None, **keys):
    """Residual rows of one regime, each from a source of its own unless ``source`` names one for all."""
    regime = {"kind": "dense", "device": "a100", "zero": "0", "scale": "9-64", **keys}
    return [
        {"regime": regime, "log_residual": v, "source": source or f"s{i}", "row_id": str(i)}
        for i, v in enumerate(values)
    ]


SPREAD = rows([-0.06, -0.03, -0.01, 0.0, 0.01, 0.02, 0.04, 0.05, -0.02, 0.03])


def regime(**kw):
    return U.Regime(**{"kind": "dense", "zero": "0", "scale": "9-64", "device": "a100", **kw})


# --------------------------------------------------------------------------- regimes
def test_regime_of_a_dense_plan():
    r = U.regime_of(GPT3, A100, W, PLAN)
    assert r.keys() == {"kind": "dense", "device": "a100", "zero": "0", "scale": "9-64"}
    sens = dict(r.sens_by_constant)
    assert sens["gemm_efficiency"] < -0.03  # a 10% better GEMM efficiency: several % faster
    assert sens["fp8_gemm_efficiency"] == 0  # BF16 plan
    assert r.sens_log_sd == pytest.approx(math.sqrt(sum(s * s for s in sens.values())))
    assert r.calibration_log_residuals == ()


def test_regime_buckets():
    assert [U.scale_bucket(g) for g in (1, 8, 9, 64, 512, 513, 4096)] == [
        "1-8",
        "1-8",
        "9-64",
        "9-64",
        "65-512",
        "513+",
        "513+",
    ]
    assert [U.zero_bucket(z) for z in (0, 1, 2, 3)] == ["0", "1-2", "1-2", "3"]
    assert U.device_family(load_cluster("h100-sxm")) == "h100"
    moe = U.regime_keys(load_model("mixtral-8x7b"), load_cluster("h100-sxm"), ParallelConfig(ep=8, dp=8, zero=3))
    assert moe == {"kind": "moe", "device": "h100", "zero": "3", "scale": "1-8"}


def test_serving_has_no_band_yet():
    with pytest.raises(SpecError, match="mode='infer'"):
        U.regime_of(GPT3, A100, Workload(mode="infer", global_batch=1, input_len=100, output_len=10), PLAN)


# --------------------------------------------------------------------------- the band
def test_band_brackets_the_prediction():
    est = evaluate(GPT3, A100, W, PLAN, engine="analytic")
    lo, hi = U.band(est, U.regime_of(GPT3, A100, W, PLAN))
    assert lo < est.step_time_s < hi
    assert 0.02 < (hi - lo) / 2 / est.step_time_s < 0.3


def test_band_from_residuals_hand_computed():
    # ten sources of one row each, sum S = 0.03: centre 0.003. Source i's centre without it is (S - r_i) / 9,
    # so d_i = (10 r_i - S) / 9; no source has two rows, so the within-source variance is 0 and the
    # between-source variance is mean(d_i^2); half = z(0.9) sqrt(mean d^2), above the noise floor z * 0.01
    vals = [e["log_residual"] for e in SPREAD]
    total = sum(vals)
    var_b = sum(((10 * v - total) / 9) ** 2 for v in vals) / 10
    half = max(1.2816 * math.sqrt(var_b), 1.2816 * U.NOISE_SD)
    lo, hi = U.band_log(regime(), residuals=SPREAD)
    assert (lo, hi) == pytest.approx((-total / 10 - half, -total / 10 + half), rel=1e-3)
    assert half == pytest.approx(0.0459, abs=5e-4)


def test_band_of_three_sources_hand_computed():
    # a: 0.0 0.1 0.2 (mean 0.1), b: -0.1 0.0 0.1 (0.0), c: 0.1 0.2 0.3 (0.2); centre 0.1.
    # within: each source's sum of squares 0.02, 6 dof: var_w = 0.01. d_a = 0.1 - 0.1 = 0, d_b = 0 - 0.15,
    # d_c = 0.2 - 0.05: mean d^2 = 0.015, less var_w * mean(1/3) = 0.00333: var_b = 0.011667.
    # half = 1.2816 * sqrt(0.021667) = 0.18864 (the noise floor, 0.0128, lies below it)
    three = [
        {"regime": {"kind": "dense", "device": "a100", "zero": "0", "scale": "9-64"}, "source": s, "log_residual": v}
        for s, vs in (("a", (0.0, 0.1, 0.2)), ("b", (-0.1, 0.0, 0.1)), ("c", (0.1, 0.2, 0.3)))
        for v in vs
    ]
    lo, hi = U.band_log(regime(), residuals=three)
    assert (lo, hi) == pytest.approx((-0.1 - 0.18864, -0.1 + 0.18864), abs=2e-4)


def test_a_regime_of_one_source_keeps_its_own_spread_about_a_centre_of_several():
    # four dense sources agree within 2%; one MoE source's ten runs scatter by ~20%. The MoE plan's centre
    # needs three sources, so it backs off to all runs; its spread still carries the MoE runs' own scatter
    dense = [
        {
            "regime": {"kind": "dense", "device": "h100", "zero": "1-2", "scale": "65-512"},
            "source": f"d{s}",
            "log_residual": 0.02 * ((i % 3) - 1),
        }
        for s in range(4)
        for i in range(6)
    ]
    moe = [
        {
            "regime": {"kind": "moe", "device": "h100", "zero": "1-2", "scale": "65-512"},
            "source": "m",
            "log_residual": v,
        }
        for v in (-0.3, -0.2, -0.1, -0.05, 0.0, 0.0, 0.05, 0.1, 0.2, 0.3)
    ]
    pool, keys = U.pool_for(regime(kind="moe", device="h100", zero="1-2", scale="65-512"), dense + moe)
    assert keys == {} and len(pool) == 34  # one MoE source: no centre of its own
    lo_m, hi_m = U.band_log(regime(kind="moe", device="h100", zero="1-2", scale="65-512"), residuals=dense + moe)
    lo_d, hi_d = U.band_log(regime(kind="dense", device="h100", zero="1-2", scale="65-512"), residuals=dense + moe)
    sd_moe = math.sqrt(sum(r["log_residual"] ** 2 for r in moe) / 9)
    assert (hi_m - lo_m) / 2 >= 1.2816 * sd_moe * 0.99  # at least the MoE runs' own scatter
    assert hi_d - lo_d < 0.5 * (hi_m - lo_m)  # the dense plan's band stays narrow


def test_a_pool_needs_three_sources():
    two = rows([0.01, 0.02, 0.03, 0.04, 0.05], source="a") + rows([0.0, -0.01, -0.02, -0.03, -0.04], source="b")
    other = rows([0.2] * 9, source="c", device="h100")
    _, keys = U.pool_for(regime(), two + other)
    assert keys == {"kind": "dense"}  # 10 a100 rows from 2 sources: backed off to dense runs of any device
    _, keys = U.pool_for(regime(), two + rows([0.0], source="d"))
    assert keys == {"kind": "dense", "device": "a100", "zero": "0", "scale": "9-64"}


def test_one_sources_agreement_is_not_trusted_as_a_new_sources():
    # the same residuals from one source: no centre can be checked on another source, so the distances
    # are taken from the uncorrected prediction (centre 0) and the band is wider than from ten sources
    ten = U.band_log(regime(), residuals=rows([0.08, 0.09, 0.1, 0.11, 0.12, 0.1, 0.09, 0.11, 0.1, 0.1]))
    one = U.band_log(regime(), residuals=rows([0.08, 0.09, 0.1, 0.11, 0.12, 0.1, 0.09, 0.11, 0.1, 0.1], source="s"))
    assert ten[1] == 0.0 and -0.14 < ten[0] < -0.1  # ten sources agree: a band about their bias
    assert one[0] < ten[0] - 0.05 and one[1] > 0.0  # one source: its bias is not taken for a new source's


def test_biased_regime_gives_an_asymmetric_band():
    # predicts 10% slow, in six sources alike: the band is centred on the bias (the prediction is not moved)
    lo, hi = U.band_log(regime(), residuals=rows([0.08, 0.09, 0.1, 0.11, 0.12, 0.1]))
    # measured is faster than predicted; the band still holds its own estimate (issue 23): hi is 0, not below
    assert hi == 0.0 and -0.16 < lo < -0.1


def test_sensitivity_floors_the_band_and_is_not_added_to_it():
    # the residuals are out-of-source errors of predictions made with held-out constants: they hold the
    # constants' errors already. A sensitivity below the residuals' spread leaves the band as it is; one
    # above it sets the half-width to z(0.9) * sens_log_sd (SPREAD's residual half-width is 0.0459)
    lo0, hi0 = U.band_log(regime(sens_log_sd=0.0), residuals=SPREAD)
    lo1, hi1 = U.band_log(regime(sens_log_sd=0.02), residuals=SPREAD)  # z * 0.02 = 0.026 < 0.046
    lo2, hi2 = U.band_log(regime(sens_log_sd=0.1), residuals=SPREAD)  # z * 0.1 = 0.128 > 0.046
    assert (lo1, hi1) == pytest.approx((lo0, hi0), abs=1e-12)
    assert (hi2 - lo2) / 2 == pytest.approx(1.2816 * 0.1, abs=2e-4)


def test_the_noise_floor_holds_with_no_spread():
    same = [
        {
            "regime": {"kind": "dense", "device": "a100", "zero": "0", "scale": "9-64"},
            "source": f"s{i}",
            "log_residual": 0.0,
        }
        for i in range(10)
    ]
    lo, hi = U.band_log(regime(sens_log_sd=0.0), residuals=same)
    assert (lo, hi) == pytest.approx((-1.2816 * U.NOISE_SD, 1.2816 * U.NOISE_SD), abs=2e-4)


def test_higher_level_wider_band():
    lo8, hi8 = U.band_log(regime(), level=0.8, residuals=SPREAD)
    lo9, hi9 = U.band_log(regime(), level=0.9, residuals=SPREAD)
    assert lo9 < lo8 and hi9 > hi8
    with pytest.raises(SpecError, match="level"):
        U.band_log(regime(), level=1.5, residuals=SPREAD)


def test_pool_backs_off_to_coarser_regimes():
    pool, matched = U.pool_for(regime(scale="513+"), SPREAD)
    assert len(pool) == 10 and matched == {"kind": "dense", "device": "a100", "zero": "0"}
    pool, matched = U.pool_for(regime(device="b200", kind="moe"), SPREAD)
    assert len(pool) == 10 and matched == {}


def test_calibration_narrows_the_band_when_it_predicts_held_out_runs_well():
    plain = U.band_log(regime(sens_log_sd=0.05), residuals=SPREAD)
    good = U.band_log(
        regime(sens_log_sd=0.03, calibration_log_residuals=(0.01, -0.01, 0.005, -0.004, 0.0)), residuals=SPREAD
    )
    bad = U.band_log(regime(sens_log_sd=0.03, calibration_log_residuals=(0.15, -0.12, 0.1)), residuals=SPREAD)
    width = lambda b: b[1] - b[0]  # noqa: E731
    assert width(good) < width(plain) < width(bad)


def test_calibrated_cluster_file_carries_its_residuals(tmp_path):
    from costmodel.spec.presets import cluster_to_dict

    doc = cluster_to_dict(load_cluster("a100-80g"))
    doc["device"]["gemm_efficiency"] = 0.7
    doc["calibrated"] = {"fitted": ["gemm_efficiency"], "loo_log_residuals": [0.01, -0.02, 0.015]}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    cl = load_cluster(str(path)).with_gpus(64)
    r = U.regime_of(GPT3, cl, W, PLAN)
    assert r.calibration_log_residuals == (0.01, -0.02, 0.015)
    assert "gemm_efficiency" not in dict(r.sens_by_constant)  # fitted: no longer uncertain a priori
    bad = dict(doc, calibrated={"fitted": "gemm_efficiency"})
    path.write_text(json.dumps(bad))
    with pytest.raises(SpecError, match="cluster.calibrated.fitted"):
        load_cluster(str(path))


def test_derived_bands_invert_the_step_time_band():
    est = evaluate(GPT3, A100, W, PLAN, engine="analytic")
    lo, hi = est.step_time_s * 0.9, est.step_time_s * 1.1
    d = U.derived_bands(est, (lo, hi))
    assert d["tokens_per_s_band"] == pytest.approx([est.tokens_per_s / 1.1, est.tokens_per_s / 0.9])
    assert d["mfu_band"][0] < est.mfu < d["mfu_band"][1]


# --------------------------------------------------------------------------- stored residuals
def test_stored_residuals_cover_the_development_set():
    stored = U.stored_residuals()
    assert len(stored) >= 30
    assert {r["regime"]["device"] for r in stored} >= {"a100", "h100"}
    assert all(set(r["regime"]) == set(U.KEYS) for r in stored)
    # the development set is predicted within its gate; the new set keeps its large misses (row 192,
    # Qwen3 pp2 vp24, -61%): they widen the bands of their regimes, as they should
    dev = [r for r in stored if r.get("set", "dev") == "dev"]
    assert len(dev) >= 30 and all(abs(r["log_residual"]) < 0.5 for r in dev)


def test_in_sample_coverage_of_the_stored_rows_is_near_the_level():
    stored = U.stored_residuals()
    inside = 0
    for r in stored:
        lo, hi = U.band_log(U.Regime(**r["regime"]))
        inside += lo <= -r["log_residual"] <= hi  # measured/predicted = exp(-residual)
    assert 0.7 <= inside / len(stored) <= 1.0


def test_t_quantiles():
    assert U.t_quantile(0.9, 1) == pytest.approx(3.078, abs=2e-3)
    assert U.t_quantile(0.9, 5) == pytest.approx(1.476, abs=2e-3)
    assert U.t_quantile(0.9, 1000) == pytest.approx(1.2816, abs=1e-3)


def test_band_for_matches_band_of_regime():
    est = evaluate(GPT3, A100, W, PLAN, engine="analytic")
    assert U.band_for(GPT3, replace(A100, num_gpus=0), W, est) == U.band(est, U.regime_of(GPT3, A100, W, PLAN))
