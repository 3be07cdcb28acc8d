"""Step-time sensitivity to hardware constants and the bottleneck's critical values (costmodel.trust.sensitivity)."""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.trust.sensitivity import KNOBS, bottleneck, knob_value, scaled, sensitivity
from costmodel.spec.workload import Workload
from planner import cli

LLAMA = load_model("llama3-8b")
H100_64 = load_cluster("h100-sxm").with_gpus(64)
W = Workload(global_batch=64, seq_len=4096)
ZERO3 = ParallelConfig(dp=64, zero=3)  # parameter gathers over 8 nodes: slow links expose them


@pytest.fixture(scope="module")
def rows():
    return {r.knob: r for r in sensitivity(LLAMA, H100_64, W, ZERO3, engine="analytic")}


def test_scaled_changes_one_knob():
    cl = scaled(H100_64, "nic_bw", 0.5)
    assert knob_value(cl, "nic_bw") == 25 and knob_value(cl, "nvlink_bw") == 450
    assert knob_value(scaled(H100_64, "gemm_efficiency", 2.0), "gemm_efficiency") == 1.0  # capped
    assert knob_value(scaled(H100_64, "dma_engines", 0.1), "dma_engines") == 1  # at least one engine
    fp8 = Workload(global_batch=64, seq_len=4096, dtype="fp8")
    assert knob_value(H100_64, "gemm_efficiency", fp8.dtype) == H100_64.device.fp8_gemm_efficiency


def test_every_knob_reported(rows):
    assert list(rows) == [k.name for k in KNOBS]
    for r in rows.values():
        assert r.step_s > 0 and r.bottleneck == "compute_s"


def test_more_resources_never_slower(rows):
    for name in ("nvlink_bw", "nic_bw", "hbm_bw", "gemm_efficiency"):
        r = rows[name]
        assert r.step_plus_s <= r.step_s <= r.step_minus_s, name
        assert r.elasticity <= 0
    assert rows["gemm_efficiency"].elasticity < -0.3  # compute-bound: GEMM efficiency matters most


def test_critical_value_is_where_the_bottleneck_changes(rows):
    crit = rows["nic_bw"].critical_low
    assert crit is not None and crit.factor < 0.8 and crit.bottleneck == "zero_exposed_s"
    just_above = evaluate(LLAMA, scaled(H100_64, "nic_bw", crit.factor * 1.02), W, ZERO3, engine="analytic")
    just_below = evaluate(LLAMA, scaled(H100_64, "nic_bw", crit.factor * 0.98), W, ZERO3, engine="analytic")
    assert bottleneck(just_above) == "compute_s" and bottleneck(just_below) == "zero_exposed_s"
    assert crit.value == pytest.approx(50 * crit.factor)
    assert rows["gemm_efficiency"].critical_high is None  # compute stays the bottleneck up to efficiency 1.0


def test_to_dict_is_plain(rows):
    d = rows["nic_bw"].to_dict()
    json.dumps(d)
    assert d["critical_low"]["bottleneck"] == "zero_exposed_s" and "elasticity" in d


def test_cli_explain_sensitivity(capsys):
    argv = [
        "explain",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--tp",
        "8",
        "--sp",
        "--sensitivity",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "bottleneck changes below" in out and "NVLink bandwidth" in out and "DMA engines" in out
    assert cli.main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [r["knob"] for r in d["sensitivity"]] == [k.name for k in KNOBS]


def test_cli_explain_sensitivity_refuses_serving(capsys):
    code = cli.main(
        [
            "explain",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--tp",
            "8",
            "--mode",
            "infer",
            "--input-len",
            "100",
            "--output-len",
            "10",
            "--sensitivity",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "sensitivity" in err and err.count("\n") == 1
