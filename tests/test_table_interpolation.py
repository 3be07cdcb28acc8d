"""The tables' interpolation schemes (issue 38, benchmarks/notes/2026-12-05-table-interpolation.md):
affine in the axis where the cost is ``a + b x`` (GEMM dimensions, message size, tokens), the monotone
cubic in log-log where it mixes powers (attention over isl), grid values reproduced exactly, and the
held-out benchmark predicting with the package's own 1-D interpolation."""

from __future__ import annotations

from math import log

import numpy as np
import pytest

from benchmarks.component_tables import heldout_1d, held_positions
from costmodel.physics.tables import attention as att_mod
from costmodel.physics.tables import collectives as coll_mod
from costmodel.physics.tables import gemm as gemm_mod
from costmodel.physics.tables import gemm_lookup, collective_lookup
from costmodel.physics.tables import moe as moe_mod
from costmodel.physics.tables.gemm import gemm_grid
from costmodel.physics.tables.grid import AFFINE, LOGLOG, MONOTONE, PCHIP, interp_1d, interpolate, monotone
from costmodel.physics.tables.store import load, manifest, table_for

X = np.array([256.0, 512.0, 1024.0, 4096.0, 16384.0])


def test_affine_is_exact_for_a_floor_plus_linear_cost_and_loglog_is_not():
    t = 5.0 + 0.01 * X  # alpha + bytes / bandwidth: a latency floor plus a linear part
    x = 2048.0
    aff = float(np.exp(interp_1d(np.log(X), np.log(t), log(x), AFFINE)))
    ll = float(np.exp(interp_1d(np.log(X), np.log(t), log(x), LOGLOG)))
    assert aff == pytest.approx(5.0 + 0.01 * x, rel=1e-12)
    assert ll > 1.01 * (5.0 + 0.01 * x)  # log(a + b e^u) is convex: log-log over-estimates


def test_pchip_is_exact_for_a_power_law_and_close_for_a_mixed_cost():
    for p in (1.0, 2.0):
        t = 3e-4 * X**p
        v = interp_1d(np.log(X), np.log(t), log(2048.0), PCHIP)
        assert float(np.exp(v)) == pytest.approx(3e-4 * 2048.0**p, rel=1e-9)
    t = 20.0 + 0.01 * X + 1e-6 * X**2  # attention over isl: floor, linear and quadratic work
    truth = 20.0 + 0.01 * 2048 + 1e-6 * 2048**2
    pc = float(np.exp(interp_1d(np.log(X), np.log(t), log(2048.0), PCHIP)))
    ll = float(np.exp(interp_1d(np.log(X), np.log(t), log(2048.0), LOGLOG)))
    assert abs(pc / truth - 1) < abs(ll / truth - 1) / 2


def test_pchip_does_not_overshoot_a_step():
    t = np.array([1.0, 1.0, 1.0, 10.0, 10.0])
    xs = np.linspace(log(X[0]), log(X[-1]), 200)
    v = np.exp([interp_1d(np.log(X), np.log(t), float(x), PCHIP) for x in xs])
    assert v.min() >= 1.0 - 1e-12 and v.max() <= 10.0 + 1e-12
    assert np.all(np.diff(v) >= -1e-12)  # monotone data stay monotone


def test_grid_values_are_reproduced_and_vectorised_rows_agree():
    rng = np.random.default_rng(0)
    y = np.log(rng.uniform(1.0, 2.0, size=(3, len(X))))
    for scheme in (AFFINE, LOGLOG, PCHIP):
        assert np.array_equal(interp_1d(np.log(X), y, log(X[2]), scheme), y[:, 2])
        row = interp_1d(np.log(X), y, log(3000.0), scheme)
        assert row[1] == pytest.approx(float(interp_1d(np.log(X), y[1], log(3000.0), scheme)), rel=1e-12)
    with pytest.raises(ValueError, match="scheme"):
        interp_1d(np.log(X), y, log(3000.0), ("spline", 0.0))


def test_multilinear_affine_is_exact_for_a_multilinear_gemm_time():
    """The roofline's terms (2 m n k FLOPs, (mk + kn + mn) bytes) are multilinear in (m, n, k):
    affine interpolation on each axis reproduces them between grid values."""
    ax = [np.array([64.0, 256.0, 1024.0]), np.array([512.0, 2048.0]), np.array([128.0, 1024.0, 8192.0])]
    m, n, k = np.meshgrid(*ax, indexing="ij")
    t = 3.0 + 2 * m * n * k / 1e9 + (m * k + k * n + m * n) / 1e6
    q = (300.0, 1000.0, 3000.0)
    v, corners, exact, _ = interpolate([np.log(a) for a in ax], np.log(t), tuple(log(x) for x in q))
    want = 3.0 + 2 * q[0] * q[1] * q[2] / 1e9 + (q[0] * q[2] + q[2] * q[1] + q[0] * q[1]) / 1e6
    assert not exact and len(corners) == 8 and float(np.exp(v)) == pytest.approx(want, rel=1e-12)


def test_each_table_names_its_scheme():
    assert gemm_mod.SCHEMES == (AFFINE, AFFINE, MONOTONE)
    assert gemm_mod.schemes("bfloat16") == gemm_mod.schemes("nvfp4") == gemm_mod.SCHEMES
    assert gemm_mod.schemes("fp8_block") == (AFFINE, AFFINE, monotone(below=128))
    assert coll_mod.SCHEME == MONOTONE and moe_mod.SCHEME == ("load", 1.0)  # affine in the rank's load
    assert att_mod.SCHEMES == (AFFINE, PCHIP)


def test_monotone_is_affine_on_increasing_times():
    """On a non-decreasing series each value is already the lesser of it and the next: MONOTONE is
    AFFINE, exact for alpha + S / beta."""
    t = 5.0 + 0.01 * X
    for x in (300.0, 2048.0, 9000.0):
        mono = float(np.exp(interp_1d(np.log(X), np.log(t), log(x), MONOTONE)))
        assert mono == pytest.approx(float(np.exp(interp_1d(np.log(X), np.log(t), log(x), AFFINE))), rel=1e-12)
        assert mono == pytest.approx(5.0 + 0.01 * x, rel=1e-12)


def test_monotone_does_not_let_a_slow_outlier_raise_the_points_around_it():
    """A time above the next larger size's (the 1024 point: 10 against 4 at 4096) is read as a slow
    outlier: between the grid values each end is the lesser of its own time and the next grid value's;
    the grid value stays measured."""
    t = np.array([1.0, 2.0, 10.0, 4.0, 5.0])
    y = np.log(t)
    assert interp_1d(np.log(X), y, log(X[2]), MONOTONE) == y[2]  # measured stays measured
    assert float(np.exp(interp_1d(np.log(X), y, log(2048.0), MONOTONE))) == pytest.approx(4.0, rel=1e-12)
    w = (768.0 - 512.0) / (1024.0 - 512.0)  # between 512 (min(2, 10) = 2) and 1024 (min(10, 4) = 4)
    want = (1 - w) * 2.0 + w * 4.0
    assert float(np.exp(interp_1d(np.log(X), y, log(768.0), MONOTONE))) == pytest.approx(want, rel=1e-12)
    assert float(np.exp(interp_1d(np.log(X), y, log(768.0), AFFINE))) > 5.0
    # one step only: 512's time (6) is bounded by 1024's (5), not by 4096's (2)
    t2 = np.array([1.0, 6.0, 5.0, 2.0, 7.0])
    w = (384.0 - 256.0) / (512.0 - 256.0)
    want = (1 - w) * 1.0 + w * 5.0
    assert float(np.exp(interp_1d(np.log(X), np.log(t2), log(384.0), MONOTONE))) == pytest.approx(want, rel=1e-12)
    # vectorised rows agree with one row at a time
    rows = np.log(np.stack([t, t[::-1], 2 * t]))
    got = interp_1d(np.log(X), rows, log(768.0), MONOTONE)
    for r in range(3):
        assert got[r] == pytest.approx(float(interp_1d(np.log(X), rows[r], log(768.0), MONOTONE)), rel=1e-12)


def test_monotone_step_stops_at_its_break():
    """fp8_block: k below one 128-wide scale block runs another path (vLLM H100: about twice k = 128's
    time); the step to the next grid value does not reach across the break."""
    k = np.array([32.0, 64.0, 128.0, 256.0])
    y = np.log(np.array([2.0, 2.0, 1.0, 1.5]))
    x = log(48.0)
    assert float(np.exp(interp_1d(np.log(k), y, x, monotone(below=128)))) == pytest.approx(2.0, rel=1e-12)
    assert float(np.exp(interp_1d(np.log(k), y, x, MONOTONE))) == pytest.approx(1.5, rel=1e-12)  # 64 -> 1
    w = (96.0 - 64.0) / 64.0  # the cell across the break: 64's own time, then min(128's, 256's)
    want = (1 - w) * 2.0 + w * 1.0
    assert float(np.exp(interp_1d(np.log(k), y, log(96.0), monotone(below=128)))) == pytest.approx(want, rel=1e-12)


def test_interpolate_with_a_monotone_axis_matches_the_one_dimensional_rule():
    """On a grid, the monotone axis' window reaches to the axis' end; the result is the 1-D rule along
    it followed by the affine rule along the other axis."""
    rng = np.random.default_rng(1)
    ax = [np.log(np.array([16.0, 64.0, 256.0])), np.log(X)]
    y = np.log(rng.uniform(1.0, 3.0, size=(3, len(X))))
    q = (log(100.0), log(3000.0))
    v, corners, exact, _ = interpolate(ax, y, q, (AFFINE, MONOTONE))
    along = interp_1d(ax[1], y, q[1], MONOTONE)
    assert v == pytest.approx(float(interp_1d(ax[0], along, q[0], AFFINE)), rel=1e-12)
    assert not exact and len(corners) == 4


def test_collective_lookup_bounds_each_size_by_the_next():
    """Between two sizes of a measured series the look-up is affine between each size's time bounded by
    the next size's (a real series with a slow outlier)."""
    for f in sorted(k for k, e in manifest()["files"].items() if e["op"] == "nccl" and e["system"] == "h100_sxm"):
        z = load(f)
        for key in sorted(k[: -len(".bytes")] for k in z if k.endswith(".bytes") and ".half." in k):
            b, lat = z[key + ".bytes"].astype(float), z[key + ".lat_ms"].astype(float)
            step = np.minimum(lat, np.append(lat[1:], np.inf))
            bad = [i for i in range(len(b) - 1) if lat[i] > lat[i + 1]]
            if not bad:
                continue
            i = bad[0]
            op, _, n = key.split(".")
            version = manifest()["files"][f]["backend_version"]
            if table_for("h100_sxm", "nccl", version).file != f:
                continue
            mid = 0.5 * (b[i] + b[i + 1])
            t, ev = collective_lookup("H100-SXM5-80GB", op, mid, int(n), nccl=version)
            assert ev.kind == "interpolated"
            assert t == pytest.approx(0.5 * (step[i] + step[i + 1]) * 1e-3, rel=1e-9)
            assert t < 0.5 * (lat[i] + lat[i + 1]) * 1e-3
            return
    pytest.fail("no H100 NCCL series with a slow outlier")


def test_gemm_lookup_between_two_k_values_is_affine_in_k():
    choice, ax, lat, fill = gemm_grid("h100_sxm", "bf16")
    i, j = list(ax["m"]).index(1024), list(ax["n"]).index(4096)
    kk = list(ax["k"])
    a, b = kk.index(2048), kk.index(2560)
    assert fill[i, j, a] == 0 and fill[i, j, b] == 0
    t, ev = gemm_lookup("H100-SXM5-80GB", "bf16", 1024, 4096, 2304)
    want = 0.5 * (float(lat[i, j, a]) + float(lat[i, j, b])) * 1e-3
    assert ev.kind == "interpolated" and t == pytest.approx(want, rel=1e-9)


def test_collective_lookup_between_two_sizes_is_affine_in_bytes():
    z = load(table_for("B200", "nccl").file)
    b, lat = z["all_reduce.half.8.bytes"].astype(float), z["all_reduce.half.8.lat_ms"].astype(float)
    mid = 0.5 * (b[12] + b[13])
    t, ev = collective_lookup("B200", "all_reduce", mid, 8)
    assert ev.kind == "interpolated" and t == pytest.approx(0.5 * (lat[12] + lat[13]) * 1e-3, rel=1e-9)


def test_heldout_benchmark_predicts_with_the_package_interpolation():
    """Every held-out prediction equals the package's 1-D interpolation on the reduced axis (the rule's
    'predicted from the remaining grid by the package's interpolation')."""
    z = load(table_for("h100_sxm", "gemm").file)
    lat, ok = z["bfloat16.lat_ms"].astype(float)[:4, :3], z["bfloat16.fill"][:4, :3] == 0
    logk = np.log(z["bfloat16.k"].astype(float))
    p, m = heldout_1d(logk, lat, ok, axis=2, scheme=gemm_mod.schemes("bfloat16")[2])
    held = held_positions(lat.shape[2])
    keep = [j for j in range(lat.shape[2]) if j not in held]
    j = held[2]
    want = np.exp(interp_1d(logk[keep], np.log(lat[0, 0, keep]), float(logk[j]), MONOTONE))
    assert ok[0, 0, j - 1 : j + 2].all()
    n_before = sum(int((ok[..., h - 1] & ok[..., h] & ok[..., h + 1]).sum()) for h in held[:2])
    assert p[n_before] == pytest.approx(float(want), rel=1e-12) and m[n_before] == lat[0, 0, j]


def test_kernel_rows_are_grouped_by_what_they_time():
    """kernels.csv GEMM rows whose protocol differs from the tables' (one L2-warm weight, fp8 without
    the activation quantisation the tables include) are reported apart, not forced to agree."""
    from benchmarks.component_tables_rows import PROTOCOLS, kernel_rows

    rows = {r["row"]: r for r in kernel_rows()}
    assert {rows[i]["protocol"] for i in (226, 227, 233, 210, 211)} == {PROTOCOLS[1]}
    assert {rows[i]["protocol"] for i in (199, 201, 204, 240)} == {PROTOCOLS[0]}
    assert {rows[i]["protocol"] for i in (171, 188, 205)} == {PROTOCOLS[2]}
    assert rows[226]["own table"] and not rows[171]["own table"]


def test_collective_beyond_the_largest_message_continues_the_last_interval():
    """alpha + S / beta measured up to S_max: beyond it the last interval's dt/dS continues (exact for
    alpha-beta), held between 0 and the average t/S; the old rule (constant average bandwidth)
    charged alpha again per byte."""
    from costmodel.physics.tables.collectives import edge_seconds_per_byte

    s = np.array([2.0**20, 2.0**21, 2.0**22])
    alpha, beta = 20e-6, 400e9
    ll = np.log((alpha + s / beta) * 1e3)
    assert edge_seconds_per_byte(s, ll) == pytest.approx(1 / beta, rel=1e-9)
    flat = np.log(np.array([1.0, 1.0, 0.9]) * 1e-3)  # a non-increasing last interval: average t/S
    assert edge_seconds_per_byte(s, flat) == pytest.approx(0.9e-6 / s[-1], rel=1e-9)
    z = load(table_for("B200", "nccl").file)
    b, lat = z["all_reduce.half.8.bytes"].astype(float), z["all_reduce.half.8.lat_ms"].astype(float)
    t, ev = collective_lookup("B200", "all_reduce", 4 * b[-1], 8)
    inc = (lat[-1] - lat[-2]) / (b[-1] - b[-2])
    assert ev.kind == "extrapolated" and "last interval" in ev.note
    assert t == pytest.approx((lat[-1] + 3 * b[-1] * min(inc, lat[-1] / b[-1])) * 1e-3, rel=1e-9)
    assert t <= 4 * lat[-1] * 1e-3


def test_collective_rows_are_grouped_by_timing():
    from benchmarks.component_tables_rows import COLLECTIVE_PROTOCOLS, collective_rows

    rows = {r["row"]: r for r in collective_rows()}
    assert rows["54"]["protocol"] == COLLECTIVE_PROTOCOLS[1] and rows["7"]["protocol"] == COLLECTIVE_PROTOCOLS[0]
