"""The model a Megatron-LM argument line describes: its shape (``--num-layers``, ``--hidden-size`` ... as
:class:`~costmodel.spec.specs.ModelSpec` fields), dropout and MTP layers, as Megatron reads them."""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from .megatron_args import normalise
from .megatron_values import _get_int, _none, as_bool


#: the model-shape arguments :func:`model_fields` needs (the vocabulary: either name)
SHAPE_ARGS = ("num_layers", "hidden_size", "num_attention_heads", "padded_vocab_size")


def missing_shape(args: dict) -> list[str]:
    """The :data:`SHAPE_ARGS` that ``args`` does not state (``vocab_size`` stands for ``padded_vocab_size``)."""
    a = normalise(args)
    return [
        n for n in SHAPE_ARGS if _none(a.get(n)) and not (n == "padded_vocab_size" and not _none(a.get("vocab_size")))
    ]


def model_fields(args: dict) -> dict:
    """:class:`~costmodel.spec.specs.ModelSpec` keyword arguments from the model-shape arguments.

    Raises :class:`SpecError` naming the first required shape argument that is missing.
    """
    a = normalise(args)
    req = {}
    for key, name in (("layers", "num_layers"), ("hidden", "hidden_size"), ("heads", "num_attention_heads")):
        v = _get_int(a, name)
        if v is None:
            raise SpecError(name, None, "present in the logged arguments (or give --model)")
        req[key] = v
    m = dict(req)
    m["ffn_hidden"] = _get_int(a, "ffn_hidden_size") or 4 * req["hidden"]
    vocab = _get_int(a, "padded_vocab_size") or _get_int(a, "vocab_size")
    if vocab is None:
        raise SpecError("padded_vocab_size", None, "present in the logged arguments (or give --model)")
    m["vocab"] = vocab
    gqa = "group_query_attention" not in a or as_bool("group_query_attention", a["group_query_attention"])
    groups = _get_int(a, "num_query_groups")
    if groups and gqa:
        m["kv_heads"] = groups
    kv_channels = _get_int(a, "kv_channels")
    if kv_channels and kv_channels != req["hidden"] // req["heads"]:
        m["head_dim"] = kv_channels
    if "swiglu" in a and as_bool("swiglu", a["swiglu"]):
        m["activation"] = "swiglu"
    if "untie_embeddings_and_output_weights" in a:
        m["tied_embeddings"] = not as_bool(
            "untie_embeddings_and_output_weights", a["untie_embeddings_and_output_weights"]
        )
    elif "share_embeddings_and_output_weights" in a:  # NeMo's name
        m["tied_embeddings"] = as_bool("share_embeddings_and_output_weights", a["share_embeddings_and_output_weights"])
    else:  # Megatron-LM's default: --untie-embeddings-and-output-weights off, the output layer shares the embedding
        m["tied_embeddings"] = True
    experts = _get_int(a, "num_experts")
    if experts:
        m["experts"] = experts
        m["topk"] = _get_int(a, "moe_router_topk") or 2
        moe_ffn = _get_int(a, "moe_ffn_hidden_size")
        if moe_ffn:
            m["moe_ffn_hidden"] = moe_ffn
        shared = _get_int(a, "moe_shared_expert_intermediate_size")
        if shared:
            m["shared_experts"] = max(1, round(shared / (moe_ffn or m["ffn_hidden"])))
    m["mtp_layers"] = mtp_layers(a)
    m.update(dropout_fields(a))
    m.update(position_fields(a))
    if experts:
        m.update(router_fields(a))
        m.update(drop_fields(a))
    return m


def _get_float(a: dict, name: str):
    if _none(a.get(name)):
        return None
    try:
        v = float(a[name])
    except (TypeError, ValueError):
        raise SpecError(name, a[name], "a number") from None
    if not v >= 0:
        raise SpecError(name, a[name], "a non-negative number")
    return v


def position_fields(args: dict) -> dict:
    """``max_position_embeddings``, the RoPE base and scaling and QK-norm as the line states them (the
    :class:`~costmodel.spec.specs.ModelSpec` fields :mod:`planner.emit_arch` writes; unstated: left out).
    ``--rope-scaling-factor`` is Llama 3.x's only with ``--use-rope-scaling``; ``--rotary-scaling-factor`` is
    YaRN's under ``--multi-latent-attention`` (Megatron-LM d98e8a64 arguments.py)."""
    a, out = normalise(args), {}
    if _get_int(a, "max_position_embeddings"):
        out["max_position_embeddings"] = _get_int(a, "max_position_embeddings")
    if _get_float(a, "rotary_base"):
        out["rope_theta"] = _get_float(a, "rotary_base")
    if "use_rope_scaling" in a and as_bool("use_rope_scaling", a["use_rope_scaling"]):
        out.update(rope_scaling="llama3", rope_scaling_factor=_get_float(a, "rope_scaling_factor") or 8.0)
    elif _get_float(a, "rotary_scaling_factor") and as_bool(
        "multi_latent_attention", a.get("multi_latent_attention", False)
    ):
        out.update(rope_scaling="yarn", rope_scaling_factor=_get_float(a, "rotary_scaling_factor"))
        if _get_float(a, "mscale_all_dim") is not None:
            out["rope_mscale_all_dim"] = _get_float(a, "mscale_all_dim")
    if "qk_layernorm" in a:
        out["qk_layernorm"] = as_bool("qk_layernorm", a["qk_layernorm"])
    return out


def router_fields(args: dict) -> dict:
    """The router flags (``--moe-router-score-function``, ``--moe-router-enable-expert-bias``, ``--moe-router-num-groups``,
    ``--moe-router-group-topk``, ``--moe-router-topk-scaling-factor``) as ModelSpec fields."""
    a, out = normalise(args), {}
    score = a.get("moe_router_score_function")
    if score in ("softmax", "sigmoid"):  # another (sqrtsoftplus) costs the same and is not recorded
        out["router_score_function"] = score
    if "moe_router_enable_expert_bias" in a:
        out["router_expert_bias"] = as_bool("moe_router_enable_expert_bias", a["moe_router_enable_expert_bias"])
    if _get_int(a, "moe_router_num_groups"):
        out.update(
            router_num_groups=_get_int(a, "moe_router_num_groups"),
            router_group_topk=_get_int(a, "moe_router_group_topk") or 0,
        )
    if _get_float(a, "moe_router_topk_scaling_factor"):
        out["router_topk_scaling_factor"] = _get_float(a, "moe_router_topk_scaling_factor")
    return out


def drop_fields(args: dict) -> dict:
    """Token dropping as the arguments run it: ``moe_capacity_factor`` (``--moe-expert-capacity-factor``; unstated or
    negative: None, dropless, as Megatron-Core's ``TransformerConfig.__post_init__``@d98e8a6 makes a negative factor)
    and ``moe_pad_to_capacity`` (``--moe-pad-expert-input-to-capacity``, default False).

    >>> drop_fields({"moe_expert_capacity_factor": "1.0", "moe_pad_expert_input_to_capacity": "True"})
    {'moe_capacity_factor': 1.0, 'moe_pad_to_capacity': True}
    >>> drop_fields({})
    {'moe_capacity_factor': None, 'moe_pad_to_capacity': False}
    """
    a = normalise(args)
    raw = a.get("moe_expert_capacity_factor")
    try:
        c = None if _none(raw) or float(raw) < 0 else float(raw)
    except (TypeError, ValueError):
        raise SpecError("moe_expert_capacity_factor", raw, "a number") from None
    pad = "moe_pad_expert_input_to_capacity" in a and as_bool(
        "moe_pad_expert_input_to_capacity", a["moe_pad_expert_input_to_capacity"]
    )
    return {"moe_capacity_factor": c, "moe_pad_to_capacity": pad}


#: Megatron-Core ``TransformerConfig`` defaults (``hidden_dropout: float = 0.1``, ``attention_dropout: float = 0.1``,
#: ``megatron/core/transformer/transformer_config.py`` @d98e8a64): what an unstated ``--hidden-dropout`` runs
MEGATRON_DROPOUT = {"hidden_dropout": 0.1, "attention_dropout": 0.1}


def dropout_fields(args: dict) -> dict:
    """``hidden_dropout`` and ``attention_dropout`` as stated (``--hidden-dropout``, NeMo's ``hidden_dropout:``),
    else Megatron-Core's defaults (:data:`MEGATRON_DROPOUT`)."""
    a = normalise(args)
    out = {}
    for name, default in MEGATRON_DROPOUT.items():
        v = a.get(name)
        if _none(v):
            out[name] = default
            continue
        try:
            p = float(v)
        except (TypeError, ValueError):
            raise SpecError(name, v, "a probability in [0, 1)") from None
        if not 0 <= p < 1:
            raise SpecError(name, v, "a probability in [0, 1)")
        out[name] = p
    return out


def mtp_layers(args: dict) -> int:
    """MTP modules the command line trains: ``--mtp-num-layers`` (Megatron-LM arguments.py: default None, no MTP)."""
    n = _get_int(normalise(args), "mtp_num_layers")
    if n is not None and n < 0:
        raise SpecError("mtp_num_layers", n, "a non-negative integer")
    return n or 0
