"""What ``planner evaluate`` does with the tuning knobs a user did not state (issue 23).

A user reproducing a run states what they know (degrees, micro-batch, maybe recompute); the rest
was tuned by whoever ran it. So by default every unstated tuning knob (:data:`TUNING`: micro-batch,
interleave, sequence parallelism, ZeRO stage, recompute, bucket size, chunks, the stage split) is
chosen as ``recommend`` would, with everything stated pinned: a pinned search over exactly the
completions of the stated plan. ``--framework-defaults`` fills them with what the framework runs
when its configuration leaves them out instead (:func:`costmodel.frameworks.defaults.framework_defaults`).
Degrees (tp, pp, cp, ep) are never chosen: unstated, they are 1, and dp fills the GPUs.

The result lists what was chosen (``chosen``), so a number is never read as the literal plan when it
is the planner's completion of it, and how much the choice matters: the log-sd of the op-graph step
times of the :data:`TOP_K` best completions the search re-scored around the chosen one
(:func:`spread_log_sd`; the plans within the re-score band of the analytic optimum), which widens the 80% band (``costmodel.trust.uncertainty``, part 3). With nothing unstated, or with the
knobs at the framework's defaults (a stated rule, no choice), there is no spread.
"""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass, field, replace

from costmodel.spec.errors import PlannerError, SpecError
from costmodel.api import evaluate
from costmodel.frameworks.defaults import framework_defaults
from costmodel.frameworks.rules import moe_needs_sp

from .flags import config_from_args, framework_from_args, problem_of
from .report import warn_if_tight
from .tuning import TUNING, chosen_knobs, fmt_knob

#: the flags that state a stage split (with pp > 1 and none of them, the split is completed too)
SPLIT_FLAGS = (
    "layout",
    "layers_per_stage",
    "first_stage_layers",
    "last_stage_layers",
    "account_for_embedding",
    "account_for_loss",
)
#: search options evaluate's completion runs with (recommend's defaults; the stated tp may span nodes)
SEARCH_DEFAULTS = {
    "pp_max": None,
    "tp_max": None,
    "no_zero3": False,
    "headroom_gib": 0.0,
    "tp_across_nodes": True,
    "mb_max": 16,
    "vp_max": 8,
}
TIME_LIMIT_S = 20.0
#: completions whose step times make the spread of the unstated choices (of those the search re-scores:
#: the search itself is recommend's, one plan asked for, so evaluate answers with recommend's plan and speed)
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


def with_framework_defaults(args: argparse.Namespace, model, cluster, workload):
    """``(config, chosen)``: the unstated knobs at the framework's own defaults."""
    keys = unstated(args)
    gpus = cluster.num_gpus or None
    deg = _degrees(args, gpus)
    fw = framework_from_args(args)
    defaults = framework_defaults(
        fw,
        dp=deg["dp"],
        pp=deg["pp"],
        global_batch=workload.global_batch,
        zero=getattr(args, "zero", None),
        tp=deg["tp"],
        grad_dtype=getattr(args, "grad_dtype", None) or "fp32",
    )
    if "sp" in keys and moe_needs_sp(fw, moe=model.is_moe, tp=deg["tp"]):
        # Megatron's --sequence-parallel defaults off, but its MoE layer refuses TP without it: a run of that
        # model had it on (costmodel.frameworks.rules.moe_needs_sp), so the only runnable default is on
        defaults = {**defaults, "sp": True}
    filled = argparse.Namespace(**vars(args))
    for k in keys:
        if k in defaults:
            setattr(filled, k, defaults[k])
    config = config_from_args(filled, gpus, model.layers)
    return config, chosen_knobs(config, [k for k in keys if k != "layers_per_stage"])


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
    :func:`spread_log_sd` of the :data:`TOP_K` best re-scored completions (0 with nothing chosen)."""
    literal = config_from_args(args, cluster.num_gpus or None, model.layers)  # refuses what is stated wrongly
    keys = unstated(args)
    if getattr(args, "framework_defaults", False):
        config, chosen = with_framework_defaults(args, model, cluster, workload)
        return config, chosen, "unstated knobs at the framework's defaults (--framework-defaults)", 0.0
    if not keys:
        return literal, {}, "", 0.0
    from search.solve import SolveOptions, solve

    gpus = cluster.num_gpus or None
    pinned = argparse.Namespace(**{**SEARCH_DEFAULTS, **vars(args)})
    for k, v in _degrees(args, gpus).items():
        setattr(pinned, k, v)
    # the EP all-to-all overlap is what the command line says (Megatron-Core's default: off), not a knob to complete
    pinned.ep_overlap = bool(getattr(args, "ep_overlap", None))
    # fine-grained activation offloading is not searched: the completion is searched without it, then it is added
    pinned.fine_grained_activation_offloading = pinned.offload_modules = None
    if not cluster.num_gpus:
        d = _degrees(args, gpus)
        cluster = cluster.with_gpus(d["tp"] * d["pp"] * d["cp"] * d["dp"])
    try:
        problem = problem_of(pinned, model, cluster, workload)  # recommend's problem of the same flags
        if getattr(args, "ep_overlap", None) or literal.offload_modules:
            # a stated EP overlap or module offload runs: no completion refusing it (full recompute)
            ex = problem.limits.exclude
            problem = replace(
                problem, limits=replace(problem.limits, exclude={**ex, "recompute": (*ex.get("recompute", ()), "full")})
            )
        # recommend's search, without the offloads the user did not state (search.offload_choice,
        # search.act_offload_choice); a stated one is a plan option of the problem, as recommend's. It checks
        # the pins once: a stated knob no runnable plan has (e.g. chunks the framework cannot run) answers
        # INFEASIBLE with that rule as the explanation, and the completion falls back
        result = solve(problem, SolveOptions(time_limit_s=TIME_LIMIT_S, rescore=True, offload=False, act_offload=False))
        why = "" if result.plans else (result.explanation or result.status)
        if not why and literal.offload_modules:  # stated: kept (refused where the completion cannot run it)
            replace(result.best.config, offload_modules=literal.offload_modules)
    except PlannerError as e:
        why = str(e)
    if why:
        config, chosen = with_framework_defaults(args, model, cluster, workload)
        return (
            config,
            chosen,
            f"no runnable completion of the stated plan fits ({why}): unstated knobs at the framework's defaults",
            0.0,
        )
    config = result.best.config
    stated_only = {k: getattr(args, k) for k in ("dma",) if getattr(args, k, None) is not None}
    if literal.offload_modules:
        stated_only["offload_modules"] = literal.offload_modules
    if literal.layout is not None:  # a stated --layout is kept as stated (the search priced its per-rank split)
        stated_only.update(layout=literal.layout, layers_per_stage=literal.layers_per_stage, vp=literal.vp)
    if stated_only:
        config = replace(config, **stated_only)
    spread = spread_log_sd(result.rescored_graph_s[:TOP_K])  # the op-graph times the search re-scored
    return config, chosen_knobs(config, keys), "", spread


def priced(model, cluster, workload, config):
    """The estimate ``planner evaluate`` prints for ``config`` (the default engine; the stage split
    chosen when the layers do not divide and none is given). A plan its framework cannot run is still
    evaluated as given, with a warning (``--emit`` refuses it)."""
    from costmodel.frameworks.rules import check_runnable
    from search.layout import with_best_layout

    try:
        check_runnable(config, cluster.device)
    except SpecError as e:
        warnings.warn(f"{e}: evaluated as given, though {config.framework} cannot run it (--emit refuses it)")
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    config = with_best_layout(model, cluster, workload, config)  # layers not divisible by pp*vp, no split given
    est = evaluate(model, cluster, workload, config)
    warn_if_tight(est)  # the user's plan: a tight one is evaluated with a warning (issue 42)
    return est


def evaluate_stated(args: argparse.Namespace, model, cluster, workload):
    """``(estimate, config, chosen, note, spread)`` of ``planner evaluate``'s flags ``args`` on the given
    model, cluster and workload: :func:`complete` and then :func:`priced` (benchmarks/evaluate_partial.py
    runs it on the published rows)."""
    config, chosen, note, spread = complete(args, model, cluster, workload)
    est = priced(model, cluster, workload, config)
    return est, est.config, chosen, note, spread


#: how the output says the unstated knobs were filled, when the completion did not fall back (``note`` empty)
AS_RECOMMEND = "as recommend would, with what you stated pinned; --framework-defaults for the framework's own"


@dataclass(frozen=True, kw_only=True)
class StatedPlan:
    """A training command line resolved to the plan ``evaluate`` prices (and ``explain`` explains).

    estimate : the priced :class:`costmodel.training.estimate.Estimate` (its ``config`` is the plan).
    chosen : ``{knob: value}`` the planner chose or filled (empty: nothing unstated, or a framework config).
    note : why the knobs were filled as they were, when not as recommend would (empty otherwise).
    spread : log-sd of the plausible completions' step times (:func:`spread_log_sd`; widens the band).
    source : where each knob came from, for a framework configuration input (None otherwise)."""

    model: object
    cluster: object
    workload: object
    estimate: object
    chosen: dict = field(default_factory=dict)
    note: str = ""
    spread: float = 0.0
    source: dict | None = None

    @property
    def chosen_how(self) -> str:
        """The words beside ``chosen`` (JSON ``chosen_how``; empty with nothing chosen)."""
        return self.note or (AS_RECOMMEND if self.chosen else "")


def stated_plan(args: argparse.Namespace) -> StatedPlan:
    """The one path from a training command line to its plan, shared by ``planner evaluate`` and ``planner
    explain`` (so both show the same plan, step time and band for the same flags): a framework's own
    configuration (``--megatron-args``, ``--deepspeed-config``, ``--torchtitan-config``) is read literally
    (:mod:`planner.framework_plan`); planner flags are completed by :func:`complete`; then :func:`priced`."""
    from costmodel.spec.bounds import check_virtual_stages

    from .inputs import from_args as framework_input
    from .framework_plan import resolve as resolve_framework_input
    from .flags import problem_from_args

    fi, source = framework_input(args), None
    if fi is not None:  # literal: every knob from the configuration or the framework's defaults
        model, cluster, workload, config, source = resolve_framework_input(fi, args)
        check_virtual_stages(model.layers, config.pp, config.vp)
        chosen, note, spread = {}, "", 0.0
    else:
        model, cluster, workload = problem_from_args(args)
        check_virtual_stages(model.layers, getattr(args, "pp", None), getattr(args, "vp", None))  # before pricing
        config, chosen, note, spread = complete(args, model, cluster, workload)
    est = priced(model, cluster, workload, config)
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(est.config.gpus)
    return StatedPlan(
        model=model,
        cluster=cluster,
        workload=workload,
        estimate=est,
        chosen=chosen,
        note=note,
        spread=spread,
        source=source,
    )


def chosen_line(plan: StatedPlan) -> str | None:
    """``chosen by the planner: mb=1 ... (how)``, or None with nothing chosen."""
    if not plan.chosen:
        return None
    return (
        "chosen by the planner: "
        + " ".join(f"{k}={fmt_knob(v)}" for k, v in plan.chosen.items())
        + f" ({plan.chosen_how})"
    )
