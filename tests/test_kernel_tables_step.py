"""Issue 38: the step model's single GEMMs timed from the measured tables (``DeviceSpec.kernel_table``) at the
generation's sustained clock, grouped GEMMs kept on the fitted model, and the evidence saying which is which."""

from dataclasses import replace

import pytest

from costmodel.api import evaluate
from costmodel.physics.kernels.gemm import gemm_time_s, grouped_gemm_time_s
from costmodel.physics.kernels.measured import SUSTAINED_CLOCK, table_gemm
from costmodel.physics.tables import gemm_lookup
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.trust.evidence import step_evidence


def _dev(cluster: str, table: str = "trtllm"):
    return replace(load_cluster(cluster).device, kernel_table=table)


def test_a_single_gemm_is_the_table_time_at_sustained_clocks():
    dev = _dev("h100-sxm")
    t_table, ev = gemm_lookup("h100_sxm", "bf16", 8192, 8192, 8192, "trtllm")
    assert ev.kind == "measured"
    assert gemm_time_s(8192, 8192, 8192, dev, "bf16") == pytest.approx(t_table / SUSTAINED_CLOCK["hopper"])
    # without a table named, the fitted roofline as before
    fitted = load_cluster("h100-sxm").device
    assert gemm_time_s(8192, 8192, 8192, fitted, "bf16") != pytest.approx(t_table / SUSTAINED_CLOCK["hopper"])


def test_grouped_gemms_keep_the_fitted_model():
    dev, fitted = _dev("h100-sxm"), load_cluster("h100-sxm").device
    a = grouped_gemm_time_s(2048, 768, 2048, dev, "bf16", 16, ragged=True, streams=2)
    b = grouped_gemm_time_s(2048, 768, 2048, fitted, "bf16", 16, ragged=True, streams=2)
    assert a == b


def test_a_part_without_its_own_table_says_which_stands_in():
    t, ev = table_gemm(4096, 8192, 8192, _dev("h800"), "bf16")
    assert t is not None and "h100_sxm stands in for H800" in ev.note
    t, ev = table_gemm(4096, 8192, 8192, _dev("sg2262-like"), "bf16")
    assert t is None and ev.kind == "assumed"


def test_evidence_names_the_table_for_the_gemms_it_timed():
    m, c = load_model("llama3-70b"), load_cluster("b200").with_gpus(64)
    c = replace(c, device=replace(c.device, kernel_table="trtllm"))
    w = Workload(global_batch=128, seq_len=4096)
    est = evaluate(m, c, w, ParallelConfig(tp=8, pp=2, dp=4, mb=1, sp=True))
    parts = step_evidence(m, c, w, est)["compute_s"]["parts"]
    assert parts["gemm (tables)"]["kind"] in ("measured", "interpolated", "extrapolated")
    assert parts["gemm (tables)"]["share"] > 0.5 and "b200_sxm" in parts["gemm (tables)"]["basis"]
    assert not parts["gemm (tables)"]["untested"]


def test_cli_kernels_measured_reads_the_stacks_table_and_says_where_there_is_none(capsys):
    from planner import cli

    args = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "32", "--seq", "4096", "--tp", "1"]
    assert cli.main([*args, "--cluster", "h100-sxm", "--kernels", "measured", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert "gemm (tables)" in out["evidence"]["compute_s"]["parts"]
    assert cli.main([*args, "--cluster", "sg2262-like", "--kernels", "measured", "--json"]) == 0
    gemm = json.loads(capsys.readouterr().out)["evidence"]["compute_s"]["parts"]["gemm"]
    assert gemm["basis"].startswith("no measured GEMM table for SG2262-like")
    assert cli.main([*args, "--cluster", "h100-sxm", "--kernels", "tabled"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_collectives_inside_one_node_come_from_the_nccl_table_across_nodes_from_the_model():
    import numpy as np

    from costmodel.physics.comm.collectives import collective_time_s
    from costmodel.physics.tables import collective_lookup

    c = load_cluster("h100-sxm").with_gpus(16)
    measured = replace(c, device=replace(c.device, kernel_table="trtllm"))
    t_table, _ = collective_lookup("h100_sxm", "all_gather", 1 << 20, 8)
    assert collective_time_s("allgather", 1 << 20, 8, 1, measured) == pytest.approx(t_table)
    assert collective_time_s("allgather", 1 << 20, 8, 1, c) != pytest.approx(t_table)
    arr = collective_time_s("allgather", np.array([1 << 20, 1 << 21]), 8, 1, measured)
    assert arr[0] == pytest.approx(t_table) and arr[1] > arr[0]
    # across two nodes: the modelled NCCL algorithms, as without tables
    assert collective_time_s("allgather", 1 << 20, 16, 1, measured) == collective_time_s("allgather", 1 << 20, 16, 1, c)
    # H800's NVLink is not H100's: no stand-in table for its collectives
    h800 = load_cluster("h800").with_gpus(8)
    h800m = replace(h800, device=replace(h800.device, kernel_table="trtllm"))
    assert collective_time_s("allgather", 1 << 20, 8, 1, h800m) == collective_time_s("allgather", 1 << 20, 8, 1, h800)
