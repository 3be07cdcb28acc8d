"""What a replay reports (:func:`costmodel.serving.scheduler.simulate`): its means (:class:`ServingStats`), percentiles
of its requests, and whether an open loop's engine keeps up with the arrivals (moved out of ``scheduler.py`` as they were);
and the per-request lengths it replays (:func:`request_lengths`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from costmodel.spec.errors import SpecError


@dataclass(frozen=True)
class ServingStats:
    """Means over all requests of one simulated benchmark (seconds)."""

    ttft_s: float
    tpot_s: float
    e2e_s: float
    queue_s: float  # arrival -> admission
    duration_s: float  # time until the last request finished
    output_tokens_per_s: float
    requests_per_s: float
    running_mean: float  # time-averaged running requests
    admitted_limit: int  # min(kv_capacity, max_seqs)
    steps: int
    prefill_steps_per_request: float  # steps a prompt spans, on average
    requests: int
    percentiles: dict = field(default_factory=dict)  # {"ttft_s": {"p50":, "p90":, "p99":}, "tpot_s": ..., "e2e_s": ...}
    offered_rps: float | None = None  # open loop: the arrival rate
    served_rps: float | None = None  # open loop: completions per second while requests kept arriving
    overloaded: bool = False  # open loop: arrivals outpace what the engine serves
    queue_growth_per_s: float = 0.0  # requests the queue gains per second when overloaded
    queue_at_last_arrival: int = 0  # requests waiting for admission when the last one arrived
    #: the token budget never decided a step: every budget of at least this many tokens replays these
    #: same steps (None: it cut a prompt or held one back, so only the budget given does)
    budget_need: int | None = None


def request_lengths(lengths, cached, n: int, input_len: int):
    """``(prompt tokens, output tokens or None, cached prompt tokens)``, one list each indexed by request, for
    :func:`costmodel.serving.scheduler.simulate`: ``lengths`` gives each request's ``(prompt, output)`` (``None``:
    every prompt ``input_len``, and the outputs are left to the replay); ``cached`` each one's prompt tokens in the
    prefix cache (``None``: none). A cached prompt still computes its last token: SGLang matches at most ``len - 1``
    tokens (``Req.init_next_round_input``, ``srt/managers/schedule_batch.py`` l. 784-790, sglang-0.5.6).

    >>> request_lengths([(100, 3), (40, 1)], [100, 0], 2, 70)
    ([100, 40], [3, 1], [99, 0])
    """
    ilen, olen = [input_len] * n, None
    if lengths is not None:
        pairs = [tuple(x) for x in lengths]
        if (
            len(pairs) != n
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for p in pairs for v in p)
            or any(len(p) != 2 for p in pairs)
        ):
            raise SpecError("lengths", lengths, f"{n} (prompt, output) pairs of positive integers, one per request")
        ilen, olen = [a for a, _ in pairs], [b for _, b in pairs]
    if cached is None:
        return ilen, olen, [0] * n
    if len(cached) != n:
        raise SpecError("cached", cached, f"{n} counts of cached prompt tokens, one per request")
    return ilen, olen, [min(max(0, int(c)), a - 1) for c, a in zip(cached, ilen)]


def percentile(xs: list, q: float) -> float:
    """The ``q``-th percentile of ``xs``, linear between order statistics (numpy's default).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 90)
    (2.5, 3.7)
    """
    return _of_sorted(sorted(xs), q)


def _of_sorted(v: list, q: float) -> float:
    """:func:`percentile` of ``v``, sorted already."""
    if not v:
        return 0.0
    h = (len(v) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return round(v[lo] + (v[hi] - v[lo]) * (h - lo), 12)


def _overload(arr: list, adm: list, fin: list, rate: float) -> dict:
    """Open loop: does the engine keep up with the arrivals? Over the second half of the arrival
    window (the first half fills the engine), the completions per second against the offered rate,
    and how fast the queue of requests waiting for admission grows. Overloaded when the engine
    serves under 80% of the offered rate and its queue grows: TTFT then grows with the length of
    the run, and the means of a finite replay say nothing about the steady state. The served rate
    reported when overloaded is every completion over the whole replay (a full engine, then its
    drain), since a short arrival window may see none finish."""
    t_last = max(arr)
    t_half = t_last / 2

    def queued(x: float) -> int:
        return sum(1 for a, m in zip(arr, adm) if a <= x < m)

    served = sum(1 for f in fin if t_half < f <= t_last) / (t_last - t_half) if t_last > 0 else 0.0
    q_half, q_last = queued(t_half), queued(t_last)
    growth = (q_last - q_half) / (t_last - t_half) if t_last > 0 else 0.0
    over = served < 0.8 * rate and q_last > q_half
    if over:  # the engine's rate when full: every completion over the run (the window may hold none)
        served = len(fin) / (max(fin) - min(arr))
        growth = rate - served  # arrivals minus completions: the backlog's growth in the steady state
    return dict(
        offered_rps=rate,
        served_rps=served,
        overloaded=over,
        queue_growth_per_s=growth if over else 0.0,
        queue_at_last_arrival=q_last,
    )
