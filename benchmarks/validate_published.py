"""Predicted vs measured step time on the development set of published training runs.

    python benchmarks/validate_published.py [--source korthikanti2022] [--csv out.csv]

Prints one line per row (predicted and measured seconds, signed error, the plan used) and the
mean and max absolute error overall, per source, and on Korthikanti et al.'s eight Table-5
iteration times. See ``benchmarks/published.py`` for how unstated settings are filled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import load_rows, predict, write_csv  # noqa: E402

TABLE5 = {"34", "35", "36", "37", "38", "39", "40", "41"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", help="only rows of this source_key")
    ap.add_argument("--csv", help="also write per-row results here")
    ap.add_argument("--engine", choices=("graph", "analytic"), default="graph",
                    help="op-graph scheduler (default) or the analytical fast path")
    args = ap.parse_args(argv)
    rows = [r for r in load_rows() if not args.source or r.source == args.source]
    out, errs = [], {}
    print(f"{'row':>4} {'source':<20} {'model':<18} {'gpus':>5} {'pred_s':>9} {'meas_s':>9} {'err%':>7}  plan")
    for r in rows:
        if r.skip:
            print(f"{r.row_id:>4} {r.source:<20} {r.label[:18]:<18} {r.cluster.num_gpus:>5} {'':>9} {'':>9} {'':>7}  skipped: {r.skip}")
            continue
        est, why = predict(r, args.engine)
        if est is None:
            print(f"{r.row_id:>4} {r.source:<20} {r.label[:18]:<18}  no prediction: {why}")
            continue
        err = est.step_time_s / r.measured_s - 1
        errs.setdefault(r.source, []).append((r.row_id, err))
        c = est.config
        plan = f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp} mb{c.mb} v{c.vp} sp{int(c.sp)} {c.recompute} z{c.zero}" + ("" if est.fits else " (does not fit)")
        print(f"{r.row_id:>4} {r.source:<20} {r.label[:18]:<18} {r.cluster.num_gpus:>5} {est.step_time_s:9.3f} {r.measured_s:9.3f} {100 * err:+7.1f}  {plan}")
        out.append({"row_id": r.row_id, "source": r.source, "model": r.label, "gpus": r.cluster.num_gpus,
                    "predicted_s": est.step_time_s, "measured_s": r.measured_s, "error": err, "plan": plan})
    print()

    def summary(name, es):
        a = [abs(e) for _, e in es]
        if a:
            print(f"{name:<28} n={len(a):>2}  mean |err| {100 * statistics.mean(a):5.2f}%   max |err| {100 * max(a):5.2f}%")
    allerr = [x for es in errs.values() for x in es]
    summary("all rows", allerr)
    for s, es in sorted(errs.items()):
        summary(s, es)
    summary("Korthikanti Table 5 (8 rows)", [x for x in allerr if x[0] in TABLE5])
    if args.csv and out:
        write_csv(args.csv, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
