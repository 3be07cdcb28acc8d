"""The knobs a plan is tuned by, and how the outputs name what was pinned and what the planner chose.

``evaluate`` completes the unstated :data:`TUNING` knobs (:mod:`planner.completion`); a framework's
configuration fills them from its defaults (:mod:`planner.framework_plan`); ``recommend`` lists the
degrees and knobs its flags pinned and those it chose (:func:`recommend_choices`).
"""

from __future__ import annotations

import argparse

from .flags import FIXABLE, offload_fields

#: the tuning knobs evaluate completes (CLI dest names); the stage split is completed as well
TUNING = ("mb", "vp", "sp", "zero", "recompute", "bucket_mb", "chunks")


def chosen_knobs(config, keys: list[str]) -> dict:
    """``{knob: value}`` of ``config`` for the CLI knob names ``keys`` (``bucket_mb`` in MB, ``sp`` as on/off,
    ``layers_per_stage`` as a list or ``even``): what the planner chose, as the output lists it."""
    out = {}
    for k in keys:
        if k == "bucket_mb":
            out[k] = round(config.bucket_bytes / 1e6, 3)
        elif k == "layers_per_stage":
            out[k] = list(config.layers_per_stage) if config.layers_per_stage else "even"
        elif k == "sp":
            out[k] = config.sp_on
        else:
            out[k] = getattr(config, k)
    return out


def fmt_knob(v) -> str:
    """A knob's value as the outputs print it (``on``/``off``, ``4/4/3`` for a list)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return "/".join(map(str, v))
    return str(v)


#: what ``recommend`` may choose beyond the tuning knobs: the degrees (CLI dest names)
DEGREES = ("tp", "pp", "dp", "cp", "ep")


def recommend_choices(args: argparse.Namespace, config) -> tuple[dict, dict]:
    """``(pinned, chosen)`` of a ``recommend`` answer: the knobs its flags pinned, and every other
    degree and tuning knob the search chose (the stage split too, where pp > 1)."""
    pinned = {k: getattr(args, k) for k in FIXABLE if getattr(args, k, None) is not None and k != "dma"}
    if "bucket_mb" in pinned:
        pinned["bucket_mb"] = round(pinned["bucket_mb"], 3)
    keys = [k for k in DEGREES + TUNING if k not in pinned]
    if config.pp > 1 and getattr(args, "layers_per_stage", None) is None:
        keys.append("layers_per_stage")
    chosen = chosen_knobs(config, keys)
    # optimizer CPU offload: stated (a plan option), or chosen by the search where nothing fit without it
    stated = {k: v for k, v in offload_fields(args).items() if v}
    pinned.update(stated)
    if config.optimizer_offload_fraction > 0 and not stated:
        chosen.update(
            optimizer_offload_fraction=config.optimizer_offload_fraction,
            overlap_cpu_optimizer_d2h_h2d=config.overlap_cpu_optimizer_d2h_h2d,
        )
    return pinned, chosen
