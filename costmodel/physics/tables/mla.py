"""MLA decode attention from the serving engines' measured kernels (issues 38 and 40).

AIConfigurator timed each engine's MLA generation kernel for one new token per sequence over a cache of
``isl + step`` tokens (``generation_mla_perf``: TensorRT-LLM's MLA attention op, ``collector/trtllm/collect_mla.py``;
SGLang's attention backend, ``collector/sglang/collect_mla.py``: TRTLLM-GEN MLA on Blackwell, FlashAttention-3 on
Hopper), BF16 queries, BF16 or FP8 cache, per local head count (1 to 128), batch 1 to 512 and context 2 to
65,536 (ai-dynamo/aiconfigurator@095f58a; ``benchmarks.tables_convert`` keeps the newest collection of each).

A look-up reads the configuration of the cache dtype and the GPU's head count (between two measured counts:
``log latency`` linear in ``log heads``; beyond them, proportional above, the floor below) and interpolates its
(batch, context) grid (:mod:`.grid`: ``AFFINE`` over batch, a floor plus work per sequence; ``MONOTONE`` over
the context, affine with each context's time taken as the lesser of its own and the next larger's: more cached
tokens never cost less, and the Hopper TensorRT-LLM tables hold isolated points 30-200x their neighbours, e.g.
H100, 2 heads, batch 1: 17 us at 4,096 tokens, 1,517 us at 8,192, 24 us at 16,384); beyond the grid the time grows in proportion to batch and to context, below it the
smallest's time stands. ``(None, Evidence("assumed", ...))`` where the engine or the GPU has no table.

>>> from costmodel.spec.presets import load_cluster
>>> t, ev = mla_decode_lookup(load_cluster("b200").device, "trtllm", 32, 3000, 16, "bf16")
>>> 30e-6 < t < 60e-6, ev.kind, ev.table
(True, 'interpolated', 'b200_sxm/mla/trtllm/1.3.0rc20')
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache
from math import exp, log

import numpy as np

from .evidence import Evidence, join_notes
from .grid import AFFINE, MONOTONE, along, config_grid, read_point
from .store import load, system_of, table_for

KV_CODE = {"bf16": 0, "bfloat16": 0, "fp16": 0, "fp8": 1}
SCHEMES = (AFFINE, MONOTONE)


@lru_cache(maxsize=32)
def _table(file: str):
    return config_grid(load(file), "ctx")[1:]  # (log axes, log latency, fill, batch, ctx, index)


def _one(file: str, i: int, batch: int, ctx: int):
    """(log ms, kind, distance, notes) of configuration ``i`` at (batch, ctx) (:func:`.grid.read_point`: beyond the
    grid proportional to batch and to context)."""
    axes, loglat, fill, b_ax, c_ax, _ = _table(file)
    x = (log(batch), log(ctx))
    return read_point(axes, loglat[i], fill[i], (b_ax, c_ax), x, SCHEMES, ("batch", "context"), (1, 1))


@lru_cache(maxsize=64)
def _choice(system: str, engine: str):
    return table_for(system, "mla", engine)


@lru_cache(maxsize=1 << 14)
def _mla(system: str, engine: str, batch: int, ctx: int, heads: int, kv_dtype: str):
    code = KV_CODE.get(kv_dtype)
    choice = _choice(system, engine)
    if choice is None or code is None:
        return None, Evidence("assumed", "", f"no MLA decode table on {system} for a {kv_dtype} cache")
    index = _table(choice.file)[-1]
    counts = sorted(h for (k, h) in index if k == code)
    if not counts:
        return None, Evidence("assumed", choice.label, f"no {kv_dtype} cache configuration")
    v, kind, d, notes = along(counts, heads, lambda h: _one(choice.file, index[(code, h)], batch, ctx), "heads")
    return exp(v) * 1e-3, Evidence(kind, choice.label, join_notes(choice.note, *dict.fromkeys(notes)), d)


def mla_decode_lookup(device, engine: str, batch: float, ctx: float, heads: float, kv_dtype: str):
    """``(seconds or None, Evidence)`` of one MLA decode-attention call of ``batch`` sequences over ``ctx`` cached
    tokens each, ``heads`` query heads on this GPU, as serving engine ``engine`` runs it on ``device``."""
    system = system_of(device)
    if system is None:
        return None, Evidence("assumed", "", f"no measured tables for {getattr(device, 'name', device)}")
    b, c, h = (max(1, int(round(x))) for x in (batch, ctx, heads))
    return _mla(system, engine, b, c, h, kv_dtype)


@lru_cache(maxsize=1 << 14)
def _cell(system: str, engine: str, batch: int, j: int, heads: int, kv_dtype: str) -> tuple[float, float]:
    """``(intercept, slope)`` of the look-up over context cell ``j`` (between the grid's contexts ``j - 1`` and
    ``j``; 0: below the smallest, ``len``: beyond the largest) at ``batch``: linear in the context inside a cell
    (``AFFINE`` / ``MONOTONE`` between two grid values, the floor below, proportional above), so two points inside
    it give it exactly."""
    c = _table(_choice(system, engine).file)[4]
    lo = 1 if j == 0 else int(c[j - 1]) + 1
    hi = int(c[j]) - 1 if j < len(c) else 2 * int(c[-1])
    if hi <= lo:  # adjacent grid values (no context strictly between them): the straight line through the ends
        lo, hi = (int(c[j - 1]), int(c[j])) if 0 < j < len(c) else (lo, lo + 1)
    t1, t2 = _mla(system, engine, batch, lo, heads, kv_dtype)[0], _mla(system, engine, batch, hi, heads, kv_dtype)[0]
    slope = (t2 - t1) / (hi - lo)
    return t1 - slope * lo, slope


def mla_decode_curve(device, engine: str, heads: float, kv_dtype: str):
    """``f(batch, ctx)``: the seconds of :func:`mla_decode_lookup` without its evidence, for the serving step's many
    contexts: the line of the context's grid cell (:func:`_cell`) at ``ctx`` itself (no rounding of the context).
    None without a table for the GPU, engine and cache dtype."""
    system = system_of(device)
    choice = _choice(system, engine) if system else None
    h = max(1, int(round(heads)))
    if choice is None or KV_CODE.get(kv_dtype) is None or _mla(system, engine, 1, 2, h, kv_dtype)[0] is None:
        return None
    grid = [int(x) for x in _table(choice.file)[4]]
    on_grid = (KV_CODE[kv_dtype], h) in _table(choice.file)[-1]

    def f(batch: float, ctx: float) -> float:
        c, b = max(ctx, 1.0), max(1, int(round(batch)))
        j = bisect_left(grid, c)
        if on_grid:
            a, k = _cells(choice.file, b, KV_CODE[kv_dtype], h)
            return float(a[j] + k[j] * c)
        a, k = _cell(system, engine, b, j, h, kv_dtype)
        return a + k * c

    return f


@lru_cache(maxsize=1 << 12)
def _cells(file: str, batch: int, code: int, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Every context cell's ``(intercept, slope)`` (:func:`_cell`) at once for a head count on the grid: the
    batch-grid rows around ``batch`` with their ``MONOTONE`` ends, combined affinely in batch (proportionally
    beyond the largest), as :func:`interpolate` reads them one point at a time."""
    _, loglat, _, b_ax, c_ax, index = _table(file)
    lat = np.exp(loglat[index[(code, heads)]]) * 1e-3  # (batch, ctx) seconds
    bb, cc = b_ax.astype(float), c_ax.astype(float)
    j = int(np.searchsorted(bb, batch, side="right")) - 1
    rows = [(lat[-1], batch / bb[-1])] if j >= len(bb) - 1 else [(lat[j], 1.0)]
    if j < len(bb) - 1:
        w = (batch - bb[j]) / (bb[j + 1] - bb[j])
        rows = [(lat[j], 1.0 - w), (lat[j + 1], w)] if w > 0 else rows
    lo = sum(wt * np.minimum(v[:-1], v[1:]) for v, wt in rows)  # cell j (1..n-1): from c[j-1] to c[j]
    hi = sum(wt * np.minimum(v[1:], np.append(v[2:], v[-1])) for v, wt in rows)
    hi[-1] = sum(wt * v[-1] for v, wt in rows)  # the last grid value as measured (nothing after it)
    first, last = sum(wt * v[0] for v, wt in rows), sum(wt * v[-1] for v, wt in rows)
    k = (hi - lo) / (cc[1:] - cc[:-1])
    a = lo - k * cc[:-1]
    return np.concatenate(([first], a, [0.0])), np.concatenate(([0.0], k, [last / cc[-1]]))


def mla_decode_s(device, engine: str, batch: float, ctx: float, heads: float, kv_dtype: str) -> float | None:
    """One value of :func:`mla_decode_curve` (None without a table)."""
    f = mla_decode_curve(device, engine, heads, kv_dtype)
    return None if f is None else f(batch, ctx)


def cache_clear() -> None:
    _mla.cache_clear()
    _cell.cache_clear()
    _cells.cache_clear()
