"""The published serving measurements: every row cites its source and can be predicted."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package (run alone, as the other benchmark tests do)
spec = importlib.util.spec_from_file_location("validate_inference", ROOT / "benchmarks" / "validate_inference.py")
vi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vi)
ROWS = vi.load_rows()


def test_rows_cite_their_source():
    assert len(ROWS) >= 20
    for r in ROWS:
        assert r["source_url"].startswith("https://") and r["source_location"], r["row_id"]
        assert r["metric"] in vi.METRICS and float(r["measured"]) > 0
        assert r["batching"] in vi.BATCHING


@pytest.mark.parametrize("row", ROWS, ids=[r["row_id"] for r in ROWS])
def test_every_row_is_predicted(row):
    e = vi.predict(row)
    assert vi.METRICS[row["metric"]](e) > 0


def test_script_prints_error_per_row(capsys):
    assert vi.main([]) == 0
    out = capsys.readouterr().out
    assert "err%" in out and "mean |err|" in out
    assert len([line for line in out.splitlines() if line[:3].strip().isdigit()]) == len(ROWS)
