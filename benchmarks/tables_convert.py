"""Convert AIConfigurator's measured per-operation tables into the compact files of
``costmodel/physics/tables/data/`` (issue 38).

    python -m benchmarks.tables_convert --aic /work/.mirror/ai-dynamo+aiconfigurator/repo [--date YYYY-MM-DD]

Source: ``ai-dynamo/aiconfigurator`` (Apache-2.0), snapshot 095f58a (2026-08-21), tables under
``aic-core/src/aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/``. The repository
is read through ``git show`` (a bare mirror needs no work tree). Needs pyarrow (``pip install
.[tables]``); the package reads the output with numpy alone. ``systems/silicon_sample.csv`` is never
read.

Units, from the collector code at that commit:
- GEMM ``latency`` is milliseconds: ``collector/trtllm/collect_gemm.py`` logs
  ``results["latency_ms"] / outside_loop_count`` (the same key in the vLLM and SGLang collectors).
- NCCL ``latency`` is milliseconds and ``message_size`` counts ELEMENTS:
  ``collector/network/collect_nccl.py`` runs nccl-tests with ``-b size -e size`` (bytes), reads the
  out-of-place time column (us) ``* 1e-3  # us to ms`` and logs ``message_size = size //
  bytes_per_element`` (2 for ``half``, 1 for ``int8``). The files here store bytes (nccl-tests'
  ``size``: the per-GPU buffer, all-gather output, reduce-scatter input), i.e. elements times 2 or 1.

What is kept (size: the installed data stays under about 10 MB): GEMM, for each system, the newest
collected version of each backend (trtllm, vllm, sglang); older collected versions are listed in
the manifest as ``dropped`` and a lookup naming one gets the nearest kept version with a note;
``reuse.yaml`` versions become aliases of their donor. NCCL: every version. Context (prefill)
attention (``context_attention_perf``, latency in ms: ``collector/trtllm/collect_attn.py`` logs
``results["latency_ms"]``): the newest TensorRT-LLM collection only, rows whose KV-cache dtype equals
the attention dtype. MoE layers (``moe_perf``, ms, ``collector/trtllm/collect_moe.py``): the newest
full TensorRT-LLM collection (a partial top-up that also declares reuse.yaml is passed over), the
balanced distribution (power_law_1.01 on A100, which has none), no min-latency kernels, float16. The serving
engines' own TP all-reduce (``comm/<engine>/<version>/custom_allreduce_perf``: vLLM's and SGLang's
``tensor_model_parallel_all_reduce``, SGLang's custom all-reduce on, and TensorRT-LLM's ``AllReduce`` with strategy
AUTO, replayed 5 at a time in a CUDA graph, vLLM and SGLang also eagerly; ``collector/network/collect_all_reduce.py``,
whose ``message_size`` counts bf16 ELEMENTS and whose ``latency`` is ms per call): the newest version of each
engine whose rows are its own kernel (SGLang 0.5.6.post2 on H100/H200 holds ``TRTLLM`` rows: passed over), bytes
per series ``all_reduce.<graph|eager>.<GPUs>``. MLA decode attention (``mla/<engine>/<version>/
generation_mla_perf``: the engine's MLA generation kernel, one new token per sequence; ``collector/trtllm/
collect_mla.py``, ``collector/sglang/collect_mla.py``, ms): the newest TensorRT-LLM and SGLang collections (vLLM
measured the MLA module, projections included, not the kernel), one (batch x context) grid per (KV-cache dtype,
local heads), context = ``isl + step``. Grid holes (shapes a
collection did not measure, mostly the largest m x n x k) are filled by constant throughput from the
nearest measured neighbour along the grid and flagged (``<dtype>.fill`` > 0: tenths of log2 units to
the donor), so a look-up touching one is never called "measured". Duplicated rows (some NCCL files
hold two collections) keep the last row, as a dictionary built row by row would.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "costmodel" / "physics" / "tables" / "data"
SRC = "aic-core/src/aiconfigurator_core/systems/data"
COMMIT = "095f58a"
SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
GEMM_DTYPES = ("bfloat16", "fp8", "fp8_block", "nvfp4")
NCCL_OPS = ("all_gather", "all_reduce", "reduce_scatter", "alltoall")
NCCL_BYTES = {"half": 2, "int8": 1}
#: engine all-reduce kernel sources -> series mode (CUDA-graph replay or eager calls) and the engine they belong to
ALLREDUCE_SOURCES = {
    "TRTLLM": ("graph", "trtllm"),
    "vLLM_custom_graph": ("graph", "vllm"),
    "vLLM_custom_eager": ("eager", "vllm"),
    "SGLang_CustomAllReduce_graph": ("graph", "sglang"),
    "SGLang_CustomAllReduce_eager": ("eager", "sglang"),
}


def version_key(v: str) -> tuple:
    """Order versions: numbers compare as numbers; a pre-release (``rc``, ``post`` aside) sorts before
    its release (``1.3.0rc20 < 1.3.0``)."""
    parts = []
    for tok in re.findall(r"\d+|[a-z]+", v.lower()):
        if tok.isdigit():
            parts.append((1, int(tok)))
        elif tok in ("rc", "a", "b", "dev"):
            parts.append((0, tok))
        else:  # post
            parts.append((2, tok))
    return (*parts, (1, 0))


def git_show(repo: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True, check=True).stdout


def ls_tables(repo: str) -> list[str]:
    out = subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD", SRC], capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.split() if "silicon_sample" not in p]


def zip_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An ``.npz`` numpy can load, byte-identical for identical arrays (fixed zip timestamps)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            b = io.BytesIO()
            np.lib.format.write_array(b, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, b.getvalue(), compresslevel=9)
    path.write_bytes(buf.getvalue())


def fill_holes(lat: np.ndarray, axes: list[np.ndarray], powers: tuple | None = None) -> np.ndarray:
    """Fill NaN cells of ``lat`` in place by constant throughput from a filled neighbour one grid step
    away (latency proportional to ``x ** power`` along each axis: m, n, k of a GEMM with power 1;
    a causal attention's sequence length with power 2), sweeping until none is left; returns the
    distance to the measured donor in tenths of log2 units (0: measured)."""
    powers = powers or (1,) * lat.ndim
    dist = np.where(np.isnan(lat), np.inf, 0.0)
    logs = [np.log2(a.astype(float)) for a in axes]
    while np.isinf(dist).any():
        progressed = False
        for ax in range(lat.ndim):
            for step in (1, -1):
                src = np.roll(lat, step, axis=ax)
                sd = np.roll(dist, step, axis=ax)
                lg = logs[ax]
                dlog = lg - np.roll(lg, step)  # log2 of (target / donor) along this axis
                shape = [1] * lat.ndim
                shape[ax] = len(lg)
                dlog = dlog.reshape(shape)
                ok = np.isinf(dist) & np.isfinite(sd)
                edge = [slice(None)] * lat.ndim
                edge[ax] = 0 if step == 1 else -1  # np.roll wraps: the first (last) cell has no donor
                ok[tuple(edge)] = False
                if ok.any():
                    lat[ok] = (src * np.exp2(powers[ax] * dlog))[ok]
                    dist[ok] = (sd + np.abs(dlog))[ok]
                    progressed = True
        if not progressed:
            raise ValueError("grid has no measured point to fill from")
    return np.minimum(np.ceil(dist * 10), 255).astype(np.uint8)


def gemm_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    arrays, info = {}, {}
    for dt in GEMM_DTYPES:
        s = df[df.gemm_dtype == dt]
        if s.empty:
            continue
        s = s.drop_duplicates(["m", "n", "k"], keep="last")
        axes = [np.array(sorted(s[c].unique()), dtype=np.int64) for c in "mnk"]
        lat = np.full([len(a) for a in axes], np.nan)
        idx = [np.searchsorted(a, s[c].to_numpy()) for a, c in zip(axes, "mnk")]
        lat[tuple(idx)] = s.latency.to_numpy(dtype=float)
        holes = int(np.isnan(lat).sum())
        fill = fill_holes(lat, axes)
        for c, a in zip("mnk", axes):
            arrays[f"{dt}.{c}"] = a.astype(np.int32)
        arrays[f"{dt}.lat_ms"] = lat.astype(np.float32)
        arrays[f"{dt}.fill"] = fill
        info[dt] = {
            "points": int(len(s)),
            "grid": [len(a) for a in axes],
            "holes_filled": holes,
            "kernel_source": sorted(s.kernel_source.unique().tolist()),
        }
    return arrays, info


ATTN_DTYPES = {"bfloat16": 0, "fp8": 1}
ATTN_CFG = ("dtype", "head_dim", "window", "heads", "kv_heads")


def config_grids(df, keys: list[str], codes: dict, x: str, power=lambda key: 1):
    """One (batch x ``x``) latency grid per configuration ``keys`` (the first a dtype column, coded by ``codes``),
    holes filled along batch (time proportional) and ``x`` (time proportional to ``x ** power(key)``): returns
    ``(arrays, groups, holes)`` with ``arrays`` = cfg, batch, ``x``, lat_ms (float32), fill."""
    b_ax = np.array(sorted(df.batch_size.unique()), dtype=np.int64)
    x_ax = np.array(sorted(df[x].unique()), dtype=np.int64)
    groups = sorted(df.groupby(keys), key=lambda kv: (codes[kv[0][0]], *kv[0][1:]))
    cfg = np.array([[codes[k[0]], *k[1:]] for k, _ in groups], dtype=np.int32)
    lat = np.full((len(groups), len(b_ax), len(x_ax)), np.nan)
    fill = np.zeros(lat.shape, dtype=np.uint8)
    holes = 0
    for i, (k, g) in enumerate(groups):
        lat[i, np.searchsorted(b_ax, g.batch_size.to_numpy()), np.searchsorted(x_ax, g[x].to_numpy())] = (
            g.latency.to_numpy(float)
        )
        holes += int(np.isnan(lat[i]).sum())
        fill[i] = fill_holes(lat[i], [b_ax, x_ax], (1, power(k)))
    arrays = {"cfg": cfg, "batch": b_ax.astype(np.int32), x: x_ax.astype(np.int32), "lat_ms": lat.astype(np.float32)}
    return {**arrays, "fill": fill}, len(groups), holes


def attention_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    """Context (prefill) attention: one (batch x isl) grid per configuration (dtype code, head_dim,
    window, heads, kv_heads); rows whose KV-cache dtype differs from the attention dtype (a serving
    choice) are left out. Holes are filled along batch (time proportional to batch) and isl (to
    isl squared without a window, to isl with one)."""
    if "window_size" not in df.columns:  # older collections: no sliding window
        df = df.assign(window_size=0)
    df = df[(df.attn_dtype == df.kv_cache_dtype) & df.attn_dtype.isin(list(ATTN_DTYPES))]
    df = df.drop_duplicates(
        ["attn_dtype", "head_dim", "window_size", "num_heads", "num_key_value_heads", "batch_size", "isl"], keep="last"
    )
    keys = ["attn_dtype", "head_dim", "window_size", "num_heads", "num_key_value_heads"]
    arrays, configs, holes = config_grids(df, keys, ATTN_DTYPES, "isl", lambda k: 2 if k[2] == 0 else 1)
    info = {
        "cfg_columns": list(ATTN_CFG),
        "dtype_codes": ATTN_DTYPES,
        "configs": configs,
        "points": int(len(df)),
        "holes_filled": holes,
        "kernel_source": sorted(df.kernel_source.unique().tolist()),
        "left_out": "rows whose kv_cache_dtype differs from attn_dtype",
    }
    return arrays, info


MOE_DTYPES = {"bfloat16": 0, "fp8": 1, "fp8_block": 2, "nvfp4": 3, "w4a16_mxfp4": 4, "w4a8_mxfp4_mxfp8": 5}
MOE_CFG = ("dtype", "gated", "hidden", "inter", "topk", "experts", "tp", "ep")


def moe_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    """MoE layers (grouped GEMMs with routing, one rank): one latency series over num_tokens per
    configuration (dtype code, gated, hidden, inter, topk, experts, moe_tp, moe_ep); the balanced
    token distribution only (power_law_1.01 where a collection has no balanced rows) and the
    min-latency (decode) kernels left out (size)."""
    dist = "balanced" if (df.distribution == "balanced").any() else "power_law_1.01"  # a100: no balanced rows
    df = df[(df.distribution == dist) & (df.kernel_source != "moe_torch_flow_min_latency")]
    df = df[df.moe_dtype.isin(list(MOE_DTYPES))].assign(
        gated=(df.kernel_source != "moe_torch_flow_nongated").astype(int)
    )
    keys = ["moe_dtype", "gated", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    df = df.drop_duplicates([*keys, "num_tokens"], keep="last")
    t_ax = np.array(sorted(df.num_tokens.unique()), dtype=np.int64)
    groups = sorted(df.groupby(keys), key=lambda kv: (MOE_DTYPES[kv[0][0]], *kv[0][1:]))
    cfg = np.array([[MOE_DTYPES[k[0]], *k[1:]] for k, _ in groups], dtype=np.int32)
    lat = np.full((len(groups), len(t_ax)), np.nan)
    fill = np.zeros(lat.shape, dtype=np.uint8)
    holes = 0
    for i, (_, g) in enumerate(groups):
        lat[i, np.searchsorted(t_ax, g.num_tokens.to_numpy())] = g.latency.to_numpy(float)
        holes += int(np.isnan(lat[i]).sum())
        fill[i] = fill_holes(lat[i], [t_ax])
    # float16 (relative rounding <= 2^-11, 0.05%) keeps the data under 10 MB
    arrays = {"cfg": cfg, "tokens": t_ax.astype(np.int32), "lat_ms": lat.astype(np.float16), "fill": fill}
    info = {
        "cfg_columns": list(MOE_CFG),
        "dtype_codes": MOE_DTYPES,
        "configs": len(groups),
        "points": int(len(df)),
        "holes_filled": holes,
        "kernel_source": sorted(df.kernel_source.unique().tolist()),
        "distribution": dist,
        "lat_ms_dtype": "float16 (relative rounding <= 0.05%)",
        "left_out": "the other token distributions; the min-latency kernels",
    }
    return arrays, info


def nccl_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    arrays, info = {}, {}
    df = df.drop_duplicates(["op_name", "nccl_dtype", "num_gpus", "message_size"], keep="last")
    for (op, dt, n), s in df.groupby(["op_name", "nccl_dtype", "num_gpus"], sort=True):
        s = s.sort_values("message_size")
        key = f"{op}.{dt}.{int(n)}"
        arrays[key + ".bytes"] = (s.message_size.to_numpy(dtype=np.int64) * NCCL_BYTES[dt]).astype(np.int64)
        arrays[key + ".lat_ms"] = s.latency.to_numpy(dtype=np.float32)
        info[key] = int(len(s))
    return arrays, info


MLA_KV = {"bfloat16": 0, "fp8": 1}
MLA_CFG = ("kv_dtype", "heads")


def mla_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    """MLA decode attention: one (batch x context) grid per (KV-cache dtype code, local heads); the
    collections' tp_size only labels how many heads a GPU holds, so rows are keyed by ``num_heads``. Holes are
    filled along batch and context (time proportional to each)."""
    df = df[(df.mla_dtype == "bfloat16") & df.kv_cache_dtype.isin(list(MLA_KV))].assign(ctx=df.isl + df.step)
    df = df.drop_duplicates(["kv_cache_dtype", "num_heads", "batch_size", "ctx"], keep="last")
    arrays, configs, holes = config_grids(df, ["kv_cache_dtype", "num_heads"], MLA_KV, "ctx")
    info = {
        "cfg_columns": list(MLA_CFG),
        "kv_dtype_codes": MLA_KV,
        "configs": configs,
        "points": int(len(df)),
        "holes_filled": holes,
        "kernel_source": sorted(df.kernel_source.unique().tolist()),
        "left_out": "mla_dtype other than bfloat16",
    }
    return arrays, info


def allreduce_arrays(df) -> tuple[dict[str, np.ndarray], dict]:
    """An engine's TP all-reduce: latency over message bytes per (mode, GPU count); ``message_size`` is bf16
    elements (the collector's ``get_input_shape_and_comm_size``), stored as bytes."""
    df = df[df.allreduce_dtype == "bfloat16"].assign(mode=df.kernel_source.map(lambda k: ALLREDUCE_SOURCES[k][0]))
    df = df.drop_duplicates(["mode", "num_gpus", "message_size"], keep="last")
    arrays, info = {}, {}
    for (mode, n), s in df.groupby(["mode", "num_gpus"], sort=True):
        s = s.sort_values("message_size")
        key = f"all_reduce.{mode}.{int(n)}"
        arrays[key + ".bytes"] = s.message_size.to_numpy(dtype=np.int64) * 2
        arrays[key + ".lat_ms"] = s.latency.to_numpy(dtype=np.float32)
        info[key] = int(len(s))
    return arrays, info


def allreduce_engine_ok(df, backend: str) -> bool:
    """Whether every row of an engine's all-reduce table is that engine's own kernel (module doc)."""
    return bool(len(df)) and all(ALLREDUCE_SOURCES.get(k, ("", ""))[1] == backend for k in df.kernel_source.unique())


def meta(repo: str, folder: str) -> dict:
    import yaml

    out = {}
    for name in ("collection_meta.yaml", "reuse.yaml"):
        try:
            out[name] = yaml.safe_load(git_show(repo, f"{folder}/{name}"))
        except subprocess.CalledProcessError:
            pass
    return out


def convert(repo: str, date: str) -> dict:
    import pandas as pd

    files = ls_tables(repo)
    tree: dict[tuple, dict] = {}  # (system, op, backend) -> {version: [file names]}
    for f in files:
        parts = f[len(SRC) + 1 :].split("/")
        if len(parts) != 5 or parts[0] not in SYSTEMS:
            continue
        system, op, backend, version, name = parts
        if (op, name) in (
            ("gemm", "gemm_perf.parquet"),
            ("gemm", "reuse.yaml"),
            ("attention", "context_attention_perf.parquet"),
            ("attention", "reuse.yaml"),
            ("moe", "moe_perf.parquet"),
            ("moe", "reuse.yaml"),
        ) or (op == "comm" and backend == "nccl" and name in ("nccl_perf.parquet", "reuse.yaml")):
            tree.setdefault((system, op, backend), {}).setdefault(version, []).append(name)
        elif op == "comm" and name == "custom_allreduce_perf.parquet":
            tree.setdefault((system, "allreduce", backend), {}).setdefault(version, []).append(name)
        elif op == "mla" and name == "generation_mla_perf.parquet" and backend in ("trtllm", "sglang"):
            tree.setdefault((system, "mla", backend), {}).setdefault(version, []).append(name)
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {
        "source": {
            "repo": "https://github.com/ai-dynamo/aiconfigurator",
            "commit": COMMIT,
            "commit_full": subprocess.run(
                ["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip(),
            "licence": "Apache-2.0",
            "path": SRC,
        },
        "converter": {"command": f"python -m benchmarks.tables_convert --aic {repo}", "date": date},
        "units": {
            "gemm": "lat_ms: milliseconds per GEMM",
            "nccl": "bytes: nccl-tests size; lat_ms: milliseconds",
            "allreduce": "bytes: the all-reduced buffer (bf16 elements x 2); lat_ms: milliseconds per call",
            "mla": "ctx: cached tokens (isl + step); lat_ms: milliseconds per MLA decode-attention call",
        },
        "files": {},
        "aliases": [],
        "dropped": [],
    }
    for (system, op, backend), versions in sorted(tree.items()):
        collected = sorted(
            (v for v, names in versions.items() if any(n.endswith(".parquet") for n in names)), key=version_key
        )
        if op == "moe":  # the newest full collection: a partial top-up also declares reuse.yaml
            full = [v for v in collected if "reuse.yaml" not in versions[v]]
            collected = full or collected
        if op == "allreduce":  # the newest version whose rows are the engine's own kernel
            own = [
                v
                for v in collected
                if allreduce_engine_ok(
                    pd.read_parquet(io.BytesIO(git_show(repo, f"{SRC}/{system}/comm/{backend}/{v}/{versions[v][0]}"))),
                    backend,
                )
            ]
            foreign = set(collected) - set(own)
            collected = own
        keep = collected if op == "comm" else collected[-1:]
        if op in ("attention", "moe") and backend != "trtllm":
            keep = []
        for v in sorted(versions, key=version_key):
            folder = f"{SRC}/{system}/{'comm' if op == 'allreduce' else op}/{backend}/{v}"
            m = {} if op in ("allreduce", "mla") else meta(repo, folder)
            if "reuse.yaml" in m:
                first = ((m["reuse.yaml"] or {}).get("reuse") or [{}])[0]
                manifest["aliases"].append(
                    {
                        "system": system,
                        "op": op if op in ("gemm", "attention", "moe") else "nccl",
                        "backend": backend,
                        "version": v,
                        "reuses": first.get("from_version"),
                        "collected_too": v in collected,
                        "source_path": f"{folder}/reuse.yaml",
                        "reason": " ".join(str(first.get("reason", "")).split())[:300],
                    }
                )
                if v not in collected:
                    continue
            if v not in keep:
                why = "size: only the newest collected version per backend is kept"
                if op in ("attention", "moe") and backend != "trtllm":
                    why = f"size: {op} is kept for TensorRT-LLM only"
                if op == "allreduce" and v in foreign:
                    why = "its rows name another engine's kernel"
                manifest["dropped"].append({"system": system, "op": op, "backend": backend, "version": v, "why": why})
                continue
            pq = {
                "gemm": "gemm_perf.parquet",
                "attention": "context_attention_perf.parquet",
                "moe": "moe_perf.parquet",
                "allreduce": "custom_allreduce_perf.parquet",
                "mla": "generation_mla_perf.parquet",
            }
            pq = pq.get(op, "nccl_perf.parquet")
            df = pd.read_parquet(io.BytesIO(git_show(repo, f"{folder}/{pq}")))
            if op == "moe":
                arrays, info = moe_arrays(df)
                name = f"moe_{system}_{backend}_{v}.npz"
                entry = {"op": "moe", "backend": backend, "backend_version": v, "moe": info}
            elif op == "attention":
                arrays, info = attention_arrays(df)
                name = f"attention_{system}_{backend}_{v}.npz"
                entry = {"op": "attention", "backend": backend, "backend_version": v, "context": info}
            elif op == "mla":
                arrays, info = mla_arrays(df)
                name = f"mla_{system}_{backend}_{v}.npz"
                entry = {"op": "mla", "backend": backend, "backend_version": v, "generation": info}
                m = meta(repo, folder)
            elif op == "allreduce":
                arrays, info = allreduce_arrays(df)
                name = f"allreduce_{system}_{backend}_{v}.npz"
                entry = {"op": "allreduce", "backend": backend, "backend_version": v, "series": info}
                m = meta(repo, folder)
            elif op == "gemm":
                arrays, info = gemm_arrays(df)
                name = f"gemm_{system}_{backend}_{v}.npz"
                entry = {"op": "gemm", "backend": backend, "backend_version": v, "dtypes": info}
            else:
                arrays, info = nccl_arrays(df)
                name = f"nccl_{system}_{v}.npz"
                entry = {"op": "nccl", "backend": "nccl", "backend_version": v, "nccl_version": v, "series": info}
                if "version" in df.columns:
                    entry["row_version_column"] = sorted(df.version.astype(str).unique().tolist())
            zip_npz(OUT / name, arrays)
            cm = m.get("collection_meta.yaml") or {}
            entry.update(
                {
                    "system": system,
                    "device_column": sorted(df.device.astype(str).unique().tolist()) if "device" in df.columns else [],
                    "rows": int(len(df)),
                    "source_repo": manifest["source"]["repo"],
                    "source_commit": COMMIT,
                    "source_path": f"{folder}/{pq}",
                    "licence": "Apache-2.0",
                    "provenance": cm.get("provenance"),
                    "collection_meta": cm,
                    "reuse_notes": [],
                    "converter": manifest["converter"],
                }
            )
            manifest["files"][name] = entry
            print(f"{name}: {entry['rows']} rows", file=sys.stderr)
    # the reuse declarations that point at each kept file (an alias may come after its donor)
    for name, e in manifest["files"].items():
        e["reuse_notes"] = [
            {"version": a["version"], "reason": a["reason"]}
            for a in manifest["aliases"]
            if a["system"] == e["system"] and a["backend"] == e["backend"] and a["reuses"] == e["backend_version"]
        ]
    for old in OUT.glob("*.npz"):  # files of an earlier conversion that this one did not write
        if old.name not in manifest["files"]:
            old.unlink()
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="path of the AIConfigurator git repository (bare is fine)")
    ap.add_argument("--date", default=datetime.now(timezone.utc).strftime("%Y-%m-%d"), help="conversion date recorded")
    args = ap.parse_args(argv)
    if not Path(args.aic).exists():
        print(
            f"--aic: {args.aic!r} does not exist; expected a git repository of ai-dynamo/aiconfigurator",
            file=sys.stderr,
        )
        return 2
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        print("tables_convert: needs pyarrow and pandas (pip install '.[tables]')", file=sys.stderr)
        return 2
    m = convert(args.aic, args.date)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{len(m['files'])} files, {total / 1e6:.2f} MB in {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
