"""Dropout as the framework runs it: a mask stored and written only at p > 0 (costmodel.physics.kernels.dropout).

Spec: ModelSpec.hidden_dropout / attention_dropout (default 0.1, Megatron-Core's; the Llama-family presets 0.0
from their recipes); memory charges the two residual masks, the embedding's and the unfused attention's per-score
mask and output only when p > 0; the bias-dropout-add and unfused softmax kernels move the mask only then;
the Hugging Face loader reads the probabilities; ``--emit megatron`` states them where they differ from
Megatron's 0.1 and the Megatron-line reader reads them back.
"""

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.physics.kernels import dropout
from costmodel.physics.kernels.compute import layer_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.hf_config import model_from_hf_config
from costmodel.physics.memory.activations import activation_bytes_per_layer
from costmodel.physics.memory.stage_memory import stage_memory
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner import megatron_model as mm
from planner.emit import emit_text

W = Workload(global_batch=8, seq_len=4096)
DEV = load_cluster("h100-sxm").device
PRESETS = Path(__file__).resolve().parent.parent / "costmodel" / "spec" / "presets" / "models"


def test_no_mask_at_zero_or_in_inference():
    assert (dropout.mask_bytes(0.1), dropout.mask_bytes(0.0), dropout.mask_bytes(0.1, train=False)) == (1, 0, 0)
    assert dropout.saved_bytes_per_score(0.1) == 5 and dropout.saved_bytes_per_score(0.0) == 2
    assert dropout.score_kernel_bytes(0.1) == (9, 2) and dropout.score_kernel_bytes(0.0) == (4, 1)


def test_defaults_are_megatrons_and_llama_presets_state_zero():
    m = ModelSpec(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100)
    assert (m.hidden_dropout, m.attention_dropout) == (0.1, 0.1)
    assert load_model("gpt3-175b").hidden_dropout == 0.1
    for name in ("llama3-8b", "llama3.1-405b", "deepseek-v3", "qwen3-30b-a3b", "nemotron4-340b"):
        m = load_model(name)
        assert (m.hidden_dropout, m.attention_dropout) == (0.0, 0.0), name


def test_every_preset_off_megatrons_default_cites_its_source():
    for p in sorted(PRESETS.glob("*.json")):
        d = json.loads(p.read_text())
        if d.get("hidden_dropout", 0.1) != 0.1 or d.get("attention_dropout", 0.1) != 0.1:
            assert d.get("dropout_source"), p.name


@pytest.mark.parametrize(
    "field,value",
    [("hidden_dropout", 1.0), ("attention_dropout", -0.1), ("hidden_dropout", "0.1"), ("attention_dropout", True)],
)
def test_a_probability_outside_0_1_is_refused(field, value):
    with pytest.raises(SpecError, match=field):
        ModelSpec(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100, **{field: value})


@pytest.mark.parametrize("sp,tp", [(False, 1), (True, 4)])
def test_residual_masks_only_with_hidden_dropout(sp, tp):
    m0 = load_model("llama3-8b")
    m1 = replace(m0, hidden_dropout=0.1)
    c = ParallelConfig(tp=tp, sp=sp, mb=2)
    tokens = 2 * 4096
    # two 1-byte masks of h per token, sequence-sharded under SP
    diff = activation_bytes_per_layer(m1, W, c) - activation_bytes_per_layer(m0, W, c)
    assert diff == pytest.approx(2 * m0.hidden * tokens / (tp if sp else 1))
    # attention dropout changes nothing under FlashAttention (no mask stored)
    assert activation_bytes_per_layer(replace(m0, attention_dropout=0.1), W, c) == activation_bytes_per_layer(m0, W, c)


def test_unfused_attention_keeps_mask_and_output_only_with_attention_dropout():
    m0 = load_model("gpt3-175b")
    c = ParallelConfig(tp=8, sp=True, flash_attention=False)
    w = Workload(global_batch=1, seq_len=2048)
    full = activation_bytes_per_layer(m0, w, c)
    none = activation_bytes_per_layer(replace(m0, attention_dropout=0.0), w, c)
    # Korthikanti Table 2: 5 a s^2 b / t, of which the mask (1) and dropout output (2) go at p = 0
    assert full - none == pytest.approx(3 * m0.heads * 2048 * 2048 / 8)


def test_embedding_mask_on_the_first_stage_only_with_hidden_dropout():
    m1 = load_model("gpt3-175b")
    m0 = replace(m1, hidden_dropout=0.0)
    c = ParallelConfig(tp=8, pp=8, sp=True, mb=1)
    w = Workload(global_batch=64, seq_len=2048)
    d_first = stage_memory(m1, w, c, 0).activations_bytes - stage_memory(m0, w, c, 0).activations_bytes
    d_mid = stage_memory(m1, w, c, 3).activations_bytes - stage_memory(m0, w, c, 3).activations_bytes
    per_layer = activation_bytes_per_layer(m1, w, c) - activation_bytes_per_layer(m0, w, c)
    assert d_mid == pytest.approx(per_layer * 12 * 5)  # 12 layers x 5 micro-batches in flight on stage 3 of 8
    assert d_first - d_mid * 8 / 5 == pytest.approx(m1.hidden * 2048 / 8 * 8)  # the mask (h/t B) x 8 in flight


def test_kernels_move_the_mask_only_in_training_with_dropout():
    m0 = load_model("llama3-8b")
    m1 = replace(m0, hidden_dropout=0.1)
    c = ParallelConfig(tp=1, mb=1)
    t = {m.hidden_dropout: {o.name: o for o in layer_ops(m, DEV, W, c)} for m in (m0, m1)}
    assert t[0.1]["bda1"].fwd_s > t[0.0]["bda1"].fwd_s and t[0.1]["bda2"].fwd_s > t[0.0]["bda2"].fwd_s
    assert t[0.1]["qkv"].fwd_s == t[0.0]["qkv"].fwd_s
    infer = Workload(mode="infer", global_batch=8, input_len=2000, output_len=10)
    a = {o.name: o for o in layer_ops(m1, DEV, infer, c)}
    b = {o.name: o for o in layer_ops(m0, DEV, infer, c)}
    assert a["bda1"].fwd_s == b["bda1"].fwd_s  # no dropout in inference
    g1 = load_model("gpt3-175b")
    cu = ParallelConfig(tp=8, sp=True, flash_attention=False)
    core = {
        p: {o.name: o for o in layer_ops(replace(g1, attention_dropout=p), DEV, W, cu)}["attn_core"] for p in (0.0, 0.1)
    }
    assert core[0.0].fwd_s < core[0.1].fwd_s


def test_hf_config_reads_the_probabilities():
    base = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        "vocab_size": 100,
    }
    m = model_from_hf_config(base)
    assert (m.hidden_dropout, m.attention_dropout) == (0.0, 0.0)  # LlamaConfig: 0.0, no residual dropout
    m = model_from_hf_config({**base, "attention_dropout": 0.05, "hidden_dropout": 0})
    assert (m.hidden_dropout, m.attention_dropout) == (0.0, 0.05)
    g = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100}
    assert model_from_hf_config(g).hidden_dropout == 0.1  # GPT2Config's default
    assert model_from_hf_config({**g, "resid_pdrop": 0.0, "attn_pdrop": 0.2}).attention_dropout == 0.2
    with pytest.raises(SpecError, match="attention_dropout"):
        model_from_hf_config({**base, "attention_dropout": 1.5})
    with pytest.raises(SpecError, match="resid_pdrop"):
        model_from_hf_config({**g, "resid_pdrop": "x"})


@pytest.mark.parametrize(
    "name,flags", [("llama3-8b", ["--hidden-dropout", "0.0", "--attention-dropout", "0.0"]), ("gpt3-175b", [])]
)
def test_emit_states_dropout_off_megatrons_default_and_reads_it_back(name, flags):
    m = load_model(name)
    c = ParallelConfig(tp=8, dp=4, sp=True, zero=1)
    text, _ = emit_text("megatron", c, Workload(global_batch=256, seq_len=8192), m.layers, False, model=m)
    tokens = shlex.split(text.replace("\\\n", " "))
    assert ("--hidden-dropout" in tokens) == bool(flags)
    if flags:
        i = tokens.index("--hidden-dropout")
        assert tokens[i : i + 2] == flags[:2]
    back = mm.model_fields({**mg.parse_command_line(" ".join(tokens)), "padded_vocab_size": str(m.vocab)})
    assert (back["hidden_dropout"], back["attention_dropout"]) == (m.hidden_dropout, m.attention_dropout)


def test_megatron_reader_defaults_and_errors():
    assert mm.dropout_fields({}) == {"hidden_dropout": 0.1, "attention_dropout": 0.1}
    assert mm.dropout_fields({"hidden_dropout": "0.0", "attention-dropout": "0.0"}) == {
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
    with pytest.raises(SpecError, match="hidden_dropout"):
        mm.dropout_fields({"hidden_dropout": "lots"})
    with pytest.raises(SpecError, match="attention_dropout"):
        mm.dropout_fields({"attention_dropout": "1.0"})


def test_a_megatron_line_runs_its_dropout_on_the_given_model():
    from planner.inputs.megatron import parse_megatron_text

    line = (
        "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 "
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --vocab-size 32000"
    )
    assert parse_megatron_text(line).dropout == {"hidden_dropout": 0.1, "attention_dropout": 0.1}  # Megatron's default
    fi = parse_megatron_text(line + " --hidden-dropout 0.0 --attention-dropout 0.0")
    assert fi.dropout == {"hidden_dropout": 0.0, "attention_dropout": 0.0} and fi.model["hidden_dropout"] == 0.0
    with pytest.raises(SpecError, match="megatron_args.hidden_dropout"):
        parse_megatron_text(line + " --hidden-dropout 2")


def test_cli_bad_dropout_in_a_megatron_line_exits_2(capsys):
    from planner.cli import main

    rc = main(
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--megatron-args",
            "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 8 --seq-length 4096 --bf16 "
            "--hidden-dropout lots",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "hidden_dropout" in err[0]


def test_evaluate_charges_the_masks_a_megatron_line_runs(capsys):
    from planner.cli import main

    line = "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 8 --seq-length 4096 --bf16"
    peaks = {}
    for extra in ("", " --hidden-dropout 0.0 --attention-dropout 0.0"):
        assert (
            main(
                [
                    "evaluate",
                    "--model",
                    "llama3-8b",
                    "--cluster",
                    "h100-sxm",
                    "--gpus",
                    "8",
                    "--json",
                    "--megatron-args",
                    line + extra,
                ]
            )
            == 0
        )
        peaks[extra] = json.loads(capsys.readouterr().out)["peak_memory_bytes"]
    # Megatron's default 0.1 on a Llama: two h-byte masks per token and layer (SP over 8) plus the embedding's
    assert peaks[""] > peaks[" --hidden-dropout 0.0 --attention-dropout 0.0"]
