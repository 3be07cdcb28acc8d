"""Interpolation on a grid (the one place the table look-ups interpolate).

The axes are logarithms (``log`` of m, n, k, of the message size, of tokens) and so are the values
(``log`` of the latency); each axis names its 1-D scheme, and a grid of several axes is interpolated
one axis at a time (the last first) on the local window around the asked point:

- ``AFFINE`` (``("affine", p)``): the latency is linear in ``x**p`` between the two grid values
  around ``x``. Exact where the time is ``a + b x**p`` on that interval: a roofline term of a GEMM
  (FLOPs ``2 m n k`` and bytes ``mk + kn + mn`` are affine in each of m, n, k: multilinear
  interpolation in ``(m, n, k)`` is exact for any multilinear time), the alpha-beta time of a
  collective (``alpha + bytes / bandwidth``), an MoE layer over tokens (weights read once plus
  per-token work). Interpolating ``log latency`` in ``log x`` instead (``LOGLOG``) is exact only
  for a pure power law and over-estimates any ``a + b x`` with ``a > 0`` (``log(a + b e^u)`` is
  convex in ``u``).
- ``PCHIP``: the monotone piecewise-cubic Hermite interpolant (Fritsch and Carlson, "Monotone
  Piecewise Cubic Interpolation", SIAM J. Numer. Anal. 17(2), 1980; the slopes of SciPy's
  ``PchipInterpolator``) of ``log latency`` in ``log x``, from the four grid values around ``x``.
  For a time that is a sum of terms of different powers (context attention over isl: a floor, the
  linear QKV and KV-cache work and the quadratic score work), whose log-log slope moves from 0 to 2
  along the axis: it follows the local slope on each side, is exact for a power law and does not
  overshoot the neighbouring values.
- ``MONOTONE`` (``("monotone", p, brk)``, :func:`monotone`): ``AFFINE`` between the two grid values
  around ``x``, each taken as the lesser of its own time and the next larger grid value's, for an axis
  along which the work only grows: a message of S bytes is part of any larger one (NCCL's own cost
  model, the least over algorithms and protocols of increasing ``alpha + S / beta`` laws, increases
  with S); a GEMM's k only lengthens each output tile's main loop over the same grid of tiles (the
  same waves; m and n change the tile grid and the tile shape the library picks, and are not
  monotone axes). A measured time above the next larger size's is a slow outlier of that
  measurement (timing noise, a transient clock or tuner pick only add time) and does not raise the
  points between. One step only: the least over all larger values (the whole lower envelope) is the
  minimum of many noisy samples on a flat stretch (a latency floor), biased low. ``brk``: the step
  does not cross ``x = exp(brk)`` (a kernel path that changes there, e.g. block-scaled fp8 below one
  128-wide scale block of k). Grid values themselves stay as measured.

- ``affine_in`` (:func:`affine_in`): the time affine in a coordinate the caller computes from the
  axis value (the MoE layer's load on the timed rank, :mod:`.moe`), where the time is ``a + b c``
  with ``a, b >= 0`` but ``c`` does not follow the axis monotonically. Where ``c`` falls outside
  the two grid values' range the line through them is extended, held between the bounds ``a, b >= 0``
  allow from the nearer value ``(c_n, t_n)``: ``t_n c / c_n`` (no floor) and ``t_n`` (no slope).

A grid value is reproduced exactly (no round trip through ``exp``/``log``).
"""

from __future__ import annotations

import itertools
from math import inf, isclose, log, log2

import numpy as np

from .evidence import weakest

AFFINE = ("affine", 1.0)
LOGLOG = ("loglog", 0.0)
PCHIP = ("pchip", 0.0)
MONOTONE = ("monotone", 1.0, -inf)


def monotone(below: float | None = None) -> tuple:
    """``MONOTONE`` whose step does not cross the axis value ``below`` (a raw value, not a logarithm):
    grid values under it and from it on are two separate runs."""
    return MONOTONE if below is None else ("monotone", 1.0, log(below))


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


def _pchip_slopes(h: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fritsch-Carlson slopes at every point of ``y`` (last dimension) with spacings ``h``."""
    d = np.diff(y, axis=-1) / h
    m = np.zeros_like(y)
    if len(h) == 1:
        m[...] = d
        return m
    w1, w2 = 2 * h[1:] + h[:-1], h[1:] + 2 * h[:-1]
    d0, d1 = d[..., :-1], d[..., 1:]
    same = d0 * d1 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        m[..., 1:-1] = np.where(same, (w1 + w2) / np.where(same, w1 / d0 + w2 / d1, 1.0), 0.0)
    for end, (h0, h1, e0, e1) in (
        (0, (h[0], h[1], d[..., 0], d[..., 1])),
        (-1, (h[-1], h[-2], d[..., -1], d[..., -2])),
    ):
        s = ((2 * h0 + h1) * e0 - h0 * e1) / (h0 + h1)
        s = np.where(np.sign(s) != np.sign(e0), 0.0, s)
        m[..., end] = np.where((np.sign(e0) != np.sign(e1)) & (np.abs(s) > 3 * np.abs(e0)), 3 * e0, s)
    return m


def interp_1d(axis: np.ndarray, values: np.ndarray, x: float, scheme=AFFINE):
    """``values`` (log latency, the last dimension along ``axis``, log coordinates) at ``x`` clamped to
    the axis, by ``scheme`` (``AFFINE``, ``("affine", p)``, ``LOGLOG``, ``PCHIP`` or ``MONOTONE``);
    the result has ``values``' shape without its last dimension. ``MONOTONE`` reads the grid value after
    the upper end too."""
    values = np.asarray(values, dtype=float)
    j, t, xc = bracket(axis, x)
    if len(axis) == 1 or t == 0.0:
        return values[..., j]
    if t == 1.0:
        return values[..., j + 1]
    kind, p = scheme[0], scheme[1]
    lo, hi = values[..., j], values[..., j + 1]
    if kind == "monotone":
        # each end: the lesser of its time and the next grid value's, within its run (split at scheme[2])
        brk = scheme[2] - 1e-9
        if j + 1 < len(axis) and not axis[j] < brk <= axis[j + 1]:
            lo = np.minimum(lo, hi)
        if j + 2 < len(axis) and not axis[j + 1] < brk <= axis[j + 2]:
            hi = np.minimum(hi, values[..., j + 2])
        kind = "affine"
    if kind == "loglog":
        return (1 - t) * lo + t * hi
    if kind == "affine":
        u0, u1, u = np.exp(p * float(axis[j])), np.exp(p * float(axis[j + 1])), np.exp(p * xc)
        w = (u - u0) / (u1 - u0)
        return np.log((1 - w) * np.exp(lo) + w * np.exp(hi))
    if kind != "pchip":
        raise ValueError(f"interpolation scheme {scheme!r}: affine, loglog, pchip or monotone")
    a, b = max(j - 1, 0), min(j + 3, len(axis))  # the slopes at j and j + 1 need j - 1 .. j + 2
    xs = np.asarray(axis[a:b], dtype=float)
    m = _pchip_slopes(np.diff(xs), values[..., a:b])
    i, h = j - a, float(axis[j + 1] - axis[j])
    h00, h10, h01, h11 = 2 * t**3 - 3 * t**2 + 1, t**3 - 2 * t**2 + t, -2 * t**3 + 3 * t**2, t**3 - t**2
    return h00 * lo + h10 * h * m[..., i] + h01 * hi + h11 * h * m[..., i + 1]


def interpolate(axes: list[np.ndarray], values: np.ndarray, x: tuple[float, ...], schemes=None):
    """``values`` (log latency, shape = axis lengths) at ``x`` clamped to the grid, one axis at a time
    by ``schemes`` (one per axis; default ``AFFINE`` on every axis).

    Returns ``(value, corners, exact, clamped)``: ``value`` log latency, ``corners`` the grid indices
    of the cell around ``x`` that carry weight, ``exact`` whether ``x`` is a grid point, ``clamped``
    the clamped coordinates."""
    schemes = list(schemes) if schemes is not None else [AFFINE] * len(axes)
    brackets = [bracket(a, xi) for a, xi in zip(axes, x)]
    window, parts = [], []
    for a, (j, t, _), s in zip(axes, brackets, schemes):
        on_grid = t in (0.0, 1.0)
        if s[0] == "pchip" and not on_grid:
            lo, hi = max(j - 1, 0), min(j + 3, len(a))
        elif s[0] == "monotone" and not on_grid:
            lo, hi = j, min(j + 3, len(a))  # the grid value after the upper end too
        else:
            lo, hi = j, min(j + 2, len(a))
        window.append(slice(lo, hi))
        parts.append([j] if t == 0.0 else [j + 1] if t == 1.0 else [j, j + 1])
    v = np.asarray(values[tuple(window)], dtype=float)
    for d in reversed(range(len(axes))):
        v = interp_1d(np.asarray(axes[d][window[d]]), v, brackets[d][2], schemes[d])
    corners = list(itertools.product(*parts))
    exact = len(corners) == 1 and all(isclose(xi, b[2], rel_tol=0, abs_tol=1e-9) for xi, b in zip(x, brackets))
    return float(v), corners, exact, tuple(b[2] for b in brackets)


def affine_in(c0: float, c1: float, c: float, t0: float, t1: float, axis: tuple[float, float, float]):
    """``(t, beyond)``: the time at coordinate ``c`` from ``(c0, t0)`` and ``(c1, t1)`` (times, not
    logarithms), affine in the coordinate (module doc); ``axis`` = ``(x0, x1, x)``, the axis values
    (raw), read affinely where the two coordinates are equal (nothing else tells the points apart).
    ``beyond`` is 0 where ``c`` lies between ``c0`` and ``c1``, else ``|log2(c / c_n)|`` from the
    nearer one (an extrapolation along the coordinate)."""
    if isclose(c0, c1, rel_tol=1e-12, abs_tol=0.0):
        (x0, x1, x), beyond = axis, 0.0
        if not isclose(c, c0, rel_tol=1e-12, abs_tol=0.0):
            beyond = abs(log(c / c0) / log(2)) if c > 0 and c0 > 0 else inf
        return t0 + (t1 - t0) * (x - x0) / (x1 - x0), beyond
    t = t0 + (t1 - t0) * (c - c0) / (c1 - c0)
    if min(c0, c1) <= c <= max(c0, c1):
        return t, 0.0
    cn, tn = (c0, t0) if abs(c - c0) < abs(c - c1) else (c1, t1)
    lo, hi = sorted((tn, tn * c / cn))
    return min(max(t, lo), hi), abs(log(c / cn) / log(2))


def read_point(axes, values, fill, raws, x: tuple, schemes, names: tuple, powers: tuple, beyond: str = ""):
    """``(log latency, kind, distance, notes)`` of one configuration's grid (``values`` log latency over ``axes``,
    ``fill`` its hole flags, ``raws`` the axes' values) at ``x`` (log coordinates): :func:`interpolate` inside the
    grid; beyond an axis' largest value the time grows as that coordinate to ``powers`` (constant throughput of
    the nearest edge), below its smallest the smallest's time stands (the latency floor); ``kind``
    ``extrapolated`` beyond the grid or on a filled hole (distance in log2 units), else ``measured`` on a grid
    point and ``interpolated`` between. ``beyond``: said after each axis read beyond its largest value."""
    v, corners, exact, clamped = interpolate(axes, values, x, schemes)
    far, notes = 0.0, []
    for name, xi, xc, raw, power in zip(names, x, clamped, raws, powers):
        d = (xi - xc) / log(2)
        if d > 1e-9:
            v += power * (xi - xc)
            notes.append(f"{name} {2**d:.1f}x beyond the table's largest ({int(raw[-1])}){beyond}")
        elif d < -1e-9:
            notes.append(f"{name} below the table's smallest ({int(raw[0])}): latency floor")
        far = max(far, abs(d))
    hole = max(int(fill[c]) for c in corners) / 10.0
    if hole > 0:
        notes.append(f"reads a grid hole filled by constant throughput ({hole:.1f} log2 from a measured point)")
    kind = "extrapolated" if far > 1e-9 or hole > 0 else "measured" if exact else "interpolated"
    return v, kind, max(far, hole), notes


def config_grid(z: dict, axis: str) -> tuple:
    """A per-configuration (batch x ``axis``) table's arrays as the look-ups read them: ``(cfg, log axes, log
    latency, fill, batch values, axis values, {configuration tuple: row})``."""
    axes = [np.log(z["batch"].astype(float)), np.log(z[axis].astype(float))]
    index = {tuple(int(x) for x in row): i for i, row in enumerate(z["cfg"])}
    return z["cfg"], axes, np.log(z["lat_ms"].astype(float)), z["fill"], z["batch"], z[axis], index


def along(values: list[int], x: int, read, name: str, power: float = 1.0):
    """Interpolate ``read(value)`` (log ms, kind, distance, notes) across measured configurations: linearly in log
    between the measured ``values`` around ``x`` (heads, head_dim); proportional above the largest (to ``x **
    power``), the floor below the smallest; ``extrapolated`` there, with the distance in log2 units."""
    vs = sorted(values)
    if x in vs:
        return read(x)
    lo = max((v for v in vs if v < x), default=None)
    hi = min((v for v in vs if v > x), default=None)
    if lo is not None and hi is not None:
        a, b = read(lo), read(hi)
        w = (log(x) - log(lo)) / (log(hi) - log(lo))
        return (1 - w) * a[0] + w * b[0], weakest("interpolated", a[1], b[1]), max(a[2], b[2]), a[3] + b[3]
    edge = lo if hi is None else hi
    v, kind, d, notes = read(edge)
    step = abs(log2(x / edge))
    if hi is None:
        v += power * (log(x) - log(edge))
        notes = [*notes, f"{name} {x / edge:.1f}x beyond the table's largest ({edge})"]
    else:
        notes = [*notes, f"{name} below the table's smallest ({edge}): latency floor"]
    return v, "extrapolated", max(d, step), notes
