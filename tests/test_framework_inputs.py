"""``planner evaluate`` from the framework's own configuration (issue 23): literal semantics.

Each hand-checked case states the expected values and the framework code they come from; what a
configuration omits is that framework version's default (no overlap unless it turns it on).
"""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.cli import main

H100 = ["--cluster", "h100-sxm"]


def run_json(capsys, *argv):
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def one_line_error(capsys, argv, *words):
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


# --------------------------------------------------------------------------- Megatron-LM
def test_megatron_line_literal_defaults(capsys):
    # 64 GPUs, tp 4 x pp 2 -> dp 8 (arguments.py: data_parallel_size = world / (tp pp cp)). No
    # --overlap-grad-reduce: bucket_size None, one reduction after backward (bucket 0); no
    # --tp-comm-overlap: 1 chunk; no --recompute-granularity: none; no --num-layers-per-virtual...: vp 1.
    line = (
        "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 2 "
        "--global-batch-size 256 --sequence-parallel --use-distributed-optimizer --seq-length 4096 --bf16"
    )
    e = run_json(capsys, "evaluate", "--model", "llama3-8b", *H100, "--gpus", "64", "--megatron-args", line, "--json")
    c = e["config"]
    assert (c["tp"], c["pp"], c["dp"], c["mb"], c["sp"], c["zero"]) == (4, 2, 8, 2, True, 1)
    assert (c["bucket_mb"], c["chunks"], c["recompute"], c["vp"]) == (0, 1, "none", 1)
    src = e["config_source"]
    assert src["from"] == "the Megatron line"
    assert set(src["framework_defaults"]) == {"vp", "recompute", "bucket_mb", "chunks", "cp", "ep"}
    assert e["workload"]["global_batch"] == 256


def test_megatron_fp8_param_gather_is_read_into_the_plan(capsys):
    """--fp8-param-gather was parsed from the line and dropped before the plan (recommend's DeepSeek-V3 / 256 B200
    answer re-ran from its own emitted flags 0.8% slower): it is stated, and gathers one byte per parameter."""
    line = (
        "--tensor-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 256 --seq-length 4096 --bf16 "
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --fp8-format e4m3"
    )
    base = ("evaluate", "--model", "llama3-8b", *H100, "--gpus", "64", "--json", "--megatron-args")
    off = run_json(capsys, *base, line)
    on = run_json(capsys, *base, line + " --fp8-param-gather")
    assert on["config_source"]["stated"]["fp8_param_gather"] is True
    assert "fp8_param_gather" not in off["config_source"]["stated"]
    assert on["comm_link_s"]["zero"] < off["comm_link_s"]["zero"]  # one byte a parameter instead of two


def test_megatron_bucket_grows_with_dp(capsys):
    # --overlap-grad-reduce without --ddp-bucket-size: max(40e6, 1e6 x dp) elements
    # (distributed_data_parallel.py at d98e8a64), FP32 gradients under --bf16 (4 bytes each):
    # dp 8 -> 40e6 x 4 = 160 MB; dp 128 -> 128e6 x 4 = 512 MB
    line = "--micro-batch-size 1 --global-batch-size 512 --overlap-grad-reduce --seq-length 2048 --bf16"
    for gpus, mb in ((8, 160.0), (128, 512.0)):
        e = run_json(
            capsys, "evaluate", "--model", "llama3-8b", *H100, "--gpus", str(gpus), "--megatron-args", line, "--json"
        )
        assert e["config"]["bucket_mb"] == pytest.approx(mb)
    # no --global-batch-size: micro_batch_size x data_parallel_size (validate_args) = 2 x 16
    e = run_json(
        capsys,
        "evaluate",
        "--model",
        "llama3-8b",
        *H100,
        "--gpus",
        "16",
        "--megatron-args",
        "--micro-batch-size 2 --seq-length 2048 --bf16",
        "--json",
    )
    assert e["workload"]["global_batch"] == 32 and e["config_source"]["framework_defaults"]["global_batch"] == 32


def test_megatron_line_states_the_model_and_is_checked_against_model(capsys, tmp_path):
    shape = (
        "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --swiglu --untie-embeddings-and-output-weights "
        "--padded-vocab-size 128256 --seq-length 8192 --micro-batch-size 1 --global-batch-size 64 --bf16"
    )
    f = tmp_path / "args.txt"
    f.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n  " + shape + "\n")
    e = run_json(capsys, "evaluate", *H100, "--gpus", "8", "--megatron-args", f"@{f}", "--json")
    assert e["model"]["params"] == pytest.approx(load_model("llama3-8b").params, rel=1e-9)  # the same shape
    one_line_error(
        capsys,
        ["evaluate", "--model", "llama3-70b", *H100, "--gpus", "8", "--megatron-args", str(f)],
        "megatron_args.num_layers=32",
        "80",
    )


def test_megatron_unknown_flag_and_fp32_are_refused(capsys):
    one_line_error(
        capsys,
        [
            "evaluate",
            "--model",
            "llama3-8b",
            *H100,
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq",
            "2048",
            "--megatron-args",
            "--tensor-model-paralel-size 8 --bf16",
        ],
        "--tensor-model-paralel-size",
        "Megatron-LM d98e8a64",
    )
    one_line_error(
        capsys,
        [
            "evaluate",
            "--model",
            "llama3-8b",
            *H100,
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq",
            "2048",
            "--megatron-args",
            "--tensor-model-parallel-size 8",
        ],
        "bf16",
        "FP32",
    )


def test_contradicting_flags_are_refused(capsys):
    line = "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 8 --seq-length 2048 --bf16"
    base = ["evaluate", "--model", "llama3-8b", *H100, "--gpus", "8", "--megatron-args", line]
    one_line_error(capsys, base + ["--tp", "4"], "tp=4", "the Megatron line")
    assert main(base + ["--tp", "8", "--json"]) == 0  # the same value is no contradiction
    capsys.readouterr()
    one_line_error(capsys, base + ["--deepspeed-config", "ds.json"], "deepspeed_config", "one framework")


# --------------------------------------------------------------------------- DeepSpeed
def ds(tmp_path, d) -> str:
    f = tmp_path / "ds.json"
    f.write_text(json.dumps(d))
    return str(f)


def test_deepspeed_batch_zero3_defaults(capsys, tmp_path):
    # train 512, accumulation 4 on dp 64: micro = 512 // 64 // 4 = 2 (_set_batch_related_parameters);
    # stage 3 without overlap_comm: overlap on (overlap_comm_valid: stage == 3) in reduce_bucket_size
    # 5e8 elements; no communication_data_type under bf16: gradients reduced in BF16 (engine.py
    # communication_data_type), 2 bytes each -> 1000 MB
    f = ds(
        tmp_path,
        {
            "train_batch_size": 512,
            "gradient_accumulation_steps": 4,
            "zero_optimization": {"stage": 3},
            "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW"},
        },
    )
    e = run_json(
        capsys,
        "evaluate",
        "--model",
        "llama3-8b",
        *H100,
        "--gpus",
        "64",
        "--seq",
        "4096",
        "--deepspeed-config",
        f,
        "--json",
    )
    c = e["config"]
    assert (c["framework"], c["zero"], c["mb"], c["dp"], c["bucket_mb"]) == ("deepspeed", 3, 2, 64, 1000.0)
    assert c["grad_dtype"] == "bf16"
    f = ds(
        tmp_path,
        {
            "train_batch_size": 512,
            "gradient_accumulation_steps": 4,
            "zero_optimization": {"stage": 3},
            "bf16": {"enabled": True},
            "communication_data_type": "fp32",
        },
    )
    e = run_json(
        capsys,
        "evaluate",
        "--model",
        "llama3-8b",
        *H100,
        "--gpus",
        "64",
        "--seq",
        "4096",
        "--deepspeed-config",
        f,
        "--json",
    )
    assert e["config"]["bucket_mb"] == 2000.0 and "grad_dtype" not in e["config"]  # FP32: 4 bytes, the default
    assert e["workload"]["global_batch"] == 512 and e["config_source"]["from"] == "the DeepSpeed config"


def test_deepspeed_stage1_no_overlap_and_checkpointing(capsys, tmp_path):
    # stage 1, overlap_comm unset -> False (stage != 3): bucket 0. micro 4 alone on dp 16 (tp 4):
    # train = 4 x 16, accumulation 1. The activation_checkpointing section: every layer checkpointed.
    # fp16 without communication_data_type: FP16 gradient reduction.
    f = ds(
        tmp_path,
        {
            "train_micro_batch_size_per_gpu": 4,
            "zero_optimization": {"stage": 1},
            "fp16": {"enabled": True},
            "activation_checkpointing": {"partition_activations": True},
        },
    )
    e = run_json(
        capsys,
        "evaluate",
        "--model",
        "llama3-8b",
        *H100,
        "--gpus",
        "64",
        "--seq",
        "4096",
        "--tp",
        "4",
        "--deepspeed-config",
        f,
        "--json",
    )
    c = e["config"]
    assert (c["zero"], c["bucket_mb"], c["mb"], c["dp"], c["tp"], c["recompute"]) == (1, 0, 4, 16, 4, "full")
    assert e["workload"]["global_batch"] == 64 and e["workload"]["dtype"] == "fp16"
    assert e["config_source"]["flags"]["tp"] == 4 and c["grad_dtype"] == "fp16"


@pytest.mark.parametrize(
    "content, words",
    [
        ({"train_batch_size": 8, "zero_optimisation": {"stage": 2}}, ["zero_optimisation", "DeepSpeed edaa72212"]),
        ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "bucket": 1}}, ["bucket", "DeepSpeedZeroConfig"]),
        (
            {
                "train_batch_size": 100,
                "train_micro_batch_size_per_gpu": 2,
                "gradient_accumulation_steps": 1,
                "bf16": {"enabled": True},
            },
            ["train_batch_size=100", "2 x 1 x 8"],
        ),
        (
            {"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
            ["offload_param", "not modelled"],
        ),
        ({"train_batch_size": 8}, ["deepspeed_config.bf16", "FP32"]),
        ({"train_batch_size": "auto", "bf16": {"enabled": True}}, ["train_batch_size='auto'", "integer"]),
    ],
)
def test_deepspeed_bad_configs(capsys, tmp_path, content, words):
    one_line_error(
        capsys,
        [
            "evaluate",
            "--model",
            "llama3-8b",
            *H100,
            "--gpus",
            "8",
            "--seq",
            "2048",
            "--deepspeed-config",
            ds(tmp_path, content),
        ],
        *words,
    )


def test_deepspeed_not_json_and_missing_file(capsys, tmp_path):
    f = tmp_path / "ds.json"
    f.write_text("{'train_batch_size': 8}")
    base = ["evaluate", "--model", "llama3-8b", *H100, "--gpus", "8", "--seq", "2048", "--deepspeed-config"]
    one_line_error(capsys, base + [str(f)], "deepspeed_config", "JSON")
    one_line_error(capsys, base + [str(tmp_path / "nope.json")], "deepspeed_config", "readable file")


# --------------------------------------------------------------------------- torchtitan
def test_torchtitan_v022_defaults(capsys, tmp_path):
    # job_config.py at v0.2.2: shard degree -1 -> the 8 GPUs left after tp 2 (16 GPUs); reshard policy
    # "default" without PP -> reshard after forward (zero 3); local batch 8 -> mb 8, global -1 -> 8 x 8;
    # seq_len 2048; activation checkpoint "selective" with option "2": every 2nd block fully checkpointed
    # -> full recompute of 32 // 2 = 16 layers; compile off -> eager element-wise kernels; TP always SP
    f = tmp_path / "job.toml"
    f.write_text("[parallelism]\ntensor_parallel_degree = 2\n")
    e = run_json(
        capsys, "evaluate", "--model", "llama3-8b", *H100, "--gpus", "16", "--torchtitan-config", str(f), "--json"
    )
    c = e["config"]
    assert (c["framework"], c["tp"], c["dp"], c["zero"], c["sp"], c["mb"]) == ("fsdp2", 2, 8, 3, True, 8)
    assert (c["recompute"], c["recompute_layers"], c["fused_elementwise"], c["chunks"]) == ("full", 16, False, 1)
    assert (e["workload"]["global_batch"], e["workload"]["seq_len"]) == (64, 2048)


def test_torchtitan_2024_fused_rmsnorm(capsys, tmp_path):
    # torchtitan 2024-04..2025-02: [model] norm_type = "fused_rmsnorm" (its Triton RMSNorm) with compile off ->
    # fused norms beside eager RoPE and SwiGLU (ParallelConfig.fused_norm); compiled, the key changes nothing
    f = tmp_path / "job.toml"
    f.write_text('[model]\nnorm_type = "fused_rmsnorm"\n[parallelism]\ntensor_parallel_degree = 2\n')
    argv = ["evaluate", "--model", "llama3-8b", *H100, "--gpus", "16", "--torchtitan-config", str(f), "--json"]
    c = run_json(capsys, *argv)["config"]
    assert (c["fused_elementwise"], c["fused_norm"]) == (False, True)
    f.write_text('[model]\nnorm_type = "fused_rmsnorm"\n[compile]\nenable = true\n')
    c = run_json(capsys, *argv)["config"]
    assert c["fused_elementwise"] is True and "fused_norm" not in c


def test_torchtitan_async_tp_and_bad_key(capsys, tmp_path):
    f = tmp_path / "job.toml"
    f.write_text(
        "[parallelism]\ntensor_parallel_degree = 4\nenable_async_tensor_parallel = true\n"
        'fsdp_reshard_after_forward = "never"\n[training]\nlocal_batch_size = 2\nglobal_batch_size = 32\n'
        'seq_len = 4096\n[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n'
        "[compile]\nenable = true\n"
    )
    e = run_json(
        capsys, "evaluate", "--model", "llama3-8b", *H100, "--gpus", "16", "--torchtitan-config", str(f), "--json"
    )
    c = e["config"]  # async TP: one step per TP rank (chunks = tp); "never": zero 2; 32 = 2 x 4 x 4 accumulation
    assert (c["chunks"], c["zero"], c["mb"], c["dp"], c["recompute"], c["fused_elementwise"]) == (
        4,
        2,
        2,
        4,
        "op_sac",
        True,
    )
    f.write_text("[parallelism]\ntensor_parallel_degre = 2\n")
    one_line_error(
        capsys,
        ["evaluate", "--model", "llama3-8b", *H100, "--gpus", "8", "--torchtitan-config", str(f)],
        "tensor_parallel_degre",
        "torchtitan v0.2.2",
    )
    f.write_text("[parallelism\n")
    one_line_error(
        capsys,
        ["evaluate", "--model", "llama3-8b", *H100, "--gpus", "8", "--torchtitan-config", str(f)],
        "torchtitan_config",
    )


# --------------------------------------------------------------------------- round trip
@pytest.mark.parametrize(
    "fmt, flag, pin",
    [
        ("megatron", "--megatron-args", ["--pp", "2"]),
        ("deepspeed", "--deepspeed-config", ["--tp", "1", "--pp", "1"]),
        ("fsdp2", "--torchtitan-config", []),
    ],
)
def test_emitted_plan_read_back_evaluates_to_the_recommendation(capsys, tmp_path, fmt, flag, pin):
    problem = ["--model", "llama3-8b", *H100, "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
    rec = run_json(capsys, "recommend", *problem, "--framework", fmt, *pin, "--json")
    assert main(["recommend", *problem, *pin, "--emit", fmt]) == 0
    f = tmp_path / "emitted"
    f.write_text(capsys.readouterr().out)
    # degrees and the sequence length are not DeepSpeed JSON keys: the training script states them
    extra = ["--tp", "1", "--pp", "1", "--seq", "4096"] if fmt == "deepspeed" else []
    got = run_json(capsys, "evaluate", "--model", "llama3-8b", *H100, "--gpus", "16", flag, str(f), *extra, "--json")
    want = dict(rec["config"])
    assert {k: got["config"][k] for k in want} == want
    lps = tuple(want.pop("layers_per_stage")) or None
    config = ParallelConfig.from_dict({**want, "layers_per_stage": lps})
    est = evaluate(
        load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(16), Workload(global_batch=64, seq_len=4096), config
    )
    assert got["step_time_s"] == pytest.approx(est.step_time_s, rel=1e-9)
    assert got["step_time_s"] == pytest.approx(rec["solve"]["graph_objective_s"], rel=1e-9)


def test_megatron_example_script_of_a_real_run(capsys):
    # Megatron-LM's own Llama-3 8B FP8 recipe (tests/data/megatron_llama3_8b_h100_fp8.args): every option is
    # a d98e8a64 argument; torchrun 8 x 1 -> 8 GPUs, dp 8; --sequence-parallel at tp 1 is turned off
    # (validate_args); --grad-reduce-in-bf16: BF16 gradients, so the default bucket max(40e6, 8e6) = 40e6
    # elements is 80 MB; --fp8-format hybrid: fp8; the model is the line's (no --model): Llama-3 8B's shape
    from pathlib import Path

    f = Path(__file__).parent / "data" / "megatron_llama3_8b_h100_fp8.args"
    e = run_json(capsys, "evaluate", *H100, "--megatron-args", str(f), "--json")
    c = e["config"]
    assert (c["tp"], c["cp"], c["pp"], c["dp"], c["sp"], c["zero"], c["mb"]) == (1, 1, 1, 8, False, 1, 1)
    assert (c["grad_dtype"], c["bucket_mb"], c["chunks"], c["flash_attention"]) == ("bf16", 80.0, 1, True)
    w = e["workload"]
    assert (w["global_batch"], w["seq_len"], w["dtype"]) == (128, 8192, "fp8")
    assert e["model"]["params"] == pytest.approx(load_model("llama3-8b").params, rel=1e-9)
