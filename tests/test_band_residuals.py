"""The stored band residuals are the current model's: ``costmodel/data/residuals.json`` (what every
80% band is built from) must equal ``ln(predicted/measured)`` of the published rows under the model as
it is, so a change to the model or the rows that moves a prediction fails here until
``python benchmarks/band_coverage.py --set all --write`` is rerun (the file once lagged the model by
many commits: 106 of 142 residuals had moved)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import band_coverage as B  # noqa: E402

from costmodel import uncertainty as U  # noqa: E402


def test_stored_residuals_are_the_current_models():
    stored = json.loads(U.RESIDUALS.read_text())
    now = B.stored(B.predicted_rows(stored["engine"], "all"), stored["engine"])
    key = lambda r: (r["set"], r["row_id"])  # noqa: E731
    have = {key(r): r for r in stored["rows"]}
    want = {key(r): r for r in now["rows"]}
    assert set(have) == set(want)
    moved = [k for k in want if have[k]["regime"] != want[k]["regime"]
             or have[k]["log_residual"] != pytest.approx(want[k]["log_residual"], abs=2e-6)]
    assert not moved, f"rerun benchmarks/band_coverage.py --set all --write: rows {moved[:10]} moved"
