"""Each serving engine's KV pool by its default memory setting (issue 40; costmodel.serving.kv_pool): vLLM 0.9 of
the HBM, SGLang 0.5.6's reserved_mem, TensorRT-LLM 0.9 of what is free."""

import pytest

from costmodel.serving.inference import evaluate_inference
from costmodel.serving.kv_pool import kv_pool_bytes, sglang_reserved_bytes
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.units import GiB
from costmodel.spec.workload import Workload

MB = 2**20
ARGS = dict(hbm_bytes=80 * GiB, weights=33 * GiB, workspace=0.5 * GiB, reserve=0.5 * GiB)


def test_each_engine_by_its_rule():
    rest = (80 - 33 - 0.5 - 0.5) * GiB
    assert kv_pool_bytes(None, **ARGS) == rest
    assert kv_pool_bytes("vllm", **ARGS) == pytest.approx(rest - 8 * GiB)
    assert kv_pool_bytes("trtllm", **ARGS) == pytest.approx(0.9 * rest)
    # SGLang: weights and pool within (gpu_mem - reserved_mem); TP2 on 80 GB: 512 + 1.5 x 8192 + 2 x 256 + 256 MB
    reserved = (512 + 1.5 * 8192 + 2 * 256 + 2 / 8 * 1024) * MB
    assert kv_pool_bytes("sglang", **ARGS, tp=2, token_budget=8192) == pytest.approx(80 * GiB - 33 * GiB - reserved)
    assert kv_pool_bytes("vllm", **{**ARGS, "weights": 79 * GiB}) == 0.0
    with pytest.raises(SpecError):
        kv_pool_bytes("tgi", **ARGS)


def test_sglang_reserve_by_memory_class():
    # B200 class (above 160 GB): chunked prefill 16384, cuda_graph_max_bs 512, TP8
    assert sglang_reserved_bytes(179 * GiB, tp=8, pp=1, chunked_prefill=16384) / MB == 512 + 24576 + 1024 + 1024
    # A100-40GB class, TP1: chunked 4096, graphs 32; below 60 GB no 10 GiB floor
    assert sglang_reserved_bytes(40 * GiB, tp=1, pp=1, chunked_prefill=4096) / MB == 512 + 6144 + 64 + 128


def test_the_engines_pool_sets_the_concurrency_and_a_static_batch_keeps_it_all():
    m, cl = load_model("llama3.1-70b"), load_cluster("h100-sxm").with_gpus(2)
    w = Workload(mode="infer", global_batch=150, input_len=5000, output_len=500, dtype="fp8")
    c = ParallelConfig(tp=2)
    cap = {
        e: evaluate_inference(m, cl, w, c, kv_dtype="fp8", engine=e).max_concurrency_per_replica
        for e in ("vllm", "sglang", "trtllm")
    }
    whole = evaluate_inference(m, cl, w, c, kv_dtype="fp8", engine="trtllm", engine_memory=False)
    assert max(cap.values()) < whole.max_concurrency_per_replica
    assert cap["vllm"] < cap["trtllm"]  # 0.9 of all memory leaves less than 0.9 of what the weights leave free
