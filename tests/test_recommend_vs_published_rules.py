"""``benchmarks/recommend_vs_published``: a recommendation slower than the published plan is named with the answer
rule that made it so (the memory margin, the memory tie), or counted as slower."""

import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks.recommend_vs_published import answer_rule  # noqa: E402

GIB = 2**30


def _res(rec_peak_gib, margin_kept=True):
    best = SimpleNamespace(estimate=SimpleNamespace(peak_memory_bytes=rec_peak_gib * GIB))
    return SimpleNamespace(best=best, margin_kept=margin_kept, memory_margin=0.091, memory_tie=0.01)


def test_published_plan_inside_the_margin_is_the_margin_rule():
    pub = SimpleNamespace(peak_memory_bytes=176.7 * GIB)
    why = answer_rule(_res(150.0), pub, 184 * GIB, 1.018)
    assert why.startswith("the answer keeps the 9.1% memory margin")


def test_leaner_answer_within_the_tie_is_the_tie_rule():
    pub = SimpleNamespace(peak_memory_bytes=100 * GIB)  # far from the HBM: not a margin case
    assert "memory tie" in answer_rule(_res(90.0), pub, 184 * GIB, 1.005)


def test_otherwise_slower():
    pub = SimpleNamespace(peak_memory_bytes=100 * GIB)
    assert answer_rule(_res(90.0), pub, 184 * GIB, 1.05) == ""  # beyond the tie
    assert answer_rule(_res(110.0), pub, 184 * GIB, 1.005) == ""  # within the tie but not leaner
    inside = SimpleNamespace(peak_memory_bytes=176.7 * GIB)
    assert answer_rule(_res(150.0, margin_kept=False), inside, 184 * GIB, 1.05) == ""  # the answer is at risk too
