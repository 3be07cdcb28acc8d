"""The collectives component benchmark (issue 20): its data carry sources, and the model's error
against them is what RESULTS.md reports.

The issue's target (<= 10% mean |err| at >= 1,000 GPUs) is not verified: two cases read as text
are at that scale (1,984 H200 all-reduce +8%, 1,024 H100 reduce-scatter -0.3% at an assumed
size), fewer than the 10 the check asks for, so ``--check`` exits 1 and says so; 20 more cases at
1,024-8,192 GPUs were read off a figure's axis and are scored apart. What is asserted here is the
structure and the overall error the model actually reaches (16.0% over the 73 text/label cases
with NCCL's medium-size tree correction; 17.3% over 63 at the commit that added NVLSTree; see
benchmarks/RESULTS.md, "Collectives against their own measurements"), so a change that makes the
collectives worse fails.
"""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import component_collectives as cc  # noqa: E402

#: the mean |err| the model meets on the 127 text/label cases (17.9% with NCCL's three protocols and its own
#: latencies, 2026-12-06; the assumed 8 us / 15 us Simple-only model it replaced: 26.2% on the same 127, 16.1%
#: on the 73 it was checked on before the 54 rows of xxrjun, nccl-tests#309, nccl#652 and odissei were added); not
#: the issue's target
OVERALL_MEAN_LIMIT = 0.185
#: the cases read off a figure's axis at >= 1,000 GPUs (13.6% measured, NVLSTree as their runs forced it)
AXIS_LARGE_MEAN_LIMIT = 0.14


@pytest.fixture(scope="module")
def results():
    return cc.evaluate(cc.load_cases())


def test_every_row_has_a_source_and_parses():
    with open(cc.DATA, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 83
    for r in rows:
        assert r["source_url"].startswith("https://"), r["case_id"]
        assert len(r["source_location"]) > 10, r["case_id"]
        cc.parse_row(r)  # raises RowError on a missing or invalid field
        assert r["read_from"] in cc.READ_FROM, r["case_id"]
    assert {r["fabric"] for r in rows} >= {"nvlink", "infiniband", "roce"}
    assert {r["collective"] for r in rows} >= {"allreduce", "allgather", "reducescatter", "alltoall"}


def test_measured_conversions_by_definition():
    # nccl-tests: busbw = algbw * 2 (n-1)/n for all-reduce -> t = 2 * 7/8 * 8e9 B / 480 GB/s
    c = cc.parse_row(
        {
            "case_id": "x",
            "source_key": "k",
            "source_url": "https://x",
            "source_location": "loc",
            "fabric": "nvlink",
            "gpu": "H100",
            "cluster_preset": "h100-sxm",
            "nodes": "1",
            "gpus_per_node": "8",
            "collective": "allreduce",
            "message_bytes": "8e9",
            "measured_kind": "busbw_gbps",
            "measured_value": "480",
        }
    )
    assert cc.measured_s(c) == pytest.approx(2 * 7 / 8 * 8e9 / 480e9)


def test_model_error_on_the_data(results):
    s = cc.summary(results)
    assert s["n"] == sum(cc.in_target(r["case"]) for r in results) >= 63
    assert s["mean_abs_err"] <= OVERALL_MEAN_LIMIT
    assert s["n_axis_large"] >= 20 and s["axis_large_mean_abs_err"] <= AXIS_LARGE_MEAN_LIMIT


def test_large_messages_at_scale_are_bandwidth_right(results):
    # at >= 1,024 GPUs and >= 1 GiB NCCL runs at its NVLSTree plateau: the model's bandwidth term
    # is what is tested there (each case within 15%, mean within 6%; 4.2% measured)
    big = [r for r in results if r["case"].gpus >= cc.LARGE_GPUS and r["case"].message_bytes >= 2**30]
    assert len(big) >= 12
    assert max(abs(r["error"]) for r in big) <= 0.15
    assert sum(abs(r["error"]) for r in big) / len(big) <= 0.06


def test_check_reports_the_unverified_scale_target(results):
    code, why = cc.check(results)
    s = cc.summary(results)
    if s["n_large"] < cc.MIN_LARGE_CASES:
        assert code == 1 and "cannot be verified" in why
    else:
        assert code == (0 if s["large_mean_abs_err"] <= cc.LARGE_MEAN_LIMIT else 1)


def test_rows_read_off_an_axis_are_not_in_the_target():
    base = {
        "case_id": "x",
        "source_key": "k",
        "source_url": "https://x",
        "source_location": "loc",
        "fabric": "infiniband",
        "gpu": "H100",
        "cluster_preset": "h100-sxm",
        "nodes": "128",
        "gpus_per_node": "8",
        "collective": "allreduce",
        "message_bytes": "1e9",
        "measured_kind": "busbw_gbps",
        "measured_value": "300",
    }
    axis = cc.parse_row({**base, "read_from": "figure_axis"})
    text = cc.parse_row(base)
    assert text.read_from == "text" and cc.in_target(text) and not cc.in_target(axis)
    s = cc.summary(cc.evaluate([axis]))
    assert s["n_large"] == 0 and s["n_axis_large"] == 1
    assert cc.check(cc.evaluate([axis]))[0] == 1
    with pytest.raises(cc.RowError, match="read_from"):
        cc.parse_row({**base, "read_from": "guess"})


def test_bad_csv_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    with open(cc.DATA, newline="") as f:
        header = f.readline()
    bad.write_text(header + "1,k,https://x,loc,nvlink,H100,h100-sxm,1,8,allreduce,-5,time_us,10,,,,\n")
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.component_collectives", "--csv", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "message_bytes" in p.stderr


def test_ring_reduce_scatter_slows_with_the_rank_count(results):
    # nccl#1229: H100 ReduceScatter busbw 360 -> 260 GB/s from 4 to 128 nodes (the ring's latency
    # grows with the rank count); the model follows the decline, each row within 15% (scored at
    # 8 GiB: the issue does not state the size, see the README). With NCCL's own step latencies
    # (3.4 us NVLink, 14 us network) the 1,024-rank row is -15%: the measured decline is steeper than NCCL's model
    rows = sorted((r for r in results if r["case"].source_key == "nccl_1229"), key=lambda r: r["case"].gpus)
    assert [r["case"].gpus for r in rows] == [32, 64, 128, 256, 512, 1024]
    pred_busbw = [(c.gpus - 1) / c.gpus * c.message_bytes / r["predicted_s"] for r in rows for c in [r["case"]]]
    assert all(a > b for a, b in zip(pred_busbw, pred_busbw[1:]))
    assert max(abs(r["error"]) for r in rows) <= 0.15


def test_the_step_variants_table_the_dimensions_they_name(monkeypatch):
    # --step --variants (benchmarks/notes/2026-12-06-collectives-default.md): a variant tables TP only where NCCL
    # issues it (tp-nccl: the plan's chunks 1, not Transformer Engine's userbuffers), a stride-1 DP group of a
    # tp=1 plan is not TP, and "model" tables nothing, the training all-to-all's tables=True included
    from costmodel.physics.comm import collectives
    from costmodel.physics.tables import collective_lookup
    from costmodel.spec.plan import ParallelConfig
    from costmodel.spec.presets import load_cluster

    b200 = load_cluster("b200").with_gpus(64)
    table = {k: collective_lookup("b200_sxm", k, 1 << 24, 8)[0] for k in ("allgather", "alltoall")}

    def timed(c, kind="allgather", tables=None):  # the engines' frames hold the plan as ``c``
        return collectives.collective_time_s(kind, 1 << 24, 8, 1, b200, tables=tables)

    tp8, ub8, dp8 = ParallelConfig(tp=8, dp=8), ParallelConfig(tp=8, dp=8, chunks=8), ParallelConfig(tp=1, dp=64)
    model = collectives.collective_time_s("allgather", 1 << 24, 8, 1, b200, tables=False)
    monkeypatch.setattr(collectives, "_table_times", cc._variant_rule(cc.VARIANTS["tp-nccl"]))
    assert timed(tp8) == pytest.approx(table["allgather"]) and table["allgather"] != pytest.approx(model)
    assert timed(ub8) == model and timed(dp8) == model
    monkeypatch.setattr(collectives, "_table_times", cc._variant_rule(cc.VARIANTS["tp"]))
    assert timed(ub8) == pytest.approx(table["allgather"])
    monkeypatch.setattr(collectives, "_table_times", cc._variant_rule(cc.VARIANTS["model"]))
    assert timed(tp8, "alltoall", tables=True) != pytest.approx(table["alltoall"])
    monkeypatch.setattr(collectives, "_table_times", cc._variant_rule(cc.VARIANTS["ep"]))
    assert timed(tp8, "alltoall") == pytest.approx(table["alltoall"]) and timed(tp8) == model


def test_formula_vs_one_node_tables_per_size_band():
    """The collective model alone against every measured one-node nccl-tests point (1,197 on 7 systems).

    With NCCL's three protocols and its own per-step latencies the model is 23.8% mean |err| below 64 KiB and
    22.4% at 64 KiB-8 MiB (2026-12-06); the Simple-only 8 us model it replaced was 124% and 82%. A bound of 30%
    per band fails if the latency side regresses to anything like the old model."""
    pts = cc.formula_vs_tables()
    assert len(pts) > 1000
    assert {p["generation"] for p in pts} >= {"ampere", "hopper", "blackwell"}
    for band, lo, hi in cc.BANDS:
        errs = [abs(p["model_s"] / p["measured_s"] - 1) for p in pts if lo <= p["bytes"] < hi]
        assert errs, band
        assert sum(errs) / len(errs) < 0.30, band
