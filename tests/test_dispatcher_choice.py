"""recommend picks the MoE dispatcher (issue 39): the answer's plan is timed under each dispatcher Megatron-Core runs and
the search runs again with a faster one; the report states each one's time."""

from __future__ import annotations

from planner.api import recommend

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
