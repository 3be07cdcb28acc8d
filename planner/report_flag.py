"""``--report FILE.html`` of ``planner recommend``, ``evaluate`` and ``sweep``: the self-contained HTML report
(:mod:`planner.html_report`) written after the answer is printed, and one line on stderr naming it.

A path that cannot be written exits 2 with one line (the :class:`SpecError` :func:`write_report` raises); so does
``--report`` with ``--mode infer`` (the report is of training plans).
"""

from __future__ import annotations

import argparse
import sys

from costmodel.spec.errors import PlannerError

from .arg_types import nonempty_arg


def add_report_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--report FILE.html`` flag."""
    parser.add_argument(
        "--report",
        type=nonempty_arg("report", "a file path"),
        metavar="FILE.html",
        help="also write a self-contained HTML report (plan, step-time breakdown, memory, overlap timeline, "
        "objectives; needs the 'report' extra: jinja2, matplotlib)",
    )


def refuse_serving(args: argparse.Namespace) -> None:
    """``--report`` with ``--mode infer``: one line, exit 2 (before any work)."""
    if getattr(args, "report", None) and getattr(args, "mode", "train") == "infer":
        raise PlannerError("report: only for training plans")


def report_objectives(args: argparse.Namespace) -> dict | None:
    """The run's objective inputs as :func:`planner.html_report.write_report` takes them (None without
    ``--train-tokens``)."""
    from .objective_flags import objective_options

    o = objective_options(args)
    if o["train_tokens"] is None:
        return None
    return {"train_tokens": o["train_tokens"], **o["objective_inputs"]}


def write_report_of(args: argparse.Namespace, **kwargs) -> None:
    """Write ``args.report`` (when given) from ``kwargs`` (:func:`planner.html_report.write_report`'s) and say so on
    stderr."""
    if not getattr(args, "report", None):
        return
    from .html_report import write_report

    path = write_report(args.report, **kwargs)
    print(f"report: wrote {path}", file=sys.stderr)
