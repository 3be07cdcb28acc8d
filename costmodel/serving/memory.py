"""Memory of one GPU while serving: weights, KV cache, activation workspace, reserve.

* Weights: the stage's parameters (:func:`costmodel.physics.memory.stage_contents.stage_params`; experts split by
  ``ep``) in the workload's format (BF16 2 B, FP8 1 B per parameter; embeddings and LM head
  are counted in that format too, an assumption: FP8 checkpoints often keep them in BF16).
* KV cache: every running sequence of the replica keeps ``input_len + output_len`` tokens of
  this stage's layers (:mod:`costmodel.physics.kernels.kvcache`).
* Workspace: the tensors alive at the peak of one layer's forward over the largest prefill
  batch (inference frees each tensor once consumed, so nothing is kept across layers): the
  residual stream and its normalised copy (``2 h`` values per token) plus the larger of the
  attention projections (``q + 2 kv`` in, ``q`` out, split by ``tp``) and the MLP
  (up-projection ``2 f`` for SwiGLU, activation ``f``; for MoE ``f`` counts the ``topk``
  routed and the shared experts), BF16, plus the FP32 logits of the prefill batch.
* Reserve: :data:`costmodel.physics.memory.stage_memory.RESERVED_BYTES` (CUDA context, NCCL, fragmentation).

The largest concurrency a replica holds is its KV pool over the KV per sequence, on its tightest stage: the pool is
``HBM - weights - workspace - reserve`` with no engine named, or what the engine's own memory setting leaves
(:mod:`costmodel.serving.kv_pool`).

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> from costmodel.spec.workload import Workload
>>> w = Workload(mode="infer", global_batch=8, input_len=2000, output_len=500)
>>> m = serving_memory(load_model("llama3-70b"), load_cluster("h100-sxm").with_gpus(8), w,
...                    ParallelConfig(tp=8), "bf16", 8, 4)
>>> m["kv_cache_bytes_per_sequence_per_gpu"] == 2500 * 2 * 80 * 1 * 128 * 2   # 1 KV head per GPU at tp=8
True
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.physics.kernels.kvcache import kv_bytes_per_token
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.memory.stage_memory import RESERVED_BYTES
from costmodel.physics.memory.stage_contents import layer_params, stage_params
from costmodel.serving.kv_pool import kv_pool_bytes
from costmodel.spec.stages import stage_layers
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import DTYPE_BYTES, GiB


def check_weights_fit(model: ModelSpec, cluster: ClusterSpec, dtype: str) -> None:
    """Raise SpecError when the weights cannot fit even spread evenly over every GPU."""
    n = cluster.num_gpus
    per_gpu = model.params * DTYPE_BYTES[dtype] / n
    usable = cluster.device.hbm_bytes - RESERVED_BYTES
    if per_gpu > usable:
        raise SpecError(
            "gpus",
            n,
            (
                f"enough to hold the weights at any TP/PP/EP: {model.name} has {model.params / 1e9:.0f}e9 "
                f"parameters = {model.params * DTYPE_BYTES[dtype] / GiB:.0f} GiB in {dtype}, "
                f"{per_gpu / GiB:.1f} GiB per GPU even split over all {n} GPUs, more than the "
                f"{usable / GiB:.1f} GiB usable of {cluster.device.hbm_bytes / GiB:.0f} GiB HBM "
                f"({RESERVED_BYTES / GiB:.0f} GiB reserved); use more GPUs, fp8 weights or a larger device"
            ),
        )


def prefill_workspace_bytes(model: ModelSpec, tokens: float, c: ParallelConfig) -> float:
    """Peak live activation bytes of one layer's forward over ``tokens`` tokens on one GPU (see module doc)."""
    t = c.tp
    attn = (2 * model.q_dim + 2 * model.kv_heads * model.head_dim) / t
    if model.is_moe:
        f = (model.topk * model.moe_ffn_hidden) / c.expert_tp() + model.shared_experts * model.moe_ffn_hidden / t
        f = max(f, model.ffn_hidden / t if model.dense_layers else 0.0)
    else:
        f = model.ffn_hidden / t
    mlp = (3 if model.activation == "swiglu" else 2) * f
    return tokens * ACT_BYTES * (2 * model.hidden + max(attn, mlp))


def serving_memory(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    c: ParallelConfig,
    kv_dtype: str,
    batch_per_replica: int,
    prefill_batch: int,
    engine: str | None = None,
    token_budget: int = 8192,
    draft: str | None = None,
) -> dict:
    """Peak bytes on the tightest GPU of a replica and the concurrency it can hold (see module doc); ``engine``
    (and its step ``token_budget``) sizes the KV pool as that engine does (:mod:`costmodel.serving.kv_pool`).
    ``draft``: the speculative draft the last stage also holds (:mod:`costmodel.serving.speculative`): ``"mtp"`` the
    model's MTP modules (their weights and one KV layer each), ``"eagle"`` one dense decoder layer of the model
    (weights and KV; an assumed size: the draft's own checkpoint is not read)."""
    check_weights_fit(model, cluster, w.dtype)
    hbm = cluster.device.hbm_bytes
    seq = w.input_len + w.output_len
    wb = DTYPE_BYTES[w.dtype]
    workspace = prefill_workspace_bytes(model, prefill_batch * w.input_len, c)
    workspace += 4 * prefill_batch * model.vocab / c.tp  # FP32 logits of the last tokens
    best, cap = None, None
    for stage in range(c.pp):
        layers = stage_layers(model.layers, c.pp, stage, c.layers_per_stage)
        last = stage == c.pp - 1
        # serving loads the MTP modules only to draft with them (speculative decoding): else the decoder's weights only
        mtp = draft == "mtp" and last
        dense, expert = stage_params(model if mtp or not model.mtp_layers else replace(model, mtp_layers=0), c, stage)
        extra_layers = model.mtp_layers if mtp else 0
        if draft == "eagle" and last:
            dense += layer_params(model, c, False)[0]
            extra_layers = 1
        weights = (dense + expert) * wb
        kv_token = kv_bytes_per_token(model, kv_dtype, c.tp, layers=len(layers) + extra_layers)
        kv = batch_per_replica * seq * kv_token
        total = weights + kv + workspace + RESERVED_BYTES
        pool = kv_pool_bytes(
            engine, hbm, weights, workspace, RESERVED_BYTES, tp=c.tp, pp=c.pp, token_budget=token_budget
        )
        hold = max(0, int(pool // (seq * kv_token))) if kv_token else batch_per_replica
        cap = hold if cap is None else min(cap, hold)
        if best is None or total > best["total_bytes"]:
            best = {
                "stage": stage,
                "weights_bytes": weights,
                "kv_cache_bytes": kv,
                "workspace_bytes": workspace,
                "reserved_bytes": RESERVED_BYTES,
                "total_bytes": total,
                "kv_cache_bytes_per_token_per_gpu": kv_token,
                "kv_cache_bytes_per_sequence_per_gpu": seq * kv_token,
            }
    best["max_concurrency_per_replica"] = cap
    notes = []
    if best["weights_bytes"] + workspace + RESERVED_BYTES > hbm:
        notes.append(
            f"weights alone need {best['weights_bytes'] / GiB:.1f} GiB per GPU (stage {best['stage']}) "
            f"of {hbm / GiB:.0f} GiB HBM: raise tp, pp or ep"
        )
    elif cap < batch_per_replica:
        notes.append(
            f"KV cache: {batch_per_replica} sequences per replica do not fit; at most {cap} of "
            f"{seq} tokens ({best['kv_cache_bytes_per_sequence_per_gpu'] / GiB:.2f} GiB each per GPU)"
        )
    best["notes"] = notes
    return best
