"""Activation CPU offload searched (search.act_offload_choice): a stated layer count as a plan option, charged by
the tables as evaluate charges it, and the offload the search chooses where nothing fits without it."""

import json
import random
from dataclasses import replace

import pytest

from costmodel.physics.mechanics import act_offload
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.act_offload_choice import fewest_layers, offerable, with_offload
from search.bounds import Bounds
from search.candidates import Split, splits
from search.exhaustive import all_choices
from search.problem import FEWEST_FITTING, Limits, Problem
from search.solve import SolveOptions, solve
from search.tables import Tables
from planner import cli

M, CL = load_model("llama3.1-8b"), load_cluster("h100-sxm").with_gpus(8)
W = Workload(global_batch=64, seq_len=16384)
#: nothing fits at pp = 1 without recompute on one GPU's worth of sequence (tp = cp = 1) without offload
TIGHT = Limits(fixed={"tp": 1, "cp": 1, "pp": 1, "recompute": "none"})


def stated(n: int, limits: Limits = TIGHT) -> Problem:
    return Problem(model=M, cluster=CL, workload=W, limits=limits, options=(("activation_offload_layers", n),))


def test_stated_layers_pin_pp_1_without_recompute():
    p = stated(8, Limits())
    assert p.limits.fixed["pp"] == 1 and p.limits.fixed["recompute"] == "none"
    for limits, field in (
        (Limits(fixed={"pp": 2}), "pp"),
        (Limits(fixed={"recompute": "full"}), "recompute"),
        (Limits(exclude={"pp": (1,)}), "pp"),
    ):
        with pytest.raises(SpecError) as e:
            stated(8, limits)
        assert e.value.field == field and "activation_offload_layers=8" in str(e.value)
    with pytest.raises(SpecError, match="activation_offload_layers"):
        stated(M.layers)
    with pytest.raises(SpecError, match="activation_offload_layers"):
        Problem(model=M, cluster=CL, workload=W, framework="fsdp2", options=(("activation_offload_layers", 4),))


@pytest.mark.parametrize("n", [1, 11, 24, 31])
def test_tables_charge_the_offload_as_evaluate(n):
    """The tables' step and memory of every choice at the one count n = L equal evaluate's and stage_memory's,
    and the memory bound stays below the memory (the offload's freed bytes taken off both)."""
    p = stated(n, Limits(fixed={"cp": 1}))
    t = Tables(p)
    b = Bounds(t)
    choices = list(all_choices(p))
    random.Random(n).shuffle(choices)
    for ch in choices[:12]:
        st = t.stage_table(ch)
        cfg = ch.config(p.limits.flash_attention, None, p.limits.fused_elementwise)
        assert cfg.activation_offload_layers == n
        est = evaluate(M, CL, W, cfg, engine="analytic")
        split = Split(*next(iter(splits(M.layers, 1, 1))))
        assert st.step_s(split) == pytest.approx(est.step_time_s, rel=1e-9)
        mem = memory_per_stage(M, W, cfg)[0].total_bytes
        assert st.mem_bytes["only"][M.layers] == pytest.approx(mem, rel=1e-9)
        assert b.mem_lb(ch, "only")[M.layers] <= mem * (1 + 1e-9)


def test_stated_search_answers_what_evaluate_prices():
    r = solve(stated(11), SolveOptions(rescore=True))
    assert r.status == "OPTIMAL" and r.best.config.activation_offload_layers == 11
    est = evaluate(M, CL, W, r.best.config, engine="analytic")
    assert r.objective_s == pytest.approx(est.step_time_s, rel=1e-6) and est.fits
    assert r.graph_objective_s == pytest.approx(evaluate(M, CL, W, r.best.config).step_time_s, rel=1e-12)
    assert est.breakdown["act_offload_exposed_s"] >= 0


def test_stall_never_falls_as_more_layers_are_offloaded():
    """The property the enumeration's stop rests on (search.act_offload_choice docstring)."""
    rng = random.Random(0)
    for _ in range(200):
        layers = rng.randint(2, 40)
        f, bwd, copy = rng.uniform(1e-4, 1e-2), rng.uniform(1e-4, 2e-2), rng.uniform(1e-5, 3e-2)
        times = [act_offload.schedule_s(layers, k, f, bwd, copy) for k in range(layers)]
        assert times[0] == pytest.approx(layers * (f + bwd))
        assert all(b >= a - 1e-12 for a, b in zip(times, times[1:])), (layers, f, bwd, copy)


def test_fewest_layers_is_the_fewest_that_fit():
    """search.act_offload_choice.fewest_layers (stage_memory) and the tables' count (their memory arithmetic) are
    the fewest layers that make a plan fit, and the tables charge the plan at that count as evaluate does."""
    p = Problem(model=M, cluster=CL, workload=W, limits=TIGHT)
    q = with_offload(p, FEWEST_FITTING)
    t = Tables(q)
    for plan in solve(q, SolveOptions(top_k=6, offload=False, act_offload=False)).plans:
        assert plan.config.activation_offload_layers == 0  # the count is the tables' (each plan's own)
        fit = [
            max(m.total_bytes for m in memory_per_stage(M, W, replace(plan.config, activation_offload_layers=k)))
            <= p.hbm_cap_bytes
            for k in range(M.layers)
        ]
        n = fewest_layers(p, plan.config)
        assert not fit[0] and n == fit.index(True)
        assert t.fewest_layers(plan.choice, memory_per_stage(M, W, plan.config)[0].total_bytes) == n
        est = evaluate(M, CL, W, replace(plan.config, activation_offload_layers=n), engine="analytic")
        assert plan.objective_s == pytest.approx(est.step_time_s, rel=1e-6)


@pytest.mark.parametrize("limits", [TIGHT, Limits(fixed={"tp": 1, "cp": 1, "pp": 1})], ids=["none-fits", "recompute"])
def test_chosen_equals_the_best_over_every_layer_count(limits):
    """Where nothing fits without offload, and where the answer without it recomputes at pp = 1 (offload buys the
    recompute back: 18.3 -> 16.5 s here), the answer is the best over one search per stated layer count."""
    p = Problem(model=M, cluster=CL, workload=W, limits=limits)
    assert offerable(p)
    without = solve(p, SolveOptions(act_offload=False, offload=False))
    r = solve(p, SolveOptions(offload=False))
    info = r.stats.activation_offload
    assert r.status == "OPTIMAL" and info["chosen"] == r.best.config.activation_offload_layers > 0
    brute = {n: solve(stated(n), SolveOptions(act_offload=False, offload=False)) for n in range(1, M.layers)}
    best = min(x.objective_s for x in brute.values() if x.plans)
    assert r.objective_s == pytest.approx(best, rel=1e-9) and info["best_s"] == pytest.approx(best, rel=1e-6)
    assert without.status == "INFEASIBLE" if limits is TIGHT else without.objective_s > best
    assert "pp=1 fixed by the user" in r.best.binding  # said against the user's problem, not the re-search's


def test_kept_where_offload_is_slower():
    """A pp = 1 answer that recomputes keeps its recompute where no plan with offload beats it (Qwen3-30B-A3B /
    64 H100 of benchmarks/search_speed.py: full recompute 2.744 s, the best with offload 2.749 s, RESULTS 45)."""
    p = Problem(
        model=load_model("qwen3-30b-a3b"),
        cluster=load_cluster("h100-sxm").with_gpus(64),
        workload=Workload(global_batch=512, seq_len=4096),
    )
    r = solve(p, SolveOptions(offload=False))
    info = r.stats.activation_offload
    assert r.status == "OPTIMAL" and r.best.config.pp == 1 and r.best.config.recompute == "full"
    assert info["chosen"] is None and info["status"] == "OPTIMAL" and info["best_s"] > r.objective_s
    assert r.best.config.activation_offload_layers == 0


def test_not_offered_where_a_plan_fits_or_framework_cannot():
    p = Problem(model=M, cluster=CL, workload=W)  # pipelines and recompute free: plans fit
    assert solve(p).stats.activation_offload is None
    assert not offerable(Problem(model=M, cluster=CL, workload=W, framework="fsdp2"))
    assert not offerable(Problem(model=M, cluster=CL, workload=W, limits=Limits(fixed={"pp": 2})))
    assert not offerable(stated(4))


def test_cli_recommend_states_and_chooses_it(capsys):
    base = [
        "--model",
        "llama3.1-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--seq",
        "16384",
        "--tp",
        "1",
        "--cp",
        "1",
        "--pp",
        "1",
        "--recompute",
        "none",
    ]
    assert cli.main(["recommend"] + base) == 0
    out = capsys.readouterr().out
    assert "activation CPU offload: no plan fits without it; the best with it" in out
    # the fewest layers that fit (11) leave the plan within the memory margin; 14 keep it at the same time
    assert "14 layers chosen" in out and "to keep the memory margin (11 layers fit without it)" in out
    assert "memory margin: the plan keeps" in out
    assert cli.main(["recommend"] + base + ["--emit", "megatron"]) == 0
    assert "--cpu-offloading-num-layers 14 " in capsys.readouterr().out
    runs = []
    for command in ("recommend", "evaluate"):
        assert cli.main([command] + base + ["--activation-offload-layers", "20", "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0]["config"]["activation_offload_layers"] == 20 and runs[0]["fits"]
    assert runs[1]["config"] == runs[0]["config"]
    assert runs[1]["step_time_s"] == pytest.approx(runs[0]["step_time_s"], rel=1e-12)
