"""What stands behind one looked-up number (issue 38: "evidence on every number")."""

from __future__ import annotations

from dataclasses import dataclass

#: from the strongest to the weakest
KINDS = ("measured", "interpolated", "extrapolated", "fitted", "assumed")


@dataclass(frozen=True)
class Evidence:
    """The evidence of one number.

    kind : ``measured`` (a table point, exactly), ``interpolated`` (between table points),
        ``extrapolated`` (outside the table's range, or touching a grid hole filled at conversion),
        ``fitted`` (a constant fitted to step times) or ``assumed`` (nobody measured it: no table).
    table : the table read, ``system/op/backend/version`` ("" when none).
    note : one short line (which table stood in, how far outside, ...).
    distance : 0 inside the table; else how far outside, in log2 units of the worst axis.
    """

    kind: str
    table: str = ""
    note: str = ""
    distance: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"evidence kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if not self.distance >= 0:
            raise ValueError(f"evidence distance {self.distance!r}: expected >= 0")


def weakest(*kinds: str) -> str:
    """The weakest of ``kinds`` (``measured`` < ... < ``assumed``)."""
    return max(kinds, key=KINDS.index)


def join_notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)
