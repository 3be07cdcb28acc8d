"""``Planner``: scikit-learn-style parameters, the fast path equals ``evaluate``, space/rank/prune/recommend, examples."""

import dataclasses
import json
import math
import random
import runpy
from pathlib import Path

import pytest

from costmodel.api import evaluate
from costmodel.frameworks import rules as frameworks
from costmodel.frameworks.rules import check_runnable
from costmodel.spec.plan import ParallelConfig
from search import candidates as cand
from search.problem import Limits, Problem
from planner import Planner, Score, SpecError
from planner.tuner import grid

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- parameters
def test_init_does_no_work_and_keeps_its_parameters():
    p = Planner(model="no-such-model", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    assert p.get_params() == {
        "model": "no-such-model",
        "cluster": "h100-sxm",
        "gpus": 8,
        "global_batch": 64,
        "seq": 4096,
        "dtype": "bf16",
        "framework": "megatron",
        "grad_dtype": "fp32",
    }
    assert "no-such-model" in repr(p)
    with pytest.raises(SpecError, match="model='no-such-model'"):
        p.evaluate(tp=8)


def test_parameters_may_change_between_calls():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    assert p.evaluate(tp=8).config.dp == 1
    p.gpus = 16
    assert p.evaluate(tp=8).config.dp == 2


def test_specs_are_accepted_like_names():
    from planner import load_cluster, load_model

    p = Planner(model=load_model("llama3-8b"), cluster=load_cluster("h100-sxm"), gpus=8, global_batch=64, seq=4096)
    assert p.evaluate(tp=2).config.dp == 4


# --------------------------------------------------------------------------- fast path == evaluate
PROBLEMS = [  # dense, GQA, MoE, MoE with leading dense layers and MLA, DMA-engine-bound cluster
    ("gpt3-175b", "a100-80g", 1024, 1536, 2048),
    ("llama3-70b", "h100-sxm", 64, 128, 4096),
    ("mixtral-8x7b", "h100-sxm", 64, 256, 4096),
    ("deepseek-v3", "h800", 256, 512, 4096),
    ("llama3-8b", "sg2262-like", 16, 64, 8192),
]


def random_plans(problem, n, rng):
    """``n`` random plans from the search's candidate lists: every degree, ZeRO stage, recompute
    (partial too), chunks, buckets, interleaving and uneven stage splits."""
    shapes = cand.shapes(problem)
    out = []
    while len(out) < n:
        s = rng.choice(shapes)
        mb = rng.choice(cand.mb_values(problem, s.dp))
        m = problem.workload.global_batch // (s.dp * mb)
        vps = cand.vp_values(problem, s.pp, m)
        vp = rng.choice(vps) if vps else 1
        L = problem.model.layers
        lps = None
        if s.pp > 1:
            options = list(cand.splits(L, s.pp, vp, first_min=max(1, problem.model.dense_layers)))
            if not options:
                continue
            lps = cand.Split(*rng.choice(options)).layers_per_stage(s.pp)
        kind = rng.choice(frameworks.recompute_kinds(problem.framework))
        rec_layers = rng.choice([None, rng.randint(1, min(lps) if lps else L)]) if kind == "full" else None
        out.append(
            ParallelConfig(
                tp=s.tp,
                pp=s.pp,
                dp=s.dp,
                cp=s.cp,
                ep=s.ep,
                mb=mb,
                vp=vp,
                layers_per_stage=lps,
                sp=rng.choice(cand.sp_values(problem, s)),
                zero=rng.choice(cand.zero_values(problem, s)),
                recompute=kind,
                recompute_layers=rec_layers,
                chunks=rng.choice(frameworks.chunk_options(problem.framework, s.tp, (1, 2, 4), problem.cluster.device)),
                bucket_bytes=rng.choice([0, 10e6, 40e6]),
            )
        )
    return out


@pytest.mark.parametrize("model, cluster, gpus, batch, seq", PROBLEMS)
def test_evaluate_many_equals_evaluate(model, cluster, gpus, batch, seq):
    p = Planner(model=model, cluster=cluster, gpus=gpus, global_batch=batch, seq=seq)
    m, cl, w, _ = p._problem()
    problem = Problem(model=m, cluster=cl, workload=w, limits=Limits(tp_across_nodes=True))
    sample = random_plans(problem, 60, random.Random(0))
    n_ok = 0
    for score in p.evaluate_many(sample):
        try:  # a plan its framework cannot run on this device is invalid too (costmodel.frameworks.rules)
            check_runnable(score.config, cl.device)
            e = evaluate(m, cl, w, score.config, engine="analytic")
        except SpecError as err:
            assert score.status == "invalid" and score.reason == str(err)
            continue
        n_ok += 1
        assert score.status == "ok" and score.fits == e.fits
        for k in ("step_time_s", "mfu", "hfu", "tokens_per_s", "peak_memory_bytes", "model_tflops_per_gpu"):
            assert math.isclose(getattr(score, k), getattr(e, k), rel_tol=1e-12), (k, score.config)
    assert n_ok >= 30
    assert any(c.pp > 2 and c.layers_per_stage for c in sample) and any(c.recompute_layers for c in sample)


def test_invalid_configs_keep_their_place():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    scores = p.evaluate_many([{"tp": 2}, {"tp": 8, "pp": 1, "dp": 1, "vp": 2}, {"tp": 8}])
    assert [s.status for s in scores] == ["ok", "invalid", "ok"]
    assert "vp=2" in scores[1].reason and scores[1].step_time_s == math.inf and not scores[1].ok
    exact = p.evaluate_many([{"tp": 2}, {"tp": 8}], exact=True)
    assert [s.step_time_s for s in exact] == pytest.approx([scores[0].step_time_s, scores[2].step_time_s], rel=1e-12)


def test_scores_are_plain_values():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    s = p.evaluate_many([{"tp": 2}])[0]
    assert dataclasses.is_dataclass(s) and isinstance(s, Score)
    d = s.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert all(type(v) in (str, float, int, bool, dict) for v in d.values())
    assert type(d["step_time_s"]) is float and type(d["fits"]) is bool


# --------------------------------------------------------------------------- space / rank / prune / recommend
@pytest.fixture(scope="module")
def planner():
    return Planner(model="llama3-8b", cluster="h100-sxm", gpus=16, global_batch=128, seq=4096)


def test_space_respects_constraints_and_fits(planner):
    space = planner.space(tp=[2, 4], pp_max=2, zero=1, mb=1)
    assert space and all(c.tp in (2, 4) and c.pp <= 2 and c.zero == 1 and c.mb == 1 for c in space)
    assert all(c.gpus == 16 for c in space)
    assert all(s.ok for s in planner.evaluate_many(space))
    with pytest.raises(SpecError, match="warp=2"):
        planner.space(warp=2)


def test_rank_and_prune(planner):
    space = planner.space(mb_max=2)
    ranked = planner.rank(space)
    times = [s.step_time_s for s in ranked]
    assert times == sorted(times) and all(s.fits for s in ranked)
    assert [s.mfu for s in planner.rank(space, key="mfu")][:3] == sorted((s.mfu for s in ranked), reverse=True)[:3]
    kept = planner.prune(space, keep=5, within=0.05)
    assert 1 <= len(kept) <= 5 and kept[0] == ranked[0]
    assert all(s.step_time_s <= 1.05 * ranked[0].step_time_s for s in kept)
    with pytest.raises(SpecError, match="keep=0"):
        planner.prune(space, keep=0)


def test_recommend_uses_the_search_and_returns_plans_best_first(planner):
    # rescore=False, the autotuners' opt-out: the analytic optimum first (the default answer is the CLI's, re-scored
    # by the op graph with the memory margin kept: tests/test_one_answer.py)
    result = planner.recommend(top_k=3, constraints={"mb_max": 2, "pp_max": 2}, rescore=False)
    plans = result.plans
    assert result.status == "OPTIMAL" and result.best is plans[0]
    assert len(plans) == 3 and all(p.estimate.fits and p.config.pp <= 2 for p in plans)
    objectives = [p.objective_s for p in plans]
    assert objectives == sorted(objectives)
    assert json.loads(json.dumps(plans[0].to_dict()))["config"]["tp"] == plans[0].config.tp
    # the search's space holds the planner's: its best is no slower (tables agree with evaluate to 0.5 %)
    best = planner.rank(planner.space(mb_max=2, pp_max=2))[0]
    assert plans[0].estimate.step_time_s <= best.step_time_s * 1.005


def test_recommend_explains_an_infeasible_problem():
    p = Planner(model="llama3-70b", cluster="h100-sxm", gpus=1, global_batch=8, seq=4096)
    r = p.recommend()  # as planner.recommend: a result, not an exception
    assert r.status == "INFEASIBLE" and r.best is None and r.plans == []
    assert "no plan fits in memory" in r.explanation and r.changes


def test_grid_helper():
    assert grid(tp=[1, 2], pp=[1, 2])[3] == {"tp": 2, "pp": 2}


# --------------------------------------------------------------------------- packaging and examples
def test_py_typed_marker_is_shipped():
    assert (ROOT / "planner" / "py.typed").exists()
    assert "py.typed" in (ROOT / "pyproject.toml").read_text()


def test_ask_tell_example_runs(capsys):
    ns = runpy.run_path(str(ROOT / "examples" / "ask_tell.py"))
    config, measured = ns["main"](budget=4)
    out = capsys.readouterr().out
    assert "within 10 % of the best prediction" in out and "best measured" in out
    assert config.gpus == 64 and measured > 0


def test_optuna_example_runs(capsys):
    import optuna  # noqa: F401  (in the test extra: fail here, do not skip, when it is missing)

    ns = runpy.run_path(str(ROOT / "examples" / "optuna_tuning.py"))
    study = ns["main"](trials=15)
    assert study.best_value > 0 and "pruned by the planner" in capsys.readouterr().out
