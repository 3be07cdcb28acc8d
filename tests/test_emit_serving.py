"""vLLM and SGLang launch arguments: every flag is one the engine documents, values follow the plan."""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from planner import cli
from planner.emit_serving import serving_launch

#: vLLM flags, from vllm-project/vllm ``vllm/engine/arg_utils.py`` (commit 99d7eb5d6a51,
#: ``parallel_group.add_argument("--tensor-parallel-size", ...)`` etc.) and
#: https://docs.vllm.ai/en/v0.8.5/serving/engine_args.html (``--kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}``).
VLLM_FLAGS = {
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--max-num-seqs",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--kv-cache-dtype",
    "--quantization",
}
VLLM_KV_CHOICES = {"auto", "fp8", "fp8_e5m2", "fp8_e4m3"}

#: SGLang flags, from sgl-project/sglang ``docs/advanced_features/server_arguments.md``
#: (commit b36e8e198b71): "--tensor-parallel-size / --tp-size", "--pipeline-parallel-size / --pp-size",
#: "--data-parallel-size / --dp-size", "--expert-parallel-size / --ep-size / --ep",
#: "--enable-dp-attention", "--max-running-requests", "--context-length", "--chunked-prefill-size",
#: "--kv-cache-dtype {auto, fp8_e5m2, fp8_e4m3}", "--quantization".
SGLANG_FLAGS = {
    "--tp-size",
    "--pp-size",
    "--dp-size",
    "--ep-size",
    "--enable-dp-attention",
    "--max-running-requests",
    "--context-length",
    "--chunked-prefill-size",
    "--kv-cache-dtype",
    "--quantization",
}
SGLANG_KV_CHOICES = {"auto", "fp8_e5m2", "fp8_e4m3"}

PLANS = [
    ParallelConfig(tp=8),
    ParallelConfig(tp=4, pp=2),
    ParallelConfig(tp=2, dp=4),
    ParallelConfig(tp=8, ep=8),
    ParallelConfig(tp=2, dp=4, ep=8),
    ParallelConfig(tp=4, dp=2, ep=4),
    ParallelConfig(tp=4, ep=2, sp=True, chunks=4),
]


def flags(args):
    return {a for a in args if a.startswith("--")}


def value(args, flag):
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("c", PLANS, ids=str)
@pytest.mark.parametrize("kv, dtype", [("bf16", "bf16"), ("fp8", "fp8")])
def test_every_emitted_flag_is_documented(c, kv, dtype):
    launch = serving_launch(
        c, input_len=1000, output_len=200, batch_per_replica=32, kv_dtype=kv, dtype=dtype, prefill_tokens=4096
    )
    v, s = launch["vllm"]["args"], launch["sglang"]["args"]
    assert flags(v) <= VLLM_FLAGS, flags(v) - VLLM_FLAGS
    assert flags(s) <= SGLANG_FLAGS, flags(s) - SGLANG_FLAGS
    assert value(v, "--kv-cache-dtype") in VLLM_KV_CHOICES
    assert value(s, "--kv-cache-dtype") in SGLANG_KV_CHOICES


def test_values_follow_the_plan():
    v = serving_launch(
        ParallelConfig(tp=4, pp=2), input_len=3000, output_len=1000, batch_per_replica=48, kv_dtype="fp8"
    )
    a, b = v["vllm"]["args"], v["sglang"]["args"]
    assert value(a, "--tensor-parallel-size") == "4" and value(a, "--pipeline-parallel-size") == "2"
    assert value(a, "--max-num-seqs") == "48" and value(a, "--max-model-len") == "4000"
    assert value(a, "--kv-cache-dtype") == "fp8"
    assert value(b, "--tp-size") == "4" and value(b, "--pp-size") == "2"
    assert value(b, "--max-running-requests") == "48" and value(b, "--context-length") == "4000"
    assert value(b, "--kv-cache-dtype") == "fp8_e4m3"


def test_expert_parallel_mappings():
    # vLLM: EP = TP x DP when --enable-expert-parallel; SGLang: DP attention for experts across replicas
    wide = serving_launch(ParallelConfig(tp=2, dp=4, ep=8), input_len=10, output_len=10, batch_per_replica=8)
    assert value(wide["vllm"]["args"], "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in wide["vllm"]["args"]
    s = wide["sglang"]["args"]
    assert "--enable-dp-attention" in s and value(s, "--tp-size") == "8" and value(s, "--ep-size") == "8"
    odd = serving_launch(ParallelConfig(tp=4, ep=2), input_len=10, output_len=10, batch_per_replica=8)
    assert "--enable-expert-parallel" not in odd["vllm"]["args"]
    assert any("ep=2" in n for n in odd["vllm"]["notes"])
    assert value(odd["sglang"]["args"], "--ep-size") == "2"


def test_evaluate_json_carries_the_launch_commands(capsys):
    code = cli.main(
        [
            "evaluate",
            "--mode",
            "infer",
            "--model",
            "llama3.1-70b",
            "--cluster",
            "h100-sxm",
            "--tp",
            "8",
            "--input-len",
            "1000",
            "--output-len",
            "200",
            "--global-batch",
            "16",
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    assert d["launch"]["vllm"]["command"].startswith("vllm serve $MODEL --tensor-parallel-size 8")
    assert "--max-running-requests 16" in d["launch"]["sglang"]["command"]
