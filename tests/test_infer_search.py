"""Serving search: CP-SAT equals the exhaustive baseline, targets hold, Pareto front, explanations, CLI layer."""

import json

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_cluster, load_model
from planner import cli, recommend_infer
from planner.arg_types import ArgParser
from planner.args import add_config_args, add_output_args, add_problem_args
from search.infer import InferProblem, batch_values, pareto_front, solve_infer, solve_infer_exhaustive
from search.problem import Limits

H100 = load_cluster("h100-sxm")


def problem(model="llama3-8b", gpus=8, **kw):
    kw.setdefault("input_len", 1000)
    kw.setdefault("output_len", 200)
    return InferProblem(model=load_model(model), cluster=H100.with_gpus(gpus), **kw)


CASES = [
    dict(),
    dict(tpot_target_s=0.015),
    dict(ttft_target_s=0.05, tpot_target_s=0.03),
    dict(model="llama3.1-70b", input_len=4000, output_len=500, tpot_target_s=0.03),
    dict(model="mixtral-8x7b", gpus=4, input_len=2000, output_len=300, dtype="fp8", kv_dtype="fp8"),
]


@pytest.mark.parametrize("kw", CASES, ids=range(len(CASES)))
def test_cpsat_optimum_equals_exhaustive_and_meets_targets(kw):
    p = problem(**kw)
    r, x = solve_infer(p), solve_infer_exhaustive(p)
    assert r.status == x.status == "OPTIMAL"
    assert r.best.tokens_per_s_per_gpu == pytest.approx(x.best.tokens_per_s_per_gpu)
    assert r.best.config == x.best.config and r.best.batch_per_replica == x.best.batch_per_replica
    assert r.best.fits
    if p.tpot_target_s:
        assert r.best.tpot_s <= p.tpot_target_s
    if p.ttft_target_s:
        assert r.best.ttft_s <= p.ttft_target_s


def test_tighter_latency_target_costs_throughput():
    loose, tight = solve_infer(problem()), solve_infer(problem(tpot_target_s=0.008))
    assert tight.best.tokens_per_s_per_gpu < loose.best.tokens_per_s_per_gpu
    assert tight.best.tpot_s <= 0.008 < loose.best.tpot_s


def test_pareto_front_is_non_dominated_and_ordered():
    r = solve_infer(problem())
    front = r.pareto
    assert len(front) >= 3
    assert [e.tpot_s for e in front] == sorted(e.tpot_s for e in front)
    assert all(a.tokens_per_s_per_gpu < b.tokens_per_s_per_gpu for a, b in zip(front, front[1:]))
    assert pareto_front(front) == front


def test_unreachable_tpot_is_explained_with_the_best_plan():
    r = solve_infer(problem(model="llama3.1-70b", input_len=4000, output_len=500, tpot_target_s=0.002))
    assert r.status == "INFEASIBLE" and r.best is None
    assert "TPOT <= 2 ms cannot be met: the lowest reachable is" in r.explanation
    assert "tp=8" in r.explanation  # the widest TP reads the fewest bytes per GPU
    assert r.pareto  # the front is still reported


def test_model_too_big_at_any_tp_is_a_spec_error():
    with pytest.raises(SpecError, match="gpus=2: must be enough to hold the weights"):
        solve_infer(problem(model="llama3.1-405b", gpus=2))


def test_limits_fix_the_plan():
    r = solve_infer(problem(limits=Limits(fixed={"tp": 2, "sp": False})))
    assert all(e.config.tp == 2 and not e.config.sp for e in r.plans)


def test_batch_values():
    assert batch_values(0, 1024) == []
    assert batch_values(5, 4) == [1, 2, 4]


# --------------------------------------------------------------------------- planner layer
def parser():
    p = ArgParser(prog="recommend")
    add_problem_args(p, infer=True)
    add_config_args(p)
    recommend_infer.add_arguments(p)
    add_output_args(p)
    return p


BASE = [
    "--mode",
    "infer",
    "--model",
    "llama3-8b",
    "--cluster",
    "h100-sxm",
    "--gpus",
    "8",
    "--input-len",
    "1000",
    "--output-len",
    "200",
]


def test_recommend_infer_json_and_plot(capsys, tmp_path):
    png = tmp_path / "front.png"
    args = parser().parse_args(BASE + ["--tpot-ms", "15", "--json", "--plot", str(png)])
    assert recommend_infer.run(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "OPTIMAL" and d["mode"] == "infer"
    assert d["plans"][0]["tpot_ms"] <= 15 and "launch" in d["plans"][0]
    assert d["pareto"] and d["solve"]["evaluated"] > 10
    assert png.stat().st_size > 1000


def test_recommend_infer_text_and_fixed_tp(capsys):
    args = parser().parse_args(BASE + ["--tp", "4"])
    assert recommend_infer.run(args) == 0
    out = capsys.readouterr().out
    assert "best plans" in out and "Pareto front" in out and "vllm serve" in out
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert rows and all(r[1] == "4" for r in rows)


def test_recommend_infer_unmet_target_exits_2_after_the_report(capsys):
    code = cli.main(["recommend"] + BASE + ["--tpot-ms", "0.5"])
    out, err = capsys.readouterr()
    assert code == 2 and "Pareto front" in out
    assert err.startswith("planner: error: targets=unmet: TPOT <= 0.5 ms cannot be met: the lowest reachable is")
    assert len(err.splitlines()) == 1


def test_recommend_cli_dispatches_infer_mode(capsys):
    assert cli.main(["recommend"] + BASE + ["--tpot-ms", "20", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mode"] == "infer" and d["plans"][0]["tpot_ms"] <= 20


@pytest.mark.parametrize("extra, field", [(["--tpot-ms", "5"], "tpot_ms"), (["--input-len", "100"], "input_len")])
def test_recommend_training_rejects_serving_flags(capsys, extra, field):
    code = cli.main(
        [
            "recommend",
            "--model",
            "gpt-1.7b",
            "--cluster",
            "a100-80g",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
        ]
        + extra
    )
    assert code == 2 and f"{field}=" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, field",
    [(["--tpot-ms", "-3"], "tpot_ms"), (["--ttft-ms", "0.1"], "ttft_ms"), (["--max-batch", "0"], "max_batch")],
)
def test_recommend_infer_bad_targets(extra, field):
    with pytest.raises(SpecError, match=field):
        parser().parse_args(BASE + extra)


def test_default_recommend_plans_only_what_vllm_runs_and_top_three_differ_in_launch(capsys):
    # issue 12 item 8: the README example's top plan relied on SP + 4 chunks no vLLM flag sets,
    # and its 2nd/3rd plans differed only in chunks (identical launch commands)
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "4000",
            "--output-len",
            "500",
            "--ttft-ms",
            "400",
            "--tpot-ms",
            "30",
            "--top",
            "3",
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and len(d["plans"]) == 3
    assert all(not p["config"]["sp"] and p["config"]["chunks"] == 1 for p in d["plans"])
    layouts = {
        tuple(a for a in p["launch"]["vllm"]["args"] if a.startswith("--"))
        + tuple(p["launch"]["vllm"]["args"][: p["launch"]["vllm"]["args"].index("--max-num-seqs")])
        for p in d["plans"]
    }
    assert len(layouts) == 3


@pytest.mark.parametrize(
    "extra, field",
    [
        (["--zero", "1"], "zero=1"),
        (["--grad-dtype", "bf16"], "grad_dtype='bf16'"),
        (["--framework", "fsdp2"], "framework='fsdp2'"),
        (["--no-zero3"], "no_zero3"),
        (["--recompute", "full"], "recompute='full'"),
    ],
)
def test_recommend_infer_refuses_training_settings(capsys, extra, field):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "1000",
            "--output-len",
            "100",
            *extra,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{field}" in err and "unset with --mode infer" in err


def test_recommend_infer_honours_the_degree_bounds(capsys):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "1000",
            "--output-len",
            "100",
            "--tp-max",
            "4",
            "--top",
            "3",
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["plans"] and all(p["config"]["tp"] <= 4 for p in d["plans"])
