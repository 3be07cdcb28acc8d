"""Stage positions and the probe splits that give one stage at a position ``n`` layers."""

from __future__ import annotations

from dataclasses import replace

from costmodel.spec.plan import ParallelConfig

from ..choice import Choice
from ..problem import Problem


KIND_INDEX = {"first": 0, "mid": 1, "last": 2, "only": 0}


def stage_weight(kind: str, pp: int) -> int:
    """Stages at position ``kind`` of a ``pp``-stage pipeline (the middle ones share a count)."""
    return pp - 2 if kind == "mid" else 1


def with_layers_per_stage(c: ParallelConfig, lps: tuple[int, ...]) -> ParallelConfig:
    """``replace(c, layers_per_stage=lps)`` without validating every field again (a search probes
    each layer count of a stage: building 60-100 configs per table was a third of GPT-3 175B / 1024
    A100's search). Safe for the tuples :func:`probe_split` makes: ``pp`` integers >= 1, the one rule
    ``ParallelConfig.__post_init__`` has for the field; every other field was validated with ``c``,
    and no field is derived from it (``c.layout`` is ``None``)."""
    if c.layout is not None or len(lps) != c.pp or type(lps) is not tuple or min(lps) < 1:
        return replace(c, layers_per_stage=lps)
    out = object.__new__(ParallelConfig)
    out.__dict__.update(c.__dict__)
    object.__setattr__(out, "layers_per_stage", lps)
    return out


def probe_split(p: Problem, choice: Choice, kind: str, n: int) -> tuple[tuple[int, ...], int]:
    """A ``layers_per_stage`` giving the stage at ``kind`` exactly ``n`` layers, and its index.

    The other stages get a placeholder count; the first holds the leading dense layers so the
    probed middle or last stage is all-MoE, as in every split the search considers."""
    pp, d = choice.shape.pp, p.model.dense_layers
    if kind == "only":
        return (n,), 0
    filler = [max(1, d)] + [1] * (pp - 1)
    stage = {"first": 0, "mid": 1, "last": pp - 1}[kind]
    filler[stage] = n
    return tuple(filler), stage
