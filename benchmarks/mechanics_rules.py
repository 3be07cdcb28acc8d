"""What each framework version issues, computed from the rules read from its code.

The rules are the rows of ``benchmarks/data/components/framework_mechanics.csv`` (each cites
path@commit and line; README_mechanics.md says how they were read). This module turns them into
the collectives a framework issues for one plan: Megatron-Core's DDP / distributed-optimizer
buckets per pipeline stage, DeepSpeed ZeRO-3's per-module parameter fetches and reduce buckets,
torchtitan / FSDP2's per-unit all-gathers and reduce-scatters. It knows nothing of the cost
model's timing; :mod:`component_mechanics` compares the two.

Parameter tensors per layer are :func:`costmodel.physics.mechanics.zero3_fetch.layer_tensors`: Megatron-Core (and
Megatron-DeepSpeed) fuse QKV and the gated MLP's first projection (``linear_qkv``,
``linear_fc1``); Hugging Face Llama modules keep ``q_proj k_proj v_proj o_proj gate_proj up_proj
down_proj`` apart (``layout="hf"``). Norm weights are ``hidden`` elements each; biases are not
modelled (as :func:`costmodel.physics.memory.stage_contents.layer_params`). The framework rules (bucket sizes, close
rules, fetch coalescing) are computed here from the CSV values, independently of the cost model.
"""

from __future__ import annotations

import csv
from pathlib import Path

# the tensor split (a shape fact) and the frameworks' bucketing and coalescing loops are the cost
# model's, one place each; the sizes and flags they run with are the rules' values
from costmodel.physics.mechanics.grad_buckets import chunk_tensors
from costmodel.physics.mechanics.grad_buckets import close_ge as grad_close_ge
from costmodel.physics.mechanics.zero3_fetch import deepspeed_fetches, deepspeed_reduces, layer_tensors  # noqa: F401

DATA = Path(__file__).resolve().parent / "data" / "components" / "framework_mechanics.csv"


def load_rules(path: Path = DATA) -> dict:
    """``{(framework, key): value string}`` from the CSV."""
    with open(path, newline="") as f:
        return {(r["framework"], r["key"]): r["value"] for r in csv.DictReader(f)}


def rule(rules: dict, framework: str, key: str) -> float:
    return float(rules[(framework, key)])


def stage_chunks(model, c, stage: int, layout: str = "fused") -> list[tuple[list, list]]:
    """Per model chunk of ``stage`` (the plan's layout): its (dense, expert) tensors in forward
    order, the embedding first in chunk 0 of stage 0, the head (and final norm) last in the last
    chunk of the last stage: :func:`costmodel.physics.mechanics.grad_buckets.chunk_tensors` (a shape fact, one place)."""
    return chunk_tensors(model, c, stage, layout)


#: Megatron-Core's bucket layout (rule 6): tensors in reverse order, a bucket closes after the tensor
#: that brings it to >= ``bucket`` elements -- the cost model's loop, :func:`costmodel.physics.mechanics.grad_buckets.close_ge`
close_ge = grad_close_ge


#: DeepSpeed ZeRO-3's reduce bucket (rule 26): a bucket is reduced before a tensor that would make it
#: exceed ``bucket`` elements -- the cost model's loop, :func:`costmodel.physics.mechanics.zero3_fetch.deepspeed_reduces`
close_gt = deepspeed_reduces


def megatron_bucket_elements(rules: dict, c) -> float | None:
    """Rules 1-3: ``max(40e6, 1e6 * dp_cp)`` elements with ``--overlap-grad-reduce`` (a plan with
    ``bucket_bytes > 0``), ``None`` (one bucket) without."""
    if c.bucket_bytes <= 0:
        return None
    return max(
        rule(rules, "megatron", "bucket_size_base"), rule(rules, "megatron", "bucket_size_per_dp_rank") * c.dp * c.cp
    )


def megatron_bucketed(rules: dict, stage: int, chunk: int) -> bool:
    """Rules 4-5: bucketing is off on pipeline ranks > 0 and on model chunks after the first."""
    off_pp = bool(rule(rules, "megatron", "bucketing_disabled_pp_rank_gt0")) and stage > 0
    off_chunk = bool(rule(rules, "megatron", "bucketing_disabled_chunk_gt0")) and chunk > 0
    return not (off_pp or off_chunk)


def megatron_dp_buckets(rules: dict, model, c, stage: int) -> dict:
    """The gradient buckets Megatron-Core builds on ``stage`` (rules 4-7): ``{"dense": [elements],
    "expert": [...]}`` over all model chunks; bucketing only on pipeline rank 0, chunk 0."""
    size = megatron_bucket_elements(rules, c)
    out = {"dense": [], "expert": []}
    for i, (dense, expert) in enumerate(stage_chunks(model, c, stage)):
        bucketed = size if megatron_bucketed(rules, stage, i) else None
        out["dense"] += close_ge(dense[::-1], bucketed)
        out["expert"] += close_ge(expert[::-1], bucketed)
    return out


def megatron_grad_kind(c) -> str:
    """Rules 8-9: all-reduce without, reduce-scatter with the distributed optimizer."""
    return "reducescatter" if c.zero >= 1 else "allreduce"


def zero3_fetches(rules: dict, tensors: list, prefetch: float | None = None) -> list[float]:
    """DeepSpeed ZeRO-3's all-gathers over one pass of ``tensors`` (rules 20-25): tensors below
    ``stage3_param_persistence_threshold`` stay resident; the rest are fetched per module, the
    prefetch coalescing consecutive tensors into one all-gather until it holds
    ``stage3_prefetch_bucket_size`` elements (a larger tensor is one all-gather of its own).
    Steady state with a complete trace and ``stage3_max_live_parameters`` not binding;
    ``prefetch``: the configured bucket, else the default."""
    if prefetch is None:
        prefetch = rule(rules, "deepspeed", "stage3_prefetch_bucket_size")
    # the coalescing loop is the cost model's (one place); the thresholds are the rules' values
    return deepspeed_fetches(tensors, prefetch, rule(rules, "deepspeed", "stage3_param_persistence_threshold"))


def zero3_persistent(rules: dict, tensors: list) -> float:
    """Elements of ``tensors`` below the persistence threshold (never gathered, reduced in full)."""
    keep = rule(rules, "deepspeed", "stage3_param_persistence_threshold")
    return sum(t for t in tensors if t < keep)


def zero3_reduce_buckets(rules: dict, tensors_all_layers: list, bucket: float | None = None) -> list[float]:
    """Reduce-scatters of one micro-batch's backward over the stage's tensors (rules 16, 26, 27);
    ``bucket``: the configured ``reduce_bucket_size``, else the default."""
    return deepspeed_reduces(
        tensors_all_layers[::-1], rule(rules, "deepspeed", "reduce_bucket_size") if bucket is None else bucket
    )
