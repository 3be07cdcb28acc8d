"""The fitted-constants table (benchmarks/fitted_constants.py): scan grid, component levels, implied GEMM levels.

Order: the scan grid's arithmetic; the component levels are the kernel fits' (and their bands the kernel
model's errors); a row's implied GEMM level predicts that row; bad input exits 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import fitted_constants as fc  # noqa: E402
from benchmarks.calibrate import with_constants  # noqa: E402
from benchmarks.published import load_set, predict  # noqa: E402

from costmodel.physics.kernels.kernel_fits import GEMM_FITS  # noqa: E402


def test_grid_spans_the_preset_in_hundredths_within_bounds():
    g = fc.grid(0.53, 0.05)
    assert g[0] == 0.48 and g[-1] == 0.58 and len(g) == 11
    assert fc.grid(0.25, 0.12)[0] == 0.2  # clipped at the lowest efficiency scanned
    assert fc.grid(0.95, 0.12)[-1] == 0.99


def test_gemm_component_is_the_kernel_fit_with_the_kernel_models_error():
    eta, band, rows, src = fc.gemm_component(("H100", "bf16"))
    assert eta == GEMM_FITS[("H100", "bf16")].eta and rows == GEMM_FITS[("H100", "bf16")].rows
    assert 0 < band < 0.08  # the kernel model meets issue 20's kernel bound on these rows
    assert fc.gemm_component(("A100", "fp8")) is None


def test_attention_component_is_read_at_the_reference_shape():
    level, band, rows, _ = fc.attention_component()
    # cuDNN fwd 0.74 and bwd 0.549 lowered by the causal 16k / head-dim-128 shape factor: both about 0.52-0.53
    assert 0.50 < level < 0.55 and rows >= 40 and 0 < band < 0.1


def test_a_rows_implied_level_predicts_that_row():
    # step time linearised in the GEMM rate: at the implied level the row is predicted to within the
    # linearisation's error (overlap changes with compute time), here 3%
    row = next(r for r in load_set("dev") if r.source == "megatron_readme_2020" and r.gpus == 1)
    (lv,) = fc.implied_levels([row])
    assert lv["gpus"] == 1 and lv["comm_share"] == 0.0 and 0.3 < lv["gemm_share"] < 1.0
    est, _ = predict(with_constants(row, {"gemm_efficiency": lv["eta"]}), engine="analytic")
    assert est.step_time_s == pytest.approx(row.measured_s, rel=0.03)


def test_bad_span_exits_2(capsys):
    assert fc.main(["--span", "0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "span=0.9" in err[0]


def test_sustained_clock_rows_are_cited_and_become_ratios():
    import csv

    with open(fc.CLOCKS, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(
        r["source_url"].startswith("https://") and r["source_location"] and r["what_read"] for r in rows
    )
    ratios = fc.sustained_ratios()
    # Hopper: clock ratios 1300/1980 and 1575/1980; B200: the stated TFLOP/s ratio 1237/1450, not its clock ratio
    assert sorted(ratios["Hopper"]) == pytest.approx([1300 / 1980, 1575 / 1980])
    assert ratios["B200"] == pytest.approx([1237 / 1450])
    lo, hi = fc.composed_range("H100-class BF16", 0.8, 0.05, ratios)
    assert lo == pytest.approx(0.8 * 1300 / 1980 * 0.95) and hi == pytest.approx(0.8 * 1575 / 1980 * 1.05)
    # A100: NVIDIA's HPL Rpeak clock, 1305 of 1410 MHz (a clock ratio; no throughput stated)
    assert ratios["A100"] == pytest.approx([1305 / 1410])
    lo, hi = fc.composed_range("A100 BF16", 0.84, 0.01, ratios)
    assert lo == pytest.approx(0.84 * 1305 / 1410 * 0.99) and hi == pytest.approx(0.84 * 1305 / 1410 * 1.01)
    assert fc.composed_range("no such family", 0.8, 0.05, ratios) is None


def test_the_cost_models_sustained_clock_is_the_mean_of_the_csv_rows():
    """One number in one place: measured.SUSTAINED_CLOCK per generation is the mean of its device family's rows
    (a row added to the CSV moves the cost model, or this fails)."""
    import statistics

    from costmodel.physics.kernels.measured import SUSTAINED_CLOCK

    ratios = fc.sustained_ratios()
    assert set(ratios) == set(fc.CLOCK_GENERATION)
    for family, gen in fc.CLOCK_GENERATION.items():
        assert SUSTAINED_CLOCK[gen] == pytest.approx(statistics.mean(ratios[family]), abs=1e-12), family
    assert set(SUSTAINED_CLOCK) == set(fc.CLOCK_GENERATION.values())
