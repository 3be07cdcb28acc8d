"""Uneven pipelines: the layers per stage a published run's stated ``pp`` and ``vp`` give."""

from __future__ import annotations

import math


def stage_layout(layers: int, pp: int, vp: int) -> tuple[int, tuple[int, ...] | None]:
    """``(vp, layers per stage)`` for ``layers`` on ``pp`` stages with interleave ``vp``.

    Uniform when ``pp*vp`` divides ``layers`` (layout ``None``). Otherwise every stage gets
    ``ceil(layers/pp)`` layers and one layer at a time is taken back from the last stage, the
    first, the second-last, ... until the sum is ``layers``; ``vp`` is kept as stated (a stage's
    layers need not be a multiple of it: :func:`costmodel.spec.stages.chunk_layers`).

    >>> stage_layout(126, 8, 1)
    (1, (15, 16, 16, 16, 16, 16, 16, 15))
    >>> stage_layout(126, 8, 8)
    (8, (15, 16, 16, 16, 16, 16, 16, 15))
    >>> stage_layout(96, 8, 6), stage_layout(96, 8, 5)[1][0], stage_layout(61, 8, 4)
    ((6, None), 12, (4, (7, 8, 8, 8, 8, 8, 7, 7)))
    """
    if pp == 1:
        return 1, None
    if layers % (pp * vp) == 0:
        return vp, None
    most = math.ceil(layers / pp)
    stages = [most] * pp
    order = [i for k in range(pp // 2 + 1) for i in (pp - 1 - k, k)]
    order = list(dict.fromkeys(i for i in order if 0 <= i < pp))
    for i in range(most * pp - layers):
        stages[order[i % pp]] -= 1
    return vp, tuple(stages)
