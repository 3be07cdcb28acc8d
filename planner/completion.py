"""What ``planner evaluate`` does with the tuning knobs a user did not state (issue 23).

A user reproducing a run states what they know (degrees, micro-batch, maybe recompute); the rest
was tuned by whoever ran it. So by default every unstated tuning knob (:data:`TUNING`: micro-batch,
interleave, sequence parallelism, ZeRO stage, recompute, bucket size, chunks, the stage split) is
chosen as ``recommend`` would, with everything stated pinned: a pinned search over exactly the
completions of the stated plan. ``--framework-defaults`` fills them with what the framework runs
when its configuration leaves them out instead (:func:`costmodel.framework_defaults.framework_defaults`).
Degrees (tp, pp, cp, ep) are never chosen: unstated, they are 1, and dp fills the GPUs.

The result lists what was chosen (``chosen``), so a number is never read as the literal plan when it
is the planner's completion of it, and how much the choice matters: the log-sd of the step times of
the :data:`TOP_K` best completions the search returns around the chosen one (:func:`spread_log_sd`),
which widens the 80% band (``costmodel.uncertainty``, part 3). With nothing unstated, or with the
knobs at the framework's defaults (a stated rule, no choice), there is no spread.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from costmodel.errors import PlannerError
from costmodel.framework_defaults import framework_defaults

from .args import config_from_args, framework_from_args, limits_from_args, memory_fields

#: the tuning knobs evaluate completes (CLI dest names); the stage split is completed as well
TUNING = ("mb", "vp", "sp", "zero", "recompute", "bucket_mb", "chunks")
SPLIT_FLAGS = ("layout", "layers_per_stage", "first_stage_layers", "last_stage_layers", "account_for_embedding",
               "account_for_loss")
#: search options evaluate's completion runs with (recommend's defaults; the stated tp may span nodes)
SEARCH_DEFAULTS = {"pp_max": None, "tp_max": None, "no_zero3": False, "headroom_gib": 0.0,
                   "tp_across_nodes": True, "mb_max": 16, "vp_max": 8}
TIME_LIMIT_S = 20.0
#: completions whose step times make the spread of the unstated choices
TOP_K = 4


def unstated(args: argparse.Namespace) -> list[str]:
    """The tuning knobs of :data:`TUNING` the command line leaves unset (the split: ``layers_per_stage``,
    only with pp > 1)."""
    out = [k for k in TUNING if getattr(args, k, None) is None]
    if (getattr(args, "pp", None) or 1) > 1 and all(getattr(args, k, None) in (None, False) for k in SPLIT_FLAGS):
        out.append("layers_per_stage")
    return out


def _degrees(args: argparse.Namespace, gpus: int | None) -> dict:
    d = {k: getattr(args, k, None) or 1 for k in ("tp", "pp", "cp", "ep")}
    if getattr(args, "pp", None) is None and getattr(args, "layers_per_stage", None) is not None:
        d["pp"] = len(args.layers_per_stage)  # --layers-per-stage alone sets pp (config_from_args)
    d["dp"] = getattr(args, "dp", None) or (gpus // (d["tp"] * d["pp"] * d["cp"]) if gpus else 1)
    return d


def _chosen(config, keys: list[str]) -> dict:
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


def with_framework_defaults(args: argparse.Namespace, model, cluster, workload):
    """``(config, chosen)``: the unstated knobs at the framework's own defaults."""
    keys = unstated(args)
    gpus = cluster.num_gpus or None
    deg = _degrees(args, gpus)
    fw = framework_from_args(args)
    defaults = framework_defaults(fw, dp=deg["dp"], pp=deg["pp"], global_batch=workload.global_batch,
                                  zero=getattr(args, "zero", None), tp=deg["tp"])
    filled = argparse.Namespace(**vars(args))
    for k in keys:
        if k in defaults:
            setattr(filled, k, defaults[k])
    config = config_from_args(filled, gpus, model.layers)
    return config, _chosen(config, [k for k in keys if k != "layers_per_stage"])


def spread_log_sd(step_times_s) -> float:
    """Root-mean-square ``ln(t_k / t_chosen)`` over the completions' step times, the chosen (first)
    one included: 0 for one completion.

    >>> round(spread_log_sd([1.0, 1.1, 1.2]), 4)
    0.1188
    """
    ts = list(step_times_s)
    if len(ts) < 2:
        return 0.0
    return math.sqrt(sum(math.log(t / ts[0]) ** 2 for t in ts) / len(ts))


def complete(args: argparse.Namespace, model, cluster, workload):
    """``(config, chosen, note, spread)`` for ``evaluate``: the stated plan, its unstated knobs
    chosen as ``recommend`` would (or at the framework's defaults with ``--framework-defaults``).

    ``note`` is empty, or says why the completion fell back to the framework's defaults (no
    completion of the stated plan fits, or the search found none in its time). ``spread``: the
    :func:`spread_log_sd` of the :data:`TOP_K` best completions (0 with nothing chosen)."""
    literal = config_from_args(args, cluster.num_gpus or None, model.layers)  # refuses what is stated wrongly
    keys = unstated(args)
    if getattr(args, "framework_defaults", False):
        config, chosen = with_framework_defaults(args, model, cluster, workload)
        return config, chosen, "unstated knobs at the framework's defaults (--framework-defaults)", 0.0
    if not keys:
        return literal, {}, "", 0.0
    from search.pins import check_pins
    from search.problem import Problem
    from search.solve import SolveOptions, solve


    gpus = cluster.num_gpus or None
    pinned = argparse.Namespace(**{**SEARCH_DEFAULTS, **vars(args)})
    for k, v in _degrees(args, gpus).items():
        setattr(pinned, k, v)
    if not cluster.num_gpus:
        d = _degrees(args, gpus)
        cluster = cluster.with_gpus(d["tp"] * d["pp"] * d["cp"] * d["dp"])
    try:
        problem = Problem(model=model, cluster=cluster, workload=workload,
                          limits=limits_from_args(pinned, model.layers), framework=framework_from_args(args),
                          grad_dtype=getattr(args, "grad_dtype", None) or "fp32",
                          # the stated memory mechanisms; FP8 parameters only where stated (evaluate's plan is the user's)
                          options=tuple({"fp8_param_gather": False, **memory_fields(args)}.items()))
        check_pins(problem)  # a stated knob no runnable plan has (e.g. chunks the framework cannot run)
        result = solve(problem, SolveOptions(time_limit_s=TIME_LIMIT_S, rescore=True, top_k=TOP_K))
        why = "" if result.plans else (result.explanation or result.status)
    except PlannerError as e:
        why = str(e)
    if why:
        config, chosen = with_framework_defaults(args, model, cluster, workload)
        return (config, chosen, f"no runnable completion of the stated plan fits ({why}): unstated knobs at the "
                "framework's defaults", 0.0)
    config = result.best.config
    stated_only = {k: getattr(args, k) for k in ("ep_dispatcher", "dma") if getattr(args, k, None) is not None}
    if literal.layout is not None:  # a stated --layout is kept as stated (the search priced its per-rank split)
        stated_only.update(layout=literal.layout, layers_per_stage=literal.layers_per_stage, vp=literal.vp)
    if stated_only:
        config = replace(config, **stated_only)
    spread = spread_log_sd([p.estimate.step_time_s for p in result.plans])  # one engine for all K
    return config, _chosen(config, keys), "", spread
