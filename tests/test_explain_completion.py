"""``planner explain`` resolves a command line as ``planner evaluate`` does (issue 23): for the same partial
flags both show the same plan, the same step time and the same band, and list the same choices; with
``--framework-defaults`` or a framework's own configuration too."""

import json

import pytest

from planner.cli import main

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
PLAN_KEYS = ("tp", "pp", "dp", "cp", "ep", "vp", "mb", "sp", "zero", "recompute", "bucket_mb", "chunks")


def both(capsys, *argv) -> tuple[dict, dict]:
    out = []
    for command in ("evaluate", "explain"):
        assert main([command, *argv, "--json"]) == 0, capsys.readouterr().err
        out.append(json.loads(capsys.readouterr().out))
    return out[0], out[1]


@pytest.mark.parametrize("flags", [["--tp", "2"], ["--tp", "2", "--framework-defaults"]])
def test_explain_prices_the_plan_evaluate_prices(capsys, flags):
    ev, ex = both(capsys, *SMALL, *flags)
    assert {k: ex["config"][k] for k in PLAN_KEYS} == {k: ev["config"][k] for k in PLAN_KEYS}
    assert ex["step_time_s"] == pytest.approx(ev["step_time_s"], rel=1e-9)
    assert ex["step_time_band_s"] == pytest.approx(ev["step_time_band_s"], rel=1e-9)
    assert ex["chosen"] == ev["chosen"] and ex["chosen_how"] == ev["chosen_how"]
    assert ex["band_notes"] == ev["band_notes"] and ex["stack"] == ev["stack"]
    assert set(ev["chosen"]) >= {"mb", "zero", "chunks", "bucket_mb"} and "tp" not in ev["chosen"]


def test_everything_stated_leaves_nothing_chosen(capsys):
    flags = [
        "--tp",
        "2",
        "--mb",
        "1",
        "--vp",
        "1",
        "--sp",
        "--zero",
        "1",
        "--recompute",
        "none",
        "--bucket-mb",
        "40",
        "--chunks",
        "1",
    ]
    ev, ex = both(capsys, *SMALL, *flags)
    assert ev["chosen"] == {} == ex["chosen"] and ex["chosen_how"] == ""
    assert ex["step_time_s"] == pytest.approx(ev["step_time_s"], rel=1e-9)
    assert (ex["config"]["chunks"], ex["config"]["bucket_mb"]) == (1, 40)


def test_explain_reads_a_megatron_line_literally(capsys):
    line = (
        "--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 "
        "--sequence-parallel"
    )
    ev, ex = both(capsys, "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--megatron-args", line)
    assert {k: ex["config"][k] for k in PLAN_KEYS} == {k: ev["config"][k] for k in PLAN_KEYS}
    assert ex["config"]["chunks"] == 1 and ex["config"]["bucket_mb"] == 0  # Megatron's defaults: no overlap
    assert ex["chosen"] == {} and ex["config_source"] == ev["config_source"]
    assert ex["step_time_band_s"] == pytest.approx(ev["step_time_band_s"], rel=1e-9)


def test_explain_text_lists_the_choices_and_the_band(capsys):
    assert main(["explain", *SMALL, "--tp", "2"]) == 0
    text = capsys.readouterr().out
    assert "stack: mcore-2025" in text and "80% band" in text
    assert "chosen by the planner: mb=" in text and "as recommend would" in text
    assert main(["evaluate", *SMALL, "--tp", "2"]) == 0
    ev = capsys.readouterr().out
    pick = lambda t: next(ln for ln in t.splitlines() if ln.startswith("chosen by the planner"))  # noqa: E731
    assert pick(text) == pick(ev)


def test_explain_refuses_training_inputs_for_serving(capsys):
    assert main(["explain", *SMALL, "--tp", "2", "--mode", "infer", "--framework-defaults"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "framework_defaults" in err
