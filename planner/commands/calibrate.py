"""``planner calibrate``: fit the cluster's efficiency constants to your own measured runs.

Reads measured runs (CSV/YAML tables, or Megatron-LM / NeMo training logs; see
:mod:`planner.runs`), fits the constants the runs can determine (:mod:`costmodel.trust.calibration`;
``--fit`` names them, and is refused when the runs cannot determine them), prints each run's
error before and after (and leave-one-out errors with three or more runs), and writes a
calibrated cluster file that every command takes as ``--cluster FILE``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from costmodel.trust.calibration import CONSTANTS, fit
from costmodel.trust.calibrated_section import calibrated_section
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import cluster_to_dict

from costmodel.spec.units import DTYPES

from ..arg_types import _converter
from ..args import choice_arg, int_arg
from ..report import print_json, table, to_plain
from ..runs import LOG_FLAGS, cluster_for, looks_like_log, read_runs
from ..problem import resolve_model

NAME = "calibrate"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME,
        help="fit the cluster's efficiency constants to measured runs; write a calibrated cluster file",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUNS", help="CSV/YAML tables of runs, or Megatron-LM / NeMo training logs"
    )
    p.add_argument(
        "--cluster", metavar="NAME|FILE", help="cluster the runs ran on (default: the one their 'cluster' column names)"
    )
    p.add_argument(
        "--model", metavar="NAME|FILE", help="model of runs that name none (logs: instead of the logged shape)"
    )
    g = p.add_argument_group("what a log excerpt does not state (checked against the log where it does)")
    g.add_argument("--gpus", type=int_arg("gpus"), metavar="N", help="GPUs of the run (world_size)")
    g.add_argument("--global-batch", type=int_arg("global_batch"), metavar="B", help="sequences per step")
    g.add_argument("--seq", type=int_arg("seq"), metavar="S", help="tokens per sequence")
    g.add_argument("--dtype", type=choice_arg("dtype", DTYPES), metavar="|".join(DTYPES), help="training dtype")
    for flag in ("tp", "pp", "mb", "cp", "ep", "vp"):
        g.add_argument(
            f"--{flag}",
            type=int_arg(flag),
            metavar="N",
            help=f"the run's {flag} degree" if flag != "mb" else "micro-batch size in sequences",
        )
    p.add_argument(
        "--fit",
        metavar="A,B",
        type=_converter("fit", _names, "comma-separated constant names"),
        help=f"constants to fit (default: those the runs determine); any of {', '.join(CONSTANTS)}",
    )
    p.add_argument(
        "--engine",
        choices=("analytic", "graph"),
        default="analytic",
        help="cost model used in the fit (default: %(default)s, fast)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default="calibrated.json",
        help="calibrated cluster file to write (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return p


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise SpecError("fit", text, "comma-separated constant names")
    return names


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _mean_abs(xs) -> float | None:
    return statistics.mean(abs(x) for x in xs) if xs else None


def _check_unused_model(model: str, paths) -> None:
    """``--model`` where every run names its own model: refused all the same when it is no model (it went
    unread, so a misspelt preset or a missing file passed silently). A relative path is looked for beside the
    run files too, as a table's rows look for it."""
    try:
        if not Path(model).is_absolute() and not Path(model).exists():
            beside = [Path(p).parent / model for p in paths if (Path(p).parent / model).exists()]
            model = str(beside[0]) if beside else model
    except OSError:  # a name too long for a path: resolve_model names it
        pass
    resolve_model(model)


def run(args: argparse.Namespace) -> int:
    if not any(looks_like_log(Path(p)) for p in args.runs):  # the flags fill in a log; a table's rows ignored them
        for k in LOG_FLAGS:
            if getattr(args, k) is not None:
                raise SpecError(k, getattr(args, k), "unset unless a run file is a training log (a table states it)")
    runs = read_runs(args.runs, model=args.model, given={k: getattr(args, k) for k in LOG_FLAGS})
    if args.model is not None and not any(r.model_ref == args.model for r in runs):
        _check_unused_model(args.model, args.runs)
    base = cluster_for(runs, args.cluster)
    if base.calibrated_constants:
        raise SpecError(
            "cluster",
            base.name,
            "an uncalibrated cluster (calibrate from the preset or file the runs ran on, not from a calibrated file)",
        )
    cal = fit([r.measured() for r in runs], base, args.fit, engine=args.engine)
    section = calibrated_section(cal, base.name, [r.info() for r in runs])
    doc = cluster_to_dict(cal.cluster.with_gpus(0))
    doc["name"] = f"{base.name}-calibrated"
    doc["description"] = (
        f"{base.name} calibrated by `planner calibrate` on {len(runs)} measured run"
        f"{'s' if len(runs) > 1 else ''}: fitted {', '.join(cal.names)}"
    )
    doc["calibrated"] = section
    out = Path(args.output)
    try:
        out.write_text(json.dumps(to_plain(doc), indent=2) + "\n")
    except OSError as e:
        raise SpecError("output", str(out), f"a writable path ({e.strerror})") from None
    summary = {
        "mean_abs_error_before": _mean_abs(cal.errors_before),
        "mean_abs_error_after": _mean_abs(cal.errors_after),
        "mean_abs_loo_error": _mean_abs(cal.loo_errors or []),
    }
    for w in cal.warnings:  # on stderr, so --json keeps stdout one object (the warnings are in it too)
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print_json({"status": "ok", "written": str(out), "cluster": doc["name"], **section, **summary})
        return 0
    print(
        f"calibrating {base.name} ({base.device.name}) on {len(runs)} run{'s' if len(runs) > 1 else ''}, "
        f"engine {cal.engine}\n"
    )
    rows = [
        [
            n,
            f"{CONSTANTS[n].lo:g}-{CONSTANTS[n].hi:g}",
            f"{cal.before[n]:.3f}",
            f"{cal.after[n]:.3f}",
            "" if cal.stderr.get(n) is None else f"{cal.stderr[n]:.3f}",
            f"{100 * cal.selection.effect[n]:.1f}%",
        ]
        for n in cal.names
    ]
    print(table(["fitted constant", "bounds", "before", "after", "+-", "effect"], rows))
    for n, why in cal.selection.skipped.items():
        print(f"  not fitted: {n}: {why}")
    print()
    loo = cal.loo_errors
    rows = []
    for i, r in enumerate(runs):
        rows.append(
            [
                r.label,
                r.model.name,
                r.gpus,
                f"{r.measured_s:.4g}",
                _pct(cal.errors_before[i]),
                _pct(cal.errors_after[i]),
            ]
            + ([_pct(loo[i])] if loo else [])
        )
    rows.append(
        [
            "mean |error|",
            "",
            "",
            "",
            f"{100 * summary['mean_abs_error_before']:.1f}%",
            f"{100 * summary['mean_abs_error_after']:.1f}%",
        ]
        + ([f"{100 * summary['mean_abs_loo_error']:.1f}%"] if loo else [])
    )
    print(
        table(
            ["run", "model", "gpus", "measured s", "error before", "error after"] + (["leave-one-out"] if loo else []),
            rows,
        )
    )
    if not loo:
        print("(leave-one-out errors need 3 or more runs)")
    print(f"\nwrote {out}: use it as --cluster {out}")
    return 0
