"""The one step composition (costmodel/compose/step.py), by hand-computed cases, on scalars and arrays."""

import numpy as np
import pytest

from costmodel.compose.step import bucketed_s, compose, dp_buckets, dp_exposure, multiplier, step_time


def test_multiplier_is_microbatches_plus_interleaved_bubble():
    assert multiplier(8, 4, 1) == 11  # 8 + 3
    assert multiplier(8, 4, 3) == pytest.approx(9.0)  # 8 + 3/3


def test_step_time_is_fill_plus_slowest_stage_pace_plus_worst_tails():
    # (m - 1/v) max + sum / v = 7 * 3.0 + (2.0 + 3.0) = 26; + max(0.5, 0.1) + max(0.2, 0.3) = 26.8
    assert step_time(np.array([2.0, 3.0]), np.array([0.5, 0.1]), np.array([0.2, 0.3]), m=8, p=2, v=1) == pytest.approx(
        26.8
    )
    # equal stages: M * t with M = m + (p - 1) / v, the classic bubble
    assert step_time(np.full(4, 2.0), np.zeros(4), np.zeros(4), m=8, p=4, v=3) == pytest.approx(multiplier(8, 4, 3) * 2)
    # weights: one entry standing for 2 middle stages is the same as writing them out
    assert step_time(
        np.array([1.0, 2.0, 1.5]), np.zeros(3), np.zeros(3), m=8, p=4, v=2, weights=[1, 2, 1]
    ) == pytest.approx(step_time(np.array([1.0, 2.0, 2.0, 1.5]), np.zeros(4), np.zeros(4), m=8, p=4, v=2))
    # arrays over a leading axis: one step time per row
    out = step_time(np.array([[1.0, 2.0], [2.0, 2.0]]), np.zeros((2, 2)), np.zeros((2, 2)), m=1, p=2, v=1)
    assert out.tolist() == [3.0, 4.0]


def test_pipeline_term_is_the_simulated_makespan_of_unequal_stages():
    """The closed form against the event-driven 1F1B / interleaved schedule of the op-graph engine:
    exact when the slowest stage is last (or all are equal), never below the simulation."""
    from costmodel.engines.graph.pipeline import simulate
    from costmodel.compose.step import pipeline_s

    rng = np.random.default_rng(3)
    over, old_over = [], []
    for _ in range(30):  # stage times 3x apart at random: far more uneven than real splits
        p, v = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2, 4]))
        m = p * int(rng.choice([1, 2, 4]))
        t = rng.uniform(0.5, 1.5, p)
        sim = simulate([[x / 3 / v] * v for x in t], [[2 * x / 3 / v] * v for x in t], m, 0.0).makespan_s
        closed = pipeline_s(t.max(), t.sum(), m, v)
        assert closed >= sim * (1 - 1e-9)
        over.append(closed / sim - 1)
        old_over.append(multiplier(m, p, v) * t.max() / sim - 1)
    # measured: median 1.8%, max 14% (M * max t_s: median 6.8%, max 46%)
    assert np.median(over) < 0.03 and max(over) < 0.15 and max(over) < max(old_over) / 2
    for _ in range(10):
        p, v = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2, 4]))
        m = p * int(rng.choice([1, 2, 4]))
        t = rng.uniform(0.5, 1.5, p)
        t[-1] = t.max() * 1.2  # the LM-head stage slowest: exact
        sim = simulate([[x / 3 / v] * v for x in t], [[2 * x / 3 / v] * v for x in t], m, 0.0).makespan_s
        assert pipeline_s(t.max(), t.sum(), m, v) == pytest.approx(sim)


def test_buckets_and_their_latency():
    assert dp_buckets(100e6, 25e6) == 4 and dp_buckets(100e6, 0) == 0
    assert dp_buckets(np.array([10e6, 100e6]), 25e6).tolist() == [1.0, 4.0]
    assert bucketed_s(1.0, 0.01, 4) == pytest.approx(1.03)  # 3 extra buckets pay their latency


def test_dp_exposure_1f1b_hand_computed():
    # t_grad 1 s in 4 buckets behind a 2 s backward: only the last bucket is exposed, 1/4 s
    ex, zx, tg, tp = dp_exposure(1.0, 0.0, 0.0, 0.0, 4, 2.0, 1.0, 0)
    assert (ex, zx, tg) == (0.25, 0.0, 1.0)
    # 3 s of gradients behind 2 s: 1 s beyond the window plus the last of 4 pieces of the overlap
    assert dp_exposure(3.0, 0.0, 0.0, 0.0, 4, 2.0, 1.0, 0)[0] == pytest.approx(1.0 + 2.0 / 4)
    # stage 1 finishes its last backward one backward (2 s) earlier: a head start that hides it
    assert dp_exposure(3.0, 0.0, 0.0, 0.0, 4, 2.0, 1.0, 1)[0] == 0.0
    # no buckets: one reduction after backward, all of it exposed (and the parameter gather too)
    assert dp_exposure(3.0, 0.5, 0.0, 0.0, 0, 2.0, 1.0, 0)[:2] == (3.0, 0.5)


def test_dp_exposure_interleaved_chunks_hand_computed():
    # v=2, p=4: chunk backward b_c = 1 s. Chunk 1's gradients are ready 4 b_c before the end,
    # chunk 0's at the end. 2 s of gradients, 2 buckets (one per chunk):
    #   c=0: exposed(1 s, 1 s, 1) - 0 = 1.0 ; c=1: exposed(2 s, 1 s, 1) - 4 = -2.0  -> 1.0
    ex = dp_exposure(2.0, 0.0, 0.0, 0.0, 2, 2.0, 1.0, 0, p=4, v=2, layers=8)[0]
    assert ex == pytest.approx(1.0)


def test_param_gather_lateness_hand_computed():
    # 1F1B, stage 0, 4 layers, forward 1 s (0.25 s a layer), gather 2 s (0.5 s a layer):
    # layer j is gathered at 0.5 (j+1), needed at 0.25 j -> late 0.5 (j+1) - 0.25 j, max at j=3: 1.25
    zx = dp_exposure(0.0, 2.0, 0.0, 0.0, 1, 1.0, 1.0, 0, p=2, v=1, layers=4)[1]
    assert zx == pytest.approx(1.25)
    # stage 1 starts its first forward one forward (1 s) later: 0.25 late
    assert dp_exposure(0.0, 2.0, 0.0, 0.0, 1, 1.0, 1.0, 1, p=2, v=1, layers=4)[1] == pytest.approx(0.25)


def test_dp_exposure_arrays_equal_scalars():
    n = np.arange(1, 9)
    arr = dp_exposure(1.5 * n / 8, 0.7 * n / 8, 1e-3, 1e-3, 4, 0.2 * n, 0.1 * n, 1, p=4, v=2, layers=n)
    for i, k in enumerate(n):
        sc = dp_exposure(1.5 * k / 8, 0.7 * k / 8, 1e-3, 1e-3, 4, 0.2 * k, 0.1 * k, 1, p=4, v=2, layers=k)
        assert arr[0][i] == pytest.approx(sc[0]) and arr[1][i] == pytest.approx(sc[1])


def test_compose_picks_slowest_stage_and_worst_tail():
    comp = compose(
        t_mb=[1.0, 1.5],
        fwd=[0.3, 0.5],
        backward=[0.6, 1.0],
        t_grad=[0.0, 0.0],
        t_param=[0.0, 0.0],
        lat_grad=[0, 0],
        lat_param=[0, 0],
        buckets=[1, 1],
        pieces=[None, None],
        optimizer=[0.1, 0.2],
        stages=[0, 1],
        layers=[4, 4],
        m=4,
        p=2,
        v=1,
    )
    # (4 - 1) * 1.5 + (1.0 + 1.5) = 7.0; the bubble is what exceeds m * 1.5 = 6.0
    assert comp.slow_stage == 1 and comp.pipeline_s == pytest.approx(7.0)
    assert comp.step_s == pytest.approx(7.0 + 0.2) and comp.bubble_s == pytest.approx(1.0)
