"""``planner explain``: overlap table, JSON, Chrome trace and Gantt files."""

import json

from planner.cli import main

ARGS = [
    "explain",
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
    "--vp",
    "3",
    "--sp",
    "--chunks",
    "4",
]


def test_explain_table_names_strategies_and_prerequisites(capsys):
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "blocking prerequisite" in out and "T_comm<=T_compute" in out
    assert out.count("\n") > 4
    assert "sp " in out and "pp " in out


def test_explain_json_and_files(tmp_path, capsys):
    trace, gantt = tmp_path / "t.json", tmp_path / "g.png"
    assert main(ARGS + ["--json", "--trace", str(trace), "--gantt", str(gantt)]) == 0
    d = json.loads(capsys.readouterr().out)
    rates = {r["strategy"]: r["r"] for r in d["overlap"]}
    assert set(rates) >= {"sp", "pp"} and all(0 <= r <= 1 for r in rates.values())
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_bad_stage_is_a_one_line_error(capsys):
    assert main(ARGS + ["--stage", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stage=8" in err[0]


def test_explain_inference_forward(capsys):
    assert (
        main(
            [
                "explain",
                "--model",
                "llama3-8b",
                "--cluster",
                "h100-sxm",
                "--gpus",
                "8",
                "--tp",
                "8",
                "--mode",
                "infer",
                "--input-len",
                "1000",
                "--output-len",
                "100",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["overlap"][0]["strategy"] == "tp" and d["overlap"][0]["phase"] == "prefill"


def test_explain_inference_shows_prefill_and_decode(tmp_path, capsys):
    trace = tmp_path / "decode.json"
    assert (
        main(
            [
                "explain",
                "--model",
                "llama3-8b",
                "--cluster",
                "h100-sxm",
                "--gpus",
                "8",
                "--tp",
                "8",
                "--mode",
                "infer",
                "--input-len",
                "1024",
                "--output-len",
                "128",
                "--global-batch",
                "16",
                "--trace",
                str(trace),
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    phases = {(r["strategy"], r["phase"]) for r in d["overlap"]}
    assert phases == {("tp", "prefill"), ("tp", "decode")}
    decode = next(r for r in d["overlap"] if r["phase"] == "decode")
    prefill = next(r for r in d["overlap"] if r["phase"] == "prefill")
    # a decode step moves one token per sequence: far less TP traffic than a 1024-token prefill
    assert decode["t_comm_s"] < prefill["t_comm_s"] and decode["r"] <= 0.3
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("args", {}).get("phase") == "decode" for e in events if e["ph"] == "X")
