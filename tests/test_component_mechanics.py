"""The framework-mechanics component (issue 20): rules read from the frameworks' code, what they
issue for a plan, and the quantities where the cost model charges the same.

Trivial -> hand-computed -> the benchmark's verdicts. The quantities that match today are
asserted to keep matching; the known mismatches (benchmarks/RESULTS.md, "Framework mechanics")
are asserted to be reported, so ``--check`` exits 1 until they are fixed.
"""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import component_mechanics as cm  # noqa: E402
from benchmarks import mechanics_rules as mr  # noqa: E402
from costmodel.engines.analytic import layer_timing  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.engines.graph.builders import layer_graph  # noqa: E402
from costmodel.spec.presets import load_cluster, load_model  # noqa: E402
from costmodel.spec.workload import Workload  # noqa: E402
from costmodel.physics.mechanics.zero3_fetch import deepspeed_fetches, deepspeed_reduces, gather_pieces  # noqa: E402


def test_every_rule_cites_a_commit_and_a_line():
    with open(mr.DATA, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 30
    for r in rows:
        assert r["source_url"].startswith("https://github.com/"), r["rule_id"]
        assert "@" in r["source_location"] and "line" in r["source_location"], r["rule_id"]
        assert r["framework"] in ("megatron", "deepspeed", "fsdp2")


def test_megatron_bucket_grows_with_dp():
    rules = mr.load_rules()
    # max(40e6, 1e6 * dp_cp): 40e6 up to dp 40, then 1e6 per rank
    assert mr.megatron_bucket_elements(rules, ParallelConfig(dp=32, bucket_bytes=1)) == 40e6
    assert mr.megatron_bucket_elements(rules, ParallelConfig(dp=64, cp=2, bucket_bytes=1)) == 128e6
    assert mr.megatron_bucket_elements(rules, ParallelConfig(dp=64, bucket_bytes=0)) is None


def test_bucket_close_rules_by_hand():
    # Megatron: close after the tensor reaching >= 10: [6, 6] -> 12, then [6] left
    assert mr.close_ge([6, 6, 6], 10) == [12, 6]
    # DeepSpeed: reduce before exceeding 10: [6], [6], [6]
    assert mr.close_gt([6, 6, 6], 10) == [6, 6, 6] == deepspeed_reduces([6, 6, 6], 10)
    # ZeRO-3 fetch: 1e4 persistent (< 1e5), 3e7 + 3e7 coalesce to 6e7 >= 5e7, 8e7 alone
    assert deepspeed_fetches([1e4, 3e7, 3e7, 8e7]) == [6e7, 8e7]


def test_deepspeed_zero3_charges_one_gather_per_module():
    m, cl = load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(1024)
    w = Workload(global_batch=1024, seq_len=2048)
    ds = ParallelConfig(dp=1024, zero=3, framework="deepspeed", bucket_bytes=0)
    fs = ParallelConfig(dp=1024, zero=3, framework="fsdp2")
    # GPT layer: QKV 453M, proj 151M, fc1 604M, fc2 604M elements, each above the 5e7 prefetch bucket
    assert len(gather_pieces(m, ds, False)[0]) == 4 and len(gather_pieces(m, fs, False)[0]) == 1
    g = layer_graph(m, cl, w, ds, False, "fwd")
    assert sum(1 for n in g if g.nodes[n].get("strategy") == "zero") == 4
    # same bytes, four ring latencies over 1,024 ranks instead of one: the link time grows
    t_ds = layer_timing(m, cl, w, ds, False).ledger.link_s["zero"]
    t_fs = layer_timing(m, cl, w, fs, False).ledger.link_s["zero"]
    assert t_ds > t_fs


@pytest.fixture(scope="module")
def checks():
    return cm.evaluate(graph=False)


def test_what_matches_today_keeps_matching(checks):
    ok = {(k.case, k.quantity) for k in checks if k.compared and k.ok}
    must = {
        ("deepspeed ZeRO-3, Megatron-DeepSpeed GPT, dp1024", "all-gathers per layer, forward"),
        ("deepspeed ZeRO-3, Megatron-DeepSpeed GPT, dp1024", "gathered bytes per layer"),
        ("megatron DDP, no overlap, dp32", "stage 0: gradient buckets (analytic)"),
        ("megatron distopt, overlap, tp4 dp48", "gradient collective"),
        ("deepspeed pipeline ZeRO-1, tp8 pp35 dp8", "ZeRO stages accepted with pp>1"),
    }
    # Megatron-Core's buckets per chunk and per buffer, bucketing on pp rank 0 / chunk 0 only, the
    # >= close rule at parameter granularity, the expert buffer over the expert-DP group
    must |= {
        ("megatron distopt, overlap, tp8 pp2 vp2 dp48", "stage 1: gradient buckets (analytic)"),
        ("megatron distopt, overlap, tp8 pp2 vp2 dp48", "stage 0: gradient buckets (analytic)"),
        ("megatron distopt, overlap, MoE ep8 dp8", "stage 0: gradient buckets (analytic)"),
        ("megatron DDP, overlap, dp32", "stage 0: gradient buckets (analytic)"),
        ("deepspeed pipeline ZeRO-1, tp8 pp35 dp8", "stage 0: gradient collectives"),
        ("deepspeed pipeline ZeRO-1, tp8 pp35 dp8", "gradient element bytes on the wire"),
    }
    # the embedding and head units (costmodel.physics.mechanics.zero3_edges): torchtitan's units, DeepSpeed's extra bucket
    must |= {
        ("fsdp2 reshard, dp64", q)
        for q in (
            "all-gathers per micro-batch, forward",
            "all-gathers per micro-batch, backward",
            "reduce-scatters per micro-batch",
            "forward gathered bytes per micro-batch",
        )
    }
    must |= {
        (n, "reduce-scatters per micro-batch (stage)")
        for n in (
            "deepspeed ZeRO-3, Megatron-DeepSpeed Llama, dp384, DeepSpeed's buckets",
            "deepspeed ZeRO-3, Megatron-DeepSpeed GPT, dp1024",
        )
    }
    assert must <= ok
    assert len(ok) >= 53  # without the graph engine rows (evaluate(graph=False))


def test_every_compared_quantity_matches(checks):
    bad = {(k.case, k.quantity) for k in checks if not k.ok}
    # the last one: DeepSpeed ZeRO-3 on Hugging Face modules, now a plan input (ParallelConfig.module_layout)
    assert bad == set()
    assert ("deepspeed ZeRO-3, HF Llama, dp1536", "reduce-scatters per micro-batch (stage)") in {
        (k.case, k.quantity) for k in checks if k.compared
    }


def test_the_hf_layout_is_what_the_model_charges():
    m = load_model("llama2-70b")
    fused = ParallelConfig(dp=1536, zero=3, framework="deepspeed", bucket_bytes=1e9)
    hf = ParallelConfig(dp=1536, zero=3, framework="deepspeed", bucket_bytes=1e9, module_layout="hf")
    from costmodel.physics.mechanics.zero3_fetch import reduce_pieces

    # reduce bucket 2.5e8 elements: Q 67M, K 8M, V 8M, O 67M, gate/up/down 235M each (HF) vs QKV 84M, fc1 470M (fused)
    assert len(reduce_pieces(m, hf, False)[0]) > len(reduce_pieces(m, fused, False)[0])


def test_check_exits_one_on_mismatch(capsys):
    from unittest import mock

    assert (
        subprocess.run(
            [sys.executable, "-m", "benchmarks.component_mechanics", "--check", "--no-graph"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        ).returncode
        == 0
    )
    with mock.patch.object(cm, "evaluate", lambda graph=True: [cm.Check("case", "quantity", 1, 2)]):
        assert cm.main(["--check"]) == 1
    assert "mismatch: case: quantity" in capsys.readouterr().err


def test_megatron_buckets_by_hand():
    from costmodel.physics.mechanics.grad_buckets import close_ge, close_ge_runs, stage_grad_buckets

    # reverse order [head 6, layer 4+4, emb 6], bucket 8: 6+4 -> 10, 4+6 -> 10: two buckets
    assert close_ge([6, 4, 4, 6], 8) == [10, 10]
    assert close_ge_runs([((6.0,), 1), ((4.0, 4.0), 1), ((6.0,), 1)], 8) == [10.0, 10.0]
    m = load_model("mcore-gpt-70b")
    c = ParallelConfig(tp=8, pp=2, vp=2, dp=48, zero=1, sp=True, bucket_bytes=4 * 48e6)
    s0, s1 = stage_grad_buckets(m, c, 0), stage_grad_buckets(m, c, 1)
    # stage 0: chunk 0 bucketed, chunk 1 one bucket; stage 1: one bucket per chunk (rules 4-5)
    assert s0.bucketed == (True, False) and s1.bucketed == (False, False)
    assert s1.count == 2 and s1.pieces() == (1.0, 1.0) and s0.pieces()[0] == s0.chunk_count(0) > 1
    # no --overlap-grad-reduce: one bucket per buffer, issued after backward
    off = stage_grad_buckets(m, ParallelConfig(tp=8, pp=2, vp=2, dp=48, zero=1, sp=True, bucket_bytes=0), 0)
    assert off.count == 2 and off.pieces() == (0.0, 0.0)
