"""The centre and the spread of an 80% band, from out-of-source residuals (issue 23).

A plan's band rests on the residuals ``r = ln(predicted / measured)`` of measured runs like it (its
regime's *pool*, :func:`pool_rows`: the most specific regime with :data:`MIN_POOL` rows, backing off
to coarser ones). Two things are read from the pool, separately:

* the **centre**, the pool's signed mean residual: the model's bias on runs like this one. The band
  is centred there (``measured ~ predicted * exp(-centre)``); the prediction itself is not moved.
* the **spread**, how far a *new source's* runs fall from that centre. Each pool row ``i`` is scored
  ``s_i = |r_i - c_i|``, where ``c_i`` is the pool's mean over the *other sources'* rows (a nested
  leave-one-source-out: a score is the error the band's centre makes on a source it never saw, the
  situation of every plan the planner is asked about). The half-width is
  the split-conformal quantile of the scores, the ``ceil((n + 1) * level)``-th smallest of ``n``
  (Lei, G'Sell, Rinaldo, Tibshirani, Wasserman, "Distribution-free predictive inference for
  regression", JASA 113 (2018), Sec. 2.2: a new score exchangeable with the ``n`` falls at or below it
  with probability >= ``level``). Runs of one source are correlated, so the guarantee is approximate;
  leave-one-source-out coverage (``benchmarks/band_coverage.py``) is the check.

:data:`MIN_POOL` = 9 is the smallest pool in which the 80% conformal quantile is not the pool's
largest score (``ceil(0.8 * 10) = 8 < 9``), so one outlying run does not set a regime's band alone;
a smaller pool backs off to the coarser regime. Where even all rows are too few for the quantile
(n < 4 at 80%), the normal prediction interval stands in (:func:`normal_interval`).

>>> rows = [{"regime": {"kind": "dense"}, "source": s, "log_residual": e}
...         for s, e in zip("aabbccddee", (0.10, 0.12, 0.05, 0.07, 0.09, 0.11, 0.02, 0.04, 0.14, 0.16))]
>>> c, half, n, keys = centre_and_spread({"kind": "dense"}, rows)
>>> round(c, 3), n, keys, 0.03 < half < 0.09
(0.09, 10, {'kind': 'dense'}, True)
"""

from __future__ import annotations

import math

#: regime keys, most significant first; the backoff drops them from the right
KEYS = ("kind", "device", "zero", "scale")
#: rows a regime's pool needs (see the module doc)
MIN_POOL = 9


def _source(r: dict, i: int) -> str:
    return r.get("source") or f"row {i}"  # a row without a source stands for one of its own


def pool_rows(keys: dict, residuals, minimum: int = MIN_POOL) -> tuple[list, dict]:
    """The rows of the most specific regime matching ``keys`` with ``minimum`` rows, and the keys matched."""
    for n in range(len(KEYS), -1, -1):
        want = {k: keys[k] for k in KEYS[:n] if k in keys}
        if len(want) < n:
            continue
        pool = [r for r in residuals if all(r["regime"].get(k) == v for k, v in want.items())]
        if len(pool) >= minimum:
            return pool, want
    return list(residuals), {}


def centre(keys: dict, residuals) -> float:
    """The signed mean residual of ``keys``' pool (0 with no rows)."""
    pool, _ = pool_rows(keys, residuals)
    return sum(r["log_residual"] for r in pool) / len(pool) if pool else 0.0


def scores(pool) -> list[float]:
    """``|r_i - c_i|`` of every row of ``pool``, ``c_i`` the mean of the pool's rows of the other sources
    (0 where there are none): the error the band's centre makes on a source it did not see."""
    pool = list(pool)
    src = [_source(r, i) for i, r in enumerate(pool)]
    total, count = {}, {}
    for s_, r in zip(src, pool):
        total[s_] = total.get(s_, 0.0) + r["log_residual"]
        count[s_] = count.get(s_, 0) + 1
    t_all, n_all = sum(total.values()), len(pool)
    out = []
    for s_, r in zip(src, pool):
        n = n_all - count[s_]
        c = (t_all - total[s_]) / n if n else 0.0
        out.append(abs(r["log_residual"] - c))
    return out


def conformal_quantile(values, level: float) -> float | None:
    """The ``ceil((n + 1) * level)``-th smallest of ``values`` (None when that exceeds ``n``).

    >>> conformal_quantile(range(1, 10), 0.8), conformal_quantile([1, 2, 3], 0.8)
    (8, None)
    """
    s = sorted(values)
    k = math.ceil((len(s) + 1) * level - 1e-12)
    return s[k - 1] if 1 <= k <= len(s) else None


def normal_interval(values, level: float) -> tuple[float, float]:
    """``(mean, half-width)`` of the normal prediction interval ``mean +- t(n-1) * sd * sqrt(1 + 1/n)``."""
    from .uncertainty import t_quantile
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else abs(mean)
    return mean, t_quantile(0.5 + level / 2, max(n - 1, 1)) * sd * math.sqrt(1 + 1 / n)


def centre_and_spread(keys: dict, residuals, level: float = 0.8) -> tuple[float, float, int, dict]:
    """``(centre, half-width, rows, keys matched)`` of the band of a plan of regime ``keys`` from the
    out-of-source ``residuals`` (rows with ``regime``, ``source``, ``log_residual``); see the module doc."""
    residuals = list(residuals)
    pool, matched = pool_rows(keys, residuals)
    if not pool:
        return 0.0, 0.0, 0, {}
    c = sum(r["log_residual"] for r in pool) / len(pool)
    half = conformal_quantile(scores(pool), level)
    if half is None:
        c, half = normal_interval([r["log_residual"] for r in pool], level)
    return c, half, len(pool), matched
