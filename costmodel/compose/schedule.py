"""Pipeline schedule time: the bubble and the exposed part of interleaved sends.

1F1B (PipeDream-Flush, Narayanan et al. 2021 section 2.2.1): bubble fraction ``(p-1)/m``.
Interleaved 1F1B with ``v`` model chunks per stage (same paper, section 2.2.2): ``(p-1)/(v*m)``.

>>> bubble_fraction(8, 64, 1), bubble_fraction(8, 64, 3)
(0.109375, 0.036458333333333336)
"""

from __future__ import annotations

import numpy as np


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble time over ideal time, ``(p - 1) / (v * m)``."""
    return (p - 1) / (v * m)


def interleaved_p2p_exposed_s(t_p2p_s, chunk_fwd_s, p: int, m: int, v: int):
    """Exposed seconds per PP send of an interleaved (``v > 1``) schedule, for the closed form's
    per-micro-batch stage time (:func:`costmodel.compose.step.pipeline_s`): the steady state hides a send
    behind one chunk's forward (``max(0, t - chunk_fwd)``), and the fill and drain do not. The
    first micro-batch's forward crosses all ``p v - 1`` virtual-stage boundaries one after the
    other, the last one's backward crosses them back, and Megatron's interleaved order (groups of
    ``p`` micro-batches per chunk, ``schedules.py``'s warm-up of ``2 (p - s - 1) + (v - 1) p``
    forwards) leaves no other work to run meanwhile: the step lasts ``2 (p v - 1)`` transfers
    longer, whatever ``m`` (the op-graph schedule :func:`costmodel.engines.graph.pipeline.simulate`, with
    asynchronous sends, gives exactly that while ``t <= chunk_fwd``). Spread over the ``M = m +
    (p - 1) / v`` micro-batch times of the composition and the ``2 v`` sends of a micro-batch:
    ``(p v - 1) min(t, chunk_fwd) / (v M)`` per send; the part of ``t`` beyond a chunk's forward is
    already exposed in the steady-state term. Scalars or numpy arrays.

    >>> round(float(interleaved_p2p_exposed_s(0.01, 1.0, 4, 8, 4)) * 2 * 4 * (8 + 3 / 4), 6)   # 2 (p v - 1) t
    0.3
    """
    hidden = np.minimum(t_p2p_s, chunk_fwd_s)
    return (t_p2p_s - hidden) + (p * v - 1) * hidden / (v * (m + (p - 1) / v))
