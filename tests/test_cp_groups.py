"""The gradient group of a context-parallel plan is Megatron-Core's DP x CP group: size ``dp * cp``,
rank stride ``tp`` (``parallel_state`` builds it from one tp-rank over every cp and dp index), so a
plan that fits in one node reduces its gradients over NVLink, never over the NIC (issue 20: stride
``tp * cp`` charged single-node CP runs the network bandwidth)."""

from dataclasses import replace

import pytest

from costmodel.physics.comm.groups import group_stride, layout
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload


def test_dpcp_group_stride_is_tp():
    # ranks of tp-rank 0 under the order tp-cp-dp with tp 2, cp 2, dp 2: 0, 2, 4, 6 -> stride 2
    assert group_stride("dpcp", tp=2, cp=2, dp=2) == 2
    assert group_stride("dp", tp=2, cp=2, dp=2) == 4  # the pure DP group strides over cp as well
    # size 4, stride 2 on 8-GPU nodes: one node; with the pure-DP stride it would have spanned two
    assert layout(4, group_stride("dpcp", tp=2, cp=2, dp=2), 8).scope == "intra"
    assert layout(4, group_stride("dp", tp=2, cp=2, dp=2), 8).scope == "inter"


def _slow_network(cluster):
    return replace(
        cluster, inter_link=replace(cluster.inter_link, bw_bytes_per_s=cluster.inter_link.bw_bytes_per_s / 100)
    )


@pytest.mark.parametrize("engine", ["analytic", "graph"])
@pytest.mark.parametrize("zero", [1, 3])
def test_single_node_cp_plan_never_uses_the_network(engine, zero):
    model = load_model("llama3-8b")
    cluster = load_cluster("h100-sxm").with_gpus(8)
    wl = Workload(global_batch=16, seq_len=8192)
    cfg = ParallelConfig(tp=2, pp=1, dp=2, cp=2, mb=1, sp=True, zero=zero, bucket_bytes=160e6)
    fast = evaluate(model, cluster, wl, cfg, engine=engine)
    slow = evaluate(model, _slow_network(cluster), wl, cfg, engine=engine)
    assert slow.step_time_s == pytest.approx(fast.step_time_s, rel=1e-12)
    # the same plan on two nodes (dp 4) does cross the NIC: the check above can see the network
    two = load_cluster("h100-sxm").with_gpus(16)
    cfg2 = replace(cfg, dp=4)
    wl2 = Workload(global_batch=32, seq_len=8192)
    assert (
        evaluate(model, _slow_network(two), wl2, cfg2, engine=engine).step_time_s
        > evaluate(model, two, wl2, cfg2, engine=engine).step_time_s
    )
