"""What the fitted GEMM constants were hiding (issue 38): every regime predicted with the measured GEMM tables
in place of the fitted efficiencies, nothing refitted.

    python -m benchmarks.kernel_regimes [--set all|dev|new] [--backend trtllm] [--rows N]

For each published run of the development side (``--set all``: dev and new; the sealed split is never read)
this predicts the step twice with the same plan: with the presets' fitted GEMM efficiencies (today's model)
and with single GEMMs timed from AIConfigurator's measured tables divided by the generation's sustained clock
(:mod:`costmodel.physics.kernels.measured`; grouped and batched GEMMs keep the fitted model). Per regime and
GPU generation it prints the signed and absolute mean error of both, and the GEMM share of the predicted
compute, so that the gap each regime shows with measured kernels names what the fitted constant absorbed:

* a regime that moves from right to too fast by about the GEMM share times the table/fitted rate ratio: the
  fitted constant absorbed something the step does around its GEMMs (host and launch overhead, the non-GEMM
  kernels, clocks lower than the cited ones);
* a regime that stays right: the fitted constant was the kernel rate at sustained clocks;
* a regime already too fast that gets faster (B200): the missing time is elsewhere than in the GEMM rate.

Both predictions use the closed-form engine (the op-graph engine agrees with it within the figures of
``benchmarks/engine_agreement.py``; the comparison is between kernel sources, not engines).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

from benchmarks.published import load_set, predict
from benchmarks.regimes import REGIMES
from benchmarks.results_io import pct, record
from costmodel.physics.kernels.measured import generation, table_system
from costmodel.trust.evidence import compute_parts


def _with_table(row, backend: str):
    dev = replace(row.cluster.device, kernel_table=backend)
    return replace(row, cluster=replace(row.cluster, device=dev))


def run(rows, backend: str, out=print) -> list[dict]:
    out(f"{'row':>4} {'source':<22} {'model':<20} {'gpus':>5} {'fitted%':>8} {'tables%':>8} {'gemm':>5}  generation")
    res = []
    for r in rows:
        if r.skip:
            continue
        fitted, _ = predict(r, "analytic")
        tabled, _ = predict(_with_table(r, backend), "analytic")
        if fitted is None or tabled is None:
            continue
        system, _ = table_system(r.cluster.device)
        gen = generation(system) if system else "no table"
        share = compute_parts(r.model, r.cluster, r.workload, fitted.config)["gemm"][0]
        e_fit, e_tab = fitted.step_time_s / r.measured_s - 1, tabled.step_time_s / r.measured_s - 1
        out(
            f"{r.row_id:>4} {r.source[:22]:<22} {r.label[:20]:<20} {r.gpus:>5} {100 * e_fit:+8.1f} {100 * e_tab:+8.1f}"
            f" {share:5.2f}  {gen}"
        )
        res.append(
            {
                "row_id": r.row_id,
                "generation": gen,
                "regimes": r.regimes,
                "fitted": e_fit,
                "tables": e_tab,
                "gemm_share": share,
            }
        )
    return res


def _stats(errs):
    return (len(errs), statistics.mean(abs(e) for e in errs), statistics.mean(errs)) if errs else (0, None, None)


def summary(res: list[dict]) -> list[dict]:
    groups = {f"generation {g}": [x for x in res if x["generation"] == g] for g in ("ampere", "hopper", "blackwell")}
    groups.update({f"regime {k}": [x for x in res if k in x["regimes"]] for k in REGIMES})
    groups["ALL"] = res
    table = []
    for name, sel in groups.items():
        if not sel:
            continue
        n, fa, fs = _stats([x["fitted"] for x in sel])
        _, ta, ts = _stats([x["tables"] for x in sel])
        share = statistics.mean(x["gemm_share"] for x in sel)
        table.append(
            {
                "group": name,
                "rows": n,
                "fitted_mean_abs_pct": pct(fa),
                "fitted_signed_pct": pct(fs),
                "tables_mean_abs_pct": pct(ta),
                "tables_signed_pct": pct(ts),
                "gemm_share_of_compute": round(share, 2),
            }
        )
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="all", choices=("all", "dev", "new", "spent"))
    ap.add_argument("--backend", default="trtllm", help="the GEMM table's library (trtllm, vllm, sglang)")
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (a quick look; not recorded)")
    a = ap.parse_args(argv)
    rows = load_set(a.set)
    if a.rows:
        rows = rows[: a.rows]
    res = run(rows, a.backend)
    table = summary(res)
    print(f"\n{'group':<26} {'n':>3}  fitted |e| signed   tables |e| signed   GEMM share")
    for t in table:
        print(
            f"{t['group']:<26} {t['rows']:>3}  {t['fitted_mean_abs_pct']:>9}% {t['fitted_signed_pct']:>+6}%"
            f"  {t['tables_mean_abs_pct']:>9}% {t['tables_signed_pct']:>+6}%   {t['gemm_share_of_compute']:>5}"
        )
    all_row = next(t for t in table if t["group"] == "ALL")
    record(
        "kernel_regimes",
        argv,
        title="Published runs predicted with measured GEMM tables (sustained clocks) vs the fitted GEMM constants",
        headline={
            "rows": all_row["rows"],
            "fitted_mean_abs_pct": all_row["fitted_mean_abs_pct"],
            "tables_mean_abs_pct": all_row["tables_mean_abs_pct"],
            "tables_signed_pct": all_row["tables_signed_pct"],
        },
        table=table,
        inputs=["costmodel", "benchmarks/data/published_dev.csv", "benchmarks/data/published_new.csv"],
        enabled=a.set == "all" and not a.rows and a.backend == "trtllm",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
