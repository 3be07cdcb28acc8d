"""Hugging Face config.json -> ModelSpec.

The dicts below copy the architecture keys of the public config.json files (Hugging Face Hub,
files as published by each model's owner); keys that do not affect the shape are mostly left out.
"""

import json
from dataclasses import replace

import pytest

from costmodel.errors import SpecError
from costmodel.hf_config import model_from_hf_config
from costmodel.presets import load_model

# meta-llama/Meta-Llama-3-8B config.json
LLAMA3_8B = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B", "architectures": ["LlamaForCausalLM"],
    "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
# mistralai/Mixtral-8x7B-v0.1 config.json
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "vocab_size": 32000,
}
# Qwen/Qwen3-30B-A3B config.json
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "vocab_size": 151936,
}
# deepseek-ai/DeepSeek-V3 config.json
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "v_head_dim": 128, "vocab_size": 129280,
}
# openai-community/gpt2 config.json (124M)
GPT2 = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
}
# EleutherAI/gpt-neox-20b config.json
GPT_NEOX_20B = {
    "architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu_fast", "hidden_size": 6144,
    "intermediate_size": 24576, "model_type": "gpt_neox", "num_attention_heads": 64,
    "num_hidden_layers": 44, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True, "vocab_size": 50432,
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
    d = dict(QWEN3_30B_A3B, model_type="qwen2_moe", moe_intermediate_size=1408,
             shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4)
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
    assert not model_from_hf_config({k: v for k, v in GPT_NEOX_20B.items() if k != "tie_word_embeddings"}).tied_embeddings
    assert m.params == pytest.approx(20.55e9, rel=0.01)  # Black et al. 2022: 20.55B


@pytest.mark.parametrize("act,expected", [("silu", "swiglu"), ("swiglu", "swiglu"), ("gelu", "gelu"),
                                          ("gelu_pytorch_tanh", "gelu"), ("relu2", "relu2")])
def test_activation(act, expected):
    assert model_from_hf_config(dict(LLAMA3_8B, hidden_act=act)).activation == expected


def test_nemotron_relu2():
    d = dict(LLAMA3_8B, model_type="nemotron", hidden_act="relu2", intermediate_size=16384)
    assert model_from_hf_config(d).mlp_matrices == 2


def test_multimodal_text_config():
    d = {"_name_or_path": "some/vlm", "model_type": "llava", "text_config": LLAMA3_8B}
    m = model_from_hf_config(d)
    assert m.name == "some/vlm" and m.layers == 32


@pytest.mark.parametrize("cfg,key", [(LLAMA3_8B, "num_hidden_layers"), (LLAMA3_8B, "vocab_size"),
                                     (MIXTRAL_8X7B, "num_experts_per_tok"), (DEEPSEEK_V3, "qk_rope_head_dim"),
                                     (GPT2, "n_head")])
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
