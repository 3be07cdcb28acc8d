"""Uncertainty bands: write the validation residuals and measure the 80% band's coverage.

    python benchmarks/band_coverage.py [--write] [--calibrated] [--engine graph] [--set dev|new|all]

1. Predicts every usable row of the development set as ``validate_published.py`` does (same
   rows, same filled-in settings, the op-graph engine by default) and tags each with its regime
   (:func:`costmodel.uncertainty.regime_of`). ``--write`` stores ``ln(predicted/measured)`` per
   row in ``costmodel/data/residuals.json``, the package data the bands are built from.
2. Coverage, leave-one-source-out: each source's rows get bands built from the *other*
   sources' residuals only (a new source is a new software stack, the honest test), and the
   script prints the share of measured step times inside the 80% band (target 80%-95%) and
   the mean band width, per set and per source. ``--set all`` builds the bands from the
   development set and the new set (issue 10's regimes: H100 BF16, FP8, MoE, FSDP, >= 4k GPUs).
3. ``--calibrated``: for every source, every third triple of its rows calibrates the cluster
   (``planner calibrate``'s fit, analytic engine) starting from the preset and from the
   uncalibrated datasheet-class constants (GEMM efficiency 0.80 BF16 / 0.60 FP8); the
   held-back rows of that source are then predicted with the calibrated cluster and banded
   with the calibration's leave-one-out residuals. Prints held-back error before/after and
   band width and coverage with and without calibration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import load_set, predict  # noqa: E402

from costmodel import uncertainty as U  # noqa: E402
from costmodel.calibration import MeasuredRun, apply, fit  # noqa: E402
from costmodel.errors import PlannerError  # noqa: E402
from costmodel.estimate import evaluate  # noqa: E402

UNCALIBRATED = {"gemm_efficiency": 0.80, "fp8_gemm_efficiency": 0.60}


def predicted_rows(engine: str, set_name: str = "dev"):
    out = []
    for r in load_set(set_name):
        if r.skip:
            continue
        try:
            est, _ = predict(r, engine)
            if est is None:
                continue
            regime = U.regime_of(r.model, r.cluster, r.workload, est.config)
        except PlannerError as e:
            print(f"row {r.row_id} ({r.source}) skipped: {e}")
            continue
        out.append({"row": r, "est": est, "regime": regime,
                    "log_residual": math.log(est.step_time_s / r.measured_s)})
    return out


def stored(rows, engine: str) -> dict:
    return {"description": "ln(predicted/measured step time) of the published rows used "
                           "(benchmarks/data/published_dev.csv and published_new.csv), by regime; written by "
                           "benchmarks/band_coverage.py --write; read by costmodel/uncertainty.py",
            "engine": engine,
            "rows": [{"set": getattr(x["row"], "set", "dev"), "source": x["row"].source, "row_id": x["row"].row_id,
                      "regime": x["regime"].keys(),
                      "log_residual": round(x["log_residual"], 6)} for x in rows]}


def coverage(rows, residual_rows) -> None:
    by_src, by_set = {}, {}
    for x in rows:
        src = x["row"].source
        pool = [r for r in residual_rows if r["source"] != src]
        lo, hi = U.band(x["est"], x["regime"], residuals=pool)
        ok = lo <= x["row"].measured_s <= hi
        by_src.setdefault(src, []).append(ok)
        by_set.setdefault(getattr(x["row"], "set", "dev"), []).append((ok, (hi - lo) / 2 / x["est"].step_time_s))
    for name, vs in by_set.items():
        n_in = sum(ok for ok, _ in vs)
        print(f"80% band, leave-one-source-out, {name} set: {n_in}/{len(vs)} measured runs inside "
              f"= {100 * n_in / len(vs):.0f}% (target 80-95%); mean half-width "
              f"{100 * statistics.mean(w for _, w in vs):.1f}% of the step time")
    for src, vs in sorted(by_src.items()):
        print(f"   {src:<24} {sum(vs):>3}/{len(vs):<3} inside")
    inb = [U.band(x["est"], x["regime"], residuals=residual_rows) for x in rows]
    ins = sum(lo <= x["row"].measured_s <= hi for x, (lo, hi) in zip(rows, inb))
    print(f"   (in-sample, all sources' residuals: {ins}/{len(rows)} inside)")


def calibrated(rows, residual_rows, engine: str) -> None:
    print("\ncalibrating on 3 rows of a source, predicting and banding its other rows "
          "(every third triple):")
    hdr = f"{'source':<22} {'start':<8} {'fits':>4} {'held-back |err| before':>23} {'after':>7} " \
          f"{'band +- before':>15} {'after':>7} {'coverage before':>16} {'after':>7}"
    print(hdr)
    by_src = {}
    for x in rows:
        by_src.setdefault(x["row"].source, []).append(x)
    for src, xs in sorted(by_src.items()):
        runs = [MeasuredRun(x["row"].model, x["row"].workload, x["est"].config, x["row"].measured_s,
                            label=x["row"].row_id) for x in xs]
        pool = [r for r in residual_rows if r["source"] != src]
        for start in ("preset", "datasheet"):
            base = xs[0]["row"].cluster
            if start == "datasheet":
                base = apply(base, UNCALIBRATED)
            eb, ea, wb, wa, cb, ca = [], [], [], [], [], []
            triples = list(itertools.combinations(range(len(xs)), 3))[::3]
            for tri in triples:
                cal = fit([runs[i] for i in tri], base, engine="analytic")
                cl = replace(cal.cluster, calibrated_constants=cal.names,
                             calibration_log_residuals=tuple(cal.loo_log_residuals))
                for i, x in enumerate(xs):
                    if i in tri:
                        continue
                    r = x["row"]
                    e0 = evaluate(r.model, base.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config,
                                  engine=engine)
                    e1 = evaluate(r.model, cl.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config,
                                  engine=engine)
                    g0 = U.regime_of(r.model, base.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config)
                    g1 = U.regime_of(r.model, cl.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config)
                    b0, b1 = U.band(e0, g0, residuals=pool), U.band(e1, g1, residuals=pool)
                    eb.append(abs(e0.step_time_s / r.measured_s - 1))
                    ea.append(abs(e1.step_time_s / r.measured_s - 1))
                    wb.append((b0[1] - b0[0]) / 2 / e0.step_time_s)
                    wa.append((b1[1] - b1[0]) / 2 / e1.step_time_s)
                    cb.append(b0[0] <= r.measured_s <= b0[1])
                    ca.append(b1[0] <= r.measured_s <= b1[1])
            print(f"{src:<22} {start:<8} {len(triples):>4} {100 * statistics.mean(eb):>22.1f}% "
                  f"{100 * statistics.mean(ea):>6.1f}% {100 * statistics.mean(wb):>14.1f}% "
                  f"{100 * statistics.mean(wa):>6.1f}% {100 * sum(cb) / len(cb):>15.0f}% "
                  f"{100 * sum(ca) / len(ca):>6.0f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {U.RESIDUALS.relative_to(Path.cwd()) if U.RESIDUALS.is_relative_to(Path.cwd()) else U.RESIDUALS}")
    ap.add_argument("--calibrated", action="store_true", help="also measure calibration on 3 rows per source")
    ap.add_argument("--engine", choices=("graph", "analytic"), default="graph")
    ap.add_argument("--set", choices=("dev", "new", "all"), default="dev",
                    help="published set(s) whose residuals build the bands (default: %(default)s)")
    args = ap.parse_args(argv)
    rows = predicted_rows(args.engine, args.set)
    doc = stored(rows, args.engine)
    if args.write:
        U.RESIDUALS.parent.mkdir(exist_ok=True)
        U.RESIDUALS.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {len(doc['rows'])} residuals to {U.RESIDUALS}")
    coverage(rows, doc["rows"])
    if args.calibrated:
        calibrated(rows, doc["rows"], args.engine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
