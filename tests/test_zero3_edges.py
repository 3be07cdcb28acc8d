"""The embedding and head units of FSDP2 / DeepSpeed ZeRO-3 plans (costmodel.physics.mechanics.zero3_edges): what is
issued per micro-batch, by hand, and that both engines charge the embedding's exposed part."""

from unittest import mock

import pytest

from costmodel.engines import analytic
from costmodel.training import estimate
from costmodel.spec.plan import ParallelConfig
from costmodel.engines.graph import compose
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.physics.mechanics.zero3_edges import edge_collectives, edge_times


def test_fsdp2_units_by_hand():
    m = load_model("llama3-8b")  # untied: embedding 128256 x 4096, head the same plus the final norm
    emb = 128256 * 4096
    e = edge_collectives(m, ParallelConfig(dp=64, zero=3, framework="fsdp2"), 0)
    assert e.gathers_fwd == (emb, emb + 4096) and e.gathers_bwd == (emb,)  # [norm, output] kept for backward
    assert e.reduces == (emb, emb + 4096) and e.exposed_gather == e.exposed_reduce == emb
    # tp splits the units; no reshard (zero 2): no backward gather
    e2 = edge_collectives(m, ParallelConfig(dp=32, tp=2, zero=2, framework="fsdp2"), 0)
    assert e2.gathers_bwd == () and e2.gathers_fwd[0] == emb / 2


def test_nothing_outside_sharded_per_microbatch_plans():
    m = load_model("llama3-8b")
    for c in (
        ParallelConfig(dp=64, zero=1),
        ParallelConfig(dp=64, zero=3, framework="megatron"),
        ParallelConfig(dp=1, zero=3, framework="fsdp2"),
        ParallelConfig(dp=8, pp=2, zero=2, framework="fsdp2"),
    ):
        assert edge_collectives(m, c, 0) == edge_collectives(m, c, 0).__class__()


def test_deepspeed_extra_bucket_is_the_embedding_and_head():
    m = load_model("llama2-70b")
    c = ParallelConfig(dp=384, zero=3, framework="deepspeed", bucket_bytes=0)
    e = edge_collectives(m, c, 0)
    assert len(e.reduces) == 1 and e.reduces[0] == pytest.approx(2 * m.embedding_params + m.hidden)
    assert e.exposed_gather == m.embedding_params


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_both_engines_charge_the_exposed_embedding_collectives(engine):
    m, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=128, seq_len=4096)
    c = ParallelConfig(dp=64, mb=1, zero=3, framework="fsdp2")
    link, ex_f, ex_b = edge_times(m, cl, c, 0)
    assert link > ex_f + ex_b > 0

    def run():
        analytic.layer_timing.cache_clear()
        compose._graph_step.cache_clear()
        return estimate.evaluate(m, cl, w, c, engine=engine)

    with_edges = run()
    with (
        mock.patch.object(analytic, "edge_times", lambda *a: (0.0, 0.0, 0.0)),
        mock.patch.object(compose, "edge_times", lambda *a: (0.0, 0.0, 0.0)),
    ):
        without = run()
    run()
    micro = w.global_batch // (c.dp * c.mb)
    assert with_edges.step_time_s - without.step_time_s == pytest.approx(micro * (ex_f + ex_b), rel=1e-6)


def test_module_layout_is_checked_and_round_trips():
    from costmodel.spec.errors import SpecError

    with pytest.raises(SpecError, match="module_layout"):
        ParallelConfig(module_layout="hf")  # Megatron builds its own fused modules
    with pytest.raises(SpecError, match="module_layout"):
        ParallelConfig(framework="deepspeed", zero=3, module_layout="gpt2")
    c = ParallelConfig(framework="deepspeed", zero=3, module_layout="hf")
    assert ParallelConfig.from_dict(c.to_dict()) == c
    assert "module_layout" not in ParallelConfig(framework="deepspeed", zero=3).to_dict()


def test_zero3_parts_add_up_to_the_step():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
    from benchmarks import zero3_parts
    from benchmarks.published import load_set, predict

    row = next(
        r
        for r in load_set("new")
        if "zero3_fsdp" in r.regimes
        and r.fixed.get("pp", 1) == 1
        and r.fixed.get("framework") == "fsdp2"
        and not r.model.is_moe
    )
    est, _ = predict(row)
    p = zero3_parts.parts(row, est)
    assert p["copies"] > 0 and p["zero"] > 0  # FSDP2: copies on the compute stream, the embedding's exposed part
    assert sum(p.values()) == pytest.approx(est.step_time_s, rel=0.01)
