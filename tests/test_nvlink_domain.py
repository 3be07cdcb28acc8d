"""NVLink domains larger than a node (issue 39): GB200/GB300 NVL72 join 72 GPUs of 18 four-GPU hosts through
NVSwitch trays, so a group inside the rack runs over NVLink while it spans many hosts; host-bound costs (CPU
offload, checkpoint writes, the node count) stay per host."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import layout
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import cluster_from_dict, cluster_to_dict, load_cluster, load_model
from search.candidates import tp_values
from search.problem import Problem
from costmodel.spec.workload import Workload

NVL72 = ("gb200-nvl72", "gb300-nvl72")


@pytest.mark.parametrize("name", NVL72)
def test_nvl72_presets_join_72_gpus_of_four_gpu_hosts(name):
    c = load_cluster(name)
    assert (c.gpus_per_node, c.domain) == (4, 72)
    assert c.device.peak_bf16_flops_per_s == pytest.approx(2.5e15)  # 360 PFLOP/s sparse per rack / 72 / 2
    assert cluster_from_dict(json.loads(json.dumps(cluster_to_dict(c)))).domain == 72


def test_hgx_domain_is_its_node():
    for name in ("b200", "b300", "h100-sxm"):
        c = load_cluster(name)
        assert c.nvlink_domain == 0 and c.domain == c.gpus_per_node == 8
    assert "nvlink_domain" not in cluster_to_dict(load_cluster("b200"))


def test_domain_must_hold_whole_hosts():
    d = cluster_to_dict(load_cluster("gb200-nvl72"))
    d["nvlink_domain"] = 70
    with pytest.raises(SpecError, match="nvlink_domain.*multiple of gpus_per_node=4"):
        cluster_from_dict(d)


def test_a_group_of_64_stays_on_nvlink_in_the_rack_and_crosses_hosts_without_it():
    nvl = load_cluster("gb200-nvl72").with_gpus(1152)
    hosts = replace(nvl, nvlink_domain=0)  # the same GPUs with NVLink only inside each 4-GPU host
    assert layout(64, 1, nvl.domain).scope == "intra"
    assert layout(64, 1, hosts.domain).inter == 16
    for kind in ("alltoall", "allgather", "reducescatter", "allreduce"):
        fast, slow = (collective_time_s(kind, 2**30, 64, 1, c) for c in (nvl, hosts))
        assert fast * 2 < slow, kind  # 900 GB/s NVLink against four 50 GB/s NICs per host


def test_a_group_larger_than_the_rack_crosses_racks():
    nvl = load_cluster("gb200-nvl72").with_gpus(1152)
    assert layout(144, 1, nvl.domain).scope == "inter"
    # an all-to-all sends half of its bytes through each GPU's 50 GB/s NIC once it spans two racks
    a72, a144 = (collective_time_s("alltoall", 2**30, n, 1, nvl) for n in (72, 144))
    assert a144 > 5 * a72
    # a ring crosses each rack boundary once per channel, through 72 NICs: slower, not by the NIC ratio
    r72, r144 = (collective_time_s("allgather", 2**30, n, 1, nvl) for n in (72, 144))
    assert r72 < r144 < 2 * r72


def _problem(cluster: str, gpus: int, model: str = "llama3.1-405b") -> Problem:
    return Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=2304, seq_len=8192, dtype="bf16"),
    )


def test_the_search_may_grow_tp_across_hosts_inside_the_domain_only():
    assert max(tp_values(_problem("gb300-nvl72", 4608))) > 8  # 128 heads: tp 16, 32, 64 stay in the rack
    assert max(tp_values(_problem("b300", 4608))) == 8


def test_host_bound_costs_stay_per_host():
    from costmodel.physics.mechanics.offload import offload_times_s

    nvl = load_cluster("h100-sxm")
    rack = replace(nvl, gpus_per_node=4, nvlink_domain=72)
    # the CPU Adam step: four GPUs share a host's memory bandwidth, not the 72 of the NVLink domain
    assert offload_times_s(1e9, rack)[1] == pytest.approx(offload_times_s(1e9, nvl)[1] / 2)


def test_cli_names_hosts_and_domains_and_presets_lists_the_assumptions():
    out = subprocess.run(
        [sys.executable, "-m", "planner", "presets", "gb200-nvl72"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "nvlink_domain 72" in out.stdout and "Grace" in out.stdout
    ev = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "evaluate",
            "--model",
            "llama3.1-70b",
            "--cluster",
            "gb200-nvl72",
            "--gpus",
            "144",
            "--global-batch",
            "144",
            "--seq",
            "8192",
            "--tp",
            "16",
            "--pp",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ev.returncode == 0, ev.stderr
    assert "36 nodes of 4, 2 NVLink domains of 72" in ev.stdout


def test_explain_says_where_each_group_runs():
    from costmodel.physics.comm.groups import placement

    rack = {d: (g.intra, g.inter) for d, _, g in placement(tp=2, cp=1, dp=144, ep=32, pp=4, domain=72)}
    node = {d: (g.intra, g.inter) for d, _, g in placement(tp=2, cp=1, dp=144, ep=32, pp=4, domain=8)}
    assert rack["ep"] == (32, 1) and node["ep"] == (8, 4)  # EP 32 stays on NVLink in the rack, spans 4 HGX nodes
    out = subprocess.run(
        [sys.executable, "-m", "planner", "explain", "--model", "deepseek-v3", "--cluster", "gb200-nvl72"]
        + "--gpus 1152 --global-batch 9216 --seq 4096 --tp 2 --pp 4 --vp 4 --ep 32 --mb 2 --zero 1".split()
        + "--recompute none --bucket-mb 160 --chunks 1 --sp --json".split(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    got = {p["group"]: (p["per_domain"], p["domains"]) for p in json.loads(out.stdout)["placement"]}
    assert got["ep"] == (32, 1) and got["dp"] == (36, 4)


def test_hybridep_keeps_an_ep_group_of_the_rack_off_the_network():
    from costmodel.physics.comm.ep_dispatch import deepep_bytes, ep_dispatch_time_s

    m = load_model("deepseek-v3")  # 256 experts, top-8
    nvl, hgx = load_cluster("gb200-nvl72").with_gpus(1152), load_cluster("b200").with_gpus(1152)
    row = m.hidden * 2
    assert deepep_bytes(m, 8192, 64, nvl.domain, row).rdma_bytes == 0  # 64 ranks inside one rack
    assert deepep_bytes(m, 8192, 64, hgx.domain, row).rdma_bytes > 0  # 8 HGX nodes: one copy per node crosses
    a2a, hyb = (ep_dispatch_time_s(m, 8192, 1, 64, nvl, d) for d in ("alltoall", "hybridep"))
    assert hyb < a2a  # one copy per destination rank, not per routed expert
    assert ep_dispatch_time_s(m, 8192, 1, 64, nvl, "hybridep") < ep_dispatch_time_s(m, 8192, 1, 64, hgx, "hybridep")
    # DeepEP forwards among at most 8 NVLink peers (NUM_MAX_NVL_PEERS): in the rack it still crosses the NIC
    assert ep_dispatch_time_s(m, 8192, 1, 64, nvl, "deepep") > hyb
    assert ep_dispatch_time_s(m, 8192, 1, 64, hgx, "deepep") == ep_dispatch_time_s(m, 8192, 1, 64, hgx, "hybridep")
