"""Optimizer CPU offload (costmodel.physics.mechanics.offload): Megatron-Core's HybridDeviceOptimizer, its memory and its time."""

import pytest

from costmodel.physics.mechanics import offload
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import model_state_bytes
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

MODEL, W = load_model("llama3-70b"), Workload(global_batch=16, seq_len=4096)
H100, A100 = load_cluster("h100-sxm").with_gpus(8), load_cluster("a100-80g").with_gpus(8)
PLAN = dict(tp=8, zero=1, recompute="full")


def test_off_by_default_and_keys_unchanged():
    c = ParallelConfig(**PLAN)
    assert c.optimizer_offload_fraction == 0.0
    assert "optimizer_offload_fraction" not in c.to_dict()
    c2 = ParallelConfig(**PLAN, optimizer_offload_fraction=0.5, overlap_cpu_optimizer_d2h_h2d=True)
    assert ParallelConfig.from_dict(c2.to_dict()) == c2


def test_memory_moves_the_fraction_of_the_optimizer_state():
    w0, g0, o0 = model_state_bytes(MODEL, ParallelConfig(**PLAN), 0)
    w, g, o = model_state_bytes(MODEL, ParallelConfig(**PLAN, optimizer_offload_fraction=0.25), 0)
    assert (w, g) == (w0, g0)  # BF16 weights and the gradient buffer stay on the GPU
    assert o == pytest.approx(0.75 * o0)
    assert model_state_bytes(MODEL, ParallelConfig(**PLAN, optimizer_offload_fraction=1.0), 0)[2] == 0.0


def test_link_by_pcie_generation():
    # measured copy-engine copies (benchmarks/data/components/host_link.csv)
    assert offload.host_link_bytes_per_s(H100) == 51e9 and offload.host_link_bytes_per_s(A100) == 26e9


def test_times_hand_computed():
    # 1e9 elements on H100: D2H 4e9 B / 51e9 B/s = 78.4 ms, H2D the same; CPU 28e9 B / (200e9 / 8 GPUs) = 1.12 s
    d2h, cpu, h2d = offload.offload_times_s(1e9, H100)
    assert (d2h, cpu, h2d) == pytest.approx((4 / 51, 1.12, 4 / 51))
    seq = ParallelConfig(**PLAN, optimizer_offload_fraction=1.0)
    ovl = ParallelConfig(**PLAN, optimizer_offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=True)
    assert offload.optimizer_step_s(0.5, 1e9, H100, seq) == pytest.approx(8 / 51 + 1.12)
    assert offload.optimizer_step_s(0.5, 1e9, H100, ovl) == pytest.approx(1.12)
    assert offload.optimizer_step_s(2.0, 1e9, H100, ovl) == pytest.approx(2.0)  # GPU Adam the slowest


def test_70b_on_8_h100_fits_only_offloaded_and_costs_time():
    base = evaluate(MODEL, H100, W, ParallelConfig(**PLAN))
    off = evaluate(MODEL, H100, W, ParallelConfig(**PLAN, optimizer_offload_fraction=1.0))
    ovl = evaluate(
        MODEL, H100, W, ParallelConfig(**PLAN, optimizer_offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=True)
    )
    assert not base.fits and off.fits
    assert off.breakdown["optimizer_s"] > 10 * base.breakdown["optimizer_s"]
    assert base.step_time_s < ovl.step_time_s < off.step_time_s


def test_both_engines_charge_the_same_optimizer():
    c = ParallelConfig(**PLAN, optimizer_offload_fraction=0.5)
    a, g = evaluate(MODEL, H100, W, c, engine="analytic"), evaluate(MODEL, H100, W, c, engine="graph")
    assert a.breakdown["optimizer_s"] == pytest.approx(g.breakdown["optimizer_s"])
    assert a.peak_memory_bytes == pytest.approx(g.peak_memory_bytes)


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(optimizer_offload_fraction=1.5), "optimizer_offload_fraction"),
        (dict(optimizer_offload_fraction=-0.1), "optimizer_offload_fraction"),
        (dict(optimizer_offload_fraction="half"), "optimizer_offload_fraction"),
        (dict(optimizer_offload_fraction=1.0, zero=0), "optimizer_offload_fraction"),  # no distributed optimizer
        (dict(optimizer_offload_fraction=1.0, zero=3), "optimizer_offload_fraction"),
        (dict(optimizer_offload_fraction=1.0, framework="deepspeed"), "optimizer_offload_fraction"),
        (dict(overlap_cpu_optimizer_d2h_h2d=True), "overlap_cpu_optimizer_d2h_h2d"),  # nothing offloaded
    ],
)
def test_refused(fields, field):
    with pytest.raises(SpecError) as e:
        ParallelConfig(**{**PLAN, **fields})
    assert field in str(e.value)


def test_band_says_offload_is_unmeasured():
    # no component measurement covers the host copies and the CPU Adam: the band falls back to the pooled one
    from planner import evaluate as planner_evaluate

    off = planner_evaluate(MODEL, H100, W, ParallelConfig(**PLAN, optimizer_offload_fraction=1.0))
    base = planner_evaluate(MODEL, H100, W, ParallelConfig(**PLAN))
    assert any("optimizer CPU offload" in n for n in off.band_notes)
    assert not any("offload" in n for n in base.band_notes)


def test_a_device_without_a_known_host_link_is_refused():
    other = load_cluster("sg2262-like").with_gpus(8)
    with pytest.raises(SpecError, match="device"):
        offload.offload_times_s(1e9, other)
    assert offload.offload_times_s(0.0, other) == (0.0, 0.0, 0.0)
