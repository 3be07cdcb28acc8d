"""Lower bounds on the table step time of a :class:`~search.choice.Choice` over all its splits.

Used by :mod:`search.presolve` to discard choices that cannot beat an incumbent, and to give
the CP-SAT model a per-choice bound. Each bound relaxes the stage split and leaves out terms
that are never negative, so it never exceeds the exact table objective (tests check this):

* **pipeline**: ``(m - 1/v) * slowest + sum / v`` (:func:`costmodel.compose.step.pipeline_s`); the sum
  of the stages is at least ``total``, every layer, recompute, embedding and LM head once; the
  slowest stage at least the mean ``total / p``, at least the largest stage of any split the
  search allows (first, equal middle stages, last), and at least the "water level" ``tau`` at
  which stages filled up to ``tau`` (each capped by the layers its memory allows) hold all ``L``
  layers;
* **optimizer**: at least that of the largest stage (:meth:`Bounds.largest_stage`), or of the
  smallest first / last stage;
* **DP exposure**: on stage 0 (no 1F1B head start) at least ``max(0, t - window)`` for the
  gradient reduction and the parameter gather, minimised over stage 0's possible sizes.

Memory is bounded below by model state plus the stored activations of the in-flight
micro-batches and the reserve (no working layer, logits, embedding output or ZeRO-3 buffers).

The modules, one bound each, mixed into :class:`Bounds` (:mod:`.core`, with the strong bound that
adds them up): :mod:`.terms` (what they share: layer terms, position extras, the PP sends' floor),
:mod:`.pipeline`, :mod:`.optimizer`, :mod:`.memory` (the memory screens) and :mod:`.dp`.
"""

from .core import Bounds
from .terms import STAGE_OF


__all__ = ["STAGE_OF", "Bounds"]
