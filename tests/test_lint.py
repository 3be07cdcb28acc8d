"""One formatter and one linter for the whole tree (ruff, configured in pyproject.toml): nobody formats by hand.

``ruff format`` fixes what ``test_formatted`` reports; ``ruff check --fix`` most of what ``test_lint_clean`` does.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_lint_clean():
    r = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]


def test_formatted():
    r = _ruff("format", "--no-cache", "--check", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
