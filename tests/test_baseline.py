"""A baseline plan next to a recommendation (planner.baseline)."""

from types import SimpleNamespace

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.baseline import baseline_config, compare, compare_with_baseline, parse_baseline

GPT3 = load_model("gpt3-175b")
A100 = load_cluster("a100-80g").with_gpus(64)
W = Workload(global_batch=64, seq_len=2048)


def est(step, fits=True):
    return SimpleNamespace(step_time_s=step, fits=fits)


# --------------------------------------------------------------------------- parsing
def test_key_value_form():
    assert parse_baseline("tp=8,pp=8,mb=1") == {"tp": 8, "pp": 8, "mb": 1}
    assert parse_baseline("tp=4 pp=2 sp=off zero=1 recompute=full bucket_mb=25 vpp=2") == {
        "tp": 4,
        "pp": 2,
        "sp": False,
        "zero": 1,
        "recompute": "full",
        "bucket_mb": 25.0,
        "vp": 2,
    }


def test_megatron_form():
    f = parse_baseline(
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --sequence-parallel "
        "--num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 1 --recompute-granularity "
        "selective --use-distributed-optimizer --lr 6e-5",
        layers=96,
    )
    assert f == {
        "tp": 8,
        "pp": 8,
        "mb": 1,
        "vp": 3,
        "sp": True,
        "zero": 1,
        "recompute": "selective",
        "chunks": 1,
        "framework": "megatron",
    }  # a Megatron-LM line runs Megatron


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "baseline=''"),
        ("tp=8,foo=1", "baseline='foo': must be one of tp"),
        ("tp", "key=value pairs"),
        ("tp=8,sp=maybe", "baseline.sp='maybe': must be on or off"),
        ("recompute=some", "baseline.recompute='some'"),
        ("--pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 4", "num_layers"),
    ],
)
def test_bad_baselines(text, match):
    with pytest.raises(SpecError, match=match):
        parse_baseline(text)


def test_baseline_config_fills_dp_from_gpus():
    c = baseline_config("tp=8,pp=4", gpus=64)
    assert isinstance(c, ParallelConfig) and c.dp == 2


# --------------------------------------------------------------------------- comparison
def test_compare_messages():
    assert compare(est(10.0), est(11.2), (9.4, 10.6)) == "12% faster, outside the model's ±6% band"
    assert compare(est(10.0), est(10.3), 0.06) == "3% faster, within the model's ±6% band: keep your plan"
    assert compare(est(10.0), est(9.5), 0.06).startswith("your plan is 5% faster than the recommendation")
    assert compare(est(10.0), est(12.0, fits=False), 0.06).endswith("(your plan does not fit in memory by the model)")


def test_compare_with_baseline_end_to_end():
    rec = evaluate(GPT3, A100, W, ParallelConfig(tp=8, pp=8, vp=3, sp=True, recompute="selective"), engine="analytic")
    c = compare_with_baseline(GPT3, A100, W, rec, "tp=8,pp=8,vp=3,recompute=full", engine="analytic")
    assert c.baseline.config.recompute == "full" and c.gain > 0
    lo, hi = c.band_s
    assert lo < rec.step_time_s < hi
    assert c.outside_band == (c.gain > (hi - lo) / 2 / rec.step_time_s)
    assert c.message == compare(rec, c.baseline, c.band_s)
    assert set(c.to_dict()) == {
        "baseline",
        "step_time_band_s",
        "gain",
        "outside_band",
        "message",
        "band_notes",
        "baseline_defaults",
        "baseline_step_time_band_s",
        "baseline_band_notes",
    }
    # stated: tp, pp, vp, recompute; the other tuning knobs are said to be defaults, not choices
    assert set(c.defaults) == {"mb", "sp", "zero", "bucket_mb", "chunks"}
    b_lo, b_hi = c.baseline_band_s
    assert b_lo <= c.baseline.step_time_s <= b_hi
    same = compare_with_baseline(GPT3, A100, W, rec, rec.config, engine="analytic", band=0.05)
    assert same.gain == pytest.approx(0) and "within the model's ±5% band: keep your plan" in same.message


def test_a_baseline_runs_the_recommendations_software_unless_it_states_its_own():
    m, cl, w = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(16), Workload(global_batch=64, seq_len=4096)
    rec = evaluate(m, cl, w, ParallelConfig(tp=2, dp=8, sp=True, zero=3, framework="fsdp2", grad_dtype="bf16"))
    same = compare_with_baseline(m, cl, w, rec, "tp=2,zero=3,sp=on")
    assert (same.baseline.config.framework, same.baseline.config.grad_dtype) == ("fsdp2", "bf16")
    assert same.gain == pytest.approx(0.0, abs=1e-9) and "gradients" not in same.message  # the same plan
    fp32 = compare_with_baseline(m, cl, w, rec, "tp=2,zero=3,sp=on,grad_dtype=fp32")
    assert fp32.baseline.config.grad_dtype == "fp32" and fp32.gain > 0  # FP32 gradients: more to reduce
    assert "your plan reduces fp32 gradients, the recommendation bf16: --grad-dtype fp32" in fp32.message
    megatron = compare_with_baseline(m, cl, w, rec, "--tensor-model-parallel-size 2 --sequence-parallel --bf16")
    assert (megatron.baseline.config.framework, megatron.baseline.config.grad_dtype) == ("megatron", "fp32")
    assert "reduces fp32 gradients" in megatron.message
    with pytest.raises(SpecError, match="baseline.grad_dtype='fp8'"):
        parse_baseline("tp=2,grad_dtype=fp8")


def test_megatron_baseline_reads_virtual_stages_per_rank():
    # --num-virtual-stages-per-pipeline-rank (what --emit megatron writes for an uneven split) sets the
    # interleave: arguments.py sets virtual_pipeline_model_parallel_size from it
    from planner.baseline import parse_baseline

    assert parse_baseline("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2")["vp"] == 2
