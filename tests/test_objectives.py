"""costmodel.objectives (issue 41): time to train with failures and checkpoints, cost and energy of a plan.

What could go wrong and is checked: the Young/Daly interval is not where the expected wall time is least; a plan
that writes more per rank, or restarts slower, still wins a tie on step time; the Llama 3 plan's goodput is far from
the ">90% effective training time" its report states; cost or energy are not proportional to GPUs x hours; a bad
input slips through or raises an error that does not name the field, the value and what is allowed.
"""

import math
from dataclasses import replace

import pytest

from costmodel.api import evaluate
from costmodel.objectives import plan_objectives, time_to_train
from costmodel.objectives.checkpoint import checkpoint_cost
from costmodel.objectives.cost import run_cost
from costmodel.objectives.energy import run_energy
from costmodel.objectives.failures import (
    LLAMA3_FAILURES_PER_GPU_HOUR,
    daly_interval_s,
    expected_wall_s,
    lost_time,
    mtbf_s,
    young_interval_s,
)
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

# (checkpoint stop delta, job MTBF M, restart R), seconds: a fast and a slow store on the Llama 3 job's M, Daly's
# own examples (5 min dump; M = 24 h, 6 h, 15 min) and a checkpoint as long as a tenth of M
CASES = [
    (2.4, 11135.0, 362.0),
    (120.0, 11135.0, 362.0),
    (300.0, 86400.0, 600.0),
    (300.0, 21600.0, 600.0),
    (300.0, 900.0, 600.0),
    (1000.0, 10000.0, 60.0),
]


@pytest.mark.parametrize("delta, mtbf, restart", CASES)
def test_daly_interval_is_where_the_expected_wall_time_is_least(delta, mtbf, restart):
    """Daly's interval beats its neighbours on Daly's expected wall time, sits within 1% of the grid minimum, and
    Young's first-order interval is never better; the split of :func:`lost_time` adds up to the same wall time."""
    compute = 1e7
    tau = daly_interval_s(delta, mtbf)
    wall = expected_wall_s(compute, tau, delta, mtbf, restart)
    for k in (0.9, 0.98, 1.02, 1.1, 0.5, 2.0):
        assert wall <= expected_wall_s(compute, tau * k, delta, mtbf, restart), k
    grid = [tau * math.exp(x / 1000) for x in range(-700, 701)]
    best = min(grid, key=lambda t: expected_wall_s(compute, t, delta, mtbf, restart))
    assert abs(best / tau - 1) < 0.01
    assert wall <= expected_wall_s(compute, young_interval_s(delta, mtbf), delta, mtbf, restart)
    split = lost_time(compute, tau, delta, mtbf, restart)
    assert math.isclose(split.wall_s, wall, rel_tol=1e-12)
    assert split.checkpoint_s > 0 and split.lost_work_s > 0 and split.restart_s > 0


def test_a_first_order_interval_is_not_the_minimum_when_the_checkpoint_is_long():
    """The check above can fail: with delta = M / 10, sqrt(2 delta M) is measurably off Daly's optimum."""
    delta, mtbf, restart, compute = 1000.0, 10000.0, 60.0, 1e7
    young = young_interval_s(delta, mtbf)
    assert (
        expected_wall_s(compute, young, delta, mtbf, restart)
        > expected_wall_s(compute, daly_interval_s(delta, mtbf), delta, mtbf, restart) * 1.001
    )


@pytest.fixture(scope="module")
def small():
    m, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=256, seq_len=8192)
    return m, cl, w


def test_smaller_checkpoints_per_rank_win_when_step_times_tie(small):
    """Two plans at one step time: the one writing fewer bytes per rank (BF16 optimizer state, 6 B per parameter
    against Megatron's 14) stops less per checkpoint, loses less, trains sooner and costs less; and one plan
    written by data-parallel rank 0 alone (no fully parallel save) loses to itself written by every rank."""
    m, cl, w = small
    a = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    b = replace(
        evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1, optimizer_dtype="bf16"), engine="analytic"),
        step_time_s=a.step_time_s,
    )
    slow_store = dict(storage_gbps=20.0, node_storage_gbps=5.0)
    ca, cb = (checkpoint_cost(m, cl, e.config, **slow_store) for e in (a, b))
    assert max(cb.bytes_per_rank) < max(ca.bytes_per_rank) and cb.blocking_s < ca.blocking_s
    pa, pb = (plan_objectives(e, m, cl, w, 1e12, **slow_store) for e in (a, b))
    assert pb.time_to_train.goodput > pa.time_to_train.goodput
    for objective in ("time-to-train", "cost", "energy"):
        assert pb.value(objective) < pa.value(objective), objective
    spread = time_to_train(a, m, cl, w, 1e12, **slow_store)
    rank0 = time_to_train(a, m, cl, w, 1e12, fully_parallel=False, **slow_store)
    assert rank0.checkpoint.bytes_per_rank[0] > spread.checkpoint.bytes_per_rank[0]
    assert rank0.days > spread.days


def test_a_faster_restart_wins_when_step_times_tie(small):
    m, cl, w = small
    e = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    fast, slow = (time_to_train(e, m, cl, w, 1e12, restart_s=r) for r in (60.0, 1800.0))
    assert fast.days < slow.days and fast.goodput > slow.goodput
    assert fast.lost.restart_s < slow.lost.restart_s


def test_async_checkpoints_stop_less_but_land_later(small):
    """Asynchronous saves stop training for the device-to-host copy only, pinned staging for less; the write still
    takes as long, so a failure loses the lag; a store too slow for the interval makes it write-bound."""
    m, cl, w = small
    e = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    runs = {mode: time_to_train(e, m, cl, w, 1e12, async_ckpt=mode) for mode in ("sync", "async", "async_pinned")}
    sync, asy, pinned = (runs[k].checkpoint for k in ("sync", "async", "async_pinned"))
    assert pinned.blocking_s <= asy.blocking_s < sync.blocking_s
    assert sync.durable_s == pytest.approx(asy.durable_s) == pytest.approx(pinned.durable_s)
    assert runs["async"].goodput > runs["sync"].goodput
    slow = time_to_train(e, m, cl, w, 1e12, async_ckpt=True, storage_gbps=0.1, node_storage_gbps=0.1)
    assert slow.interval_rule == "write-bound"
    assert slow.interval_s >= slow.checkpoint.durable_s - slow.checkpoint.blocking_s


def test_no_failures_leaves_only_the_checkpoint(small):
    m, cl, w = small
    e = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    t = time_to_train(e, m, cl, w, 1e12, failure_rate=0.0)
    assert t.lost.failures == 0 and t.lost.lost_work_s == 0 and t.lost.restart_s == 0
    assert t.goodput == pytest.approx(1.0, abs=1e-6) and t.interval_rule == "no failures"
    pinned = time_to_train(e, m, cl, w, 1e12, interval_s=600.0)
    assert pinned.interval_rule == "pinned" and abs(pinned.interval_s - 600.0) <= e.step_time_s / 2


LLAMA3_PLAN = ParallelConfig(
    tp=8,
    pp=16,
    dp=128,
    cp=1,
    sp=True,
    zero=2,
    framework="fsdp2",
    vp=8,
    mb=1,
    layers_per_stage=(7,) + (8,) * 14 + (7,),
    pp_grad_reduce="microbatch",
    sp_saved_inputs="sharded",
    pp_free_stage_inputs=True,
    fsdp_copies=False,
)


def test_llama3_405b_goodput_is_near_the_report(capsys):
    """Meta's plan for Llama 3.1 405B (TP8 PP16 CP1 DP128, 2048 x 8192 tokens a step, FSDP sharding optimizer
    state and gradients: arXiv 2407.21783 section 3.3.2, encoded as benchmarks/published encodes that source) on
    16,384 H100 over 15T tokens with every default: the report states "higher than 90% effective training time"
    (section 3.3.4). Goodput within a few points of it, the job's failure interval the snapshot's (54 days / 419),
    and each GPU's checkpoint inside the report's "1 MB to 4 GB per GPU" (section 3.3.1). Constants are not tuned to
    it; the value is printed."""
    m, cl = load_model("llama3.1-405b"), load_cluster("h100-sxm").with_gpus(16384)
    w = Workload(global_batch=2048, seq_len=8192)
    e = evaluate(m, cl, w, LLAMA3_PLAN)
    runs = {mode: time_to_train(e, m, cl, w, 15e12, async_ckpt=mode) for mode in ("sync", "async")}
    with capsys.disabled():
        for mode, t in runs.items():
            print(
                f"\n405B / 16,384 H100, {mode}: goodput {t.goodput:.3f}, {t.days:.1f} days, checkpoint every "
                f"{t.interval_steps} steps ({t.interval_s:.0f} s), {t.checkpoint.total_bytes / 1e12:.2f} TB, "
                f"lost days: writes {t.lost.checkpoint_s / 86400:.2f}, work {t.lost.lost_work_s / 86400:.2f}, "
                f"restarts {t.lost.restart_s / 86400:.2f}"
            )
    for t in runs.values():
        assert 0.87 <= t.goodput <= 0.97
        assert t.mtbf_s == pytest.approx(54 * 86400 / 419, rel=1e-9)
        assert 1e6 <= min(t.checkpoint.bytes_per_rank) and max(t.checkpoint.bytes_per_rank) <= 4e9
        assert t.lost.restart_s > t.lost.lost_work_s  # the assumed restart, not the checkpoint, dominates
    assert runs["async"].goodput >= runs["sync"].goodput


def test_cost_and_energy_scale_with_gpus_times_hours():
    base = run_cost(gpus=512, wall_s=7200.0, train_tokens=1e10, device_name="H100-SXM5-80GB")
    assert run_cost(gpus=1024, wall_s=7200.0, train_tokens=1e10, device_name="H100-SXM5-80GB").usd == pytest.approx(
        2 * base.usd
    )
    assert run_cost(gpus=512, wall_s=3 * 7200.0, train_tokens=1e10, device_name="H100-SXM5-80GB").usd == pytest.approx(
        3 * base.usd
    )
    assert base.usd == pytest.approx(512 * 2 * 4.916)
    kw = dict(activity=0.7, train_tokens=1e10, device_name="H100-SXM5-80GB")
    e = run_energy(gpus=512, active_s=6000.0, idle_s=1200.0, **kw)
    assert run_energy(gpus=1024, active_s=6000.0, idle_s=1200.0, **kw).kwh == pytest.approx(2 * e.kwh)
    assert run_energy(gpus=512, active_s=18000.0, idle_s=3600.0, **kw).kwh == pytest.approx(3 * e.kwh)
    assert e.idle_w < e.board_w < e.tdp_w == 700.0
    assert e.j_per_token == pytest.approx(e.kwh * 3.6e6 / 1e10)


def test_cost_and_energy_follow_the_run(small):
    """A slower plan to the same tokens costs more GPU-hours, dollars and (at the same activity) energy."""
    m, cl, w = small
    e = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    fast, slow = (plan_objectives(x, m, cl, w, 1e12) for x in (e, replace(e, step_time_s=2 * e.step_time_s)))
    assert slow.cost.usd > 1.9 * fast.cost.usd
    assert slow.cost.gpu_hours == pytest.approx(slow.time_to_train.gpu_hours)
    assert fast.energy.kwh > 0 and fast.cost.price_source.startswith("AWS EC2 Capacity Blocks")


def _bad_calls(m, cl, w, e):
    ttt = lambda **kw: time_to_train(e, m, cl, w, kw.pop("train_tokens", 1e12), **kw)  # noqa: E731
    energy = dict(gpus=8, active_s=1.0, idle_s=0.0, activity=0.5, train_tokens=1e6, device_name="H100-SXM5-80GB")
    return [
        ("train_tokens", -5, lambda: ttt(train_tokens=-5)),
        ("train_tokens", math.inf, lambda: ttt(train_tokens=math.inf)),
        ("failure_rate", -0.1, lambda: ttt(failure_rate=-0.1)),
        ("storage_gbps", 0, lambda: ttt(storage_gbps=0)),
        ("node_storage_gbps", "fast", lambda: ttt(node_storage_gbps="fast")),
        ("async_ckpt", "maybe", lambda: ttt(async_ckpt="maybe")),
        ("interval_s", 0, lambda: ttt(interval_s=0)),
        ("restart_s", -1, lambda: ttt(restart_s=-1)),
        ("host_gbps", -3, lambda: ttt(host_gbps=-3)),
        ("fully_parallel", "yes", lambda: ttt(fully_parallel="yes")),
        (
            "gpu_hour_usd",
            -2,
            lambda: run_cost(gpus=8, wall_s=1.0, train_tokens=1.0, device_name="H100-SXM5-80GB", gpu_hour_usd=-2),
        ),
        ("gpu_hour_usd", None, lambda: run_cost(gpus=8, wall_s=1.0, train_tokens=1.0, device_name="B200")),
        ("gpus", 0, lambda: run_cost(gpus=0, wall_s=1.0, train_tokens=1.0, device_name="H100-SXM5-80GB")),
        ("pue", 0.5, lambda: run_energy(pue=0.5, **energy)),
        ("activity", 1.5, lambda: run_energy(**{**energy, "activity": 1.5})),
        ("idle_fraction", -0.2, lambda: run_energy(idle_fraction=-0.2, **energy)),
        ("device", "SG2262-like", lambda: run_energy(**{**energy, "device_name": "SG2262-like"})),
        ("objective", "speed", lambda: plan_objectives(e, m, cl, w, 1e12).value("speed")),
        ("mtbf_s", 0, lambda: daly_interval_s(10.0, 0)),
        ("gpus", 0, lambda: mtbf_s(LLAMA3_FAILURES_PER_GPU_HOUR, 0)),
    ]


def test_bad_inputs_raise_spec_errors_naming_field_value_and_allowed(small):
    m, cl, w = small
    e = evaluate(m, cl, w, ParallelConfig(tp=2, dp=32, zero=1), engine="analytic")
    for field, value, call in _bad_calls(m, cl, w, e):
        with pytest.raises(SpecError) as err:
            call()
        text = str(err.value)
        assert err.value.field == field, (field, text)
        assert text.startswith(f"{field}={value!r}: must be "), text
        assert len(text) > len(f"{field}={value!r}: must be ") + 5, text


def test_a_serving_estimate_is_refused(small):
    m, cl, _ = small
    serve = Workload(mode="infer", global_batch=8, input_len=512, output_len=128)
    est = evaluate(m, cl.with_gpus(8), serve, ParallelConfig(tp=8))
    with pytest.raises(SpecError) as err:
        time_to_train(est, m, cl, serve, 1e9)
    assert err.value.field == "estimate"
