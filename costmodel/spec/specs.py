"""Frozen, keyword-only specs of what is planned: the model, the cluster and the workload.

SI units inside, the unit in every name. Each spec validates itself on construction and
raises :class:`~costmodel.spec.errors.SpecError` naming the field, the value and what is allowed.

>>> m = ModelSpec(name="tiny", layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=1000)
>>> m.kv_heads, m.head_dim, m.is_moe
(4, 16, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

from costmodel.spec.bounds import MAX_SIZE, _bounded, _positive, _positive_int
from costmodel.spec.errors import SpecError

ACTIVATIONS = ("gelu", "swiglu", "relu2")
#: the routing skew an auxiliary-loss-balanced router leaves (``ModelSpec.moe_load_cv``): Wang et al. 2024,
#: arXiv 2408.15664, Table 2, MaxVio_global 0.72 over 64 experts / 2.4 standard deviations of their maximum
AUX_LOSS_LOAD_CV = 0.3
#: the skew the auxiliary-loss-free expert bias leaves: the same Table 2, Loss-Free MaxVio_global 0.04 at 1B and 3B
#: (64 experts, so the busiest is z = Phi^-1((64 - 0.375) / 64.25) = 2.40 standard deviations above the mean)
LOSS_FREE_LOAD_CV = 0.04 / NormalDist().inv_cdf((64 - 0.375) / 64.25)
MOE_ROUTINGS = ("uniform", "consecutive")  # costmodel.physics.comm.ep_dispatch.fanout
#: the largest ``moe_load_cv``: every token on one of the most experts a model may have (bounds.MAX_SIZE),
#: sqrt(100,000 - 1) = 316
MAX_LOAD_CV = (MAX_SIZE["experts"] - 1) ** 0.5


# --------------------------------------------------------------------------- model
@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer, dense or mixture-of-experts.

    Attributes
    ----------
    layers, hidden, heads : transformer depth, model width, attention heads.
    kv_heads : key/value heads (GQA); ``None`` means ``heads`` (multi-head attention).
    head_dim : per-head width; ``None`` means ``hidden // heads``.
    ffn_hidden : MLP inner width of a dense layer.
    activation : ``gelu`` or ``relu2`` (2-matrix MLP) or ``swiglu`` (3-matrix gated MLP).
    vocab : vocabulary size. tied_embeddings : LM head shares the embedding matrix.
    experts : routed experts per MoE layer; 0 means a dense model.
    topk : experts each token is routed to. moe_ffn_hidden : inner width of one expert.
    shared_experts : always-active experts per MoE layer.
    dense_layers : leading layers that are dense in an MoE model (DeepSeek ``first_k_dense_replace``).
    moe_load_cv : coefficient of variation of the tokens each routed expert receives under the
        model's load balancing (0: perfectly balanced). Unset: :data:`LOSS_FREE_LOAD_CV` for a router with the
        auxiliary-loss-free expert bias (``router_expert_bias``, DeepSeek-V3's ``noaux_tc``), else
        :data:`AUX_LOSS_LOAD_CV`, 0.3: Wang et al. 2024,
        "Auxiliary-Loss-Free Load Balancing", arXiv 2408.15664, Table 2, report MaxVio_global
        (max load over mean, minus 1) of 0.52-0.72 for auxiliary-loss-balanced MoE models with
        64 routed experts; the expected maximum of 64 normal loads is about 2.4 standard
        deviations above the mean, so 0.72 / 2.4 = 0.3. Sets the slowest EP rank's load
        (:func:`costmodel.physics.kernels.moe_load.moe_imbalance`). Checked against published expert-load statistics by
        ``benchmarks/component_routing.py`` (RESULTS.md section 37: 0.22-0.40 for auxiliary-loss routers,
        about 0.015 for loss-free ones, 0.12-0.25 for a quantile-balanced one early in training).
    moe_routing : how tokens spread over the experts, which sets how many EP ranks and nodes one
        token reaches (:func:`costmodel.physics.comm.ep_dispatch.fanout`): ``uniform`` (each token's top-k a random
        set: a balanced learned router, Megatron-Core's forced load balancing) or ``consecutive``
        (NeMo AutoModel's ``FakeBalancedGate``: token t to experts ``t*k .. t*k + k - 1`` mod experts).
    q_lora_rank, kv_lora_rank, qk_rope_head_dim, v_head_dim : multi-head latent attention
        (DeepSeek-V2/V3); ``kv_lora_rank = 0`` means ordinary attention.
    mtp_layers : multi-token-prediction modules (DeepSeek-V3 ``num_nextn_predict_layers``; Megatron-Core
        ``--mtp-num-layers``), trained with the model (:mod:`costmodel.physics.kernels.mtp`); 0: none.
    hidden_dropout, attention_dropout : dropout probabilities the model is trained with, on the embedding and
        residual branches, and on the attention probabilities (Megatron-Core ``TransformerConfig.hidden_dropout``,
        ``attention_dropout``). Default 0.1 each, Megatron-Core's defaults; Llama-family models and their recipes
        train with 0.0 (each preset states its own). At 0 no mask is stored or written (:mod:`costmodel.physics.kernels.dropout`).
    max_position_embeddings, rope_theta, rope_scaling (``llama3`` or ``yarn``), rope_scaling_factor, rope_mscale_all_dim,
        qk_layernorm, router_score_function (``softmax`` or ``sigmoid``), router_expert_bias, router_num_groups,
        router_group_topk, router_topk_scaling_factor : what the model trains with beyond its shape (the Hugging Face
        config's keys; None / off: unstated), for the emitted command line only (:mod:`planner.emit_arch`); no cost.
    moe_capacity_factor, moe_pad_to_capacity : token dropping (Megatron-Core ``--moe-expert-capacity-factor C``: an
        expert takes at most ``ceil(tokens * topk / experts * C)`` token-slots, the rest are dropped) and padding to that
        capacity (``--moe-pad-expert-input-to-capacity``: every expert runs exactly its capacity, static shapes, no
        host sync). None / False: dropless (Megatron-Core's default). What they cost:
        :func:`costmodel.physics.kernels.moe_load.moe_imbalance` and the all-to-all's padded rows
        (:func:`costmodel.physics.comm.ep_dispatch.ep_alltoall_bytes`).
    sliding_window, sliding_window_layers : a causal sliding window of ``sliding_window`` keys (0: none) on
        ``sliding_window_layers`` of the layers, the others attending to the whole causal sequence (gpt-oss: 128
        tokens on every other layer, Megatron-Core ``window_size=(128, 0)``, ``window_attn_skip_freq=2``; Hugging
        Face ``layer_types``). Fused attention kernels skip the tiles outside the window
        (:func:`costmodel.physics.kernels.arch_passes.window_time_ratio`); unfused attention computes the whole
        score matrix either way.
    attention_sinks : a learnable per-head logit in the softmax denominator (gpt-oss; Transformer Engine
        ``softmax_type="learnable"``): inside cuDNN's fused attention for Megatron-Core, an eager rescale of
        the attention output for NeMo AutoModel's FlexAttention (:func:`costmodel.physics.kernels.arch_passes.sink_rescale_s`).
    linear_bias : every linear layer has a bias (gpt-oss; Megatron-Core ``add_bias_linear``): free in GEMM
        epilogues, but the routed experts' biases are added per expert in eager PyTorch by the training
        frameworks (:func:`costmodel.physics.kernels.arch_passes.expert_bias_bytes`).
    activation_clamp : the gated activation's inputs are clamped to this magnitude (gpt-oss: 7.0, Megatron-Core
        ``activation_func_clamp_value``; None: no clamp). The activation itself (gpt-oss's
        ``quick_gelu(x) * (y + 1)``) moves the bytes of ``swiglu`` and is charged as it; the clamp's own passes are
        charged where a framework runs them outside the fused kernel (:func:`costmodel.physics.kernels.arch_passes.clamp_bytes`).
    """

    name: str = "model"
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    kv_heads: int | None = None
    head_dim: int | None = None
    activation: str = "gelu"
    tied_embeddings: bool = False
    experts: int = 0
    topk: int = 0
    moe_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    moe_load_cv: float | None = None
    moe_routing: str = "uniform"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    max_position_embeddings: int | None = None
    rope_theta: float | None = None
    rope_scaling: str | None = None
    rope_scaling_factor: float | None = None
    rope_mscale_all_dim: float | None = None
    qk_layernorm: bool = False
    router_score_function: str = "softmax"
    router_expert_bias: bool = False
    router_num_groups: int = 0
    router_group_topk: int = 0
    router_topk_scaling_factor: float | None = None
    moe_capacity_factor: float | None = None
    moe_pad_to_capacity: bool = False
    sliding_window: int = 0
    sliding_window_layers: int = 0
    attention_sinks: bool = False
    linear_bias: bool = False
    activation_clamp: float | None = None

    def __post_init__(self):
        if not isinstance(self.name, str):  # a list or object would fail later, unhashable, as a traceback
            raise SpecError("name", self.name, "a string")
        for f in ("layers", "hidden", "heads", "ffn_hidden", "vocab"):
            _positive_int(f, getattr(self, f))
        _bounded(self)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise SpecError("heads", self.heads, f"a divisor of hidden={self.hidden} (or give head_dim)")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _positive_int("kv_heads", self.kv_heads)
        _positive_int("head_dim", self.head_dim)
        if self.heads % self.kv_heads:
            raise SpecError("kv_heads", self.kv_heads, f"a divisor of heads={self.heads}")
        if self.activation not in ACTIVATIONS:
            raise SpecError("activation", self.activation, f"one of {', '.join(ACTIVATIONS)}")
        for f in (
            "experts",
            "topk",
            "shared_experts",
            "dense_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "v_head_dim",
            "mtp_layers",
        ):
            _positive_int(f, getattr(self, f), allow_zero=True)
        if self.experts:
            if not 1 <= self.topk <= self.experts:
                raise SpecError("topk", self.topk, f"between 1 and experts={self.experts}")
            if self.moe_ffn_hidden is None:
                object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden)
            _positive_int("moe_ffn_hidden", self.moe_ffn_hidden)
            if self.dense_layers >= self.layers:
                raise SpecError("dense_layers", self.dense_layers, f"less than layers={self.layers}")
        elif self.topk or self.shared_experts:
            raise SpecError("experts", self.experts, "positive when topk or shared_experts is set")
        if self.moe_load_cv is None:  # the skew the model's load balancing leaves (the field's docstring)
            object.__setattr__(self, "moe_load_cv", LOSS_FREE_LOAD_CV if self.router_expert_bias else AUX_LOSS_LOAD_CV)
        _positive("moe_load_cv", self.moe_load_cv, allow_zero=True)
        if not self.moe_load_cv <= MAX_LOAD_CV:  # inf and 1e30 overflowed the cost model
            raise SpecError("moe_load_cv", self.moe_load_cv, f"at most {MAX_LOAD_CV:.0f} (a sanity bound)")
        for f in ("hidden_dropout", "attention_dropout"):
            p = getattr(self, f)
            if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
                raise SpecError(f, p, "a probability in [0, 1)")
        if self.moe_routing not in MOE_ROUTINGS:
            raise SpecError("moe_routing", self.moe_routing, f"one of {', '.join(MOE_ROUTINGS)}")
        if self.kv_lora_rank and not self.v_head_dim:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        for f in ("max_position_embeddings", "rope_theta", "rope_scaling_factor", "router_topk_scaling_factor"):
            if getattr(self, f) is not None:
                (_positive_int if f == "max_position_embeddings" else _positive)(f, getattr(self, f))
        if self.rope_mscale_all_dim is not None:
            _positive("rope_mscale_all_dim", self.rope_mscale_all_dim, allow_zero=True)
        for f, allowed in (
            ("rope_scaling", (None, "llama3", "yarn")),
            ("router_score_function", ("softmax", "sigmoid")),
        ):
            if getattr(self, f) not in allowed:
                raise SpecError(f, getattr(self, f), f"one of {', '.join(str(a).lower() for a in allowed)}")
        for f in ("tied_embeddings", "qk_layernorm", "router_expert_bias", "moe_pad_to_capacity"):
            if not isinstance(getattr(self, f), bool):
                raise SpecError(f, getattr(self, f), "true or false")
        if self.moe_capacity_factor is not None:
            _positive("moe_capacity_factor", self.moe_capacity_factor)
            if not self.experts:
                raise SpecError("moe_capacity_factor", self.moe_capacity_factor, "unset for a dense model (no experts)")
            if self.moe_capacity_factor > self.experts / self.topk:  # a capacity of every token already
                raise SpecError(
                    "moe_capacity_factor",
                    self.moe_capacity_factor,
                    f"at most experts / topk = {self.experts / self.topk:g} (an expert's capacity is then every token)",
                )
        elif self.moe_pad_to_capacity:  # Megatron-Core asserts it (token_dispatcher.py@d98e8a6, drop_and_pad)
            raise SpecError("moe_pad_to_capacity", True, "false without moe_capacity_factor (no capacity to pad to)")
        for f in ("router_num_groups", "router_group_topk"):
            _positive_int(f, getattr(self, f), allow_zero=True)
        for f in ("sliding_window", "sliding_window_layers"):
            _positive_int(f, getattr(self, f), allow_zero=True)
        if self.sliding_window_layers > self.layers:
            raise SpecError("sliding_window_layers", self.sliding_window_layers, f"at most layers={self.layers}")
        if bool(self.sliding_window) != bool(self.sliding_window_layers):
            raise SpecError(
                "sliding_window_layers", self.sliding_window_layers, "positive exactly when sliding_window is set"
            )
        for f in ("attention_sinks", "linear_bias"):
            if not isinstance(getattr(self, f), bool):
                raise SpecError(f, getattr(self, f), "true or false")
        if self.activation_clamp is not None:
            _positive("activation_clamp", self.activation_clamp)

    # ---- structure
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers (all but the leading dense ones)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 3 for SwiGLU, 2 otherwise."""
        return 3 if self.activation == "swiglu" else 2

    @property
    def q_dim(self) -> int:
        """Width of the query projection output."""
        return self.heads * (self.head_dim + (self.qk_rope_head_dim if self.is_mla else 0))

    @property
    def kv_dim(self) -> int:
        """Width of one of K or V per token (GQA-reduced)."""
        return self.kv_heads * self.head_dim

    # ---- parameter counts (one place for these formulas)
    @property
    def attn_params(self) -> int:
        """Attention weights of one layer (biases and norms ignored).

        MHA/GQA: Q and O are h x (heads*d), K and V are h x (kv_heads*d).
        MLA (DeepSeek-V3 paper, section 2.1.1): low-rank Q and KV projections.
        """
        h = self.hidden
        if self.is_mla:
            qk = self.head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * qk) if self.q_lora_rank else h * self.heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.heads * (
                self.head_dim + self.v_head_dim
            )
            return q + kv + self.heads * self.v_head_dim * h
        return h * self.heads * self.head_dim * 2 + h * self.kv_dim * 2

    def mlp_params(self, ffn: int) -> int:
        return self.mlp_matrices * self.hidden * ffn

    @property
    def dense_layer_params(self) -> int:
        return self.attn_params + self.mlp_params(self.ffn_hidden) + 2 * self.hidden

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert."""
        return self.mlp_params(self.moe_ffn_hidden) if self.is_moe else 0

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer: attention, routed and shared experts, router, norms."""
        if not self.is_moe:
            return 0
        return (
            self.attn_params
            + (self.experts + self.shared_experts) * self.expert_params
            + self.hidden * self.experts
            + 2 * self.hidden
        )

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters. GPT-3 175B gives about 174.6e9 (Brown et al. 2020, Table 2.1)."""
        layers = (self.layers - self.moe_layers) * self.dense_layer_params + self.moe_layers * self.moe_layer_params
        head = 0 if self.tied_embeddings else self.embedding_params
        return layers + self.embedding_params + head + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters touched per token (routed experts counted top-k times)."""
        if not self.is_moe:
            return self.params
        inactive = (self.experts - self.topk) * self.expert_params * self.moe_layers
        return self.params - inactive


# the hardware specs live in costmodel.spec.hardware; every importer of costmodel.spec.specs keeps its names
from costmodel.spec.hardware import ClusterSpec, DeviceSpec, DmaEngineClass, LinkSpec  # noqa: E402

__all__ = ["ACTIVATIONS", "MOE_ROUTINGS", "ModelSpec", "ClusterSpec", "DeviceSpec", "DmaEngineClass", "LinkSpec"]
