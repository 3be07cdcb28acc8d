"""The event-driven scheduler: trivial graphs, hand-computed schedules, the three prerequisites, errors."""

import networkx as nx
import pytest

from costmodel.engines.graph.nodes import GraphBuilder
from costmodel.engines.graph.scheduler import DATA, NO_ENGINE, SYNC, Resources, resources_for, schedule
from costmodel.spec.presets import load_cluster

CL = load_cluster("h100-sxm").with_gpus(64)
ONE = Resources((("nccl-sm", 1),))


def test_single_compute_op():
    b = GraphBuilder(CL)
    b.compute("x", "gemm", 2.5)
    s = schedule(b.graph, ONE)
    assert s.makespan_s == 2.5 and s.compute_s == 2.5 and s.link_s == {} and s.rates() == {}


def test_compute_runs_in_program_order_on_one_stream():
    b = GraphBuilder(CL)
    b.compute("a", "gemm", 1.0)
    b.compute("b", "elementwise", 0.5)  # independent of a, still after it on the stream
    s = schedule(b.graph, ONE)
    assert (s.start["b"], s.makespan_s) == (1.0, 1.5)


def test_tp_forward_allreduce_sits_on_the_critical_path():
    # fc2 (1.0) -> AllReduce (0.3) -> bda2 (0.1): nothing to overlap, 0.3 exposed, r = 0
    b = GraphBuilder(CL)
    y = b.compute("fc2", "gemm", 1.0)
    ar = b.comm("fc2.ar", "allreduce", 0, 8, 1, "tp", [y], duration_s=0.3)
    b.compute("bda2", "elementwise", 0.1, [ar])
    s = schedule(b.graph, ONE)
    assert s.makespan_s == pytest.approx(1.4)
    assert s.rates() == {"tp": 0.0}
    assert s.exposures[0].prerequisite == DATA
    assert s.critical_path == ("fc2", "fc2.ar", "bda2")


def test_tp_backward_allreduce_hides_behind_wgrad():
    # dgrad (1.0) -> AllReduce (0.4) || wgrad (0.5) -> ln (0.1): hidden, r = 1
    b = GraphBuilder(CL)
    d = b.compute("dgrad", "gemm", 1.0)
    ar = b.comm("ar", "allreduce", 0, 8, 1, "tp", [d], duration_s=0.4)
    b.compute("wgrad", "gemm", 0.5)
    b.compute("ln", "elementwise", 0.1, [ar])
    s = schedule(b.graph, ONE)
    assert s.makespan_s == pytest.approx(1.6) and s.rates() == {"tp": 1.0}


def test_interference_slows_compute_only_for_sm_engines():
    # 1.0 s of compute beside a 0.5 s SM-based transfer at 20 % interference:
    # 0.5 s at 80 % speed (0.4 done), then 0.6 s at full speed: ends at 1.1
    def run(uses_compute):
        b = GraphBuilder(CL)
        x = b.compute("x", "gemm", 0.0)
        c = b.comm("c", "allgather", 0, 8, 1, "zero", [x], duration_s=0.5)
        b.compute("y", "gemm", 1.0, [x])
        b.sink("out", [c])
        return schedule(b.graph, Resources((("nccl-sm", 1),), frozenset({"nccl-sm"} if uses_compute else ()), 0.2))

    sm, dma = run(True), run(False)
    assert sm.makespan_s == pytest.approx(1.1) and sm.interference_s == pytest.approx(0.1)
    assert dma.makespan_s == pytest.approx(1.0) and dma.interference_s == 0


def test_no_free_engine():
    # x -> a (inter, 1.0) -> use_a (0.5); x -> t (intra, 1.0) -> use_t (0.5).
    # One engine: a 0-1, t 1-2 (waits for the engine), use_a 1-1.5, use_t 2-2.5.
    # Two engines: both 0-1, use_a 1-1.5, use_t 1.5-2.
    b = GraphBuilder(CL)
    x = b.compute("x", "gemm", 0.0)
    a = b.comm("a", "allreduce", 0, 8, 8, "dp", [x], duration_s=1.0)
    t = b.comm("t", "allreduce", 0, 8, 1, "tp", [x], duration_s=1.0)
    b.compute("use_a", "gemm", 0.5, [a])
    b.compute("use_t", "gemm", 0.5, [t])
    one, two = schedule(b.graph, ONE), schedule(b.graph, Resources((("nccl-sm", 2),)))
    assert one.makespan_s == pytest.approx(2.5) and two.makespan_s == pytest.approx(2.0)
    assert {e.node: e.prerequisite for e in one.exposures}["t"] == NO_ENGINE
    assert one.lanes["a"] == one.lanes["t"] == "nccl-sm#0" and two.lanes["t"] == "nccl-sm#1"


def test_engine_wait_is_reported():
    b = GraphBuilder(CL)
    x = b.compute("x", "gemm", 0.0)
    big = b.comm("big", "allgather", 0, 8, 8, "zero", [x], duration_s=2.0)  # prefetch, needed at the end
    b.compute("work", "gemm", 0.5)
    t = b.comm("t", "allreduce", 0, 8, 1, "tp", [x], duration_s=0.5)
    b.compute("use", "gemm", 0.1, [t])
    b.sink("out", [big])
    s = schedule(b.graph, ONE)
    reasons = {e.node: e.prerequisite for e in s.exposures}
    assert reasons.get("t") == NO_ENGINE or reasons.get("big") == NO_ENGINE


def test_synchronous_issue_blocks_the_stream():
    b = GraphBuilder(CL)
    x = b.compute("x", "gemm", 1.0)
    b.comm("send", "p2p", 0, 2, 8, "pp", [x], issue="sync", duration_s=0.3)
    b.compute("y", "gemm", 1.0)  # independent, yet it waits: the call was blocking
    s = schedule(b.graph, ONE)
    assert s.makespan_s == pytest.approx(2.3)
    assert s.exposures[0].prerequisite == SYNC


def test_resources_from_presets():
    r = resources_for(load_cluster("sg2262-like").device)
    assert dict(r.engines)["cdma"] == 4 and r.uses_compute == frozenset() and r.interference == 0.0


def test_errors():
    b = GraphBuilder(CL)
    x = b.compute("x", "gemm", 1.0)
    with pytest.raises(ValueError, match="already exists"):
        b.compute("x", "gemm", 1.0)
    with pytest.raises(ValueError, match="kind"):
        b.compute("z", "conv", 1.0)
    with pytest.raises(ValueError, match="strategy"):
        b.comm("c", "allreduce", 0, 8, 1, "mp", [x])
    b.comm("c", "allreduce", 1e6, 8, 1, "tp", [x])
    with pytest.raises(ValueError, match="no DMA engine class"):
        schedule(b.graph, Resources((("copy", 1),)))
    g = nx.DiGraph(b.graph)
    g.add_edge("c", "x")
    with pytest.raises(ValueError, match="cycle"):
        schedule(g, ONE)


def test_exposure_reasons_do_not_depend_on_the_hash_seed():
    """The op an exposure blames is the first blocker seen, not a set's hash order (names are strings)."""
    import os
    import subprocess
    import sys

    code = (
        "from costmodel.engines.graph.explain import explain; from costmodel.spec.presets import load_model, load_cluster; "
        "from costmodel.spec.workload import Workload; from costmodel.spec.plan import ParallelConfig as P; "
        "m=load_model('llama3-70b'); c=load_cluster('h100-sxm').with_gpus(64); "
        "w=Workload(global_batch=512, seq_len=4096); "
        "print([r['reason'] for r in explain(m, c, w, P(tp=4, pp=2, dp=8, mb=2, vp=8, sp=True, zero=3, recompute='full', bucket_bytes=25e6, chunks=4))])"
    )
    out = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    ]
    assert "stalled compute" in out[0], out[0]
    assert out[0] == out[1] == out[2]
