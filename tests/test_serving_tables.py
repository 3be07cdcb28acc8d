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
