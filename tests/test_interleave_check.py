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
    plan = _Plan(config=SimpleNamespace(vp=vp), objective_s=objective_s)
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
    assert t.flat.limits.vp_max == 1
    assert (out is flat) == chosen
    assert out.best.binding == (("against the user's",) if chosen else ())
    assert out.stats.interleave_check["chosen"] is chosen
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
