"""Hugging Face config.json -> ModelSpec.

The dicts below copy the architecture keys of the public config.json files (Hugging Face Hub,
files as published by each model's owner); keys that do not affect the shape are mostly left out.
"""

import json
from dataclasses import replace

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.hf_config import model_from_hf_config
from costmodel.spec.presets import load_model

# meta-llama/Meta-Llama-3-8B config.json
LLAMA3_8B = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
# mistralai/Mixtral-8x7B-v0.1 config.json
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
# Qwen/Qwen3-30B-A3B config.json
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}
# deepseek-ai/DeepSeek-V3 config.json
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "v_head_dim": 128,
    "vocab_size": 129280,
}
# openai-community/gpt2 config.json (124M)
GPT2 = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}
# EleutherAI/gpt-neox-20b config.json
GPT_NEOX_20B = {
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_act": "gelu_fast",
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "model_type": "gpt_neox",
    "num_attention_heads": 64,
    "num_hidden_layers": 44,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "use_parallel_residual": True,
    "vocab_size": 50432,
}

# google/gemma-2-27b config.json (all keys as published)
GEMMA2_27B = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": 1,
    "final_logit_softcapping": 30.0,
    "head_dim": 128,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 4608,
    "initializer_range": 0.02,
    "intermediate_size": 36864,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 32,
    "num_hidden_layers": 46,
    "num_key_value_heads": 16,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 144,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "sliding_window_size": 4096,
    "torch_dtype": "float32",
    "transformers_version": "4.42.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}
# google/gemma-7b config.json (architecture keys)
GEMMA_7B = {
    "architectures": ["GemmaForCausalLM"],
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "vocab_size": 256000,
}


def same_shape(a, b):
    return replace(a, name="x") == replace(b, name="x")


def test_llama3_8b():
    m = model_from_hf_config(LLAMA3_8B)
    assert m.name == "meta-llama/Meta-Llama-3-8B"
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (32, 4096, 32, 8, 128)
    assert (m.ffn_hidden, m.vocab, m.activation, m.tied_embeddings, m.is_moe) == (14336, 128256, "swiglu", False, False)
    assert same_shape(m, load_model("llama3-8b"))
    assert m.params == pytest.approx(8.03e9, rel=0.01)  # model card: 8.03B


def test_mixtral_8x7b():
    m = model_from_hf_config(MIXTRAL_8X7B)
    assert m.name == "mixtral"  # no _name_or_path: model_type
    assert (m.experts, m.topk, m.moe_ffn_hidden, m.dense_layers, m.moe_layers) == (8, 2, 14336, 0, 32)
    assert same_shape(m, load_model("mixtral-8x7b"))
    # Jiang et al. 2024: 46.7B total, 12.9B active
    assert m.params == pytest.approx(46.7e9, rel=0.01)
    assert m.active_params == pytest.approx(12.9e9, rel=0.01)


def test_qwen3_30b_a3b():
    m = model_from_hf_config(QWEN3_30B_A3B)
    assert (m.heads, m.kv_heads, m.head_dim, m.q_dim) == (32, 4, 128, 4096)
    assert (m.experts, m.topk, m.moe_ffn_hidden, m.shared_experts, m.moe_layers) == (128, 8, 768, 0, 48)
    assert same_shape(m, load_model("qwen3-30b-a3b"))
    # Qwen3 technical report / model card: 30.5B total, 3.3B active
    assert m.params == pytest.approx(30.5e9, rel=0.02)
    assert m.active_params == pytest.approx(3.3e9, rel=0.03)


def test_qwen_moe_sparse_step_and_mlp_only_layers():
    d = dict(QWEN3_30B_A3B, num_hidden_layers=8, decoder_sparse_step=2, mlp_only_layers=[1])
    # sparse layers: (i+1) % 2 == 0 -> 1, 3, 5, 7; layer 1 is MLP-only -> 3 MoE layers
    m = model_from_hf_config(d)
    assert (m.moe_layers, m.dense_layers) == (3, 5)


def test_qwen2_moe_shared_expert_width():
    d = dict(
        QWEN3_30B_A3B,
        model_type="qwen2_moe",
        moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632,
        num_experts=60,
        num_experts_per_tok=4,
    )
    assert model_from_hf_config(d).shared_experts == 4


def test_deepseek_v3():
    m = model_from_hf_config(DEEPSEEK_V3)
    assert m.is_mla and (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim) == (1536, 512, 64)
    assert (m.head_dim, m.v_head_dim, m.dense_layers, m.moe_layers) == (128, 128, 3, 58)
    assert (m.experts, m.topk, m.shared_experts, m.moe_ffn_hidden, m.ffn_hidden) == (256, 8, 1, 2048, 18432)
    assert same_shape(m, load_model("deepseek-v3"))
    # DeepSeek-V3 technical report: 671B total, 37B activated (MTP module excluded)
    assert m.params == pytest.approx(671e9, rel=0.01)
    assert m.active_params == pytest.approx(37e9, rel=0.03)


def test_deepseek_without_q_lora_and_with_layer_freq():
    d = dict(DEEPSEEK_V3, q_lora_rank=None, num_hidden_layers=10, first_k_dense_replace=1, moe_layer_freq=2)
    m = model_from_hf_config(d)
    assert m.q_lora_rank == 0 and m.is_mla
    assert m.moe_layers == 4  # layers 2, 4, 6, 8


def test_gpt2():
    m = model_from_hf_config(GPT2)
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab) == (12, 768, 12, 3072, 50257)
    assert m.activation == "gelu" and m.tied_embeddings
    assert m.params == pytest.approx(124.4e6, rel=0.02)  # 124M; biases and position embeddings not modelled
    assert model_from_hf_config(dict(GPT2, n_inner=1000)).ffn_hidden == 1000


def test_gpt_neox_20b():
    m = model_from_hf_config(GPT_NEOX_20B)
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.activation) == (44, 6144, 64, 24576, "gelu")
    assert not m.tied_embeddings
    assert not model_from_hf_config(
        {k: v for k, v in GPT_NEOX_20B.items() if k != "tie_word_embeddings"}
    ).tied_embeddings
    assert m.params == pytest.approx(20.55e9, rel=0.01)  # Black et al. 2022: 20.55B


def test_gemma2_27b_is_gated_tied_and_27_2b():
    m = model_from_hf_config(GEMMA2_27B)
    # head_dim 128 is not hidden/heads = 144; the query scale (query_pre_attn_scalar) holds no weights
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.q_dim) == (46, 4608, 32, 16, 128, 4096)
    assert m.activation == "swiglu" and m.mlp_matrices == 3  # GeGLU: gate, up, down
    assert m.tied_embeddings  # GemmaConfig ties; the file leaves the key out
    # Gemma 2 technical report (Team et al. 2024), Table 2: 26,047,480,320 non-embedding
    # + 1,179,648,000 embedding = 27,227,128,320; the planner leaves out 2 of Gemma-2's 4 norms per layer
    assert m.params == pytest.approx(27_227_128_320, rel=1e-4)


def test_gemma_7b_gelu_is_gated_too():
    m = model_from_hf_config(GEMMA_7B)
    assert m.activation == "swiglu" and m.tied_embeddings and m.head_dim == 256
    assert m.params == pytest.approx(8.54e9, rel=0.005)  # Gemma report (Team et al. 2024), Table 1: 8.54B


@pytest.mark.parametrize(
    "model_type,tied",
    [
        ("gemma", True),
        ("gemma2", True),
        ("gemma3_text", True),
        ("llama", False),
        ("qwen2", False),
        ("mistral", False),
        ("gpt_neox", False),
    ],
)
def test_tie_word_embeddings_defaults_per_model_type(model_type, tied):
    d = {k: v for k, v in dict(LLAMA3_8B, model_type=model_type).items() if k != "tie_word_embeddings"}
    assert model_from_hf_config(d).tied_embeddings is tied
    assert model_from_hf_config(dict(d, tie_word_embeddings=not tied)).tied_embeddings is (not tied)  # as written


def test_unknown_model_type_warns_once_and_loads():
    from costmodel.spec.hf_config import UnknownModelTypeWarning

    with pytest.warns(UnknownModelTypeWarning, match="model_type='falcon_x'"):
        m = model_from_hf_config(dict(LLAMA3_8B, model_type="falcon_x"))
    assert m.layers == 32 and not m.tied_embeddings  # the file's own tie_word_embeddings
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model_from_hf_config(LLAMA3_8B)  # a known family: no warning


def test_cli_shows_the_derived_parameter_count(tmp_path, capsys):
    import json as json_
    from planner import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2_27B))
    argv = [
        "evaluate",
        "--model",
        str(path),
        "--cluster",
        "h100-sxm",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "4096",
        "--tp",
        "8",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("gemma2 (27.2B params) on 8 x")
    assert cli.main(argv + ["--json"]) == 0
    model = json_.loads(capsys.readouterr().out)["model"]
    assert model["name"] == "gemma2" and model["params"] == pytest.approx(27.2e9, rel=0.002)
    assert cli.main(["explain", *argv[1:], "--json"]) == 0
    assert json_.loads(capsys.readouterr().out)["model"]["params"] == model["params"]
    assert cli.main(["explain", *argv[1:]]) == 0
    assert capsys.readouterr().out.startswith("gemma2 (27.2B params) on 8 x")


def test_cli_warns_in_one_line_on_an_unknown_model_type(tmp_path, capsys):
    from planner import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(LLAMA3_8B, model_type="falcon_x")))
    assert (
        cli.main(
            [
                "evaluate",
                "--model",
                str(path),
                "--cluster",
                "h100-sxm",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--seq",
                "4096",
                "--tp",
                "8",
                "--json",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert json.loads(out)["model"]["params"] > 0
    assert err.count("\n") == 1 and err.startswith("planner: warning: model_type='falcon_x'")


@pytest.mark.parametrize(
    "act,expected",
    [("silu", "swiglu"), ("swiglu", "swiglu"), ("gelu", "gelu"), ("gelu_pytorch_tanh", "gelu"), ("relu2", "relu2")],
)
def test_activation(act, expected):
    assert model_from_hf_config(dict(LLAMA3_8B, hidden_act=act)).activation == expected


def test_nemotron_relu2():
    d = dict(LLAMA3_8B, model_type="nemotron", hidden_act="relu2", intermediate_size=16384)
    assert model_from_hf_config(d).mlp_matrices == 2


def test_multimodal_text_config():
    d = {"_name_or_path": "some/vlm", "model_type": "llava", "text_config": LLAMA3_8B}
    m = model_from_hf_config(d)
    assert m.name == "some/vlm" and m.layers == 32


@pytest.mark.parametrize(
    "cfg,key",
    [
        (LLAMA3_8B, "num_hidden_layers"),
        (LLAMA3_8B, "vocab_size"),
        (MIXTRAL_8X7B, "num_experts_per_tok"),
        (DEEPSEEK_V3, "qk_rope_head_dim"),
        (GPT2, "n_head"),
    ],
)
def test_missing_key_names_hf_key(cfg, key):
    with pytest.raises(SpecError) as e:
        model_from_hf_config({k: v for k, v in cfg.items() if k != key})
    assert e.value.field == key and key in str(e.value)


def test_bad_values():
    with pytest.raises(SpecError) as e:
        model_from_hf_config(dict(LLAMA3_8B, hidden_act="tanh"))
    assert e.value.field == "hidden_act"
    with pytest.raises(SpecError) as e:
        model_from_hf_config(dict(LLAMA3_8B, hidden_size="4096"))
    assert e.value.field == "hidden_size"
    with pytest.raises(SpecError):
        model_from_hf_config(dict(LLAMA3_8B, num_key_value_heads=5))  # not a divisor of 32
    with pytest.raises(SpecError):
        model_from_hf_config([1, 2])


def test_load_model_reads_hf_config_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(DEEPSEEK_V3))
    assert same_shape(load_model(str(p)), load_model("deepseek-v3"))
