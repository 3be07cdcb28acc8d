"""The fixed time of one decode-attention call: what a decode step's attention layer costs before its KV-cache
reads matter (issue 40, ``benchmarks/notes/2026-12-06-small-batch-decode.md``).

A decode step's attention layer, as the engines run it under CUDA graphs, is more than one kernel holding
no work: the new token's K and V are written into the paged cache (vLLM ``reshape_and_cache_flash``, SGLang
``set_kv_buffer``, TensorRT-LLM's fused QKV preprocessing), then the decode kernel runs (FlashAttention /
FlashInfer / TRTLLM-GEN, with a split-KV combine where the context is split). AIConfigurator measured that
call, per engine, on a grid of batch, context and head counts (``generation_attention_perf``: SGLang's
``RadixAttention`` forward, vLLM's attention layer, TensorRT-LLM's attention op, each replayed as a CUDA
graph, ``collector/helper.py`` ``benchmark_with_power``; ai-dynamo/aiconfigurator@095f58a). At small
context the time does not depend on batch, context or heads: about 9-12 us on Hopper and Blackwell,
14 us on A100, against the single kernel overhead (4 us, ``DeviceSpec.kernel_overhead_s``) the roofline
charged before. Above it the cache reads add their bytes over HBM bandwidth (the roofline of
:func:`costmodel.physics.kernels.compute._decode_attention`); the sum follows the tables (the note's
comparison: H200 vLLM 0.24.0 and TensorRT-LLM, B200 SGLang 0.5.14 and TensorRT-LLM, batch 1-128, context
128-16,384).

:data:`FIXED_S` holds, per table system, the median latency of each engine's newest table over its points
with context ``<= 160`` tokens and batch ``<= 16`` (head_dim 128, BF16 activations and cache, no window,
every head configuration), printed by ``python -m benchmarks.decode_attention_fixed``; a system's value is
the median over its engines (the step model does not know the engine here; the engines differ by up to
2.4 us). Measured. A device without a table (:func:`costmodel.physics.kernels.measured.table_system` None)
is charged :data:`FALLBACK_KERNELS` kernel overheads (the cache write and the attention kernel): assumed.

Training never calls it (decode only).

>>> from costmodel.spec.presets import load_cluster
>>> round(decode_attention_fixed_s(load_cluster("h200").device) * 1e6, 2)
9.62
>>> decode_attention_evidence(load_cluster("b200").device)
'measured'
"""

from __future__ import annotations

from statistics import median

from costmodel.physics.kernels.measured import table_system
from costmodel.physics.tables.mla import mla_decode_curve, mla_decode_lookup

#: per table system: engine table -> median small-context decode-attention latency, us (module doc), from
#: ``python -m benchmarks.decode_attention_fixed --aic <ai-dynamo/aiconfigurator @095f58a>``. Measured.
FIXED_US = {
    "a100_sxm": {"sglang 0.5.10": 14.40, "trtllm 1.0.0": 14.17, "vllm 0.14.0": 14.42},
    "h100_sxm": {"sglang 0.5.14": 9.48, "trtllm 1.3.0rc20": 9.66, "vllm 0.24.0": 11.87},
    "h200_sxm": {"sglang 0.5.14": 9.41, "trtllm 1.3.0rc20": 9.62, "vllm 0.24.0": 11.66},
    "b200_sxm": {"sglang 0.5.14": 10.40, "trtllm 1.3.0rc20": 11.05, "vllm 0.24.0": 9.09},
    "b300_sxm": {"sglang 0.5.14": 10.42, "trtllm 1.3.0rc20": 10.92, "vllm 0.24.0": 9.00},
    "gb200": {"sglang 0.5.14": 10.46, "trtllm 1.3.0rc20": 11.34, "vllm 0.24.0": 10.68},
    "gb300": {"sglang 0.5.14": 10.42, "trtllm 1.3.0rc20": 11.23, "vllm 0.24.0": 9.29},
}
#: per table system: the median over its engines, seconds
FIXED_S = {system: median(per.values()) * 1e-6 for system, per in FIXED_US.items()}
#: a device without a table: the KV-cache write and the attention kernel, one kernel overhead each (assumed)
FALLBACK_KERNELS = 2


def decode_attention_fixed_s(dev) -> float:
    """Seconds of one decode-attention call (one layer) at small context on ``dev`` (module doc)."""
    system, _ = table_system(dev)
    if system in FIXED_S:
        return FIXED_S[system]
    return FALLBACK_KERNELS * dev.kernel_overhead_s


def decode_attention_evidence(dev) -> str:
    """``measured`` where :data:`FIXED_S` times ``dev`` (a stand-in die included), else ``assumed``."""
    system, _ = table_system(dev)
    return "measured" if system in FIXED_S else "assumed"


def _mla_args(model, tp: int, kv_bytes: int) -> tuple[float, str]:
    """The MLA tables' (heads on one of ``tp`` GPUs, cache dtype) of ``model``."""
    return max(1.0, model.heads / tp), "fp8" if kv_bytes == 1 else "bf16"


def mla_curve(model, dev, tp: int, kv_bytes: int):
    """``f(b, s)``: the seconds of :func:`mla_table_s` by the line of the context's grid cell
    (:func:`~costmodel.physics.tables.mla.mla_decode_curve`), resolved once for a serving step's many contexts;
    None where :func:`mla_table_s` is."""
    if not (model.is_mla and dev.kernel_table):
        return None
    return mla_decode_curve(dev, dev.kernel_table, *_mla_args(model, tp, kv_bytes))


def mla_table_s(model, dev, b: float, s: float, tp: int, kv_bytes: int):
    """``(seconds, evidence kind)`` of one MLA decode-attention call (``b`` sequences over ``s`` cached tokens, the
    model's heads over ``tp`` GPUs) from the serving engine's measured MLA kernel (``DeviceSpec.kernel_table``, set
    by :func:`costmodel.serving.engines.engine_cluster`; :mod:`costmodel.physics.tables.mla`), or None where no engine
    is named or its table lacks the GPU or the cache dtype (the caller's roofline stands)."""
    if not (model.is_mla and dev.kernel_table):
        return None
    heads, kv = _mla_args(model, tp, kv_bytes)
    t, ev = mla_decode_lookup(dev, dev.kernel_table, b, s, heads, kv)
    return None if t is None else (t, ev.kind)
