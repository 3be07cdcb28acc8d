"""Calibrate a cluster's efficiency constants to measured step times.

The constants a real cluster changes (achieved GEMM efficiency, network efficiency under real
traffic, how much concurrent communication slows compute) are
:data:`costmodel.trust.calibration_constants.CONSTANTS`, each with physical bounds. :func:`fit` finds the values that minimise the sum of squared log errors
``sum_i ln(predicted_i / measured_i)^2`` over the measured runs, holding every other number of
the cluster fixed, by a bounded Levenberg-Marquardt (damped Gauss-Newton) iteration on
finite-difference Jacobians (numpy only).

Identifiability. A constant is fitted only if the runs can determine it: the sensitivity
matrix ``S[i, j] = d ln(predicted_i)`` for a typical error of constant ``j``
(:attr:`costmodel.trust.calibration_constants.Constant.scale_of`, about 10% of an efficiency) ranks the
constants by how much they move these runs' predictions; one that moves none by 0.2% is left out, and so is one whose
effect is nearly a combination of those already chosen (condition number of the chosen,
unit-normalised columns above :data:`COND_MAX`). At most one constant is fitted to one or two
runs and at most ``n - 1`` to ``n >= 3`` runs, so a fit always leaves a residual to check
it by. With three or more runs the report carries leave-one-out errors: each run predicted by
a fit to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.trust.calibration_constants import CONSTANTS, CalibrationError, apply, constant, get_value

#: largest condition number of the chosen (unit-normalised) sensitivity columns
COND_MAX = 10.0
#: a constant whose typical error moves no run's prediction by this much (RMS of ln) is not fitted
MIN_EFFECT = 0.002
#: weight of the prior: moving a constant by one typical error costs as much as one run
#: predicted this far off (in ln); it keeps weakly determined constants near their start
PRIOR = 0.02


#: errors of opposite sign beyond this (each way) after the fit are not reconciled by the fitted
#: constants: about the mean half-width of the model's 80% band on the development set (9.7%,
#: benchmarks/RESULTS.md section 11), so such runs disagree by more than the model's stated accuracy
RECONCILE_TOL = 0.10
#: a fitted constant whose standard error exceeds this fraction of its value is not determined by the runs
#: (issue 42: ``intra_link_efficiency 0.875 +- 0.44`` from five runs): it keeps its prior value and the others are
#: fitted again without it. 25%: wider than the spread of any constant's bounds about its preset (e.g. 0.3-0.95
#: for GEMM efficiency around ~0.6-0.8), so such a fit says nothing the preset did not
UNDETERMINED_REL = 0.25


# --------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class MeasuredRun:
    """One measured training run: what ran, on how many GPUs, and its step time."""

    model: ModelSpec
    workload: Workload
    config: ParallelConfig
    measured_s: float
    label: str = "run"

    @property
    def gpus(self) -> int:
        return self.config.gpus


def predict(run: MeasuredRun, cluster: ClusterSpec, engine: str = "analytic") -> float:
    """Predicted step time of ``run`` on ``cluster`` (sized to the run's GPUs)."""
    from costmodel.api import evaluate

    try:
        return evaluate(run.model, cluster.with_gpus(run.gpus), run.workload, run.config, engine=engine).step_time_s
    except SpecError as e:
        raise SpecError(f"{run.label}: {e.field}", e.value, e.allowed) from None


def min_step_time_s(run: MeasuredRun, cluster: ClusterSpec) -> float:
    """A lower bound on ``run``'s step time: its weight-GEMM FLOPs (``3 x 2 x`` active weights per
    token, :func:`costmodel.physics.kernels.flops.forward_flops_per_token` at zero sequence length: no attention, no
    recompute) at the dense tensor-core peak of all its GPUs in its dtype. No implementation does
    fewer FLOPs or runs them faster, so a measured time below it is not this model on this cluster."""
    from costmodel.physics.kernels.flops import forward_flops_per_token

    flops = 3.0 * sum(forward_flops_per_token(run.model, 0)) * run.workload.tokens
    return flops / (run.gpus * cluster.device.peak_flops_per_s(run.workload.dtype))


def check_physical(runs, cluster: ClusterSpec) -> None:
    """Refuse (:class:`CalibrationError`, one line) a run measured faster than the hardware allows."""
    for r in runs:
        t = min_step_time_s(r, cluster)
        if r.measured_s < t:
            raise CalibrationError(
                f"{r.label}: step_time_s",
                r.measured_s,
                f"at least {t:.4g} s, the time its weight GEMMs alone take at the dense "
                f"{r.workload.dtype} peak of {r.gpus} {cluster.device.name} GPUs (a faster run "
                "is not this model, batch and cluster)",
            )


def _log_residuals(runs, cluster, engine) -> np.ndarray:
    return np.array([math.log(predict(r, cluster, engine) / r.measured_s) for r in runs])


# --------------------------------------------------------------------------- identifiability
def max_constants(n_runs: int) -> int:
    """How many constants ``n_runs`` runs may determine: 1 for one or two runs, else ``n - 1``."""
    return 0 if n_runs < 1 else (1 if n_runs <= 2 else n_runs - 1)


def sensitivity_matrix(runs, cluster: ClusterSpec, names, engine: str = "analytic") -> np.ndarray:
    """``S[i, j]``: change of ``ln(predicted_i)`` for a typical error of constant ``names[j]``.

    Central differences of +-``scale`` (one-sided at a bound), divided back to one ``scale``. A value outside the
    constant's bounds (a user's cluster file may state one) is differenced at the nearest bound: the steps stay
    where :func:`apply` takes them.
    """
    base = _log_residuals(runs, cluster, engine)
    S = np.zeros((len(runs), len(names)))
    for j, name in enumerate(names):
        c, v = constant(name), get_value(cluster, name)
        h, at = c.scale_of(v), min(max(v, c.lo), c.hi)
        mid = base if at == v else _log_residuals(runs, apply(cluster, {name: at}), engine)
        up, dn = min(at + h, c.hi), max(at - h, c.lo)
        r_up = _log_residuals(runs, apply(cluster, {name: up}), engine) if up > at else mid
        r_dn = _log_residuals(runs, apply(cluster, {name: dn}), engine) if dn < at else mid
        S[:, j] = (r_up - r_dn) / (up - dn) * h if up > dn else 0.0
    return S


def _cond(S: np.ndarray) -> float:
    cols = S / np.maximum(np.linalg.norm(S, axis=0), 1e-300)
    sv = np.linalg.svd(cols, compute_uv=False)
    return float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf


@dataclass(frozen=True)
class Selection:
    """Which constants a set of runs determines, in order of effect, and why the others are not fitted."""

    names: tuple[str, ...]
    effect: dict  # name -> RMS over runs of S[:, j]
    skipped: dict  # name -> one-line reason
    condition: float


def select(S: np.ndarray, names, n_runs: int) -> Selection:
    """Greedy choice of identifiable constants from the sensitivity matrix (see the module doc)."""
    effect = {n: float(np.sqrt(np.mean(S[:, j] ** 2))) for j, n in enumerate(names)}
    order = sorted(range(len(names)), key=lambda j: -effect[names[j]])
    chosen, skipped, cond = [], {}, 1.0
    limit = max_constants(n_runs)
    for j in order:
        n = names[j]
        if effect[n] < MIN_EFFECT:
            skipped[n] = f"a {_scale_text(n)} change moves these runs' predictions by under {100 * MIN_EFFECT:g}%"
        elif len(chosen) >= limit:
            skipped[n] = (
                f"{n_runs} run{'s determine' if n_runs > 1 else ' determines'} at most {limit} "
                f"constant{'s' if limit > 1 else ''}"
            )
        else:
            c = _cond(S[:, chosen + [j]])
            if c > COND_MAX:
                skipped[n] = (
                    f"its effect on these runs is nearly that of {', '.join(names[i] for i in chosen)} "
                    f"(condition {c:.0f} > {COND_MAX:g})"
                )
            else:
                chosen.append(j)
                cond = c
    return Selection(tuple(names[j] for j in chosen), effect, skipped, cond)


def _scale_text(name: str) -> str:
    c = CONSTANTS[name]
    return f"{c.abs_scale:g}" if c.abs_scale else f"{100 * c.rel_scale:g}%"


def check_request(requested, selection_all: Selection, S: np.ndarray, names, n_runs: int) -> None:
    """Refuse (:class:`CalibrationError`, one line) to fit ``requested`` constants the runs cannot determine."""
    requested = list(dict.fromkeys(requested))
    for n in requested:
        constant(n)
    limit = max_constants(n_runs)
    if len(requested) > limit:
        raise CalibrationError(
            "fit",
            ",".join(requested),
            f"at most {limit} constant{'s' if limit > 1 else ''}: {n_runs} run{'s' if n_runs > 1 else ''} "
            f"cannot determine {len(requested)} (add runs, or fit fewer)",
        )
    for n in requested:
        if selection_all.effect[n] < MIN_EFFECT:
            raise CalibrationError("fit", n, f"a constant these runs depend on ({selection_all.skipped[n]})")
    if len(requested) > 1:
        c = _cond(S[:, [names.index(n) for n in requested]])
        if c > COND_MAX:
            raise CalibrationError(
                "fit",
                ",".join(requested),
                f"constants with distinguishable effects on these runs (condition {c:.0f} > "
                f"{COND_MAX:g}; fit fewer, or add runs that stress them differently)",
            )


# --------------------------------------------------------------------------- the fit
def _solve(runs, cluster: ClusterSpec, names, engine: str, prior: float = PRIOR, max_iter: int = 30):
    """Bounded Levenberg-Marquardt on ``sum ln(pred/meas)^2`` plus the prior term; returns
    (values, run residuals, run jacobian, iterations)."""
    cons = [constant(n) for n in names]
    lo = np.array([c.lo for c in cons])
    hi = np.array([c.hi for c in cons])
    x = np.array([get_value(cluster, n) for n in names])
    x0, w = x.copy(), np.array([prior / c.scale_of(v) for c, v in zip(cons, x)])
    n = len(runs)

    def resid(v):
        r = _log_residuals(runs, apply(cluster, dict(zip(names, map(float, v)))), engine)
        return np.concatenate([r, w * (v - x0)])

    def jac(v, r0):
        J = np.zeros((n + len(v), len(v)))
        for j, c in enumerate(cons):
            h = 0.05 * c.scale_of(v[j])
            step = h if v[j] + h <= hi[j] else -h
            w = v.copy()
            w[j] += step
            J[:, j] = (resid(w) - r0) / step
        return J

    r = resid(x)
    cost = float(r @ r)
    lam, it = 1e-3, 0
    J = jac(x, r)
    for it in range(1, max_iter + 1):
        g = J.T @ r
        A = J.T @ J
        improved = False
        for _ in range(12):
            D = np.diag(np.maximum(np.diag(A), 1e-12))
            try:
                dx = -np.linalg.solve(A + lam * D, g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            xn = np.clip(x + dx, lo, hi)
            rn = resid(xn)
            cn = float(rn @ rn)
            if cn < cost - 1e-15:
                improved = True
                small = np.all(np.abs(xn - x) <= 1e-6 * np.maximum(np.abs(x), 1e-3))
                x, r, cost = xn, rn, cn
                lam = max(lam / 10, 1e-9)
                break
            lam *= 10
        if not improved or small or cost < 1e-16:
            break
        J = jac(x, r)
    return x, r[:n], J[:n], it


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`fit`. Errors are signed ``predicted / measured - 1``."""

    cluster: ClusterSpec  # the calibrated cluster (GPU count of the input)
    names: tuple[str, ...]
    before: dict
    after: dict
    stderr: dict  # name -> standard error of the fitted value (None when the fit leaves no residual)
    selection: Selection
    errors_before: list
    errors_after: list
    loo_errors: list | None
    engine: str
    iterations: int
    labels: list = field(default_factory=list)
    #: constants the runs did not determine (:data:`UNDETERMINED_REL`): ``name -> (fitted, stderr, kept)``,
    #: ``kept`` the value the cluster keeps (the prior, or the fit itself when nothing better is determined)
    undetermined: dict = field(default_factory=dict)

    @property
    def at_bounds(self) -> dict:
        """Fitted constants that ended at a bound: ``{name: "lower" | "upper"}``."""
        out = {}
        for n in self.names:
            c, v = CONSTANTS[n], self.after[n]
            if v <= c.lo + 1e-9 * max(abs(c.lo), 1.0):
                out[n] = "lower"
            elif v >= c.hi - 1e-9 * max(abs(c.hi), 1.0):
                out[n] = "upper"
        return out

    @property
    def warnings(self) -> list[str]:
        """One line per fitted constant that ended at its bound (the fit wanted a value beyond it), and one per
        constant the runs did not determine."""
        return [
            f"{n} ended at its {side} bound {CONSTANTS[n].lo if side == 'lower' else CONSTANTS[n].hi:g}: "
            f"these runs ask for a value past what the hardware allows, so the model misses something they "
            f"do (check the settings read for them: attention kernel, recompute, overlap, dtype)"
            for n, side in self.at_bounds.items()
        ] + [_undetermined_text(n, *v) for n, v in self.undetermined.items()]

    @property
    def loo_log_residuals(self) -> list | None:
        return None if self.loo_errors is None else [math.log1p(e) for e in self.loo_errors]


def fit(
    runs, cluster: ClusterSpec, fit_names=None, engine: str = "analytic", loo: bool = True, prior: float = PRIOR
) -> Calibration:
    """Fit the constants ``runs`` determine (or exactly ``fit_names``, if the runs can) to their step times.

    Parameters
    ----------
    runs : :class:`MeasuredRun` objects (at least one).
    cluster : the cluster they ran on, with the constants' starting values.
    fit_names : constants to fit; ``None`` chooses them (see the module doc). A request the
        runs cannot answer raises :class:`CalibrationError`.
    engine : ``analytic`` (default, fast) or ``graph``.
    loo : compute leave-one-out errors when there are three or more runs.
    prior : weight of the pull towards the starting values (:data:`PRIOR`; 0: none).
    """
    runs = list(runs)
    if not runs:
        raise CalibrationError("runs", 0, "at least one measured run")
    check_physical(runs, cluster)
    names = list(CONSTANTS)
    S = sensitivity_matrix(runs, cluster, names, engine)
    auto = select(S, names, len(runs))
    if fit_names:
        check_request(fit_names, auto, S, names, len(runs))
        chosen = tuple(dict.fromkeys(fit_names))
        skipped = {n: r for n, r in auto.skipped.items() if n not in chosen}
        for n in auto.names:
            if n not in chosen:
                skipped[n] = "not requested (--fit)"
        selection = Selection(chosen, auto.effect, skipped, _cond(S[:, [names.index(n) for n in chosen]]))
    else:
        selection = auto
    before = {n: get_value(cluster, n) for n in CONSTANTS}
    err_before = [math.expm1(x) for x in _log_residuals(runs, cluster, engine)]
    if not selection.names:
        raise CalibrationError(
            "runs",
            len(runs),
            "runs whose predictions depend on at least one constant "
            f"({'; '.join(f'{k}: {v}' for k, v in auto.skipped.items())})",
        )
    undetermined: dict = {}
    while True:
        x, r, J, it = _solve(runs, cluster, list(selection.names), engine, prior)
        stderr = _stderr(selection.names, r, J, len(runs))
        loose = {
            n: (float(v), stderr[n])
            for n, v in zip(selection.names, x)
            if stderr[n] is not None and stderr[n] > UNDETERMINED_REL * abs(v)
        }
        kept = tuple(n for n in selection.names if n not in loose)
        if not loose or not kept:  # nothing left to fit: the fit stands, each loose constant said to be a guess
            undetermined.update({n: (v, se, v) for n, (v, se) in loose.items()})
            break
        undetermined.update({n: (v, se, before[n]) for n, (v, se) in loose.items()})
        why = {n: _undetermined_text(n, v, se, before[n]) for n, (v, se) in loose.items()}
        selection = Selection(kept, selection.effect, {**selection.skipped, **why}, selection.condition)
    check_reconciled(runs, [math.expm1(v) for v in r], selection.names)
    fitted = apply(cluster, dict(zip(selection.names, map(float, x))))
    loo_errors = None
    if loo and len(runs) >= 3:
        loo_errors = []
        k = max_constants(len(runs) - 1)
        for i in range(len(runs)):
            rest = runs[:i] + runs[i + 1 :]
            xi, *_ = _solve(rest, cluster, list(selection.names[:k]), engine, prior)
            cl_i = apply(cluster, dict(zip(selection.names[:k], map(float, xi))))
            loo_errors.append(predict(runs[i], cl_i, engine) / runs[i].measured_s - 1)
    return Calibration(
        cluster=fitted,
        names=selection.names,
        before=before,
        after={n: get_value(fitted, n) for n in CONSTANTS},
        stderr=stderr,
        selection=selection,
        errors_before=err_before,
        errors_after=[math.expm1(v) for v in r],
        loo_errors=loo_errors,
        engine=engine,
        iterations=it,
        labels=[run.label for run in runs],
        undetermined=undetermined,
    )


def _stderr(names, r, J, n_runs: int) -> dict:
    """``name -> standard error`` of each fitted constant (``None`` when the fit leaves no residual)."""
    dof = n_runs - len(names)
    if dof > 0:
        try:
            cov = np.linalg.inv(J.T @ J) * float(r @ r) / dof
            return {n: float(math.sqrt(max(cov[j, j], 0.0))) for j, n in enumerate(names)}
        except np.linalg.LinAlgError:
            pass
    return {n: None for n in names}


def _undetermined_text(name: str, value: float, se: float, kept: float) -> str:
    what = f"kept at its prior {kept:.3f}" if kept != value else "fitted anyway (no constant is determined better)"
    return (
        f"{name} is not determined by these runs: {value:.3f} +- {se:.2f} ({100 * se / abs(value):.0f}% of it, "
        f"over {100 * UNDETERMINED_REL:.0f}%); {what}"
    )


def check_reconciled(runs, errors_after, names, tol: float = RECONCILE_TOL) -> None:
    """Refuse (:class:`CalibrationError`, one line) runs the fitted constants leave off in both
    directions by more than ``tol``: no value of them reconciles these runs."""
    hi = max(range(len(runs)), key=lambda i: errors_after[i])
    lo = min(range(len(runs)), key=lambda i: errors_after[i])
    if errors_after[hi] > tol and errors_after[lo] < -tol:
        raise CalibrationError(
            "runs",
            f"{runs[hi].label},{runs[lo].label}",
            f"runs that {', '.join(names)} can reconcile: after the fit {runs[hi].label} is "
            f"predicted {100 * errors_after[hi]:+.0f}% and {runs[lo].label} "
            f"{100 * errors_after[lo]:+.0f}%, opposite errors beyond +-{100 * tol:g}% (the "
            "runs differ in something the model does not read from them; check each run's "
            "settings, or calibrate them separately)",
        )
