"""The EP dispatch component benchmark (issue 20): DeepEP's published kernels against the model's DeepEP
time. The mean |err| asserted is what the model reaches (9.5% over 18 text cases, benchmarks/RESULTS.md
section 30), so a change that makes the component worse fails; the intranode NVLink cases stay 13-21% fast
(named there, not fitted)."""

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import component_ep as ce  # noqa: E402

MEAN_LIMIT = 0.10


@pytest.fixture(scope="module")
def cases():
    return [ce.case(r) for r in ce.load()]


def test_every_row_has_a_source():
    with open(ce.DATA, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 18
    for r in rows:
        assert r["source_url"].startswith("https://github.com/deepseek-ai/DeepEP/blob/")
        assert r["source_location"] and r["measured_value"]


def test_measured_conversion_hand_computed(cases):
    # EP 8 intranode V1 dispatch: 4096 tokens x 5.29 ranks x 7168 x (1 + 4/128) B / 153 GB/s = 1.05 ms
    c = next(c for c in cases if c["row"]["case_id"] == "1")
    assert c["measured_s"] == pytest.approx(4096 * c["ranks"] * 7168 * (1 + 4 / 128) / 153e9)
    assert 1.0e-3 < c["measured_s"] < 1.1e-3


def test_deepep_model_within_its_recorded_error(cases):
    mean = sum(abs(c["err"]) for c in cases) / len(cases)
    assert mean <= MEAN_LIMIT
    # the per-copy all-to-all reading is far off: DeepEP sends one row per rank / node, not per expert
    assert sum(abs(c["a2a_err"]) for c in cases) / len(cases) > 3 * mean


def test_check_flag_passes():
    assert ce.main(["--check"]) == 0


def test_bad_csv_exits_2(tmp_path, capsys):
    p = tmp_path / "x.csv"
    p.write_text("case_id,source_key\n1,x\n")
    assert ce.main(["--csv", str(p)]) == 2
    assert "field" in capsys.readouterr().err
