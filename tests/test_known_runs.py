"""Issue 42 item 2: a published run of a plan like the predicted one, predicted far off, widens the band and says so
(costmodel/trust/known_runs.py); the prediction itself does not move."""

import math

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.trust.known_runs import known_run_note, known_runs


def _row(row_id, tp, pp, ep, vp, err, gpus=256):
    return {
        "source": "moe_modelzoo_qwen3",
        "row_id": row_id,
        "model": "qwen3-235b-a22b",
        "device": "H100-SXM5-80GB",
        "gpus": gpus,
        "plan": {"tp": tp, "pp": pp, "dp": gpus // (tp * pp), "cp": 1, "ep": ep, "vp": vp},
        "measured_s": 29.0,
        "log_residual": math.log(1 + err),
    }


MODEL, CLUSTER = load_model("qwen3-235b-a22b"), load_cluster("h100-sxm").with_gpus(256)
PLAN = ParallelConfig(tp=4, pp=16, dp=4, ep=8, mb=1)


def test_a_run_of_the_same_shape_predicted_far_off_widens_the_band_and_is_named():
    rows = [_row("207", 4, 8, 8, 4, -0.41), _row("205", 2, 1, 8, 1, +0.01)]
    assert [r["row_id"] for r in known_runs(MODEL, CLUSTER, PLAN, rows)] == ["207"]
    note, band = known_run_note(MODEL, CLUSTER, PLAN, 16.6, rows)
    assert "row 207" in note and "-41%" in note and "TP4 CP1 EP8" in note
    assert band[0] == 16.6 and math.isclose(band[1], 16.6 / 0.59)


def test_a_small_error_or_another_shape_says_nothing():
    assert known_run_note(MODEL, CLUSTER, PLAN, 16.6, [_row("205", 2, 1, 8, 1, +0.01)]) == ("", None)
    assert known_run_note(MODEL, CLUSTER, PLAN, 16.6, [_row("207", 4, 8, 8, 4, -0.05)]) == ("", None)
    assert known_run_note(MODEL, CLUSTER, PLAN, 16.6, [_row("207", 4, 8, 8, 4, -0.41, gpus=512)]) == ("", None)


def test_the_issue_case_through_the_cli(capsys):
    """Qwen3-235B-A22B at TP4 PP16 EP8 on 256 H100 (the planner's answer in issue 42): NVIDIA's TP4 EP8 run
    (moe_modelzoo_qwen3 row 207) is predicted about -40%, so the band reaches that far and names the run."""
    import json

    from planner import cli

    args = ["evaluate", "--model", "qwen3-235b-a22b", "--cluster", "h100-sxm", "--gpus", "256"]
    args += ["--global-batch", "2048", "--seq", "4096", "--tp", "4", "--pp", "16", "--ep", "8", "--json"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    notes = [n for n in out["band_notes"] if "row 207" in n]
    assert len(notes) == 1 and "TP4 CP1 EP8" in notes[0]
    assert out["step_time_band_s"][1] > out["step_time_s"] * 1.5
