"""Typed errors. Every user-facing failure is one line naming the field, the value and what is allowed."""


class PlannerError(Exception):
    """Base class: the message is a single line fit for the CLI's stderr."""


#: characters of a user's text that a warning or a name echoes (a 100,000-character name is cut)
ECHO_CHARS = 200
#: characters of a value an error line echoes (a 300-character model name is cut to this, ellipsis and
#: length included; a file path of ordinary length is not), and of its field (which may hold a file path
#: and line): the whole refusal stays one short line (issue 42 item 9: a 300-character name made a
#: 975-byte error)
ERROR_VALUE_CHARS = 100
ERROR_FIELD_CHARS = 120
#: the longest line the CLI prints for an error (:func:`one_line`): a last guard over every message
ERROR_LINE_CHARS = 500


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was.

    >>> clip("x" * 300, 80)
    'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (300 characters)'
    """
    text = str(text)
    return text if len(text) <= limit else f"{text[: max(limit - 20, 8)]}... ({len(text):,} characters)"


def clip_middle(text: str, limit: int = ERROR_VALUE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters in its middle (a path keeps its file name), saying how long
    it was: how an error echoes a value.

    >>> clip_middle("/very/long/" + "d" * 300 + "/config.json", 60)
    '/very/long/dddddd...dddddd/config.json (323 characters)'
    """
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 25, 8)
    return f"{text[: keep // 2]}...{text[len(text) - (keep - keep // 2) :]} ({len(text):,} characters)"


def one_line(message, limit: int = ERROR_LINE_CHARS) -> str:
    """``message`` as one line (whitespace runs, newlines included, become one space), cut to ``limit``
    characters: how the CLI prints every error and warning.

    >>> one_line("tp=3:\\n  must be  a divisor")
    'tp=3: must be a divisor'
    """
    return clip(" ".join(str(message).split()), limit)


class SpecError(PlannerError, ValueError):
    """A field of a spec or config has a value that is not allowed.

    The value is echoed cut to :data:`ERROR_VALUE_CHARS` (:func:`clip_middle`), the field (which may hold a
    file path and line) to :data:`ERROR_FIELD_CHARS`.

    >>> print(SpecError("tp", 3, "a divisor of heads=32"))
    tp=3: must be a divisor of heads=32
    """

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{clip_middle(field, ERROR_FIELD_CHARS)}={clip_middle(repr(value))}: must be {allowed}")


class InfeasibleConfig(PlannerError):
    """A config that is well formed but cannot run (e.g. it does not fit in memory)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
