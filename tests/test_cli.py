"""The ``planner`` command line: help for every subcommand, JSON contract, human report, entry point."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner import cli
from planner.report import to_plain

GPT3_64 = [
    "--model",
    "gpt3-175b",
    "--cluster",
    "a100-80g",
    "--gpus",
    "64",
    "--global-batch",
    "64",
    "--seq",
    "2048",
    "--tp",
    "8",
    "--pp",
    "8",
]
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


# --------------------------------------------------------------------------- help
@pytest.mark.parametrize("argv", [["--help"]] + [[name, "--help"] for name in cli.COMMANDS])
def test_help_exits_zero(capsys, argv):
    code, out, err = run(capsys, argv)
    assert code == 0
    assert "usage: planner" in out and err == ""


def test_every_listed_command_has_a_module():
    for name in cli.COMMANDS:
        module = cli.command_module(name)
        assert callable(module.add_parser) and callable(module.run)


# --------------------------------------------------------------------------- evaluate --json
def test_evaluate_json_has_design_keys_and_nothing_else_on_stdout(capsys):
    code, out, err = run(capsys, ["evaluate", *GPT3_64, "--json"])
    assert code == 0 and err == ""
    d = json.loads(out)  # the whole of stdout is one JSON object
    assert DESIGN_KEYS <= set(d)
    assert CONFIG_KEYS <= set(d["config"])
    assert (d["config"]["tp"], d["config"]["pp"], d["config"]["dp"]) == (8, 8, 1)  # dp = 64 / (8*8)
    assert d["status"] == "ok" and isinstance(d["fits"], bool)
    assert d["step_time_s"] > 0 and 0 < d["mfu"] < 1
    assert all(isinstance(v, float) for v in d["breakdown"].values())
    assert {"model", "cluster", "workload"} <= set(d)
    assert d["model"]["name"] == "gpt3-175b" and d["cluster"]["num_gpus"] == 64
    assert d["workload"]["seq_len"] == 2048


def test_breakdown_sums_to_step_time(capsys):
    _, out, _ = run(capsys, ["evaluate", *GPT3_64, "--json"])
    d = json.loads(out)
    assert sum(d["breakdown"].values()) == pytest.approx(d["step_time_s"], rel=1e-6)


def test_default_dp_fills_the_gpus(capsys):
    # 64 GPUs / (tp=8 * pp=4) = dp 2
    _, out, _ = run(capsys, ["evaluate", *GPT3_64[:-1], "4", "--json"])
    assert json.loads(out)["config"]["dp"] == 2


def test_gpus_default_to_the_config(capsys):
    argv = [
        "evaluate",
        "--model",
        "gpt3-175b",
        "--cluster",
        "a100-80g",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--tp",
        "8",
        "--pp",
        "8",
        "--json",
    ]
    code, out, _ = run(capsys, argv)
    assert code == 0 and json.loads(out)["cluster"]["num_gpus"] == 64


# --------------------------------------------------------------------------- evaluate text
def test_human_report_shows_step_time_and_tables(capsys):
    _, out, _ = run(capsys, ["evaluate", *GPT3_64, "--json"])
    step = json.loads(out)["step_time_s"]
    code, out, err = run(capsys, ["evaluate", *GPT3_64])
    assert code == 0 and err == ""
    line = next(ln for ln in out.splitlines() if ln.startswith("step time"))
    assert float(line.split()[2]) == pytest.approx(step, rel=1e-3)
    for heading in (
        "tokens/s",
        "MFU / HFU",
        "FLOP convention",
        "peak memory/GPU",
        "fits",
        "step time breakdown",
        "communication overlap",
        "why exposed",
    ):
        assert heading in out
    assert "{" not in out  # not JSON


def test_not_fitting_is_reported_not_an_error(capsys):
    # GPT-3 175B on one 8-GPU A100-40GB node: weights alone are ~40 GiB per GPU
    argv = [
        "evaluate",
        "--model",
        "gpt3-175b",
        "--cluster",
        "a100-40g",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--tp",
        "8",
    ]
    code, out, err = run(capsys, argv)
    assert code == 0 and err == ""
    assert "fits                  NO" in out and "does not fit: stage(s) 0" in out
    code, out, _ = run(capsys, argv + ["--json"])
    assert code == 0 and json.loads(out)["fits"] is False


def test_spec_files_work_like_presets(capsys, tmp_path):
    from costmodel.spec.presets import preset_info

    model = tmp_path / "tiny.yaml"
    model.write_text(yaml.safe_dump({"layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000}))
    cluster = tmp_path / "a100.json"
    cluster.write_text(json.dumps(preset_info("clusters", "a100-80g")))
    argv = [
        "evaluate",
        "--model",
        str(model),
        "--cluster",
        str(cluster),
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--seq",
        "1024",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sp",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--json",
    ]
    code, out, err = run(capsys, argv)
    assert code == 0, err
    d = json.loads(out)
    assert d["model"]["name"] == "tiny" and d["config"]["dp"] == 2 and d["config"]["sp"] is True


# --------------------------------------------------------------------------- presets
def test_presets_lists_models_and_clusters(capsys):
    code, out, _ = run(capsys, ["presets"])
    assert code == 0 and "gpt3-175b" in out and "a100-80g" in out
    code, out, _ = run(capsys, ["presets", "--json"])
    d = json.loads(out)
    assert {"gpt3-175b", "llama3-70b"} <= {m["name"] for m in d["models"]}
    assert all(c["description"] for c in d["clusters"])


def test_to_plain_unwraps_numpy_scalars():
    import numpy as np

    d = to_plain({"a": np.float64(1.5), "b": np.int64(3), "c": [np.bool_(True)]})
    assert d == {"a": 1.5, "b": 3, "c": [True]}
    assert type(d["a"]) is float and type(d["b"]) is int and type(d["c"][0]) is bool


def test_python_dash_m_entry_point():
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "planner", "presets", "--json"], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "gpt3-175b" in {m["name"] for m in json.loads(proc.stdout)["models"]}


MOE = [
    "--model",
    "qwen3-30b-a3b",
    "--cluster",
    "h100-sxm",
    "--gpus",
    "64",
    "--global-batch",
    "256",
    "--seq",
    "4096",
    "--tp",
    "2",
    "--ep",
    "16",
    "--sp",
]  # the EP group spans two nodes


def test_ep_dispatcher_is_evaluated_and_emitted(capsys):
    code, out, err = run(capsys, ["evaluate", *MOE, "--json"])
    a2a = json.loads(out)["step_time_s"]
    code, out, err = run(capsys, ["evaluate", *MOE, "--ep-dispatcher", "deepep", "--json"])
    assert code == 0 and json.loads(out)["step_time_s"] < a2a  # one network copy per destination node
    code, out, err = run(capsys, ["evaluate", *MOE, "--ep-dispatcher", "deepep", "--emit", "megatron"])
    assert code == 0 and "--moe-token-dispatcher-type flex" in out and "--moe-flex-dispatcher-backend deepep" in out
    assert "--moe-grouped-gemm" in out


def test_ep_dispatcher_is_pinned_when_stated_and_chosen_by_recommend_otherwise(capsys):
    # a stated dispatcher: every candidate runs it (issue 23: evaluate's completion and pinned recommend answer the
    # same plan); unstated, recommend times its answer under each and answers with the fastest (issue 39)
    pins = [*MOE, "--json"]
    code, out, _ = run(capsys, ["recommend", *pins, "--ep-dispatcher", "alltoall"])
    a2a = json.loads(out)
    code2, out2, _ = run(capsys, ["recommend", *pins])
    free = json.loads(out2)
    assert code == code2 == 0
    assert a2a["config"]["ep_dispatcher"] == "alltoall" and "dispatchers" not in a2a
    times = free["dispatchers"]["step_time_s"]
    assert times["deepep"] < times["alltoall"]  # the EP group spans two nodes: one network copy per node
    assert free["config"]["ep_dispatcher"] != "alltoall" and free["step_time_s"] < a2a["step_time_s"]
    code, out, err = run(capsys, ["recommend", *MOE[:10], "--ep-dispatcher", "nccl"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "ep_dispatcher" in err
