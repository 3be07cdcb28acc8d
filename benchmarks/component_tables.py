"""The measured tables against held-out table points and against the component rows (issue 38).

    python -m benchmarks.component_tables [--check]

Held-out rule (stated before any result was looked at):
- GEMM: in every kept GEMM table (system x backend) and dtype, the k values at the odd positions of
  the table's k axis, except the last value, are removed from the grid; every removed (m, n, k) point
  that was measured (not a grid hole filled at conversion, and with both k-neighbours measured) is
  predicted from the remaining grid by the package's interpolation (``costmodel.physics.tables.grid``
  with the table's scheme, m and n being grid points; until 2026-12-05 log latency linear in log k,
  benchmarks/notes/2026-12-05-table-interpolation.md).
- NCCL: in every NCCL table, op, dtype and GPU count, the message sizes at the odd positions except
  the last are removed and predicted from their neighbours the same way.
- MLA decode attention (added with the MLA tables, 2026-12-06, same rule): in every table and configuration,
  the context values at the odd positions except the last, predicted from their neighbours.
- Serving engines' TP all-reduce (added with the engine all-reduce tables, 2026-12-06, same rule): in every
  engine table, mode (CUDA graph, eager) and GPU count, the message sizes at the odd positions except the last.
- Context attention (added with the attention tables, same rule): in every configuration of every
  table, the isl values at the odd positions except the last, predicted from their neighbours.
- MoE layers (added with the MoE tables, same rule): the num_tokens values at the odd positions
  except the last, per configuration. (kernels.csv's DeepGEMM grouped-GEMM rows time one grouped
  GEMM, not a routed MoE layer: not compared.)
Error = predicted / measured - 1; mean |err|, signed mean and the 95th percentile of |err| per GPU
generation (Ampere: a100_sxm; Hopper: h100_sxm, h200_sxm; Blackwell: b200_sxm, b300_sxm, gb200,
gb300) and per dtype (GEMM) or op (NCCL). Target (issue 38): mean |err| <= 5% per generation.

Rows measured elsewhere, predicted from the tables:
- ``benchmarks/data/components/kernels.csv`` GEMM rows (``benchmarks.component_tables_rows``; reported per
  protocol group: what the row times beside the table's GEMM; time = 2 m n k / measured FLOP/s), each read
  from the table whose kernel library is the row's (vLLM's benchmark: vllm; DeepGEMM: sglang, whose
  fp8_block kernel is DeepGEMM; cuBLAS and torch.matmul: trtllm, whose torch_flow is cuBLAS). Devices
  without a table are read from a stated stand-in (A100 40 GB: the A100 80 GB table; H100 500 W:
  H100 SXM; H800: H100 SXM, same SMs and clocks) and reported apart.
- kernels.csv causal forward attention rows (H100: FlashAttention-3, FlashAttention-2, cuDNN; FLOPs
  ``4 b s^2 h d / 2``) against the TensorRT-LLM context-attention table (a different kernel: the
  figure says how far the table's kernel is from each).
- ``benchmarks/data/components/collectives.csv`` NCCL rows inside one node (nodes = 1; DeepEP rows and
  devices without a table left out), converted to seconds by ``component_collectives.measured_s``.

The backward rule (``costmodel.physics.tables.gemm``: dgrad and wgrad read at their own shapes in the
forward table): kernels.csv holds no backward GEMM row to check it against, so the tables check the
simpler rule it replaces: across every grid triple with all three dimensions >= 1024 on all three
axes (measured points only), ``(t_dgrad + t_wgrad) / (2 t_fwd) - 1`` per generation and dtype.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from benchmarks import results_io
from benchmarks.component_tables_rows import (
    COLLECTIVE_PROTOCOLS,
    GENERATION,
    PROTOCOLS,
    attention_rows,
    collective_rows,
    kernel_rows,
)
from costmodel.physics.tables import attention as attention_tables
from costmodel.physics.tables import collectives as nccl_tables
from costmodel.physics.tables import gemm as gemm_tables
from costmodel.physics.tables import mla as mla_tables
from costmodel.physics.tables import moe as moe_tables
from costmodel.physics.tables.grid import interp_1d
from costmodel.physics.tables.store import load, manifest

GENS = ("Ampere", "Hopper", "Blackwell")
LIMIT = 0.05
BIG_MS = 0.1  # a breakdown (not the rule): held-out points whose measured time is at least 100 us


def held_positions(n: int) -> list[int]:
    """Odd positions of an axis of ``n`` values, the last excluded (the held-out rule)."""
    return [j for j in range(1, n - 1, 2)]


def heldout_1d(logx: np.ndarray, lat: np.ndarray, ok: np.ndarray, axis: int, scheme):
    """Predictions of the held-out positions along ``axis`` of ``lat`` from the remaining grid by the
    package's 1-D interpolation (``costmodel.physics.tables.grid.interp_1d`` with the op's ``scheme``);
    returns (predicted, measured) of the points ``ok`` allows (the point and both neighbours)."""
    n = lat.shape[axis]
    held = held_positions(n)
    keep = [j for j in range(n) if j not in set(held)]
    lat_m, ok_m = np.moveaxis(lat, axis, -1), np.moveaxis(ok, axis, -1)
    kept_x, kept_log = logx[keep], np.log(lat_m[..., keep])
    preds, meas = [], []
    for j in held:
        good = ok_m[..., j - 1] & ok_m[..., j] & ok_m[..., j + 1]
        p = np.exp(interp_1d(kept_x, kept_log, float(logx[j]), scheme))
        preds.append(p[good])
        meas.append(lat_m[..., j][good])
    return np.concatenate(preds), np.concatenate(meas)


def gemm_heldout(files: list[str] | None = None) -> list[dict]:
    """One row per (file, dtype): system, backend, dtype and the error arrays' summary."""
    out = []
    for f, e in sorted(manifest()["files"].items()):
        if e["op"] != "gemm" or (files is not None and f not in files):
            continue
        z = load(f)
        for dt in e["dtypes"]:
            k = z[f"{dt}.k"].astype(float)
            lat, ok = z[f"{dt}.lat_ms"].astype(float), z[f"{dt}.fill"] == 0
            p, m = heldout_1d(np.log(k), lat, ok, axis=2, scheme=gemm_tables.schemes(dt)[2])
            out.append({"system": e["system"], "backend": e["backend"], "what": dt, "err": p / m - 1, "ms": m})
    return out


def grid_heldout(op: str, axis: str, scheme, what) -> list[dict]:
    """In every table of ``op`` and configuration, the ``axis`` values (the grid's last axis) at odd positions
    except the last are removed and predicted from their neighbours (measured points only); ``what(entry)``
    names the row group."""
    out = []
    for f, e in sorted(manifest()["files"].items()):
        if e["op"] != op:
            continue
        z = load(f)
        lat, ok = z["lat_ms"].astype(float), z["fill"] == 0
        p, m = heldout_1d(np.log(z[axis].astype(float)), lat, ok, axis=2, scheme=scheme)
        out.append({"system": e["system"], "backend": e["backend"], "what": what(e), "err": p / m - 1, "ms": m})
    return out


def attention_heldout() -> list[dict]:
    """Context attention: the isl values, per table and configuration (:func:`grid_heldout`)."""
    return grid_heldout("attention", "isl", attention_tables.SCHEMES[1], lambda e: "context fwd")


def mla_heldout() -> list[dict]:
    """MLA decode attention: the context values, per table and configuration (:func:`grid_heldout`)."""
    return grid_heldout("mla", "ctx", mla_tables.SCHEMES[1], lambda e: f"{e['backend']} mla decode")


def moe_heldout() -> list[dict]:
    """MoE: in every table and configuration, the num_tokens values at odd positions except the last,
    predicted from their neighbours (measured points only) by the package's look-up along num_tokens
    (``moe.interp_tokens``: affine in the timed rank's load under the table's token distribution)."""
    out = []
    for f, e in sorted(manifest()["files"].items()):
        if e["op"] != "moe":
            continue
        z = load(f)
        cfg, tok = z["cfg"], z["tokens"]
        lat, ok = z["lat_ms"].astype(float), z["fill"] == 0
        dist = e["moe"]["distribution"]
        held = held_positions(len(tok))
        keep = [j for j in range(len(tok)) if j not in set(held)]
        preds, meas = [], []
        for i, (code, _, _, _, topk, experts, _, ep) in enumerate(cfg.tolist()):
            ridge = moe_tables.ridge_tokens(e["system"], code)
            for j in held:
                if ok[i, j - 1] and ok[i, j] and ok[i, j + 1]:
                    p = moe_tables.interp_tokens(tok[keep], lat[i, keep], int(tok[j]), experts, topk, ep, dist, ridge)
                    preds.append(p[0])
                    meas.append(lat[i, j])
        p, m = np.array(preds), np.array(meas)
        out.append({"system": e["system"], "backend": e["backend"], "what": "moe layer", "err": p / m - 1, "ms": m})
    return out


def nccl_heldout(op: str = "nccl") -> list[dict]:
    """Held-out message sizes of the NCCL tables (``op="nccl"``, "what" = the collective) or of the serving
    engines' all-reduce tables (``op="allreduce"``, "what" = the engine and its mode)."""
    out = []
    for f, e in sorted(manifest()["files"].items()):
        if e["op"] != op:
            continue
        z = load(f)
        for key in sorted(k[: -len(".bytes")] for k in z if k.endswith(".bytes")):
            b, lat = z[key + ".bytes"].astype(float), z[key + ".lat_ms"].astype(float)
            p, m = heldout_1d(np.log(b), lat, np.ones_like(lat, dtype=bool), axis=0, scheme=nccl_tables.SCHEME)
            out.append(
                {
                    "system": e["system"],
                    "backend": e["backend_version"],
                    "what": key.split(".")[0] if op == "nccl" else f"{e['backend']} {key.split('.')[1]}",
                    "err": p / m - 1,
                    "ms": m,
                }
            )
    return out


def backward_rule(min_dim: int = 1024) -> list[dict]:
    """How far "backward = 2x forward" is from reading the backward GEMMs at their own shapes: for
    every grid triple (a, b, c) of values on all three axes (all >= ``min_dim``, none a filled hole)
    of the default (trtllm) tables, ``(t(a, c, b) + t(c, b, a)) / (2 t(a, b, c)) - 1``, all measured."""
    out = []
    for f, e in sorted(manifest()["files"].items()):
        if e["op"] != "gemm" or e["backend"] != "trtllm":
            continue
        z = load(f)
        for dt in e["dtypes"]:
            ax = [z[f"{dt}.{c}"] for c in "mnk"]
            lat, fill = z[f"{dt}.lat_ms"].astype(float), z[f"{dt}.fill"]
            pos = [{int(v): i for i, v in enumerate(a)} for a in ax]
            common = sorted(v for v in set(pos[0]) & set(pos[1]) & set(pos[2]) if v >= min_dim)
            err = []
            for a in common:
                for b in common:
                    for c in common:
                        idx = [
                            (pos[0][a], pos[1][b], pos[2][c]),
                            (pos[0][a], pos[1][c], pos[2][b]),
                            (pos[0][c], pos[1][b], pos[2][a]),
                        ]
                        if all(fill[i] == 0 for i in idx):
                            err.append((lat[idx[1]] + lat[idx[2]]) / (2 * lat[idx[0]]) - 1)
            out.append({"system": e["system"], "backend": "trtllm", "what": dt, "err": np.array(err)})
    return out


def stats(err: np.ndarray) -> dict:
    a = np.abs(err)
    return {
        "points": int(err.size),
        "mean |err| %": results_io.pct(float(a.mean())),
        "signed %": results_io.pct(float(err.mean())),
        "p95 |err| %": results_io.pct(float(np.percentile(a, 95))),
    }


def summarise(rows: list[dict], kind: str) -> tuple[list[dict], dict[str, float]]:
    """Table rows per (generation, dtype/op) and per generation; {generation: mean |err|}."""
    table, gen_mean = [], {}
    for g in GENS:
        mine = [r for r in rows if GENERATION[r["system"]] == g]
        if not mine:
            continue
        for w in sorted({r["what"] for r in mine}):
            err = np.concatenate([r["err"] for r in mine if r["what"] == w])
            table.append({"set": f"{kind} held-out", "generation": g, "dtype/op": w, **stats(err)})
        err = np.concatenate([r["err"] for r in mine])
        table.append({"set": f"{kind} held-out", "generation": g, "dtype/op": "all", **stats(err)})
        gen_mean[g] = float(np.abs(err).mean())
        if kind == "GEMM":  # a breakdown (not the rule): the backends' tables scatter differently
            for b in sorted({r["backend"] for r in mine}):
                e = np.concatenate([r["err"] for r in mine if r["backend"] == b])
                table.append({"set": f"{kind} held-out, {b} tables", "generation": g, "dtype/op": "all", **stats(e)})
        if "ms" not in mine[0]:
            continue
        big = np.concatenate([r["err"][r["ms"] >= BIG_MS] for r in mine])
        table.append(
            {"set": f"{kind} held-out, measured >= {BIG_MS} ms", "generation": g, "dtype/op": "all", **stats(big)}
        )
    return table, gen_mean


def row_summary(rows: list[dict], label: str) -> list[dict]:
    out = []
    for g in GENS:
        e = [r["err %"] / 100 for r in rows if r["generation"] == g and r["err %"] is not None]
        if e:
            out.append(
                {
                    "set": label,
                    "generation": g,
                    "dtype/op": "all",
                    "points": len(e),
                    "mean |err| %": results_io.pct(statistics.mean(map(abs, e))),
                    "signed %": results_io.pct(statistics.mean(e)),
                    "p95 |err| %": None,
                }
            )
    return out


def main(argv: list[str] | None = None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a generation's held-out mean |err| > 5%%")
    args = ap.parse_args(argv)
    g_table, g_mean = summarise(gemm_heldout(), "GEMM")
    n_table, n_mean = summarise(nccl_heldout(), "NCCL")
    r_table, r_mean = summarise(nccl_heldout("allreduce"), "engine all-reduce")
    a_table, a_mean = summarise(attention_heldout(), "attention")
    l_table, l_mean = summarise(mla_heldout(), "MLA decode")
    m_table, m_mean = summarise(moe_heldout(), "MoE")
    arows = attention_rows()
    krows, crows = kernel_rows(), collective_rows()
    k_table = []
    for own in (True, False):
        which = "own table" if own else "stand-in table"
        mine = [r for r in krows if r["own table"] == own]
        k_table += row_summary(mine, f"kernels.csv GEMM ({which})")
        for p in PROTOCOLS:
            k_table += row_summary([r for r in mine if r["protocol"] == p], f"kernels.csv GEMM {p} ({which})")
    c_table = row_summary(crows, "collectives.csv intra-node")
    for p in COLLECTIVE_PROTOCOLS:
        c_table += row_summary([r for r in crows if r["protocol"] == p], f"collectives.csv intra-node, {p}")
    for impl in sorted({r["impl"] for r in arows}):
        c_table += row_summary([r for r in arows if r["impl"] == impl], f"kernels.csv causal attention fwd, {impl}")
    b_rows = backward_rule()
    b_table = [
        {**r, "set": "backward (dgrad+wgrad)/(2 fwd) - 1, dims >= 1024"}
        for r in summarise(b_rows, "backward")[0]
        if "measured >=" not in r["set"]
    ]
    table = g_table + n_table + r_table + a_table + l_table + m_table + k_table + c_table + b_table
    for r in table:
        print(
            f"{r['set']:36s} {r['generation']:9s} {r['dtype/op']:15s} n={r['points']:7d} "
            f"mean|err| {r['mean |err| %']:6.2f}%  signed {r['signed %']:+6.2f}%"
            + (f"  p95 {r['p95 |err| %']:6.2f}%" if r["p95 |err| %"] is not None else "")
        )
    print("\nkernels.csv GEMM rows:")
    for r in krows:
        print(
            f"  {r['row']:4d} {r['device']:16s} {r['dtype']:9s} {r['shape']:18s} meas {r['measured_us']:10.2f} us "
            f"table {r['table_us']} us  err {r['err %']}%  [{r['evidence']}] {r['protocol']}; {r['note']}"
        )
    print("\ncollectives.csv intra-node rows:")
    for r in crows:
        print(
            f"  {r['row']:>4s} {r['source']:16s} {r['op']:13s} {r['bytes']:>12.0f} B  meas {r['measured_us']:10.1f} us "
            f"table {r['table_us']} us  err {r['err %']}%  [{r['evidence']}] {r['note']}"
        )
    print("\nkernels.csv causal attention forward rows:")
    for r in arows:
        print(
            f"  {r['row']:4d} {r['impl']:28s} {r['shape']:22s} meas {r['measured_us']:9.1f} us table {r['table_us']} us  err {r['err %']}%  [{r['evidence']}] {r['note']}"
        )
    met = {
        g: v <= LIMIT
        for g, v in {
            **{f"GEMM {k}": v for k, v in g_mean.items()},
            **{f"NCCL {k}": v for k, v in n_mean.items()},
            **{f"engine all-reduce {k}": v for k, v in r_mean.items()},
            **{f"attention {k}": v for k, v in a_mean.items()},
            **{f"MLA decode {k}": v for k, v in l_mean.items()},
            **{f"MoE {k}": v for k, v in m_mean.items()},
        }.items()
    }
    head = {f"GEMM held-out {g} mean |err| %": results_io.pct(v) for g, v in g_mean.items()}
    head.update({f"NCCL held-out {g} mean |err| %": results_io.pct(v) for g, v in n_mean.items()})
    head.update({f"engine all-reduce held-out {g} mean |err| %": results_io.pct(v) for g, v in r_mean.items()})
    head.update({f"attention held-out {g} mean |err| %": results_io.pct(v) for g, v in a_mean.items()})
    head.update({f"MLA decode held-out {g} mean |err| %": results_io.pct(v) for g, v in l_mean.items()})
    head.update({f"MoE held-out {g} mean |err| %": results_io.pct(v) for g, v in m_mean.items()})
    for r in b_table:
        if r["dtype/op"] == "all":
            head[f"backward vs 2x forward {r['generation']} mean |diff| %"] = r["mean |err| %"]
    for r in k_table + c_table:
        head[f"{r['set']} {r['generation']} mean |err| %"] = r["mean |err| %"]
    results_io.record(
        "component_tables",
        argv,
        enabled=record_results,
        title="measured tables (AIConfigurator 095f58a): held-out table points and component rows",
        headline=head,
        table=[r for r in table if r["dtype/op"] == "all"] + [r for r in table if r["dtype/op"] != "all"],
        targets=[{"name": f"{k} held-out mean |err| <= 5%", "met": v} for k, v in met.items()],
        inputs=[
            "costmodel/physics/tables",
            "benchmarks/component_tables.py",
            "benchmarks/data/components/kernels.csv",
            "benchmarks/data/components/collectives.csv",
        ],
    )
    if args.check:
        return 0 if all(met.values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
