"""The one composition of per-stage costs into a training step time (scalars or numpy arrays).

Every caller that turns per-stage, per-micro-batch costs into a step time goes through this
module: :func:`costmodel.api.evaluate` (analytic engine, arrays over the pipeline
stages), :class:`costmodel.training.fastpath.Scorer` (arrays over one representative per stage class)
and :mod:`search.tables` (arrays over the layer count of a stage, for CP-SAT, whose objective
``(m - 1/v) t + s + d + o`` with ``t >= time[n]``, ``s = sum time[n] / v``, ``d >= dp[n]``,
``o >= opt[n]`` is :func:`step_time` written as constraints). The op-graph engine simulates the
pipeline and the DP tail instead and reports the same :class:`Composition`.

::

    step = (m - 1/v) * max_s t_mb(s) + sum_s t_mb(s) / v
           + max_s (dp_exposed(s) + zero_exposed(s)) + max_s optimizer(s)

The pipeline term is the makespan of (interleaved) 1F1B with stages of unequal time: the first
micro-batch passes every stage once (``sum_s t_mb(s)``, in ``v`` chunks of ``1/v`` each) and
the slowest stage sets the pace of the other ``m - 1/v`` (Alpa, Zheng et al. OSDI 2022, eq. 2:
``sum_i t_i + (B - 1) max_j t_j``, here for ``v`` model chunks per stage). With equal stages it is
``M * t`` with ``M = m + (p - 1) / v``, micro-batches plus the bubble (Narayanan et al. 2021,
sections 2.2.1-2.2.2); it matches :mod:`costmodel.engines.graph.pipeline`'s simulated schedule exactly
when the slowest stage is the last one or stages are equal, and from above otherwise.

Under any pipeline layout (:mod:`costmodel.spec.layout`) a stage's ``t_mb`` is the sum of its virtual
stages' times, each holding its own layers (and the embedding / LM head where the layout puts
them); the closed form sees the virtual stages through those sums, while the op-graph engine
schedules every virtual stage of the layout (:func:`costmodel.engines.graph.pipeline.simulate` takes
``[stage][chunk]`` times), so unequal chunks within a stage are priced there.

A stage's end-of-step DP traffic (:func:`dp_exposure`): its gradient reduction, split into
``buckets`` collectives, pipelines with the stage's last backward (one bucket is reduced while
the next fills: PyTorch DDP, Li et al. 2020, section 3.2.3; Megatron ``--overlap-grad-reduce``)
less the 1F1B head start of ``stage`` backward steps (stage ``s`` finishes its last backward
``s`` backward-steps before stage 0); the ZeRO-1/2 parameter gather hides behind the next
step's first forward, bucket by bucket.

>>> step_time(np.array([2.0, 3.0]), np.array([0.5, 0.1]), np.array([0.2, 0.2]), m=8, p=2, v=1)
26.7
>>> round(float(dp_exposure(1.0, 0.0, 0.0, 0.0, 4, 2.0, 1.0, 0)[0]), 3)   # 1 s of comm, 4 buckets, 2 s window
0.25
>>> dp_exposure(1.0, 0.0, 0.0, 0.0, 0, 2.0, 1.0, 0)[0]   # no buckets: after backward, all exposed
1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compose.overlap import exposed_s


def multiplier(m, p, v):
    """``M = m + (p - 1) / v``: micro-batch times per step of a pipeline of equal stages."""
    return m + (p - 1) / v


def pipeline_s(t_max, t_sum, m, v):
    """``(m - 1/v) * t_max + t_sum / v``: the (interleaved) 1F1B makespan of stages whose slowest
    micro-batch time is ``t_max`` and whose times sum to ``t_sum`` (module docstring)."""
    return (m - 1.0 / v) * t_max + t_sum / v


def dp_buckets(grad_bytes, bucket_bytes):
    """Gradient buckets of ``bucket_bytes`` (0: one reduction after backward, not overlapped)."""
    if bucket_bytes <= 0:
        return 0 if np.ndim(grad_bytes) == 0 else np.zeros(np.shape(grad_bytes))
    out = np.maximum(1.0, np.rint(np.asarray(grad_bytes, float) / bucket_bytes))
    return int(out) if np.ndim(out) == 0 else out


def bucketed_s(t_whole_s, latency_s, buckets):
    """Seconds of a collective split into ``buckets``: the whole volume once plus the latency of
    every bucket after the first (PyTorch DDP / Megatron buckets are separate collectives)."""
    out = t_whole_s + np.maximum(np.asarray(buckets) - 1, 0) * latency_s
    return float(out) if np.ndim(out) == 0 else out


def even_pieces(buckets, v):
    """``(k_first, k_rest)`` of ``buckets`` spread evenly over ``v`` chunks, each at least one
    piece; ``(0, 0)`` (not overlapped) where ``buckets = 0`` (:func:`dp_exposure`)."""
    k = np.where(np.asarray(buckets) > 0, np.maximum(np.asarray(buckets, float) / v, 1.0), 0.0)
    k = float(k) if np.ndim(k) == 0 else k
    return k, k


def dp_exposure(
    t_grad,
    t_param,
    lat_grad,
    lat_param,
    buckets,
    backward_s,
    forward_s,
    stage,
    p=1,
    v=1,
    layers=1,
    pieces=None,
    interference=0.0,
):
    """(gradient exposed, parameter-gather exposed, gradient link, parameter link) seconds of a
    stage's end-of-step DP traffic; every argument may be a numpy array (broadcast).

    ``buckets``: the collectives issued (every one after the first pays ``lat_grad`` /
    ``lat_param`` again). ``pieces``: ``(k_first, k_rest)``, how many pieces the reduction of chunk
    0 and of each later chunk pipelines with that chunk's last backward
    (:meth:`costmodel.physics.mechanics.grad_buckets.GradBuckets.pieces`; ``k_first = 0``: issued after backward, not
    overlapped); ``None``: ``buckets / v`` pieces each, not overlapped when ``buckets = 0``.

    Gradients (the closed form of :mod:`costmodel.engines.graph.dp`'s schedule): a stage's gradients
    are complete chunk by chunk during the last micro-batch's backward; with ``v`` model chunks
    the last micro-batch's backward of chunk ``c`` ends ``c * p`` chunk-backwards ``b_c`` before
    the stage's last one (Megatron's interleaved cool-down runs chunks ``v-1 .. 0``). The
    reductions queue in that order, ``buckets / v`` pipelined with each chunk's backward, so
    the stage finishes ``F = max_c [exposed(t_grad (c + 1) / v, b_c, buckets / v) - c p b_c]``
    after its last backward, and its last backward ends ``stage * b_c`` before stage 0's (the
    1F1B drain). ``buckets = 0``: one reduction after backward, fully exposed. ``interference``: the device's
    ``comm_compute_interference`` where the reductions run on SM-based engines (:func:`dp_interference`), else 0:
    while they run beside the backward, its compute runs at ``1 - interference`` of its speed (the op graph's
    scheduler, :mod:`costmodel.engines.graph.scheduler`), so the last backward ends ``interference`` times the
    reduction time it overlapped later, and the last piece (``t_grad / (v k_first)``) goes after it:
    ``max(tail, interference (t_grad - tail) + t_grad / (v k_first))`` (a reduction longer than the backward hides
    the slowdown behind itself). Until 2026-12-06 the closed form left this out (GPT 16B / 192 H100, DP 96, 160 MB
    buckets: 2.0 ms exposed against the op graph's 27.7 ms; ``tests/test_dp_interference.py``).

    Parameters (ZeRO-1/2, Megatron ``--overlap-param-gather``): gathered in layer order behind
    the next step's first forward; layer ``i`` of chunk ``c`` is first needed
    ``(c p + stage + i / n_c) f_c`` into the step (micro-batch 0 passes the ``p v`` virtual
    stages in turn), and the gather is late by the largest ``t_param (j + 1) / layers - need_j``;
    linear within a chunk and across chunks, so its maximum is at an end of the first or last
    chunk. ``buckets = 0``: gathered after the optimizer step, fully exposed.
    """
    args = (t_grad, t_param, lat_grad, lat_param, buckets, backward_s, forward_s, stage, layers)
    k_first, k_rest = even_pieces(buckets, v) if pieces is None else pieces
    if not any(isinstance(a, np.ndarray) for a in args + (k_first, k_rest)):
        return _dp_exposure_scalar(*args[:8], p, v, args[8], k_first, k_rest, interference)
    t_grad = bucketed_s(t_grad, lat_grad, buckets)
    t_param = bucketed_s(t_param, lat_param, buckets)
    b_c = np.asarray(backward_s, float) / v
    f_c = np.asarray(forward_s, float) / v
    on = np.asarray(k_first) > 0
    k_f, k_r = np.maximum(np.asarray(k_first, float), 1.0), np.maximum(np.asarray(k_rest, float), 1.0)
    # every chunk c at once along a leading axis (the same elementwise arithmetic as one c at a time)
    c = np.arange(v).reshape((v,) + (1,) * max(np.ndim(t_grad), np.ndim(b_c), np.ndim(k_f), np.ndim(k_r)))
    k_c = np.where(c == 0, k_f, k_r)
    tail = np.max(exposed_s(np.asarray(t_grad * (c + 1) / v, float), b_c, k_c) - c * p * b_c, axis=0)
    tail = np.maximum(tail, interference * np.maximum(0.0, t_grad - tail) + t_grad / (v * k_f))
    ex = np.maximum(0.0, np.where(on, tail, t_grad) - np.asarray(stage) * b_c)
    n = np.maximum(np.asarray(layers, float), 1.0)
    n_c = n / v
    late = []
    for c in {0, v - 1}:
        start = (c * p + np.asarray(stage)) * f_c
        late.append(t_param * (c * n_c + 1) / n - start)
        late.append(t_param * (c + 1) / v - start - (n_c - 1) / n_c * f_c)
    zx = np.where(on, np.maximum(0.0, np.max(late, axis=0)), t_param)
    if np.ndim(ex) == 0 and np.ndim(zx) == 0:
        return float(ex), float(zx), t_grad, t_param
    return ex, zx, t_grad, t_param


def _dp_exposure_scalar(
    t_grad, t_param, lat_grad, lat_param, buckets, backward_s, forward_s, stage, p, v, layers, k_first, k_rest, coef
):
    """:func:`dp_exposure` on plain numbers (the fast path scores thousands of plans a second)."""
    extra = max(buckets - 1, 0)
    t_grad, t_param = t_grad + extra * lat_grad, t_param + extra * lat_param
    b_c, f_c = backward_s / v, forward_s / v
    if k_first > 0:
        k_f, k_r = max(k_first, 1.0), max(k_rest, 1.0)
        tail = max(exposed_s(t_grad * (c + 1) / v, b_c, k_f if c == 0 else k_r) - c * p * b_c for c in range(v))
        tail = max(tail, coef * max(0.0, t_grad - tail) + t_grad / (v * k_f))
        ex = max(0.0, tail - stage * b_c)
        n = max(float(layers), 1.0)
        n_c = n / v
        late = max(
            max(
                t_param * (c * n_c + 1) / n - (c * p + stage) * f_c,
                t_param * (c + 1) / v - (c * p + stage) * f_c - (n_c - 1) / n_c * f_c,
            )
            for c in {0, v - 1}
        )
        zx = max(0.0, late)
    else:
        ex, zx = max(0.0, t_grad - stage * b_c), t_param
    return float(ex), float(zx), float(t_grad), float(t_param)


def step_time(t_mb, dp_exposed, optimizer, m, p, v, weights=None):
    """:func:`pipeline_s` ``+ max dp_exposed + max optimizer`` over the last axis (the stages);
    ``weights``: how many of the ``p`` stages each entry stands for (default: one each)."""
    t_mb = np.asarray(t_mb, float)
    w = np.ones(t_mb.shape[-1]) if weights is None else np.asarray(weights, float)
    out = (
        pipeline_s(np.max(t_mb, axis=-1), np.sum(t_mb * w, axis=-1), m, v)
        + np.max(dp_exposed, axis=-1)
        + np.max(optimizer, axis=-1)
    )
    return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class Composition:
    """A step time and its parts (seconds): ``step_s = pipeline_s + dp_s + zero_s + optimizer_s``.

    ``pipeline_s`` holds the micro-batches and the bubble (``bubble_s``: beyond ``m`` times the
    slowest stage); ``dp_s``/``zero_s`` the gradient
    reduction and parameter gather left after the pipeline; ``slow_stage``/``dp_stage`` the
    stages that set the pipeline pace and the end-of-step exposure.
    """

    pipeline_s: float
    bubble_s: float
    dp_s: float
    zero_s: float
    dp_link_s: float
    zero_link_s: float
    optimizer_s: float
    slow_stage: int
    dp_stage: int

    @property
    def step_s(self) -> float:
        return self.pipeline_s + self.dp_s + self.zero_s + self.optimizer_s

    def parts(self) -> dict:
        return {"pipeline": self.pipeline_s, "dp": self.dp_s, "zero": self.zero_s, "optimizer": self.optimizer_s}


def compose(
    t_mb,
    fwd,
    backward,
    t_grad,
    t_param,
    lat_grad,
    lat_param,
    buckets,
    pieces,
    optimizer,
    stages,
    layers,
    m: int,
    p: int,
    v: int,
    weights=None,
    interference: float = 0.0,
) -> Composition:
    """The step of one plan from arrays over (some of) its stages: ``stages`` are their indices
    (the head start of each), the other arrays their per-micro-batch time, forward, backward
    (with recompute), DP collective terms, bucket count and pieces (:func:`dp_exposure`), optimizer
    time and layer count;
    ``weights`` how many stages each stands for (default one each: all ``p`` stages given);
    ``interference`` the DP reductions' slowdown of the backward they overlap (:func:`dp_exposure`)."""
    t_mb, stages = [float(x) for x in t_mb], list(stages)
    dps = [
        dp_exposure(*terms, p=p, v=v, layers=n, pieces=k, interference=interference)
        for terms, n, k in zip(
            zip(t_grad, t_param, lat_grad, lat_param, buckets, backward, fwd, stages), layers, pieces
        )
    ]
    slow = max(range(len(t_mb)), key=lambda i: (t_mb[i], -i))  # the first slowest stage
    # the stage with the most end-of-step exposure (ties: the later stage, as evaluate always did)
    d = max(range(len(dps)), key=lambda i: (dps[i][0] + dps[i][1], i))
    ex, zx, lg, lp = dps[d]
    w = [1] * len(t_mb) if weights is None else list(weights)
    pipe = pipeline_s(t_mb[slow], sum(t * k for t, k in zip(t_mb, w)), m, v)
    return Composition(
        pipeline_s=pipe,
        bubble_s=pipe - m * t_mb[slow],
        dp_s=ex,
        zero_s=zx,
        dp_link_s=lg,
        zero_link_s=lp,
        optimizer_s=float(max(optimizer)),
        slow_stage=int(stages[slow]),
        dp_stage=int(stages[d]),
    )
