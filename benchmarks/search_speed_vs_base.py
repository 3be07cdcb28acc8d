"""Search time against the search before issue 38's measured tables, pair by pair (issue 38's speed criterion).

    python -m benchmarks.search_speed_vs_base [--pairs 3]

Issue 38 asks that the search stay "within 10% of before on GPT-3 / 1024 A100 and DeepSeek-V3 / 2048 H800" once
the cost model reads measured tables. "Before" is :data:`BASE`, the last commit before issue 38's first (baa2309,
the seal rule). Both checkouts run :mod:`benchmarks.search_speed_pairs` on the two cases, one fresh process per run,
the order swapped every pair; the figure is the median of the pair ratios this tree / base of the CPU seconds of
the search as ``recommend`` runs it (re-scored), the one to read on a shared host. The answers of the two commits
differ where the cost model changed (the tables move objectives by a fraction of a percent); both are printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks import results_io
from benchmarks.search_speed_pairs import main as pairs_main
from benchmarks.search_speed_pairs import summary

#: the last commit before issue 38's first (baa2309, 2026-12-04 20:33 UTC): the search "before" the tables
BASE = "59faafe"
CASES = "GPT-3 175B,DeepSeek-V3 / 2048"
#: issue 38: "Search speed within 10% of before"
TARGET = 1.10


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="interleaved pairs per case (default 3)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pairs.json"
        code = pairs_main([BASE, ".", "--pairs", str(args.pairs), "--cases", CASES, "--json", str(out)])
        if code:
            return code
        report = json.loads(out.read_text())
    table, headline, targets = rows_of(report)
    print(f"\nnow / base ({BASE}), median of {args.pairs} pair ratios of the re-scored CPU seconds:")
    for r in table:
        print(f"  {r['case']:<28} {r['rescored_cpu_s now/base']:.2f} ({r['rescored_cpu_s range']})")
    results_io.record(
        "search_speed_vs_base",
        argv,
        title=f"search CPU time against the search before issue 38's tables ({BASE}), pair by pair",
        headline=headline,
        table=table,
        targets=targets,
        inputs=["costmodel", "search", "benchmarks/search_speed_vs_base.py", "benchmarks/search_speed_pairs.py"],
        enabled=record_results,
    )
    return 0


def rows_of(report: dict) -> tuple[list[dict], dict, list[dict]]:
    """The table, headline and targets of one :mod:`benchmarks.search_speed_pairs` ``--json`` report (old = base)."""
    table, headline = [], {}
    for case in report["cases"]:
        runs = case["runs"]
        row = {"case": case["case"]}
        for key in ("search_cpu_s", "rescored_cpu_s"):
            s = summary(runs["old"], runs["new"], key)
            row[f"{key} base"], row[f"{key} now"] = round(s["old"], 2), round(s["new"], 2)
            row[f"{key} now/base"], row[f"{key} range"] = round(s["ratio"], 2), f"{s['lo']:.2f}-{s['hi']:.2f}"
        row["answer base"] = runs["old"][0]["rescored_answer"]
        row["answer now"] = runs["new"][0]["rescored_answer"]
        table.append(row)
        headline[f"{case['case']} re-scored CPU now/base"] = row["rescored_cpu_s now/base"]
    targets = [
        {
            "name": f"{r['case']}: re-scored CPU s within 10% of before ({BASE})",
            "met": r["rescored_cpu_s now/base"] <= TARGET,
        }
        for r in table
    ]
    return table, headline, targets


if __name__ == "__main__":
    sys.exit(main(record_results=True))
