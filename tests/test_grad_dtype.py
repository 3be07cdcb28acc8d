"""The dtype gradients are reduced in (``ParallelConfig.grad_dtype``): memory, collectives, both engines."""

import pytest

from costmodel.config import ParallelConfig
from costmodel.errors import SpecError
from costmodel.estimate import evaluate
from costmodel.memory import model_state_bytes
from costmodel.presets import load_cluster, load_model
from costmodel.specs import Workload
from costmodel.analytic import dp_comm

MODEL = load_model("gpt-1.7b")
CLUSTER = load_cluster("a100-80g").with_gpus(64)
WL = Workload(global_batch=512, seq_len=2048)


def test_half_precision_gradients_halve_the_gradient_buffer_and_reduction():
    fp32 = ParallelConfig(tp=2, dp=32, mb=4, zero=0, bucket_bytes=0)
    half = ParallelConfig(tp=2, dp=32, mb=4, zero=0, bucket_bytes=0, grad_dtype="fp16")
    w32, g32, o32 = model_state_bytes(MODEL, fp32, 0)
    w16, g16, o16 = model_state_bytes(MODEL, half, 0)
    assert (w16, o16) == (w32, o32) and g16 == pytest.approx(g32 / 2)
    t32, t16 = dp_comm(MODEL, CLUSTER, fp32, 0)[0], dp_comm(MODEL, CLUSTER, half, 0)[0]
    assert t16 < t32 and t16 == pytest.approx(t32 / 2, rel=0.05)  # bandwidth-bound: about half
    for engine in ("analytic", "graph"):  # the reduction after backward (no buckets) is on the critical path
        a = evaluate(MODEL, CLUSTER, WL, fp32, engine=engine)
        b = evaluate(MODEL, CLUSTER, WL, half, engine=engine)
        assert b.breakdown["dp_exposed_s"] < a.breakdown["dp_exposed_s"]
        assert b.step_time_s < a.step_time_s


def test_grad_dtype_is_checked_and_kept_in_the_plan_keys():
    with pytest.raises(SpecError, match="grad_dtype"):
        ParallelConfig(grad_dtype="fp8")
    c = ParallelConfig(dp=8, grad_dtype="bf16")
    assert ParallelConfig.from_dict(c.to_dict()) == c
    assert "grad_dtype" not in ParallelConfig(dp=8).to_dict()  # the default leaves the keys as they were
