"""The Python API: one function per question, each accepting specs or preset names.

Add new entry points as further top-level functions below and re-export them from :mod:`planner`;
shared input handling lives in :mod:`planner.problem`. ``sweep`` is :func:`planner.sweep.api.sweep`.
"""

from __future__ import annotations

from costmodel.training.estimate import Estimate
from costmodel.api import evaluate as _evaluate
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.workload import Workload

import time
from dataclasses import replace

from search.options import ANSWER_OPTIONS, PREFER, PREFER_DEFAULT

from .problem import SPLIT_KEYS, make_config, make_workload, resolve_cluster, resolve_model, stage_split

__all__ = ["evaluate", "recommend"]


def evaluate(
    model,
    cluster,
    workload: Workload | None = None,
    config: ParallelConfig | dict | None = None,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    seq: int | None = None,
    dtype: str = "bf16",
    **config_fields,
) -> Estimate:
    """Predict one training step of a parallel plan.

    Parameters
    ----------
    model, cluster : spec objects, preset names (``planner presets``) or JSON/YAML file paths.
    workload : a :class:`Workload`; or leave it out and give ``global_batch`` and ``seq``
        (tokens per sequence) and ``dtype`` (used only when ``workload`` is None).
    config : a :class:`ParallelConfig` or a dict of its keys; ``config_fields`` (``tp=8,
        pp=8, ...``) override it or, without it, build it. ``dp`` defaults to
        ``gpus / (tp * pp * cp)``. Uneven stages: ``layers_per_stage=(7, 8, ..., 7)`` (sets
        ``pp`` when it is not given), or Megatron-Core's rules ``first_stage_layers=``,
        ``last_stage_layers=``, ``account_for_embedding=True``, ``account_for_loss=True``.
    gpus : total GPUs; default: the cluster's own count, else ``tp * pp * dp * cp``.

    Raises
    ------
    SpecError
        naming the field, the value and what is allowed, for any invalid input.

    Examples
    --------
    >>> e = evaluate("gpt3-175b", "a100-80g", gpus=64, global_batch=64, seq=2048, tp=8, pp=8)
    >>> e.config.dp, e.fits, 0 < e.mfu < 1
    (1, True, True)
    >>> sorted(e.to_dict()["config"])[:4]
    ['bucket_mb', 'chunks', 'cp', 'dp']
    >>> evaluate("gpt3-175b", "a100-80g", gpus=64, global_batch=64, seq=2048, tp=7)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: tp*pp*cp=7: must be a divisor of gpus=64 (tp=7 pp=1 cp=1), or give dp
    """
    m = resolve_model(model)
    cl = resolve_cluster(cluster, gpus)
    if workload is None:
        workload = make_workload(global_batch, seq, dtype)
    elif global_batch is not None or seq is not None:
        field, value = ("global_batch", global_batch) if global_batch is not None else ("seq", seq)
        raise SpecError(field, value, "unset when a workload is given")
    if isinstance(config, dict):
        config = ParallelConfig.from_dict(config)
    elif config is not None and not isinstance(config, ParallelConfig):
        raise SpecError("config", config, "a ParallelConfig or a dict of its keys")
    config = config_with_split(m, cl.num_gpus or None, config, config_fields)
    from search.layout import with_best_layout  # layers not divisible by pp*vp and no split: the best layout

    config = with_best_layout(m, cl if cl.num_gpus else cl.with_gpus(config.gpus), workload, config)
    est = _evaluate(m, cl, workload, config)
    from .report import warn_if_tight, with_trust  # the 80% band and the published-MFU check

    warn_if_tight(est)  # the user's plan: a tight one is evaluated with a warning (issue 42)
    return with_trust(est, m, cl if cl.num_gpus else cl.with_gpus(config.gpus), workload)


def config_with_split(model, gpus: int | None, config: ParallelConfig | None, fields: dict) -> ParallelConfig:
    """:func:`make_config` of ``fields`` over ``config``, with the stage split stated by
    ``layers_per_stage`` or the Megatron keywords (:data:`planner.problem.SPLIT_KEYS`)."""
    fields = dict(fields)
    split = {k: fields.pop(k) for k in SPLIT_KEYS if k in fields}
    if fields.get("layers_per_stage") is not None and fields.get("pp") is None and config is None:
        fields["pp"] = len(tuple(fields["layers_per_stage"]))
    config = make_config(gpus, base=config, **fields)
    if split:
        lps = stage_split(model.layers, config.pp, config.vp, layers_per_stage=config.layers_per_stage, **split)
        config = replace(config, layers_per_stage=lps)
    return config


def recommend(
    model,
    cluster,
    workload: Workload | None = None,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    seq: int | None = None,
    dtype: str = "bf16",
    time_limit_s: float = ANSWER_OPTIONS.time_limit_s,
    workers: int = ANSWER_OPTIONS.workers,
    seed: int = ANSWER_OPTIONS.seed,
    top_k: int = 1,
    limits=None,
    framework: str = "megatron",
    grad_dtype: str = "fp32",
    robust: bool = False,
    plan_options: dict | None = None,
    rescore: bool = ANSWER_OPTIONS.rescore,
    memory_margin: float = ANSWER_OPTIONS.memory_margin,
    prefer: str = PREFER_DEFAULT,
    mfu_convention: str | None = None,
    refuse_pins: bool = False,
    deadline: float | None = None,
    objective: str = "step",
    train_tokens: float | None = None,
    objective_inputs: dict | None = None,
    pareto: bool = False,
    **constraints,
):
    """The best parallel plan (and the next ``top_k - 1``), proven optimal by CP-SAT.

    The one front door of the search: ``planner recommend`` (its flags), :meth:`planner.Planner.recommend`
    and the sweep call it. Pins and bounds become :class:`search.problem.Limits` by
    :func:`planner.limits.limits_of`, the pins are checked once (by :func:`search.solve.solve`), and the
    best plan's 80% band is attached here (:func:`planner.report.with_trust`) for every caller.

    Parameters
    ----------
    model, cluster, workload, gpus, global_batch, seq, dtype : as for :func:`evaluate`;
        ``gpus`` (or a cluster with its GPU count) is required.
    time_limit_s, workers, seed, top_k : solver options (:class:`search.solve.SolveOptions`).
    limits : a :class:`search.problem.Limits` (bounds, exclusions, headroom, candidate lists); the
        ``constraints`` are applied over it.
    plan_options : settings every plan runs with (:data:`search.problem.PLAN_OPTIONS`), e.g.
        ``{"fp8_param_gather": True}`` or ``{"recompute_modules": ("layernorm", "moe")}``.
    framework : ``megatron``, ``deepspeed`` or ``fsdp2``: only what it runs is searched and its
        ZeRO semantics are charged (:mod:`costmodel.frameworks.rules`).
    grad_dtype : ``fp32``, ``bf16`` or ``fp16``: the dtype every plan accumulates and reduces its
        gradients in (``ParallelConfig.grad_dtype``; a property of the run, not searched).
    robust : minimise the worst step time over the scenarios of :mod:`costmodel.trust.scenarios`
        (:func:`search.robust.solve_robust`; the result's ``robust`` holds the step time per
        scenario of the robust and the nominal plan). Compare with a plan you run now with
        :func:`planner.baseline.compare_with_baseline`.
    rescore : re-score the plans within the band of the analytic optimum with the op-graph engine and
        answer the best under it. Every default here is :data:`search.options.ANSWER_OPTIONS`, the one statement
        of ``planner recommend``'s, :meth:`planner.Planner.recommend`'s and the sweep's, so they all give one
        answer; ``rescore=False`` is the opt-out for autotuners that want speed (the analytic optimum, no margin).
    memory_margin : with ``rescore``, keep this fraction of the usable HBM free (:class:`search.solve.SolveOptions`;
        ``--memory-margin``; 0: no margin).
    prefer : ``safe`` (the default): when keeping ``memory_margin`` costs step time, the answer is the fastest plan
        that keeps it and the faster plan at risk is ``result.margin_alternative``; ``fast``: the faster plan is the
        answer unless the margin costs no more than the band (:data:`search.options.PREFER`; ``--prefer``).
    mfu_convention : count the MFU, HFU and TFLOP/s of every plan by this convention
        (:data:`costmodel.physics.kernels.flops.CONVENTIONS`; ``--mfu-convention``); None: as evaluated.
    refuse_pins : a pin no plan can hold raises the :class:`SpecError` naming its rule (the CLI's exit 2)
        instead of answering INFEASIBLE with the rule as the explanation.
    deadline : a :func:`time.perf_counter` time by which the search must end (the CLI's ``--time-limit``
        bounds the whole command); it replaces ``time_limit_s``.
    objective : ``step`` (the default: the fastest plan), ``time-to-train``, ``cost`` or ``energy``: the search is
        asked for at least :data:`planner.objective_rank.CANDIDATES` plans and they are ordered by the objective
        (:func:`planner.objective_rank.rank`): the best of those plans, not a proof. ``train_tokens`` (the run's
        token budget) is required for it and for ``pareto``; ``objective_inputs`` holds
        :data:`planner.objective_rank.INPUT_KEYS` (``gpu_hour_usd``, ``pue``, ``failure_rate`` per GPU-hour,
        ``storage_gbps``, ``async_ckpt``, ``interval_s``, ``restart_s``), each at the library's default when left
        out. With ``train_tokens`` the result's ``ranking`` (:class:`planner.objective_rank.Ranking`) holds every
        plan's :class:`costmodel.objectives.PlanObjectives`; without it ``ranking`` is None.
    pareto : ask for the candidates as an objective does (``planner recommend --pareto``), ranked by ``objective``.
    constraints : config variables to fix (``tp=8``, ``zero=1``, ``sp=True``) or bound (``tp_max=8``,
        ``pp_max=16``, as ``--tp-max``/``--pp-max``; ``<variable>_min`` too), ``Limits`` fields
        (``mb_max=4`` as ``--mb-max``, ``headroom_bytes``, ``exclude``), a stage split to pin
        (``layers_per_stage=``, or ``pp=`` with ``first_stage_layers=``, ``last_stage_layers=``,
        ``account_for_embedding=``, ``account_for_loss=``): :func:`planner.limits.limits_of`.

    Returns a :class:`search.result.SolveResult`: ``.status``, ``.plans`` (each with
    ``.config``, ``.estimate`` re-scored by ``evaluate``, ``.binding``), ``.best`` (the first
    plan, its ``.reported`` estimate with the 80% band), ``.objective_s``, ``.bound_s``, ``.gap``,
    ``.time_s``. A problem with no plan that fits does not raise: ``.status`` is ``"INFEASIBLE"``,
    ``.best`` is None, ``.explanation`` says why and ``.changes`` lists the smallest changes that give
    it a plan (:meth:`planner.Planner.recommend` answers the same way). With every degree pinned (the user's plan),
    one over the usable HBM only by the assumed fragmentation allowance is the answer, ``.memory_verdict``
    ``"tight"`` (else ``"fits"``), with ``.memory_warning`` issued as a :class:`UserWarning`
    (:mod:`costmodel.physics.memory.verdict`); a free search never answers a tight plan.

    Examples
    --------
    >>> r = recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, tp=8)
    >>> r.status, r.best.config.tp, r.best.estimate.fits, r.best.reported.step_time_band_s is not None
    ('OPTIMAL', 8, True, True)
    >>> r = recommend("llama3-70b", "h100-sxm", gpus=1, global_batch=8, seq=4096)
    >>> r.status, r.best is None, "no plan fits in memory" in r.explanation
    ('INFEASIBLE', True, True)
    """
    from costmodel.frameworks.rules import recipe_dispatcher
    from search.pins import check_pins
    from search.problem import Problem
    from search.solve import solve

    from .limits import limits_of

    from .objective_rank import CANDIDATES, check_inputs, check_objective, rank

    if prefer not in PREFER:
        raise SpecError("prefer", prefer, f"one of {', '.join(PREFER)}")
    check_objective(objective, train_tokens, pareto)
    objective_inputs = check_inputs(objective_inputs)
    if objective_inputs and train_tokens is None:
        raise SpecError("train_tokens", None, "given (the run's token budget) with objective inputs")
    if objective != "step" or pareto:
        top_k = max(top_k, CANDIDATES)
    m = resolve_model(model)
    cl = resolve_cluster(cluster, gpus)
    if not cl.num_gpus:
        raise SpecError("gpus", gpus, "a positive GPU count (gpus=N, or a cluster with num_gpus)")
    if workload is None:
        workload = make_workload(global_batch, seq, dtype)
    if objective == "cost":  # a device with no default price needs one before the search, not after
        from costmodel.objectives.cost import gpu_hour_price

        gpu_hour_price(cl.device.name, objective_inputs.get("gpu_hour_usd"))
    limits, allowed = limits_of(m.layers, constraints, limits, stacklevel=2)
    if allowed:
        k = sorted(allowed)[0]
        raise SpecError(
            k,
            sorted(allowed[k], key=str),
            "a single value or a <variable>_min/_max bound in recommend (lists only in space)",
        )
    problem = Problem(
        model=m,
        cluster=cl,
        workload=workload,
        limits=limits,
        framework=framework,
        grad_dtype=grad_dtype,
        options=tuple((plan_options or {}).items()),
    )
    if deadline is not None:
        time_limit_s = max(0.05, deadline - time.perf_counter())
    options = replace(
        ANSWER_OPTIONS,
        time_limit_s=time_limit_s,
        workers=workers,
        seed=seed,
        top_k=top_k,
        rescore=rescore,
        memory_margin=memory_margin,
        margin_cost=PREFER[prefer],
    )
    dispatchers = not robust and objective == "step" and not pareto and framework == "megatron" and m.is_moe
    dispatchers = dispatchers and "ep_dispatcher" not in dict(problem.options)  # the user's dispatcher stands
    if robust:
        from search.robust import solve_robust

        result = solve_robust(problem, options)
    elif dispatchers and recipe_dispatcher(framework, cl) != "alltoall":  # the recipes' own first (issue 39)
        result = solve(
            replace(problem, options=problem.options + (("ep_dispatcher", recipe_dispatcher(framework, cl)),)), options
        )
    else:
        result = solve(problem, options)
    if refuse_pins and result.stats.refused is not None:  # solve checked the pins once and answered with the rule
        check_pins(problem)  # the same check: raises that rule's SpecError
    if result.memory_warning:  # every degree pinned, over only by the assumed fragmentation allowance (issue 42)
        import warnings

        warnings.warn(result.memory_warning, stacklevel=2)
    result.dispatchers = None
    if dispatchers:
        result = _with_best_dispatcher(problem, options, result, deadline)
    result.ranking = None
    if train_tokens is not None and result.plans:  # ordered by the objective before the band goes on the first
        result.plans, result.ranking = rank(result.plans, m, cl, workload, objective, train_tokens, objective_inputs)
    if mfu_convention is not None:
        result.plans = [_counted(p, m, workload, mfu_convention) for p in result.plans]
        if result.margin_alternative is not None:  # the plan beside the answer, counted alike
            result.margin_alternative = _counted(result.margin_alternative, m, workload, mfu_convention)
    if result.plans:  # the band, once, on the plan every caller reports
        result.plans[0] = _trusted(result.plans[0], m, cl, workload)
    return result


def _with_best_dispatcher(problem, options, result, deadline):
    """The answer with the MoE dispatcher that runs its plan fastest (issue 39): the answer's plan is timed under
    each dispatcher Megatron-Core runs (:data:`costmodel.spec.plan_checks.EP_DISPATCHERS`, same engine); if
    another one is faster, the search runs again with it (each plan of it dispatching so) and the faster answer
    stands. ``result.dispatchers`` holds ``{"chosen", "step_time_s": {dispatcher: seconds on the first answer's
    plan}, "searched"}`` (``yes``; ``no``: none was faster; ``time limit``: one was, the deadline left no time to
    search with it; ``cut short``: searched, but the deadline stopped that search before it proved its answer, so
    a faster answer with that dispatcher may exist), or None without expert parallelism in the answer."""
    from costmodel.spec.plan_checks import EP_DISPATCHERS
    from search.result import OPTIMAL
    from search.solve import solve

    if not result.plans or result.best.config.ep < 2:
        return result
    best = result.best
    engine = best.reported.engine
    times = {
        d: _evaluate(
            problem.model, problem.cluster, problem.workload, replace(best.config, ep_dispatcher=d), engine=engine
        ).step_time_s
        for d in EP_DISPATCHERS
    }
    fastest = min(times, key=times.get)
    searched = "no"
    if fastest != best.config.ep_dispatcher and times[fastest] < (1 - 1e-3) * times[best.config.ep_dispatcher]:
        left = None if deadline is None else deadline - time.perf_counter()
        # an answer that fits is not traded for a tight one (search.solve._pinned_tight)
        options = replace(options, pinned_tight=options.pinned_tight and bool(result.memory_warning))
        searched = "time limit"
        if left is None or left > 1.0:
            again = solve(
                replace(problem, options=problem.options + (("ep_dispatcher", fastest),)),
                options if left is None else replace(options, time_limit_s=left),
            )
            # not proven (the deadline stopped it): its answer may be worse than the first answer's plan under
            # ``fastest``, so "no faster answer" would not hold; said as such
            searched = "yes" if again.status == OPTIMAL else "cut short"
            total_s = result.time_s + again.time_s  # the answer's search time is both searches'
            if again.plans and again.best.reported.step_time_s < best.reported.step_time_s:
                again.dispatchers = None
                result = again
            result.time_s = total_s
    result.dispatchers = {"chosen": result.best.config.ep_dispatcher, "step_time_s": times, "searched": searched}
    return result


def _counted(plan, model, workload, convention: str):
    """``plan`` with the MFU, HFU and TFLOP/s of both estimates counted by ``convention``."""
    from costmodel.physics.kernels.flops import with_convention

    graph = plan.graph_estimate
    return replace(
        plan,
        estimate=with_convention(plan.estimate, model, workload, convention),
        graph_estimate=None if graph is None else with_convention(graph, model, workload, convention),
    )


def _trusted(plan, model, cluster, workload):
    """``plan`` with its reported estimate (:attr:`search.result.Plan.reported`) carrying the 80% band
    and the published-MFU check (:func:`planner.report.with_trust`)."""
    from .report import with_trust

    est = with_trust(plan.reported, model, cluster, workload)
    return replace(plan, graph_estimate=est) if plan.graph_estimate is not None else replace(plan, estimate=est)
