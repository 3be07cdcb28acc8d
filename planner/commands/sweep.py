"""``planner sweep``: plan every case of a grid and append the results to DIR/results.{csv,jsonl}.

The grid is the product of the comma-separated flags (or the same keys in ``--grid FILE``,
YAML or JSON; flags override the file). Results are written as each case finishes; run the
same command again after an interruption and it skips the finished cases. A case that is
malformed or has no plan that fits is recorded with its reason, and the sweep goes on.
Ctrl-C (exit 130) or SIGTERM (exit 143) stops it with one line saying how many cases are written.
With two or more ``--dma-engines`` counts it ends with a co-design summary per problem: the best
plan, its chunks, DMA assignment and step time at each engine count, and the count from which
the critical condition T_comm <= T_compute holds. ``--report FILE.html`` also writes the sweep's cases and Pareto
fronts as a self-contained HTML report (:mod:`planner.report_flag`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from costmodel.spec.errors import SpecError

from ..arg_types import nonempty_arg
from ..args import add_output_args, choice_arg, int_arg
from ..objective_flags import add_objective_args, objective_options
from ..report import print_json
from ..report_flag import add_report_arg, write_report_of
from ..sweep.codesign import dma_series, format_dma_summary
from ..sweep.grid import grid_from_mapping, load_grid_file
from ..sweep.api import BACKENDS, run_sweep
from ..sweep.runner import SweepInterrupted
from ..sweep.schema import markdown
from ..sweep.store import CSV, JSONL, ResultStore

NAME = "sweep"
#: grid flags: (flag, grid key, help)
GRID_FLAGS = (
    ("--models", "models", "model presets or spec files, comma-separated"),
    ("--clusters", "clusters", "cluster presets or spec files, comma-separated"),
    ("--gpus", "gpus", "GPU counts, e.g. 64,128"),
    ("--global-batch", "global_batch", "global batches in sequences, e.g. 512,1024"),
    ("--seq", "seq", "sequence lengths in tokens, e.g. 2048,4096"),
    ("--dtype", "dtype", "GEMM formats (default bf16)"),
    ("--dma-engines", "dma_engines", "what-if: DMA engine counts"),
    ("--nvlink-gbps", "nvlink_gbps", "what-if: intra-node bandwidths per GPU, GB/s"),
    ("--nic-gbps", "nic_gbps", "what-if: inter-node bandwidths per GPU, GB/s"),
    ("--hbm-gib", "hbm_gib", "what-if: HBM capacities per GPU, GiB"),
    ("--framework", "framework", "frameworks that run the plans: megatron, deepspeed, fsdp2 (default megatron)"),
    ("--grad-dtype", "grad_dtype", "gradient dtypes: fp32, bf16, fp16 (default fp32)"),
    ("--time-limit", "time_limit_s", "solver time limit per case in seconds (default 10)"),
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME,
        help="plan a grid of models x clusters x GPUs x batches x sequences",
        description=__doc__.split(": ", 1)[1].strip(),
    )
    g = p.add_argument_group("grid (comma-separated values; the product is swept)")
    g.add_argument(
        "--grid",
        type=nonempty_arg("grid", "a file path"),
        metavar="FILE",
        help="YAML/JSON file with the same keys (global_batch or global-batch)",
    )
    for flag, key, text in GRID_FLAGS:
        g.add_argument(flag, dest=f"grid_{key}", metavar="S" if key == "time_limit_s" else "LIST", help=text)
    r = p.add_argument_group("running")
    r.add_argument("--out", metavar="DIR", help="results directory (created; resumed when it has results)")
    r.add_argument("--workers", type=int_arg("workers"), metavar="N", help="parallel cases (default: all cores)")
    r.add_argument(
        "--backend",
        type=choice_arg("backend", BACKENDS),
        metavar="{" + ",".join(BACKENDS) + "}",
        help="local process pool (default) or Ray",
    )
    r.add_argument("--address", metavar="ADDR", help="with --backend ray: join this cluster (or 'auto')")
    r.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar on stderr")
    r.add_argument("--plots", action="store_true", help="also draw the plots into DIR/plots (needs matplotlib)")
    r.add_argument("--schema", action="store_true", help="print the result columns (Markdown) and exit")
    add_objective_args(p)
    add_output_args(p)
    add_report_arg(p)
    return p


def grid_and_run_options(args: argparse.Namespace):
    """The grid (file, then flags over it) and the run options (flags over the file's)."""
    data = dict(load_grid_file(args.grid)) if args.grid else {}
    for _, key, _ in GRID_FLAGS:
        value = getattr(args, f"grid_{key}")
        if value is not None:
            data = {k: v for k, v in data.items() if k.replace("-", "_") != key}
            data[key] = value
    grid = grid_from_mapping(data, source="grid")
    o = objective_options(args)  # the plan of each case by the objective, and its run priced
    if o["train_tokens"] is not None:
        inputs = tuple(sorted(o["objective_inputs"].items()))
        grid = replace(grid, objective=o["objective"], train_tokens=o["train_tokens"], objective_inputs=inputs)
    run = dict(grid.run)
    for key in ("out", "workers", "backend", "address"):
        if getattr(args, key) is not None:
            run[key] = getattr(args, key)
    if "out" not in run:
        raise SpecError("out", None, "given (--out DIR, or out: in the grid file)")
    if not isinstance(run["out"], str) or not run["out"].strip():  # '' wrote the results into the working directory
        raise SpecError("out", run["out"], "a directory path, not empty")
    if "workers" in run:
        int_arg("workers")(str(run["workers"]))
        run["workers"] = int(run["workers"])
    return grid, run


def run(args: argparse.Namespace) -> int:
    if args.schema:
        print(markdown())
        return 0
    grid, opts = grid_and_run_options(args)
    cases = grid.cases()
    out = Path(opts["out"])
    try:
        with _sigterm_raises():
            summary = run_sweep(
                cases,
                opts["out"],
                workers=opts.get("workers"),
                backend=opts.get("backend", "local"),
                address=opts.get("address"),
                progress=args.progress,
            )
    except KeyboardInterrupt as e:
        ids = {c.id for c in cases}
        written = len({r["case_id"] for r in ResultStore(out).read() if r.get("case_id") in ids})
        print(
            f"planner: interrupted: {written} of {len(cases)} cases written to {out}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 128 + (e.signum if isinstance(e, SweepInterrupted) else signal.SIGINT)
    ids = {c.id for c in cases}
    mine = [r for r in ResultStore(out).read() if r.get("case_id") in ids]
    series = dma_series(mine)
    trust = assumptions(mine)
    plots = []
    if args.plots:
        from ..sweep.plots import plot_sweep

        plots = [str(p) for p in plot_sweep(out, out / "plots")]
    best = best_case(mine, grid.objective) if grid.train_tokens is not None else None
    if args.json:
        extra = {"dma_engines": [x.to_dict() for x in series]} if series else {}
        if grid.train_tokens is not None:
            extra["best_by_objective"] = best
        print_json(
            {**summary.to_dict(), "results": [str(out / CSV), str(out / JSONL)], "plots": plots, **trust, **extra}
        )
        sys.stdout.flush()
        write_report_of(args, sweep_rows=mine)
        return 0
    s = summary
    print(
        f"{s.total} cases: {s.ok} ok, {s.infeasible} infeasible, {s.unsolved} unsolved, {s.error} error, "
        f"{s.crashed} crashed "
        f"({s.resumed} already done, {s.ran} run in {s.wall_s:.1f} s on {s.backend} with {s.workers} workers)"
    )
    print(f"results: {out / CSV}  {out / JSONL}")
    if trust["stacks"]:
        print(
            f"assumed: stack {', '.join(trust['stacks'])}; every knob chosen by the search (the plan columns); "
            f"{trust['extrapolating_cases']} of {trust['banded_cases']} banded cases extrapolate beyond the "
            "measured data (column band_notes says where)"
        )
    if grid.train_tokens is not None:
        print(best_line(best, grid.objective, len(mine)))
    for p in plots:
        print(f"plot: {p}")
    if series:  # a --dma-engines axis: how the best plan and T_comm <= T_compute change with the count
        print()
        print(format_dma_summary(series))
    sys.stdout.flush()
    write_report_of(args, sweep_rows=mine)
    return 0


class _sigterm_raises:
    """While active (main thread only): SIGTERM raises :class:`SweepInterrupted` in the driver."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise SweepInterrupted(signum)

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


#: the column each objective minimises across cases
OBJECTIVE_COLUMN = {"step": "step_time_s", "time-to-train": "days", "cost": "usd", "energy": "kwh"}


def best_case(rows, objective: str) -> dict | None:
    """The ok case with the least value of ``objective``'s column (:data:`OBJECTIVE_COLUMN`), as a small dict."""
    col = OBJECTIVE_COLUMN[objective]
    ok = [r for r in rows if r.get("status") == "ok" and r.get(col) is not None]
    if not ok:
        return None
    r = min(ok, key=lambda r: (r[col], r.get("step_time_s") or 0.0))
    keys = ("case_id", "model", "cluster", "gpus", "global_batch", "seq", "tp", "pp", "dp", "cp", "ep")
    return {
        "objective": objective,
        "column": col,
        "value": r[col],
        **{k: r.get(k) for k in keys},
        **{k: r.get(k) for k in ("step_time_s", "days", "goodput", "usd", "usd_per_million_tokens", "kwh")},
    }


def best_line(best: dict | None, objective: str, cases: int) -> str:
    """``best by cost: llama3-8b on 64 x h100-sxm ...`` (the objective columns are in the results files)."""
    if best is None:
        return f"best by {objective}: no case with a plan and a value (columns {OBJECTIVE_COLUMN[objective]})"
    usd = "" if best["usd"] is None else f", ${best['usd']:,.0f} (${best['usd_per_million_tokens']:.3f}/M tokens)"
    return (
        f"best by {objective} of {cases} cases: {best['model']} on {best['gpus']} x {best['cluster']} "
        f"(global batch {best['global_batch']} x {best['seq']}; tp={best['tp']} pp={best['pp']} dp={best['dp']} "
        f"cp={best['cp']} ep={best['ep']}): step {best['step_time_s']:.3f} s, {best['days']:.1f} days, goodput "
        f"{100 * best['goodput']:.1f}%{usd}, {best['kwh']:,.0f} kWh (columns days, goodput, usd, kwh ...)"
    )


def assumptions(rows) -> dict:
    """What the sweep's numbers rest on (issue 23): the stacks its plans assumed, and how many banded cases
    lie beyond the measured data (a band note other than the one saying the plan is within it)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    banded = [r for r in ok if r.get("band_notes")]
    beyond = [r for r in banded if any(not n.startswith("within the data") for n in _notes(r["band_notes"]))]
    return {
        "stacks": sorted({r["stack"] for r in ok if r.get("stack")}),
        "banded_cases": len(banded),
        "extrapolating_cases": len(beyond),
    }


def _notes(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [n for n in str(value).split("; ") if n]
