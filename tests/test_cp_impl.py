"""PyTorch context_parallel as torchtitan runs it (ParallelConfig.cp_impl = 'torch'; costmodel.physics.kernels.compute.cp_exchange)."""

import pytest

from costmodel.physics.kernels.compute import cp_exchange
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload


def test_torch_exchange_moves_repeated_kv_and_fp32_grads():
    m = load_model("llama3.1-405b")  # 128 query heads, 8 KV heads
    ring = cp_exchange(m, 32768, 8, 8, "ring")
    torch = cp_exchange(m, 32768, 8, 8, "torch")
    assert torch.kv_bytes == pytest.approx(16 * ring.kv_bytes)  # repeat_kv: 16 local heads, not 1
    assert torch.gather_bytes == pytest.approx(8 * torch.kv_bytes)
    assert torch.dkv_bytes == pytest.approx(2 * torch.kv_bytes)  # FP32 accumulators
    assert (ring.gather_bytes, ring.dkv_sends, torch.dkv_sends) == (0.0, 7, 8)


def test_default_is_ring_and_bad_value_refused():
    assert ParallelConfig().cp_impl == "ring"
    with pytest.raises(SpecError):
        ParallelConfig(cp_impl="ulysses")


def _row(cp_impl, engine):
    m, cl = load_model("llama3.1-405b"), load_cluster("h100-96g").with_gpus(512)
    c = ParallelConfig(
        tp=8,
        pp=8,
        dp=1,
        cp=8,
        sp=True,
        mb=1,
        zero=2,
        recompute="full",
        framework="fsdp2",
        layers_per_stage=(15, 16, 16, 16, 16, 16, 16, 15),
        cp_impl=cp_impl,
    )
    return evaluate(m, cl, Workload(global_batch=8, seq_len=262144, dtype="fp8"), c, engine=engine)


@pytest.mark.parametrize("engine", ["graph", "analytic"])
def test_inter_node_gather_exposed(engine):
    """405B CP8 across nodes: the 8-shard gather outlasts the local block, so torch exposes more CP time."""
    ring, torch = _row("ring", engine), _row("torch", engine)
    assert torch.breakdown["cp_exposed_s"] > ring.breakdown["cp_exposed_s"] + 1.0
    assert torch.step_time_s > ring.step_time_s


def test_engines_agree():
    g, a = _row("torch", "graph"), _row("torch", "analytic")
    assert a.step_time_s == pytest.approx(g.step_time_s, rel=0.02)
    assert a.breakdown["cp_exposed_s"] == pytest.approx(g.breakdown["cp_exposed_s"], rel=0.05)
