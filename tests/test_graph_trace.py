"""Chrome trace JSON validity and the Gantt PNG of one step of one stage."""

import builtins
import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import PlannerError
from costmodel.engines.graph.trace import timeline, write_chrome_trace, write_gantt
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

M = load_model("llama2-13b")
CL = load_cluster("h100-sxm").with_gpus(32)
W = Workload(global_batch=16, seq_len=2048)
C = ParallelConfig(tp=4, pp=4, dp=2, vp=2, sp=True, chunks=4, zero=1)


def test_chrome_trace_is_valid(tmp_path):
    path = tmp_path / "step.json"
    write_chrome_trace(path, M, CL, W, C)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    # one lane set per engine pool of the DMA assignment (costmodel.physics.comm.dma): <class>/<stream>
    assert lanes[0] == "compute" and {"nccl-sm/tp#0", "nccl-sm/pp#p2p", "nccl-sm/dp#dp"} <= set(lanes.values())
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["ph"] in ("X", "M") for e in events)
    for e in spans:
        assert e["tid"] in lanes and e["pid"] == 0
        assert isinstance(e["ts"], float) and e["ts"] >= 0 and e["dur"] >= 0 and e["name"]
    # compute never overlaps itself on its lane (one stream)
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == 0)
    assert all(b[0] >= a[1] - 1e-6 for a, b in zip(comp, comp[1:]))
    assert doc["otherData"]["config"]["tp"] == 4


def test_timeline_covers_the_step_of_the_chosen_stage():
    tl = timeline(M, CL, W, C, stage=0)
    assert tl["stage"] == 0 and tl["step_s"] > 0
    cats = {e["cat"] for e in tl["events"]}
    assert {"gemm", "sp", "pp", "dp"} <= cats
    with pytest.raises(PlannerError, match="stage"):
        timeline(M, CL, W, C, stage=9)


def test_inference_timeline_is_one_decode_step():
    w = Workload(mode="infer", global_batch=8, input_len=1024, output_len=64)
    tl = timeline(M, CL.with_gpus(4), w, ParallelConfig(tp=4))
    assert {e["args"]["phase"] for e in tl["events"]} == {"decode"}
    prefill = timeline(M, CL.with_gpus(4), Workload(mode="train", global_batch=1, seq_len=1024), ParallelConfig(tp=4))
    assert tl["step_s"] < prefill["step_s"]  # one token per sequence, not a 1024-token forward and backward


def test_gantt_png_is_written(tmp_path):
    path = tmp_path / "step.png"
    write_gantt(path, M, CL, W, C)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gantt_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PlannerError, match=r"pip install 'overlap-planner\[plot\]'"):
        write_gantt(tmp_path / "x.png", M, CL, W, C)
