"""Host (CPU) time a serving engine puts between a request's arrival and its first token (issue 40).

Read in SGLang 0.5.6, the version the development rows ``sglang_cookbook_qwen3_235b_b200_2026`` name (the
PyPI wheel ``sglang-0.5.6-py3-none-any.whl``, tag v0.5.6; the same code is stored in the search index at
sgl-project/sglang@fd1216ca, 0.5.6.post2). Paths are under ``python/sglang/`` and line numbers are the wheel's.

The prefill ("extend") forward runs eagerly, without CUDA graphs
    ``srt/model_executor/model_runner.py`` ``ModelRunner._forward_raw`` (l. 2660-2685): a batch replays a
    CUDA graph only when ``forward_batch.forward_mode.is_cuda_graph()``, which is true for ``DECODE``,
    ``TARGET_VERIFY`` and ``IDLE`` only (``srt/model_executor/forward_batch_info.py`` l. 150-155); an
    ``EXTEND`` batch goes to ``forward_extend`` (l. 2569-2592), which replays the piecewise CUDA graph runner
    only when one was built (``init_piecewise_cuda_graphs`` returns early unless
    ``server_args.enable_piecewise_cuda_graph``, default ``False``, ``srt/server_args.py`` l. 508), and
    otherwise calls ``self.attn_backend.init_forward_metadata`` and ``self.model.forward`` in Python: every
    layer's modules, their Python and their kernel launches run on the host for every prefill step. The host
    issues asynchronously, so a prefill step takes about ``max(GPU time, host time)``
    (:func:`costmodel.physics.kernels.host.host_gap_s` applies the same rule to training): a short prompt on
    a fast GPU is host-bound.

    Host time per layer (:data:`SGLANG_EXTEND_LAYER_HOST_S`): sgl-project/sglang PR #12160 (2025-10-26,
    "support prefill-cuda-graph based on cuda-graph-runner"), SGLang's own scheduler log for a one-new-token
    extend of DeepSeek-V3 (61 layers): ``forward cost`` 82.64 ms eager, 23.10 ms with the prefill replayed as
    a CUDA graph. A graph removes host issue time, not GPU work, so the 59.54 ms difference is the eager
    forward's host time: 0.976 ms per layer. Measured (a contributor's log; the host CPU is not stated:
    taken as x86 and scaled to Grace hosts by :func:`costmodel.physics.kernels.host.host_scale`, ASSUMED).
    Taken per layer for every decoder layer (MLA + MoE there, GQA + MoE or dense elsewhere: ASSUMED the same
    per layer; a dense layer issues fewer ops, so it is likely charged too much). Cross-check, a floor: the
    kernels one Qwen3-MoE extend layer issues (``srt/models/qwen3_moe.py``: fused add-RMSNorm, QKV GEMM, Q and
    K norms, RoPE, KV store, prefill attention, O GEMM, all-reduce, add-RMSNorm, router GEMM, top-k,
    ``moe_align_block_size``, two Triton expert GEMMs, SiLU-and-mul, the sum of the top-k outputs,
    all-reduce: about 18) at the measured 4 us of one eager PyTorch op on an x86 host
    (:data:`costmodel.physics.kernels.host.EAGER_OP_X86_S`) give about 0.07 ms per layer: SGLang's Python
    around each op (module and quant-method dispatch, ``LayerCommunicator``, the attention backend's wrappers)
    is the rest of the measured figure.

What bench_serving times as TTFT, and the hops on the way (``request_path_s``)
    ``bench_serving.py`` ``async_request_sglang_generate`` (l. 521-586) starts its timer before the HTTP POST
    and stops it at the first streamed chunk whose ``text`` is not empty. In between: the HTTP server hands the
    request to ``TokenizerManager`` (``srt/managers/tokenizer_manager.py``), which tokenizes the text prompt
    (``_tokenize_one_request``, l. 672) and sends it to the scheduler over ZMQ (``send_to_scheduler.send_pyobj``,
    l. 1009); TP rank 0's scheduler polls it (``recv_pyobj(zmq.NOBLOCK)``) and broadcasts it to the other TP
    ranks (``broadcast_pyobj``, ``srt/managers/scheduler.py`` l. 1141); the prefill runs; the overlap
    scheduler (``disable_overlap_schedule`` default ``False``, ``srt/server_args.py`` l. 500;
    ``Scheduler.event_loop_overlap``, ``scheduler.py`` l. 992-1050) processes a batch's result only after it
    has scheduled and launched the next batch (``run_batch`` then ``pop_and_process``), so the first token
    waits for the first decode step's host scheduling and launch; ``process_batch_result_prefill`` waits for
    the prefill's copy (``copy_done.synchronize()``, ``srt/managers/scheduler_output_processor_mixin.py``
    l. 73) and streams the token to the detokenizer over ZMQ (``stream_output``, l. 722), which detokenizes
    and sends the text to the tokenizer manager (``srt/managers/detokenizer_manager.py`` l. 112-118), whose
    ``handle_loop`` (l. 1537) wakes the request's coroutine to write the server-sent event. None of these host
    costs has a measured figure here: each is ASSUMED (:data:`SGLANG_PATH_S`), a few milliseconds together.

The client's round trip between two requests (``reissue_s``)
    ``bench_serving`` sends a client's next request once the last one has returned (``benchmark``, l. 1878-1885:
    the semaphore is released when the request function returns, after the ``[DONE]`` chunk). The last chunk's way
    back (detokenizer, tokenizer manager, server-sent event) and the next request's way in (HTTP, tokenization, ZMQ,
    TP broadcast) are the path's hops without the first decode's launch, ASSUMED as above. It places the next
    request inside the step the engine runs meanwhile (:func:`costmodel.serving.scheduler.simulate`); any figure
    above 0 and under a step gives the same replay.

Not charged: vLLM and TensorRT-LLM (their prefill paths are other code: vLLM V1 captures piecewise CUDA graphs
over mixed batches, :mod:`costmodel.serving.step`), SGLang's eager decode above ``cuda_graph_max_bs``, and the
path's hops for the other engines.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> m, dev = load_model("qwen3-235b-a22b"), load_cluster("b200").device
>>> round(eager_prefill_host_s("sglang", m, dev) * 1e3, 1)  # 94 layers x 0.976 ms
91.8
>>> eager_prefill_host_s("sglang", m, dev, piecewise_cuda_graph=True), eager_prefill_host_s("vllm", m, dev)
(0.0, 0.0)
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.physics.kernels.host import GRACE_OVER_X86, host_scale
from costmodel.spec.specs import DeviceSpec, ModelSpec

#: SGLang's eager extend forward, host seconds per decoder layer on an x86 host: (82.64 - 23.10) ms over the
#: 61 layers of DeepSeek-V3, eager vs prefill CUDA graph for one new token, sgl-project/sglang PR #12160
#: (module doc). Measured.
SGLANG_EXTEND_LAYER_HOST_S = (82.64e-3 - 23.10e-3) / 61
#: the host path of one request outside the forward passes (module doc), seconds; every figure ASSUMED
SGLANG_PATH_S = {
    "http_in": 0.5e-3,  # aiohttp POST through the HTTP server to TokenizerManager.generate_request
    "zmq_hops": 3 * 0.1e-3,  # tokenizer -> scheduler, scheduler -> detokenizer, detokenizer -> tokenizer
    "tp_broadcast": 0.2e-3,  # broadcast_pyobj of the request to the other TP ranks (CPU group)
    "overlap_next_launch": 1.0e-3,  # event_loop_overlap: the first decode step scheduled and launched first
    "sse_out": 0.2e-3,  # the first chunk written back to the client
}
#: tokenizing the text prompt in TokenizerManager (a Hugging Face fast tokenizer), seconds per prompt token,
#: ASSUMED
SGLANG_TOKENIZE_PER_TOKEN_S = 1e-6


def eager_prefill_host_s(
    engine: str, model: ModelSpec, device: DeviceSpec, *, piecewise_cuda_graph: bool = False
) -> float:
    """Host seconds of one eager prefill forward of ``model`` on ``engine``, the floor under a prefill step
    (module doc); 0 where the engine's prefill is not modelled as eager (SGLang with
    ``--enable-piecewise-cuda-graph``, vLLM, TensorRT-LLM)."""
    if engine != "sglang" or piecewise_cuda_graph:
        return 0.0
    to_host = host_scale(device) * GRACE_OVER_X86  # 1 on x86, GRACE_OVER_X86 on a Grace host
    return model.layers * SGLANG_EXTEND_LAYER_HOST_S * to_host


def request_path_s(engine: str, input_len: int) -> float:
    """Host seconds a request spends outside the forward passes before its first token reaches the client
    (module doc): SGLang only."""
    if engine != "sglang":
        return 0.0
    return sum(SGLANG_PATH_S.values()) + SGLANG_TOKENIZE_PER_TOKEN_S * input_len


def reissue_s(engine: str, input_len: int) -> float:
    """Seconds from a request's last token to its client's next request reaching the scheduler (a closed loop:
    :func:`costmodel.serving.scheduler.simulate` ``reissue_s``): the last chunk's way back and the next request's
    way in, :data:`SGLANG_PATH_S` without the first decode's launch (module doc), SGLang only. Any positive
    figure shorter than a step has the same effect: the request misses the step the engine starts at once."""
    if engine != "sglang":
        return 0.0
    return request_path_s(engine, input_len) - SGLANG_PATH_S["overlap_next_launch"]


class EagerPrefillCost:
    """A step cost whose steps holding prompt tokens take at least ``host_s`` (the eager forward's host
    time): ``max(GPU step, host_s)``; decode-only steps are unchanged. Other attributes are the wrapped
    :class:`costmodel.serving.step.StepCost`'s."""

    def __init__(self, cost, host_s: float):
        self.cost, self.host_s = cost, host_s

    def __getattr__(self, name):
        return getattr(self.cost, name)

    def price(self, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1) -> float:
        t = self.cost.price(tokens, sampled, prefill_pairs, decode_ctx, micro_batches)
        return t if prefill_pairs <= 0 or t >= self.host_s else self.host_s

    def time_s(self, *, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1) -> float:
        return self.price(tokens, sampled, prefill_pairs, decode_ctx, micro_batches)

    def gpu_price(self, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1) -> float:
        """The step on the GPU alone, without the host floor: the replay of an overlap scheduler starts the
        host's launch before the step (:func:`costmodel.serving.scheduler.simulate`, ``sched.overlap``)."""
        return self.cost.price(tokens, sampled, prefill_pairs, decode_ctx, micro_batches)


def engine_step_cost(cost, engine: str, model: ModelSpec, device: DeviceSpec):
    """``cost`` as ``engine`` runs it: wrapped in :class:`EagerPrefillCost` where its prefill is eager."""
    h = eager_prefill_host_s(engine, model, device)
    return EagerPrefillCost(cost, h) if h > 0 else cost


def with_request_path(stats, path_s: float, closed_loop: bool):
    """``stats`` (a :class:`costmodel.serving.scheduler.ServingStats`) with ``path_s`` added to every request's
    TTFT and e2e (means and percentiles); a closed loop's clients wait it too, so its throughput falls by
    ``e2e / (e2e + path_s)`` (an open loop's rate is the arrivals')."""
    if path_s <= 0:
        return stats
    pct = {
        k: ({q: v + path_s for q, v in p.items()} if k in ("ttft_s", "e2e_s") else p)
        for k, p in stats.percentiles.items()
    }
    scale = stats.e2e_s / (stats.e2e_s + path_s) if closed_loop and stats.e2e_s > 0 else 1.0
    return replace(
        stats,
        ttft_s=stats.ttft_s + path_s,
        e2e_s=stats.e2e_s + path_s,
        percentiles=pct,
        output_tokens_per_s=stats.output_tokens_per_s * scale,
        requests_per_s=stats.requests_per_s * scale,
    )


def host_report(cost, path_s: float) -> dict:
    """The host terms charged, in milliseconds, for the estimate's ``serving`` dict (empty where none is)."""
    h = getattr(cost, "host_s", 0.0) if isinstance(cost, EagerPrefillCost) else 0.0
    if h <= 0 and path_s <= 0:
        return {}
    return {"eager_prefill_host_ms": h * 1e3, "request_path_ms": path_s * 1e3}
