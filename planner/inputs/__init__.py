"""A plan read from the framework's own configuration (``evaluate --megatron-args / --deepspeed-config /
--torchtitan-config``, issue 23): literal semantics.

Every knob comes from the configuration, and what it omits is what that framework version runs
when the setting is absent (:mod:`costmodel.frameworks.defaults`): no overlap unless the
configuration turns it on. What a configuration cannot state (DeepSpeed JSON has no TP/PP degree;
its model code decides recompute) may come from the planner's flags; a planner flag for a knob
the configuration states is refused unless it says the same.

* Megatron-LM arguments (:mod:`planner.inputs.megatron`, through :mod:`planner.megatron_args`, the parser
  of ``--baseline`` and ``calibrate``), checked against the argument names of Megatron-LM d98e8a64
  (``planner/data/megatron_arguments_d98e8a64.txt``).
* DeepSpeed JSON (:mod:`planner.inputs.deepspeed`; ``deepspeed/runtime/config.py``,
  ``deepspeed/runtime/zero/config.py`` at edaa72212).
* torchtitan v0.2.2 job TOML (:mod:`planner.inputs.torchtitan`), the format ``--emit fsdp2`` writes.

Each parser module imports only :mod:`planner.inputs.base` (the :class:`FrameworkInput` they return);
:data:`PARSERS`, the table from flag to parser, is here.
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError

from .base import FrameworkInput, read_text
from .deepspeed import parse_deepspeed_text
from .megatron import parse_megatron_text
from .torchtitan import parse_torchtitan_text

#: each flag's parser and whether it takes the text inline (Megatron) as well as ``@file`` or a path
PARSERS = {
    "megatron_args": (parse_megatron_text, True),
    "deepspeed_config": (parse_deepspeed_text, False),
    "torchtitan_config": (parse_torchtitan_text, False),
}


def from_args(args) -> FrameworkInput | None:
    """The framework input a command line names (at most one of the three flags), else None."""
    given = [k for k in PARSERS if getattr(args, k, None) is not None]
    if len(given) > 1:
        raise SpecError(
            given[1],
            getattr(args, given[1]),
            f"unset with --{given[0].replace('_', '-')} (one framework configuration at a time)",
        )
    if not given:
        return None
    parse, inline = PARSERS[given[0]]
    return parse(read_text(given[0], getattr(args, given[0]), inline_ok=inline))


__all__ = [
    "FrameworkInput",
    "PARSERS",
    "from_args",
    "parse_deepspeed_text",
    "parse_megatron_text",
    "parse_torchtitan_text",
    "read_text",
]
