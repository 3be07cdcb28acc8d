"""How much of a GPU each serving engine gives its KV cache, by its default memory setting (issue 40).

An engine does not fill the whole HBM with KV cache: each keeps a share for itself, by a rule of its own,
read in its code at the version the rows name.

* **vLLM** (V1): ``--gpu-memory-utilization`` 0.9 (``CacheConfig.gpu_memory_utilization``) is the fraction of
  the *total* memory the instance may use; ``Worker.determine_available_memory`` gives the KV cache that
  budget less the weights, the profiled peak activations and the non-torch memory:
  ``0.9 HBM - weights - workspace - reserve``.
* **SGLang** (0.5.6, ``python/sglang/srt/server_args.py`` ``ServerArgs._handle_gpu_memory_settings``, l. 701-862
  of the wheel): ``mem_fraction_static = (gpu_mem - reserved_mem) / gpu_mem`` is the share for weights and KV
  pool, with ``reserved_mem`` in MB ``512 + 1.5 max(chunked_prefill_size, 2048) + 2 cuda_graph_max_bs + 1024 tp
  pp / 8``, at least 10,240 on a GPU of more than 60 GB; ``cuda_graph_max_bs`` by memory class (8; 24 or 80; 32 or
  160; 256 or 512 for tp < 4 or not, below 20, 35, 60 and 160 GB; 512 above). So the KV pool is ``HBM - weights - reserved_mem`` (the activations and CUDA graphs live in
  the reserve: the workspace is not subtracted again).
* **TensorRT-LLM**: ``KvCacheConfig.free_gpu_memory_fraction`` 0.9 ("The fraction of GPU memory ... allocated for
  the KV cache. Default is 90%", ``tensorrt_llm/llmapi/llm_args.py``) of the memory free once the weights and the
  runtime's activation buffers are in place: ``0.9 (HBM - weights - workspace - reserve)``.

``engine=None`` (no engine named) keeps the whole remainder, ``HBM - weights - workspace - reserve``: an upper
bound. Dense DP-attention and speculative-decoding reserves of SGLang are not modelled (neither is charged).

>>> from costmodel.spec.units import GiB
>>> sglang_reserved_bytes(80 * GiB, tp=8, pp=1, chunked_prefill=8192) / 2**20   # H100, TP8: 512+12288+1024+1024
14848.0
>>> sglang_reserved_bytes(80 * GiB, tp=1, pp=1, chunked_prefill=2048) / 2**20   # the 10 GiB floor above 60 GB
10240.0
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError

#: vLLM ``gpu_memory_utilization`` and TensorRT-LLM ``free_gpu_memory_fraction`` defaults (module doc)
VLLM_GPU_MEMORY_UTILIZATION = 0.9
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
MB = 2**20


def sglang_reserved_bytes(hbm_bytes: float, *, tp: int, pp: int, chunked_prefill: int) -> float:
    """SGLang 0.5.6's ``reserved_mem`` (module doc), in bytes, for a GPU of ``hbm_bytes``."""
    gpu_mb = hbm_bytes / MB
    small = tp < 4  # cuda_graph_max_bs by memory class (T4 / A10 / A100-40GB / H100, H200 / B200)
    ladder = ((20, 8, 8), (35, 24, 80), (60, 32, 160), (160, 256, 512))
    graph_bs = next((lo if small else hi for gb, lo, hi in ladder if gpu_mb < gb * 1024), 512)
    reserved = 512 + 1.5 * max(chunked_prefill, 2048) + 2 * graph_bs + tp * pp / 8 * 1024
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved * MB


def kv_pool_bytes(
    engine: str | None,
    hbm_bytes: float,
    weights: float,
    workspace: float,
    reserve: float,
    *,
    tp: int = 1,
    pp: int = 1,
    token_budget: int = 8192,
) -> float:
    """Bytes of KV cache ``engine`` allocates on a GPU holding ``weights`` (module doc); at least 0."""
    rest = hbm_bytes - weights - workspace - reserve
    if engine is None:
        pool = rest
    elif engine == "vllm":
        pool = rest - (1 - VLLM_GPU_MEMORY_UTILIZATION) * hbm_bytes
    elif engine == "sglang":
        pool = hbm_bytes - weights - sglang_reserved_bytes(hbm_bytes, tp=tp, pp=pp, chunked_prefill=token_budget)
    elif engine == "trtllm":
        pool = TRTLLM_FREE_GPU_MEMORY_FRACTION * rest
    else:
        raise SpecError("engine", engine, "one of vllm, sglang, trtllm")
    return max(0.0, pool)
