"""Serving engines' own TP all-reduce from their measured tables (issues 38 and 40)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.physics.tables.allreduce import counts, engine_allreduce_lookup
from costmodel.physics.tables.store import load, manifest, table_for
from costmodel.serving.engines import engine_allreduce_s, engine_cluster
from costmodel.serving.phase import _layer
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

ENGINES = ("trtllm", "vllm", "sglang")


def test_every_table_system_has_each_engines_table_with_its_source():
    files = {f: e for f, e in manifest()["files"].items() if e["op"] == "allreduce"}
    systems = {e["system"] for e in manifest()["files"].values() if e["op"] == "gemm"}
    assert {(e["system"], e["backend"]) for e in files.values()} == {(s, b) for s in systems for b in ENGINES}
    for f, e in files.items():
        assert e["source_path"].endswith(f"/comm/{e['backend']}/{e['backend_version']}/custom_allreduce_perf.parquet")
        assert e["licence"] == "Apache-2.0" and e["source_commit"]
        assert counts(f, "graph"), f  # every engine has its CUDA-graph series
    # SGLang 0.5.6.post2 on H100 holds TensorRT-LLM's rows: never kept as SGLang's
    dropped = [d for d in manifest()["dropped"] if d["op"] == "allreduce" and d["version"] == "0.5.6.post2"]
    assert dropped and all("another engine" in d["why"] for d in dropped)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grid_size_reads_the_measurement_and_sizes_between_interpolate(engine):
    dev = load_cluster("b200").device
    choice = table_for(dev, "allreduce", engine)
    z = load(choice.file)
    b, lat = z["all_reduce.graph.8.bytes"], z["all_reduce.graph.8.lat_ms"].astype(float)
    j = 10
    t, ev = engine_allreduce_lookup(dev, engine, float(b[j]), 8)
    assert ev.kind == "measured" and ev.table == choice.label
    assert t == pytest.approx(min(lat[j], lat[j + 1]) * 1e-3)  # the monotone read: never above the next size
    mid, ev = engine_allreduce_lookup(dev, engine, float(b[j] + b[j + 1]) / 2, 8)
    assert ev.kind == "interpolated"
    lo, hi = sorted(np.minimum(lat[j : j + 2], lat[j + 1 : j + 3]) * 1e-3)
    assert lo <= mid <= hi
    big, ev = engine_allreduce_lookup(dev, engine, float(b[-1]) * 4, 8)
    assert ev.kind == "extrapolated" and big > lat[-1] * 1e-3


def test_no_series_or_no_table_leaves_the_model():
    assert engine_allreduce_lookup(load_cluster("gb200-nvl72").device, "trtllm", 1 << 16, 8)[0] is None
    assert engine_allreduce_lookup(load_cluster("sg2262-like").device, "trtllm", 1 << 16, 2)[0] is None
    plain = load_cluster("h100-sxm")
    assert engine_allreduce_s(plain, 1 << 16, 2) is None  # no engine named: the collective model
    assert engine_allreduce_s(engine_cluster(plain, "sglang"), 1 << 16, 2) is not None
    assert engine_allreduce_s(engine_cluster(plain, "sglang"), 1 << 16, 16) is None  # wider than the node
    assert engine_allreduce_s(engine_cluster(plain, "sglang"), 0, 2) is None  # nothing to reduce: the model's 0


def test_a_decode_layer_pays_two_of_the_engines_all_reduces():
    model = load_model("llama3.1-70b")
    w = Workload(global_batch=1, seq_len=1, dtype="fp8", mode="infer")
    c = ParallelConfig(tp=2, mb=1)
    msg = model.hidden * 2  # one token's bf16 activations
    for engine in ENGINES:
        cl = engine_cluster(load_cluster("h100-sxm").with_gpus(2), engine)
        led = _layer(model, cl, w, c, False, True, "fp8")[2]
        t, _ = engine_allreduce_lookup(cl.device, engine, msg, 2)
        assert led.link_s["tp"] == pytest.approx(2 * t)
    # without an engine the collective model times it (its one-shot peer read and NCCL's Simple ring step), not the table
    plain = _layer(model, load_cluster("h100-sxm").with_gpus(2), w, c, False, True, "fp8")[2]
    assert plain.link_s["tp"] != pytest.approx(led.link_s["tp"], rel=0.05)


def test_the_serving_report_names_the_all_reduce_table(capsys):
    from planner.cli import main

    args = ["evaluate", "--mode", "infer", "--model", "llama3.1-8b", "--gpus", "2", "--input-len", "200",
            "--output-len", "50", "--global-batch", "4", "--engine", "trtllm"]  # fmt: skip
    assert main([*args, "--cluster", "h100-sxm", "--tp", "2"]) == 0
    assert "TP all-reduce from the measured table h100_sxm/allreduce/trtllm/1.3.0rc20" in capsys.readouterr().out
    assert main([*args, "--cluster", "h100-sxm", "--tp", "1", "--dp", "2"]) == 0
    assert "TP all-reduce from the measured table" not in capsys.readouterr().out
