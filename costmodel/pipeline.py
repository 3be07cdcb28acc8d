"""Pipeline schedules: bubbles, in-flight micro-batches and stage layout.

1F1B (PipeDream-Flush, Narayanan et al. 2021 section 2.2.1): bubble fraction ``(p-1)/m``.
Interleaved 1F1B with ``v`` model chunks per stage (same paper, section 2.2.2): ``(p-1)/(v*m)``.

>>> bubble_fraction(8, 64, 1), bubble_fraction(8, 64, 3)
(0.109375, 0.036458333333333336)
"""

from __future__ import annotations


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble time over ideal time, ``(p - 1) / (v * m)``."""
    return (p - 1) / (v * m)


def pipeline_time_s(t_microbatch_s: float, p: int, m: int, v: int = 1) -> float:
    """Time of the pipelined part of a step: ``(m + (p - 1) / v) * t`` for the slowest stage's per-micro-batch time."""
    return (m + (p - 1) / v) * t_microbatch_s


def in_flight_chunks(p: int, m: int, v: int, stage: int) -> int:
    """Model chunks whose activations a stage holds at its peak (each chunk is ``L/(p*v)`` layers).

    1F1B: stage ``i`` holds ``p - i`` micro-batches (Narayanan et al. 2021, section 2.2.1).
    Interleaved: Megatron-LM's warm-up count ``2 (p - i - 1) + (v - 1) p`` plus the one in
    flight (``megatron/core/pipeline_parallel/schedules.py``), which for stage 0 gives
    Korthikanti et al. 2023's ``p (1 + (p-1)/(p v))`` micro-batches of a full stage.

    >>> in_flight_chunks(8, 64, 1, 0), in_flight_chunks(8, 64, 1, 7), in_flight_chunks(4, 16, 2, 0)
    (8, 1, 11)
    """
    if p == 1:
        return 1 * v if v > 1 else 1
    if v == 1:
        return min(p - stage, m)
    return min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v)


def stage_layers(layers: int, p: int, stage: int, split: tuple[int, ...] | None = None) -> range:
    """Layer indices held by ``stage``: a uniform split, or ``split[i]`` layers on stage ``i``
    (interleaving changes the order in which they run, not how many there are).

    >>> stage_layers(8, 2, 1), stage_layers(8, 2, 1, (5, 3))
    (range(4, 8), range(5, 8))
    """
    if split is None:
        per = layers // p
        return range(stage * per, (stage + 1) * per)
    start = sum(split[:stage])
    return range(start, start + split[stage])
