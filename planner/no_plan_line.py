"""The one line ``planner recommend`` prints when no plan answers: the binding reason and the smallest change first,
in at most :data:`NO_PLAN_CHARS` characters.

The search's explanation (:attr:`search.result.SolveResult.explanation`, ``.changes``) keeps every detail for the
API and ``--json``; joined whole it ran to ~500 characters on one stderr line (the leanest plan's degrees, the
activation and optimizer CPU offload searches that did not help, each change found). Here the detail goes first
where the line is too long: the offload notes, then the parenthetical details, then the changes past the first;
what is left off is in ``--json``.

>>> why = ("no plan fits in memory: the leanest (tp=8 pp=1 dp=1 cp=1 ep=1 mb=1 zero=0 recompute=full) needs 852.5 GiB"
...        " per GPU, 40.0 GiB usable; activation CPU offload (Megatron --cpu-offloading-num-layers, up to 125 layers,"
...        " pp = 1 without recompute) does not make a plan fit either. Optimizer CPU offload (fraction 0.5, 1) does"
...        " not make a plan fit either.")
>>> print(no_plan_line("problem=infeasible", why, ["--gpus 192 (more GPUs: +184)", "HBM >= 852.5 GiB per GPU"]))
problem=infeasible: no plan fits in memory: the leanest plan needs 852.5 GiB per GPU, 40.0 GiB usable; smallest changes: --gpus 192 (more GPUs: +184), HBM >= 852.5 GiB per GPU (details: --json)
"""

from __future__ import annotations

import re

#: the longest "no plan" line (the ``planner: error:`` prefix aside)
NO_PLAN_CHARS = 200

#: the notes the offload re-searches append (search.act_offload_choice, search.offload_choice)
_OFFLOAD = re.compile(r"[;.]?\s*(activation|optimizer) CPU offload \([^)]*\) does not make a plan fit either\.?", re.I)
#: a parenthetical detail, with the space before it
_PAREN = re.compile(r"\s*\([^()]*\)")


def _without_parens(text: str) -> str:
    """``text`` without its parenthetical details (nested ones from the inside out)."""
    while True:
        shorter = _PAREN.sub("", text)
        if shorter == text:
            return text
        text = shorter.replace("the leanest needs", "the leanest plan needs")  # search.explain's "leanest (...)"


def no_plan_line(head: str, explanation: str, changes=(), limit: int = NO_PLAN_CHARS) -> str:
    """``head: reason; smallest changes: ...`` in at most ``limit`` characters (see the module's docstring)."""
    explanation = " ".join(str(explanation).split())
    changes = [" ".join(str(c).split()) for c in changes]
    tried = [m.group(1).lower() for m in _OFFLOAD.finditer(explanation)]
    reason = _OFFLOAD.sub("", explanation).strip(" ;.") or "no plan"
    note = f"; {' and '.join(tried)} CPU offload do{'es' if len(tried) == 1 else ''} not help either" if tried else ""
    full = f"{head}: {reason}{note}" + (f"; smallest changes: {', '.join(changes)}" if changes else "")
    if len(full) <= limit:
        return full
    more = " (details: --json)"
    short = _without_parens(reason)
    clauses = short.split("; ")
    candidates = [
        (reason, changes),
        (short, changes),
        (short, [_without_parens(c) for c in changes]),
        (short, [_without_parens(c) for c in changes[:1]]),
        (clauses[0], [_without_parens(c) for c in changes[:1]]),
    ]
    for text, kept in candidates:
        line = f"{head}: {text}" + (f"; smallest changes: {', '.join(kept)}" if kept else "")
        if len(line) + len(more) <= limit:
            return line + more
    line = f"{head}: {clauses[0]}"
    return line if len(line) <= limit else f"{line[: limit - 3]}..."
