"""Sweep plots: scaling, best TP x PP heatmap and hardware co-design, written as PNG and SVG."""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli
from planner.sweep.plots import codesign_curve, knob_values, plot_tp_pp

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    code = cli.main(
        [
            "sweep",
            "--models",
            "llama3-8b,gpt3-5b",
            "--gpus",
            "1,8,16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--clusters",
            "h100-sxm",
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
            "--plots",
            "--json",
        ]
    )
    assert code == 0
    return out


def test_plots_are_written_as_png_and_svg(swept, capsys):
    names = sorted(p.name for p in (swept / "plots").iterdir())
    assert names == sorted(
        f"{stem}.{ext}"
        for ext in ("png", "svg")
        for stem in ("scaling", "tp_pp", "codesign_gpt3-5b_h100-sxm_16gpus", "codesign_llama3-8b_h100-sxm_16gpus")
    )
    for p in (swept / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    for p in (swept / "plots").glob("*.svg"):
        assert p.read_text()[:200].lstrip().startswith("<?xml") and "<svg" in p.read_text()[:2000]


def test_heatmap_labels_each_cell_with_its_plan_or_outcome(swept, tmp_path):
    svg = (swept / "plots" / "tp_pp.svg").read_text()
    rows = [json.loads(line) for line in (swept / "results.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(f"{r['tp']}x{r['pp']}" in svg for r in ok)
    # 1 GPU: the cases fit only with optimizer CPU offload (search.offload_choice), so every cell is a plan; a
    # case without one is drawn with its outcome (the same records, one marked infeasible)
    assert all(r["optimizer_offload_fraction"] > 0 for r in rows if r["gpus"] == 1)
    marked = [dict(r, status="infeasible") if r["gpus"] == 1 else r for r in rows]
    paths = plot_tp_pp(marked, tmp_path)
    assert "no fit" in next(p for p in paths if p.suffix == ".svg").read_text()


def test_codesign_marks_the_critical_bandwidth():
    # Llama-3 70B on 8 nodes of H100, tp=8 pp=4 dp=2: DP gradient reduction crosses the NICs.
    model, cl = load_model("llama3-70b"), load_cluster("h100-sxm").with_gpus(64)
    w = Workload(global_batch=128, seq_len=4096)
    c = ParallelConfig(tp=8, pp=4, dp=2, sp=True, zero=1, recompute="selective")
    curve = codesign_curve(model, cl, w, c, "nic_gbps")
    assert curve.values == knob_values(cl, "nic_gbps") and len(curve.compute_s) == len(curve.values)
    dp = curve.link_s["dp"]
    assert all(a >= b for a, b in zip(dp, dp[1:]))  # more bandwidth, less time on the link
    crit = curve.critical["dp"]
    i = curve.values.index(crit)
    assert dp[i] <= curve.compute_s[i] and (i == 0 or dp[i - 1] > curve.compute_s[i - 1])
    # NVLink does not carry DP across nodes: its T_comm is flat in the NIC sweep
    assert max(curve.link_s["sp"]) == pytest.approx(min(curve.link_s["sp"]))
    assert json.loads(json.dumps(curve.to_dict()))["knob"] == "nic_gbps"


def test_dma_engine_count_matters_where_engines_bound_bandwidth():
    model, cl = load_model("llama3-8b"), load_cluster("sg2262-like").with_gpus(16)
    w = Workload(global_batch=64, seq_len=4096)
    curve = codesign_curve(model, cl, w, ParallelConfig(tp=8, dp=2, sp=True, zero=1), "dma_engines")
    sp = curve.link_s["sp"]
    assert curve.values == list(range(1, 17)) and sp[0] > sp[3]  # 1 engine of 64 GB/s vs 4
