"""Map a Hugging Face ``config.json`` dict to a :class:`~costmodel.spec.specs.ModelSpec`.

Families read: Llama, Mistral/Mixtral, Qwen2/Qwen3, Qwen2-MoE/Qwen3-MoE, DeepSeek-V2/V3 (MLA),
Nemotron, Gemma/Gemma-2/Gemma-3, GPT-2 and GPT-NeoX (:data:`FAMILIES`). Anything else with the
Llama key names (``num_hidden_layers``, ``hidden_size``, ...) goes through the same path, with
an :class:`UnknownModelTypeWarning`. A missing required key raises
:class:`~costmodel.spec.errors.SpecError` naming the Hugging Face key.

Two things a ``config.json`` often leaves to its ``transformers`` config class, read here per
``model_type``: whether the LM head is tied to the embedding (``save_pretrained`` writes
``tie_word_embeddings`` only when it differs from the class default: Gemma and GPT-2 tie,
Llama does not), and whether the MLP is gated (Gemma's ``gelu_pytorch_tanh`` MLP is GeGLU,
three matrices like SwiGLU, although its activation is named like GPT-2's ungated GELU). The
dropout probabilities are read where the file has them (:data:`HIDDEN_DROPOUT_KEYS`,
:data:`ATTENTION_DROPOUT_KEYS`), else the family's (:data:`DROPOUT_DEFAULTS`: 0.0 but GPT-2's 0.1).

>>> m = model_from_hf_config({"_name_or_path": "meta-llama/Meta-Llama-3-8B", "model_type": "llama",
...     "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
...     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
...     "hidden_act": "silu", "tie_word_embeddings": False})
>>> m.name, m.kv_heads, m.activation, round(m.params / 1e9, 2)
('meta-llama/Meta-Llama-3-8B', 8, 'swiglu', 8.03)
>>> g = model_from_hf_config({"model_type": "gemma2", "num_hidden_layers": 46, "hidden_size": 4608,
...     "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 36864,
...     "vocab_size": 256000, "hidden_activation": "gelu_pytorch_tanh"})
>>> g.activation, g.tied_embeddings, round(g.params / 1e9, 1)   # Gemma 2 report, Table 2: 27.2B
('swiglu', True, 27.2)
>>> model_from_hf_config({"model_type": "gpt2", "n_layer": 12})
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: n_embd=None: must be present in the Hugging Face config (model_type=gpt2)
"""

from __future__ import annotations

import warnings

from costmodel.spec.errors import SpecError, clip
from costmodel.spec.specs import ModelSpec

_REQUIRED = object()

#: hidden_act -> ModelSpec.activation. Llama-family configs say "silu" for the gated SwiGLU MLP.
_ACTIVATIONS = {
    "silu": "swiglu",
    "swish": "swiglu",
    "swiglu": "swiglu",
    "gelu": "gelu",
    "gelu_new": "gelu",
    "gelu_fast": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_python": "gelu",
    "gelu_accurate": "gelu",
    "quick_gelu": "gelu",
    "relu2": "relu2",
    "squared_relu": "relu2",
    "squared-relu": "relu2",
}


#: model_type -> the ``tie_word_embeddings`` default of its ``transformers`` config class
#: (``LlamaConfig``: False, ``GemmaConfig``: True, ...), used when the file leaves the key out.
#: Qwen2 ties its small models and says so in their files.
FAMILIES = {
    "llama": False,
    "mistral": False,
    "mixtral": False,
    "qwen2": False,
    "qwen2_moe": False,
    "qwen3": False,
    "qwen3_moe": False,
    "deepseek_v2": False,
    "deepseek_v3": False,
    "nemotron": False,
    "gpt_neox": False,
    "gemma": True,
    "gemma2": True,
    "gemma3": True,
    "gemma3_text": True,
    "gpt2": True,
}
#: families whose MLP is gated whatever ``hidden_act`` is called (Gemma: GeGLU, Team et al. 2024)
GATED_MLP = ("gemma", "gemma2", "gemma3", "gemma3_text")
#: families that are mixtures of experts by construction: an expert count below 1 is an error
#: there, not a dense model (``transformers``' MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig,
#: DeepseekV2Config, DeepseekV3Config hold the count in the keys :func:`_decoder` reads)
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
#: ``PretrainedConfig``'s default, for a model_type not in :data:`FAMILIES`
DEFAULT_TIED = True


class UnknownModelTypeWarning(UserWarning):
    """A ``model_type`` the loader has no family rules for: read with Llama key names."""


class _Config:
    """Typed access to the config dict; errors name the Hugging Face key."""

    def __init__(self, d: dict):
        self.d = d
        self.kind = clip(d.get("model_type") or "unknown")  # echoed in messages: a long one is cut

    def get(self, *keys: str, default=_REQUIRED, kind=int):
        for k in keys:
            v = self.d.get(k)
            if v is not None:
                ok = isinstance(v, kind) and not isinstance(v, bool) if kind is int else isinstance(v, kind)
                if not ok:
                    raise SpecError(
                        k,
                        v,
                        f"{'an integer' if kind is int else getattr(kind, '__name__', 'a number')} "
                        f"in the Hugging Face config (model_type={self.kind})",
                    )
                return v
        if default is _REQUIRED:
            raise SpecError(keys[0], None, f"present in the Hugging Face config (model_type={self.kind})")
        return default


def _activation(c: _Config, default: str) -> str:
    """``ModelSpec.activation``; ``swiglu`` stands for any gated (3-matrix) MLP, GeGLU included."""
    key = next(
        (k for k in ("hidden_activation", "hidden_act", "activation_function") if c.d.get(k) is not None), "hidden_act"
    )
    act = c.d.get(key, default)
    if act not in _ACTIVATIONS:
        raise SpecError(key, act, f"one of {', '.join(sorted(_ACTIVATIONS))}")
    if c.kind in GATED_MLP and _ACTIVATIONS[act] == "gelu":
        return "swiglu"  # GeGLU: gate and up projections, then down, as SwiGLU
    return _ACTIVATIONS[act]


def _tied(c: _Config) -> bool:
    """``tie_word_embeddings`` as written, else the default of the config class of ``model_type``."""
    return c.get("tie_word_embeddings", default=FAMILIES.get(c.kind, DEFAULT_TIED), kind=bool)


#: Hugging Face keys of the residual/hidden and the attention dropout, first found wins (GPT-NeoX, BLOOM,
#: Falcon: ``hidden_dropout``; GPT-2: ``resid_pdrop`` / ``attn_pdrop``; BERT-style: ``*_dropout_prob``)
HIDDEN_DROPOUT_KEYS = ("hidden_dropout", "resid_pdrop", "hidden_dropout_prob")
ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")
#: model_type -> (hidden, attention) dropout of its ``transformers`` config class when the file leaves the keys
#: out: ``GPT2Config`` defaults ``resid_pdrop``, ``attn_pdrop`` to 0.1 (``configuration_gpt2.py`` @01ae98ae);
#: ``LlamaConfig`` has ``attention_dropout`` 0.0 and no residual dropout at all (``configuration_llama.py``
#: @008e5743), as the other Llama-style families: 0.0 for every other model_type.
DROPOUT_DEFAULTS = {"gpt2": (0.1, 0.1)}


def _dropout(c: _Config) -> dict:
    """``hidden_dropout`` and ``attention_dropout`` as the file states them, else the family's default."""
    hidden, attention = DROPOUT_DEFAULTS.get(c.kind, (0.0, 0.0))
    out = {}
    for field, keys, default in (
        ("hidden_dropout", HIDDEN_DROPOUT_KEYS, hidden),
        ("attention_dropout", ATTENTION_DROPOUT_KEYS, attention),
    ):
        key = next((k for k in keys if c.d.get(k) is not None), keys[0])
        p = c.get(key, default=default, kind=(int, float))
        if isinstance(p, bool) or not 0 <= p < 1:
            raise SpecError(key, p, f"a probability in [0, 1) in the Hugging Face config (model_type={c.kind})")
        out[field] = float(p)
    return out


#: families whose attention normalises queries and keys per head (``Qwen3Attention.q_norm`` / ``k_norm`` in
#: ``transformers`` ``models/qwen3/modeling_qwen3.py``, ``qwen3_moe``, ``gemma3``): the file has no key for it;
#: other families say so with ``use_qk_norm`` (GLM-4-MoE, Llama 4) or ``qk_layernorm`` (Nemotron-H style)
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe", "gemma3", "gemma3_text")
#: ``rope_scaling`` types the emitted command line can state (Megatron-LM ``--use-rope-scaling`` for Llama 3.x,
#: YaRN through ``--rotary-scaling-factor`` for multi-latent attention); any other is read as unscaled, with a warning
ROPE_SCALINGS = ("llama3", "yarn")


def _position_fields(c: _Config) -> dict:
    """``max_position_embeddings``, ``rope_theta`` and ``rope_scaling`` (type, factor, YaRN's ``mscale_all_dim``)
    and ``qk_layernorm`` as the file states them (``transformers`` 5 nests RoPE in ``rope_parameters``)."""
    rope = c.d.get("rope_parameters") if isinstance(c.d.get("rope_parameters"), dict) else {}
    out = {"max_position_embeddings": c.get("max_position_embeddings", "n_positions", default=None)}
    if rope.get("rope_theta") is not None:
        out["rope_theta"] = float(_number(rope, "rope_theta", "rope_parameters.rope_theta", c))
    elif (key := next((k for k in ("rope_theta", "rotary_emb_base") if c.d.get(k) is not None), None)) is not None:
        out["rope_theta"] = float(_number(c.d, key, key, c))
    scaling = c.get("rope_scaling", default=None, kind=dict) or (rope if rope.get("rope_type") != "default" else None)
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type")
    if kind in ROPE_SCALINGS:
        out.update(rope_scaling=kind, rope_scaling_factor=float(_number(scaling, "factor", "rope_scaling.factor", c)))
        if kind == "yarn" and scaling.get("mscale_all_dim") is not None:
            out["rope_mscale_all_dim"] = float(_number(scaling, "mscale_all_dim", "rope_scaling.mscale_all_dim", c))
    elif kind not in (None, "default"):
        warnings.warn(f"rope_scaling type {clip(str(kind))!r} is read as unscaled RoPE", UserWarning, stacklevel=3)
    qk = c.get("use_qk_norm", "qk_layernorm", default=None, kind=bool)
    out["qk_layernorm"] = qk if qk is not None else c.kind in QK_NORM_FAMILIES
    return out


def _number(d: dict, key: str, name: str, c: _Config):
    v = d.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
        raise SpecError(name, v, f"a non-negative number in the Hugging Face config (model_type={c.kind})")
    return v


def _router_fields(c: _Config) -> dict:
    """The router of a DeepSeek-style MoE config: ``scoring_func`` (``sigmoid`` in V3), ``topk_method``
    ``noaux_tc`` (the auxiliary-loss-free expert bias, DeepSeek-V3 report Sec. 2.1.2), group-limited routing
    (``n_group`` groups, ``topk_group`` of them per token) and ``routed_scaling_factor``."""
    score = c.get("scoring_func", default="softmax", kind=str)
    if score not in ("softmax", "sigmoid"):
        raise SpecError(
            "scoring_func", clip(score), f"softmax or sigmoid in the Hugging Face config (model_type={c.kind})"
        )
    out = {
        "router_score_function": score,
        "router_expert_bias": c.get("topk_method", default="", kind=str) == "noaux_tc",
    }
    if c.get("n_group", default=0) > 1:
        out.update(router_num_groups=c.get("n_group"), router_group_topk=c.get("topk_group"))
    scale = c.get("routed_scaling_factor", default=None, kind=(int, float))
    if scale is not None and scale != 1:
        out["router_topk_scaling_factor"] = float(scale)
    return out


def _name(d: dict) -> str:
    return clip(d.get("_name_or_path") or d.get("model_type") or "model")


def _gpt2(c: _Config) -> ModelSpec:
    h = c.get("n_embd")
    return ModelSpec(
        name=_name(c.d),
        layers=c.get("n_layer"),
        hidden=h,
        heads=c.get("n_head"),
        ffn_hidden=c.get("n_inner", default=None) or 4 * h,
        vocab=c.get("vocab_size"),
        activation=_activation(c, "gelu_new"),
        tied_embeddings=_tied(c),
        max_position_embeddings=c.get("n_positions", default=None),
        **_dropout(c),
    )


def _moe_layer_count(c: _Config, layers: int) -> int:
    """MoE layers of a Qwen-MoE or DeepSeek config (which layers are sparse)."""
    if c.d.get("n_routed_experts"):  # DeepSeek-V2/V3
        first = c.get("first_k_dense_replace", default=0)
        freq = c.get("moe_layer_freq", default=1)
        return sum(1 for i in range(first, layers) if i % freq == 0)
    step = c.get("decoder_sparse_step", default=1)  # Qwen2-MoE / Qwen3-MoE
    dense = set(c.get("mlp_only_layers", default=[], kind=list))
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _decoder(c: _Config) -> ModelSpec:
    """Llama-style key names: Llama, Mistral, Mixtral, Qwen*, DeepSeek, Nemotron, GPT-NeoX."""
    layers = c.get("num_hidden_layers", "n_layers", "num_layers")
    hidden = c.get("hidden_size")
    heads = c.get("num_attention_heads")
    neox = c.kind == "gpt_neox"
    kw = dict(
        name=_name(c.d),
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=c.get("vocab_size"),
        kv_heads=c.get("num_key_value_heads", default=None),
        head_dim=c.get("head_dim", default=None),
        activation=_activation(c, "gelu" if neox else "silu"),
        tied_embeddings=_tied(c),
        mtp_layers=c.get("num_nextn_predict_layers", default=0),  # DeepSeek-V3's MTP modules
        **_dropout(c),
        **_position_fields(c),
    )
    expert_keys = ("num_local_experts", "num_experts", "n_routed_experts")
    experts = c.get(*expert_keys, default=0)
    if experts < 0 or (experts == 0 and c.kind in MOE_FAMILIES):
        key = next((k for k in expert_keys if c.d.get(k) is not None), expert_keys[0])
        raise SpecError(
            key,
            experts,
            f"a positive integer for model_type={c.kind} (a mixture-of-experts family; "
            "a dense model has another model_type)",
        )
    moe_ffn = c.get("moe_intermediate_size", default=None)
    if experts:
        moe_layers = layers if "num_local_experts" in c.d else _moe_layer_count(c, layers)
        if moe_ffn is None:
            moe_ffn = c.get("intermediate_size")
        shared = c.get("n_shared_experts", default=0)
        if c.d.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one wide shared expert
            shared = max(1, c.d["shared_expert_intermediate_size"] // moe_ffn)
        # ModelSpec puts dense layers first; the count (hence params and FLOPs) is what matters.
        kw.update(
            experts=experts,
            topk=c.get("num_experts_per_tok"),
            moe_ffn_hidden=moe_ffn,
            shared_experts=shared,
            dense_layers=layers - moe_layers,
            **_router_fields(c),
        )
    kw["ffn_hidden"] = c.get("intermediate_size", default=None) or moe_ffn or c.get("intermediate_size")
    if c.get("kv_lora_rank", default=0):  # multi-head latent attention (DeepSeek-V2/V3)
        kw.update(
            q_lora_rank=c.get("q_lora_rank", default=0),
            kv_lora_rank=c.get("kv_lora_rank"),
            qk_rope_head_dim=c.get("qk_rope_head_dim"),
            head_dim=c.get("qk_nope_head_dim"),
            v_head_dim=c.get("v_head_dim"),
        )
    return ModelSpec(**kw)


def model_from_hf_config(d: dict) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` dict (see the module doc)."""
    if not isinstance(d, dict):
        raise SpecError("config", type(d).__name__, "a dict read from a Hugging Face config.json")
    if "hidden_size" not in d and isinstance(d.get("text_config"), dict):  # multimodal wrappers
        t = d["text_config"]
        d = {**t, "_name_or_path": d.get("_name_or_path") or t.get("_name_or_path")}
    c = _Config(d)
    if c.kind not in FAMILIES:
        tied = d.get("tie_word_embeddings", DEFAULT_TIED)
        warnings.warn(
            f"model_type={c.kind!r} is not a family the Hugging Face loader knows "
            f"({', '.join(sorted(FAMILIES))}): read with Llama key names, "
            f"tie_word_embeddings={str(tied).lower()}; check the parameter count",
            UnknownModelTypeWarning,
            stacklevel=2,
        )
    if c.kind == "gpt2" or ("n_layer" in d and "n_embd" in d):
        return _gpt2(c)
    return _decoder(c)
