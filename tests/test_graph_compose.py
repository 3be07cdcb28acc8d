"""Layer -> stage -> pipeline -> step: evaluate(engine="graph") against the analytical path, DP
buckets behind the last backward, and the speed of the hierarchical composition."""

import pytest

from costmodel.engines import analytic
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.engines.graph.compose import graph_step, stage_timing
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

GPT = load_model("gpt3-175b")
A100 = load_cluster("a100-80g")
W = Workload(global_batch=64, seq_len=2048)

CASES = [
    ParallelConfig(tp=8, pp=8, vp=3, sp=True, recompute="selective", flash_attention=False),
    ParallelConfig(tp=8, pp=8, recompute="full", flash_attention=False, bucket_bytes=0),
    ParallelConfig(tp=4, pp=8, dp=4, vp=6, sp=True, chunks=4, zero=1),
    ParallelConfig(tp=8, pp=4, dp=2, mb=2, sp=True, chunks=8),
]


def test_stage_timing_has_the_analytic_interface():
    c = CASES[0]
    cl = A100.with_gpus(c.gpus)
    g, a = stage_timing(GPT, cl, W, c, 7), analytic.stage_timing(GPT, cl, W, c, 7)
    assert type(g) is type(a)
    assert g.fwd_s == pytest.approx(a.fwd_s, rel=0.02) and g.bwd_s == pytest.approx(a.bwd_s, rel=0.02)
    assert g.microbatch_s == pytest.approx(
        g.fwd_s + g.bwd_s + g.recompute_s + g.ledger.total_exposed_s + g.interference_s
    )


@pytest.mark.parametrize("c", CASES)
def test_graph_and_analytic_engines_agree_within_ten_percent(c):
    cl = A100.with_gpus(c.gpus)
    a, g = evaluate(GPT, cl, W, c, engine="analytic"), evaluate(GPT, cl, W, c, engine="graph")
    assert g.step_time_s == pytest.approx(a.step_time_s, rel=0.10)
    assert sum(g.breakdown.values()) == pytest.approx(g.step_time_s, rel=1e-9)  # the documented sum
    assert all(0.0 <= r <= 1.0 for r in g.overlap.values())


def test_unknown_engine_is_a_spec_error():
    with pytest.raises(SpecError, match="engine"):
        evaluate(GPT, A100.with_gpus(64), W, CASES[0], engine="magic")


def test_no_bucketing_exposes_the_whole_reduction_as_synchronous():
    c = ParallelConfig(tp=8, dp=8, mb=1, bucket_bytes=0)
    model, w = load_model("gpt-7.5b"), Workload(global_batch=16, seq_len=2048)
    gs = graph_step(model, A100.with_gpus(64), w, c)
    assert gs.dp_exposed_s == pytest.approx(gs.dp_link_s, rel=1e-6)
    assert gs.dp_schedules[0].reasons()["dp"].startswith("synchronous issue")


def test_bucket_size_trades_overlap_against_latency():
    # one huge bucket cannot overlap; moderate buckets hide part of the reduction; tiny buckets
    # pay one collective latency each (2 log2(8) tree steps across nodes), so exposure rises again.
    # Megatron-Core closes a bucket only after a whole parameter (costmodel.physics.mechanics.grad_buckets): below the
    # smallest weight matrix (4096 x 512 elements per GPU at tp 8, 8.4 MB of FP32 gradients) every
    # bucket is one matrix (the norms join the next one), so 4 MB and 0.5 MB buckets are the same
    model, w = load_model("gpt-7.5b"), Workload(global_batch=16, seq_len=2048)
    steps = {
        b: graph_step(model, A100.with_gpus(64), w, ParallelConfig(tp=8, dp=8, bucket_bytes=b))
        for b in (4e9, 400e6, 100e6, 40e6, 4e6, 0.5e6)
    }
    exposed = {b: s.dp_exposed_s for b, s in steps.items()}
    link = {b: s.dp_link_s for b, s in steps.items()}
    assert exposed[400e6] < exposed[4e9]
    assert exposed[100e6] < min(exposed[400e6], exposed[4e6])  # an interior optimum
    assert link[4e6] > link[40e6] > link[400e6]  # each bucket pays its collective's latency
    assert exposed[0.5e6] == exposed[4e6]


def test_drain_bubble_hides_a_later_stages_reduction():
    c = ParallelConfig(tp=8, pp=4, dp=2, mb=1)
    gs = graph_step(GPT, A100.with_gpus(64), Workload(global_batch=16, seq_len=2048), c)
    ends = gs.pipeline.last_backward_end_s
    assert ends[3] < ends[0]  # 1F1B: the last stage finishes its backwards first
    assert gs.dp_stage in (0, 3)


def test_gpt_1t_on_3072_gpus_evaluates():
    """Hierarchical composition: 128 layers, pp 64, 512 micro-batches of 2 chunks (the speed of
    this evaluation is printed by benchmarks/graph_vs_analytic.py, not timed here)."""
    m, cl = load_model("gpt-1t"), A100.with_gpus(3072)
    w = Workload(global_batch=3072, seq_len=2048)
    c = ParallelConfig(tp=8, pp=64, dp=6, vp=2, mb=1, recompute="full", flash_attention=False, bucket_bytes=0)
    e = evaluate(m, cl, w, c, engine="graph")  # its speed: benchmarks/graph_vs_analytic.py
    assert e.step_time_s == pytest.approx(102.63, rel=0.15)  # Narayanan et al. 2021, Table 1


def test_graph_step_is_cached():
    c = CASES[0]
    cl = A100.with_gpus(c.gpus)
    assert graph_step(GPT, cl, W, c) is graph_step(GPT, cl, W, c)
