"""Disaggregated serving (issue 40): KV bytes and transfer, pool goodput, the aggregated/disaggregated
choice, and the pools' launch flags as the engines declare them."""

import argparse
import json

import pytest

from costmodel.serving.disagg import Pool, disagg_estimate, kv_transfer_bytes, kv_transfer_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from planner.disagg_report import pool_launches
from search.infer import InferProblem
from search.infer_disagg import solve_disagg

#: vLLM ``KVTransferConfig`` fields and ``kv_role`` values (vllm-project/vllm ``vllm/config/kv_transfer.py``
#: at 007c643b: ``KVRole = Literal["kv_producer", "kv_consumer", "kv_both"]``)
VLLM_KV_TRANSFER_FIELDS = {
    "kv_connector",
    "engine_id",
    "kv_buffer_device",
    "kv_buffer_size",
    "kv_role",
    "kv_rank",
    "kv_parallel_size",
    "kv_ip",
    "kv_port",
    "kv_connector_extra_config",
    "kv_connector_module_path",
}
VLLM_KV_ROLES = {"kv_producer", "kv_consumer", "kv_both"}


def sglang_disagg_parser() -> argparse.ArgumentParser:
    """SGLang's PD declarations as its ``server_args.py`` writes them (``--disaggregation-mode``
    choices null/prefill/decode; ``--disaggregation-transfer-backend`` choices mooncake/nixl)."""
    ap = argparse.ArgumentParser(exit_on_error=False)
    ap.add_argument("--disaggregation-mode", type=str, default="null", choices=["null", "prefill", "decode"])
    ap.add_argument("--disaggregation-transfer-backend", type=str, default="mooncake", choices=["mooncake", "nixl"])
    return ap


def vllm_disagg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(exit_on_error=False)
    ap.add_argument("--kv-transfer-config", type=json.loads)
    return ap


def test_kv_bytes_of_known_shapes():
    # DeepSeek-V3 MLA: 61 layers x (kv_lora_rank 512 + rope 64) x 1 byte (fp8) x 4096 tokens
    assert kv_transfer_bytes(load_model("deepseek-v3"), 4096, "fp8") == 61 * 576 * 4096
    # Llama-3-70B GQA: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes x 1000 tokens
    assert kv_transfer_bytes(load_model("llama3-70b"), 1000, "bf16") == 2 * 80 * 8 * 128 * 2 * 1000


def test_transfer_nvlink_faster_than_rdma_and_more_senders_faster():
    cl = load_cluster("b200")
    nbytes = 144e6
    nv = kv_transfer_s(nbytes, cl, 8, same_domain=True)
    nic = kv_transfer_s(nbytes, cl, 8, same_domain=False)
    assert nv < nic
    assert kv_transfer_s(nbytes, cl, 8, same_domain=False) < kv_transfer_s(nbytes, cl, 1, same_domain=False)
    assert kv_transfer_s(nbytes, cl, 8, same_domain=False, layers=61, layerwise=True) > nic


def test_pools_in_one_nvlink_domain_use_nvlink():
    m = load_model("deepseek-v3")
    kw = dict(input_len=4096, output_len=256, dtype="fp8", kv_dtype="fp8", tpot_target_s=0.1)
    c = ParallelConfig(tp=8, ep=8)
    rack = disagg_estimate(
        m, load_cluster("gb200-nvl72").with_gpus(16), Pool("prefill", c, 1), Pool("decode", c, 1), **kw
    )
    hgx = disagg_estimate(m, load_cluster("b200").with_gpus(16), Pool("prefill", c, 1), Pool("decode", c, 1), **kw)
    assert rack.link == "nvlink" and hgx.link == "nic"
    assert rack.transfer_s < hgx.transfer_s


def test_goodput_monotone_in_pool_capacity():
    m, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8)
    c = ParallelConfig(tp=1)
    kw = dict(input_len=2048, output_len=256, ttft_target_s=0.5, tpot_target_s=0.03)

    def good(x, y):
        return disagg_estimate(m, cl, Pool("prefill", c, x), Pool("decode", c, y), **kw).goodput_rps

    grid = {(x, y): good(x, y) for x in (1, 2, 4) for y in (1, 2, 4)}
    assert all(v > 0 for v in grid.values())
    for (x, y), v in grid.items():
        if (2 * x, y) in grid:
            assert grid[(2 * x, y)] >= v
        if (x, 2 * y) in grid:
            assert grid[(x, 2 * y)] >= v
    assert grid[(4, 4)] > grid[(1, 1)]
    # a tighter TTFT target never raises the goodput
    tight = disagg_estimate(m, cl, Pool("prefill", c, 2), Pool("decode", c, 2), **{**kw, "ttft_target_s": 0.2})
    assert tight.goodput_rps <= grid[(2, 2)]


@pytest.fixture(scope="module")
def dsv3():
    p = InferProblem(
        model=load_model("deepseek-v3"),
        cluster=load_cluster("b200").with_gpus(16),
        input_len=4096,
        output_len=1024,
        dtype="fp8",
        kv_dtype="fp8",
        ttft_target_s=2.0,
        tpot_target_s=0.05,
        engine="sglang",
    )
    return p, solve_disagg(p)


def test_deepseek_v3_16_b200_compares_and_picks_the_higher_goodput(dsv3):
    p, d = dsv3
    assert d.aggregated_best is not None and d.aggregated_goodput_rps > 0
    assert d.disaggregated is not None and d.disaggregated_goodput_rps > 0
    assert d.disaggregated.gpus == 16
    higher = "disaggregated" if d.disaggregated_goodput_rps > d.aggregated_goodput_rps else "aggregated"
    assert d.choice == higher
    g = d.disaggregated.at_goodput
    assert g["ttft_ms"]["p90"] <= 2000 and g["tpot_ms"]["p90"] <= 50


def test_emitted_sglang_pool_flags_parse(dsv3):
    p, d = dsv3
    launches = pool_launches(p, d)
    assert [x["role"] for x in launches] == ["prefill", "decode"]
    ap = sglang_disagg_parser()
    for x in launches:
        args = x["args"]
        i = args.index("--disaggregation-mode")
        ns, _ = ap.parse_known_args(args[i : i + 4])
        assert ns.disaggregation_mode == x["role"]
        assert ns.disaggregation_transfer_backend in ("mooncake", "nixl")


def test_emitted_vllm_pool_flags_parse(dsv3):
    p, d = dsv3
    from dataclasses import replace

    launches = pool_launches(replace(p, engine="vllm"), d)
    ap = vllm_disagg_parser()
    roles = []
    for x in launches:
        i = x["args"].index("--kv-transfer-config")
        cfg = ap.parse_args(x["args"][i : i + 2]).kv_transfer_config
        assert set(cfg) <= VLLM_KV_TRANSFER_FIELDS
        assert cfg["kv_connector"] == "NixlConnector" and cfg["kv_role"] in VLLM_KV_ROLES
        roles.append(cfg["kv_role"])
        assert "'{" in x["command"]  # the JSON is quoted for the shell
    assert roles == ["kv_producer", "kv_consumer"]
