"""The MoE all-to-all overlap across micro-batches (Megatron-Core --overlap-moe-expert-parallel-comm; issue 39's MoE
stack, issue 42 item 2): the combined 1F1B pair, both engines, memory, Megatron's refusals, flags."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.api import evaluate
from costmodel.compose.ep_overlap import PairParts, pair_exposed_s
from costmodel.physics.memory.stage_memory import stage_memory
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

QWEN = load_model("qwen3-30b-a3b")
H100 = load_cluster("h100-sxm").with_gpus(64)
W = Workload(global_batch=512, seq_len=4096)
PLAN = ParallelConfig(tp=1, pp=1, dp=64, ep=8, mb=1, zero=1, recompute="selective", bucket_bytes=160e6)


def test_a_pair_hides_what_the_other_micro_batch_computes_beside_it():
    parts = PairParts(pre_f=1.0, mlp_f=2.0, mlp_b=2.0, mlp_dw=1.0, pre_b=2.0, pre_dw=0.5, a2a=0.5)
    assert pair_exposed_s(parts) == 0.0
    assert pair_exposed_s(parts, coef=0.1) == pytest.approx(0.1 * 4 * 0.5)  # the SMs the all-to-alls take
    # all-to-all bound: the comm stream's four transfers set the pace
    slow = parts._replace(a2a=5.0)
    assert pair_exposed_s(slow) == pytest.approx(4 * 5.0 - sum(parts[:6]), rel=0.05)
    assert pair_exposed_s(parts._replace(a2a=1.5)) < pair_exposed_s(parts._replace(a2a=2.5))


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_overlap_hides_the_all_to_alls_in_both_engines(engine):
    off = evaluate(QWEN, H100, W, PLAN, engine=engine)
    on = evaluate(QWEN, H100, W, replace(PLAN, ep_overlap=True), engine=engine)
    assert off.comm_exposed_s["ep"] > 0.3  # EP 8 on NVLink, charged behind nothing of its own micro-batch
    # 7 of the 8 micro-batches' passes paired (the first forward and the last backward run alone)
    assert on.comm_exposed_s.get("ep", 0.0) < (1 / 8 + 0.15) * off.comm_exposed_s["ep"]
    assert on.step_time_s < off.step_time_s - 0.5 * (off.comm_exposed_s["ep"] - on.comm_exposed_s.get("ep", 0.0))


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_the_first_forward_and_last_backward_run_alone(engine):
    # combined_1f1b_schedule_for_no_pipelining@d98e8a6: the first micro-batch's forward and the last one's
    # backward are not paired, so 1 of m passes keeps the all-to-alls it has without the overlap
    for gbs, m in ((512, 8), (2048, 32)):
        w = Workload(global_batch=gbs, seq_len=4096)
        off = evaluate(QWEN, H100, w, PLAN, engine=engine).comm_exposed_s["ep"]
        on = evaluate(QWEN, H100, w, replace(PLAN, ep_overlap=True), engine=engine).comm_exposed_s["ep"]
        assert on >= 0.97 * off / m
        assert on < off / m + 0.15 * off


def test_engines_agree_on_the_overlapped_plan():
    c = replace(PLAN, ep_overlap=True)
    a, g = (evaluate(QWEN, H100, W, c, engine=e).step_time_s for e in ("analytic", "graph"))
    assert abs(a / g - 1) < 0.03


def test_one_more_chunk_in_flight_under_a_pipeline_none_without():
    m = load_model("mixtral-8x22b")
    w = Workload(global_batch=1024, seq_len=4096)
    piped = ParallelConfig(tp=2, pp=4, vp=2, dp=32, ep=8, mb=1, zero=1, sp=True, recompute="selective")
    a0, a1 = (stage_memory(m, w, replace(piped, ep_overlap=o), 0).activations_bytes for o in (False, True))
    # stage 0 holds 2 (p - 1) + (v - 1) p + 1 = 11 chunks; the extra warm-up forward makes 12
    assert a1 / a0 == pytest.approx(12 / 11, rel=0.02)
    b0, b1 = (stage_memory(QWEN, W, replace(PLAN, ep_overlap=o), 0).activations_bytes for o in (False, True))
    assert b1 == b0


@pytest.mark.parametrize(
    "change, rule",
    [
        (dict(ep=1, dp=512), "ep=1"),
        (dict(recompute="full"), "full recompute"),
        (dict(recompute_modules=("moe",)), "moe in the recompute modules"),
        (dict(framework="fsdp2", zero=3), "framework=megatron"),
    ],
)
def test_megatron_refusals_are_one_line(change, rule):
    with pytest.raises(SpecError, match=rule):
        replace(PLAN, ep_overlap=True, **change)


def test_model_level_refusals():
    with pytest.raises(SpecError, match="no interleaving"):
        validate_config(QWEN, H100, W, replace(PLAN, pp=2, dp=32, ep_overlap=True))
    dense = load_model("llama3-8b")
    with pytest.raises(SpecError, match="dense model"):
        validate_config(dense, H100, W, ParallelConfig(dp=64, ep_overlap=True, ep=2))


def test_flags_round_trip_through_megatrons_parser():
    from planner.emit.megatron import megatron_args, megatron_notes
    from planner.megatron_args import config_fields, parse_command_line

    c = replace(PLAN, ep_overlap=True)
    toks = [t for arg in megatron_args(c, global_batch=512, layers=QWEN.layers, moe=True) for t in arg]
    assert "--overlap-moe-expert-parallel-comm" in toks and "--delay-wgrad-compute" in toks
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=32" in n for n in megatron_notes(c))
    assert config_fields(parse_command_line(" ".join(toks)))["ep_overlap"] is True
    without = [t for t in toks if t not in ("--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute")]
    assert "ep_overlap" not in config_fields(parse_command_line(" ".join(without)))


def test_deepep_kernels_slow_the_compute_beside_them_by_the_sms_they_hold():
    # Megatron-Core gives DeepEP 20 SMs (token_dispatcher.py@d98e8a6): 20 of H100's 132, not the NCCL 0.1
    from costmodel.engines.graph.nodes import GraphBuilder
    from costmodel.engines.graph.scheduler import resources_for, schedule
    from costmodel.physics.comm.ep_dispatch import ep_sm_share

    assert ep_sm_share("deepep", H100.device, 0.1) == pytest.approx(20 / 132)
    assert ep_sm_share("alltoall", H100.device, 0.1) == 0.1 and ep_sm_share("alltoall", H100.device) is None
    spans = []
    for share in (None, 0.2):
        b = GraphBuilder(H100)
        b.comm("a2a", "alltoall", 0, 8, 1, "ep", duration_s=0.5, sm_share=share)
        b.compute("gemm", "gemm", 1.0)
        spans.append(schedule(b.graph, resources_for(H100.device)).makespan_s)
    assert spans == pytest.approx([1.0 + 0.5 * 0.1, 1.0 + 0.5 * 0.2])  # 0.5 s of compute at 1 - share
    # a DeepEP plan: both engines charge the hidden all-to-alls at 20/132 and agree
    c = replace(PLAN, ep_overlap=True, ep_dispatcher="deepep")
    a, g = (evaluate(QWEN, H100, W, c, engine=e).step_time_s for e in ("analytic", "graph"))
    assert abs(a / g - 1) < 0.03
