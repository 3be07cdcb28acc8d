"""The ``calibrated`` section a fitted cluster file carries (:func:`calibrated_section`): the fitted constants,
their spread and the leave-one-out residuals the bands read."""

from __future__ import annotations

from costmodel.trust.calibration import Calibration
from costmodel.trust.calibration_constants import CONSTANTS


def calibrated_section(cal: Calibration, base_name: str, runs_info: list | None = None) -> dict:
    """The ``calibrated`` section of a calibrated cluster file (plain JSON values).

    ``loo_log_residuals`` (``ln(predicted/measured)``, leave-one-out) is what
    :mod:`costmodel.trust.uncertainty` uses to narrow the band of a calibrated cluster.
    """
    consts = {}
    for n in CONSTANTS:
        c = CONSTANTS[n]
        entry = {
            "before": cal.before[n],
            "after": cal.after[n],
            "bounds": [c.lo, c.hi],
            "effect": cal.selection.effect.get(n),
            "fitted": n in cal.names,
        }
        if n in cal.names:
            entry["stderr"] = cal.stderr.get(n)
        else:
            entry["why_not_fitted"] = cal.selection.skipped.get(n, "")
        consts[n] = entry
    runs = []
    for i, label in enumerate(cal.labels):
        d = {"label": label, "error_before": cal.errors_before[i], "error_after": cal.errors_after[i]}
        if cal.loo_errors is not None:
            d["loo_error"] = cal.loo_errors[i]
        if runs_info is not None:
            d.update(runs_info[i])
        runs.append(d)
    return {
        "from": base_name,
        "engine": cal.engine,
        "fitted": list(cal.names),
        "constants": consts,
        "runs": runs,
        "loo_log_residuals": cal.loo_log_residuals,
        "warnings": cal.warnings,
    }
