"""Emitted Megatron-LM lines train the model given (issue 42, item 7): the RoPE base and scaling, QK-norm, the
router's score function, expert bias and groups, and ``--max-position-embeddings`` are the model's (its Hugging
Face config's), read from a ``config.json``, carried by the presets, written by ``--emit megatron`` under the
names and types Megatron-LM d98e8a64 declares, and read back by the planner's own Megatron argument reader."""

import argparse
import shlex
from pathlib import Path

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.hf_config import model_from_hf_config
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_model
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
import planner
from planner import megatron_args as mg
from planner import megatron_model as mm
from planner.cli import main
from planner.emit import emit_text

#: the flags as Megatron-LM d98e8a64 declares them: megatron/training/arguments.py (--max-position-embeddings
#: int, --rotary-base int, --use-rope-scaling store_true, --rope-scaling-factor float, --rotary-scaling-factor
#: float, --mscale-all-dim float) and the TransformerConfig fields its ArgumentGroupFactory turns into flags
#: (qk_layernorm: bool, moe_router_score_function: Literal, moe_router_enable_expert_bias: bool,
#: moe_router_num_groups / moe_router_group_topk: Optional[int], moe_router_topk_scaling_factor: Optional[float])
DECLARED = {
    "--seq-length": dict(type=int),
    "--max-position-embeddings": dict(type=int),
    "--rotary-base": dict(type=int, default=10000),
    "--use-rope-scaling": dict(action="store_true"),
    "--rope-scaling-factor": dict(type=float, default=8.0),
    "--rotary-scaling-factor": dict(type=float, default=1.0),
    "--mscale-all-dim": dict(type=float, default=0.0),
    "--qk-layernorm": dict(action="store_true"),
    "--moe-router-score-function": dict(choices=["softmax", "sigmoid", "sqrtsoftplus"], default="softmax"),
    "--moe-router-enable-expert-bias": dict(action="store_true"),
    "--moe-router-num-groups": dict(type=int),
    "--moe-router-group-topk": dict(type=int),
    "--moe-router-topk-scaling-factor": dict(type=float),
}
#: (model, seq): what its Hugging Face config.json says, as Megatron-LM reads it
EXPECTED = {
    "llama3.1-8b": dict(
        rotary_base=500_000, use_rope_scaling=True, rope_scaling_factor=8.0, max_position_embeddings=131072
    ),
    "llama3.1-405b": dict(rotary_base=500_000, use_rope_scaling=True, max_position_embeddings=131072),
    "qwen3-235b-a22b": dict(rotary_base=1_000_000, qk_layernorm=True, max_position_embeddings=40960),
    "qwen3-30b-a3b": dict(
        rotary_base=1_000_000, qk_layernorm=True, use_rope_scaling=False, max_position_embeddings=40960
    ),
    "deepseek-v3": dict(
        rotary_base=10000,
        rotary_scaling_factor=40.0,
        mscale_all_dim=1.0,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        moe_router_topk_scaling_factor=2.5,
        max_position_embeddings=163840,
    ),
    "mixtral-8x7b": dict(rotary_base=1_000_000, moe_router_score_function="softmax", max_position_embeddings=32768),
}
W = Workload(global_batch=256, seq_len=4096)


def megatron_names():
    """Megatron-LM d98e8a64's argument names (``planner/data``, as ``planner.inputs.megatron`` checks a line)."""
    text = (Path(planner.__file__).parent / "data" / "megatron_arguments_d98e8a64.txt").read_text()
    return {ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}


def argv(text):
    return shlex.split(text.replace("\\\n", " "))


def emitted(name):
    m = load_model(name)
    c = ParallelConfig(tp=1, pp=1, dp=8, ep=8 if m.experts else 1, zero=1)
    text, notes = emit_text("megatron", c, W, m.layers, m.is_moe, model=m)
    return m, argv(text), notes


def declared_parser():
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, spec in DECLARED.items():
        p.add_argument(name, **spec)
    return p


@pytest.mark.parametrize("name", list(EXPECTED))
def test_emitted_line_states_what_the_model_trains_with(name):
    _, tokens, _ = emitted(name)
    args, _ = declared_parser().parse_known_args(tokens)  # Megatron's types: --rotary-base is an int
    for key, want in EXPECTED[name].items():
        assert getattr(args, key) == want, key
    assert args.seq_length == W.seq_len <= args.max_position_embeddings  # validate_args asserts it


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_emitted_flag_is_megatrons_and_parses_back_to_the_model(name):
    m, tokens, _ = emitted(name)
    known = megatron_names()
    flags = [t[2:].replace("-", "_") for t in tokens if t.startswith("--")]
    assert [f for f in flags if f not in known] == []
    back = ModelSpec(
        name="back", **mm.model_fields({**mg.parse_command_line(shlex.join(tokens)), "padded_vocab_size": m.vocab})
    )
    for f in (
        "max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "rope_scaling_factor",
        "qk_layernorm",
        "router_score_function",
        "router_expert_bias",
        "router_num_groups",
        "router_group_topk",
        "router_topk_scaling_factor",
    ):
        assert getattr(back, f) == getattr(m, f), f
    if not m.is_mla:  # the argument reader has no MLA shape (its parameters differ), the rest is the model's
        assert back.params == m.params


def test_max_positions_never_below_the_sequence():
    m, tokens, _ = emitted("qwen3-30b-a3b")
    long = Workload(global_batch=8, seq_len=65536)  # past the config's 40960 (YaRN-extended runs do this)
    text, _ = emit_text("megatron", ParallelConfig(tp=1, dp=8, ep=8, zero=1, cp=1), long, m.layers, True, model=m)
    t = argv(text)
    assert t[t.index("--max-position-embeddings") + 1] == "65536"
    gpt = load_model("gpt3-175b")  # no positions in its spec: the sequence length, as before
    text, _ = emit_text("megatron", ParallelConfig(tp=8, pp=8, dp=1), W, gpt.layers, model=gpt)
    t = argv(text)
    assert t[t.index("--max-position-embeddings") + 1] == "4096" and "--rotary-base" not in t


def test_cli_emit_states_llama31_rope(capsys):
    pins = ["--tp", "1", "--pp", "1", "--mb", "1", "--zero", "1", "--recompute", "full", "--bucket-mb", "40"]
    rc = main(
        ["evaluate", "--model", "llama3.1-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64"]
        + ["--seq", "8192", *pins, "--emit", "megatron"]
    )
    t = argv(capsys.readouterr().out)
    assert rc == 0
    assert t[t.index("--rotary-base") + 1] == "500000" and "--use-rope-scaling" in t
    assert t[t.index("--rope-scaling-factor") + 1] == "8.0"
    assert t[t.index("--max-position-embeddings") + 1] == "131072" and t[t.index("--seq-length") + 1] == "8192"


LLAMA31 = {
    "_name_or_path": "meta-llama/Llama-3.1-8B",
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


def test_hugging_face_configs_give_the_fields_the_presets_carry():
    m = model_from_hf_config(LLAMA31)
    p = load_model("llama3.1-8b")
    for f in ("max_position_embeddings", "rope_theta", "rope_scaling", "rope_scaling_factor", "qk_layernorm"):
        assert getattr(m, f) == getattr(p, f), f
    qwen = {
        **LLAMA31,
        "model_type": "qwen3",
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
    }
    q = model_from_hf_config(qwen)
    assert (q.qk_layernorm, q.rope_theta, q.rope_scaling, q.max_position_embeddings) == (True, 1e6, None, 40960)
    assert model_from_hf_config({**qwen, "model_type": "llama"}).qk_layernorm is False
    moe = {
        **qwen,
        "model_type": "deepseek_v3",
        "n_routed_experts": 16,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 512,
    }
    d = model_from_hf_config(
        {**moe, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 4, "topk_group": 2}
    )
    assert (d.router_score_function, d.router_expert_bias, d.router_num_groups, d.router_group_topk) == (
        "sigmoid",
        True,
        4,
        2,
    )
    assert model_from_hf_config(moe).router_score_function == "softmax"
    with pytest.raises(SpecError, match="scoring_func"):
        model_from_hf_config({**moe, "scoring_func": "tanh"})


def test_the_fields_change_no_prediction():
    from costmodel.spec.presets import load_cluster
    from costmodel import api

    m = load_model("llama3.1-8b")
    bare = ModelSpec(
        **{
            **{f: getattr(m, f) for f in ("name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden")},
            "vocab": m.vocab,
            "activation": m.activation,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        }
    )
    cl = load_cluster("h100-sxm").with_gpus(8)
    c = ParallelConfig(tp=2, dp=4, zero=1)
    w = Workload(global_batch=64, seq_len=8192)
    assert api.evaluate(m, cl, w, c).step_time_s == api.evaluate(bare, cl, w, c).step_time_s


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "llama3.1-8b"])
def test_emitted_line_reads_back_as_the_same_plan(name, capsys):
    """``evaluate --megatron-args`` of the emitted line (the new flags included) is the plan emitted."""
    import json

    m = load_model(name)
    c = ParallelConfig(tp=1, pp=1, dp=8, ep=8 if m.experts else 1, mb=1, zero=1, recompute="full")
    w = Workload(global_batch=64, seq_len=4096)
    text, _ = emit_text("megatron", c, w, m.layers, m.is_moe, model=m)
    problem = ["--model", name, "--cluster", "h100-sxm", "--gpus", "8"]
    assert main(["evaluate", "--megatron-args", text.replace("\\\n", " "), *problem, "--json"]) == 0
    back = json.loads(capsys.readouterr().out)
    pins = ["--tp", "1", "--pp", "1", "--mb", "1", "--zero", "1", "--recompute", "full", "--bucket-mb", "40"]
    pins += ["--no-sp", "--chunks", "1", "--vp", "1"] + (["--ep", "8"] if m.experts else [])
    assert main(["evaluate", *problem, "--global-batch", "64", "--seq", "4096", *pins, "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert back["config"] == direct["config"]
    assert back["step_time_s"] == pytest.approx(direct["step_time_s"], rel=1e-9)
