"""What one search counted and timed: :class:`SearchStats` (``SolveResult.stats``), and presolve's counts.

Every field is ``None`` until the search sets it (a search path sets only its own: the presolve and
CP-SAT path, the exhaustive one, a refused pin, the robust search). :meth:`SearchStats.to_dict` is
the ``stats`` object of the JSON output: the fields set, in the order the search first set them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class PresolveCounts:
    """What presolve discarded and kept (:func:`search.presolve.presolve`); the first fields of
    :class:`SearchStats`. Plain attributes: presolve counts as it goes."""

    groups: int = 0  # groups (shape, mb, vp) bounded
    groups_memory: int = 0  # groups no plan of which fits
    groups_bound: int = 0  # groups whose bound is above the incumbent
    dominated: int = 0  # choices dominated on chunks or bucket size
    memory: int = 0  # choices that cannot fit
    bound: int = 0  # choices whose bound is above the incumbent
    kept: int = 0  # choices left for CP-SAT
    probed: int = 0  # choices solved exactly for incumbents
    near: int | None = None  # choices above the incumbent within the re-score band (None: none)


@dataclass
class SearchStats:
    """The counts and seconds of one search (``SolveResult.stats``). The fields are declared in the
    order the presolve and CP-SAT path sets them; :meth:`to_dict` keeps the order they were set in."""

    refused: str | None = None  # the field of a pin no plan can hold (search.pins.check_pins)
    # the robust search (search.robust)
    robust_candidates: int | None = None
    robust_evaluated: int | None = None
    scenarios: int | None = None
    # the exhaustive search of a small space: choices scored
    space: int | None = None
    # presolve (PresolveCounts)
    groups: int | None = None
    groups_memory: int | None = None
    groups_bound: int | None = None
    dominated: int | None = None
    memory: int | None = None
    bound: int | None = None
    kept: int | None = None
    probed: int | None = None
    near: int | None = None
    presolve_s: float | None = None
    nominal_s: float | None = None  # the robust search's nominal solve
    resolution_s: float | None = None  # the integer tables' tick (search.tables.resolution_s)
    timed_out: str | None = None  # what the time limit stopped ("presolve")
    model_choices: int | None = None  # choices in the CP-SAT model (0: presolve's best answered)
    too_many_choices: int | None = None  # presolve left more than CP-SAT is given (search.solve)
    near_s: float | None = None  # the near plans' best splits, for the re-score
    exhaustive_s: float | None = None
    exhaustive: bool | None = None
    rescore_s: float | None = None  # the op-graph re-score
    cpsat_objective_ticks: int | None = None  # the robust search's CP-SAT check
    cpsat_agrees: bool | None = None
    activation_offload: dict | None = None  # search.act_offload_choice: what was looked at
    optimizer_offload: dict | None = None  # search.offload_choice: what was tried
    interleave_check: dict | None = None  # search.interleave_check: the answer against the best without interleaving

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        if value is not None:  # the order the fields were first set in (to_dict)
            order = self.__dict__.setdefault("_order", [])
            if name not in order:
                order.append(name)

    @classmethod
    def of_presolve(cls, counts: PresolveCounts, presolve_s: float, resolution_s: float) -> "SearchStats":
        return cls(
            groups=counts.groups,
            groups_memory=counts.groups_memory,
            groups_bound=counts.groups_bound,
            dominated=counts.dominated,
            memory=counts.memory,
            bound=counts.bound,
            kept=counts.kept,
            probed=counts.probed,
            near=counts.near,
            presolve_s=presolve_s,
            resolution_s=resolution_s,
        )

    @classmethod
    def merged(cls, parts: list["SearchStats"]) -> "SearchStats":
        """The stats of sub-searches together: numbers summed (but the one resolution), the rest the first's."""
        out = cls()
        for st in parts:
            for k, v in st.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "resolution_s":
                    setattr(out, k, (getattr(out, k) or 0) + v)
                elif getattr(out, k) is None:
                    setattr(out, k, v)
        return out

    def items(self) -> list[tuple[str, object]]:
        """``(name, value)`` of the fields set, in the order they were set."""
        return [(k, getattr(self, k)) for k in self.__dict__.get("_order", ()) if getattr(self, k) is not None]

    def to_dict(self) -> dict:
        """The ``stats`` object of the JSON output (DESIGN.md)."""
        return dict(self.items())
