"""The stored band residuals are the current model's: ``costmodel/trust/data/residuals.json`` (what every
80% band is built from) must equal ``ln(predicted/measured)`` of the published rows under the model as
it is, so a change to the model or the rows that moves a prediction fails here until
``python -m benchmarks.band_coverage --set all --write`` is rerun (the file once lagged the model by
many commits: 106 of 142 residuals had moved). Each row is predicted out of source, with the
per-family constants fitted without its source; the test reuses the constants stored with each row
(refitting them scans 71 values per row, ~30 s) and checks that they are held out and that every
family measured by two or more sources has them."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import band_coverage as B  # noqa: E402

from costmodel.trust import uncertainty as U  # noqa: E402


def test_stored_residuals_are_the_current_models():
    stored = json.loads(U.RESIDUALS.read_text())
    now = B.stored(B.predicted_rows(stored["engine"], "all", constants=B.stored_constants(stored)), stored["engine"])
    key = lambda r: (r["set"], r["row_id"])  # noqa: E731
    have = {key(r): r for r in stored["rows"]}
    want = {key(r): r for r in now["rows"]}
    assert set(have) == set(want)
    moved = [
        k
        for k in want
        if have[k]["regime"] != want[k]["regime"]
        or have[k]["log_residual"] != pytest.approx(want[k]["log_residual"], abs=2e-6)
    ]
    assert not moved, f"rerun python -m benchmarks.band_coverage --set all --write: rows {moved[:10]} moved"


def test_stored_residuals_are_out_of_source():
    from benchmarks.calibrate import fitted_families
    from benchmarks.published import load_set

    stored = json.loads(U.RESIDUALS.read_text())
    by_key = {(r["set"], r["row_id"]): r for r in stored["rows"]}
    for (label, field), rows in fitted_families([r for r in load_set("all") if not r.skip]).items():
        multi = len({r.source for r in rows}) > 1
        for r in rows:
            x = by_key.get((r.set, r.row_id))
            if x is None:  # a row the predictor skipped
                continue
            assert (field in x["constants"]) == multi, (label, r.row_id)
            assert (field in x["in_sample_constants"]) == (not multi), (label, r.row_id)
    assert stored["components"] == B.components()


def test_sealed_coverage_path_runs_on_a_synthetic_split(tmp_path, monkeypatch, capsys):
    """``band_coverage.py --set sealed`` scores a split with the stored bands, fits and writes nothing;
    run here on three rows of the (unsealed) new set standing in for the sealed split."""
    import csv as _csv

    from benchmarks import band_coverage as BC
    from benchmarks import published as P

    with open(P.SETS["new"], newline="") as f:
        recs = [r for r in _csv.DictReader(f) if r["row_id"] in ("101", "102", "103")]
    fake = tmp_path / "published_sealed_synthetic.csv"
    with open(fake, "w", newline="") as f:
        w = _csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    monkeypatch.setitem(P.SETS, "sealed", fake)
    before = BC.U.RESIDUALS.read_text()
    assert BC.main(["--set", "sealed", "--engine", "analytic"]) == 0
    out = capsys.readouterr().out
    assert "80% band, sealed split" in out and "/3 measured runs inside" in out
    assert "in-sample" not in out  # no second scoring with the split's own rows
    assert BC.main(["--set", "sealed", "--write"]) == 2
    assert "refused" in capsys.readouterr().err
    assert BC.U.RESIDUALS.read_text() == before


def test_stored_residuals_hold_no_sealed_row():
    """The bands are built from dev and new rows only: no stored row is of the sealed split, of the spent one
    (issue 20's seal) or of one of their sources (only the files' ``source_key`` column is read here, never a
    measured time)."""
    import csv as _csv

    from benchmarks import published as P

    stored = json.loads(U.RESIDUALS.read_text())
    sealed_sources = set()
    for name in ("sealed", "spent"):
        with open(P.SETS[name], newline="") as f:
            sealed_sources |= {r["source_key"] for r in _csv.DictReader(f)}
    assert sealed_sources  # the splits exist: the check below could fail
    assert {r["set"] for r in stored["rows"]} <= {"dev", "new"}
    assert not sealed_sources & {r["source"] for r in stored["rows"]}
    assert {r.set for r in P.load_set("all")} == {"dev", "new"}  # what --write predicts
