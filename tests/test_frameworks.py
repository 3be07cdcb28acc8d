"""Frameworks are real (issue 12 item 1): the search considers only what the framework runs, the
cost model charges its semantics, and ``--emit`` reproduces exactly the evaluated plan or refuses."""

import pytest

from costmodel.compose.stage_terms import dp_comm
from costmodel.engines.analytic import layer_timing
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.frameworks.rules import check, recompute_kinds, semantics
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.emit import emit_text, megatron_args, refuse_unless_runnable
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve

GPT3 = load_model("gpt3-175b")
A100 = load_cluster("a100-80g")
W = Workload(global_batch=1536, seq_len=2048)
README = dict(tp=8, pp=4, dp=32, vp=8, mb=3, sp=True, zero=1, chunks=8, bucket_bytes=160e6)


def megatron_validate(argv: list[str], env: dict) -> None:
    """Megatron-LM's own rules (megatron/training/arguments.py, validate_args), re-implemented."""
    flags = {}
    i = 0
    while i < len(argv):
        key = argv[i]
        vals = []
        while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            i += 1
            vals.append(argv[i])
        flags[key] = vals
        i += 1
    tp = int(flags["--tensor-model-parallel-size"][0])
    pp = int(flags["--pipeline-model-parallel-size"][0])
    cp = int(flags.get("--context-parallel-size", ["1"])[0])
    if "--use-torch-fsdp2" in flags:
        assert pp == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism"
        assert "--use-distributed-optimizer" not in flags
    if "--sequence-parallel" in flags:
        assert tp > 1, "sequence parallelism needs tp > 1 (arguments.py turns it off)"
    if "--tp-comm-overlap" in flags:
        assert "--sequence-parallel" in flags, "TP comm overlap needs sequence parallelism"
    if "--overlap-param-gather" in flags:
        assert "--use-distributed-optimizer" in flags or "--use-megatron-fsdp" in flags
        assert "--overlap-grad-reduce" in flags
    if "--use-megatron-fsdp" in flags:
        assert flags.get("--ckpt-format") == ["fsdp_dtensor"]
        assert flags["--data-parallel-sharding-strategy"][0] in (
            "no_shard",
            "optim",
            "optim_grads",
            "optim_grads_params",
        )
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1"
    elif tp > 1 or cp > 1:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", "TP/CP need CUDA_DEVICE_MAX_CONNECTIONS=1"


def _env(notes):
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in notes) else {}


def test_semantics_table():
    assert semantics("megatron", 1).shard_grads is False  # distributed optimizer: full grad buffer
    assert semantics("deepspeed", 2).reduce_per_microbatch
    assert semantics("fsdp2", 2).gather_forward and not semantics("fsdp2", 2).gather_backward
    with pytest.raises(SpecError, match="no ZeRO-2"):
        semantics("megatron", 2)
    with pytest.raises(SpecError, match="pipeline engine"):
        check(ParallelConfig(pp=4, dp=2, zero=2, framework="deepspeed"))


def test_zero2_is_not_free_under_deepspeed():
    """m > 1 micro-batches: ZeRO-2 reduce-scatters each one, ZeRO-1 once per step."""
    cl = A100.with_gpus(64)
    w = Workload(global_batch=64, seq_len=2048)
    z1 = ParallelConfig(tp=8, dp=8, mb=1, zero=1, framework="deepspeed")
    z2 = ParallelConfig(tp=8, dp=8, mb=1, zero=2, framework="deepspeed")
    m = 64 // 8
    per_mb = layer_timing(GPT3, cl, w, z2, False).ledger.link_s.get("zero", 0.0) * GPT3.layers
    assert per_mb > 0 and layer_timing(GPT3, cl, w, z1, False).ledger.link_s.get("zero", 0.0) == 0.0
    assert m * per_mb > dp_comm(GPT3, cl, z1, 0)[0]
    e1, e2 = evaluate(GPT3, cl, w, z1), evaluate(GPT3, cl, w, z2)
    assert sum(e2.comm_link_s.values()) > sum(e1.comm_link_s.values())
    assert e2.step_time_s > e1.step_time_s
    assert e2.peak_memory_bytes < e1.peak_memory_bytes


def test_megatron_zero1_keeps_full_gradient_buffer():
    c = ParallelConfig(**README)
    mem = memory_per_stage(GPT3, W, c)[0]
    assert mem.grads_bytes > 4 * 1.5e9  # full FP32 grads of a stage (175B / tp / pp * 4 B)
    assert mem.optimizer_bytes < mem.grads_bytes  # optimizer sharded over dp


def test_evaluate_refuses_what_the_framework_cannot_run():
    cl = A100.with_gpus(1024)
    with pytest.raises(SpecError, match="zero=2"):
        validate_config(GPT3, cl, W, ParallelConfig(**{**README, "zero": 2}))
    with pytest.raises(SpecError, match="pipeline engine"):
        validate_config(
            GPT3, cl, W, ParallelConfig(**{**README, "zero": 2, "vp": 1, "chunks": 1}, framework="deepspeed")
        )


def _recommend(framework, gpus=64, **fixed):
    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(gpus),
        workload=Workload(global_batch=256, seq_len=4096),
        limits=Limits(fixed=fixed),
        framework=framework,
    )
    return solve(p, SolveOptions(time_limit_s=20, top_k=5))


def test_recommend_megatron_never_zero2_and_emits_valid_flags():
    r = _recommend("megatron")
    assert r.plans
    for plan in r.plans:
        c = plan.config
        assert c.zero != 2 and c.framework == "megatron"
        text, notes = emit_text("megatron", c, Workload(global_batch=256, seq_len=4096), 32)
        megatron_validate(text.replace("\\\n", " ").replace('"', "").split(), _env(notes))


@pytest.mark.parametrize("pp", [2, 4])
def test_recommend_deepspeed_with_pp_keeps_zero_at_most_1(pp):
    r = _recommend("deepspeed", pp=pp)
    assert r.plans
    for plan in r.plans:
        assert plan.config.pp == pp and plan.config.zero <= 1 and plan.config.vp == 1
        check(plan.config)


def test_recommend_deepspeed_never_pp_with_zero2_or_3():
    for plan in _recommend("deepspeed").plans:
        assert not (plan.config.pp > 1 and plan.config.zero >= 2)


def test_emit_refuses_another_framework_and_megatron_zero2():
    c = ParallelConfig(**README)
    with pytest.raises(SpecError, match="evaluated for"):
        refuse_unless_runnable("deepspeed", c)
    with pytest.raises(SpecError, match="no ZeRO-2"):
        megatron_args(ParallelConfig(**{**README, "zero": 2}), 1536, 96)
    z3 = megatron_args(ParallelConfig(**{**README, "zero": 3}), 1536, 96)
    flat = [t for a in z3 for t in a]
    assert "--use-megatron-fsdp" in flat and "optim_grads_params" in flat and "--use-torch-fsdp2" not in flat


def test_readme_plan_emitted_memory_equals_evaluated(capsys):
    """The README's GPT-3 recommendation: the flags printed are the plan whose memory was reported."""
    from planner.cli import main

    args = [
        "recommend",
        "--model",
        "gpt3-175b",
        "--cluster",
        "a100-80g",
        "--gpus",
        "1024",
        "--global-batch",
        "1536",
        "--seq",
        "2048",
        "--json",
        "--emit",
        "megatron",
    ]
    assert main(args) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    cfg = {k: v for k, v in d["config"].items() if k != "layers_per_stage"}
    c = ParallelConfig.from_dict({**cfg, "layers_per_stage": tuple(d["config"]["layers_per_stage"]) or None})
    argv = d["megatron_args"]
    if c.zero == 1:
        assert "--use-distributed-optimizer" in argv
    assert c.zero != 2
    est = evaluate(GPT3, A100.with_gpus(1024), W, c)
    assert est.peak_memory_bytes == pytest.approx(d["peak_memory_bytes"], rel=1e-9)
    assert est.peak_memory_bytes <= A100.device.hbm_bytes


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp2"])
def test_every_recommended_plan_is_emitted_for_its_framework(framework):
    """Llama-3-70B on 16 H100 is memory-tight: the search used to answer an uneven stage split
    (19, 21, 21, 19) under DeepSpeed that ``--emit deepspeed`` refuses, and could answer
    attention-only selective or partial recompute that torchtitan cannot state."""
    w = Workload(global_batch=64, seq_len=8192)
    # as recommend --emit fsdp2 poses it: torchtitan's CP is PyTorch's (planner.flags.cp_impl_of)
    opts = (("cp_impl", "torch"),) if framework == "fsdp2" else ()
    p = Problem(
        model=load_model("llama3-70b"),
        cluster=load_cluster("h100-sxm").with_gpus(16),
        workload=w,
        framework=framework,
        options=opts,
    )
    r = solve(p, SolveOptions(time_limit_s=20, top_k=5))
    assert r.plans
    for plan in r.plans:
        c = plan.config
        refuse_unless_runnable(framework, c)  # raises for a plan the format cannot reproduce
        emit_text(framework, c, w, 80)
        assert c.layers_per_stage is None or len(set(c.layers_per_stage)) == 1
        assert c.recompute in recompute_kinds(framework)


def test_fsdp2_search_offers_op_sac_not_attention_only_selective():
    assert recompute_kinds("fsdp2") == ("none", "op_sac", "full")
    assert "op_sac" not in recompute_kinds("megatron") and "op_sac" not in recompute_kinds("deepspeed")
    r = _recommend("fsdp2", recompute="op_sac")
    assert r.plans and all(plan.config.recompute == "op_sac" for plan in r.plans)


@pytest.mark.parametrize(
    "framework, kind, allowed",
    [
        ("fsdp2", "selective", "none, op_sac or full"),
        ("megatron", "op_sac", "none, selective or full"),
        ("deepspeed", "op_sac", "none, selective or full"),
    ],
)
def test_a_pinned_recompute_the_framework_cannot_state_is_refused_at_once(framework, kind, allowed):
    with pytest.raises(SpecError, match=f"recompute='{kind}': must be {allowed} under framework={framework}"):
        Problem(
            model=load_model("llama3-8b"),
            cluster=load_cluster("h100-sxm").with_gpus(8),
            workload=Workload(global_batch=64, seq_len=4096),
            limits=Limits(fixed={"recompute": kind}),
            framework=framework,
        )


def test_fsdp2_runs_torchtitans_fixed_bucket():
    """torchtitan has no bucket setting (``replicate(..., bucket_cap_mb=100)``): the search does not
    rank plans by a bucket size the user cannot set."""
    for plan in _recommend("fsdp2").plans:
        assert plan.config.bucket_bytes == pytest.approx(100e6) or plan.config.dp * plan.config.cp == 1


def torchtitan_stages(toml_lines: list[str], layers: int) -> tuple[int, int]:
    """``(virtual stages, stages per rank)`` as torchtitan's ``pipeline_llm`` derives them from the
    job config (torchtitan/distributed/pipeline_parallel.py), re-implemented with its defaults:
    first/last stage "less layers" 1 each, 2 stages per rank for a looped schedule unless
    ``pipeline_parallel_layers_per_stage`` is set."""
    kv = dict(line.split(" = ", 1) for line in toml_lines if " = " in line)
    pp = int(kv["pipeline_parallel_degree"])
    single = kv.get("pipeline_parallel_schedule", '"1F1B"') == '"1F1B"'
    lps = kv.get("pipeline_parallel_layers_per_stage")
    if lps is None:
        per_rank = 1 if single else 2
        return pp * per_rank, per_rank
    inp = int(kv.get("pipeline_parallel_first_stage_less_layers", 1))
    out = int(kv.get("pipeline_parallel_last_stage_less_layers", 1))
    stages = -(-(layers + inp + out) // int(lps))
    assert stages % pp == 0
    assert (stages // pp == 1) if single else (stages // pp >= 2)
    return stages, stages // pp


@pytest.mark.parametrize("pp, vp", [(2, 1), (4, 1), (2, 4), (4, 5)])
def test_torchtitan_emit_reproduces_the_evaluated_even_split(pp, vp):
    """Without the split fields torchtitan would build 2 stages per rank for a looped schedule and
    count the embedding and output as a layer each: not the plan that was evaluated."""
    from planner.emit import torchtitan_lines

    c = ParallelConfig(tp=8, pp=pp, dp=2, vp=vp, sp=True, zero=2, framework="fsdp2")
    lines = torchtitan_lines(c, Workload(global_batch=64 * pp, seq_len=8192), 80)
    assert torchtitan_stages(lines, 80) == (pp * vp, vp)
    assert f"pipeline_parallel_layers_per_stage = {80 // (pp * vp)}" in lines


def test_fsdp2_chunks_are_async_tp_one_step_per_rank():
    with pytest.raises(SpecError, match="chunks=4: must be 1 or tp=8 under framework=fsdp2"):
        check(ParallelConfig(tp=8, dp=2, sp=True, chunks=4, zero=2, framework="fsdp2"))
    check(ParallelConfig(tp=8, dp=2, sp=True, chunks=8, zero=2, framework="fsdp2"))
    for plan in _recommend("fsdp2").plans:
        assert plan.config.chunks in (1, plan.config.tp)


def test_fsdp2_pinned_chunks_choose_the_tp_they_fit():
    """A pinned chunk count under FSDP2 is async TP over that many ranks: the search picks a TP
    degree it fits (it used to refuse '--chunks 8' alone as if tp were 1, and answered plans with
    tp=1 and chunks=8 that evaluate refused)."""
    r = _recommend("fsdp2", chunks=8)
    assert r.plans and all(pl.config.tp == 8 and pl.config.chunks == 8 for pl in r.plans)
    with pytest.raises(SpecError, match="chunks=8: must be 1 or tp=4 under framework=fsdp2"):
        _recommend("fsdp2", chunks=8, tp=4)
    # an unpinned sp is never the reason for a refusal (the search turns it on where FSDP2 needs it)
    assert _recommend("fsdp2", chunks=4, tp=4).plans


def test_planner_api_runs_one_framework():
    from planner import Planner

    p = Planner("llama3-8b", "h100-sxm", gpus=16, global_batch=64, seq=4096, framework="fsdp2")
    space = p.space(tp=[1, 2], pp=[1, 2], zero=[2, 3])
    assert space and {c.framework for c in space} == {"fsdp2"}
    assert {c.recompute for c in space} <= set(recompute_kinds("fsdp2"))
    assert all(c.chunks in (1, c.tp) for c in space)
    c = p.config(tp=2, sp=True, zero=3)  # a plan that names no framework runs under the planner's
    assert c.framework == "fsdp2" and c.fsdp_copies
    assert p.recommend().best.config.framework == "fsdp2"
    with pytest.raises(SpecError, match="framework='jax'"):
        Planner("llama3-8b", "h100-sxm", gpus=16, global_batch=64, seq=4096, framework="jax").evaluate(tp=2)


def test_megatron_on_nvidia_offers_only_the_chunks_te_userbuffers_run():
    """Megatron-Core's --tp-comm-overlap (TE userbuffers) runs each AllGather as a ring exchange of
    tp steps and needs sequence parallelism; it has no chunked EP combine. On DMA-engine hardware
    (sg2262-like) the chunk count stays a co-design variable."""
    from search.candidates import Shape, chunk_values, sp_chunk_pairs
    from search.problem import Problem

    nv = Problem(
        model=load_model("mixtral-8x7b"),
        cluster=load_cluster("h100-sxm").with_gpus(64),
        workload=Workload(global_batch=256, seq_len=4096),
    )
    assert chunk_values(nv, Shape(8, 1, 1, 8, 8)) == [1, 8] and chunk_values(nv, Shape(8, 1, 1, 8, 8), sp=False) == [1]
    assert chunk_values(nv, Shape(1, 1, 1, 64, 8)) == [1]  # EP alone: no chunked combine
    # an MoE model under Megatron trains TP only with sequence parallelism (its MoE layer refuses otherwise)
    assert sp_chunk_pairs(nv, Shape(4, 1, 2, 8, 1)) == [(True, 1), (True, 4)]
    dense = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(64),
        workload=Workload(global_batch=256, seq_len=4096),
    )
    assert {ch for sp, ch in sp_chunk_pairs(dense, Shape(4, 1, 2, 8, 1)) if not sp} == {1}
    dma = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("sg2262-like").with_gpus(16),
        workload=Workload(global_batch=16, seq_len=4096),
    )
    assert chunk_values(dma, Shape(4, 1, 1, 4, 1)) == [1, 2, 4, 8]
    with pytest.raises(SpecError, match="chunks=4: must be 1 or tp=8 under framework=megatron"):
        Problem(
            model=load_model("llama3-8b"),
            cluster=load_cluster("h100-sxm").with_gpus(16),
            workload=Workload(global_batch=64, seq_len=4096),
            limits=Limits(fixed={"chunks": 4, "tp": 8}),
        )
    r = _recommend("megatron")
    assert r.plans and all(pl.config.chunks in (1, pl.config.tp) for pl in r.plans)
    assert all(pl.config.chunks == 1 or pl.config.sp_on for pl in r.plans)


def test_moe_with_tp_needs_sequence_parallelism_under_megatron():
    # megatron/core/transformer/moe/moe_layer.py (d98e8a64) raises in training when attention TP > 1
    # and sequence_parallel is off: evaluate refuses, serving and other frameworks are unaffected
    m, cl = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm").with_gpus(16)
    w = Workload(global_batch=64, seq_len=4096)
    with pytest.raises(SpecError, match="^sp=False: must be on for an MoE model with tp=2 under framework=megatron"):
        evaluate(m, cl, w, ParallelConfig(tp=2, dp=8, ep=8), engine="analytic")
    assert evaluate(m, cl, w, ParallelConfig(tp=2, dp=8, ep=8, sp=True), engine="analytic").step_time_s > 0
    dense = load_model("llama3-8b")
    assert evaluate(dense, cl, w, ParallelConfig(tp=2, dp=8), engine="analytic").step_time_s > 0


def test_a_pinned_chunk_count_leaves_no_choice_without_sp_and_the_search_still_answers():
    """chunks=8 pinned on NVIDIA Megatron: shapes whose sp may be off have no chunk count there
    (--tp-comm-overlap needs sequence parallelism); the search skips them instead of failing."""
    from search.exhaustive import solve_exhaustive
    from search.tables import Tables

    p = Problem(
        model=load_model("llama3-8b"),
        cluster=load_cluster("h100-sxm").with_gpus(16),
        workload=Workload(global_batch=64, seq_len=4096),
        limits=Limits(fixed={"chunks": 8, "pp": 1, "zero": 1}, bucket_mb_options=(40,)),
    )
    r = solve(p, SolveOptions(small_space=-1))
    assert r.status == "OPTIMAL" and all(pl.config.chunks == 8 == pl.config.tp and pl.config.sp_on for pl in r.plans)
    ex = solve_exhaustive(p)
    assert ex.complete and ex.best.objective * Tables(p).res_s == pytest.approx(r.objective_s)


def test_fsdp2_degrees_torchtitan_runs_together():
    # without data- or context-parallel ranks beside TP, torchtitan applies no fully_shard and trains in FP32; its
    # DDP (ZeRO 0) replicates over one dimension only: evaluate refuses both, the search never answers them
    with pytest.raises(SpecError, match="dp=1: must be > 1"):
        check(ParallelConfig(tp=8, sp=True, dp=1, zero=3, framework="fsdp2"))
    with pytest.raises(SpecError, match="zero=0: must be 2 or 3"):
        check(ParallelConfig(tp=2, sp=True, dp=4, zero=0, framework="fsdp2"))
    check(ParallelConfig(pp=2, dp=1, zero=2, optimizer_dtype="bf16", framework="fsdp2"))  # a BF16 model: runs
    pinned = _recommend("fsdp2", gpus=8, tp=8)
    assert not pinned.plans and "dp=1" in pinned.explanation, pinned.explanation
    r = _recommend("fsdp2", gpus=8)
    assert r.plans
    for c in (pl.config for pl in r.plans):
        assert c.dp * c.cp > 1 or (c.tp, c.pp) == (1, 1)
        assert c.zero > 0 or (c.tp, c.pp, c.cp) == (1, 1, 1)
