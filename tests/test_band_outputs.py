"""Every output names what its number rests on (issue 23): the software stack, the knobs the planner
chose (or left at defaults), and where the plan lies beyond the data its band is made of.

The plan is llama3-8b on B200: no published run is on a Blackwell GPU, so every band must say so
("no measured run on b300"; B200 has measured runs since issue 39) and fall back to the band of all measured runs pooled."""

import json

from planner.cli import main
from planner.sweep import grid_from_mapping, run_sweep

PROBLEM = ["--model", "llama3-8b", "--cluster", "b300", "--gpus", "16", "--global-batch", "32", "--seq", "4096"]
OUTSIDE = "no measured run on b300"


def out_of(capsys, argv) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_evaluate_text_and_json(capsys):
    text = out_of(capsys, ["evaluate", *PROBLEM, "--tp", "2"])
    assert "stack: mcore-2025" in text and "chosen by the planner: mb=" in text
    assert f"band: {OUTSIDE}" in text
    d = json.loads(out_of(capsys, ["evaluate", *PROBLEM, "--tp", "2", "--json"]))
    assert d["stack"]["name"] == "mcore-2025" and "mb" in d["chosen"] and "tp" not in d["chosen"]
    assert any(OUTSIDE in n for n in d["band_notes"])
    lo, hi = d["step_time_band_s"]
    assert lo <= d["step_time_s"] <= hi


def test_recommend_and_its_baseline(capsys):
    text = out_of(capsys, ["recommend", *PROBLEM, "--baseline", "tp=2,pp=1,mb=1,zero=1"])
    assert "stack: mcore-2025" in text and "chosen by the planner: tp=" in text
    assert f"note: band: {OUTSIDE}" in text
    # the baseline's unstated knobs are said to be defaults, and it carries its own band
    assert "baseline: not stated, at the defaults: vp=1" in text and "baseline: 80% band" in text
    d = json.loads(out_of(capsys, ["recommend", *PROBLEM, "--baseline", "tp=2,pp=1,mb=1,zero=1", "--json"]))
    assert d["stack"]["name"] == "mcore-2025" and "tp" in d["chosen"]
    b = d["baseline"]
    assert "mb" not in b["baseline_defaults"] and b["baseline_defaults"]["chunks"] == 1
    assert any(OUTSIDE in n for n in b["band_notes"]) and any(OUTSIDE in n for n in b["baseline_band_notes"])
    lo, hi = b["baseline_step_time_band_s"]
    assert lo <= b["baseline"]["step_time_s"] <= hi


def test_explain_states_its_choices_and_band(capsys):
    # explain completes the unstated knobs as evaluate does (not at the flags' defaults) and says so
    text = out_of(capsys, ["explain", *PROBLEM, "--tp", "2", "--mb", "1"])
    assert "stack: mcore-2025" in text and "80% band" in text and f"band: {OUTSIDE}" in text
    chosen = text.split("chosen by the planner: ")[1]
    assert "vp=" in chosen and "chunks=" in chosen and " mb=" not in chosen and "tp=" not in chosen
    d = json.loads(out_of(capsys, ["explain", *PROBLEM, "--tp", "2", "--mb", "1", "--json"]))
    assert d["stack"]["name"] == "mcore-2025" and "chunks" in d["chosen"] and "recommend" in d["chosen_how"]
    assert "mb" not in d["chosen"] and any(OUTSIDE in n for n in d["band_notes"])
    lo, hi = d["step_time_band_s"]
    assert lo <= d["step_time_s"] <= hi


def test_sweep_rows_carry_stack_and_band_notes(tmp_path):
    grid = grid_from_mapping({"models": "llama3-8b", "gpus": "16", "global_batch": 32, "seq": 4096, "clusters": "b300"})
    run_sweep(grid.cases(), tmp_path, workers=1, progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["status"] == "ok" and row["stack"] == "mcore-2025" and OUTSIDE in row["band_notes"]
    assert row["tp"] and row["mb"]  # the plan columns: what the search chose


def test_a_plan_inside_the_data_says_it_is_no_extrapolation(capsys):
    inside = [
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "64",
        "--global-batch",
        "128",
        "--seq",
        "8192",
        "--tp",
        "2",
    ]
    for command in ("evaluate", "explain"):
        text = out_of(capsys, [command, *inside])
        assert "band: within the data: " in text and "no extrapolation" in text and "stack: mcore-2025" in text
        assert "chosen by the planner: " in text


def test_sweep_summary_names_stack_and_extrapolation(capsys, tmp_path):
    argv = [
        "sweep",
        "--models",
        "llama3-8b",
        "--clusters",
        "b300",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--seq",
        "4096",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    text = out_of(capsys, argv)
    assert "assumed: stack mcore-2025" in text and "1 of 1 banded cases extrapolate" in text
    d = json.loads(out_of(capsys, argv + ["--json"]))  # resumed: the same case, read back
    assert d["stacks"] == ["mcore-2025"] and (d["extrapolating_cases"], d["banded_cases"]) == (1, 1)
