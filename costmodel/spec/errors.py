"""Typed errors. Every user-facing failure is one line naming the field, the value and what is allowed."""


class PlannerError(Exception):
    """Base class: the message is a single line fit for the CLI's stderr."""


#: characters of a user's value an error message echoes (a 100,000-character name is cut; file
#: paths of ordinary length are not)
ECHO_CHARS = 200


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was.

    >>> clip("x" * 300, 80)
    'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (300 characters)'
    """
    text = str(text)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


class SpecError(PlannerError, ValueError):
    """A field of a spec or config has a value that is not allowed.

    The value is echoed cut to :data:`ECHO_CHARS` (:func:`clip`), the field (which may hold a file
    path and line) to five times that.

    >>> print(SpecError("tp", 3, "a divisor of heads=32"))
    tp=3: must be a divisor of heads=32
    """

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{clip(field, 5 * ECHO_CHARS)}={clip(repr(value))}: must be {allowed}")


class InfeasibleConfig(PlannerError):
    """A config that is well formed but cannot run (e.g. it does not fit in memory)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
