"""How a sharded layer's parameters are all-gathered: one collective per unit, or per module.

FSDP2 (torchtitan ``fully_shard(transformer_block)``, ``torchtitan/distributed/fsdp.py@b5bcd76``
lines 267 and 362-366) and Megatron FSDP gather a layer as one unit: one all-gather per layer and
pass. DeepSpeed ZeRO-3 fetches per submodule (``deepspeed/runtime/zero/partitioned_param_coordinator.py@edaa72212``
``fetch_sub_module``, lines 310-315 and 450-484): each ``nn.Linear`` fetches its parameters and
prefetches the following ones of the recorded trace until the prefetch holds
``stage3_prefetch_bucket_size`` elements; each call is one coalesced all-gather
(``all_gather_coalesced`` -> one ``all_gather_into_tensor``, ``partition_parameters.py@edaa72212``
line 1334). Parameters below ``stage3_param_persistence_threshold`` are never partitioned and never
gathered. So a layer pays one collective latency per weight matrix larger than the prefetch bucket
(a ring all-gather's latency grows with the ring: :func:`costmodel.physics.comm.collectives.ring_latency_s`),
where a per-layer unit pays one.

The tensors are those of Megatron-DeepSpeed's GPT/Llama layer (fused QKV and, for a gated MLP,
fused gate/up projections: four matrices), the model code DeepSpeed's pipeline and ZeRO configs in
:mod:`planner.emit` run with. Hugging Face modules keep Q, K, V (and gate, up) apart:
``layout="hf"``, the plan's ``ParallelConfig.module_layout``.

>>> from costmodel.spec.presets import load_model
>>> from costmodel.spec.plan import ParallelConfig
>>> m = load_model("gpt3-175b")
>>> [round(p / 1e6) for p in layer_tensors(m, ParallelConfig(tp=1), False)[0]]
[0, 453, 151, 0, 604, 604]
>>> len(gather_pieces(m, ParallelConfig(dp=64, zero=3, framework="deepspeed"), False)[0])
4
"""

from __future__ import annotations

from costmodel.frameworks.defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.physics.memory.stage_contents import layer_params

#: ``stage3_param_persistence_threshold`` default, elements (deepspeed/runtime/zero/config.py@edaa72212 line 221)
DS_PERSISTENCE_THRESHOLD = 1e5
#: ``stage3_prefetch_bucket_size`` default, elements (deepspeed/runtime/zero/config.py@edaa72212 line 215)
DS_PREFETCH_BUCKET = 5e7


def deepspeed_buckets(c) -> tuple[float, float]:
    """(``stage3_prefetch_bucket_size``, ``reduce_bucket_size``) in elements as the plan runs: a
    plan with a bucket states both as its bucket in gradient elements (``bucket_bytes /
    grad_elem_bytes``, the conversion ``planner.emit.deepspeed_config`` writes); without one,
    DeepSpeed's defaults (5e7, 5e8)."""
    if c.bucket_bytes > 0:
        n = c.bucket_bytes / grad_elem_bytes(c)
        return n, n
    return DS_PREFETCH_BUCKET, DEEPSPEED_REDUCE_BUCKET_ELEMENTS


def layer_tensors(model, c, moe: bool, layout: str = "fused") -> tuple[list[float], list[float]]:
    """(dense, expert) parameter tensors of one layer on one GPU (elements), in forward order:
    norm, attention projections, norm, (router, shared experts,) MLP; the routed experts' MLPs in
    the expert list. Their sums are :func:`costmodel.physics.memory.stage_contents.layer_params`."""
    h = model.hidden
    d = model.head_dim or h // model.heads
    kv = model.kv_heads or model.heads
    q, k, o = h * model.heads * d / c.tp, h * kv * d / c.tp, h * model.heads * d / c.tp
    rest = model.attn_params / c.tp - (q + 2 * k + o)  # MLA and other shapes: the difference joins QKV
    attn = [q + rest, k, k] if layout == "hf" else [q + 2 * k + rest]
    dense = [float(h)] + attn + [o, float(h)]
    mats = model.mlp_matrices

    def mlp(ffn: int, split: float) -> list[float]:
        up = (mats - 1) * h * ffn / split
        return ([up / (mats - 1)] * (mats - 1) if layout == "hf" else [up]) + [h * ffn / split]

    expert: list[float] = []
    if not moe:
        dense += mlp(model.ffn_hidden, c.tp)
    else:
        dense.append(float(h * model.experts))  # router
        for _ in range(model.shared_experts):
            dense += mlp(model.moe_ffn_hidden, c.tp)
        for _ in range(model.experts // c.ep):
            expert += mlp(model.moe_ffn_hidden, c.expert_tp())
    return dense, expert


def deepspeed_fetches(
    tensors: list[float], prefetch: float = DS_PREFETCH_BUCKET, persistence: float = DS_PERSISTENCE_THRESHOLD
) -> list[float]:
    """DeepSpeed ZeRO-3's all-gathers over one pass of ``tensors`` in steady state (complete trace,
    ``stage3_max_live_parameters`` not binding): tensors below ``persistence`` skipped, the rest
    coalesced in order until a gather holds ``prefetch`` elements.

    >>> deepspeed_fetches([10.0, 6e7, 2e7, 2e7, 2e7, 1e8])
    [60000000.0, 60000000.0, 100000000.0]
    """
    return coalesce([t for t in tensors if t >= persistence], prefetch)


def coalesce(tensors: list[float], threshold: float) -> list[float]:
    """``tensors`` in order, grouped into runs that close after the tensor bringing a run to
    ``>= threshold`` elements (the last run what is left): DeepSpeed's fetch and reduce coalescing and
    Megatron-Core's gradient buckets (:func:`costmodel.physics.mechanics.grad_buckets.close_ge`) alike."""
    out, acc = fill(tensors, threshold)
    if acc > 0:
        out.append(acc)
    return out


def fill(tensors, threshold: float, acc: float = 0.0) -> tuple[list[float], float]:
    """The runs of :func:`coalesce` that ``tensors`` close, walked from a run already holding ``acc``
    elements, and what the open run holds after them.

    >>> fill([30.0, 30.0, 5.0], 50.0, 25.0)
    ([55.0], 35.0)
    """
    closed = []
    for t in tensors:
        acc += t
        if acc >= threshold:
            closed.append(acc)
            acc = 0.0
    return closed, acc


def gather_pieces(model, c, moe: bool) -> tuple[list[float], list[float]]:
    """(dense, expert) parameters of each all-gather the framework issues per pass over one layer,
    in the order of :func:`costmodel.physics.mechanics.fsdp_copies.zero3_groups` (dense first): one piece per group, or
    DeepSpeed's per-module fetches (:func:`deepspeed_fetches`)."""
    dense, expert = layer_params(model, c, moe)
    if c.framework != "deepspeed":
        return [dense], [expert]
    t_dense, t_expert = layer_tensors(model, c, moe, c.module_layout)
    prefetch = deepspeed_buckets(c)[0]
    return deepspeed_fetches(t_dense, prefetch) or [dense], deepspeed_fetches(t_expert, prefetch) or [expert]


def deepspeed_reduces(tensors_reversed: list[float], bucket: float) -> list[float]:
    """DeepSpeed ZeRO-3's gradient reduce-scatters over tensors in backward order: a bucket is
    reduced before a tensor that would make it exceed ``bucket`` elements
    (``deepspeed/runtime/zero/stage3.py@edaa72212`` line 1533, one ``reduce_scatter_coalesced``
    per bucket, line 1813; ZeRO-2 the same rule, ``stage_1_and_2.py@edaa72212`` line 1201).

    >>> deepspeed_reduces([3e8, 3e8, 1e8, 1e8], 5e8)
    [300000000.0, 500000000.0]
    """
    out, acc = [], 0.0
    for t in tensors_reversed:
        if acc + t > bucket and acc > 0:
            out.append(acc)
            acc = 0.0
        acc += t
    if acc > 0:
        out.append(acc)
    return out


def reduce_pieces(model, c, moe: bool) -> tuple[list[float], list[float]]:
    """(dense, expert) parameters of each gradient reduce-scatter one layer's backward issues per
    micro-batch: one per group, or under DeepSpeed its reduce buckets per layer in steady state
    (buckets span layers: :func:`deepspeed_reduces` over a stage's worth of identical layers,
    ``layers // pp``, divided by that layer count and rounded, in equal pieces). The embedding and
    head are charged apart (:mod:`costmodel.physics.mechanics.zero3_edges`).

    >>> from costmodel.spec.presets import load_model
    >>> from costmodel.spec.plan import ParallelConfig
    >>> m = load_model("gpt3-175b")
    >>> len(reduce_pieces(m, ParallelConfig(dp=64, zero=3, framework="deepspeed", bucket_bytes=0), False)[0])
    4
    """
    dense, expert = layer_params(model, c, moe)
    if c.framework != "deepspeed":
        return [dense], [expert]
    t_dense, t_expert = layer_tensors(model, c, moe, c.module_layout)
    bucket = deepspeed_buckets(c)[1]
    reps = max(1, model.layers // c.pp)

    def per_layer(tensors: list[float], total: float) -> list[float]:
        if total <= 0:
            return [total]
        k = max(1, round(len(deepspeed_reduces(tensors[::-1] * reps, bucket)) / reps))
        return [total / k] * k

    return per_layer(t_dense, dense), per_layer(t_expert, expert)
