"""Fractions of a scheduled graph (:class:`~costmodel.engines.graph.scheduler.Schedule`) as pieces of a stage: the
combined 1F1B pair of an MoE layer (:mod:`costmodel.compose.ep_overlap`) shared between the forward and the
backward it runs (:func:`share`), and a layer run paired in some passes and alone in the others (:func:`mix`).

>>> from costmodel.engines.graph.scheduler import Resources, schedule
>>> from costmodel.engines.graph.nodes import GraphBuilder
>>> from costmodel.spec.presets import load_cluster
>>> b = GraphBuilder(load_cluster("h100-sxm"))
>>> _ = b.compute("x", "gemm", 2.0)
>>> s = schedule(b.graph, Resources(engines=(("nccl-sm", 1),)))
>>> t = b.compute("y", "gemm", 2.0)
>>> s2 = schedule(b.graph, Resources(engines=(("nccl-sm", 1),)))
>>> share(s, 0.25, "fwd").makespan_s, mix(s, s2, 0.75).makespan_s   # 0.75 x 2 + 0.25 x 4
(0.5, 2.5)
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.engines.graph.scheduler import Schedule


def share(s: Schedule, k: float, phase: str) -> Schedule:
    """``k`` of schedule ``s`` as one piece of a stage's ``phase`` (a pair's forward or backward share)."""
    return replace(
        s,
        makespan_s=k * s.makespan_s,
        compute_s=k * s.compute_s,
        interference_s=k * s.interference_s,
        idle_s=k * s.idle_s,
        link_s={x: k * v for x, v in s.link_s.items()},
        exposed_s={x: k * v for x, v in s.exposed_s.items()},
        extra={**s.extra, "phase_s": {phase: s.extra["phase_s"].get(phase, 0.0)}},
    )


def mix(a: Schedule, b: Schedule, k: float) -> Schedule:
    """``k`` of schedule ``a`` and ``1 - k`` of ``b`` (both of one phase): a layer run paired in ``k`` of its
    passes and alone in the rest (:func:`costmodel.compose.ep_overlap.paired_fraction`); ``a``'s timeline."""
    if k >= 1.0:
        return a

    def blend(x: dict, y: dict) -> dict:
        return {s: k * x.get(s, 0.0) + (1 - k) * y.get(s, 0.0) for s in {**x, **y}}

    return replace(
        a,
        makespan_s=k * a.makespan_s + (1 - k) * b.makespan_s,
        compute_s=k * a.compute_s + (1 - k) * b.compute_s,
        interference_s=k * a.interference_s + (1 - k) * b.interference_s,
        idle_s=k * a.idle_s + (1 - k) * b.idle_s,
        link_s=blend(a.link_s, b.link_s),
        exposed_s=blend(a.exposed_s, b.exposed_s),
        exposures=a.exposures + b.exposures,
        extra={**a.extra, "phase_s": blend(a.extra["phase_s"], b.extra["phase_s"])},
    )
