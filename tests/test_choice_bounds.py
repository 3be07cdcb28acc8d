"""A choice's own bounds are true lower bounds where the network is slow, so that PP sends and DP
exposure weigh: on random small instances with the inter-node link cut 30x, for every choice (every
split scored by the tables) the quick bound, with its interleaved PP send floor
(:meth:`search.bounds.Bounds.p2p_floor_s`), and the quick bound plus the DP exposure bound its span
shares (:meth:`~search.bounds.Bounds.dp_span_lb_s`, presolve's :func:`~search.presolve._span_key`)
stay at or below the choice's exact optimum, and the span's DP bound below each member's own.
"""

import importlib.util
import math
from collections import defaultdict
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from search.bounds import Bounds
from search.exhaustive import all_choices, best_splits
from search.presolve import _span_key
from search.tables import Tables

_spec = importlib.util.spec_from_file_location("_presolve_bounds", Path(__file__).with_name("test_presolve_bounds.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

SEEDS = list(range(40, 52))


def slow_problem(seed: int):
    p = _mod.small_problem(seed)
    il = p.cluster.inter_link
    return replace(p, cluster=replace(p.cluster, inter_link=replace(il, bw_bytes_per_s=il.bw_bytes_per_s / 30)))


@lru_cache(maxsize=None)
def _checked(seed: int) -> tuple:
    """(choices checked, where the interleaved send floor is positive, where the span's DP bound is)."""
    p = slow_problem(seed)
    tables = Tables(p)
    bounds, res = Bounds(tables), tables.res_s
    spans = defaultdict(list)
    for c in all_choices(p):
        spans[_span_key(c)].append(c)
    counts = [0, 0, 0]
    for members in spans.values():
        dp_span = bounds.dp_span_lb_s(members)
        for c in members:
            best = best_splits(tables.stage_table(c), p.model.layers, 1)
            if not best:
                continue
            exact = best[0].objective
            quick = bounds.quick_lb_s(c)
            # presolve compares floor(lb / res) - 4 ticks with the exact objective
            assert math.floor(quick / res) - 4 <= exact, (c, quick / res, exact)
            assert math.floor((quick + dp_span) / res) - 4 <= exact, (c, (quick + dp_span) / res, exact)
            assert dp_span <= bounds.dp_lb_s(c) * (1 + 1e-12), (c, dp_span, bounds.dp_lb_s(c))
            counts[0] += 1
            counts[1] += c.vp > 1 and c.shape.pp > 1 and bounds.p2p_floor_s(c) > 0
            counts[2] += dp_span > 0
    return tuple(counts)


@pytest.mark.parametrize("seed", SEEDS)
def test_quick_and_span_bounds_are_below_every_choice_optimum(seed):
    _checked(seed)  # asserts per choice


def test_the_instances_exercise_the_interleaved_send_floor_and_the_span_bound():
    totals = [sum(x) for x in zip(*(_checked(s) for s in SEEDS))]
    assert totals[0] > 100 and totals[1] > 0 and totals[2] > 0, totals
