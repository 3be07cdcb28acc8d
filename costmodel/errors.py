"""Typed errors. Every user-facing failure is one line naming the field, the value and what is allowed."""


class PlannerError(Exception):
    """Base class: the message is a single line fit for the CLI's stderr."""


class SpecError(PlannerError, ValueError):
    """A field of a spec or config has a value that is not allowed.

    >>> print(SpecError("tp", 3, "a divisor of heads=32"))
    tp=3: must be a divisor of heads=32
    """

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r}: must be {allowed}")


class InfeasibleConfig(PlannerError):
    """A config that is well formed but cannot run (e.g. it does not fit in memory)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
