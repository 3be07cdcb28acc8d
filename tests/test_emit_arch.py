"""`--emit megatron` carries the model's architecture, the attention backend and the FSDP environment;
`--emit fsdp2` names the torchtitan it targets (issue 24, item 9).

The strongest check is the round trip: the emitted architecture flags, read back by the planner's
own Megatron-LM argument reader (:mod:`planner.megatron_args`, checked against real Megatron-LM
dumps in ``tests/test_calibrate_real_logs.py``), give a model with the parameter count of the one
emitted. ``benchmarks/real_parsers.py`` runs the same lines through Megatron-LM's ``validate_args``.
"""

import shlex

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_model
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner import megatron_model as mm
from planner.cli import main
from planner.emit import emit_text

W = Workload(global_batch=256, seq_len=8192)


def argv(text):
    return shlex.split(text.replace("\\\n", " "))


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "llama2-7b"])
def test_architecture_flags_parse_back_to_the_model(name):
    m = load_model(name)
    c = ParallelConfig(tp=8, pp=1, dp=4, sp=True, zero=1, ep=8 if m.experts else 1)
    text, notes = emit_text("megatron", c, W, m.layers, m.is_moe, model=m)
    args = mg.parse_command_line(" ".join(argv(text)))
    back = ModelSpec(name="back", **{**mm.model_fields({**args, "padded_vocab_size": str(m.vocab)})})
    assert back.params == m.params and back.layers == m.layers and back.kv_heads == m.kv_heads
    assert args["seq_length"] == "8192"  # the model's positions (its config's), never below the sequence
    assert args["max_position_embeddings"] == str(max(m.max_position_embeddings or 0, 8192))
    assert ("untie_embeddings_and_output_weights" in args) == (not m.tied_embeddings)
    assert any("architecture flags" in n for n in notes)


def test_mla_and_dense_leading_layers_are_stated():
    m = load_model("deepseek-v3")
    c = ParallelConfig(tp=1, pp=1, dp=64, ep=64, zero=1)
    text, _ = emit_text("megatron", c, Workload(global_batch=1024, seq_len=4096), m.layers, True, model=m)
    a = argv(text)
    assert "--multi-latent-attention" in a and a[a.index("--kv-lora-rank") + 1] == str(m.kv_lora_rank)
    assert a[a.index("--moe-layer-freq") + 1] == f"([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})"
    assert a[a.index("--num-experts") + 1] == str(m.experts)


def test_unfused_attention_says_the_backend():
    m = load_model("llama3-8b")
    c = ParallelConfig(tp=1, dp=8, zero=1, flash_attention=False)
    text, notes = emit_text("megatron", c, W, m.layers, model=m)
    args = mg.parse_command_line(" ".join(argv(text)))
    assert args["attention_backend"] == "unfused" and mg.flash_attention(args) is False
    assert any("attention backend: unfused" in n for n in notes)
    fused, _ = emit_text("megatron", ParallelConfig(tp=1, dp=8, zero=1), W, m.layers, model=m)
    assert "--attention-backend" not in fused


def test_megatron_fsdp_at_tp1_notes_cuda_device_max_connections():
    c = ParallelConfig(tp=1, dp=8, zero=3)
    _, notes = emit_text("megatron", c, W, 32)
    assert any("unset CUDA_DEVICE_MAX_CONNECTIONS" in n for n in notes)
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in notes)  # Megatron FSDP asserts it is not 1


def test_torchtitan_toml_names_its_version_and_refuses_fp16():
    c = ParallelConfig(tp=1, dp=8, zero=3, framework="fsdp2")
    text, _ = emit_text("fsdp2", c, W, 32)
    assert text.splitlines()[0].startswith("# torchtitan v0.2.2 job config")
    assert 'mixed_precision_param = "bfloat16"' in text
    with pytest.raises(SpecError, match=r"dtype='fp16': must be bf16 or fp8 for --emit fsdp2"):
        emit_text("fsdp2", c, Workload(global_batch=256, seq_len=8192, dtype="fp16"), 32)


def test_torchtitan_toml_refuses_a_fused_norm_it_cannot_run():
    # v0.2.2 has no fused RMSNorm: the TOML was written with a comment and ran eager norms, 9.9% slower than priced
    c = ParallelConfig(tp=1, dp=8, zero=3, framework="fsdp2", fused_elementwise=False, fused_norm=True)
    with pytest.raises(SpecError, match=r"fused_norm=True: must be unset for --emit fsdp2 \(torchtitan v0.2.2"):
        emit_text("fsdp2", c, W, 32)
    plain, _ = emit_text("fsdp2", ParallelConfig(tp=1, dp=8, zero=3, framework="fsdp2", fused_elementwise=False), W, 32)
    assert "fused RMSNorm" not in plain and 'components = ["loss"]' in plain  # eager blocks, the loss compiled


def test_cli_emit_megatron_starts_with_the_architecture(capsys):
    rc = main(
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--tp",
            "2",
            "--emit",
            "megatron",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("--num-layers 32 \\")
    assert (
        "--ffn-hidden-size 14336" in out and "--num-query-groups 8" in out and "--tensor-model-parallel-size 2" in out
    )


def test_cli_emit_fsdp2_fp16_is_one_line(capsys):
    rc = main(
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--dtype",
            "fp16",
            "--framework",
            "fsdp2",
            "--zero",
            "3",
            "--emit",
            "fsdp2",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "float32" in err


def test_json_carries_the_architecture_tokens(capsys):
    import json

    rc = main(
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--emit",
            "megatron",
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    tokens = d["megatron_model_args"]
    assert rc == 0 and tokens[:2] == ["--num-layers", "32"] and "--seq-length" in tokens
    assert d["megatron_args"][0] == "--tensor-model-parallel-size"
