"""``planner evaluate --mode infer``: report, JSON keys, defaults, and one-line errors."""

import json

import pytest

from planner import cli

BASE = {
    "--model": "llama3.1-70b",
    "--cluster": "h100-sxm",
    "--tp": "8",
    "--mode": "infer",
    "--input-len": "1000",
    "--output-len": "200",
    "--global-batch": "8",
}


def argv(changes=None, extra=()):
    opts = {**BASE, **(changes or {})}
    out = ["evaluate"]
    for flag, value in opts.items():
        if value is not None:
            out += [flag, value]
    return out + list(extra)


def run(capsys, args):
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_shows_latencies_throughput_and_overlap(capsys):
    code, out, err = run(capsys, argv())
    assert code == 0 and err == ""
    for text in (
        "TTFT",
        "TPOT",
        "output tokens/s",
        "max concurrency",
        "KV cache",
        "decode step ms",
        "communication overlap",
        "config: tp=8 pp=1 dp=1 ep=1",
    ):
        assert text in out


def test_json_has_the_inference_keys_and_nothing_else_on_stdout(capsys):
    code, out, err = run(capsys, argv(extra=["--json", "--tpot-ms", "30"]))
    assert code == 0
    d = json.loads(out)
    for key in (
        "ttft_ms",
        "tpot_ms",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "e2e_latency_ms",
        "kv_cache_bytes_per_token",
        "max_concurrency",
        "peak_memory_bytes",
        "fits",
        "overlap",
        "breakdown",
        "config",
        "sla",
        "meets_sla",
    ):
        assert key in d, key
    assert d["mode"] == "infer" and d["kv_cache_bytes_per_token"] == 327_680
    assert d["overlap"]["decode"]["tp"] == 0.0
    assert d["sla"]["tpot_ms"]["target"] == 30
    assert d["e2e_latency_ms"] == pytest.approx(d["ttft_ms"] + 199 * d["tpot_ms"])


def test_batch_defaults_to_one_request_per_replica(capsys):
    code, out, _ = run(capsys, argv({"--global-batch": None, "--gpus": "16"}, ["--json"]))
    assert code == 0
    d = json.loads(out)
    assert d["config"]["dp"] == 2 and d["batch"] == 2 and d["batch_per_replica"] == 1


def test_training_mode_is_unchanged(capsys):
    code, out, _ = run(
        capsys,
        [
            "evaluate",
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
            "--json",
        ],
    )
    assert code == 0 and "step_time_s" in json.loads(out)


CASES = [
    ("output_len_zero", {"--output-len": "0"}, [], "output_len="),
    ("input_len_zero", {"--input-len": "0"}, [], "input_len="),
    ("input_len_missing", {"--input-len": None}, [], "input_len="),
    ("seq_with_infer", {}, ["--seq", "1024"], "seq="),
    ("tpot_negative", {}, ["--tpot-ms", "-5"], "tpot_ms="),
    ("tpot_in_seconds", {}, ["--tpot-ms", "0.02"], "tpot_ms="),
    ("ttft_with_unit", {}, ["--ttft-ms", "300ms"], "ttft_ms="),
    ("ttft_zero", {}, ["--ttft-ms", "0"], "ttft_ms="),
    ("bad_kv_dtype", {}, ["--kv-dtype", "int4"], "kv_dtype="),
    ("bad_mode", {"--mode": "serve"}, [], "mode="),
    ("model_too_big_at_any_tp", {"--model": "llama3.1-405b", "--tp": "2"}, [], "gpus=2"),
    ("cp_in_inference", {"--tp": "4"}, ["--cp", "2"], "cp="),
    ("batch_not_multiple_of_dp", {"--gpus": "16", "--global-batch": "3"}, [], "global_batch="),
    ("prefill_tokens_zero", {}, ["--prefill-tokens", "0"], "prefill_tokens="),
]


@pytest.mark.parametrize("changes, extra, field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_inference_input_exits_2_with_one_line(capsys, changes, extra, field):
    code, out, err = run(capsys, argv(changes, extra))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("planner: error: ") and "Traceback" not in err
    assert field in lines[0] and ": must be " in lines[0], lines[0]


def test_model_too_big_explains_weights_per_gpu_against_hbm(capsys):
    _, _, err = run(capsys, argv({"--model": "llama3.1-405b", "--tp": "2"}))
    assert "378.0 GiB per GPU" in err and "79 GiB HBM" in err


def test_inference_flags_need_infer_mode(capsys):
    code, _, err = run(
        capsys,
        [
            "evaluate",
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
            "--input-len",
            "100",
        ],
    )
    assert code == 2 and "input_len=100: must be unset unless --mode infer" in err
