"""The EP all-to-all overlap (``ep_overlap``) in the search's tables: a layer's all-to-alls are paired in the share of
the passes the plan's pipeline pairs (``paired_fraction(m, pp, vp)``), so the tables time each choice's layers at its
own ``pp``, ``vp`` and micro-batch count (``Tables.layer(..., exact=True)``) and equal ``evaluate``; the bounds read
a floor shared by every pipeline (``Tables.layer``), which stays below, and so do the group bounds."""

import math
import random

import pytest

from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.bounds import Bounds
from search.candidates import Split, splits
from search.exhaustive import all_choices, best_splits
from search.group_expander import Expander, _groups
from search.problem import Limits, Problem
from search.tables import Tables


def problem(gpus=32, batch=64, **limits):
    return Problem(
        model=load_model("qwen3-30b-a3b"),
        cluster=load_cluster("h100-sxm").with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=4096),
        limits=Limits(**limits),
        options=(("ep_overlap", True),),
    )


def test_table_step_time_equals_evaluate_under_the_overlap():
    p = problem()
    tables, rng = Tables(p), random.Random(5)
    choices = [c for c in all_choices(p) if c.config_options().get("ep_overlap")]
    piped = 0
    for c in rng.sample(choices, 30):
        options = list(splits(p.model.layers, c.shape.pp, c.vp, 1))
        if not options:
            continue
        sp = Split(*rng.choice(options))
        cfg = c.config(True, sp.layers_per_stage(c.shape.pp))
        assert cfg.ep_overlap
        est = evaluate(p.model, p.cluster, p.workload, cfg, engine="analytic")
        assert tables.stage_table(c).step_s(sp) == pytest.approx(est.step_time_s, rel=1e-9), (c, sp)
        piped += c.shape.pp > 1
    assert piped  # pipelines pair a smaller share than one stage does: the case the tables got wrong


def test_the_bounds_layer_is_a_floor_of_every_pipeline():
    p = problem()
    tables, checked = Tables(p), 0
    for c in all_choices(p):
        if not c.config_options().get("ep_overlap"):
            continue
        floor, exact = tables.layer(c, True), tables.layer(c, True, exact=True)
        assert floor[0] <= exact[0] * (1 + 1e-12) and floor[1] <= exact[1] * (1 + 1e-12), c
        assert floor[2:] == pytest.approx(exact[2:], rel=1e-12)  # compute, recompute and bytes: no pairing
        checked += 1
    assert checked


def test_group_bounds_stay_below_the_group_optimum_under_the_overlap():
    p = problem(gpus=16, batch=32, fixed={"tp": 1}, mb_max=2, vp_max=2)
    tables = Tables(p)
    optima: dict = {}
    for c in all_choices(p):
        key = (c.shape, c.mb, c.vp)
        best = best_splits(tables.stage_table(c), p.model.layers, 1)
        optima[key] = min(optima.get(key, math.inf), best[0].objective if best else math.inf)
    ex, bounds, res, checked = Expander(p, tables, {}), Bounds(tables.relaxed()), tables.res_s, 0
    for q in _groups(p):
        exact = optima.get(q, math.inf)
        for lb in (ex.group_lb_s(bounds, *q, level=lv) for lv in (0, 1)):
            if lb is None:  # refused by the memory screen: nothing of the group fits
                assert exact == math.inf, q
                continue
            assert math.floor(lb / res) - 4 <= exact, (q, lb / res, exact)
            checked += 1
    assert checked
