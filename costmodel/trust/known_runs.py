"""A published run of a plan like the one predicted, and what its error says about this prediction (issue 42 item 2).

The band of :mod:`costmodel.trust.uncertainty` pools the residuals of a whole regime. When the data hold a run of
the same model on the same GPU at the same scale with the same model-parallel shape (TP, CP, EP: the layout that
decides the plan's communication), that run's own residual is the best evidence there is about this plan: a large
one (beyond :data:`LARGE`) gets a note naming the run and the band is widened to hold the prediction moved by that
run's error. It never moves the prediction itself: the residual of one run is not a constant to fit.
"""

from __future__ import annotations

import math

from costmodel.trust.uncertainty import stored_residuals

#: a known run's |error| that gets a note and widens the band (the 80% band of the pooled residuals is about
#: +-15% about its centre: benchmarks/RESULTS.md, band coverage)
LARGE = 0.15

#: the plan fields a known run must share with the plan (besides model, GPU and GPU count)
SHAPE = ("tp", "cp", "ep")


def known_runs(model, cluster, config, residuals=None) -> list[dict]:
    """Stored residual rows of published runs of ``model`` on ``cluster``'s GPU at ``config``'s GPU count whose
    TP, CP and EP equal ``config``'s, the exact plan (PP and VP too) first."""
    rows = stored_residuals() if residuals is None else residuals
    hits = [
        r
        for r in rows
        if r.get("model") == model.name
        and r.get("device") == cluster.device.name
        and r.get("gpus") == config.gpus
        and all(r.get("plan", {}).get(k) == getattr(config, k) for k in SHAPE)
    ]
    exact = [r for r in hits if all(r["plan"].get(k) == getattr(config, k) for k in ("pp", "vp"))]
    return exact + [r for r in hits if r not in exact]


def known_run_note(model, cluster, config, step_s: float, residuals=None) -> tuple[str, tuple[float, float] | None]:
    """``(note, (lo, hi))``: the worst known run of a plan like ``config`` (:func:`known_runs`) whose error exceeds
    :data:`LARGE`, the sentence naming it and the step time moved by that run's error (``("", None)`` when none)."""
    worst = max(known_runs(model, cluster, config, residuals), key=lambda r: abs(r["log_residual"]), default=None)
    if worst is None or abs(math.exp(worst["log_residual"]) - 1) <= LARGE:
        return "", None
    err = math.exp(worst["log_residual"]) - 1
    p = worst["plan"]
    moved = step_s * math.exp(-worst["log_residual"])
    note = (
        f"a published run of this model on {worst['gpus']} of these GPUs at TP{p['tp']} CP{p['cp']} EP{p['ep']} "
        f"(PP{p['pp']} VP{p['vp']}; {worst['source']} row {worst['row_id']}, measured {worst['measured_s']:.3g} s) "
        f"is predicted {100 * err:+.0f}%: this plan may be off as far (band widened to {moved:.3g} s)"
    )
    return note, (min(step_s, moved), max(step_s, moved))
