"""How long the test suite takes: the figure the README quotes for its second command (issue 42 item 10).

    python -m benchmarks.suite_time [--workers N]

Runs the suite as the README's test command does (``python -m pytest``, the options of ``pyproject.toml``) in a
child process and records its wall and CPU time, the counts pytest reports and the host's load, so the README
states a measured time instead of a promise. ``--workers N`` passes ``-n N`` (needs pytest-xdist; not recorded).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

from benchmarks.results_io import record


def run(extra: list[str]) -> dict:
    """Run the suite; its counts come from pytest's JUnit XML (the project's ``-q`` in addopts, with this ``-q``,
    leaves no summary line to read)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "suite.xml"
        t0, c0 = time.perf_counter(), os.times()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *extra],
            capture_output=True,
            text=True,
        )
        wall, c1 = time.perf_counter() - t0, os.times()
        suites = list(ElementTree.parse(xml).getroot().iter("testsuite")) if xml.exists() else []
        n = {k: sum(int(t.get(k, 0)) for t in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return {
        "exit": proc.returncode,
        "summary": f"{n['tests'] - n['failures'] - n['errors'] - n['skipped']} passed, "
        f"{n['failures'] + n['errors']} failed, {n['skipped']} skipped" + (f": {', '.join(failed)}" if failed else ""),
        "wall_min": round(wall / 60, 1),
        "cpu_min": round((c1.children_user + c1.children_system - c0.children_user - c0.children_system) / 60, 1),
        "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
        "failed": n["failures"] + n["errors"],
        "skipped": n["skipped"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: none, as the README runs it)")
    a = ap.parse_args(argv)
    res = run(["-n", str(a.workers)] if a.workers else [])
    print(f"{res['summary']}\nwall {res['wall_min']} min, CPU {res['cpu_min']} min, exit {res['exit']}")
    record(
        "suite_time",
        argv,
        title="the test suite's time, run as the README's test command runs it",
        headline={
            "passed": res.get("passed", 0),
            "failed": res.get("failed", 0),
            "skipped": res.get("skipped", 0),
            "wall min": res["wall_min"],
            "cpu min": res["cpu_min"],
        },
        targets=[{"name": "every test passes", "met": res["exit"] == 0}],
        inputs=["costmodel", "search", "planner", "tests"],
        enabled=not a.workers,
    )
    return 0 if res["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
