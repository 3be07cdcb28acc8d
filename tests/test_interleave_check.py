"""search.interleave_check: an interleaved answer the op graph times beyond the re-score band above its analytic
objective is compared with the best plan without interleaving, and the faster under the op graph answers."""

from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest

from benchmarks.published import load_set
from search.interleave_check import seen, without_interleaving
from search.options import ANSWER_OPTIONS, SolveOptions
from search.problem import Limits, Problem
from search.result import OPTIMAL, SolveResult
from search.solve import solve


@dataclass(frozen=True)
class _Plan:
    config: SimpleNamespace
    objective_s: float
    choice: object = None
    estimate: object = None
    binding: tuple = ()


def _res(vp, objective_s, graph_s, status=OPTIMAL):
    plan = _Plan(config=SimpleNamespace(vp=vp, tp=2, cp=1, ep=8), objective_s=objective_s)
    return SolveResult(status, plans=[plan], objective_s=objective_s, graph_objective_s=graph_s)


def test_seen_only_for_an_interleaved_answer_beyond_the_band():
    opts = replace(ANSWER_OPTIONS, band=0.02)
    assert seen(_res(4, 1.0, 1.10), opts) == pytest.approx(0.10)
    assert seen(_res(4, 1.0, 1.019), opts) is None  # within the engines' disagreement
    assert seen(_res(1, 1.0, 1.50), opts) is None  # the closed form holds without interleaving
    assert seen(_res(4, 1.0, None), opts) is None  # not re-scored
    assert seen(_res(4, 1.0, 1.10), SolveOptions()) is None  # no re-score asked


class _Tables:
    def with_limits(self, problem):
        self.flat = problem
        return self


def _problem(**limits):
    r = next(r for r in load_set("all") if r.row_id == "288")
    return Problem(model=r.model, cluster=r.cluster, workload=r.workload, limits=Limits(**limits))


@pytest.mark.parametrize("flat_graph_s, chosen", [(1.05, True), (1.12, False)])
def test_the_faster_under_the_op_graph_answers(flat_graph_s, chosen, monkeypatch):
    monkeypatch.setattr("search.interleave_check.binding_constraints", lambda p, choice, est: ["against the user's"])
    res, flat = _res(4, 1.0, 1.10), _res(1, 1.06, flat_graph_s)
    t = _Tables()
    out = without_interleaving(_problem(), res, ANSWER_OPTIONS, lambda p, o, tb: flat, t, 0.0, float("inf"))
    assert t.flat.limits.vp_max == 1 and t.flat.limits.fixed == {"tp": 2, "cp": 1, "ep": 8}  # the answer's layers
    assert (out is flat) == chosen
    assert out.best.binding == (("against the user's",) if chosen else ())
    assert out.stats.interleave_check["chosen"] is chosen
    assert (out.status, out.objective_s) == (res.status, res.objective_s)  # the proof is the first search's
    assert out.stats.interleave_check["gap"] == pytest.approx(0.10)


def test_a_pinned_vp_is_not_second_guessed():
    res = _res(4, 1.0, 1.10)
    out = without_interleaving(
        _problem(fixed={"vp": 4}), res, ANSWER_OPTIONS, lambda *a: pytest.fail("searched"), _Tables(), 0.0, 1e18
    )
    assert out is res and out.stats.interleave_check is None


def test_deepseek_v3_on_256_b200_answers_the_plan_the_op_graph_times_faster():
    """Row 288's problem (the recipe's workload): the analytic optimum interleaves (TP2 PP8 VP4 at 8.23 s) but the
    op graph schedules it at 9.80 s; the best plan without interleaving schedules at 9.03 s and answers."""
    r = next(r for r in load_set("all") if r.row_id == "288")
    p = Problem(
        model=r.model,
        cluster=r.cluster,
        workload=r.workload,
        framework=r.fixed.get("framework", "megatron"),
        grad_dtype=r.fixed.get("grad_dtype", "fp32"),
        options=r.plan_options(),
    )
    res = solve(p, replace(ANSWER_OPTIONS, time_limit_s=30))
    check = res.stats.interleave_check
    assert check is not None and check["vp"] > 1 and check["gap"] > ANSWER_OPTIONS.band
    assert check["chosen"] and res.best.config.vp == 1
    assert res.graph_objective_s == check["flat_graph_s"] < check["graph_s"]
    # "OPTIMAL" still means the analytic optimum of the whole space: the interleaved plan's, below the answer's
    assert res.status == OPTIMAL and res.objective_s == check["objective_s"] < res.best.objective_s


def _small():
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload

    return Problem(
        model=load_model("gpt-1.7b"),
        cluster=load_cluster("a100-80g").with_gpus(16),
        workload=Workload(global_batch=64, seq_len=2048),
    )


def test_a_cutoff_below_the_optimum_finds_nothing_and_above_it_the_same_plan():
    p = _small()
    opts = SolveOptions(small_space=-1, explain=False, offload=False, act_offload=False)
    free = solve(p, opts)
    assert free.status == OPTIMAL
    above = solve(p, replace(opts, cutoff_s=free.objective_s * 1.01))
    assert (above.objective_s, above.best.config) == (free.objective_s, free.best.config)
    below = solve(p, replace(opts, cutoff_s=free.objective_s * 0.9))
    assert not below.plans


def test_tables_with_limits_answer_as_fresh_tables():
    """The check's tables share the first search's caches of times and bounds: the flat search answers as if alone."""
    from search.tables import Tables

    p = _small()
    opts = SolveOptions(small_space=-1, explain=False, offload=False, act_offload=False)
    t = Tables(p)
    solve(p, opts, t)  # fills the caches at vp_max 8
    flat = replace(p, limits=replace(p.limits, vp_max=1, fixed={"tp": 2}))
    shared, fresh = solve(flat, opts, t.with_limits(flat)), solve(flat, opts)
    assert shared.best.config.vp == 1 and shared.best.config.tp == 2
    assert (shared.objective_s, shared.best.config) == (fresh.objective_s, fresh.best.config)
