"""Benchmark results as data: one JSON file per benchmark, ``benchmarks/results/<name>.json``.

Every benchmark that produces a headline figure ends its ``main`` with :func:`record`; the file it
writes holds what a reader needs to trust the figure and to reproduce it::

    benchmark  the file's name (a benchmark may record more than one, e.g. one per engine)
    title      what the figure measures, one line
    command    as a user types it: ``python -m benchmarks.<module> <its arguments>``
    commit     ``git rev-parse --short HEAD`` when the run started ("unknown" outside git)
    date       UTC, ``YYYY-MM-DD HH:MM UTC``
    host       cores, load average (1, 5, 15 min) at the end of the run, Python version
    headline   the few numbers a reader wants: {name: value}
    table      summary rows (a list of flat dicts), the per-row detail stays in the printed output
    targets    [{"name": ..., "met": true|false}]
    inputs     the source folders and files the figure measures (``costmodel``, a data file, ...)
    previous   {"commit", "date", "headline"} of the file this one replaced, or null
    dirty      the inputs that differed from ``commit`` at the end of the run (work not in that commit measured)
    wall_s     seconds from importing this module to writing the file

``python -m benchmarks.render`` builds ``benchmarks/RESULTS.md`` and the README's marked figures from
these files only. Nothing is recorded inside a test run (``PYTEST_CURRENT_TEST`` is set) or with
``BENCHMARKS_RECORD=0``; a benchmark records only its canonical run (no row filter, no other data).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
_T0 = time.time()
SCALAR = (str, int, float, bool, type(None))
FIELDS = {
    "benchmark": str,
    "title": str,
    "command": str,
    "commit": str,
    "date": str,
    "host": dict,
    "headline": dict,
    "table": list,
    "targets": list,
    "inputs": list,
    "previous": (dict, type(None)),
}
OPTIONAL = {"dirty": list, "wall_s": (int, float)}
DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")


def pct(x: float | None, nd: int = 1) -> float | None:
    """A fraction as a percentage rounded to ``nd`` decimals (None stays None)."""
    return None if x is None else round(100 * x, nd)


def git(*args: str) -> str | None:
    """stdout of ``git args`` in the repository root, stripped; None if git fails or is absent."""
    try:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def head() -> str:
    return git("rev-parse", "--short", "HEAD") or "unknown"


_START_COMMIT: list[str] = []  # HEAD when a benchmark started (see start_commit)


def start_commit() -> str:
    """HEAD when this module was imported (benchmarks import it at start-up), so a commit made by
    someone else while a long benchmark runs is not the one recorded."""
    if not _START_COMMIT:
        _START_COMMIT.append(head())
    return _START_COMMIT[0]


def known(commit: str) -> bool:
    """Whether ``commit`` names a commit of this repository."""
    return bool(re.fullmatch(r"[0-9a-f]{4,40}", commit)) and git("cat-file", "-e", f"{commit}^{{commit}}") is not None


def changed(commit: str, inputs: list[str], untracked: bool = False) -> list[str]:
    """The ``inputs`` whose files differ between ``commit`` and the working tree
    (``git diff --quiet <commit> -- <input>``; with ``untracked``, new files not yet added count too)."""
    out = []
    for p in inputs:
        try:
            rc = subprocess.run(
                ["git", "diff", "--quiet", commit, "--", p], cwd=ROOT, capture_output=True, timeout=60
            ).returncode
        except (OSError, subprocess.SubprocessError):
            rc = 1
        if rc != 0 or (untracked and git("ls-files", "--others", "--exclude-standard", "--", p)):
            out.append(p)
    return out


def command(module: str, argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python -m benchmarks." + module, *([shlex.join(args)] if args else [])])


def recording() -> bool:
    """False inside a test run or with ``BENCHMARKS_RECORD=0``."""
    return not os.environ.get("PYTEST_CURRENT_TEST") and os.environ.get("BENCHMARKS_RECORD", "1") != "0"


def previous_of(path: Path) -> dict | None:
    """``{"commit", "date", "headline"}`` of the result at ``path``, or None if there is none readable."""
    try:
        old = json.loads(path.read_text())
        return {"commit": old["commit"], "date": old["date"], "headline": old["headline"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def validate(doc) -> list[str]:
    """What is wrong with one result document (empty: it has the schema)."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    bad = [f"missing field {k!r}" for k in FIELDS if k not in doc]
    bad += [
        f"{k}: {type(doc[k]).__name__}, expected {t}"
        for k, t in {**FIELDS, **OPTIONAL}.items()
        if k in doc and not isinstance(doc[k], t)
    ]
    if bad:
        return bad
    bad += [f"unknown field {k!r}" for k in doc if k not in FIELDS and k not in OPTIONAL]
    if not doc["command"].startswith("python -m benchmarks."):
        bad.append(f"command {doc['command']!r} does not start with 'python -m benchmarks.'")
    if not DATE.match(doc["date"]):
        bad.append(f"date {doc['date']!r} is not 'YYYY-MM-DD HH:MM UTC'")
    if not doc["headline"] or not all(isinstance(k, str) and isinstance(v, SCALAR) for k, v in doc["headline"].items()):
        bad.append("headline: a non-empty {name: number or text}")
    if not all(isinstance(r, dict) and all(isinstance(v, SCALAR) for v in r.values()) for r in doc["table"]):
        bad.append("table: rows of {column: number or text}")
    if not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("met"), bool)
        for t in doc["targets"]
    ):
        bad.append("targets: [{'name': text, 'met': true|false}]")
    if not doc["inputs"] or not all(isinstance(p, str) and p for p in doc["inputs"]):
        bad.append("inputs: a non-empty list of paths")
    if not {"cores", "load_avg"} <= set(doc["host"]):
        bad.append("host: needs cores and load_avg")
    prev = doc["previous"]
    if prev is not None and not ({"commit", "headline"} <= set(prev) and isinstance(prev["headline"], dict)):
        bad.append("previous: {'commit', 'date', 'headline'} or null")
    return bad


start_commit()


def record(
    name: str,
    argv: list[str] | None,
    *,
    title: str,
    headline: dict,
    inputs: list[str],
    table: list[dict] = (),
    targets: list[dict] = (),
    module: str | None = None,
    enabled: bool = True,
    directory: Path | None = None,
) -> Path | None:
    """Write ``<directory>/<name>.json`` (default ``benchmarks/results``) for the run of
    ``python -m benchmarks.<module or name> <argv>``; ``previous`` is read from the file it replaces.
    Returns the path, or None when not recording (``enabled`` false, a test run, ``BENCHMARKS_RECORD=0``)."""
    if not enabled or not recording():
        return None
    directory = RESULTS if directory is None else directory
    path = directory / f"{name}.json"
    commit = start_commit()
    doc = {
        "benchmark": name,
        "title": title,
        "command": command(module or name, argv),
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": {
            "cores": os.cpu_count(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "headline": dict(headline),
        "table": [dict(r) for r in table],
        "targets": [{"name": t["name"], "met": bool(t["met"])} for t in targets],
        "inputs": list(inputs),
        "previous": previous_of(path),
        "dirty": changed(commit, list(inputs), untracked=True) if commit != "unknown" else [],
        "wall_s": round(time.time() - _T0, 1),
    }
    problems = validate(doc)
    if problems:
        raise ValueError(f"result {name}: " + "; ".join(problems))
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"results: wrote {shown}", file=sys.stderr)
    return path
