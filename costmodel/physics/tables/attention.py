"""Context (prefill) attention forward times from the measured tables (TensorRT-LLM's attention op,
context phase: causal, with its fused QKV preprocessing and KV-cache write; AIConfigurator's
``context_attention_perf``, latency in ms as logged by ``collector/trtllm/collect_attn.py``).

A table holds, per configuration (dtype, head_dim, window, heads, kv_heads), a grid over batch
(sequences) and isl (tokens per sequence). A look-up interpolates (:mod:`.grid`, ``SCHEMES``) the
latency linearly in batch (a floor plus per-sequence work) and ``log latency`` over ``log isl`` by the
monotone cubic (a floor, linear and quadratic work: the log-log slope moves from 0 towards 2) on each
configuration it reads, then ``log latency`` linearly in ``log heads``
between the two measured head counts around the asked one, among the configurations of the same
dtype, head_dim, window and GQA group (heads / kv_heads; the nearest group stands in, said in the
note); a head_dim between two measured ones is interpolated in ``log head_dim`` the same way.
Outside: above the largest batch or head count (or head_dim) the time grows in proportion (constant
FLOP/s); above the largest isl as ``isl^2`` without a window and ``isl`` with one; below the smallest
value of an axis the smallest's time stands (latency floor). Such look-ups, and those touching a
grid hole filled at conversion, are ``extrapolated``. Backward attention is not measured here; the
FlashAttention convention (backward = 2.5x the forward's FLOPs, ``benchmarks/data/components/
README_kernels.md``) is the caller's to apply and to mark.
"""

from __future__ import annotations

from functools import lru_cache
from math import exp, log, log2

import numpy as np

from .evidence import Evidence, join_notes
from .grid import AFFINE, PCHIP, along, config_grid, read_point
from .store import load, system_of, table_for

DTYPE_CODE = {"bf16": 0, "bfloat16": 0, "fp16": 0, "fp8": 1}
#: the 1-D scheme of each grid axis (batch, isl), :mod:`.grid`
SCHEMES = (AFFINE, PCHIP)


@lru_cache(maxsize=16)
def _table(file: str):
    return config_grid(load(file), "isl")


def _one(file: str, i: int, batch: int, isl: int, window: int):
    """(log ms, kind, distance, notes) of configuration ``i`` at (batch, isl) (:func:`.grid.read_point`: beyond the
    grid proportional to batch, to isl squared without a window and to isl with one)."""
    _, axes, loglat, fill, b_ax, s_ax, _ = _table(file)
    powers = (1, 2 if window == 0 else 1)
    return read_point(axes, loglat[i], fill[i], (b_ax, s_ax), (log(batch), log(isl)), SCHEMES, ("batch", "isl"), powers)


@lru_cache(maxsize=1 << 14)
def _attention(system, dtype, batch, isl, heads, kv_heads, head_dim, window, backend):
    code = DTYPE_CODE.get(dtype)
    if code is None:
        return None, Evidence("assumed", "", f"no measured {dtype} attention table")
    choice = table_for(system, "attention", backend)
    if choice is None:
        return None, Evidence("assumed", "", f"no context-attention table on {system}")
    cfg, pos = _table(choice.file)[0], _table(choice.file)[-1]
    mine = cfg[(cfg[:, 0] == code) & (cfg[:, 2] == window)]
    if not len(mine):
        return None, Evidence("assumed", choice.label, f"no {dtype} configuration with window {window}")
    notes = [choice.note]

    def at_dim(d: int):
        rows = mine[mine[:, 1] == d]
        groups = [int(q) for q in np.unique(rows[:, 3] // rows[:, 4])]
        g = min(groups, key=lambda q: (abs(log2(q) - log2(max(heads // kv_heads, 1))), q))
        if g != heads // kv_heads:
            notes.append(f"GQA group {g} stands in for {heads // kv_heads}")
        rows = rows[rows[:, 3] // rows[:, 4] == g]
        index = {int(r[3]): pos[tuple(int(x) for x in r)] for r in rows}
        return along(list(index), heads, lambda h: _one(choice.file, index[h], batch, isl, window), "heads")

    v, kind, d, extra = along(sorted({int(x) for x in mine[:, 1]}), head_dim, at_dim, "head_dim")
    note = join_notes(*dict.fromkeys(n for n in notes + extra if n))
    return exp(v) * 1e-3, Evidence(kind, choice.label, note, d)


def attention_lookup(device, dtype, batch, isl, heads, kv_heads, head_dim, window=0, backend=None):
    """``(seconds, Evidence)`` of one context-phase (causal) attention forward of ``batch`` sequences of
    ``isl`` tokens with ``heads`` query heads, ``kv_heads`` KV heads of ``head_dim`` on one GPU of
    ``device`` (``window`` 0: full causal; else a sliding window of that many tokens, as measured);
    ``(None, Evidence("assumed", ...))`` without a table. Cached per shape."""
    args = [int(x) for x in (batch, isl, heads, kv_heads, head_dim, window)]
    if min(args[:5]) < 1 or args[5] < 0 or args[2] % args[3]:
        raise ValueError(f"attention shape {args}: positive sizes, heads a multiple of kv_heads, window >= 0")
    system = system_of(device)
    if system is None:
        return None, Evidence("assumed", "", f"no measured attention table for {getattr(device, 'name', device)}")
    return _attention(system, dtype, *args, backend)


def cache_clear() -> None:
    _attention.cache_clear()
