"""The CSV cells of a published row: numbers where the source states one."""

from __future__ import annotations

import math


def cell_num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def cell_int(x, default=None):
    v = cell_num(x)
    return int(v) if v is not None else default
