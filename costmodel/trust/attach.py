"""The one place an estimate gets what says how far to trust it, for every caller (CLI, API, tuner, sweep).

Training (:class:`~costmodel.training.estimate.Estimate`): the 80% step-time band and the notes saying what
widened it (:func:`costmodel.trust.uncertainty.assess`: unstated knobs, ``completion_log_sd``, beyond the data),
the lean of its regime's residuals (:func:`~costmodel.trust.uncertainty.bias_note`) and, when its MFU beats every
published run of its hardware class, dtype and scale, counted alike, or its FP8 speedup beats every published
one, a note saying so (:mod:`costmodel.trust.ceilings`; none on a calibrated cluster). Serving
(:class:`~costmodel.serving.inference.InferenceEstimate`): the bands of TTFT, TPOT and throughput
(:func:`costmodel.trust.serving_band.with_serving_bands`). An estimate that has its band already keeps it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.api import evaluate
from costmodel.serving.inference import InferenceEstimate
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.training.estimate import Estimate
from costmodel.trust.ceilings import fp8_speedup_note, mfu_note
from costmodel.trust.evidence import step_evidence, summary, widening_log_sd
from costmodel.trust.known_runs import known_run_note
from costmodel.trust.serving_band import with_serving_bands
from costmodel.trust.uncertainty import assess, bias_note, device_family


def attach(est, model: ModelSpec, cluster: ClusterSpec, workload: Workload, completion_log_sd: float = 0.0):
    """``est`` with its band and trust notes (see the module); anything else is returned as it is."""
    if isinstance(est, InferenceEstimate):
        return est if est.bands else with_serving_bands(est)
    if workload.mode != "train" or not isinstance(est, Estimate):
        return est
    notes = list(est.notes)
    # like with like: each published run's MFU against the prediction's counted as that run counts attention,
    # at the plan's scale; an FP8 plan also against its own BF16 twin (costmodel.trust.ceilings)
    for note in (
        mfu_note(est, model, cluster, workload, device_family(cluster)),
        fp8_speedup_note(est, model, cluster, workload, evaluate),
    ):
        if note and note not in notes:
            notes.append(note)
    evidence = est.evidence or step_evidence(model, cluster, workload, est)
    est = replace(est, evidence=evidence, evidence_summary=summary(evidence))
    if est.step_time_band_s:
        return replace(est, notes=notes)
    lo, hi, band_notes = assess(model, cluster, workload, est, completion_log_sd=completion_log_sd)
    lo, hi, band_notes = _widen(est.step_time_s, lo, hi, band_notes, widening_log_sd(evidence))
    known, span = known_run_note(model, cluster, est.config, est.step_time_s)
    if known:  # a published run of a plan like this one, predicted far off (costmodel.trust.known_runs)
        lo, hi, band_notes = min(lo, span[0]), max(hi, span[1]), [*band_notes, known]
    lean = bias_note(model, cluster, est.config, est.step_time_s, (lo, hi))
    if lean and lean not in notes:
        notes.append(lean)
    return replace(est, step_time_band_s=(lo, hi), band_notes=band_notes, notes=notes)


def _widen(t: float, lo: float, hi: float, notes: list, log_sd: float, z: float = 1.2816) -> tuple:
    """The band ``(lo, hi)`` about ``t`` widened in quadrature by ``z`` (80%) times ``log_sd``
    (:func:`costmodel.trust.evidence.widening_log_sd`), with a note saying so."""
    if log_sd <= 0 or t <= 0:
        return lo, hi, notes
    down = math.sqrt(math.log(t / lo) ** 2 + (z * log_sd) ** 2) if lo > 0 else 0.0
    up = math.sqrt(math.log(hi / t) ** 2 + (z * log_sd) ** 2)
    note = (
        f"constants no measured run of this device has tested (evidence marked *): band widened by log sd "
        f"{log_sd:.3f} (+-{100 * (math.exp(z * log_sd) - 1):.0f}% at 80%)"
    )
    return t * math.exp(-down), t * math.exp(up), [*notes, note]
