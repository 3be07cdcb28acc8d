"""PyTorch FSDP2's copy-out / gradient copy-in on the compute stream (ParallelConfig.fsdp_copies;
costmodel.physics.mechanics.fsdp_copies.fsdp2_copies_s)."""

import pytest

from costmodel.physics.mechanics.fsdp_copies import fsdp2_copies_s, zero3_groups
from costmodel.engines.analytic import layer_timing
from costmodel.physics.kernels.gemm import elementwise_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.units import GRAD_BYTES, WEIGHT_BYTES
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

M, CL, W = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(64), Workload(global_batch=64, seq_len=8192)


def _c(**kw):
    return ParallelConfig(dp=64, mb=1, zero=3, framework="fsdp2", **kw)


def test_default_follows_the_framework_and_key_omitted():
    """FSDP2 plans are charged the copies however they are built (CLI, API, search); False is the
    explicit exception for FSDP1-run published rows."""
    c = _c()
    assert c.fsdp_copies is True and "fsdp_copies" not in c.to_dict()
    assert ParallelConfig(dp=8, zero=3).fsdp_copies is False
    off = _c(fsdp_copies=False)
    assert fsdp2_copies_s(M, CL.device, off, False) == (0.0, 0.0)
    assert off.to_dict()["fsdp_copies"] is False and ParallelConfig.from_dict(off.to_dict()) == off
    assert ParallelConfig.from_dict(c.to_dict()) == c


def test_refused_outside_fsdp2():
    with pytest.raises(SpecError):
        ParallelConfig(dp=8, zero=3, framework="megatron", fsdp_copies=True)


def test_bytes_per_gather_and_reduce():
    """ZeRO-3: copy-out in forward and backward (read + write BF16), copy-in BF16 -> FP32 gradient."""
    c = _c(fsdp_copies=True)
    ((params, _, _),) = zero3_groups(M, c, False)
    out = elementwise_time_s(2 * WEIGHT_BYTES * params, CL.device)
    cin = elementwise_time_s((WEIGHT_BYTES + GRAD_BYTES) * params, CL.device)
    assert fsdp2_copies_s(M, CL.device, c, False) == pytest.approx((out, out + cin))
    # no resharding after forward: no backward gather, so no backward copy-out
    c2 = ParallelConfig(dp=64, mb=1, zero=2, framework="fsdp2", fsdp_copies=True)
    assert fsdp2_copies_s(M, CL.device, c2, False) == pytest.approx((out, cin))
    # under a pipeline schedule FSDP2 without resharding syncs once per step: nothing per micro-batch
    c3 = ParallelConfig(dp=16, pp=4, mb=1, zero=2, framework="fsdp2", fsdp_copies=True)
    assert fsdp2_copies_s(M, CL.device, c3, False) == (0.0, 0.0)


def test_charged_as_compute_not_recompute():
    off, on = _c(recompute="full", fsdp_copies=False), _c(recompute="full", fsdp_copies=True)
    a, b = layer_timing(M, CL, W, off, False), layer_timing(M, CL, W, on, False)
    f, bw = fsdp2_copies_s(M, CL.device, on, False)
    assert b.fwd_s == pytest.approx(a.fwd_s + f) and b.bwd_s == pytest.approx(a.bwd_s + bw)
    assert b.recompute_s == pytest.approx(a.recompute_s)  # FSDP2 skips its hooks while recomputing


@pytest.mark.parametrize("engine", ["graph", "analytic"])
def test_slower_and_engines_agree(engine):
    off = evaluate(M, CL, W, _c(fsdp_copies=False), engine=engine).step_time_s
    on = evaluate(M, CL, W, _c(fsdp_copies=True), engine=engine).step_time_s
    assert on > off
    g = evaluate(M, CL, W, _c(fsdp_copies=True), engine="graph").step_time_s
    a = evaluate(M, CL, W, _c(fsdp_copies=True), engine="analytic").step_time_s
    assert a == pytest.approx(g, rel=0.02)
