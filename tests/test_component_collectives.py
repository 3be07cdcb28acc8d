"""The collectives component benchmark (issue 20): its data carry sources, and the model's error
against them is what RESULTS.md reports.

The issue's target (<= 10% mean |err| at >= 1,000 GPUs) is not met: one public case is at that
scale (1,984 H200, predicted +16%), so ``--check`` exits 1 and says so. What is asserted here is
the structure and the overall error the model actually reaches (12.9% over 44 cases at the commit
that added the last rows; see benchmarks/RESULTS.md, "Collectives against their own
measurements"), so a change that makes the collectives worse fails.
"""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import component_collectives as cc  # noqa: E402

#: the overall mean |err| the model meets on the 44 cases (12.9% measured); not the issue's target
OVERALL_MEAN_LIMIT = 0.135


@pytest.fixture(scope="module")
def results():
    return cc.evaluate(cc.load_cases())


def test_every_row_has_a_source_and_parses():
    with open(cc.DATA, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 44
    for r in rows:
        assert r["source_url"].startswith("https://"), r["case_id"]
        assert len(r["source_location"]) > 10, r["case_id"]
        cc.parse_row(r)  # raises RowError on a missing or invalid field
    assert {r["fabric"] for r in rows} >= {"nvlink", "infiniband", "roce"}
    assert {r["collective"] for r in rows} >= {"allreduce", "allgather", "reducescatter", "alltoall"}


def test_measured_conversions_by_definition():
    # nccl-tests: busbw = algbw * 2 (n-1)/n for all-reduce -> t = 2 * 7/8 * 8e9 B / 480 GB/s
    c = cc.parse_row({"case_id": "x", "source_key": "k", "source_url": "https://x", "source_location": "loc",
                      "fabric": "nvlink", "gpu": "H100", "cluster_preset": "h100-sxm", "nodes": "1",
                      "gpus_per_node": "8", "collective": "allreduce", "message_bytes": "8e9",
                      "measured_kind": "busbw_gbps", "measured_value": "480"})
    assert cc.measured_s(c) == pytest.approx(2 * 7 / 8 * 8e9 / 480e9)


def test_model_error_on_the_data(results):
    s = cc.summary(results)
    assert s["n"] == len(results) >= 44
    assert s["mean_abs_err"] <= OVERALL_MEAN_LIMIT


def test_check_reports_the_unverified_scale_target(results):
    code, why = cc.check(results)
    if cc.summary(results)["n_large"] == 0:
        assert code == 1 and "cannot be verified" in why
    else:
        assert code == (0 if cc.summary(results)["large_mean_abs_err"] <= cc.LARGE_MEAN_LIMIT else 1)


def test_bad_csv_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    with open(cc.DATA, newline="") as f:
        header = f.readline()
    bad.write_text(header + "1,k,https://x,loc,nvlink,H100,h100-sxm,1,8,allreduce,-5,time_us,10,,,,\n")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "component_collectives.py"), "--csv", str(bad)],
                       capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "message_bytes" in p.stderr
