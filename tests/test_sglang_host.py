"""SGLang's host time before the first token (issue 40, costmodel.serving.engine_host): the eager prefill
("extend") forward's host time as a floor under a prefill step, and the request's host path."""

from __future__ import annotations

import pytest

from costmodel.physics.kernels.host import GRACE_OVER_X86
from costmodel.serving import engine_host as eh
from costmodel.serving.inference import evaluate_inference
from costmodel.serving.engines import engine_cluster
from costmodel.serving.step import step_cost
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

TP8 = ParallelConfig(tp=8)


@pytest.fixture(scope="module")
def qwen():
    return load_model("qwen3-235b-a22b"), load_cluster("b200").with_gpus(8)


def _est(qwen, engine, input_len, batch=1, output_len=64):
    m, cl = qwen
    w = Workload(mode="infer", global_batch=batch, input_len=input_len, output_len=output_len, dtype="bf16")
    return evaluate_inference(m, cl, w, TP8, engine=engine)


def _prefill_step_s(qwen, input_len):
    """The GPU time of one whole-prompt prefill step (the step cost the replay prices)."""
    m, cl = qwen
    sc = step_cost(m, engine_cluster(cl, "sglang"), "bf16", TP8, "bf16")  # the engine's own GEMM table
    return sc.time_s(tokens=input_len, sampled=1, prefill_pairs=input_len * input_len / 2.0, decode_ctx=0)


def test_eager_extend_host_is_layers_times_the_measured_per_layer_host_time(qwen):
    m, cl = qwen
    assert m.layers == 94
    h = eh.eager_prefill_host_s("sglang", m, cl.device)
    assert h == pytest.approx(94 * (82.64e-3 - 23.10e-3) / 61)
    assert 0.085 < h < 0.1  # about 92 ms of host issue per eager prefill forward on an x86 (DGX B200) host
    grace = load_cluster("gb200-nvl72").device  # a Grace host issues slower
    assert eh.eager_prefill_host_s("sglang", m, grace) == pytest.approx(h * GRACE_OVER_X86)


def test_graph_prefill_and_other_engines_have_no_eager_floor(qwen):
    m, cl = qwen
    assert eh.eager_prefill_host_s("sglang", m, cl.device, piecewise_cuda_graph=True) == 0.0
    for engine in ("vllm", "trtllm"):
        assert eh.eager_prefill_host_s(engine, m, cl.device) == 0.0
        assert eh.request_path_s(engine, 1000) == 0.0
        sc = step_cost(m, cl, "bf16", TP8, "bf16")
        assert eh.engine_step_cost(sc, engine, m, cl.device) is sc


def test_floor_applies_to_prefill_steps_only(qwen):
    m, cl = qwen
    sc = step_cost(m, cl, "bf16", TP8, "bf16")
    wrapped = eh.engine_step_cost(sc, "sglang", m, cl.device)
    h = wrapped.host_s
    # a decode step replays a CUDA graph: unchanged
    assert wrapped.price(16, 16, 0.0, 16 * 1000, 1) == sc.price(16, 16, 0.0, 16 * 1000, 1) < h
    # a short prompt's prefill step is host-bound: the floor
    assert sc.price(600, 1, 600 * 300.0, 0.0, 1) < h
    assert wrapped.price(600, 1, 600 * 300.0, 0.0, 1) == h
    # a long prompt's prefill step is GPU-bound: unchanged
    big = 16000
    assert wrapped.price(big, 1, big * big / 2.0, 0.0, 1) == sc.price(big, 1, big * big / 2.0, 0.0, 1) > h


def test_sglang_ttft_at_concurrency_one_is_the_eager_forward_plus_the_path(qwen):
    m, cl = qwen
    e = _est(qwen, "sglang", 600)
    h, path = eh.eager_prefill_host_s("sglang", m, cl.device), eh.request_path_s("sglang", 600)
    gpu = _prefill_step_s(qwen, 600)
    assert gpu < h  # the eager forward's host time, not the GPU, sets the prefill step
    assert e.ttft_s == pytest.approx(h + path, rel=1e-6)
    assert e.serving["eager_prefill_host_ms"] == pytest.approx(h * 1e3)
    assert e.serving["request_path_ms"] == pytest.approx(path * 1e3)
    assert e.serving["percentiles_ms"]["ttft_ms"]["p50"] == pytest.approx((h + path) * 1e3, rel=1e-6)
    # the same request on vLLM pays only the GPU step (its prefill is not modelled as eager): far less
    v = _est(qwen, "vllm", 600)
    assert v.ttft_s < 0.5 * e.ttft_s and "eager_prefill_host_ms" not in v.serving


def test_a_gpu_bound_prefill_is_not_floored(qwen):
    m, cl = qwen
    e = _est(qwen, "sglang", 12000, output_len=8)
    gpu, path = _prefill_step_s(qwen, 12000), eh.request_path_s("sglang", 12000)
    assert gpu > eh.eager_prefill_host_s("sglang", m, cl.device)
    assert e.ttft_s == pytest.approx(gpu + path, rel=1e-6)


def test_request_path_moves_ttft_e2e_and_closed_loop_throughput():
    from costmodel.serving.scheduler import ServingStats

    st = ServingStats(
        ttft_s=0.1, tpot_s=0.01, e2e_s=1.0, queue_s=0.0, duration_s=10.0, output_tokens_per_s=100.0,
        requests_per_s=1.0, running_mean=1.0, admitted_limit=8, steps=10, prefill_steps_per_request=1.0,
        requests=10, percentiles={"ttft_s": {"p50": 0.1}, "tpot_s": {"p50": 0.01}, "e2e_s": {"p50": 1.0}},
    )  # fmt: skip
    out = eh.with_request_path(st, 0.01, closed_loop=True)
    assert out.ttft_s == pytest.approx(0.11) and out.e2e_s == pytest.approx(1.01)
    assert out.percentiles["ttft_s"]["p50"] == pytest.approx(0.11) and out.percentiles["tpot_s"]["p50"] == 0.01
    assert out.output_tokens_per_s == pytest.approx(100.0 / 1.01)
    assert eh.with_request_path(st, 0.01, closed_loop=False).output_tokens_per_s == 100.0
    assert eh.with_request_path(st, 0.0, closed_loop=True) is st
    assert eh.request_path_s("sglang", 1000) == pytest.approx(sum(eh.SGLANG_PATH_S.values()) + 1000e-6)
