"""The search decides the pipeline layout: CP-SAT's equals an exhaustive layout search on random
small instances (``benchmarks/layout_equality.py`` runs 100), and ``recommend``'s search reaches
interleaved plans for models whose layers no interleave divides evenly (61, 94, 126 layers)."""

import sys
from pathlib import Path

import pytest

from costmodel.spec.layout import of as layout_of, validate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
from benchmarks import layout_equality  # noqa: E402


def test_cp_sat_layout_equals_the_exhaustive_layout_search_on_random_instances(capsys):
    # 12 instances here (each a CP-SAT proof and an exhaustive pass); the benchmark runs 100
    assert layout_equality.main(["--instances", "12", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "mismatches: 0" in out


@pytest.mark.parametrize(
    "model, cluster, gpus, batch, seq, fixed",
    [
        ("deepseek-v3", "h800", 1024, 4096, 4096, dict(tp=1, pp=8, ep=64, cp=1, mb=1, zero=1, recompute="full")),
        ("qwen3-235b-a22b", "h100-sxm", 256, 1024, 4096, dict(tp=2, pp=8, ep=32, cp=1, mb=1, sp=True, zero=1)),
        (
            "llama3.1-405b",
            "h100-sxm",
            1024,
            2048,
            8192,
            dict(tp=8, pp=8, cp=2, mb=1, sp=True, zero=1, recompute="selective"),
        ),
    ],
)
def test_the_search_reaches_interleaved_layouts_megatron_accepts(model, cluster, gpus, batch, seq, fixed):
    m = load_model(model)
    p = Problem(
        model=m,
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=Limits(fixed=fixed, partial_recompute=False, chunk_options=(1,), bucket_mb_options=(25,)),
    )
    res = solve(p, SolveOptions(explain=False))
    assert res.status == "OPTIMAL" and res.best is not None
    c = res.best.config
    assert c.vp > 1 and m.layers % (c.pp * c.vp) != 0  # interleaved, and only a layout can state it
    validate(layout_of(m, c), m.layers, m.mtp_layers)  # Megatron-Core's rules (DeepSeek-V3: its MTP layer with L)
    assert res.best.estimate.fits
