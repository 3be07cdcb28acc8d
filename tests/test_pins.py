"""Pins in ``recommend``: every pinned value is honoured (it joins the candidates), or refused at once
with a one-line reason naming the rule ``evaluate`` names; a fully pinned problem is answered as
fast as ``evaluate`` (issue 9 "a pin is honoured or refused at once"; issue 12 items 5 and 6)."""

import time

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.cli import main
from search.candidates import is_pinned, mb_values, recompute_values, tp_values, vp_values
from search.pins import check_pins, joint_reason
from search.problem import Limits, Problem
from search.result import INFEASIBLE, OPTIMAL
from search.solve import SMALL_SPACE, SolveOptions, solve


def problem(model="llama3-8b", cluster="h100-sxm", gpus=64, batch=512, seq=4096, **limits):
    return Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=Limits(**limits),
    )


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


LLAMA = ("--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "64", "--global-batch", "512", "--seq", "4096")


# --------------------------------------------------------------------------- honoured: pins join the candidates
def test_a_pin_beyond_the_search_sizing_joins_the_candidates():
    p = problem("gpt3-175b", gpus=512, batch=1536, seq=2048, fixed={"vp": 12, "mb": 24, "tp": 16})
    assert is_pinned(p, "vp", 12) and not is_pinned(p, "vp", 8)
    assert 12 in vp_values(p, 8, 1536 // 16 // 2)  # above vp_max=8, 96 layers = 8 * 12
    assert 24 in mb_values(p, 16)  # above mb_max=16, 1536 / 16 = 96 = 4 * 24
    assert tp_values(p) == [16]  # across nodes of 8, because pinned


def test_a_pinned_recompute_layer_count_is_a_candidate():
    p = problem(fixed={"recompute": "full", "recompute_layers": 5})  # 5 is not on the ladder
    assert ("full", 5) in recompute_values(p, 8)
    assert ("full", 5) not in recompute_values(p, 4)  # a stage of 4 layers cannot recompute 5


def test_gpt3_vp12_pin_answers_instead_of_no_way_to_divide():
    # issue 9: 96 layers divide pp*vp = 96, so vp=12 is valid and must be searched
    r = solve(
        problem("gpt3-175b", gpus=512, batch=1536, seq=2048, fixed={"tp": 4, "pp": 8, "dp": 16, "vp": 12}),
        SolveOptions(time_limit_s=60),
    )
    assert r.status == OPTIMAL
    c = r.best.config
    assert (c.tp, c.pp, c.dp, c.vp) == (4, 8, 16, 12)


def test_fully_pinned_is_scored_exactly_and_fast():
    fixed = {
        "tp": 4,
        "pp": 8,
        "dp": 128,
        "vp": 12,
        "mb": 1,
        "recompute": "none",
        "zero": 1,
        "sp": True,
        "chunks": 4,
        "bucket_mb": 40,
    }
    p = problem("gpt3-175b", gpus=4096, batch=4096, seq=2048, fixed=fixed)
    start = time.perf_counter()
    r = solve(p)
    assert r.status == OPTIMAL and r.stats.exhaustive and r.stats.space == 1
    assert r.gap == 0.0 and r.bound_s == r.objective_s
    assert r.best.config.vp == 12 and r.best.agreement <= 0.005
    assert time.perf_counter() - start < 30  # seconds on a loaded machine; benchmarks/pinned_recommend.py times it


def test_small_space_equals_the_search():
    fixed = {"tp": 2, "pp": 2, "cp": 1, "vp": 2, "mb": 1, "zero": 1, "recompute": "none"}
    p = problem(gpus=16, batch=64, fixed=fixed)
    r = solve(p)
    assert r.stats.exhaustive and r.stats.space <= SMALL_SPACE
    from search.exhaustive import solve_exhaustive
    from search.tables import Tables

    t = Tables(p)
    e = solve_exhaustive(p, tables=t)
    assert round(r.objective_s / t.res_s) == e.best.objective


def test_recompute_full_with_layers_works_in_recommend():
    # issue 12 item 5: "--recompute full --recompute-layers K" always failed
    r = solve(problem(fixed={"recompute": "full", "recompute_layers": 2}), SolveOptions(time_limit_s=60))
    assert r.status == OPTIMAL
    assert r.best.config.recompute == "full" and r.best.config.recompute_layers == 2


# --------------------------------------------------------------------------- refused, naming the rule
@pytest.mark.parametrize(
    "fixed, message",
    [
        ({"tp": 3}, "tp=3: must be a divisor of heads=32"),
        ({"ep": 2}, "ep=2: must be 1 for a dense model"),
        ({"mb": 3}, "global_batch=512: must be a multiple of dp*mb"),
        ({"recompute_layers": 2}, "recompute_layers=2: must be unset unless recompute='full'"),
        (
            {"recompute": "selective", "recompute_layers": 2},
            "recompute_layers=2: must be unset unless recompute='full'",
        ),
        ({"recompute": "full", "recompute_layers": 40}, "recompute_layers=40: must be at most layers per stage = 32"),
        ({"pp": 4, "vp": 16}, "pp*vp=64: must be at most layers=32"),
        ({"tp": 8, "pp": 8, "dp": 2}, "tp*pp*dp=128: must be a divisor of the GPU count 64"),
        ({"tp": 8, "pp": 2, "dp": 2, "cp": 1}, "tp*pp*dp*cp=32: must be equal to the GPU count 64"),
        ({"pp": 64}, "pp=64: must be at most layers=32"),
        ({"cp": 3}, "cp=3: must be such that seq_len=4096 divides into 2*cp"),
    ],
)
def test_a_pin_no_plan_can_hold_is_refused_naming_the_rule(fixed, message):
    with pytest.raises(SpecError, match=message.replace("*", r"\*").replace("(", r"\(")):
        check_pins(problem(fixed=fixed))


def test_tp16_is_honoured_because_evaluate_accepts_it():
    check_pins(problem(fixed={"tp": 16}))  # 16 is a multiple of kv_heads=8: valid, spans two nodes


def test_pins_that_only_fail_together_are_explained_by_evaluates_rule():
    # 1536 / (128 * 1) = 12 micro-batches, not a multiple of pp=8 with interleaving
    p = problem(
        "gpt3-175b",
        gpus=4096,
        batch=1536,
        seq=2048,
        fixed={"tp": 4, "pp": 8, "dp": 128, "vp": 12, "mb": 1, "recompute": "none", "zero": 1},
    )
    why = joint_reason(p)
    assert why is not None and "multiple of pp=8 with interleaving" in str(why)
    r = solve(p)
    assert r.status == INFEASIBLE and "multiple of pp=8 with interleaving" in r.explanation


def test_pins_refused_the_same_way_in_recommend_and_evaluate(capsys):
    for flags in (["--recompute-layers", "3"], ["--tp", "3", "--gpus", "48"], ["--ep", "2"]):
        code_r, _, err_r = run(capsys, "recommend", *LLAMA, *flags)
        code_e, _, err_e = run(capsys, "evaluate", *LLAMA, *flags)
        assert code_r == code_e == 2
        rule = err_e.strip().split("error: ")[-1]
        assert rule in err_r, (flags, err_r, err_e)
        assert "no way to divide" not in err_r and len(err_r.strip().splitlines()) == 1
