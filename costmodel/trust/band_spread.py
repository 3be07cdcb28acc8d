"""The centre and the spread of an 80% band, from out-of-source residuals (issue 23).

A plan's band rests on the residuals ``r = ln(predicted / measured)`` of measured runs like it. The
unit of evidence is the *source* (one paper, one vendor page): its runs share a software stack, a
measurement habit and a set of filled-in knobs, so they err together. The residuals are read as
``r = centre + source effect + row noise`` (a one-way random-effects model), and a new source's run
falls about the centre with variance ``var_between + var_within``:

* the **centre** and **between-source** part come from the plan's regime *pool* (:func:`pool_rows`:
  the most specific regime with :data:`MIN_POOL` rows from :data:`MIN_SOURCES` sources, backing off
  to coarser ones). The band is centred on the pool's signed mean (the model's bias on runs like
  this; the prediction itself is not moved). Each source ``s`` is scored ``d_s = m_s - c_s``, its mean
  residual less the pool's mean over the *other* sources' rows (0 where there are none: a bias
  that no second source confirms is not taken for a new source's): a nested leave-one-source-out,
  the error the centre makes on a source it never saw. ``var_between = mean(d_s^2) -
  var_within(pool) * mean(1 / n_s)`` (the row noise a source's mean still carries taken out; floored
  at 0).
* the **within-source** part, ``var_within``, comes from the most specific regime whose rows give
  :data:`WITHIN_DOF` degrees of freedom about their own source's mean, *whatever the number of
  sources*: one source's spread on MoE runs says how far one MoE run falls from its neighbours
  even where no second MoE source exists to say how far the sources fall apart.

The half-width is ``z(0.5 + level / 2) * sqrt(var_between + var_within)``. Why this rule (chosen on
the development set, 4 sources, by leave-one-source-out, before the new set was read; figures in
``benchmarks/RESULTS.md`` section 22): the earlier rule (split-conformal quantile of per-row
distances, pool >= 9 rows from any number of sources) backed a regime measured by one source off
to the pool of *all* runs, whose spread is that of the well-predicted dense A100 runs, so the MoE
runs of a new source fell outside; and it counted the rows of one source as independent draws.
:data:`MIN_SOURCES` = 3 is the least with which every nested centre ``c_s`` rests on two sources.
The normal quantile stands on the random-effects model; with 3-9 sources the variance is itself
uncertain and a t quantile would be wider (measured: too wide for the width target on the
development set), so coverage is the check: ``benchmarks/band_coverage.py``.

>>> rows = [{"regime": {"kind": "dense"}, "source": s, "log_residual": e}
...         for s, e in zip("aabbccddee", (0.10, 0.12, 0.05, 0.07, 0.09, 0.11, 0.02, 0.04, 0.14, 0.16))]
>>> c, half, n, keys = centre_and_spread({"kind": "dense"}, rows)
>>> round(c, 3), n, keys, 0.03 < half < 0.09
(0.09, 10, {'kind': 'dense'}, True)
"""

from __future__ import annotations

import math
from functools import lru_cache

#: regime keys, most significant first; the backoff drops them from the right
KEYS = ("kind", "device", "zero", "scale")
#: rows a regime's centre pool needs
MIN_POOL = 9
#: sources a regime's centre pool needs (see the module doc)
MIN_SOURCES = 3
#: degrees of freedom (rows less sources) the within-source variance needs: MIN_POOL rows' worth
WITHIN_DOF = MIN_POOL - 1


def _norm_ppf(p: float) -> float:
    """The standard normal quantile at ``p`` >= 0.5 (bisection on ``erfc``)."""
    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * math.erfc(-mid / math.sqrt(2)) < p else (lo, mid)
    return (lo + hi) / 2


def _source(r: dict, i: int) -> str:
    return r.get("source") or f"row {i}"  # a row without a source stands for one of its own


def _matching(keys: dict, residuals, n: int) -> tuple[list, dict] | None:
    want = {k: keys[k] for k in KEYS[:n] if k in keys}
    if len(want) < n:
        return None
    return [r for r in residuals if all(r["regime"].get(k) == v for k, v in want.items())], want


def _backoff(keys: dict, residuals: list):
    """``(rows, keys matched)`` of each regime matching ``keys``, the most specific first, keys
    dropped from the right of :data:`KEYS`, down to all rows (``{}``)."""
    for n in range(len(KEYS), -1, -1):
        hit = _matching(keys, residuals, n)
        if hit is not None:
            yield hit


def pool_rows(keys: dict, residuals, minimum: int = MIN_POOL, sources: int = MIN_SOURCES) -> tuple[list, dict]:
    """The rows of the most specific regime matching ``keys`` with ``minimum`` rows from ``sources``
    sources, and the keys matched (all rows, ``{}``, when none has)."""
    residuals = list(residuals)
    for pool, want in _backoff(keys, residuals):
        if len(pool) >= minimum and len({_source(r, i) for i, r in enumerate(pool)}) >= sources:
            return pool, want
    return residuals, {}


def centre(keys: dict, residuals) -> float:
    """The signed mean residual of ``keys``' pool (0 with no rows)."""
    pool, _ = pool_rows(keys, residuals)
    return sum(r["log_residual"] for r in pool) / len(pool) if pool else 0.0


def by_source(pool) -> dict:
    """``{source: [log residuals]}`` of ``pool``."""
    out = {}
    for i, r in enumerate(pool):
        out.setdefault(_source(r, i), []).append(r["log_residual"])
    return out


def within_variance(pool) -> tuple[float, int]:
    """``(variance, degrees of freedom)`` of ``pool``'s rows about their own source's mean (pooled;
    ``(0, 0)`` when every source has one row)."""
    groups = by_source(pool).values()
    ss = sum(sum((v - sum(vs) / len(vs)) ** 2 for v in vs) for vs in groups)
    dof = sum(len(vs) for vs in groups) - len(groups)
    return (ss / dof if dof else 0.0), dof


def source_scores(pool) -> list[float]:
    """``d_s = m_s - c_s`` of every source of ``pool``: its mean residual less the mean of the pool's
    rows of the other sources (0 where there are none): the error the centre makes on a new source."""
    groups = by_source(pool)
    total, n_all = sum(sum(v) for v in groups.values()), sum(len(v) for v in groups.values())
    out = []
    for vs in groups.values():
        n = n_all - len(vs)
        c = (total - sum(vs)) / n if n else 0.0
        out.append(sum(vs) / len(vs) - c)
    return out


def between_variance(pool) -> float:
    """The variance of a new source's mean residual about the pool's centre (see the module doc)."""
    groups = by_source(pool)
    d = source_scores(pool)
    if not d:
        return 0.0
    var_w, _ = within_variance(pool)
    noise = var_w * sum(1 / len(vs) for vs in groups.values()) / len(groups)
    return max(0.0, sum(x * x for x in d) / len(d) - noise)


def within_pool(keys: dict, residuals) -> tuple[float, int, dict]:
    """``(variance, dof, keys matched)``: the within-source variance of the most specific regime
    matching ``keys`` with :data:`WITHIN_DOF` degrees of freedom (all rows when none has)."""
    residuals = list(residuals)
    for pool, want in _backoff(keys, residuals):
        var, dof = within_variance(pool)
        if dof >= WITHIN_DOF:
            return var, dof, want
    var, dof = within_variance(residuals)
    return var, dof, {}


def conformal_quantile(values, level: float) -> float | None:
    """The ``ceil((n + 1) * level)``-th smallest of ``values`` (None when that exceeds ``n``): the
    split-conformal quantile (Lei et al., JASA 113 (2018), Sec. 2.2), used by the serving bands.

    >>> conformal_quantile(range(1, 10), 0.8), conformal_quantile([1, 2, 3], 0.8)
    (8, None)
    """
    s = sorted(values)
    k = math.ceil((len(s) + 1) * level - 1e-12)
    return s[k - 1] if 1 <= k <= len(s) else None


def normal_interval(values, level: float) -> tuple[float, float]:
    """``(mean, half-width)`` of the normal prediction interval ``mean +- t(n-1) * sd * sqrt(1 + 1/n)``."""

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else abs(mean)
    return mean, t_quantile(0.5 + level / 2, max(n - 1, 1)) * sd * math.sqrt(1 + 1 / n)


def centre_and_spread(keys: dict, residuals, level: float = 0.8) -> tuple[float, float, int, dict]:
    """``(centre, half-width, rows, keys matched)`` of the band of a plan of regime ``keys`` from the
    out-of-source ``residuals`` (rows with ``regime``, ``source``, ``log_residual``); see the module doc.
    ``rows`` and ``keys matched`` are the centre pool's."""
    residuals = list(residuals)
    pool, matched = pool_rows(keys, residuals)
    if not pool:
        return 0.0, 0.0, 0, {}
    c = sum(r["log_residual"] for r in pool) / len(pool)
    var_w, _, _ = within_pool(keys, residuals)
    half = _norm_ppf(0.5 + level / 2) * math.sqrt(between_variance(pool) + var_w)
    return c, half, len(pool), matched


@lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile by bisection on its CDF (numeric integration; dof >= 1)."""
    z = _norm_ppf(p)
    if dof >= 200:
        return z

    def cdf(t):
        # regularised incomplete beta via continued fraction would be exact; Simpson on the pdf is plenty
        n = 400
        a, b = 0.0, t
        h = (b - a) / n
        c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
        f = [math.exp(c - (dof + 1) / 2 * math.log1p((a + i * h) ** 2 / dof)) for i in range(n + 1)]
        s = f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2])
        return 0.5 + s * h / 3

    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2
