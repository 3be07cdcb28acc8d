"""``planner recommend``: JSON contract, human report, emitted settings, bad and infeasible input."""

import json

import pytest

from planner import cli
from planner.api import recommend
from search.solve import MEMORY_TIE

LLAMA = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
DESIGN_KEYS = {
    "status",
    "config",
    "step_time_s",
    "tokens_per_s",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "hfu",
    "peak_memory_bytes",
    "fits",
    "breakdown",
    "overlap",
}
CONFIG_KEYS = {"tp", "pp", "dp", "ep", "cp", "vp", "mb", "sp", "zero", "recompute", "bucket_mb", "chunks"}


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- output
def test_json_has_design_keys_solve_and_alternatives(capsys):
    code, out, err = run(capsys, ["recommend", *LLAMA, "--json", "--top", "2"])
    assert code == 0 and err == ""
    d = json.loads(out)
    assert DESIGN_KEYS <= set(d) and CONFIG_KEYS <= set(d["config"])
    assert {"status", "time_s", "objective_s", "bound_s", "gap"} <= set(d["solve"])
    assert d["solve"]["status"] == "OPTIMAL" and d["solve"]["gap"] == 0
    # the best is the leanest plan within MEMORY_TIE of the fastest (issue 24 item 6)
    assert len(d["alternatives"]) == 1 and d["alternatives"][0]["step_time_s"] >= d["step_time_s"] * (1 - MEMORY_TIE)
    assert d["fits"] and abs(d["objective_s"] / d["analytic_step_time_s"] - 1) <= 0.005


def test_human_report_puts_plans_side_by_side(capsys):
    code, out, _ = run(capsys, ["recommend", *LLAMA, "--top", "2"])
    assert code == 0
    header = next(line for line in out.splitlines() if line.strip().startswith("best"))
    assert "#2" in header
    assert "solve: OPTIMAL" in out and "best bound" in out and "gap 0.00%" in out


def test_emit_megatron_prints_arguments_only(capsys):
    code, out, _ = run(capsys, ["recommend", *LLAMA, "--emit", "megatron"])
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].startswith("--num-layers ")  # the model's architecture first (issue 24)
    assert any(line.startswith("--tensor-model-parallel-size ") for line in lines)
    assert all(line.startswith("--") for line in lines)


def test_emit_deepspeed_prints_one_json_object(capsys):
    code, out, _ = run(capsys, ["recommend", *LLAMA, "--emit", "deepspeed"])
    d = json.loads(out)
    assert code == 0 and d["train_batch_size"] == 64 and "zero_optimization" in d


def test_config_flags_fix_variables(capsys):
    code, out, _ = run(
        capsys, ["recommend", *LLAMA, "--tp", "2", "--no-sp", "--no-zero3", "--pp-max", "2", "--json", "--top", "3"]
    )
    d = json.loads(out)
    for plan in [d] + d["alternatives"]:
        c = plan["config"]
        assert c["tp"] == 2 and c["sp"] is False and c["zero"] != 3 and c["pp"] <= 2


def test_api_recommend():
    r = recommend("llama3-8b", "h100-sxm", gpus=16, global_batch=64, seq=4096, top_k=2, zero=1)
    assert r.status == "OPTIMAL" and all(p.config.zero == 1 for p in r.plans)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "argv, field",
    [
        (["--top", "0"], "top=0"),
        (["--time-limit", "-1"], "time_limit="),
        (["--workers", "0"], "workers=0"),
        (["--emit", "nemo"], "emit='nemo'"),
        (["--pp-max", "zero"], "pp_max='zero'"),
        (["--headroom-gib", "-2"], "headroom_gib="),
        (["--tp", "3"], None),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, argv, field):
    code, out, err = run(capsys, ["recommend", *LLAMA, *argv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("planner: error: ")
    if field:
        assert field in err


def test_missing_gpus_and_unknown_model_exit_2(capsys):
    code, _, err = run(
        capsys, ["recommend", "--model", "llama3-8b", "--cluster", "h100-sxm", "--global-batch", "8", "--seq", "128"]
    )
    assert code == 2 and "gpus" in err
    code, _, err = run(capsys, ["recommend", *LLAMA[:1], "no-such-model", *LLAMA[2:]])
    assert code == 2 and "model='no-such-model'" in err


def test_infeasible_problem_exits_2_with_reason_and_changes(capsys):
    argv = [
        "recommend",
        "--model",
        "gpt3-175b",
        "--cluster",
        "a100-80g",
        "--gpus",
        "2",
        "--global-batch",
        "8",
        "--seq",
        "2048",
    ]
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "problem=infeasible: no plan fits in memory" in err and "smallest changes: --gpus" in err
    code, out, err = run(capsys, argv + ["--json"])
    d = json.loads(out)
    assert code == 2 and d["status"] == "infeasible" and d["solve"]["status"] == "INFEASIBLE"
    assert d["solve"]["changes"] and d["solve"]["explanation"]
