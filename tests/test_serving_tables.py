"""Serving engines' GEMMs from their own measured tables at the tables' clocks (issue 38's "the stack chooses the
table", for serving: costmodel.serving.engines.engine_cluster); training keeps the sustained-clock division."""

from dataclasses import replace

import pytest

from costmodel.physics.kernels.measured import SUSTAINED_CLOCK, table_gemm
from costmodel.physics.tables import gemm_lookup
from costmodel.serving.engines import engine_cluster
from costmodel.spec.presets import load_cluster

SHAPE = (4096, 8192, 8192)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_each_engine_reads_its_own_table_as_measured(engine):
    cl = engine_cluster(load_cluster("h100-sxm"), engine)
    assert cl.device.kernel_table == engine and cl.device.sustained_clocks is False
    t, ev = table_gemm(*SHAPE, cl.device, "bf16")
    raw, _ = gemm_lookup("h100_sxm", "bf16", *SHAPE, engine)
    assert t == pytest.approx(raw) and "table's clocks" in ev.note


def test_training_divides_by_the_sustained_clock_and_a_named_table_stands():
    dev = replace(load_cluster("h100-sxm").device, kernel_table="trtllm")
    t, ev = table_gemm(*SHAPE, dev, "bf16")
    raw, _ = gemm_lookup("h100_sxm", "bf16", *SHAPE, "trtllm")
    assert t == pytest.approx(raw / SUSTAINED_CLOCK["hopper"]) and "sustained clock" in ev.note
    named = engine_cluster(replace(load_cluster("h100-sxm"), device=dev), "vllm")
    assert named.device.kernel_table == "trtllm"


def test_a_gpu_without_tables_keeps_the_roofline():
    cl = load_cluster("sg2262-like")
    assert engine_cluster(cl, "vllm") is cl


def test_the_report_names_the_table_or_the_roofline(capsys):
    from planner.cli import main

    args = ["evaluate", "--mode", "infer", "--model", "llama3.1-8b", "--tp", "1", "--gpus", "1", "--input-len", "200",
            "--output-len", "50", "--global-batch", "4"]  # fmt: skip
    assert main([*args, "--cluster", "h100-sxm"]) == 0
    assert "GEMMs from the measured table h100_sxm/gemm/vllm/" in capsys.readouterr().out
    assert main([*args, "--cluster", "sg2262-like"]) == 0
    assert "GEMMs from the fitted roofline" in capsys.readouterr().out


def test_a_prediction_outside_its_band_says_where_the_runs_fell(capsys):
    from planner.cli import main

    args = ["evaluate", "--mode", "infer", "--model", "llama3.1-70b", "--cluster", "h100-sxm", "--tp", "2", "--gpus",
            "2", "--dtype", "fp8", "--kv-dtype", "fp8", "--input-len", "5000", "--output-len", "500", "--global-batch",
            "1", "--engine", "trtllm"]  # fmt: skip
    assert main(args) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("TTFT", "TPOT"))}
    # TensorRT-LLM's TPOT rows were all measured below the model: the band lies under the point, and says so
    assert "the runs behind it measured below the prediction" in lines["TPOT"]
    assert "measured" not in lines["TTFT"].split("(80% band")[1].split(")")[0]
