"""Intra-node collectives from the measured nccl-tests tables under ``--kernels measured`` (issue 38): the
look-up rule. The table times a collective when the device names a kernel table, the group sits in one node /
NVLink domain and its size is inside the GPU's table counts; the model times every other one. All-to-all (the EP
dispatch) included; CP's ring send/recv has no table. Since 2026-12-06 training's AllToAll-dispatcher exchange is
read from the table by default too (``ep_dispatch_time_s(nccl_table=True)``, both engines); the serving model's
is not."""

from dataclasses import replace

import pytest

from costmodel.physics.comm.collectives import collective_evidence, collective_time_s
from costmodel.physics.kernels.measured import table_collective, table_counts
from costmodel.physics.tables import collective_lookup
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.trust.evidence import comm_known


def _measured(cl):
    return replace(cl, device=replace(cl.device, kernel_table="trtllm"))


B200 = load_cluster("b200").with_gpus(16)
GB200 = load_cluster("gb200-nvl72").with_gpus(72)


def test_the_tables_counts_bound_the_rule():
    assert table_counts("b200_sxm", "alltoall") == (2, 4, 8)
    assert table_counts("gb200", "allreduce") == (2, 4)
    assert table_counts("gb200", "p2p") == ()


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_an_intra_node_collective_is_the_table_time_under_kernels_measured(kind):
    t, ev = collective_lookup("b200_sxm", kind, 134e6, 8)
    assert collective_time_s(kind, 134e6, 8, 1, _measured(B200)) == pytest.approx(t)
    assert collective_time_s(kind, 134e6, 8, 1, B200) != pytest.approx(t)  # the default: the model
    assert collective_evidence(kind, 134e6, 8, 1, _measured(B200)) == ev
    assert collective_evidence(kind, 134e6, 8, 1, B200) is None


def test_the_8_gpu_b200_all_to_all_of_134_mb_is_the_tables_not_the_models():
    table = collective_time_s("alltoall", 134e6, 8, 1, _measured(B200))
    model = collective_time_s("alltoall", 134e6, 8, 1, B200)
    assert 230e-6 < table < 255e-6 and model < 0.8 * table


def test_a_count_between_the_tables_is_interpolated_one_outside_them_is_the_model():
    t6, ev6 = table_collective("allgather", 1 << 24, 6, B200.device)
    assert ev6.kind == "interpolated" and collective_time_s("allgather", 1 << 24, 6, 1, _measured(B200)) == t6
    # an NVL72 domain's TP 8 lies beyond GB200's 2-4: no bus bandwidth held at 4, the model instead
    t8, ev8 = table_collective("allgather", 1 << 24, 8, GB200.device)
    assert t8 is None and "outside" in ev8.note
    assert collective_time_s("allgather", 1 << 24, 8, 1, _measured(GB200)) == collective_time_s(
        "allgather", 1 << 24, 8, 1, GB200
    )
    assert collective_evidence("allgather", 1 << 24, 8, 1, _measured(GB200)) is None
    t4, _ = table_collective("allgather", 1 << 24, 4, GB200.device)
    assert collective_time_s("allgather", 1 << 24, 4, 1, _measured(GB200)) == pytest.approx(t4)


def test_across_nodes_and_send_recv_keep_the_model():
    m = _measured(B200)
    for kind, size, stride in (("alltoall", 16, 1), ("allreduce", 2, 8), ("ring_p2p", 4, 1), ("p2p", 2, 1)):
        assert collective_time_s(kind, 1e8, size, stride, m) == collective_time_s(kind, 1e8, size, stride, B200)
        assert collective_evidence(kind, 1e8, size, stride, m) is None
    # the direct (peer-read) all-reduce of inference engines is not NCCL's
    assert collective_time_s("allreduce", 1e6, 8, 1, m, algorithm="direct") == collective_time_s(
        "allreduce", 1e6, 8, 1, B200, algorithm="direct"
    )


def test_evidence_says_measured_interpolated_or_extrapolated():
    m = _measured(B200)
    assert collective_evidence("allreduce", 1 << 20, 8, 1, m).kind == "measured"  # a grid point
    assert collective_evidence("allreduce", 3e6, 8, 1, m).kind == "interpolated"
    far = collective_evidence("allreduce", 4e9, 8, 1, m)
    assert far.kind == "extrapolated" and far.distance > 2


def test_comm_known_reports_the_looked_up_kind_for_tp_and_the_ep_all_to_all():
    model, w = load_model("qwen3-30b-a3b"), Workload(global_batch=64, seq_len=4096)
    cfg = ParallelConfig(tp=2, pp=1, dp=8, ep=8, mb=1, sp=True)
    m = _measured(B200)
    for group in ("tp", "ep"):
        k = comm_known(m, cfg, group, model, w)
        assert k.kind in ("measured", "interpolated") and "b200_sxm/nccl" in k.basis
    # by default the EP all-to-all and NCCL-issued TP are the table (as the engines time them); TP under
    # Transformer Engine's userbuffers (chunks > 1) keeps the link's constant
    assert comm_known(B200, cfg, "tp", model, w).kind in ("measured", "interpolated")
    assert comm_known(B200, replace(cfg, chunks=2), "tp", model, w).kind not in ("measured", "interpolated")
    assert "b200_sxm/nccl" in comm_known(B200, cfg, "ep", model, w).basis
    # a DeepEP dispatch is not an NCCL all-to-all: the link's constant
    deepep = replace(cfg, ep_dispatcher="deepep")
    assert "table" not in comm_known(m, deepep, "ep", model, w).basis
    # pipeline sends have no table
    assert "table" not in comm_known(m, replace(cfg, pp=2, dp=4), "pp", model, w).basis


def test_the_plans_benchmark_lists_a_rows_intra_node_collectives_and_leaves_the_trace_off():
    from benchmarks import component_collectives as cc
    from benchmarks.published import load_set
    from costmodel.physics.comm import collectives

    rows = [r for r in load_set("dev") if not r.skip][:2]
    res = cc.compare_plans(cc.plan_collectives(rows))
    assert collectives.TRACE is None
    tp = [x for x in res if x["dim"] == "TP"]
    assert tp and all(x["table_s"] and x["model_s"] > 0 for x in tp)
    assert {x["kind"] for x in tp} <= {"allreduce", "allgather", "reducescatter"}


def _a2a_model_s(model, tokens, tp, ep, cl):
    from costmodel.physics.comm.ep_dispatch import ep_alltoall_bytes

    return collective_time_s("alltoall", ep_alltoall_bytes(model, tokens, tp, ep, cl.domain), ep, 1, cl, tables=False)


def test_the_training_all_to_all_dispatch_is_the_table_by_default_where_it_has_the_group():
    from costmodel.physics.comm.ep_dispatch import ep_alltoall_bytes, ep_dispatch_time_s

    model = load_model("qwen3-30b-a3b")
    b = ep_alltoall_bytes(model, 4096, 1, 8, B200.domain)  # 4096 x 8 x 2048 x 2 B: a grid point of the table
    t, ev = collective_lookup("b200_sxm", "alltoall", b, 8)
    assert ev.kind == "measured" and b == 134217728
    train = ep_dispatch_time_s(model, 4096, 1, 8, B200, nccl_table=True)
    assert train == pytest.approx(t)
    # the formula stays below the measurement (the tables' 0.55 of 900 GB/s against the model's 0.8)
    assert _a2a_model_s(model, 4096, 1, 8, B200) < 0.8 * train
    # the serving model's dispatch (no nccl_table) and --kernels measured's
    assert ep_dispatch_time_s(model, 4096, 1, 8, B200) == pytest.approx(_a2a_model_s(model, 4096, 1, 8, B200))
    assert ep_dispatch_time_s(model, 4096, 1, 8, _measured(B200)) == pytest.approx(t)
    # a combine chunk: its own share of the bytes, looked up again (the latency not split)
    half, _ = collective_lookup("b200_sxm", "alltoall", b / 2, 8)
    assert ep_dispatch_time_s(model, 4096, 1, 8, B200, share=0.5, nccl_table=True) == pytest.approx(half)
    assert half > train / 2


@pytest.mark.parametrize(
    "cluster, ep, why",
    [
        (load_cluster("b200").with_gpus(32), 16, "across nodes"),
        (load_cluster("gb200-nvl72").with_gpus(72), 8, "beyond GB200's counts 2-4"),
        (load_cluster("h800").with_gpus(16), 8, "no H800 table (its NVLink is not H100's)"),
    ],
)
def test_outside_the_table_the_training_dispatch_keeps_the_formula(cluster, ep, why):
    from costmodel.physics.comm.ep_dispatch import ep_dispatch_time_s

    model = load_model("qwen3-30b-a3b")
    assert ep_dispatch_time_s(model, 4096, 1, ep, cluster, nccl_table=True) == pytest.approx(
        _a2a_model_s(model, 4096, 1, ep, cluster)
    ), why
    cfg = ParallelConfig(tp=1, pp=1, dp=cluster.num_gpus, ep=ep, mb=1)
    w = Workload(global_batch=cluster.num_gpus, seq_len=4096)
    assert "table" not in comm_known(cluster, cfg, "ep", model, w).basis


def test_both_engines_charge_the_tables_all_to_all_and_agree():
    from costmodel import api
    from costmodel.physics.tables import system_of

    model, cl = load_model("qwen3-30b-a3b"), load_cluster("b200").with_gpus(8)
    # the same B200 under a name no table knows (its fitted constants and generation unchanged): the formula
    untabled = replace(cl, device=replace(cl.device, name="B200-SXM-no-table"))
    assert system_of(untabled.device) is None and system_of(cl.device) == "b200_sxm"
    w = Workload(global_batch=64, seq_len=4096)
    cfg = ParallelConfig(tp=1, pp=1, dp=8, ep=8, mb=1)
    tabled = [api.evaluate(model, cl, w, cfg, engine=e) for e in ("analytic", "graph")]
    modelled = [api.evaluate(model, untabled, w, cfg, engine=e) for e in ("analytic", "graph")]
    for t, m in zip(tabled, modelled):
        assert t.breakdown["ep_exposed_s"] > 1.2 * m.breakdown["ep_exposed_s"]
        assert t.step_time_s > m.step_time_s
    assert tabled[0].step_time_s == pytest.approx(tabled[1].step_time_s, rel=0.03)


def test_nccl_issued_tp_is_the_table_in_training_and_userbuffers_tp_the_model():
    from costmodel.engines.analytic import layer_timing
    from costmodel.frameworks.stacks import tp_from_nccl_tables
    from costmodel.physics.kernels.gemm import ACT_BYTES

    model, cl = load_model("llama3.1-8b"), load_cluster("a100-80g").with_gpus(8)
    w = Workload(global_batch=8, seq_len=2048)
    assert tp_from_nccl_tables(w, ParallelConfig(tp=8)) is True
    assert tp_from_nccl_tables(w, ParallelConfig(tp=8, sp=True, chunks=8)) is None  # userbuffers
    assert tp_from_nccl_tables(replace(w, mode="infer"), ParallelConfig(tp=8)) is None  # engines' own all-reduce
    msg = 2048 * model.hidden * ACT_BYTES
    table = collective_time_s("allreduce", msg, 8, 1, cl, tables=True)
    assert table != pytest.approx(collective_time_s("allreduce", msg, 8, 1, cl, tables=False), rel=0.01)
    # a layer without SP all-reduces twice forward and twice backward, each the table's time
    led = layer_timing(model, cl, w, ParallelConfig(tp=8, mb=1), False).ledger
    assert led.link_s["tp"] == pytest.approx(4 * table)
