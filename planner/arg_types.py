"""The CLI's argument types and parser: every bad value becomes one line naming the field, the value and what is
allowed (exit 2), through :class:`ArgParser` and the converters (:func:`int_arg`, :func:`float_arg`, ...)."""

from __future__ import annotations

import argparse
import math
import re
import sys
from costmodel.spec.errors import PlannerError, SpecError
from costmodel.spec.dma_plan import parse as parse_dma


class UsageError(PlannerError):
    """A command-line mistake argparse reports that names no single field."""


class _BadValue(argparse.ArgumentTypeError):
    """Carries a converter's SpecError through argparse (which only lets these through)."""

    def __init__(self, error: SpecError):
        super().__init__(str(error))
        self.error = error


def _field(option: str) -> str:
    """``--global-batch`` (or ``--sp/--no-sp``) -> ``global_batch``."""
    return option.split("/")[0].lstrip("-").replace("-", "_")


def _translate(message: str) -> PlannerError:
    """One of argparse's own error messages as a SpecError naming the option."""
    if m := re.match(r"the following arguments are required: (.+)", message):
        first = m.group(1).split(", ")[0]
        return SpecError(_field(first), None, f"given ({first} is required)")
    if m := re.match(r"unrecognized arguments: (\S+)", message):
        return SpecError("argument", m.group(1), "an option of this command (see --help)")
    if m := re.match(r"argument (\S+): invalid choice: '?([^']*)'? \(choose from (.*)\)", message):
        return SpecError(_field(m.group(1)), m.group(2), "one of " + m.group(3).replace("'", ""))
    if m := re.match(r"argument (\S+): ignored explicit argument '(.*)'", message):
        return SpecError(_field(m.group(1)), m.group(2), "a switch given without a value")
    if m := re.match(r"argument (\S+): expected one argument", message):
        return SpecError(_field(m.group(1)), None, f"given a value ({m.group(1).split('/')[0]} VALUE)")
    return UsageError(" ".join(message.split()))


class ArgParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting.

    Subparsers made with ``add_subparsers().add_parser`` are of this class too. Options
    must be spelled in full (no abbreviations).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        # argparse calls error() while handling the ArgumentError that a converter's
        # _BadValue caused, so the original SpecError is on the exception chain.
        exc = sys.exc_info()[1]
        while exc is not None:
            if isinstance(exc, _BadValue):
                raise exc.error from None
            exc = exc.__context__
        raise _translate(message) from None


# --------------------------------------------------------------------------- converters
def _converter(field: str, parse, allowed: str, ok=lambda v: True):
    """An argparse ``type``: ``parse(text)`` then ``ok(value)``, else SpecError(field, value, allowed).

    The error shows the parsed value when parsing worked (``gpus=0``), the text otherwise.
    """

    def convert(text: str):
        try:
            value = parse(text)
        except (TypeError, ValueError, KeyError):
            raise _BadValue(SpecError(field, text, allowed)) from None
        if not ok(value):
            raise _BadValue(SpecError(field, value, allowed))
        return value

    convert.__name__ = field
    return convert


def int_arg(field: str, minimum: int = 1):
    """Integers ``>= minimum``."""
    allowed = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    return _converter(field, int, allowed, lambda v: v >= minimum)


def float_arg(field: str, minimum: float = 0.0):
    """Finite numbers ``>= minimum``."""
    return _converter(field, float, f"a finite number >= {minimum:g}", lambda v: math.isfinite(v) and v >= minimum)


def nonempty_arg(field: str, what: str):
    """Text that is not empty or blank: ``what`` (``a file path``) names what it should be. An empty path was
    taken as "not given" (``--report ''`` wrote nothing) or as the working directory (``sweep --out ''``)."""
    return _converter(field, str, f"{what}, not empty", lambda v: bool(v.strip()))


def choice_arg(field: str, choices):
    """One of ``choices`` (strings, or ints given as text)."""
    by_text = {str(c): c for c in choices}
    return _converter(field, by_text.__getitem__, "one of " + ", ".join(by_text))


def dma_arg(text: str):
    """``--dma``: a DMA-engine assignment (:func:`costmodel.spec.dma_plan.parse`; its SpecError names ``dma``)."""
    try:
        return parse_dma(text)
    except SpecError as e:
        raise _BadValue(e) from None


def _latency_ms(field: str, minimum: float):
    """A latency target in milliseconds; values below ``minimum`` are no GPU's latency (seconds given?)."""
    return _converter(
        field,
        float,
        f"a number of milliseconds >= {minimum:g} (was it given in seconds?)",
        lambda v: math.isfinite(v) and v >= minimum,
    )
