"""Multilinear interpolation on a grid in log space (the one place the table look-ups interpolate).

The axes and the values are logarithms (``log`` of m, n, k or of the message size; ``log`` of the
latency): interpolating ``log(latency)`` linearly in ``log(size)`` is exact for a power law
(``latency ~ size^a``), which GEMM and collective times follow piecewise (compute- or bandwidth-bound:
``a = 1``; latency-bound: ``a = 0``).
"""

from __future__ import annotations

import itertools
from math import isclose

import numpy as np


def bracket(axis: np.ndarray, x: float) -> tuple[int, float, float]:
    """``(j, t, xc)``: ``xc`` is ``x`` clamped to the axis, ``axis[j] <= xc <= axis[j + 1]`` and
    ``t`` the fraction of the way from ``axis[j]`` (exactly 0.0 or 1.0 on a grid point)."""
    lo, hi = float(axis[0]), float(axis[-1])
    xc = min(max(x, lo), hi)
    if len(axis) == 1:
        return 0, 0.0, xc
    j = int(np.searchsorted(axis, xc, side="right")) - 1
    j = min(max(j, 0), len(axis) - 2)
    a, b = float(axis[j]), float(axis[j + 1])
    t = (xc - a) / (b - a)
    if isclose(xc, a, rel_tol=0, abs_tol=1e-9):
        t = 0.0
    elif isclose(xc, b, rel_tol=0, abs_tol=1e-9):
        t = 1.0
    return j, t, xc


def interpolate(axes: list[np.ndarray], values: np.ndarray, x: tuple[float, ...]):
    """Multilinear interpolation of ``values`` (shape = axis lengths) at ``x`` clamped to the grid.

    Returns ``(value, corners, exact, clamped)``: ``corners`` are the grid indices with a non-zero
    weight, ``exact`` whether ``x`` is a grid point, ``clamped`` the clamped coordinates."""
    brackets = [bracket(a, xi) for a, xi in zip(axes, x)]
    parts = []
    for j, t, _ in brackets:
        parts.append([(j, 1.0)] if t == 0.0 else [(j + 1, 1.0)] if t == 1.0 else [(j, 1.0 - t), (j + 1, t)])
    value, corners = 0.0, []
    for combo in itertools.product(*parts):
        idx = tuple(i for i, _ in combo)
        w = float(np.prod([wi for _, wi in combo]))
        value += w * float(values[idx])
        corners.append(idx)
    exact = len(corners) == 1 and all(isclose(xi, b[2], rel_tol=0, abs_tol=1e-9) for xi, b in zip(x, brackets))
    return value, corners, exact, tuple(b[2] for b in brackets)
