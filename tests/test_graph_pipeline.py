"""Pipeline schedules at stage granularity: bubbles from the schedule, P2P exposure, solvers agree."""

import numpy as np
import pytest

from costmodel.engines.graph import pipeline as P
from costmodel.engines.graph.pipeline import simulate, warmup


def uniform(p, v, f, b):
    return [[f / v] * v for _ in range(p)], [[b / v] * v for _ in range(p)]


def test_single_stage_is_m_times_fwd_plus_bwd():
    r = simulate([[1.0]], [[2.0]], 5, 0.0)
    assert r.makespan_s == 15.0 and r.pp_exposed_s == 0.0


@pytest.mark.parametrize("p,m,v", [(2, 4, 1), (4, 8, 1), (8, 64, 1), (4, 8, 2), (4, 16, 4), (8, 64, 3)])
def test_bubble_matches_narayanan(p, m, v):
    # no communication, equal stages: (m + (p - 1) / v) (t_f + t_b) (Narayanan et al. 2021, section 2.2)
    F, B = uniform(p, v, 1.0, 2.0)
    assert simulate(F, B, m, 0.0).makespan_s == pytest.approx((m + (p - 1) / v) * 3.0)


def test_warmup_counts():
    assert [warmup(4, 2, 1, s) for s in range(4)] == [2, 2, 1, 0]  # capped at m
    assert warmup(4, 8, 2, 0) == 2 * 3 + 4


def test_1f1b_blocking_p2p_is_exposed_interleaved_async_hides_it():
    F, B = uniform(4, 1, 1.0, 2.0)
    sync = simulate(F, B, 16, 0.1)
    assert sync.sync and sync.pp_exposed_s > 16 * 0.1  # at least one transfer per micro-batch
    F2, B2 = uniform(4, 2, 1.0, 2.0)
    asyn = simulate(F2, B2, 16, 0.1)
    # asynchronous: only the fill and drain hops through all p * v virtual stages stay exposed
    assert not asyn.sync and asyn.pp_exposed_s == pytest.approx(2 * (4 * 2 - 1) * 0.1)
    r = {k: 1 - x.pp_exposed_s / (x.transfers(1) * 0.1) for k, x in (("sync", sync), ("async", asyn))}
    assert r["async"] > 0.85 and r["sync"] < 0.6


def test_slow_last_stage_sets_the_pace():
    F, B = uniform(4, 1, 1.0, 2.0)
    F[3][0], B[3][0] = 1.5, 3.0  # the LM head stage
    r = simulate(F, B, 32, 0.0)
    assert r.makespan_s >= 32 * 4.5
    assert r.last_backward_end_s[3] < r.last_backward_end_s[0]  # stage 0 drains last


def test_loop_and_numpy_solvers_agree(monkeypatch):
    rng = np.random.default_rng(0)
    for p, m, v in [(5, 10, 1), (6, 12, 2), (3, 9, 3), (13, 26, 2), (16, 20, 1)]:
        F = rng.uniform(0.5, 2.0, (p, v)).tolist()
        B = rng.uniform(1.0, 4.0, (p, v)).tolist()
        out = {}
        for name, lim in (("loop", 10**9), ("numpy", 1)):
            monkeypatch.setattr(P, "NUMPY_MIN_STAGES", lim)
            r = simulate(F, B, m, 0.05)
            out[name] = (r.makespan_s, r.pp_exposed_s, r.end)
        assert out["loop"][0] == pytest.approx(out["numpy"][0], rel=1e-12)
        assert out["loop"][1] == pytest.approx(out["numpy"][1], rel=1e-9)
        np.testing.assert_allclose(out["loop"][2], out["numpy"][2], rtol=1e-12)


def test_critical_path_runs_from_first_to_last_op():
    F, B = uniform(4, 1, 1.0, 2.0)
    r = simulate(F, B, 8, 0.0)
    assert r.critical[0] == (0, 0) and r.end[r.critical[-1]] == r.makespan_s


def test_transfers_per_stage():
    F, B = uniform(4, 2, 1.0, 2.0)
    r = simulate(F, B, 8, 0.01)
    assert r.sends(1) == 2 * 8 * 2 and r.sends(0) == 2 * 8 * 2 - 8 and r.transfers(1) == 2 * r.sends(1)


def test_interleaving_needs_m_multiple_of_p():
    F, B = uniform(4, 2, 1.0, 2.0)
    with pytest.raises(ValueError, match="multiple of p"):
        simulate(F, B, 6, 0.0)
