"""Uncertainty bands: write the validation residuals and measure the 80% band's coverage.

    python -m benchmarks.band_coverage [--write] [--calibrated] [--engine graph] [--set dev|new|all|sealed]

1. Predicts every usable row of the chosen set as ``validate_published.py`` does (same rows,
   same filled-in settings, the op-graph engine by default), *out of source*: the constants
   fitted per device family and dtype are set to the values fitted without the row's own source
   (:func:`calibrate.held_out_values`, the leave-one-source-out fit ``calibrate.py`` prints; a
   family measured by one source only keeps its preset value, flagged ``in_sample_constants``).
   Each row is tagged with its regime (:func:`costmodel.trust.uncertainty.regime_of`), GPU count and
   stack. ``--write`` stores ``ln(predicted/measured)`` per row, the held-out constants used and a
   summary of the component data's kinds (``benchmarks/data/components``) in
   ``costmodel/trust/data/residuals.json``, the package data the bands are built from.
   The sealed split (``benchmarks/data/sealed``) is never read here (``load_set`` excludes it).
2. Coverage, leave-one-source-out: each source's rows get bands built from the *other*
   sources' residuals only (a new source is a new software stack, the honest test), with the
   beyond-the-data widening of :mod:`costmodel.trust.band_scope` judged against those other sources,
   and the script prints the share of measured step times inside the 80% band (target >= 80%)
   and the median and mean band width ((hi - lo) / predicted), per set and per source.
3. ``--calibrated``: for every source, every third triple of its rows calibrates the cluster
   (``planner calibrate``'s fit, analytic engine) starting from the preset and from the
   uncalibrated datasheet-class constants (GEMM efficiency 0.80 BF16 / 0.60 FP8); the
   held-back rows of that source are then predicted with the calibrated cluster and banded
   with the calibration's leave-one-out residuals. Prints held-back error before/after and
   band width and coverage with and without calibration.
4. ``--set sealed``: the sealed split's rows, predicted with the presets' constants and banded from
   every stored residual (:func:`sealed`); refuses ``--write`` and ``--calibrated``. Run once, by
   the lead, at the end of an issue (tests run it on a synthetic split only).

Coverage is printed per set, per source and per regime (kind, device, ZeRO bucket).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks import results_io
from benchmarks.calibrate import held_out_constants, held_out_values, with_constants
from benchmarks.calibrate import family, kernel_class
from benchmarks.published import load_set, predict

from costmodel.trust import uncertainty as U
from costmodel.trust.band_scope import device_class
from costmodel.trust.calibration import MeasuredRun, fit
from costmodel.trust.calibration_constants import apply
from costmodel.spec.errors import PlannerError
from costmodel.api import evaluate

UNCALIBRATED = {"gemm_efficiency": 0.80, "fp8_gemm_efficiency": 0.60}
COMPONENTS = Path(__file__).resolve().parent / "data" / "components"


def held_out(set_name: str) -> dict:
    """{(set, row_id): {field: value fitted without the row's source}} over ``set_name``'s rows."""
    rows = [r for r in load_set(set_name) if not r.skip]
    values = held_out_values(rows)
    return {(r.set, r.row_id): held_out_constants(r, values) for r in rows}


def stored_constants(doc: dict) -> dict:
    """The held-out constants a stored ``residuals.json`` was written with (as :func:`held_out`)."""
    return {(x["set"], x["row_id"]): dict(x.get("constants", {})) for x in doc["rows"]}


def components() -> list:
    """``[component, device class, dtype]`` of every kind of kernel and collective measured in
    ``benchmarks/data/components`` (read by :mod:`costmodel.trust.band_scope`)."""
    out = set()
    with open(COMPONENTS / "kernels.csv") as f:
        for r in csv.DictReader(f):
            dtype = "bf16" if r["dtype"] in ("bf16", "fp16") else r["dtype"]  # same tensor-core rate
            out.add((r["kernel"], device_class(r["device"]), dtype))
    with open(COMPONENTS / "collectives.csv") as f:
        for r in csv.DictReader(f):
            out.add((r["collective"], device_class(r["gpu"]), "*"))
    return [list(c) for c in sorted(out)]


def predicted_rows(engine: str, set_name: str = "dev", constants: dict | None = None):
    """Every usable row predicted out of source (``constants``: :func:`held_out`'s map, computed
    when not given)."""
    constants = held_out(set_name) if constants is None else constants
    out = []
    for r in load_set(set_name):
        if r.skip:
            continue
        used = constants.get((r.set, r.row_id), {})
        fams = {f for f in (family(r), kernel_class(r)) if f}
        try:
            est, _ = predict(with_constants(r, used), engine)
            if est is None:
                continue
            regime = U.regime_of(r.model, r.cluster, r.workload, est.config)
        except PlannerError as e:
            print(f"row {r.row_id} ({r.source}) skipped: {e}")
            continue
        out.append(
            {
                "row": r,
                "est": est,
                "regime": regime,
                "constants": used,
                "in_sample_constants": sorted(f for _, f in fams if f not in used),
                "log_residual": math.log(est.step_time_s / r.measured_s),
            }
        )
    return out


def stored(rows, engine: str) -> dict:
    return {
        "description": "ln(predicted/measured step time) of the published rows used "
        "(benchmarks/data/published_dev.csv and published_new.csv; never the sealed split), "
        "each predicted with the per-family constants fitted without its own source "
        "(constants; in_sample_constants: families of one source, at the preset value), "
        "by regime, with its GPU count and stack; components: the kinds of kernel and "
        "collective measured in benchmarks/data/components; written by "
        "python -m benchmarks.band_coverage --set all --write; read by costmodel/trust/uncertainty.py",
        "engine": engine,
        "components": components(),
        "rows": [
            {
                "set": getattr(x["row"], "set", "dev"),
                "source": x["row"].source,
                "row_id": x["row"].row_id,
                "regime": x["regime"].keys(),
                "gpus": x["est"].config.gpus,
                "stack": x["row"].cluster.stack,
                # what costmodel/trust/known_runs.py matches a plan against: the model, the GPU and the layout
                "model": x["row"].model.name,
                "device": x["row"].cluster.device.name,
                "plan": {k: getattr(x["est"].config, k) for k in ("tp", "pp", "dp", "cp", "ep", "vp")},
                "measured_s": round(x["row"].measured_s, 6),
                "constants": x["constants"],
                "in_sample_constants": x["in_sample_constants"],
                "log_residual": round(x["log_residual"], 6),
            }
            for x in rows
        ],
    }


def regime_label(regime) -> str:
    """``dense a100 ZeRO-0``: the regime a row is reported under (kind, device, ZeRO bucket)."""
    return f"{regime.kind} {regime.device} ZeRO-{regime.zero}"


def coverage(rows, residual_rows, comps, label: str = "leave-one-source-out", in_sample: bool = True) -> dict:
    """Share of measured step times inside each row's 80% band built from ``residual_rows`` less the
    row's own source's, and the band widths, per set, per source and per regime. Returns
    ``{set or "all": (inside, rows, median width)}``."""
    by_src, by_set, by_regime, noted = {}, {}, {}, 0
    for x in rows:
        src = x["row"].source
        pool = [r for r in residual_rows if r["source"] != src]
        lo_l, hi_l, notes = U.band_detail(x["regime"], residuals=pool, components=comps)
        t = x["est"].step_time_s
        lo, hi = t * math.exp(lo_l), t * math.exp(hi_l)
        ok = lo <= x["row"].measured_s <= hi
        noted += any(not n.startswith("within the data") for n in notes)  # a beyond-the-data note
        by_src.setdefault(src, []).append((ok, (hi - lo) / t))
        by_set.setdefault(getattr(x["row"], "set", "dev"), []).append((ok, (hi - lo) / t))
        by_regime.setdefault(regime_label(x["regime"]), []).append((ok, (hi - lo) / t))
    everything = [v for vs in by_set.values() for v in vs]
    summary = {
        "all": (
            sum(ok for ok, _ in everything),
            len(everything),
            statistics.median(w for _, w in everything) if everything else None,
        )
    }
    for name, vs in [*by_set.items(), *((("+".join(by_set), everything),) if len(by_set) > 1 else ())]:
        n_in = sum(ok for ok, _ in vs)
        if name in by_set:
            summary[name] = (n_in, len(vs), statistics.median(w for _, w in vs))
        print(
            f"80% band, {label}, {name} set: {n_in}/{len(vs)} measured runs inside "
            f"= {100 * n_in / len(vs):.0f}% (target >= 80%); width (hi - lo) / predicted: median "
            f"{100 * statistics.median(w for _, w in vs):.1f}%, mean {100 * statistics.mean(w for _, w in vs):.1f}%"
            " (target median <= 30%)"
        )
    print(f"   {noted}/{len(rows)} rows' bands carry a beyond-the-data note when their source is held out")
    for what in (by_src, by_regime):
        for src, vs in sorted(what.items()):
            print(
                f"   {src:<24} {sum(ok for ok, _ in vs):>3}/{len(vs):<3} inside, median width "
                f"{100 * statistics.median(w for _, w in vs):5.1f}%"
            )
    if not in_sample:
        return summary
    inb = [U.band(x["est"], x["regime"], residuals=residual_rows, components=comps) for x in rows]
    ins = sum(lo <= x["row"].measured_s <= hi for x, (lo, hi) in zip(rows, inb))
    print(f"   (in-sample, all sources' residuals: {ins}/{len(rows)} inside)")
    return summary


def calibrated(rows, residual_rows, engine: str) -> None:
    print("\ncalibrating on 3 rows of a source, predicting and banding its other rows (every third triple):")
    hdr = (
        f"{'source':<22} {'start':<8} {'fits':>4} {'held-back |err| before':>23} {'after':>7} "
        f"{'band +- before':>15} {'after':>7} {'coverage before':>16} {'after':>7}"
    )
    print(hdr)
    by_src = {}
    for x in rows:
        by_src.setdefault(x["row"].source, []).append(x)
    for src, xs in sorted(by_src.items()):
        runs = [
            MeasuredRun(x["row"].model, x["row"].workload, x["est"].config, x["row"].measured_s, label=x["row"].row_id)
            for x in xs
        ]
        pool = [r for r in residual_rows if r["source"] != src]
        for start in ("preset", "datasheet"):
            base = xs[0]["row"].cluster
            if start == "datasheet":
                base = apply(base, UNCALIBRATED)
            eb, ea, wb, wa, cb, ca = [], [], [], [], [], []
            triples = list(itertools.combinations(range(len(xs)), 3))[::3]
            for tri in triples:
                cal = fit([runs[i] for i in tri], base, engine="analytic")
                cl = replace(
                    cal.cluster, calibrated_constants=cal.names, calibration_log_residuals=tuple(cal.loo_log_residuals)
                )
                for i, x in enumerate(xs):
                    if i in tri:
                        continue
                    r = x["row"]
                    e0 = evaluate(
                        r.model, base.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config, engine=engine
                    )
                    e1 = evaluate(r.model, cl.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config, engine=engine)
                    g0 = U.regime_of(r.model, base.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config)
                    g1 = U.regime_of(r.model, cl.with_gpus(r.cluster.num_gpus), r.workload, x["est"].config)
                    b0, b1 = U.band(e0, g0, residuals=pool), U.band(e1, g1, residuals=pool)
                    eb.append(abs(e0.step_time_s / r.measured_s - 1))
                    ea.append(abs(e1.step_time_s / r.measured_s - 1))
                    wb.append((b0[1] - b0[0]) / 2 / e0.step_time_s)
                    wa.append((b1[1] - b1[0]) / 2 / e1.step_time_s)
                    cb.append(b0[0] <= r.measured_s <= b0[1])
                    ca.append(b1[0] <= r.measured_s <= b1[1])
            print(
                f"{src:<22} {start:<8} {len(triples):>4} {100 * statistics.mean(eb):>22.1f}% "
                f"{100 * statistics.mean(ea):>6.1f}% {100 * statistics.mean(wb):>14.1f}% "
                f"{100 * statistics.mean(wa):>6.1f}% {100 * sum(cb) / len(cb):>15.0f}% "
                f"{100 * sum(ca) / len(ca):>6.0f}%"
            )


def sealed(args) -> int:
    """Coverage of the sealed split (``load_set('sealed')``) by the bands as shipped: its rows predicted
    with the presets' constants (fitted on the development set, never on the sealed split) and banded
    from every stored residual (``costmodel/trust/data/residuals.json``: dev and new, no sealed row). Nothing
    is written and nothing is fitted on the sealed rows."""
    if args.write or args.calibrated:
        flag = "--write" if args.write else "--calibrated"
        print(
            f"band_coverage: {flag} is refused with --set sealed (the sealed split is scored, never fitted or stored)",
            file=sys.stderr,
        )
        return 2
    rows = predicted_rows(args.engine, "sealed", constants={})
    residual_rows = U.stored_residuals()
    if not rows or not residual_rows:
        print(f"band_coverage: no {'sealed rows' if not rows else 'stored residuals'} to score", file=sys.stderr)
        return 2
    coverage(
        rows,
        residual_rows,
        U.stored_components(),
        label="sealed split, bands from the stored dev+new residuals",
        in_sample=False,
    )
    return 0


def record(argv, summary: dict, enabled: bool) -> None:
    """``benchmarks/results/band_coverage.json``: the leave-one-source-out coverage of ``--set all``."""
    head = {}
    for name in ("dev", "new", "all"):
        if name in summary:
            n_in, n, width = summary[name]
            head.update(
                {
                    f"{name} rows": n,
                    f"{name} inside": n_in,
                    f"{name} inside %": results_io.pct(n_in / n),
                    f"{name} median width %": results_io.pct(width),
                }
            )
    n_in, n, width = summary["all"]
    results_io.record(
        "band_coverage",
        argv,
        enabled=enabled,
        headline=head,
        title="the 80% band's coverage, each source banded from the other sources' residuals",
        targets=[
            {"name": ">= 80% of measured runs inside", "met": n_in >= 0.8 * n},
            {"name": "median width <= 30%", "met": width <= 0.30},
        ],
        table=[
            {"set": k, "rows": v[1], "inside": v[0], "median width %": results_io.pct(v[2])} for k, v in summary.items()
        ],
        inputs=[
            "costmodel",
            "benchmarks/band_coverage.py",
            "benchmarks/calibrate.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
            "benchmarks/data/components",
        ],
    )


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--write",
        action="store_true",
        help=f"write {U.RESIDUALS.relative_to(Path.cwd()) if U.RESIDUALS.is_relative_to(Path.cwd()) else U.RESIDUALS}",
    )
    ap.add_argument("--calibrated", action="store_true", help="also measure calibration on 3 rows per source")
    ap.add_argument("--engine", choices=("graph", "analytic"), default="graph")
    ap.add_argument(
        "--set",
        choices=("dev", "new", "all", "sealed"),
        default="dev",
        help="published set(s) whose residuals build the bands (default: %(default)s); sealed: the "
        "sealed split's coverage by the stored bands (scored once, by the lead, at the end)",
    )
    args = ap.parse_args(argv)
    if args.set == "sealed":
        return sealed(args)
    rows = predicted_rows(args.engine, args.set)
    doc = stored(rows, args.engine)
    if args.write:
        U.RESIDUALS.parent.mkdir(exist_ok=True)
        U.RESIDUALS.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {len(doc['rows'])} residuals to {U.RESIDUALS}")
    summary = coverage(rows, doc["rows"], doc["components"])
    record(argv, summary, record_results and args.set == "all" and args.engine == "graph")
    if args.calibrated:
        calibrated(rows, doc["rows"], args.engine)
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
