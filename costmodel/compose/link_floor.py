"""The link floor of one layer in the closed form (:mod:`costmodel.engines.analytic`): a link, or a group of streams
that share DMA engines, carries one transfer at a time, so a layer lasts at least as long as the communication on
its busiest link; and the link (``intra``/``inter``) each strategy's collectives cross."""

from __future__ import annotations

from costmodel.compose.comm_ledgers import WHY_ENGINE, WHY_LINK
from costmodel.compose.overlap import CommLedger
from costmodel.physics.comm import dma
from costmodel.physics.comm.groups import group_stride, layout
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec


def link_floor(
    led: CommLedger, compute_s: float, scopes: dict, cluster: ClusterSpec, rec_led, a: dma.Assignment | None = None
) -> None:
    """A link carries one byte at a time: the layer lasts at least as long as the communication
    on its busiest link (overlapping collectives share it, as the op-graph scheduler's links do).
    Likewise streams that share DMA engines (a group of the assignment ``a``, :mod:`costmodel.physics.comm.dma`)
    run one at a time: the layer lasts at least as long as their communication together. The
    shortfall is charged to the largest communication on that link or those engines. ``scopes``:
    the link each strategy crosses (:func:`link_scopes`)."""
    link = dict(led.link_s)
    if rec_led is not None:  # the recompute's communication runs again
        for k, v in rec_led.link_s.items():
            link[k] = link.get(k, 0.0) + v
    coef = cluster.device.comm_compute_interference
    total = (
        compute_s
        + led.total_exposed_s
        + led.interference_s(coef)
        + (rec_led.total_exposed_s + rec_led.interference_s(coef) if rec_led is not None else 0.0)
    )
    lanes = [({k: v for k, v in link.items() if scopes.get(k) == scope}, WHY_LINK) for scope in ("intra", "inter")]
    for group in dma.shared_pools(a):
        lanes.append(({k: v for k, v in link.items() if dma.STREAM_OF.get(k) in group}, WHY_ENGINE))
    for on, why in lanes:
        short = sum(on.values()) - total
        if on and short > 1e-12:
            k = max(on, key=on.get)
            led.exposed_s[k] = led.exposed_s.get(k, 0.0) + short
            led.reasons.setdefault(k, why)
            total += short


def link_scopes(c: ParallelConfig, cluster: ClusterSpec) -> dict:
    """The link (``intra``/``inter``) each strategy's collectives of one layer cross."""
    gpn = cluster.domain
    return {
        "tp": "intra",
        "sp": "intra",
        "cp": layout(c.cp, c.tp, gpn).scope,
        "ep": layout(c.ep, 1, gpn).scope,
        "zero": layout(c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp), gpn).scope,
    }
