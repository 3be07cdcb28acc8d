"""Intra-node NCCL collective times from the measured tables (nccl-tests runs on one node).

``nbytes`` is nccl-tests' ``size``: the per-GPU buffer (all-reduce: the reduced buffer; all-gather:
the gathered output; reduce-scatter: the input; all-to-all: the send buffer), the convention of
``benchmarks/data/components/collectives.csv``.

Per (op, dtype, GPU count) a table holds latency over message sizes 512 B (2 KiB in the legacy
2.23 tables, which also lack all-reduce) to 512 MiB. The latency is interpolated linearly in the size
between the two measured sizes around it (:mod:`.grid` ``MONOTONE``: affine, exact for
``alpha + bytes / bw``, each size's time taken as the lesser of its own and the next larger size's: a
larger message never costs less, so a measured time above the next size's is a slow outlier);
below the smallest size the smallest size's latency stands (latency floor), above the largest the
last interval's affine law continues (:func:`edge_seconds_per_byte`; until 2026-12-05 the largest's
average bandwidth, which charges the latency again on every byte): both ``extrapolated``. A GPU count not in
the table: the bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``: ``busbw = algbw * 2 (n-1)/n`` for
all-reduce, ``* (n-1)/n`` for all-gather, reduce-scatter and all-to-all) at that size is interpolated
linearly in ``log2 n`` between the counts around it (``interpolated``), or held at the largest count's
above it (``extrapolated``, distance ``log2(n / n_max)``), and converted back to time.
"""

from __future__ import annotations

from functools import lru_cache
from math import log, log2

import numpy as np

from .evidence import Evidence, join_notes, weakest
from .grid import MONOTONE, interpolate
from .store import TableChoice, load, manifest, system_of, table_for, version_key

OPS = {
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "alltoall": "alltoall",
    "all_to_all": "alltoall",
}
#: the 1-D scheme of the message-size axis, :mod:`.grid`
SCHEME = MONOTONE
#: planner dtype -> the table's nccl dtype (the time depends on bytes; fp32 read by bytes from half)
NCCL_DTYPE = {"bf16": "half", "fp16": "half", "fp32": "half", "fp8": "int8", "int8": "int8", "half": "half"}


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw of nccl-tests (doc/PERFORMANCE.md) for ``n`` ranks."""
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def _nccl_files(system: str) -> list[tuple[str, dict]]:
    return [(f, e) for f, e in manifest()["files"].items() if e["system"] == system and e["op"] == "nccl"]


def version_rank(entry: dict, version: str) -> int:
    """How many versions lie between ``entry``'s and ``version`` among all NCCL versions (a distance)."""
    allv = sorted(
        {e["backend_version"] for e in manifest()["files"].values() if e["op"] == "nccl"} | {version}, key=version_key
    )
    return allv.index(entry["backend_version"]) - allv.index(version)


def counts(file: str, op: str, dt: str) -> list[int]:
    keys = load(file)
    return sorted({int(k.split(".")[2]) for k in keys if k.startswith(f"{op}.{dt}.") and k.endswith(".bytes")})


@lru_cache(maxsize=256)
def _series(file: str, op: str, dt: str, n: int):
    z = load(file)
    b, lat = z[f"{op}.{dt}.{n}.bytes"], z[f"{op}.{dt}.{n}.lat_ms"]
    return np.log(b.astype(float)), np.log(lat.astype(float)), b


def edge_seconds_per_byte(raw: np.ndarray, loglat: np.ndarray) -> float:
    """Seconds per byte beyond the largest measured message: the last interval's ``dt / dS`` (the
    alpha-beta time ``alpha + S / beta`` continues, the latency amortised), held between 0 and the
    largest message's average ``t / S`` (``alpha >= 0``: an extra byte never costs more than an
    average one; a non-increasing last interval falls back to the average, constant bandwidth)."""
    t = np.exp(loglat[-2:].astype(float)) * 1e-3
    avg = float(t[-1]) / float(raw[-1])
    if len(raw) < 2:
        return avg
    inc = float(t[-1] - t[0]) / float(raw[-1] - raw[-2])
    return inc if 0.0 < inc <= avg else avg


def series_time(file: str, op: str, dt: str, n: int, nbytes: float) -> tuple[float, str, float, str]:
    """``(seconds, kind, distance, note)`` of one measured series at ``nbytes``."""
    lb, ll, raw = _series(file, op, dt, n)
    x = log(nbytes)
    value, _, exact, (xc,) = interpolate([lb], ll, (x,), (SCHEME,))
    t = float(np.exp(value)) * 1e-3
    d = (x - xc) / log(2)
    if d > 1e-9:
        return (
            t + (nbytes - float(raw[-1])) * edge_seconds_per_byte(raw, ll),
            "extrapolated",
            d,
            f"{2.0**d:.1f}x beyond the largest message ({int(raw[-1])} B): the last interval's bandwidth",
        )
    if d < -1e-9:
        return t, "extrapolated", -d, f"below the smallest message ({int(raw[0])} B): latency floor"
    return t, "measured" if exact else "interpolated", 0.0, ""


@lru_cache(maxsize=1 << 14)
def _collective(system: str, op: str, nbytes: float, ngpus: int, nccl: str | None, dtype: str):
    dt = NCCL_DTYPE.get(dtype)
    if dt is None:
        return None, Evidence("assumed", "", f"no NCCL table for dtype {dtype}")
    choice = table_for(system, "nccl", nccl)
    ns = counts(choice.file, op, dt)
    if not ns:  # a legacy table without this op: the nearest version that has it stands in
        for f, e in sorted(_nccl_files(system), key=lambda fe: abs(version_rank(fe[1], choice.version))):
            if counts(f, op, dt):
                v = e["backend_version"]
                note = f"NCCL {choice.version} has no {op}: {v} stands in"
                choice = TableChoice(f, system, "nccl", "nccl", v, note)
                ns = counts(f, op, dt)
                break
        else:
            return None, Evidence("assumed", "", f"no {op} {dt} series for {system}")
    if ngpus in ns:
        t, kind, d, note = series_time(choice.file, op, dt, ngpus, nbytes)
        return t, Evidence(kind, choice.label, join_notes(choice.note, note), d)
    lo = max((n for n in ns if n < ngpus), default=None)
    hi = min((n for n in ns if n > ngpus), default=None)
    if lo is None:  # below the smallest count (not reached for n >= 2: every table starts at 2)
        lo = hi
    used = [lo] if hi is None or lo == hi else [lo, hi]
    reads = [series_time(choice.file, op, dt, n, nbytes) for n in used]
    busbw = [nbytes * bus_factor(op, n) / r[0] for n, r in zip(used, reads)]
    if len(used) == 2:
        w = (log2(ngpus) - log2(lo)) / (log2(hi) - log2(lo))
        bw = float(np.exp((1 - w) * log(busbw[0]) + w * log(busbw[1])))
        kind, d = weakest("interpolated", *(r[1] for r in reads)), max(r[2] for r in reads)
        how = f"{ngpus} GPUs between {lo} and {hi}: bus bandwidth interpolated over log2 n"
    else:
        bw, d = busbw[0], max(reads[0][2], abs(log2(ngpus / lo)))
        kind = "extrapolated"
        how = f"{ngpus} GPUs beyond the table's {lo}: its bus bandwidth held"
    t = nbytes * bus_factor(op, ngpus) / bw
    return t, Evidence(kind, choice.label, join_notes(choice.note, how, *(r[3] for r in reads)), d)


def collective_lookup(device, op: str, nbytes: float, ngpus: int, nccl: str | None = None, dtype: str = "bf16"):
    """``(seconds, Evidence)`` of one NCCL collective over ``ngpus`` GPUs inside one node of ``device``.

    ``op``: all_gather, all_reduce, reduce_scatter or alltoall; ``nbytes``: nccl-tests' size (see the
    module docstring); ``nccl``: the stack's NCCL version (None: the newest table; else that version's
    or the nearest, said in the note); ``dtype``: bf16/fp16/fp32 read the ``half`` series, fp8 the
    ``int8`` one. ``(None, Evidence("assumed", ...))`` without a table. Cached per shape."""
    key = OPS.get(op)
    if key is None:
        raise ValueError(f"collective {op!r}: expected one of {', '.join(sorted(set(OPS.values())))}")
    if not nbytes > 0 or int(ngpus) < 1:
        raise ValueError(f"collective size {nbytes!r} B over {ngpus!r} GPUs: expected > 0 bytes and >= 1 GPU")
    if int(ngpus) == 1:
        return 0.0, Evidence("assumed", "", "one GPU: no collective")
    system = system_of(device)
    if system is None or table_for(system, "nccl") is None:
        return None, Evidence("assumed", "", f"no measured NCCL table for {getattr(device, 'name', device)}")
    return _collective(system, key, float(nbytes), int(ngpus), nccl, dtype)


def cache_clear() -> None:
    _collective.cache_clear()
