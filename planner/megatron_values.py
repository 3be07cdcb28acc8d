"""Typed values of a Megatron-LM / NeMo argument dict (:func:`planner.megatron_args.parse_command_line`): text
(``"True"``, ``"8"``, ``"null"``) read as booleans, integers and fractions, a value that is none of them refused
naming the argument (:class:`SpecError`).

>>> as_bool("sequence_parallel", "True"), as_int("tensor_model_parallel_size", "8.0"), _none("null")
(True, 8, True)
"""

from __future__ import annotations

import math

from costmodel.spec.errors import SpecError


def _none(v) -> bool:
    return v is None or str(v).strip().lower() in ("none", "null", "", "~")


def as_bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off", "none", "null"):
        return False
    raise SpecError(name, v, "True or False")


def as_int(name: str, v) -> int:
    if isinstance(v, bool):
        raise SpecError(name, v, "an integer")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise SpecError(name, v, "an integer") from None
    if not math.isfinite(f) or f != int(f):  # nan, inf and past-float digits were a ValueError / OverflowError
        raise SpecError(name, v, "an integer")
    return int(f)


def _get_int(args: dict, name: str):
    return None if _none(args.get(name)) else as_int(name, args[name])


def as_fraction(name: str, v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if isinstance(v, bool) or not 0.0 <= f <= 1.0:
        raise SpecError(name, v, "a number from 0 to 1")
    return f
