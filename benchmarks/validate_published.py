"""Predicted vs measured step time on the published training runs, per row and per regime.

    python -m benchmarks.validate_published [--set dev|new|all] [--engine analytic|graph]
                                            [--source KEY] [--csv out.csv] [--check]

Prints one line per row (predicted and measured seconds, signed error, the plan used, the
regimes), every skipped row with its reason, the mean and max absolute error per source, and a
per-regime table (rows, mean |err|, signed mean, max |err|) for the development set, the new
set and both (regimes: ``benchmarks/regimes.py``; how rows become plans and how unstated
settings are filled: ``benchmarks/published``).

``--check`` exits 1 when the development-set mean |err| exceeds 6% or any regime's mean |err|
(over the selected rows) exceeds 12%, 0 otherwise. The default engine is the op-graph scheduler
(the reference; both sets take about 10 s on 2 cores); ``--engine analytic`` uses the closed form.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks import results_io
from benchmarks.published import Row, load_set, predict, write_csv
from benchmarks.regimes import REGIMES

TABLE5 = {"34", "35", "36", "37", "38", "39", "40", "41"}
DEV_MEAN_LIMIT = 0.06  # --check: development-set mean |err|
REGIME_MEAN_LIMIT = 0.12  # --check: any regime's mean |err|


def plan_text(est) -> str:
    c = est.config
    lps = "" if c.layers_per_stage is None else " lps" + "/".join(map(str, c.layers_per_stage))
    return (
        f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp} ep{c.ep} mb{c.mb} v{c.vp} sp{int(c.sp)} {c.recompute} z{c.zero}"
        + lps
        + ("" if est.fits else " (does not fit)")
    )


def run_rows(rows: list[Row], engine: str, out=print) -> list[dict]:
    """Predict every row; print one line each; return the results of the predicted rows."""
    res = []
    out(
        f"{'row':>4} {'set':<3} {'source':<22} {'model':<20} {'gpus':>5} {'pred_s':>9} {'meas_s':>9} {'err%':>7}  plan | regimes"
    )
    for r in rows:
        head = f"{r.row_id:>4} {r.set:<3} {r.source[:22]:<22} {r.label[:20]:<20} {r.gpus:>5}"
        if r.skip:
            out(f"{head} {'':>9} {'':>9} {'':>7}  skipped: {r.skip}")
            continue
        est, why = predict(r, engine)
        if est is None:
            out(f"{head} {'':>9} {r.measured_s:9.3f} {'':>7}  no prediction: {why}")
            continue
        err = est.step_time_s / r.measured_s - 1
        plan = plan_text(est)
        out(f"{head} {est.step_time_s:9.3f} {r.measured_s:9.3f} {100 * err:+7.1f}  {plan} | {','.join(r.regimes)}")
        res.append(
            {
                "row_id": r.row_id,
                "set": r.set,
                "source": r.source,
                "model": r.label,
                "gpus": r.gpus,
                "predicted_s": est.step_time_s,
                "measured_s": r.measured_s,
                "error": err,
                "plan": plan,
                "regimes": ";".join(r.regimes),
                "gpu": r.cluster.device.name,
                "measured_how": r.measured_how,
                "notes": "; ".join(r.notes),
            }
        )
    return res


def stats(errs: list[float]) -> tuple[int, float, float, float]:
    """(rows, mean |err|, signed mean, max |err|)."""
    if not errs:
        return 0, float("nan"), float("nan"), float("nan")
    a = [abs(e) for e in errs]
    return len(errs), statistics.mean(a), statistics.mean(errs), max(a)


def regime_table(res: list[dict]) -> dict:
    """{(set, regime): stats} for set in dev/new/all, regime in REGIMES plus 'ALL'."""
    table = {}
    for s in ("dev", "new", "all"):
        sel = [x for x in res if s == "all" or x["set"] == s]
        table[(s, "ALL")] = stats([x["error"] for x in sel])
        for reg in REGIMES:
            table[(s, reg)] = stats([x["error"] for x in sel if reg in x["regimes"].split(";")])
    return table


def print_regime_table(table: dict, out=print) -> None:
    out(
        f"{'regime':<17} | {'dev: n  mean|e| signed  max|e|':<32} | {'new: n  mean|e| signed  max|e|':<32} | "
        f"{'all: n  mean|e| signed  max|e|'}"
    )

    def cell(st):
        n, m, sg, mx = st
        return f"{n:>6} {'':>24}" if not n else f"{n:>6} {100 * m:6.1f}% {100 * sg:+6.1f}% {100 * mx:6.1f}%"

    for reg in ["ALL", *REGIMES]:
        out(
            f"{reg:<17} | {cell(table[('dev', reg)]):<32} | {cell(table[('new', reg)]):<32} | {cell(table[('all', reg)])}"
        )


def check(table: dict, out=print) -> int:
    """1 when the dev-set mean |err| > 6% or any regime's mean |err| > 12% (over all selected rows;
    the catch-all ``other`` is not gated)."""
    failures = []
    n, dev_mean, _, _ = table[("dev", "ALL")]
    if n and dev_mean > DEV_MEAN_LIMIT:
        failures.append(f"dev-set mean |err| {100 * dev_mean:.1f}% > {100 * DEV_MEAN_LIMIT:.0f}%")
    for reg in REGIMES:
        if reg == "other":  # the catch-all (B200 rows) is not one of issue 10's regimes
            continue
        n, m, _, _ = table[("all", reg)]
        if n and m > REGIME_MEAN_LIMIT:
            failures.append(f"regime {reg}: mean |err| {100 * m:.1f}% > {100 * REGIME_MEAN_LIMIT:.0f}% ({n} rows)")
    for f in failures:
        out(f"CHECK FAILED: {f}")
    if not failures:
        out("CHECK PASSED")
    return 1 if failures else 0


def record(argv, engine: str, res: list[dict], table: dict, enabled: bool) -> None:
    """``benchmarks/results/validate_published[_analytic].json`` of a ``--set all`` run."""
    h = {"rows predicted": len(res)}
    for s in ("dev", "new", "all"):  # the rows and max of each set are in the table
        _, m, sg, _ = table[(s, "ALL")]
        h.update({f"{s} mean |err| %": results_io.pct(m), f"{s} signed %": results_io.pct(sg)})
    h["all max |err| %"] = results_io.pct(table[("all", "ALL")][3])
    h["published plans predicted over HBM"] = sum(x["plan"].endswith("(does not fit)") for x in res)
    rows = [
        {
            "group": g,
            "rows": n,
            "mean |err| %": results_io.pct(m),
            "signed %": results_io.pct(sg),
            "max |err| %": results_io.pct(mx),
        }
        for g, (n, m, sg, mx) in [
            *((f"set {s}", table[(s, "ALL")]) for s in ("dev", "new", "all")),
            *((reg, table[("all", reg)]) for reg in REGIMES),
        ]
        if n
    ]
    gated = [table[("all", reg)] for reg in REGIMES if reg != "other" and table[("all", reg)][0]]
    targets = [
        {"name": f"dev mean |err| <= {100 * DEV_MEAN_LIMIT:.0f}%", "met": table[("dev", "ALL")][1] <= DEV_MEAN_LIMIT},
        {
            "name": f"every regime's mean |err| <= {100 * REGIME_MEAN_LIMIT:.0f}% (other not gated)",
            "met": all(m <= REGIME_MEAN_LIMIT for _, m, _, _ in gated),
        },
    ]
    name = "validate_published" + ("" if engine == "graph" else "_analytic")
    results_io.record(
        name,
        argv,
        module="validate_published",
        enabled=enabled,
        headline=h,
        table=rows,
        targets=targets,
        title=f"step time against published training runs, dev + new sets ({engine} engine)",
        inputs=[
            "costmodel",
            "benchmarks/validate_published.py",
            "benchmarks/published",
            "benchmarks/regimes.py",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )


#: the targets of the sealed split's single score (stated 2026-12-07, before it was scored): issue 38, the whole split
#: <= 8% mean |err| and within +-5% signed; issue 39, its Blackwell and MoE rows (a Blackwell GPU, or the MoE regimes)
#: <= 10% mean |err|
SEALED_MEAN, SEALED_SIGNED, BLACKWELL_MOE_MEAN = 0.08, 0.05, 0.10
BLACKWELL = ("B200", "B300", "GB200", "GB300")


def blackwell_or_moe(x: dict) -> bool:
    return x["gpu"] in BLACKWELL or any(g in x["regimes"].split(";") for g in ("moe_ep", "moe_fine"))


def sealed_summary(res: list[dict], skipped: int) -> tuple[dict, list[dict], list[dict]]:
    """Headline, per-source table and targets of the sealed split's score (issues 38 and 39)."""
    n, m, sg, mx = stats([x["error"] for x in res])
    bm = stats([x["error"] for x in res if blackwell_or_moe(x)])
    head = {
        "rows predicted": n,
        "rows skipped": skipped,
        "mean |err| %": results_io.pct(m),
        "signed %": results_io.pct(sg),
        "max |err| %": results_io.pct(mx),
        "Blackwell/MoE rows": bm[0],
        "Blackwell/MoE mean |err| %": results_io.pct(bm[1]) if bm[0] else None,
    }
    by = {}
    for x in res:
        by.setdefault(x["source"], []).append(x["error"])
    table = [
        {
            "source": src,
            "rows": k,
            "mean |err| %": results_io.pct(a),
            "signed %": results_io.pct(b),
            "max |err| %": results_io.pct(c),
        }
        for src, (k, a, b, c) in sorted((src, stats(es)) for src, es in by.items())
    ]
    targets = [
        {"name": f"issue 38: sealed mean |err| <= {100 * SEALED_MEAN:.0f}%", "met": m <= SEALED_MEAN},
        {"name": f"issue 38: sealed signed mean within +-{100 * SEALED_SIGNED:.0f}%", "met": abs(sg) <= SEALED_SIGNED},
        {
            "name": f"issue 39: sealed Blackwell/MoE rows mean |err| <= {100 * BLACKWELL_MOE_MEAN:.0f}%",
            "met": bool(bm[0]) and bm[1] <= BLACKWELL_MOE_MEAN,
        },
    ]
    return head, table, targets


def record_sealed(argv, engine: str, res: list[dict], skipped: int, enabled: bool) -> None:
    """``benchmarks/results/validate_published_sealed.json``: the sealed split's single score."""
    head, table, targets = sealed_summary(res, skipped)
    print("\nsealed split's targets:")
    for t in targets:
        print(f"  {'met    ' if t['met'] else 'not met'}  {t['name']}")
    results_io.record(
        "validate_published_sealed",
        argv,
        module="validate_published",
        enabled=enabled,
        headline=head,
        table=table,
        targets=targets,
        title=f"step time against the sealed split of published training runs, scored once ({engine} engine)",
        inputs=[
            "costmodel",
            "benchmarks/validate_published.py",
            "benchmarks/published",
            "benchmarks/data/sealed/published_sealed.csv",
        ],
    )


def main(argv=None, rows: list[Row] | None = None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--set",
        choices=("dev", "new", "all", "sealed"),
        default="all",
        help="which published set (default all: dev and new; sealed is the test split, scored once at the end of an issue)",
    )
    ap.add_argument("--source", help="only rows of this source_key")
    ap.add_argument("--csv", help="also write per-row results here")
    ap.add_argument(
        "--engine",
        choices=("graph", "analytic"),
        default="graph",
        help="op-graph scheduler (default; both sets in about 10 s on 2 cores) or the analytic fast path",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if the dev-set mean |err| > {100 * DEV_MEAN_LIMIT:.0f}%% "
        f"or any regime's mean |err| > {100 * REGIME_MEAN_LIMIT:.0f}%%",
    )
    args = ap.parse_args(argv)
    canonical = rows is None and args.set == "all" and not args.source  # what benchmarks/results records
    rows_given = rows
    rows = load_set(args.set) if rows is None else rows
    rows = [r for r in rows if not args.source or r.source == args.source]
    res = run_rows(rows, args.engine)
    print()
    skipped = [r for r in rows if r.skip]
    print(
        f"{len(rows)} rows: {len(res)} predicted, {len(skipped)} skipped, "
        f"{len(rows) - len(res) - len(skipped)} not predictable by the cost model (listed above)"
    )
    print()
    by_source = {}
    for x in res:
        by_source.setdefault((x["set"], x["source"]), []).append(x["error"])
    print(f"{'source':<32} {'n':>3} {'mean|err|':>9} {'signed':>8} {'max|err|':>9}")
    for (s, src), es in sorted(by_source.items()):
        n, m, sg, mx = stats(es)
        print(f"{s + ' ' + src:<32} {n:>3} {100 * m:8.2f}% {100 * sg:+7.2f}% {100 * mx:8.2f}%")
    t5 = stats([x["error"] for x in res if x["set"] == "dev" and x["row_id"] in TABLE5])
    if t5[0]:
        print(
            f"{'dev Korthikanti Table 5':<32} {t5[0]:>3} {100 * t5[1]:8.2f}% {100 * t5[2]:+7.2f}% {100 * t5[3]:8.2f}%"
        )
    print()
    table = regime_table(res)
    print(f"per regime ({args.engine} engine; signed: + = predicted slower than measured)")
    print_regime_table(table)
    for reg, what in REGIMES.items():
        print(f"  {reg:<16} {what}")
    if args.csv and res:
        write_csv(args.csv, res)
    if args.set == "sealed":
        sealed_run = rows_given is None and not args.source and args.engine == "graph"
        record_sealed(argv, args.engine, res, len(skipped), record_results and sealed_run)
    else:
        record(argv, args.engine, res, table, record_results and canonical)
    if args.check:
        print()
        return check(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
