"""The explain table, and the source document's worked TP example coming out of the model."""

from dataclasses import replace

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.engines.graph.explain import explain, format_explain, tp_feasibility
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import LinkSpec, ModelSpec
from costmodel.spec.workload import Workload

KEYS = {
    "strategy",
    "t_comm_s",
    "t_compute_s",
    "r",
    "exposed_s",
    "prerequisite",
    "reason",
    "critical_condition",
    "ratio",
}


def nvlink(bw_bytes_per_s):
    """H100 compute with an NVLink-class link of the given bandwidth (the source quotes
    400-900 GB/s; bandwidth terms only, so efficiency 1 and a 2 us hop)."""
    base = load_cluster("h100-sxm")
    return replace(base, intra_link=LinkSpec(bw_bytes_per_s=bw_bytes_per_s, latency_s=2e-6, efficiency=1.0)).with_gpus(
        8
    )


WORKED = ModelSpec(name="h7168", layers=1, hidden=7168, heads=56, ffn_hidden=4 * 7168, vocab=32000)


@pytest.mark.parametrize("bw", [400e9, 900e9])
def test_worked_tp_example(bw):
    """Source section 3: BF16 activations, b=1, s=4096, h=7168, TP=8: a 58.7 MB AllReduce takes
    0.1-0.3 ms over 400-900 GB/s; one layer's FP8 MatMul 0.5-2 ms; ratio 0.05-0.6."""
    f = tp_feasibility(WORKED, nvlink(bw), Workload(global_batch=1, seq_len=4096, dtype="fp8"), ParallelConfig(tp=8))
    assert f["msg_bytes"] / 1e6 == pytest.approx(58.7, abs=0.05)  # 4096 * 7168 * 2 B
    assert 0.1e-3 <= f["t_allreduce_s"] <= 0.3e-3
    assert 0.5e-3 <= f["t_matmul_s"] <= 2e-3
    assert 0.05 <= f["ratio"] <= 0.6


def test_worked_example_in_the_explain_output():
    rows = explain(
        WORKED, nvlink(900e9), Workload(mode="infer", global_batch=1, seq_len=4096, dtype="fp8"), ParallelConfig(tp=8)
    )
    text = format_explain(rows)
    assert "58.7 MB" in text and "splitting both into chunks can hide it" in text
    assert "section" not in text and "source" not in text  # the rule in words, not a citation
    tp = rows[0]
    assert tp["strategy"] == "tp" and tp["r"] <= 0.3  # inference TP: on the critical path
    assert tp["prerequisite"] == "data dependency" and tp["critical_condition"] is False


def test_rows_per_strategy_training():
    m, cl = load_model("llama3-70b"), load_cluster("h100-sxm").with_gpus(64)
    c = ParallelConfig(tp=4, pp=4, dp=2, cp=2, vp=5, sp=True, chunks=4, zero=1)
    rows = explain(m, cl, Workload(global_batch=32, seq_len=8192), c)
    assert [r["strategy"] for r in rows] == ["sp", "cp", "pp", "dp", "zero"]
    for r in rows:
        assert set(r) >= KEYS
        assert 0.0 <= r["r"] <= 1.0 and r["exposed_s"] <= r["t_comm_s"] * (1 + 1e-9) + 1e-12
        assert r["critical_condition"] == (r["t_comm_s"] <= r["t_compute_s"])
        assert (r["prerequisite"] == "") == (r["reason"] == "")
        assert r["prerequisite"] in ("", "data dependency", "no free engine", "synchronous issue")
    lines = format_explain(rows).splitlines()
    assert lines[0].startswith("strategy") and len(lines) == 1 + len(rows) + 1  # + the feasibility line


def test_standard_tp_training_overlaps_backward_only():
    m, cl = load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64)
    rows = explain(m, cl, Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8, vp=3))
    tp = rows[0]
    assert tp["strategy"] == "tp" and 0.3 <= tp["r"] <= 0.7  # source: TP training 0.3-0.7
    assert tp["prerequisite"] == "data dependency"


def test_sequential_pipeline_send_is_a_synchronous_issue():
    m, cl = load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64)
    rows = {
        r["strategy"]: r for r in explain(m, cl, Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8))
    }
    assert rows["pp"]["prerequisite"] == "synchronous issue" and rows["pp"]["t_compute_s"] == 0


def test_invalid_plan_is_a_spec_error():
    from costmodel.spec.errors import SpecError

    with pytest.raises(SpecError, match="tp"):
        explain(
            load_model("gpt3-175b"),
            load_cluster("a100-80g").with_gpus(56),
            Workload(global_batch=8, seq_len=2048),
            ParallelConfig(tp=7, pp=8),
        )
