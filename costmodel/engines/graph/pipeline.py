"""Pipeline schedules at stage granularity: Megatron-LM's 1F1B and interleaved 1F1B, event-driven.

Each stage runs its forward and backward chunk-ops in Megatron-LM's order
(``megatron/core/pipeline_parallel/schedules.py``): ``W_s`` warm-up forwards, then one forward
and one backward alternately, then the cool-down backwards, with ``W_s = p - s - 1`` for 1F1B
(PipeDream-Flush, Narayanan et al. 2021 section 2.2.1) and ``W_s = 2 (p - s - 1) + (v - 1) p``
interleaved (section 2.2.2). An op starts when the stage is free and its input has arrived: the
forward activation from the previous (virtual) stage or the backward gradient from the next,
``t_p2p`` after it was produced (source document section 4). Non-interleaved 1F1B uses blocking
send/recv (Megatron's ``send_forward_recv_backward``), so a stage also waits ``t_p2p`` after each
op that sends ("synchronous issue"); interleaved runs them asynchronously (``overlap_p2p_comm``).

Bubbles come out of the schedule: without communication and with equal stages the makespan is
``(m + (p - 1) / v) (t_f + t_b)`` exactly (section 4's bubble ratio ``(p - 1) / (v m)``):

>>> r = simulate([[1.0]] * 4, [[2.0]] * 4, 8, 0.0)
>>> r.makespan_s, (8 + 3) * 3.0
(33.0, 33.0)

Every dependency of the op at position ``j`` on a stage sits at a position ``<= j`` on its
neighbour (forward chains run down the stages, backward chains up), so positions are solved in
rounds: ``O(m v)`` rounds of vector work over the stages for deep pipelines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.spec.stages import warmup_forwards

NUMPY_MIN_STAGES = 12  # below this a plain loop is faster than numpy rounds


@dataclass(frozen=True)
class PipelineResult:
    """The solved schedule. Arrays are ``(p, 2 m v)``: one row per stage, ops in run order.

    ``is_b``: backward op; ``chunk``, ``mb``: model chunk and micro-batch; ``start``, ``end``
    (seconds). ``pp_exposed_s``: transfer time on the critical path (waiting for an input in
    flight, or for a blocking send); ``critical``: (stage, position) pairs from first to last.
    """

    p: int
    m: int
    v: int
    t_p2p_s: float
    sync: bool
    is_b: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    start: np.ndarray
    end: np.ndarray
    makespan_s: float
    pp_exposed_s: float
    critical: tuple

    @property
    def last_backward_end_s(self) -> np.ndarray:
        """When each stage finishes its last backward (its gradients are complete)."""
        return self.end[:, -1]

    @property
    def first_forward_start_s(self) -> np.ndarray:
        return self.start[:, 0]

    def sends(self, stage: int) -> int:
        """Transfers ``stage`` sends in one step (activations forward, gradients backward)."""
        if self.p == 1:
            return 0
        return 2 * self.m * self.v - self.m * ((stage == self.p - 1) + (stage == 0))

    def transfers(self, stage: int) -> int:
        """Transfers ``stage`` takes part in per step: its sends and as many receives (a stage
        receives an input for every op but the first stage's first-chunk forwards and the last
        stage's last-chunk backwards, the mirror image of what it sends)."""
        return 2 * self.sends(stage)

    def busy_s(self, stage: int) -> float:
        return float(np.sum(self.end[stage] - self.start[stage]))


def warmup(p: int, m: int, v: int, s: int) -> int:
    """Warm-up forwards of stage ``s`` (Megatron-LM ``get_num_warmup_microbatches``).

    >>> [warmup(4, 8, 1, s) for s in range(4)], [warmup(4, 8, 2, s) for s in range(4)]
    ([3, 2, 1, 0], [10, 8, 6, 4])
    """
    return warmup_forwards(p, m, v, s)


def _layout(p: int, m: int, v: int):
    """Op order per stage and each op's dependency (flat index into ``(p, 2T)``, -1 for none)."""
    T = m * v
    k = np.arange(T)
    W = np.array([warmup(p, m, v, s) for s in range(p)])[:, None]
    posF = np.where(k < W, k, 2 * k - W)  # forward k on stage s
    posB = np.where(k < T - W, W + 2 * k + 1, T + k)  # backward k
    grp, r = np.divmod(k, p * v)
    mb_of = grp * p + k % p
    cF = r // p
    cB = v - 1 - cF
    rows = np.arange(p)[:, None]
    n = 2 * T
    is_b = np.zeros((p, n), dtype=bool)
    chunk = np.zeros((p, n), dtype=np.int64)
    mb = np.zeros((p, n), dtype=np.int64)
    dep = np.full((p, n), -1, dtype=np.int64)
    is_b[rows, posB] = True
    chunk[rows, posF], chunk[rows, posB] = cF, cB
    mb[rows, posF], mb[rows, posB] = mb_of, mb_of
    # forward k on stage s > 0 needs forward k on s - 1; on stage 0 chunk c > 0 needs k - p on the last stage
    dep[rows[1:], posF[1:]] = (rows[1:] - 1) * n + posF[:-1]
    wrap = cF > 0
    dep[0, posF[0][wrap]] = (p - 1) * n + posF[p - 1][k[wrap] - p]
    # backward k on stage s < p - 1 needs backward k on s + 1; the last stage's chunk c < v - 1
    # needs backward k - p on stage 0; its last chunk needs its own forward of that micro-batch
    dep[rows[:-1], posB[:-1]] = (rows[:-1] + 1) * n + posB[1:]
    wrapb = cB < v - 1
    dep[p - 1, posB[p - 1][wrapb]] = posB[0][k[wrapb] - p]
    own = ~wrapb
    dep[p - 1, posB[p - 1][own]] = (p - 1) * n + posF[p - 1][k[own] + (v - 1) * p]
    return is_b, chunk, mb, dep


def _sends_after(is_b, chunk, p, v):
    """True where an op's output goes to another stage."""
    rows = np.arange(p)[:, None]
    fwd_sends = (rows < p - 1) | (chunk < v - 1)
    bwd_sends = (rows > 0) | (chunk > 0)
    return np.where(is_b, bwd_sends, fwd_sends)


def simulate(fwd_s, bwd_s, m: int, t_p2p_s: float, sync: bool | None = None) -> PipelineResult:
    """Solve the 1F1B (``v = 1``) or interleaved schedule.

    Parameters
    ----------
    fwd_s, bwd_s : ``[stage][chunk]`` seconds of one micro-batch's forward / backward of that
        model chunk (``v`` = number of chunks per stage).
    m : micro-batches per step (a multiple of ``p`` when ``v > 1``).
    t_p2p_s : seconds for one activation or gradient transfer between neighbouring stages.
    sync : blocking send/recv; default True for 1F1B, False for interleaved.
    """
    F = np.asarray(fwd_s, dtype=float)
    B = np.asarray(bwd_s, dtype=float)
    p, v = F.shape
    if v > 1 and m % p:
        raise ValueError(f"m={m}: must be a multiple of p={p} with interleaving (v={v})")
    sync = (v == 1) if sync is None else sync
    is_b, chunk, mb, dep = _layout(p, m, v)
    n = 2 * m * v
    rows = np.arange(p)[:, None]
    dur = np.where(is_b, B[rows, chunk], F[rows, chunk])
    lag = np.where(dep >= 0, t_p2p_s, 0.0)
    lag[p - 1][(dep[p - 1] // n) == p - 1] = 0.0  # the last stage's own forward -> backward is local
    own_lag = np.zeros((p, n))
    if sync and p > 1:
        own_lag[:, 1:] = np.where(_sends_after(is_b, chunk, p, v)[:, :-1], t_p2p_s, 0.0)
    solve = _solve_numpy if p >= NUMPY_MIN_STAGES else _solve_loop
    end = solve(dur, dep, lag, own_lag, is_b)
    start = end - dur
    crit, exposed = _critical(end, start, dep, lag, own_lag)
    return PipelineResult(p, m, v, t_p2p_s, sync, is_b, chunk, mb, start, end, float(end.max()), exposed, crit)


def _solve_loop(dur, dep, lag, own_lag, is_b):
    p, n = dur.shape
    # column j of each input as a list: round j reads only column j (and each stage's op j - 1)
    d, dp, lg, ol, b = (a.T.tolist() for a in (dur, dep, lag, own_lag, is_b))
    prev = [0.0] * p  # end of each stage's latest op
    flat = [None] * (p * n)  # op (s, j) ends at flat[s * n + j]
    fwd_order, bwd_order = list(range(p)), list(range(p - 1, -1, -1))
    for j in range(n):
        dj, xj, lj, oj, bj = d[j], dp[j], lg[j], ol[j], b[j]
        for order, want in ((fwd_order, False), (bwd_order, True)):
            for s in order:
                if bj[s] != want:
                    continue
                t = prev[s] + oj[s] if j else 0.0
                x = xj[s]
                if x >= 0:
                    e = flat[x]
                    if e is None:
                        raise RuntimeError("pipeline order violates a dependency")
                    e += lj[s]
                    if e > t:
                        t = e
                t += dj[s]
                prev[s] = flat[s * n + j] = t
    return np.array(flat).reshape(p, n)


def _solve_numpy(dur, dep, lag, own_lag, is_b):
    """Round ``j`` computes every stage's ``j``-th op; same-round chains (warm-up forwards down
    the stages, cool-down backwards up) are max-plus prefix scans."""
    p, n = dur.shape
    flat = np.full(p * n + 1, -np.inf)  # last cell: "no dependency"; op (s, j) lives at s * n + j
    depx = np.where(dep >= 0, dep, p * n)
    dep_stage, dep_pos = np.divmod(np.where(dep >= 0, dep, 0), n)
    rows = np.arange(p)
    same = (dep >= 0) & (dep_pos == np.arange(n)[None, :])
    chain_f = same & ~is_b & (dep_stage == rows[:, None] - 1)
    chain_b = same & is_b & (dep_stage == rows[:, None] + 1)
    if np.any(same & ~(chain_f | chain_b)):
        raise RuntimeError("pipeline order violates a dependency")
    any_f, any_b = chain_f.any(axis=0).tolist(), chain_b.any(axis=0).tolist()
    # rounds read columns: store them as contiguous rows
    durT, depT, lagT, olT = dur.T.copy(), depx.T.copy(), lag.T.copy(), own_lag.T.copy()
    cfT, cbT = chain_f.T.copy(), chain_b.T.copy()
    out = np.empty((n, p))
    prev = np.zeros(p)
    a = np.empty(p)
    for j in range(n):
        np.maximum(prev + olT[j], flat[depT[j]] + lagT[j], out=a)
        e = a + durT[j]
        if any_f[j]:
            e = _chain(e, a, durT[j], lagT[j], cfT[j], reverse=False)
        if any_b[j]:
            e = _chain(e, a, durT[j], lagT[j], cbT[j], reverse=True)
        out[j] = e
        flat[j : p * n : n] = e
        prev = e
    return out.T.copy()


def _chain(e, a, d, lag, link, reverse):
    """``e_s = max(a_s, e_prev + lag_s) + d_s`` along linked runs (prev = s - 1, or s + 1 if reverse)."""
    idx = np.nonzero(link)[0]
    if reverse:
        e, a, d, lag, link = e[::-1].copy(), a[::-1], d[::-1], lag[::-1], link[::-1]
        idx = np.nonzero(link)[0]
    lo, hi = idx[0] - 1, idx[-1]
    if hi - lo != len(idx):  # not one contiguous run: plain loop
        for s in idx:
            e[s] = max(a[s], e[s - 1] + lag[s]) + d[s]
    else:  # e_s = P_s + max_{r <= s} (a_r - P_{r-1}) with P the running sum of d (+ lag on links)
        seg = slice(lo, hi + 1)
        step = d[seg] + np.where(link[seg], lag[seg], 0.0)
        P = np.cumsum(step)
        Pm = np.concatenate(([0.0], P[:-1])) + np.where(link[seg], lag[seg], 0.0)
        base = np.concatenate(([e[lo] - d[lo]], a[lo + 1 : hi + 1]))
        Pm[0] = 0.0
        e[seg] = np.maximum.accumulate(base - Pm) + P
    return e[::-1] if reverse else e


def _critical(end, start, dep, lag, own_lag):
    """Walk back from the last op: through its input when that arrived last, else the stage's
    previous op; transfer time on the way is communication the pipeline did not hide."""
    p, n = end.shape
    s, j = np.unravel_index(int(np.argmax(end)), end.shape)
    s, j = int(s), int(j)
    E, S, D, L, O = (a.ravel().item for a in (end, start, dep, lag, own_lag))  # scalar access, no copies
    path, exposed = [(s, j)], 0.0
    tol = 1e-12 * max(1.0, float(end.max()))
    i = s * n + j
    while True:
        t0, x = S(i), D(i)
        arrive = E(x) + L(i) if x >= 0 else -np.inf
        local = E(i - 1) + O(i) if j > 0 else -np.inf
        if x >= 0 and arrive >= t0 - tol and arrive >= local - tol:
            exposed += L(i)
            i = x
        elif j > 0:
            exposed += O(i) if local >= t0 - tol else 0.0
            i -= 1
        else:
            break
        s, j = divmod(i, n)
        path.append((s, j))
    return tuple(reversed(path)), float(exposed)
