"""The flags of what a run costs (issue 41), for ``planner recommend`` and ``planner sweep``: ``--objective``,
``--train-tokens`` and the inputs of :mod:`costmodel.objectives` (each left out stays at the library's named
default), and :func:`objective_options` turning them into :func:`planner.api.recommend`'s keywords.

>>> tokens("15T"), tokens("2.5e9"), tokens("300B")
(15000000000000.0, 2500000000.0, 300000000000.0)
"""

from __future__ import annotations

import argparse
import math

from costmodel.objectives import OBJECTIVES
from costmodel.objectives.checkpoint import MODES

from .args import _converter, choice_arg
from .objective_rank import check_objective

_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def tokens(text: str) -> float:
    """``15T``, ``300B``, ``2.5e9``: a token count (K, M, B/G, T suffixes)."""
    t = text.strip()
    scale = _SUFFIX.get(t[-1:].upper(), 1.0) if t and not t[-1].isdigit() and t[-1] != "." else 1.0
    return float(t[:-1] if scale != 1.0 else t) * scale


def _number(field: str, allowed: str, ok):
    return _converter(field, float, allowed, lambda v: math.isfinite(v) and ok(v))


def add_objective_args(parser: argparse.ArgumentParser, *, pareto: bool = False) -> None:
    """The ``objective`` group: what to minimise and the run's inputs."""
    g = parser.add_argument_group(
        "objective (time to train, cost, energy; costmodel.objectives, every default named in the output)"
    )
    g.add_argument(
        "--objective",
        type=choice_arg("objective", OBJECTIVES),
        default="step",
        metavar="{" + ",".join(OBJECTIVES) + "}",
        help="what to minimise (default: step): time-to-train, cost or energy re-rank the fastest plans the search "
        "finds (needs --train-tokens)",
    )
    g.add_argument(
        "--train-tokens",
        type=_converter("train_tokens", tokens, "a positive token count (e.g. 15T, 300B, 1e12)", lambda v: 0 < v),
        metavar="N",
        help="tokens the run trains on (K, M, B, T suffixes): reports days, goodput, $ and kWh",
    )
    g.add_argument(
        "--gpu-hour-usd",
        type=_number("gpu_hour_usd", "a positive price in USD per GPU-hour", lambda v: v > 0),
        metavar="USD",
        help="price per GPU-hour (default: the device's AWS Capacity Blocks rate, named in the output)",
    )
    g.add_argument(
        "--pue",
        type=_number("pue", "a number >= 1 (facility power / IT power)", lambda v: v >= 1),
        metavar="X",
        help="power usage effectiveness (default: 1.56, Uptime Institute 2024 average)",
    )
    g.add_argument(
        "--failure-rate",
        type=_number("failure_rate", "a finite number >= 0 of failures per GPU-hour", lambda v: v >= 0),
        metavar="PER_GPU_HOUR",
        help="unexpected interruptions per GPU-hour (default: 1.97e-5, the Llama 3 report's)",
    )
    g.add_argument(
        "--storage-gbps",
        type=_number("storage_gbps", "a positive aggregate storage bandwidth in GB/s", lambda v: v > 0),
        metavar="GBPS",
        help="aggregate checkpoint storage bandwidth, GB/s (default: 2000, Llama 3's Tectonic)",
    )
    g.add_argument(
        "--async-ckpt",
        type=choice_arg("async_ckpt", MODES),
        metavar="{" + ",".join(MODES) + "}",
        help="checkpoint writes: sync (default), async (copy blocks) or async_pinned (copy overlapped too)",
    )
    g.add_argument(
        "--ckpt-interval-s",
        type=_number("ckpt_interval_s", "a positive number of seconds", lambda v: v > 0),
        metavar="SECONDS",
        help="compute between checkpoints (default: Daly's optimum)",
    )
    g.add_argument(
        "--restart-s",
        type=_number("restart_s", "a finite number >= 0 of seconds", lambda v: v >= 0),
        metavar="SECONDS",
        help="one restart outside the checkpoint read (default: 360, assumed)",
    )
    if pareto:
        g.add_argument(
            "--pareto",
            action="store_true",
            help="also print the candidates no other beats on step time, cost (or time to train), energy and "
            "memory headroom (needs --train-tokens)",
        )


#: flag dest -> objective_inputs key
_INPUTS = {
    "gpu_hour_usd": "gpu_hour_usd",
    "pue": "pue",
    "failure_rate": "failure_rate",
    "storage_gbps": "storage_gbps",
    "async_ckpt": "async_ckpt",
    "ckpt_interval_s": "interval_s",
    "restart_s": "restart_s",
}


def objective_options(args: argparse.Namespace) -> dict:
    """``objective``, ``train_tokens``, ``objective_inputs`` (only those given) and ``pareto`` of ``args``;
    SpecError (exit 2) where an objective or ``--pareto`` lacks ``--train-tokens``, or an input is given
    without it."""
    objective = getattr(args, "objective", "step")
    train_tokens = getattr(args, "train_tokens", None)
    pareto = bool(getattr(args, "pareto", False))
    check_objective(objective, train_tokens, pareto)
    inputs = {key: getattr(args, dest) for dest, key in _INPUTS.items() if getattr(args, dest, None) is not None}
    if inputs and train_tokens is None:
        from costmodel.spec.errors import SpecError

        flag = "--" + next(d for d, k in _INPUTS.items() if k == next(iter(inputs))).replace("_", "-")
        raise SpecError("train_tokens", None, f"given (--train-tokens N) with {flag}: it prices a run of N tokens")
    return {"objective": objective, "train_tokens": train_tokens, "objective_inputs": inputs, "pareto": pareto}
