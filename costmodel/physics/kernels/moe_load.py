"""How unevenly a MoE layer's tokens fall on its experts and expert-parallel ranks: the load's coefficient of
variation per expert and the slowest rank's share (the pace every EP rank waits for)."""

from __future__ import annotations

import math
from statistics import NormalDist
from costmodel.spec.specs import ModelSpec


def moe_expert_load_cv(model: ModelSpec, slots_per_expert: float) -> float:
    """Coefficient of variation of one routed expert's token count in one batch.

    ``sqrt(model.moe_load_cv**2 + 1 / slots_per_expert)``: the routing skew the load balancing leaves
    (``ModelSpec.moe_load_cv``), plus the multinomial sampling of a finite batch (variance equal to
    the mean). The one place of this formula; :func:`moe_imbalance` and the routing component
    benchmark (``benchmarks/component_routing.py``) use it.

    >>> from costmodel.spec.presets import load_model
    >>> round(moe_expert_load_cv(load_model("qwen3-30b-a3b"), 100), 4)   # sqrt(0.09 + 0.01)
    0.3162
    """
    return math.sqrt(model.moe_load_cv**2 + 1.0 / max(slots_per_expert, 1.0))


def moe_imbalance(model: ModelSpec, ep: int, slots_per_expert: float) -> float:
    """Expected load of the busiest of ``ep`` expert-parallel ranks over the mean load.

    Each expert's token count varies with coefficient of variation
    ``sqrt(model.moe_load_cv**2 + 1 / slots_per_expert)``: the routing skew the load-balancing
    loss leaves, plus the multinomial sampling of a finite batch (variance equal to the mean).
    A rank sums ``experts / ep`` experts, which averages the skew down by ``sqrt(experts / ep)``
    (independent experts, an assumption), and the step waits for the busiest of ``ep`` ranks: the
    expected maximum of ``ep`` normal variables, ``z = Phi^-1((ep - 0.375) / (ep + 0.25))``
    standard deviations above the mean (Blom 1958). Without EP the GPU holds every expert and the
    skew only moves work between them: 1.

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("qwen3-30b-a3b")   # 128 experts; EP 8 -> 16 experts per rank
    >>> round(moe_imbalance(m, 8, 1e9), 3)   # 1 + 1.434 * 0.3 / sqrt(16)
    1.108
    >>> moe_imbalance(m, 1, 256)
    1.0

    With a capacity factor ``C`` (``ModelSpec.moe_capacity_factor``, Megatron-Core ``--moe-expert-capacity-factor``)
    no expert takes more than ``C`` times the mean (``moe_utils.get_capacity``: ``ceil(tokens * topk / experts * C)``),
    so no rank does either: the dropless figure capped at ``C`` (an upper bound: the busiest rank's capped sum can be
    lower). Padded to capacity (``--moe-pad-expert-input-to-capacity``) every expert runs exactly ``C`` times the mean
    token-slots, with or without EP (``MoEAlltoAllTokenDispatcher.preprocess`` @d98e8a6: ``num_out_tokens = capacity
    * num_experts``): ``C``.

    >>> from dataclasses import replace
    >>> round(moe_imbalance(replace(m, moe_capacity_factor=1.0), 8, 1e9), 3), moe_imbalance(
    ...     replace(m, moe_capacity_factor=1.25, moe_pad_to_capacity=True), 1, 256)
    (1.0, 1.25)
    """
    if not model.is_moe:
        return 1.0
    if model.moe_pad_to_capacity:
        return model.moe_capacity_factor
    dropless = 1.0
    if ep > 1:
        cv = moe_expert_load_cv(model, slots_per_expert)
        z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
        dropless += z * cv / math.sqrt(max(1, model.experts // ep))
    return dropless if model.moe_capacity_factor is None else min(dropless, model.moe_capacity_factor)
