"""The kernel component benchmark (benchmarks/component_kernels.py) and the kernel model (costmodel.physics.kernels.kernel_fits).

Order: the data are cited; the attention shape factor's arithmetic; the fitted constants are the fit's
optimum on the data; the kernel model meets its error bound; the step time's attention uses the shape
factor; bad input exits 2.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import component_kernels as ck  # noqa: E402

from costmodel.physics.kernels import kernel_fits as kernels  # noqa: E402
from costmodel.spec.presets import load_cluster  # noqa: E402

ROWS = ck.load_rows()


def test_every_row_is_cited_and_has_a_measurement():
    assert len(ROWS) >= 60
    for r in ROWS:
        for col in ("source_url", "source_location", "what_read", "conversion"):
            assert r[col].strip(), (r["row_id"], col)
        assert r["source_url"].startswith("https://"), r["row_id"]
        assert float(r["measured_tflops"]) > 0, r["row_id"]
        assert r["device"] in ck.DEVICE_PRESET, r["row_id"]


def test_every_class_has_rows():
    classes = {ck.kernel_class(r).split("_")[0] for r in ROWS}
    assert {"gemm", "grouped", "attention"} <= classes


def test_attention_utilization_arithmetic():
    # full mask, no overheads: 1; L0 = s: 1/2; head dim d = D0: 1/2
    assert kernels.attention_utilization(4096, 128, False, 0, 0) == 1.0
    assert kernels.attention_utilization(4096, 128, False, 4096, 0) == pytest.approx(0.5)
    assert kernels.attention_utilization(4096, 128, False, 0, 128) == pytest.approx(0.5)
    # causal, s = 256 = 2 tiles: 3 tiles computed for 2 counted; each query tile visits (256 + 128) / 2 keys
    assert kernels.attention_utilization(256, 128, True, 0, 0) == pytest.approx(2 / 3)
    assert kernels.attention_utilization(256, 128, True, 192, 0) == pytest.approx(2 / 3 * 192 / 384)


def test_shape_factor_is_one_at_the_reference_and_without_data():
    h100 = load_cluster("h100-sxm").device
    assert kernels.attention_shape_factor(h100, kernels.REF_SEQ, kernels.REF_HEAD_DIM, True, "fwd") == pytest.approx(
        1.0
    )
    assert kernels.attention_shape_factor(load_cluster("b200").device, 1024, 64, True, "bwd") == 1.0
    # shorter sequences run slower, on every fitted family
    for name in ("h100-sxm", "h200", "a100-80g"):
        dev = load_cluster(name).device
        assert kernels.attention_shape_factor(dev, 1024, 128, True, "fwd") < 0.9


def _err(rows, fn):
    return ck._mean_abs_err(rows, fn)


def test_attention_fits_are_the_grid_optimum():
    """Each stored (L0, D0) is not beaten by its grid neighbours (eta refitted at each): the constants
    are what --fit finds on these rows, not hand-set."""
    groups = {}
    for r in ROWS:
        if r["kernel"] == "attention":
            groups.setdefault(ck.attention_key(r), []).append(r)
    assert set(groups) == set(kernels.ATTENTION_FITS)
    for key, fit in kernels.ATTENTION_FITS.items():
        rs = groups[key]
        assert fit.rows == len(rs)
        here = _err(rs, lambda r: ck.attention_row_time_s(r, "kernel", fit))
        for dl, dd in ((16, 0), (-16, 0), (0, 4), (0, -4)):
            if fit.l0_tokens + dl < 0 or fit.d0 + dd < 0:
                continue
            best = min(
                _err(
                    rs,
                    lambda r, e=e: ck.attention_row_time_s(
                        r, "kernel", replace(fit, l0_tokens=fit.l0_tokens + dl, d0=fit.d0 + dd, eta=e)
                    ),
                )
                for e in (fit.eta * (1 + 0.01 * i) for i in range(-6, 7))
            )
            assert here <= best + 1e-3, (key, dl, dd, here, best)


def test_gemm_fits_are_the_grid_optimum():
    fam_rows = {}
    for r in ROWS:
        # TE multi-stream grouped rows check the dense fit (with their concurrency), they are not fitted
        if r["kernel"] != "attention" and int(r["m"]) >= ck.SKINNY_M and ck.te_streams(r) is None:
            fam_rows.setdefault(ck.gemm_key(r), []).append(r)
    assert set(fam_rows) == set(kernels.GEMM_FITS)
    for key, fit in kernels.GEMM_FITS.items():
        rs = fam_rows[key]
        here = _err(rs, lambda r: ck.gemm_row_time_s(r, "kernel"))
        for d in (-0.01, 0.01):
            if fit.eta + d > 1:
                continue
            other = replace(fit, eta=fit.eta + d)
            assert (
                here
                <= _err(
                    rs,
                    lambda r: ck.gemm_row_time_s(
                        r, "kernel", other, kernels.STREAM_FITS.get(key[0].replace("-500W", ""))
                    ),
                )
                + 1e-9
            ), key


def test_kernel_model_meets_its_bound_and_the_preset_levels_do_not():
    """The kernel model (fitted levels) is within issue 20's 8%; the preset levels (fitted to step
    times) are far from the kernels: the finding the benchmark reports."""
    res_kernel = ck.run("kernel", out=lambda *a: None)
    res_preset = ck.run("preset", out=lambda *a: None)
    mean = lambda res: sum(abs(x["error"]) for x in res) / len(res)  # noqa: E731
    assert mean(res_kernel) <= ck.LIMIT
    assert mean(res_preset) > 2 * mean(res_kernel)
    assert ck.main(["--model", "kernel", "--check"]) == 0


def test_step_time_attention_uses_the_shape_factor():
    from costmodel.physics.kernels.compute import layer_ops
    from costmodel.spec.plan import ParallelConfig
    from costmodel.spec.presets import load_model
    from costmodel.spec.workload import Workload

    m, dev = load_model("llama3-8b"), load_cluster("h100-sxm").device
    per_token = []
    for s in (2048, 16384):
        att = next(
            o
            for o in layer_ops(m, dev, Workload(global_batch=8, seq_len=s), ParallelConfig(mb=1))
            if o.name == "attn_core"
        )
        per_token.append((att.fwd_s - dev.kernel_overhead_s) / att.fwd_flops)
    # time per FLOP is higher at 2k than at 16k by the shape factor's ratio
    ratio = kernels.attention_shape_factor(dev, 16384, m.head_dim, True, "fwd") / kernels.attention_shape_factor(
        dev, 2048, m.head_dim, True, "fwd"
    )
    assert per_token[0] / per_token[1] == pytest.approx(ratio, rel=1e-6)
    assert ratio > 1.05


def test_bad_limit_exits_2(capsys):
    assert ck.main(["--limit", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--limit" in err[0]


def test_an_empty_gemm_costs_nothing_and_never_divides_by_zero():
    # search_equality's exhaustive baseline reached gemm_time_s with an empty dimension (ZeroDivisionError)
    from costmodel.physics.kernels.gemm import gemm_time_s
    from costmodel.spec.presets import load_cluster

    dev = load_cluster("h100-sxm").device
    for m, n, k in ((0, 4096, 4096), (4096, 0, 4096), (4096, 4096, 0)):
        assert gemm_time_s(m, n, k, dev, "bf16") == 0.0
    assert gemm_time_s(1, 4096, 4096, dev, "bf16") > 0


def test_te_multistream_grouped_gemm_rows():
    # TE PR #2045's H100 BF16 grouped GEMMs: timed as TE_GROUPED_GEMM_STREAMS expert GEMMs at a time (TE 2.7) or
    # one (TE 2.2) with the dense H100 BF16 fit; within 10% each, while the single grouped kernel reading of the
    # same rows (all experts sharing the SMs) is 18% or more too fast on every TE 2.7 row
    rows = [r for r in ROWS if r["kernel"] == "grouped_gemm_multistream"]
    assert len(rows) == 4
    for r in rows:
        meas = ck.row_flops(r) / (float(r["measured_tflops"]) * 1e12)
        assert abs(ck.gemm_row_time_s(r, "kernel") / meas - 1) < 0.10, r["row_id"]
        if "2.7" in r["impl"]:
            one_kernel = dict(r, kernel="grouped_gemm_contiguous")
            assert ck.gemm_row_time_s(one_kernel, "kernel") / meas - 1 < -0.15, r["row_id"]
