"""The measured tables layer (issue 38): manifest, data, look-ups and their evidence, the backward
rule's shapes, caching, and the held-out interpolation error on a slice of the tables."""

from __future__ import annotations

import ast
import json
from math import log2, sqrt
from pathlib import Path

import numpy as np
import pytest

from costmodel.physics.tables import (
    Evidence,
    attention_lookup,
    moe_lookup,
    collective_lookup,
    gemm_lookup,
    linear_fwd_bwd_lookup,
    system_of,
    table_for,
)
from costmodel.physics.tables import collectives as coll_mod
from costmodel.physics.tables import gemm as gemm_mod
from costmodel.physics.tables.grid import interpolate
from costmodel.physics.tables.store import DATA, load, manifest
from costmodel.spec.presets import load_cluster

PKG = Path(coll_mod.__file__).parent
FIELDS = {
    "system",
    "op",
    "backend",
    "backend_version",
    "source_repo",
    "source_commit",
    "source_path",
    "licence",
    "provenance",
    "collection_meta",
    "converter",
    "reuse_notes",
    "rows",
}


def test_manifest_names_every_file_and_its_source():
    m = manifest()
    on_disk = {p.name for p in DATA.glob("*.npz")}
    assert on_disk == set(m["files"]), on_disk ^ set(m["files"])
    assert m["source"]["commit"] == "095f58a" and m["source"]["licence"] == "Apache-2.0"
    for name, e in m["files"].items():
        assert FIELDS <= set(e), (name, FIELDS - set(e))
        assert e["source_commit"] == "095f58a" and e["licence"] == "Apache-2.0", name
        assert e["source_path"].startswith("aic-core/src/aiconfigurator_core/systems/data/" + e["system"] + "/"), name
        assert "silicon_sample" not in e["source_path"]
        assert e["converter"]["command"].startswith("python -m benchmarks.tables_convert") and e["converter"]["date"]
        if e["op"] == "nccl":
            assert e["nccl_version"] == e["backend_version"], name
    systems = {e["system"] for e in m["files"].values()}
    assert systems == {"a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"}
    ops = {"gemm", "nccl", "attention", "moe", "allreduce", "mla"}
    for s in systems:  # every kind for every system
        assert {e["op"] for e in m["files"].values() if e["system"] == s} == ops, s
    assert (PKG / "NOTICE").read_text().count("Apache License") == 1
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 12e6  # of the issue's ~30 MB installed package


def test_data_loads_as_grids():
    for name, e in manifest()["files"].items():
        z = load(name)
        if e["op"] == "gemm":
            for dt in e["dtypes"]:
                lat, fill = z[f"{dt}.lat_ms"], z[f"{dt}.fill"]
                assert lat.shape == tuple(len(z[f"{dt}.{c}"]) for c in "mnk") == fill.shape, (name, dt)
                assert np.isfinite(lat).all() and (lat > 0).all(), (name, dt)
                assert int((fill > 0).sum()) == e["dtypes"][dt]["holes_filled"], (name, dt)
                assert all((np.diff(z[f"{dt}.{c}"]) > 0).all() for c in "mnk")
        elif e["op"] == "moe":
            lat, fill, cfg = z["lat_ms"], z["fill"], z["cfg"]
            assert lat.shape == (len(cfg), len(z["tokens"])) == fill.shape and cfg.shape[1] == 8, name
            assert np.isfinite(lat).all() and (lat > 0).all(), name
        elif e["op"] == "mla":
            lat, fill, cfg = z["lat_ms"], z["fill"], z["cfg"]
            assert lat.shape == (len(cfg), len(z["batch"]), len(z["ctx"])) == fill.shape and cfg.shape[1] == 2, name
            assert np.isfinite(lat).all() and (lat > 0).all(), name
            assert int((fill > 0).sum()) == e["generation"]["holes_filled"], name
        elif e["op"] == "attention":
            lat, fill, cfg = z["lat_ms"], z["fill"], z["cfg"]
            assert lat.shape == (len(cfg), len(z["batch"]), len(z["isl"])) == fill.shape, name
            assert np.isfinite(lat).all() and (lat > 0).all() and cfg.shape[1] == 5, name
            assert int((fill > 0).sum()) == e["context"]["holes_filled"], name
        else:
            keys = [k for k in z if k.endswith(".bytes")]
            assert keys, name
            for k in keys:
                b, lat = z[k], z[k.replace(".bytes", ".lat_ms")]
                top = 2**30 if e["op"] == "allreduce" else 512 * 2**20  # 2^29 bf16 elements; nccl-tests' 512 MiB
                assert (np.diff(b) > 0).all() and (lat > 0).all() and b[-1] == top, (name, k)


def test_package_reads_with_numpy_only():
    for f in PKG.glob("*.py"):
        names = {a.name for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {x.split(".")[0] for x in names} & {"pandas", "pyarrow"}, f


def _grid(system="b200_sxm", dtype="bf16"):
    choice, axes, lat, fill = gemm_mod.gemm_grid(system, dtype)
    return choice, axes, lat, fill


def test_a_grid_point_reads_back_as_measured():
    choice, ax, lat, fill = _grid()
    i, j, k = 40, 10, 12
    assert fill[i, j, k] == 0
    t, ev = gemm_lookup("B200", "bf16", int(ax["m"][i]), int(ax["n"][j]), int(ax["k"][k]))
    assert ev.kind == "measured" and ev.distance == 0 and ev.table == choice.label
    assert t == pytest.approx(float(lat[i, j, k]) * 1e-3, rel=1e-6)


def test_between_two_points_is_interpolated_and_between_them():
    _, ax, lat, _ = _grid("h100_sxm")
    i, j, k = 60, 14, 14
    k_mid = int(sqrt(ax["k"][k] * ax["k"][k + 1]))
    t, ev = gemm_lookup("H100-SXM5-80GB", "bf16", int(ax["m"][i]), int(ax["n"][j]), k_mid)
    lo, hi = sorted(float(lat[i, j, kk]) * 1e-3 for kk in (k, k + 1))
    assert ev.kind == "interpolated" and ev.distance == 0
    assert lo < t < hi


def test_outside_is_extrapolated_with_constant_flops_above_and_a_floor_below():
    _, ax, lat, _ = _grid()
    m, k = int(ax["m"][50]), int(ax["k"][10])
    n_max = int(ax["n"][-1])
    edge, _ = gemm_lookup("B200", "bf16", m, n_max, k)
    t, ev = gemm_lookup("B200", "bf16", m, 2 * n_max, k)
    assert ev.kind == "extrapolated" and ev.distance == pytest.approx(1.0) and "n 2.0x" in ev.note
    assert t == pytest.approx(2 * edge, rel=1e-9)  # constant FLOP/s of the edge point
    k_min = int(ax["k"][0])
    floor, _ = gemm_lookup("B200", "bf16", m, n_max // 2, k_min)
    t2, ev2 = gemm_lookup("B200", "bf16", m, n_max // 2, max(1, k_min // 4))
    assert ev2.kind == "extrapolated" and ev2.distance == pytest.approx(2.0) and t2 == pytest.approx(floor)


def test_a_grid_hole_is_never_measured():
    choice, ax, lat, fill = _grid()
    i, j, k = (int(x[0]) for x in np.nonzero(fill))
    t, ev = gemm_lookup("B200", "bf16", int(ax["m"][i]), int(ax["n"][j]), int(ax["k"][k]))
    assert ev.kind == "extrapolated" and ev.distance > 0 and "hole" in ev.note and t > 0


def test_a_device_without_a_table_says_so():
    a100_40 = load_cluster("a100-40g").device
    assert system_of(a100_40) is None
    t, ev = gemm_lookup(a100_40, "bf16", 4096, 4096, 4096)
    assert t is None and ev.kind == "assumed" and a100_40.name in ev.note
    t, ev = collective_lookup(a100_40, "all_reduce", 2**20, 8)
    assert t is None and ev.kind == "assumed"
    assert system_of(load_cluster("b200").device) == "b200_sxm"
    assert system_of(load_cluster("h100-sxm").device) == "h100_sxm"
    assert system_of(load_cluster("a100-80g").device) == "a100_sxm"
    # a dtype a system has no table for: assumed, never a number
    t, ev = gemm_lookup(load_cluster("a100-80g").device, "fp8", 4096, 4096, 4096)
    assert t is None and ev.kind == "assumed" and "fp8" in ev.note


def test_the_stack_chooses_the_table_and_a_stand_in_is_named():
    assert table_for("B200", "gemm", "vllm").backend == "vllm"
    alias = table_for("B200", "gemm", "trtllm 1.3.0rc23")
    assert alias.version == "1.3.0rc20" and "reuses" in alias.note
    dropped = table_for("B200", "gemm", "trtllm 1.2.0rc5")
    assert dropped.version == "1.3.0rc20" and "stands in" in dropped.note
    t, ev = gemm_lookup("H100-SXM5-80GB", "nvfp4", 1024, 1024, 1024)
    assert t is None  # Hopper has no FP4 tensor cores and no table
    _, ev = collective_lookup("H100-SXM5-80GB", "all_reduce", 2**20, 8, nccl="2.23")
    assert "2.23 has no all_reduce" in ev.note and ev.table.endswith("2.27.3")


def test_lookups_are_cached_per_shape():
    gemm_mod.cache_clear()
    gemm_lookup("B200", "fp8", 1234, 5678, 4321)
    before = gemm_mod._gemm.cache_info()
    gemm_lookup("B200", "fp8", 1234, 5678, 4321)
    after = gemm_mod._gemm.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
    coll_mod.cache_clear()
    collective_lookup("B200", "all_gather", 3e6, 6)
    collective_lookup("B200", "all_gather", 3e6, 6)
    assert coll_mod._collective.cache_info().hits == 1


def test_backward_gemms_are_read_at_the_transposed_shapes():
    m, n, k = 8192, 12288, 4096
    fwd, dgrad, wgrad = linear_fwd_bwd_lookup("H100-SXM5-80GB", "bf16", m, n, k)
    assert fwd == gemm_lookup("H100-SXM5-80GB", "bf16", m, n, k)
    assert dgrad == gemm_lookup("H100-SXM5-80GB", "bf16", m, k, n)
    assert wgrad == gemm_lookup("H100-SXM5-80GB", "bf16", k, n, m)
    # same FLOPs: at a large compute-bound shape each backward GEMM is within 25% of the forward
    for t, _ in (dgrad, wgrad):
        assert 0.8 < t / fwd[0] < 1.25


def test_collectives_read_measured_points_and_interpolate_gpu_counts():
    z = load(table_for("B200", "nccl").file)
    b, lat = z["all_reduce.half.8.bytes"], z["all_reduce.half.8.lat_ms"]
    t, ev = collective_lookup("B200", "all_reduce", int(b[10]), 8)
    assert ev.kind == "measured" and t == pytest.approx(float(lat[10]) * 1e-3)
    mid = sqrt(b[10] * b[11])
    t, ev = collective_lookup("B200", "allreduce", mid, 8)
    assert ev.kind == "interpolated" and float(lat[10]) * 1e-3 < t < float(lat[11]) * 1e-3
    t6, ev6 = collective_lookup("B200", "all_reduce", int(b[15]), 6)
    assert ev6.kind == "interpolated" and "6 GPUs between 4 and 8" in ev6.note
    bus = [int(b[15]) * 2 * (n - 1) / n / collective_lookup("B200", "all_reduce", int(b[15]), n)[0] for n in (4, 6, 8)]
    assert min(bus[0], bus[2]) <= bus[1] <= max(bus[0], bus[2])
    t16, ev16 = collective_lookup("B200", "all_reduce", int(b[15]), 16)
    assert ev16.kind == "extrapolated" and ev16.distance == pytest.approx(log2(16 / 8))
    assert collective_lookup("B200", "all_reduce", 1e6, 1)[0] == 0.0
    with pytest.raises(ValueError, match="collective 'broadcast'"):
        collective_lookup("B200", "broadcast", 1e6, 8)


def test_evidence_kinds_are_checked():
    with pytest.raises(ValueError, match="evidence kind"):
        Evidence("guessed")
    assert Evidence("fitted", note="x").kind == "fitted"


def test_heldout_interpolation_error_on_a_slice():
    """The component benchmark's held-out rule (every other k removed, predicted from the rest) on the
    default (trtllm) tables of one system per generation: mean |err| under 5% per dtype. The
    benchmark's vectorised prediction is the package's interpolation on the reduced grid."""
    from benchmarks.component_tables import gemm_heldout, held_positions

    files = [
        "gemm_a100_sxm_trtllm_1.0.0.npz",
        "gemm_h100_sxm_trtllm_1.3.0rc20.npz",
        "gemm_b200_sxm_trtllm_1.3.0rc20.npz",
    ]
    rows = gemm_heldout(files)
    assert len(rows) == 1 + 3 + 4
    for r in rows:
        assert r["err"].size > 1000
        assert np.abs(r["err"]).mean() < 0.05, (r["system"], r["what"], np.abs(r["err"]).mean())
    z = load(files[2])
    k = z["bfloat16.k"]
    keep = [j for j in range(len(k)) if j not in held_positions(len(k))]
    axes = [np.log(z["bfloat16.m"].astype(float)), np.log(z["bfloat16.n"].astype(float)), np.log(k[keep].astype(float))]
    reduced = np.log(z["bfloat16.lat_ms"].astype(float))[:, :, keep]
    v, _, exact, _ = interpolate(axes, reduced, (axes[0][30], axes[1][5], float(np.log(k[7]))))
    w = (float(k[7]) - float(k[6])) / (float(k[8]) - float(k[6]))  # GEMM time affine in k (grid.AFFINE)
    lo, hi = z["bfloat16.lat_ms"][30, 5, [6, 8]].astype(float)
    p = (1 - w) * lo + w * hi
    assert not exact and np.exp(v) == pytest.approx(p, rel=1e-9)


def test_manifest_is_json_the_package_ships():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert "physics/tables/data/*.npz" in text and "physics/tables/data/manifest.json" in text
    assert 'tables = ["pyarrow' in text
    json.loads((DATA / "manifest.json").read_text())


def test_attention_reads_measured_points_and_says_what_stood_in():
    choice = table_for("H100-SXM5-80GB", "attention")
    z = load(choice.file)
    cfg, lat, fill = z["cfg"], z["lat_ms"], z["fill"]
    i = next(i for i, r in enumerate(cfg) if tuple(r) == (0, 128, 0, 32, 8))
    bi, si = 0, int(np.nonzero(z["isl"] == 4096)[0][0])
    assert fill[i, bi, si] == 0
    t, ev = attention_lookup("H100-SXM5-80GB", "bf16", int(z["batch"][bi]), 4096, 32, 8, 128)
    assert ev.kind == "measured" and t == pytest.approx(float(lat[i, bi, si]) * 1e-3, rel=1e-6)
    mid = int(sqrt(4096 * int(z["isl"][si + 1])))
    t2, ev2 = attention_lookup("H100-SXM5-80GB", "bf16", int(z["batch"][bi]), mid, 32, 8, 128)
    assert ev2.kind == "interpolated" and t < t2 < float(lat[i, bi, si + 1]) * 1e-3
    # isl beyond the table: causal attention grows as isl^2
    top = int(z["isl"][-1])
    edge, _ = attention_lookup("H100-SXM5-80GB", "bf16", 1, top, 32, 8, 128)
    t3, ev3 = attention_lookup("H100-SXM5-80GB", "bf16", 1, 2 * top, 32, 8, 128)
    assert ev3.kind == "extrapolated" and ev3.distance == pytest.approx(1.0) and t3 == pytest.approx(4 * edge)
    _, ev4 = attention_lookup("H100-SXM5-80GB", "bf16", 1, 4096, 28, 4, 128)
    assert "GQA group" in ev4.note and ev4.kind == "interpolated"
    _, ev5 = attention_lookup("H100-SXM5-80GB", "bf16", 1, 4096, 128, 128, 128)
    assert ev5.kind == "extrapolated" and "heads" in ev5.note
    t6, ev6 = attention_lookup(load_cluster("a100-40g").device, "bf16", 1, 4096, 32, 8, 128)
    assert t6 is None and ev6.kind == "assumed"


def test_moe_reads_measured_configs_and_scales_a_stand_in():
    choice = table_for("B200", "moe")
    z = load(choice.file)
    cfg, lat, tok = z["cfg"], z["lat_ms"], z["tokens"]
    i = next(i for i, r in enumerate(cfg) if tuple(r) == (2, 1, 7168, 2048, 8, 256, 1, 8))  # DeepSeek-V3, EP 8
    t, ev = moe_lookup("B200", "fp8_block", int(tok[20]), 7168, 2048, 8, 256, 1, 8)
    assert ev.kind == "measured" and t == pytest.approx(float(lat[i, 20]) * 1e-3, rel=1e-6)
    mid = int(sqrt(tok[20] * tok[21]))
    t2, ev2 = moe_lookup("B200", "fp8_block", mid, 7168, 2048, 8, 256, 1, 8)
    assert ev2.kind == "interpolated" and min(lat[i, 20], lat[i, 21]) * 1e-3 <= t2 <= max(lat[i, 20], lat[i, 21]) * 1e-3
    # a configuration nobody measured: the nearest one, scaled by per-rank expert FLOPs, and said so
    t4, ev4 = moe_lookup("B200", "fp8_block", int(tok[20]), 7000, 2000, 8, 256, 1, 8)
    assert ev4.kind == "extrapolated" and "stands in" in ev4.note and ev4.distance > 0
    assert t4 == pytest.approx(t * (7000 * 2000) / (7168 * 2048), rel=1e-6)
    t5, ev5 = moe_lookup(load_cluster("a100-40g").device, "bf16", 1024, 4096, 14336, 2, 8)
    assert t5 is None and ev5.kind == "assumed"
    _, ev6 = moe_lookup("A100-SXM4-80GB", "bf16", 1024, 4096, 14336, 2, 8)
    assert "power_law_1.01" in ev6.note
    with pytest.raises(ValueError, match="MoE shape"):
        moe_lookup("B200", "bf16", 1024, 4096, 14336, 2, 8, ep=3)
