"""The ``planner`` command line: a thin layer over the library that keeps no state.

Each subcommand is a module ``planner.commands.<name>`` with ``add_parser(subparsers)``
and ``run(args) -> int``; to add one, append its name to :data:`COMMANDS`.

User errors (:class:`~costmodel.spec.errors.PlannerError`, and ``ValueError`` raised by specs)
exit with code 2 and one line on stderr: ``planner: error: <field>=<value>: must be <allowed>``.

>>> import contextlib, io
>>> with contextlib.redirect_stderr(io.StringIO()) as err:
...     code = main(["evaluate", "--model", "gpt3-175b", "--cluster", "a100-80g", "--gpus", "64",
...                  "--global-batch", "64", "--seq", "2048", "--tp", "7"])
>>> print(code, err.getvalue(), end="")
2 planner: error: tp*pp*cp=7: must be a divisor of gpus=64 (tp=7 pp=1 cp=1), or give dp
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import warnings

from costmodel.spec.errors import PlannerError, SpecError, one_line

from .arg_types import ArgParser
from .flags import check_contradictions

#: when the command started (the console script imports this module first; main() resets it for
#: each in-process call): ``recommend --time-limit`` bounds the whole command from here
STARTED_S = time.perf_counter()

#: subcommand modules under planner.commands, in the order --help lists them
COMMANDS = [
    "evaluate",
    "explain",
    "presets",
    "sweep",
    "recommend",
    "calibrate",
]


def command_module(name: str):
    """The module implementing subcommand ``name``."""
    return importlib.import_module(f"{__package__}.commands.{name}")


def build_parser() -> ArgParser:
    from . import __version__

    parser = ArgParser(prog="planner", description="Overlap-aware parallelism planner for LLM training and inference.")
    parser.add_argument("--version", action="version", version=f"planner {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands")
    for name in COMMANDS:
        command_module(name).add_parser(sub)
    return parser


def _warn_one_line(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (an unknown HF ``model_type``, ...) as one stderr line, like errors."""
    print(f"planner: warning: {' '.join(str(message).split())}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    global STARTED_S
    STARTED_S = min(STARTED_S, time.perf_counter()) if argv is None else time.perf_counter()
    with warnings.catch_warnings():
        warnings.showwarning = _warn_one_line
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and friends
            return e.code if isinstance(e.code, int) else 0
        if args.command is None:
            raise SpecError("command", None, f"one of {', '.join(COMMANDS)} (see planner --help)")
        check_contradictions(args)
        args.started_s = STARTED_S  # recommend --time-limit bounds the whole command from here
        code = command_module(args.command).run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader went away (`planner presets | head`): stop quietly (Python docs, "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (PlannerError, ValueError) as e:
        print(f"planner: error: {one_line(e)}", file=sys.stderr)
        return 2
