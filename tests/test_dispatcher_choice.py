"""recommend picks the MoE dispatcher (issue 39): the answer's plan is timed under each dispatcher Megatron-Core runs and
the search runs again with a faster one; the report states each one's time."""

from __future__ import annotations

from dataclasses import replace

from planner.api import recommend
from planner.moe_report import dispatcher_lines

ARGS = dict(gpus=16, global_batch=64, seq=4096, tp=1, pp=1, ep=16, cp=1, time_limit_s=60)


def test_recommend_times_every_dispatcher_and_answers_with_the_fastest():
    r = recommend("qwen3-30b-a3b", "h100-sxm", **ARGS)
    d = r.dispatchers
    assert set(d["step_time_s"]) == {"alltoall", "deepep", "hybridep"}
    assert d["chosen"] == r.best.config.ep_dispatcher
    fastest = min(d["step_time_s"], key=d["step_time_s"].get)
    if fastest != "alltoall":  # EP 16 spans two nodes: a hierarchical dispatcher sends fewer copies over the NIC
        assert d["searched"] == "yes"
        assert r.best.reported.step_time_s <= d["step_time_s"]["alltoall"]


def test_a_stated_dispatcher_is_kept():
    r = recommend("qwen3-30b-a3b", "h100-sxm", plan_options={"ep_dispatcher": "alltoall"}, **ARGS)
    assert r.dispatchers is None and r.best.config.ep_dispatcher == "alltoall"


def test_a_re_search_the_deadline_stopped_is_not_called_proof(monkeypatch):
    """Qwen3-235B-A22B / 256 H100 at the default time limit: the HybridEP re-search ran out of time (FEASIBLE, a
    worse plan) and the output said "no faster answer"; a re-search that did not prove its answer says so."""
    import search.solve
    from search.result import FEASIBLE

    real, calls = search.solve.solve, []

    def slower(e):  # a worse plan than the first answer's
        return None if e is None else replace(e, step_time_s=1e9)

    def cut(p, options=search.solve.SolveOptions(), tables=None):
        r = real(p, options, tables)
        if tables is None:
            calls.append(p)
            if len(calls) == 2:  # the dispatcher's re-search: as the deadline leaves it
                r.status = FEASIBLE
                r.plans = [
                    replace(pl, estimate=slower(pl.estimate), graph_estimate=slower(pl.graph_estimate))
                    for pl in r.plans
                ]
        return r

    monkeypatch.setattr(search.solve, "solve", cut)
    r = recommend("qwen3-30b-a3b", "h100-sxm", **ARGS)
    d = r.dispatchers
    if len(calls) < 2:  # no dispatcher was faster on the answer's plan: nothing searched again
        assert d["searched"] == "no"
        return
    assert d["searched"] == "cut short" and d["chosen"] == "alltoall"
    (line,) = dispatcher_lines(r)
    assert "stopped that search before it proved its answer" in line and "no faster answer" not in line


def test_the_dispatcher_line_says_what_each_search_outcome_means():
    class R:
        dispatchers = {"chosen": "alltoall", "step_time_s": {"alltoall": 8.285, "hybridep": 8.241}, "searched": "yes"}

    assert dispatcher_lines(R)[0].endswith("searched again with hybridep: no faster answer); --ep-dispatcher pins one")
    R.dispatchers = dict(R.dispatchers, searched="cut short")
    (line,) = dispatcher_lines(R)
    assert "the time limit stopped that search before it proved its answer and it found none faster" in line


def test_the_recipes_dispatcher_is_searched_first_on_a_rack():
    from costmodel.frameworks.rules import recipe_dispatcher
    from costmodel.spec.presets import load_cluster

    rack, hgx = load_cluster("gb200-nvl72").with_gpus(144), load_cluster("b200").with_gpus(16)
    assert recipe_dispatcher("megatron", rack) == "hybridep" and recipe_dispatcher("megatron", hgx) == "alltoall"
    assert recipe_dispatcher("fsdp2", rack) == "alltoall"
    # on the rack the first search runs HybridEP; the others are timed on its answer and searched only when faster
    r = recommend("qwen3-30b-a3b", "gb200-nvl72", **{**ARGS, "gpus": 144, "ep": 8, "global_batch": 144})
    d = r.dispatchers
    assert set(d["step_time_s"]) == {"alltoall", "deepep", "hybridep"}
    fastest = min(d["step_time_s"], key=d["step_time_s"].get)
    first = d["step_time_s"]["hybridep"]
    assert d["searched"] == ("yes" if d["step_time_s"][fastest] < (1 - 1e-3) * first else "no")
    assert r.best.reported.step_time_s <= first * (1 + 1e-9)
