"""The memory verdict of a plan: ``fits``, ``tight`` or ``does not fit`` (issue 42), the one place of the rule.

The predicted peak per GPU includes an allocator fragmentation allowance,
:data:`costmodel.physics.memory.stage_memory.FRAGMENTATION` of the activations
(:func:`~costmodel.physics.memory.stage_memory.reserved_bytes`), whose size is an assumption (evidence
"assumed", ``costmodel/trust/evidence.py``). So the verdict has three states against a capacity (the HBM, or
the HBM less the user's headroom):

* ``fits``: the peak with the allowance is within the capacity;
* ``tight``: it is over, but the peak without the allowance is within: the plan may run, it is not assured;
* ``does not fit``: over even without the allowance.

Who reads which: a free search (the planner choosing the plan) keeps only ``fits`` plans, since a search exploits
every optimism; a plan the user pinned (``evaluate``, a ``recommend`` with every degree given) that is ``tight`` is
accepted with :func:`tight_warning` (``search.solve``, ``planner.api``).

>>> G = 2**30
>>> memory_verdict(170 * G, 165 * G, 173 * G), memory_verdict(176.6 * G, 169.2 * G, 173 * G)
('fits', 'tight')
>>> memory_verdict(180 * G, 174 * G, 173 * G)
'does not fit'
>>> tight_warning(176.6 * G, 169.2 * G, 173 * G)
'memory tight: 176.6 GiB with the assumed 5% fragmentation allowance, 169.2 GiB without, of 173.0 GiB; it may not fit'
"""

from __future__ import annotations

from costmodel.spec.units import GiB

from .stage_memory import FRAGMENTATION, allowance_bytes

FITS, TIGHT, DOES_NOT_FIT = "fits", "tight", "does not fit"
VERDICTS = (FITS, TIGHT, DOES_NOT_FIT)


def peak_without_allowance(stages) -> float:
    """The largest per-stage peak of ``stages`` (dicts with ``StageMemory.to_dict``'s ``total_bytes`` and
    ``activations_bytes``) less each stage's fragmentation allowance
    (:func:`~costmodel.physics.memory.stage_memory.allowance_bytes`) (0.0 for no stage).

    >>> peak_without_allowance([{"total_bytes": 110.0, "activations_bytes": 100.0}, {"total_bytes": 107.0,
    ...                         "activations_bytes": 20.0}])
    106.0
    """
    return max((m["total_bytes"] - allowance_bytes(m["activations_bytes"]) for m in stages), default=0.0)


def memory_verdict(peak_bytes: float, without_allowance_bytes: float, capacity_bytes: float) -> str:
    """:data:`FITS`, :data:`TIGHT` or :data:`DOES_NOT_FIT` of a plan whose peak per GPU is ``peak_bytes`` with the
    fragmentation allowance and ``without_allowance_bytes`` without it, against ``capacity_bytes``."""
    if peak_bytes <= capacity_bytes:
        return FITS
    if without_allowance_bytes <= capacity_bytes:
        return TIGHT
    return DOES_NOT_FIT


def tight_warning(peak_bytes: float, without_allowance_bytes: float, capacity_bytes: float) -> str:
    """The one-line warning a ``tight`` plan the user pinned is accepted with: both peaks and the capacity."""
    return (
        f"memory tight: {peak_bytes / GiB:.1f} GiB with the assumed {100 * FRAGMENTATION:g}% fragmentation "
        f"allowance, {without_allowance_bytes / GiB:.1f} GiB without, of {capacity_bytes / GiB:.1f} GiB; "
        "it may not fit"
    )
