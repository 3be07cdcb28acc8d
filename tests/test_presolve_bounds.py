"""Presolve's group bounds are true lower bounds: on random small instances each of a group's two
levels (pipeline; memory-screened pipeline) is at most the exact
optimum of its group (every choice of the group, every split, scored by the tables), and a group the
memory screen refuses holds no plan that fits. Instances include interleaves that do not divide the
layers (a layout places them: the stage unit is 1), where the pipeline totals are shared by every
such interleave.
"""

import importlib.util
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from search.exhaustive import all_choices, best_splits
from search.group_expander import Expander, _groups
from search.presolve import _seeds, presolve
from search.bounds import Bounds
from search.tables import Tables

_spec = importlib.util.spec_from_file_location("_cpsat_instances", Path(__file__).with_name("test_search_cpsat.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

SEEDS = list(range(40, 46))


def small_problem(seed: int):
    """tests/test_search_cpsat.py's random small instance with 5 or 7 layers and interleaves up to 4
    (VP 2 and 4 then do not divide the layers: a rank may hold any count)."""
    rng = random.Random(seed)
    p = _mod.small_problem(seed)
    model = replace(p.model, name=f"{p.model.name}-l", layers=rng.choice([5, 7]))
    return replace(p, model=model, limits=replace(p.limits, vp_max=4))


def _group_optima(p, tables):
    """(shape, mb, vp) -> exact optimum in ticks (inf: no plan of the group fits)."""
    out: dict = {}
    for c in all_choices(p):
        key = (c.shape, c.mb, c.vp)
        best = best_splits(tables.stage_table(c), p.model.layers, 1)
        out[key] = min(out.get(key, math.inf), best[0].objective if best else math.inf)
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_group_bound_level_is_below_the_group_optimum(seed):
    p = small_problem(seed)
    tables = Tables(p)
    optima = _group_optima(p, tables)
    ex = Expander(p, tables, {})
    bounds = Bounds(tables.relaxed())
    res = tables.res_s
    checked = 0
    for q in _groups(p):
        exact = optima.get(q, math.inf)
        levels = [ex.group_lb_s(bounds, *q, level=lv) for lv in (0, 1)]
        if levels[1] is None:  # refused by the memory screen: nothing of the group fits
            assert exact == math.inf, (q, exact)
            continue
        for lv, lb in enumerate(levels):
            # presolve compares floor(lb / res) - 4 ticks with the exact objective (to_ticks)
            assert math.floor(lb / res) - 4 <= exact, (q, lv, lb / res, exact)
        checked += 1
    assert checked or all(v == math.inf for v in optima.values())


def test_instances_include_interleaves_that_do_not_divide_the_layers():
    """The instances above reach groups whose vp does not divide the layers (layouts)."""
    hits = 0
    for seed in SEEDS:
        p = small_problem(seed)
        hits += sum(1 for s, mb, vp in _groups(p) if vp > 1 and p.model.layers % vp)
    assert hits > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_a_presolve_at_a_smaller_cap_seeded_by_a_larger_one_finds_the_same_optimum(seed):
    """The margin solve (search.solve._keep_margin) starts its groups from the bounds the first presolve
    refined at the larger cap (search.presolve._seeds): at a smaller cap its optimum is that of a presolve
    with fresh tables, and a presolve at a larger cap than the record's reads none of it."""
    p = small_problem(seed)
    tables = Tables(p)
    presolve(p, tables)
    cap, record = tables.shared["presolve.refined"]
    assert cap == p.hbm_cap_bytes
    for cut in (0.05, 0.2, 0.5):
        lean = replace(p, limits=replace(p.limits, headroom_bytes=p.limits.headroom_bytes + cut * p.hbm_cap_bytes))
        seeded, fresh = presolve(lean, tables.with_problem(lean)), presolve(lean, Tables(lean))
        best = [min((pre.lower_ticks[c] for c in pre.choices), default=None) for pre in (seeded, fresh)]
        assert best[0] == best[1], (cut, best)
        assert [sc.objective for sc in seeded.incumbents[:1]] == [sc.objective for sc in fresh.incumbents[:1]]
    assert record is tables.shared["presolve.refined"][1]  # the first (largest-cap) record stays
    lean_tables = Tables(lean)
    presolve(lean, lean_tables)
    assert lean_tables.shared["presolve.refined"][1]
    assert _seeds(lean_tables.with_problem(p))[0] == {}  # recorded at a smaller cap: not read at a larger one


def _rack_problem():
    """A mid-size MoE problem with interleaves, uneven stages and several micro-batch sizes per shape."""
    from search.problem import Problem
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload

    return Problem(
        model=load_model("deepseek-v3"),
        cluster=load_cluster("gb200-nvl72").with_gpus(576),
        workload=Workload(global_batch=1152, seq_len=4096, dtype="fp8"),
    )


@pytest.mark.parametrize("which", [*SEEDS, "deepseek-v3"])
def test_the_shape_wise_level_0_bound_equals_the_scalar_one(which):
    """Expander.group_lb_s takes every level-0 bound of a shape at once (Bounds.pipeline_lbs_s, numpy over the
    shape's micro-batch sizes, interleaves and sp); each equals, bit for bit, the scalar bound of its group
    (Expander._pipeline_lb_s, Bounds.pipeline_lb_s one choice at a time) computed on tables of its own."""
    p = _rack_problem() if which == "deepseek-v3" else small_problem(which)
    vec_t, scalar_t = Tables(p), Tables(p)
    vec, scalar = Expander(p, vec_t, {}), Expander(p, scalar_t, {})
    vec_b, scalar_b = Bounds(vec_t.relaxed()), Bounds(scalar_t.relaxed())
    groups = list(_groups(p))
    assert groups and (which != "deepseek-v3" or any(vp > 1 for _, _, vp in groups))
    got = [vec.group_lb_s(vec_b, *q) for q in groups]
    want = [scalar._pipeline_lb_s(scalar_b, *q) for q in groups]
    assert got == want
    assert all(type(x) is float for x in got if x is not None)


MEMOS = ("bounds.quick", "presolve.subgroups")  # what the margin solve's presolve takes from the first one's


class _Unkept(dict):
    """A cache that keeps nothing: every look-up computes anew."""

    def __setitem__(self, key, value):
        pass


def _presolved(pre) -> tuple:
    return (
        pre.choices,
        pre.lower_ticks,
        [(sc.objective, sc.choice, sc.split) for sc in pre.incumbents],
        pre.near,
        pre.counts,
        pre.timed_out,
    )


@pytest.mark.parametrize("which", [*SEEDS, "deepseek-v3"])
def test_the_margin_presolve_reading_the_first_ones_choices_and_quick_bounds_answers_the_same(which, monkeypatch):
    """The margin solve's presolve (search.solve._keep_margin, on Tables.with_problem) reads the choices each group
    expands to (Expander.choices, before its bound test) and their quick bounds (Bounds.quick_lb_s) from the first
    presolve's caches: everything each presolve answers (kept and near choices, bounds, incumbents, counts) equals
    that of a presolve that keeps neither (every choice listed and every quick bound computed anew), at every cap,
    and on a second run from the caches."""
    p = _rack_problem() if which == "deepseek-v3" else small_problem(which)

    def unkept(lean, tables):  # the presolve without the two caches
        with monkeypatch.context() as m:
            m.setitem(tables.shared, "bounds.quick", _Unkept())
            m.setitem(tables.shared, "presolve.subgroups", _Unkept())
            return _presolved(presolve(lean, tables, slack=0.02))

    tables = Tables(p)
    first = presolve(p, tables, slack=0.02)
    assert all(tables.shared[k] for k in MEMOS)
    assert _presolved(first) == unkept(p, Tables(p))
    for cut in (0.05, 0.2):
        lean = replace(p, limits=replace(p.limits, headroom_bytes=p.limits.headroom_bytes + cut * p.hbm_cap_bytes))
        plain = tables.with_problem(lean)
        plain.shared = {k: v for k, v in tables.shared.items() if k not in MEMOS}
        want = unkept(lean, plain)
        assert _presolved(presolve(lean, tables.with_problem(lean), slack=0.02)) == want
        assert _presolved(presolve(lean, tables.with_problem(lean), slack=0.02)) == want
        # the other way round: the lean problem's caches read by the larger cap's presolve (a lower threshold,
        # so sub-groups the lean presolve expanded are pruned whole)
        lean_tables = Tables(lean)
        presolve(lean, lean_tables, slack=0.02)
        assert _presolved(presolve(p, lean_tables.with_problem(p), slack=0.02)) == _presolved(first)
