"""evaluate(): the documented sum, overlap in [0, 1], and physical invariants (Hypothesis)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

M = load_model("gpt3-175b")
CL = load_cluster("a100-80g")
W = Workload(global_batch=256, seq_len=2048)


def est(c: ParallelConfig, cluster=CL, model=M, w=W):
    return evaluate(model, cluster.with_gpus(c.gpus), w, c)


def test_breakdown_sums_to_step_time():
    e = est(ParallelConfig(tp=8, pp=8, dp=4, mb=1, vp=2, sp=True, recompute="selective", bucket_bytes=40e6))
    assert sum(e.breakdown.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    assert e.tokens_per_s == pytest.approx(W.tokens / e.step_time_s)


def test_estimate_json_has_design_keys():
    d = est(ParallelConfig(tp=8, pp=8, dp=4, mb=1)).to_dict()
    for k in (
        "status",
        "config",
        "step_time_s",
        "tokens_per_s",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
        "mfu",
        "hfu",
        "peak_memory_bytes",
        "fits",
        "breakdown",
        "overlap",
    ):
        assert k in d
    assert set(d["config"]) >= {
        "tp",
        "pp",
        "dp",
        "ep",
        "cp",
        "vp",
        "mb",
        "sp",
        "zero",
        "recompute",
        "bucket_mb",
        "chunks",
    }


def test_mfu_below_one_and_hfu_at_least_mfu():
    e = est(ParallelConfig(tp=8, pp=8, dp=4, mb=1, recompute="full"))
    assert 0 < e.mfu < e.hfu < 1


def test_sequence_parallel_and_selective_recompute_beat_full_recompute():
    # Korthikanti et al. 2023, Table 5: 175B, 18.13 s -> 13.75 s
    full = est(
        ParallelConfig(tp=8, pp=8, dp=1, mb=1, vp=3, recompute="full", flash_attention=False),
        w=Workload(global_batch=64, seq_len=2048),
    )
    sel = est(
        ParallelConfig(tp=8, pp=8, dp=1, mb=1, vp=3, sp=True, recompute="selective", flash_attention=False),
        w=Workload(global_batch=64, seq_len=2048),
    )
    assert 1.2 < full.step_time_s / sel.step_time_s < 1.45


def test_dp_bucket_overlap_hides_gradient_reduction():
    no = est(ParallelConfig(tp=8, pp=4, dp=8, mb=1, bucket_bytes=0))
    yes = est(ParallelConfig(tp=8, pp=4, dp=8, mb=1, bucket_bytes=40e6))
    assert yes.breakdown["dp_exposed_s"] < no.breakdown["dp_exposed_s"]
    assert yes.overlap["dp"] > no.overlap.get("dp", 0.0)


def test_invalid_plan_names_the_rule():
    with pytest.raises(SpecError, match="heads"):
        est(ParallelConfig(tp=7, pp=1, dp=1))
    with pytest.raises(SpecError, match="layers"):
        est(ParallelConfig(tp=8, pp=5, dp=1))


configs = st.builds(
    ParallelConfig,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4, 8]),
    dp=st.sampled_from([1, 2, 4]),
    mb=st.sampled_from([1, 2]),
    sp=st.booleans(),
    zero=st.sampled_from([0, 1, 3]),  # Megatron's stages
    recompute=st.sampled_from(["none", "selective", "full"]),
    chunks=st.sampled_from([1, 2, 4]),
    bucket_bytes=st.sampled_from([0, 25e6, 100e6]),
)


@settings(max_examples=40, deadline=None)
@given(configs)
def test_overlap_rates_are_rates(c):
    e = est(c)
    assert all(0.0 <= r <= 1.0 for r in e.overlap.values())
    for s, link in e.comm_link_s.items():
        assert -1e-12 <= e.comm_exposed_s[s] <= link + 1e-12


@settings(max_examples=40, deadline=None)
@given(configs, st.sampled_from(["intra_link", "inter_link"]))
def test_more_bandwidth_never_slower(c, which):
    link = getattr(CL, which)
    faster = replace(CL, **{which: replace(link, bw_bytes_per_s=link.bw_bytes_per_s * 2)})
    assert est(c, faster).step_time_s <= est(c).step_time_s * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(configs)
def test_faster_hbm_never_slower(c):
    dev = replace(CL.device, hbm_bw_bytes_per_s=CL.device.hbm_bw_bytes_per_s * 1.5)
    assert est(c, replace(CL, device=dev)).step_time_s <= est(c).step_time_s * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(configs)
def test_zero3_never_uses_more_memory_than_zero0(c):
    assert est(replace(c, zero=3)).peak_memory_bytes <= est(replace(c, zero=0)).peak_memory_bytes
