"""The CI accuracy gate (issue 10): the development set is predicted within its limits.

``python -m benchmarks.validate_published --set dev --check`` exits 1 when the development set's mean
|error| exceeds 6% or any regime's mean |error| over it exceeds 12%; this test runs it, so the
README's test command (and CI) fails when a change makes the model worse on measured runs. The
new published set (``--set new``) is reported in RESULTS.md but not gated yet: several of its
regimes are still above 12% (issue 10 stays open for them).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import validate_published as V  # noqa: E402


def test_development_set_within_the_gate(capsys):
    code = V.main(["--set", "dev", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "CHECK PASSED" in out
