"""GEMM times from the measured tables, and the forward and backward GEMMs of a linear layer.

A table holds, per dtype, the latency of ``Y[m, n] = X[m, k] W[k, n]`` on a grid of (m, n, k)
(m: tokens, n: output features, k: input features; AIConfigurator's ``gemm_perf``).

Interpolation: the latency multilinear in ``m, n, k`` (:mod:`.grid` ``AFFINE`` on each axis: exact
for the roofline's FLOP and byte terms, each multilinear in m, n, k); along k each grid value's time
is first taken as the lesser of its own and the next larger k's (``MONOTONE``: k only lengthens each
output tile's main loop, the tile grid and its waves stay; a time above the next k's is a slow
outlier of that measurement; for fp8_block not across k = 128, one scale block, below which the
frameworks take another path: vLLM's H100 table runs k = 32 and 64 at about twice k = 128's time);
``measured`` only on an exact grid point. Outside the grid, each coordinate is clamped to the grid's
range and the time read there is scaled: above the largest value of an axis by the ratio of the
FLOPs (constant FLOP/s of the nearest edge point: a larger GEMM is compute-bound, its time grows with
``m n k``); below the smallest value not at all (the latency floor of the smallest measured GEMM: a smaller
one is launch- and latency-bound, not faster). Such a look-up is ``extrapolated`` with the distance
in log2 units of the worst axis. Grid holes (shapes the collection did not measure, mostly
n = k = 65,536) were filled at conversion by constant throughput from a measured neighbour; a look-up
touching one is ``extrapolated`` too.

Backward (training): for ``Y = X W`` with X m x k and W k x n, the input gradient ``dX = dY W^T``
is the GEMM (m x n)(n x k), i.e. shape (m, k, n), and the weight gradient ``dW = X^T dY`` is
(k x m)(m x n), i.e. shape (k, n, m); each has the forward's ``2 m n k`` FLOPs, so backward costs
2x the forward FLOPs (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", SC21, sec. 5.1: 3x the forward's FLOPs per step, forward plus backward).
:func:`linear_fwd_bwd_lookup` reads both at those shapes in the same forward table; that the
transposed operand layouts run at the forward layout's speed is an assumption (the tables measure
one layout).
"""

from __future__ import annotations

from functools import lru_cache
from math import log
from typing import NamedTuple

import numpy as np

from .evidence import Evidence, join_notes
from .grid import AFFINE, MONOTONE, monotone, read_point
from .store import load, system_of, table_for

#: planner dtype -> table dtype (costmodel/spec/units.py DTYPE_BYTES knows fp32, bf16, fp16, fp8)
DTYPE = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
}
DTYPE_NOTE = {"fp16": "fp16 read from the bf16 table (the same tensor-core rate)"}
AXES = "mnk"
#: the 1-D scheme of each grid axis (m, n, k), :mod:`.grid` (:func:`schemes` per table dtype)
SCHEMES = (AFFINE, AFFINE, MONOTONE)
#: block-scaled fp8 (128-wide scale blocks along k): the monotone step along k stops below one block
SCHEMES_FP8_BLOCK = (AFFINE, AFFINE, monotone(below=128))


def schemes(table_dtype: str) -> tuple:
    """The (m, n, k) schemes of a table dtype (``bfloat16``, ``fp8``, ``fp8_block``, ``nvfp4``)."""
    return SCHEMES_FP8_BLOCK if table_dtype == "fp8_block" else SCHEMES


class LinearTimes(NamedTuple):
    """Seconds and evidence of a linear layer's forward, input-gradient and weight-gradient GEMMs."""

    fwd: tuple[float | None, Evidence]
    dgrad: tuple[float | None, Evidence]
    wgrad: tuple[float | None, Evidence]


@lru_cache(maxsize=256)
def _grid(file: str, dtype: str):
    z = load(file)
    axes = [np.log(z[f"{dtype}.{c}"].astype(float)) for c in AXES]
    return axes, np.log(z[f"{dtype}.lat_ms"].astype(float)), z[f"{dtype}.fill"], [z[f"{dtype}.{c}"] for c in AXES]


def _assumed(note: str) -> tuple[None, Evidence]:
    return None, Evidence("assumed", "", note)


@lru_cache(maxsize=1 << 16)
def _gemm(system: str, dtype: str, m: int, n: int, k: int, backend: str | None):
    tdt = DTYPE.get(dtype)
    if tdt is None:
        return _assumed(f"no measured {dtype} GEMM table (tables hold {', '.join(sorted(set(DTYPE.values())))})")
    choice = table_for(system, "gemm", backend, dtype=tdt)
    if choice is None:
        return _assumed(f"no {tdt} GEMM table on {system}")
    axes, loglat, fill, raw = _grid(choice.file, tdt)
    x = (log(m), log(n), log(k))
    # beyond the grid: constant FLOP/s of the edge point (time proportional to each of m, n, k)
    v, kind, d, notes = read_point(
        axes, loglat, fill, raw, x, schemes(tdt), tuple(AXES), (1, 1, 1), ": constant FLOP/s"
    )
    return float(np.exp(v)) * 1e-3, Evidence(
        kind, choice.label, join_notes(DTYPE_NOTE.get(dtype, ""), choice.note, *notes), d
    )


def gemm_lookup(device, dtype: str, m: int, n: int, k: int, backend: str | None = None):
    """``(seconds, Evidence)`` of one ``m x k`` by ``k x n`` GEMM on ``device`` in ``dtype``
    (``bf16``, ``fp16``, ``fp8``, ``fp8_block``, ``nvfp4``), from the table of ``backend``
    (``"trtllm"``, ``"vllm 0.24.0"``, ...; None: trtllm, vllm, sglang in that order);
    ``(None, Evidence("assumed", ...))`` when no table covers the device or dtype. Cached per shape."""
    m, n, k = int(m), int(n), int(k)
    if min(m, n, k) <= 0:
        raise ValueError(f"GEMM shape m={m}, n={n}, k={k}: every dimension must be >= 1")
    system = system_of(device)
    if system is None:
        return _assumed(f"no measured GEMM table for {getattr(device, 'name', device)}")
    return _gemm(system, dtype, m, n, k, backend)


def linear_fwd_bwd_lookup(device, dtype: str, m: int, n: int, k: int, backend: str | None = None) -> LinearTimes:
    """The forward ``(m, n, k)``, input-gradient ``(m, k, n)`` and weight-gradient ``(k, n, m)`` GEMMs
    of ``Y[m, n] = X[m, k] W[k, n]``, each looked up in the forward table (see the module docstring)."""
    return LinearTimes(
        gemm_lookup(device, dtype, m, n, k, backend),
        gemm_lookup(device, dtype, m, k, n, backend),
        gemm_lookup(device, dtype, k, n, m, backend),
    )


def gemm_grid(system: str, dtype: str, backend: str | None = None):
    """``(TableChoice, {"m","n","k": axis values}, latency_ms grid, fill grid)`` of one table (for
    benchmarks and tests), or None."""
    tdt = DTYPE.get(dtype, dtype)
    choice = table_for(system, "gemm", backend, dtype=tdt)
    if choice is None:
        return None
    z = load(choice.file)
    return choice, {c: z[f"{tdt}.{c}"] for c in AXES}, z[f"{tdt}.lat_ms"], z[f"{tdt}.fill"]


def cache_clear() -> None:
    _gemm.cache_clear()
