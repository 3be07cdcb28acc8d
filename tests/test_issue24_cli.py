"""Issue 24, what a new user hit on first contact: one number per plan (item 5), the autotuner's
validity (8), bounded and named inputs (10), and the smaller items (11)."""

import json

import pytest

from planner import cli

LLAMA = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _config_flags(c: dict) -> list[str]:
    flags = []
    for k in ("tp", "pp", "dp", "ep", "cp", "vp", "mb", "zero", "recompute", "chunks", "bucket_mb"):
        flags += [f"--{k.replace('_', '-')}", str(c[k])]
    return flags + (["--sp"] if c["sp"] else ["--no-sp"])


# --------------------------------------------------------------------------- item 5: one plan, one number
def test_recommend_and_evaluate_report_the_same_engine_and_step_time(capsys):
    code, out, _ = run(capsys, ["recommend", *LLAMA, "--json"])
    rec = json.loads(out)
    assert code == 0 and rec["engine"] == "graph"
    code, out, _ = run(capsys, ["evaluate", *LLAMA, "--json", *_config_flags(rec["config"])])
    ev = json.loads(out)
    assert code == 0 and ev["engine"] == "graph" and ev["config"] == {**rec["config"], "layers_per_stage": []}
    assert ev["step_time_s"] == pytest.approx(rec["step_time_s"], rel=1e-9)
    assert ev["step_time_band_s"] == pytest.approx(rec["step_time_band_s"], rel=1e-9)
    assert ev["mfu"] == pytest.approx(rec["mfu"], rel=1e-9)
    # the analytic number CP-SAT proved stays, under its own name
    assert abs(rec["objective_s"] / rec["analytic_step_time_s"] - 1) <= 0.005
    assert all(a["engine"] == "graph" for a in rec["alternatives"])


def test_text_outputs_name_the_engine(capsys):
    _, out, _ = run(capsys, ["recommend", *LLAMA])
    assert "step time s (op graph)" in out and "MFU % (op graph)" in out and "engine: " in out
    _, out, _ = run(capsys, ["evaluate", *LLAMA, "--tp", "2"])
    assert "(op graph engine)" in out


# --------------------------------------------------------------------------- item 8: the autotuner API
def test_evaluate_many_scores_what_the_framework_cannot_run_invalid():
    from planner.tuner import Planner
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    # Megatron-Core's only chunked overlap is TE userbuffers: chunks = tp (costmodel.frameworks)
    bad, good = p.evaluate_many([{"tp": 4, "sp": True, "chunks": 8}, {"tp": 4, "sp": True, "chunks": 4}])
    assert bad.status == "invalid" and "chunks=8" in bad.reason and not bad.ok
    assert good.status == "ok"
    assert [s.config.chunks for s in p.rank([{"tp": 4, "sp": True, "chunks": c} for c in (8, 4, 1)])] in ([4, 1], [1, 4])
    exact = p.evaluate_many([{"tp": 4, "sp": True, "chunks": 8}], exact=True)[0]
    assert exact.status == "invalid"


def test_evaluate_many_scores_every_bad_entry_and_keeps_the_order():
    from planner.tuner import Planner
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    entries = [{"tp": 2}, {"tpp": 2}, {"tp": "x"}, {"tp": 0}, {"zero": 5}, {"recompute": "foo"}, "tp=2", {"tp": 4}]
    scores = p.evaluate_many(entries)
    assert [s.status for s in scores] == ["ok"] + ["invalid"] * 6 + ["ok"]
    assert "tpp" in scores[1].reason and scores[1].config is None and scores[1].to_dict()["config"] is None
    assert "zero=5" in scores[4].reason
    json.dumps([s.to_dict() for s in scores])  # the invalid entries serialise too


# --------------------------------------------------------------------------- item 10: bounded, named inputs
def test_ctrl_c_after_a_solve_is_a_keyboard_interrupt_not_a_silent_death():
    # OR-Tools' SIGINT handler outlived each CP-SAT solve and left SIG_DFL: Ctrl-C on `planner sweep`
    # then killed it before it could print "N of M cases written" (issue 24, item 10)
    import subprocess
    import sys
    code = ("import os, signal, time\n"
            "from planner.api import recommend\n"
            "recommend('llama3-8b', 'h100-sxm', gpus=8, global_batch=64, seq=4096, tp=8, time_limit_s=5)\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted cleanly')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "interrupted cleanly" in p.stdout, (p.returncode, p.stderr[-500:])
