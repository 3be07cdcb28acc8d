"""The MoE diagnostic (benchmarks/moe_parts.py, RESULTS.md section 34): the forced-balance / learned-router
pairs it finds and the busiest-rank load it reads off them. The round trip asserts the bisection recovers the
model's own ``moe_load_cv`` when the "measured" learned row is the model's own prediction of it, so a broken
pair match, bisection or load formula fails."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import moe_parts as mp  # noqa: E402
from benchmarks.published import load_set, predict  # noqa: E402


@pytest.fixture(scope="module")
def moe_rows():
    return [r for r in load_set("all") if "moe_ep" in r.regimes and not r.skip and r.measured_s]


def test_pairs_are_the_modelzoo_long_context_rows(moe_rows):
    pairs = mp.balance_pairs(moe_rows)
    assert [(f.row_id, l.row_id) for f, l in pairs] == [("208", "209"), ("210", "211"), ("212", "213"), ("214", "215")]
    for forced, learned in pairs:
        assert forced.model.moe_load_cv == 0 and learned.model.moe_load_cv > 0
        assert forced.fixed == learned.fixed and forced.workload == learned.workload


def test_implied_load_round_trip(moe_rows):
    forced, learned = mp.balance_pairs(moe_rows)[0]
    ef, _ = predict(forced)
    el, _ = predict(learned)
    # the learned row "measured" at exactly what the model predicts for it: the bisection must give back its cv
    cv, load = mp.implied_rank_load(forced, forced.measured_s * el.step_time_s / ef.step_time_s, "graph")
    assert cv == pytest.approx(learned.model.moe_load_cv, abs=0.01)
    assert 1.05 < load < 1.2  # the model's own busiest-rank load at cv 0.3, EP 8, 16 experts per rank


def test_shares_sum_to_at_most_one(moe_rows):
    row = moe_rows[0]
    est, _ = predict(row)
    sh, m_exp = mp.moe_layer_shares(row, est)
    assert 0.2 < sh["experts"] < 0.8 and sum(sh.values()) <= 1.0 + 1e-9
    assert m_exp > 100
