"""MLA decode attention from the serving engines' measured kernels (issues 38 and 40)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.physics.kernels.compute import _decode_attention
from costmodel.physics.tables.mla import mla_decode_lookup
from costmodel.physics.tables.store import load, manifest, table_for
from costmodel.serving.engines import default_scheduler, engine_cluster
from costmodel.serving.scheduler import simulate
from costmodel.serving.step import step_cost
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model

DSV3 = load_model("deepseek-v3")


def test_every_system_has_tensorrt_llms_mla_table_and_where_collected_sglangs():
    files = {f: e for f, e in manifest()["files"].items() if e["op"] == "mla"}
    have = {(e["system"], e["backend"]) for e in files.values()}
    systems = {e["system"] for e in manifest()["files"].values() if e["op"] == "gemm"}
    assert {(s, "trtllm") for s in systems} <= have and all(b in ("trtllm", "sglang") for _, b in have)
    for f, e in files.items():
        assert e["source_path"].endswith(f"/mla/{e['backend']}/{e['backend_version']}/generation_mla_perf.parquet")
        z = load(f)
        assert z["lat_ms"].shape == (len(z["cfg"]), len(z["batch"]), len(z["ctx"]))
        assert np.isfinite(z["lat_ms"]).all() and (z["lat_ms"] > 0).all()


@pytest.mark.parametrize("engine", ["trtllm", "sglang"])
def test_grid_points_read_the_measurement_and_between_them_interpolate(engine):
    dev = load_cluster("h200").device
    z = load(table_for(dev, "mla", engine).file)
    i = [tuple(r) for r in z["cfg"].tolist()].index((0, 16))  # bf16 cache, 16 heads per GPU
    b, c, lat = z["batch"], z["ctx"], z["lat_ms"][i].astype(float)
    t, ev = mla_decode_lookup(dev, engine, b[4], c[8], 16, "bf16")
    assert ev.kind == "measured" and t == pytest.approx(lat[4, 8] * 1e-3, rel=1e-6)
    mid, ev = mla_decode_lookup(dev, engine, b[4], (c[8] + c[9]) / 2, 16, "bf16")
    assert ev.kind == "interpolated" and min(lat[4, 8], lat[4, 9]) * 1e-3 <= mid <= max(lat[4, 8], lat[4, 9]) * 1e-3
    # an FP8 cache is its own configuration, and a head count between two measured ones interpolates
    assert (
        mla_decode_lookup(dev, engine, 8, 4096, 16, "fp8")[0] != mla_decode_lookup(dev, engine, 8, 4096, 16, "bf16")[0]
    )
    lo, hi = (mla_decode_lookup(dev, engine, 8, 4096, h, "bf16")[0] for h in (16, 32))
    assert lo <= mla_decode_lookup(dev, engine, 8, 4096, 24, "bf16")[0] <= hi


def test_the_decode_op_reads_the_engines_kernel_only_for_mla_with_an_engine():
    plain, tr = load_cluster("b200").device, engine_cluster(load_cluster("b200"), "trtllm").device
    op = _decode_attention(DSV3, tr, 32, 4096, 8, 2)
    assert op.fwd_s == pytest.approx(mla_decode_lookup(tr, "trtllm", 32, 4096, 16, "bf16")[0])
    assert op.evidence in ("measured", "interpolated")
    assert _decode_attention(DSV3, plain, 32, 4096, 8, 2).evidence == "assumed"  # no engine: the roofline
    gqa = load_model("llama3.1-70b")
    assert _decode_attention(gqa, tr, 32, 4096, 8, 2).fwd_s == pytest.approx(
        _decode_attention(gqa, plain, 32, 4096, 8, 2).fwd_s
    )


def test_a_step_prices_its_decodes_as_one_call_at_their_count_and_mean_context():
    from costmodel.physics.kernels.decode_attention import decode_attention_fixed_s

    cl = engine_cluster(load_cluster("b200").with_gpus(8), "trtllm")
    cost = step_cost(DSV3, cl, "fp8", ParallelConfig(tp=8), "bf16")
    assert cost.mla and cost.ctx_octaves
    body = cost.price(16, 16, 0.0, 0.0, 1)  # no cached tokens: the step's body, its attention calls holding no work
    t = cost.price(16, 16, 0.0, 16 * 3000.0, 1)
    call = mla_decode_lookup(cl.device, "trtllm", 16, 3000, 16, "bf16")[0]
    assert t - body == pytest.approx(DSV3.layers * (call - decode_attention_fixed_s(cl.device)), rel=1e-6)
    # a prefill chunk's tokens are no decode sequences: the body's probe (one cached token) stays the roofline's
    wide = _decode_attention(DSV3, cl.device, 4096, 1, 8, 2)
    assert wide.evidence == "assumed" and wide.fwd_s < 2 * call


def test_a_decode_run_follows_the_kernels_curve():
    # one request decoding 3,000 tokens: the replay's decode-run lines (one per octave of the context) against
    # pricing every step on its own
    cl = engine_cluster(load_cluster("h200").with_gpus(8), "sglang")
    cost = step_cost(DSV3, cl, "fp8", ParallelConfig(tp=8), "fp8")
    s = simulate(cost, default_scheduler("sglang", cl.device), input_len=1000, output_len=3000, concurrency=1,
                 num_requests=1, kv_capacity=8, measure="all")  # fmt: skip
    steps = [cost.price(1, 1, 0.0, 1000.0 + i, 1) for i in range(1, 3000)]
    assert s.tpot_s == pytest.approx(sum(steps) / len(steps), rel=0.01)


def test_the_steps_fast_read_is_the_look_up_between_grid_contexts():
    from costmodel.physics.tables.mla import mla_decode_s

    for sys_, engine in (("h100-sxm", "trtllm"), ("b200", "sglang")):
        dev = load_cluster(sys_).device
        for b, ctx in ((1, 1.0), (3, 2.0), (16, 700.0), (64, 3000.0), (200, 12345.0), (512, 200000.0)):
            for kv in ("bf16", "fp8"):
                want = mla_decode_lookup(dev, engine, b, ctx, 16, kv)[0]
                assert mla_decode_s(dev, engine, b, ctx, 16, kv) == pytest.approx(want, rel=1e-6), (sys_, b, ctx, kv)
    assert mla_decode_s(load_cluster("sg2262-like").device, "trtllm", 8, 100.0, 16, "bf16") is None
