"""Cost tables: their step time is evaluate's, at one integer resolution, and the bounds stay below.

Random plans of dense and MoE models (leading dense layers, uneven stages, interleaving, partial
recompute, ZeRO 0-3, buckets, chunks) are scored both ways.
"""

from dataclasses import replace
import math
import random
import zlib

import pytest

from costmodel.compose.stage_terms import dp_comm, grad_bytes
from costmodel.physics.comm.collectives import collective_latency_s
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.physics.memory.stage_contents import stage_params
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.bounds import Bounds
from search.candidates import (
    Split,
    bucket_values,
    chunk_values,
    mb_values,
    recompute_values,
    shapes,
    sp_values,
    splits,
    vp_values,
    zero_values,
)
from search.exhaustive import best_splits, max_stage_layers
from search.problem import Limits, Problem
from search.choice import Choice
from search.tables import Tables, probe_split, resolution_s, ticks

CASES = [
    ("gpt3-175b", "a100-80g", 64, 64, 2048),
    ("llama3-8b", "h100-sxm", 32, 64, 4096),
    ("mixtral-8x7b", "h100-sxm", 64, 128, 4096),
    ("deepseek-v3", "h800", 256, 512, 4096),
    ("gpt-1.7b", "a100-80g", 16, 32, 2048),
    ("qwen3-30b-a3b", "h100-sxm", 128, 256, 4096),
]


def problem(model, cluster, gpus, batch, seq, **limits):
    return Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=Limits(**limits),
    )


def random_plans(p, rng, n):
    """``n`` random (choice, split) pairs of ``p``'s space."""
    out, all_shapes = [], shapes(p)
    while len(out) < n:
        s = rng.choice(all_shapes)
        mb = rng.choice(mb_values(p, s.dp))
        vps = vp_values(p, s.pp, p.workload.global_batch // (s.dp * mb))
        if not vps:
            continue
        vp = rng.choice(vps)
        kind, k = rng.choice(recompute_values(p, max_stage_layers(p, s.pp, vp)))
        c = Choice(
            s,
            mb,
            vp,
            rng.choice(sp_values(p, s)),
            rng.choice(chunk_values(p, s)),
            rng.choice(zero_values(p, s)),
            kind,
            k,
            rng.choice(bucket_values(p, s)),
        )
        options = list(splits(p.model.layers, s.pp, vp, max(1, p.model.dense_layers)))
        if options:
            sp = Split(*rng.choice(options))
            if k is None or max(sp.first, sp.mid, sp.last) >= k:
                out.append((c, sp))
    return out


# --------------------------------------------------------------------------- trivial
def test_resolution_is_a_millionth_of_the_ideal_step_order():
    p = problem("gpt3-175b", "a100-80g", 1024, 1536, 2048)
    # ideal step = 6 * 175e9 * 1536 * 2048 / (1024 * 312e12) = ~10.3 s -> order 10 s -> 1e-5 s ticks
    assert resolution_s(p) == pytest.approx(1e-5)
    assert ticks([1.0, 2.5e-5], 1e-5).tolist() == [100000, 2]


def test_choice_config_round_trips():
    p = problem("gpt3-175b", "a100-80g", 64, 64, 2048)
    c = Choice(shapes(p)[0], 1, 1, False, 1, 1, "full", 2, 25.0)
    cfg = c.config(layers_per_stage=None)
    assert (cfg.tp, cfg.zero, cfg.recompute_layers, cfg.bucket_bytes) == (c.shape.tp, 1, 2, 25e6)


# --------------------------------------------------------------------------- agreement with evaluate
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_table_step_time_and_memory_equal_evaluate(case):
    p = problem(*case)
    tables = Tables(p)
    for c, sp in random_plans(p, random.Random(zlib.crc32(case[0].encode())), 40):
        est = evaluate(
            p.model, p.cluster, p.workload, c.config(True, sp.layers_per_stage(c.shape.pp)), engine="analytic"
        )
        t = tables.stage_table(c)
        assert t.step_s(sp) == pytest.approx(est.step_time_s, rel=1e-9), (c, sp)
        peak = max(t.mem_bytes[k][sp.count("first" if k == "only" else k)] for k in t.kinds)
        assert peak == pytest.approx(est.peak_memory_bytes, rel=1e-9), (c, sp)
        assert t.fits(sp) == (est.peak_memory_bytes <= p.hbm_cap_bytes)


def test_dp_collectives_are_exact_where_nccl_switches_ring_and_tree():
    # Mixtral on H100, DP x CP across nodes: a middle stage's gradient all-reduce takes the tree
    # at few layers and the ring past them, so an affine fit through 1 and 2 layers was 6e-5 s off
    # at 13 layers (a CI failure on 64 GPUs, DP 8); the tables now price every layer count on its
    # own. With NCCL's pipelined ring (costmodel.physics.comm.collectives) the flip happens on 128 GPUs, DP 16.
    p = problem("mixtral-8x7b", "h100-sxm", 128, 128, 4096)
    s = next(x for x in shapes(p) if (x.tp, x.cp, x.pp, x.dp, x.ep) == (1, 2, 4, 16, 4))
    c = Choice(s, 1, 1, False, 1, 0, "full", 12, 25.0)
    a = Tables(p).affine(c, "mid")
    picks = set()
    for n in range(1, 20):
        lps, stage = probe_split(p, c, "mid", n)
        cfg = c.config(layers_per_stage=lps)
        assert a["t_grad"][n] == pytest.approx(dp_comm(p.model, p.cluster, cfg, stage)[0], rel=1e-12), n
        nbytes = grad_bytes(p.model, cfg, stage) - stage_params(p.model, cfg, stage)[1] * grad_elem_bytes(cfg)
        picks.add(collective_latency_s("allreduce", 32, 2, p.cluster, nbytes=nbytes))
    assert len(picks) == 2  # both algorithms occur over these counts
    # the CI plan: table and evaluate agree
    sp = Split(3, 13, 3)
    est = evaluate(p.model, p.cluster, p.workload, c.config(True, sp.layers_per_stage(4)), engine="analytic")
    assert Tables(p).stage_table(c).step_s(sp) == pytest.approx(est.step_time_s, rel=1e-9)


def test_integer_objective_is_within_rounding_of_seconds():
    p = problem("llama3-8b", "h100-sxm", 32, 64, 4096)
    tables = Tables(p)
    for c, sp in random_plans(p, random.Random(3), 30):
        t = tables.stage_table(c)
        if not t.fits(sp):
            continue
        for sc in best_splits(t, p.model.layers, 1):
            assert sc.objective * tables.res_s == pytest.approx(t.step_s(sc.split), abs=3 * tables.res_s)


def test_ranking_is_stable_across_two_resolutions():
    p = problem("gpt-1.7b", "a100-80g", 16, 32, 2048)
    fine, coarse = Tables(p), Tables(p)
    coarse.res_s = fine.res_s * 10
    scored = []
    for c, _ in random_plans(p, random.Random(5), 60):
        a = best_splits(fine.stage_table(c), p.model.layers, 1)
        b = best_splits(coarse.stage_table(c), p.model.layers, 1)
        if a:
            scored.append((a[0].objective, b[0].objective * 10))
    scored.sort()
    for (f1, c1), (f2, c2) in zip(scored, scored[1:]):
        if f2 - f1 > 30:  # distinct at the coarse resolution too (3 terms x 10 ticks of rounding)
            assert c1 <= c2


# --------------------------------------------------------------------------- bounds
@pytest.mark.parametrize("case", CASES[:3] + CASES[4:], ids=[c[0] for c in CASES[:3] + CASES[4:]])
def test_bounds_never_exceed_the_best_split(case):
    p = problem(*case)
    tables = Tables(p)
    bounds = Bounds(tables)
    for c, _ in random_plans(p, random.Random(7), 40):
        best = best_splits(tables.stage_table(c), p.model.layers, 1)
        caps = bounds.caps(c)
        if caps is None:
            assert not best  # the memory screen only drops choices without a fitting split
            continue
        if best:  # presolve compares floor(bound / resolution) - 4 with integer objectives
            for lb in (bounds.quick_lb_s(c), bounds.strong_lb_s(c, caps)):
                assert math.floor(lb / tables.res_s) - 4 <= best[0].objective, c


@pytest.mark.parametrize(
    "case,framework",
    [(CASES[0], "megatron"), (CASES[2], "deepspeed"), (CASES[3], "megatron"), (CASES[1], "fsdp2")],
    ids=["gpt3", "mixtral-ds", "deepseek", "llama-fsdp2"],
)
def test_compute_twin_has_the_same_compute(case, framework):
    """The DP bound takes a layer's forward / backward / recompute times from ``Bounds.compute_twin``
    (ZeRO stage 0: shared by every ZeRO stage and DP degree); they must be the choice's own, and
    the exposed communication may differ (that is why the twin is not used for the pipeline)."""
    p = problem(*case)
    p = Problem(model=p.model, cluster=p.cluster, workload=p.workload, limits=p.limits, framework=framework)
    tables = Tables(p)
    differs = 0
    for c, _ in random_plans(p, random.Random(3), 60):
        c = Choice(c.shape, c.mb, c.vp, c.sp, c.chunks, c.zero, c.recompute, c.recompute_layers, c.bucket_mb, framework)
        twin = Bounds.compute_twin(c)
        for moe in [False, True] if p.model.is_moe else [False]:
            mine, theirs = tables.layer(c, moe), tables.layer(twin, moe)
            assert mine[2:5] == pytest.approx(theirs[2:5], rel=1e-12, abs=0), (c, moe)
            differs += mine[0] != theirs[0]
    if framework != "fsdp2" and case is not CASES[0]:
        assert differs  # some ZeRO-3 layer exposes its gathers: the twin's U is not the choice's


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3], CASES[5]], ids=lambda c: c[0])
def test_bucket_class_shares_only_equal_bucket_counts(case):
    """Megatron-Core's bucket counts, cached by their class (``Tables._bucket_class``: shapes that differ
    in pp, dp or cp beyond what the buckets read share one entry), equal each choice's own probes."""
    p = problem(*case)
    rng = random.Random(zlib.crc32(case[0].encode()))
    t, shared = Tables(p), 0
    from search.candidates import stage_kinds

    plans = [c for c, _ in random_plans(p, rng, 60)]
    # the same plans at every ZeRO stage and another bucket: on stages past the first the bucket size
    # is read only as "> 0" and the ZeRO stage only as whether it reduces gradients after the step
    plans += [replace(c, zero=z, bucket_mb=b) for c in plans[:12] for z in (0, 1) for b in (25.0, 160.0)]
    for c in plans:
        for kind in stage_kinds(c.shape.pp):
            key = ("bucket_counts", c.shape, c.zero, c.framework, kind, c.vp, c.bucket_mb, c.grad_dtype)
            shared += key not in t._affine and t._bucket_class(c, kind) in t._affine  # another shape's entry
            got, own = t._bucket_counts(c, kind), t.bucket_counts_of(c, kind)
            assert (got is None) == (own is None)
            if own is not None:
                for a, b in zip(got, own):
                    assert a.tolist() == b.tolist(), (c, kind)
    assert shared > 0  # another shape's entry was served (else nothing was checked)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]], ids=lambda c: c[0])
def test_valid_only_tables_equal_the_full_tables_where_valid(case):
    """``Tables.stage_table(valid_only=True)`` (the re-score's near plans) computes the DP entries at the
    valid layer counts alone: there they equal the full table's, and so do the best splits; and the
    DP bound (which probes the buckets only at the counts a stage may hold) is the same whichever
    entries the tables have probed already."""
    p = problem(*case)
    rng = random.Random(zlib.crc32(case[0].encode()) + 1)
    plans = [c for c, _ in random_plans(p, rng, 25)]
    sparse, full = Tables(p), Tables(p)
    compared = 0
    for c in plans:
        t_sparse, t_full = sparse.stage_table(c, valid_only=True), full.stage_table(c)
        assert t_sparse is not t_full and c not in sparse._stage  # built on its own, not stored as full
        for kind in t_full.kinds:
            v = t_full.valid[kind]
            assert v.tolist() == t_sparse.valid[kind].tolist()
            assert t_sparse.dp_s[kind][v].tolist() == t_full.dp_s[kind][v].tolist(), (c, kind)
            assert t_sparse.dp_ticks[kind][v].tolist() == t_full.dp_ticks[kind][v].tolist(), (c, kind)
            compared += int(v.sum())
        assert best_splits(t_sparse, p.model.layers, 3) == best_splits(t_full, p.model.layers, 3)
        assert Bounds(sparse).dp_lb_s(c) == Bounds(Tables(p)).dp_lb_s(c)
    assert compared > 0


def test_tables_with_another_headroom_share_times_not_fits():
    """The margin solve's tables (search.solve._keep_margin) reuse the times and bytes, refit the memory cap,
    and refuse a problem that differs in anything else."""
    from search.solve import SolveOptions, solve

    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(8),
        workload=Workload(global_batch=32, seq_len=4096),
    )
    t = Tables(p)
    first = solve(p, SolveOptions(memory_margin=0.0), t)
    lean = replace(p, limits=replace(p.limits, headroom_bytes=40 * 2**30))
    shared = t.with_problem(lean)
    assert shared._layer is t._layer and shared._stage is not t._stage
    a = solve(lean, SolveOptions(memory_margin=0.0), shared)
    b = solve(lean, SolveOptions(memory_margin=0.0))
    assert a.status == b.status and a.best.estimate.config == b.best.estimate.config
    assert a.best.estimate.step_time_s == b.best.estimate.step_time_s
    # the cap binds here (the first plan needs ~78 GiB): tables that kept the first solve's fits would answer it
    assert a.best.estimate.peak_memory_bytes <= lean.hbm_cap_bytes < first.best.estimate.peak_memory_bytes
    with pytest.raises(ValueError, match="only the memory headroom"):
        t.with_problem(replace(p, limits=Limits(flash_attention=False)))


def test_memory_screens_reused_at_a_smaller_cap_equal_fresh_ones():
    """Bounds.fitting_zeros at a smaller cap (the margin solve's tables) serves a first screen's caps only where
    its witness says nothing changed; every answer equals a screen computed afresh at that cap, and some change
    (so the test would fail if the first solve's fits were served everywhere)."""
    from search.group_expander import Expander, _groups

    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(8),
        workload=Workload(global_batch=32, seq_len=4096),
    )
    lean = replace(p, limits=replace(p.limits, headroom_bytes=30 * 2**30))
    t = Tables(p)
    shared, fresh = t.with_problem(lean), Tables(lean)
    ex = Expander(p, t, {"bound": 0, "dominated": 0})
    first_b, shared_b, fresh_b = Bounds(t), Bounds(shared), Bounds(fresh)
    changed = compared = 0
    for s, mb, vp in _groups(p):
        zeros, sps, _, _ = ex.values(s)
        for rec in ("none", "full"):
            c = Choice(s, mb, vp, max(sps), 1, zeros[0], rec, None, 25.0)
            a = first_b.fitting_zeros(c, zeros)
            b, f = shared_b.fitting_zeros(c, zeros), fresh_b.fitting_zeros(c, zeros)
            assert b == f, (c, a, b, f)
            for z in zeros:
                cz = replace(c, zero=z)
                assert shared_b.caps(cz) == fresh_b.caps(cz), cz
            changed += a != f
            compared += 1
    assert compared > 50 and changed > 0


def test_only_moe_layers_with_expert_parallelism_read_the_dispatcher_and_the_ep_overlap():
    """search.tables.layers._timed_options: the tables time a dense layer, or an MoE layer without EP, without the
    plan's EP dispatcher and EP overlap (so the searches under each dispatcher share those timings); that is
    exact only while the analytic timing of such a layer does not read them."""
    from costmodel.engines.analytic import layer_timing
    from costmodel.spec.errors import SpecError
    from costmodel.spec.plan import ParallelConfig
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from search.tables.layers import _timed_options

    model, cluster = load_model("deepseek-v3"), load_cluster("gb200-nvl72").with_gpus(1152)
    w = Workload(global_batch=2304, seq_len=4096, dtype="fp8")
    differs = 0
    for tp, cp, ep, mb, sp, chunks, rec, zero in [
        (1, 1, 1, 1, False, 1, "none", 0),
        (2, 1, 8, 2, True, 2, "none", 1),
        (4, 2, 16, 1, True, 4, "selective", 1),
        (8, 1, 64, 1, True, 2, "full", 3),
        (1, 4, 32, 4, False, 1, "none", 3),
    ]:
        base = dict(tp=tp, cp=cp, ep=ep, dp=1152 // (tp * cp), mb=mb, sp=sp, chunks=chunks, recompute=rec, zero=zero)
        for moe in (False, True):
            plain = layer_timing(model, cluster, w, ParallelConfig(**base), moe)
            for d in ("alltoall", "deepep", "hybridep"):
                for overlap in (False, True):
                    try:
                        c = ParallelConfig(**base, ep_dispatcher=d, ep_overlap=overlap)
                    except SpecError:  # e.g. the EP overlap with full recompute or without EP
                        continue
                    got = layer_timing(model, cluster, w, c, moe)
                    if "ep_dispatcher" in _timed_options(moe, ep):
                        differs += got != plain
                    else:
                        assert got == plain, (base, moe, d, overlap)
    assert differs  # the options do move an MoE layer with EP


def test_megatron_bucket_options_hold_its_default_for_the_dp_size():
    """Megatron-Core without --ddp-bucket-size reduces max(40M, 1M x DP) gradient elements a bucket: 48M at DP 48
    (192 MB of FP32 gradients, what Megatron-LM 2024's GPT 462B ran); the search offers it beside 25 and 160 MB."""
    from dataclasses import replace

    p = problem("gpt3-175b", "h100-sxm", 6144, 1536, 2048)
    wide = next(s for s in shapes(p) if s.dp == 48)
    narrow = next(s for s in shapes(p) if 1 < s.dp <= 40)
    assert bucket_values(p, wide) == [25.0, 160.0, 192.0]
    assert bucket_values(p, narrow) == [25.0, 160.0]  # the default is 40M elements there: 160 MB
    bf16 = replace(p, grad_dtype="bf16")
    assert 96.0 in bucket_values(bf16, wide)  # 48M BF16 elements
    pinned = replace(p, limits=replace(p.limits, fixed={"bucket_mb": 50}))
    assert 192.0 not in bucket_values(pinned, wide)
    assert 192.0 not in bucket_values(replace(p, framework="deepspeed"), wide)
