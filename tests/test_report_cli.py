"""``--report FILE.html`` of ``planner recommend``, ``evaluate`` and ``sweep`` (planner/report_flag.py)."""

import json

import pytest

from planner import cli

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

PROBLEM = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def _wrote(err: str, path) -> bool:
    return f"report: wrote {path}" in err.strip().splitlines()


def test_recommend_report_holds_the_plan_and_its_plots(capsys, tmp_path):
    path = tmp_path / "plan.html"
    code = cli.main(["recommend", *PROBLEM, "--time-limit", "5", "--json", "--report", str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and _wrote(err, path)
    config = json.loads(out)["config"]
    html = path.read_text(encoding="utf-8")
    assert f"tp={config['tp']} pp={config['pp']}" in html and "<svg" in html


def test_evaluate_report(capsys, tmp_path):
    path = tmp_path / "sub" / "eval.html"
    code = cli.main(["evaluate", *PROBLEM, "--tp", "2", "--report", str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and _wrote(err, path) and "step time" in out.lower()
    html = path.read_text(encoding="utf-8")
    assert "tp=2 " in html and "<svg" in html


def test_sweep_report(capsys, tmp_path):
    path = tmp_path / "sweep.html"
    argv = ["sweep", "--models", "llama3-8b", "--clusters", "h100-sxm", "--gpus", "8,16", "--global-batch", "64"]
    argv += ["--seq", "2048", "--time-limit", "5", "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress"]
    code = cli.main([*argv, "--report", str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and "2 cases: 2 ok" in out and _wrote(err, path)
    html = path.read_text(encoding="utf-8")
    assert "Sweep: 2 cases" in html and "<svg" in html


def test_unwritable_report_path_exits_2_with_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = cli.main(["evaluate", *PROBLEM, "--tp", "2", "--report", str(blocker / "r.html")])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("planner: error: report=")


def test_report_refused_for_serving(capsys, tmp_path):
    path = tmp_path / "infer.html"
    argv = ["evaluate", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--tp", "2"]
    code = cli.main([*argv, "--input-len", "128", "--output-len", "128", "--report", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.strip() == "planner: error: report: only for training plans"
    assert not path.exists()
