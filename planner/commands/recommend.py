"""``planner recommend``: the best parallel plan for a problem, proven optimal by CP-SAT, and why.

Config flags (``--tp 8``, ``--zero 1``, ``--no-sp`` ...) fix that variable; ``--pp-max``,
``--tp-max``, ``--no-zero3`` and ``--headroom-gib`` bound the rest. The default report puts the
best plan and ``--top K - 1`` alternatives side by side, with the solve status, its proof (best
bound, gap) and the constraints each plan sits on. ``--emit megatron`` prints Megatron-LM
arguments for the best plan, ``--emit deepspeed`` a DeepSpeed config, ``--emit fsdp2`` torchtitan
settings. A problem with no plan that fits exits 2 with the reason and the smallest changes that would give it one;
with every degree pinned (``--tp --pp --cp``, ``--ep`` for MoE; ``--dp`` or the GPU count) a plan over the HBM only by
the assumed fragmentation allowance is answered ``tight`` with a one-line warning instead (``solve.memory_verdict``).
``--mode infer`` plans serving instead (:mod:`planner.recommend_infer`): ``--input-len``,
``--output-len``, optional ``--ttft-ms``/``--tpot-ms`` targets, the Pareto front and launch arguments.
``--objective time-to-train|cost|energy`` with ``--train-tokens N`` re-ranks the fastest plans the search finds by
the run's days, dollars or energy (:mod:`planner.objective_rank`); ``--pareto`` prints those not beaten on all.
``--report FILE.html`` also writes the answer as a self-contained HTML report (:mod:`planner.report_flag`).
"""

from __future__ import annotations

import argparse
import time

from costmodel.spec.bounds import MAX_SIZE
from costmodel.spec.errors import SpecError
from search.options import ANSWER_OPTIONS, PREFER, PREFER_DEFAULT

from .. import api, recommend_infer
from ..args import (
    _converter,
    add_config_args,
    add_flop_args,
    add_output_args,
    add_problem_args,
    choice_arg,
    float_arg,
    int_arg,
)
from ..arg_types import nonempty_arg
from ..emit import FORMATS, refuse_unstated_gradients
from ..flags import constraints_from_args, framework_from_args, plan_options, problem_from_args
from ..flags import problem_of  # noqa: F401  (benchmarks/evaluate_partial.py imports it from here)
from ..objective_flags import add_objective_args, objective_options
from ..recommend_report import render
from ..report_flag import add_report_arg, refuse_serving, report_objectives, write_report_of

NAME = "recommend"
#: most plans --top shows: each is scored by both engines after the search (top 50 of Llama-3-70B on
#: 64 H100 take 13.5 s with the 10 s default limit; --top 100000 ran 38 s, issue 24)
MAX_TOP = 50
#: CP-SAT's ``num_workers`` and ``random_seed`` are 32-bit parameters: a larger --workers or --seed was an
#: OverflowError traceback from OR-Tools
CP_SAT_INT_MAX = 2**31 - 1
#: the largest --vp-max: no model has more layers (costmodel.spec.bounds.MAX_SIZE), so no larger interleave is a
#: candidate; the search enumerated every value up to it (--vp-max 1000000000 ran past a minute)
MAX_VP = MAX_SIZE["layers"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME,
        help="find the best plan (CP-SAT, proven optimal) and explain it",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    add_problem_args(p, infer=True)
    add_config_args(p, dispatcher=True)
    recommend_infer.add_arguments(p)
    g = p.add_argument_group("search")
    g.add_argument(
        "--time-limit",
        type=float_arg("time_limit", 0.01),
        default=ANSWER_OPTIONS.time_limit_s,
        metavar="SECONDS",
        help="CP-SAT time limit (default: %(default)s)",
    )
    g.add_argument(
        "--workers",
        type=_converter(
            "workers",
            int,
            f"an integer from 1 to {CP_SAT_INT_MAX:,} (CP-SAT's limit)",
            lambda v: 1 <= v <= CP_SAT_INT_MAX,
        ),
        default=ANSWER_OPTIONS.workers,
        metavar="N",
        help="CP-SAT workers (default: %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=_converter(
            "seed", int, f"an integer from 0 to {CP_SAT_INT_MAX:,} (CP-SAT's limit)", lambda v: 0 <= v <= CP_SAT_INT_MAX
        ),
        default=ANSWER_OPTIONS.seed,
        metavar="N",
        help="CP-SAT random seed (default: %(default)s)",
    )
    g.add_argument(
        "--top",
        type=_converter("top", int, f"an integer from 1 to {MAX_TOP}", lambda v: 1 <= v <= MAX_TOP),
        default=1,
        metavar="K",
        help=f"also show the next K-1 plans (K at most {MAX_TOP})",
    )
    g.add_argument("--pp-max", type=int_arg("pp_max"), metavar="N", help="largest pipeline-parallel degree")
    g.add_argument("--tp-max", type=int_arg("tp_max"), metavar="N", help="largest tensor-parallel degree")
    g.add_argument("--no-zero3", action="store_true", help="exclude ZeRO-3")
    g.add_argument(
        "--headroom-gib",
        type=float_arg("headroom_gib"),
        default=0.0,
        metavar="GIB",
        help="HBM to keep free on every GPU (default: 0)",
    )
    g.add_argument(
        "--memory-margin",
        type=_converter("memory_margin", float, "a fraction from 0 to 0.5", lambda v: 0.0 <= v <= 0.5),
        default=ANSWER_OPTIONS.memory_margin,
        metavar="FRACTION",
        help="keep the predicted peak this fraction below the usable HBM (default: %(default)g, the memory "
        "model's largest measured under-prediction; 0: no margin; the fit test stays --headroom-gib)",
    )
    g.add_argument(
        "--prefer",
        type=choice_arg("prefer", tuple(PREFER)),
        default=PREFER_DEFAULT,
        metavar="{" + ",".join(PREFER) + "}",
        help="when keeping the memory margin costs step time: answer the plan that keeps it, the faster plan "
        "at risk shown beside it (safe, the default), or the faster plan unless the margin costs no more than "
        "the re-score band (fast)",
    )
    g.add_argument("--tp-across-nodes", action="store_true", help="allow tensor parallelism to span nodes")
    g.add_argument(
        "--mb-max",
        type=int_arg("mb_max"),
        default=16,
        metavar="N",
        help="largest micro-batch considered (default: %(default)s)",
    )
    g.add_argument(
        "--vp-max",
        type=_converter(
            "vp_max", int, f"an integer from 1 to {MAX_VP:,} (no model has more layers)", lambda v: 1 <= v <= MAX_VP
        ),
        default=8,
        metavar="N",
        help="largest interleave factor considered (default: %(default)s)",
    )
    g.add_argument(
        "--robust",
        action="store_true",
        help="minimise the worst step time over scenarios of the uncertain constants (compute, "
        "network and interference one typical error slower, and all together)",
    )
    p.add_argument(
        "--baseline",
        type=nonempty_arg("baseline", "a plan such as 'tp=8,pp=8,mb=1' or Megatron-LM arguments"),
        metavar="PLAN",
        help='your current plan, "tp=8,pp=8,mb=1,..." or a Megatron-LM argument line: evaluated and '
        "compared with the recommendation against the model's 80%% band",
    )
    p.add_argument(
        "--emit",
        type=choice_arg("emit", FORMATS),
        metavar="{" + ",".join(FORMATS) + "}",
        help="print the best plan as Megatron-LM arguments (megatron), a DeepSpeed config (deepspeed) "
        "or torchtitan settings for PyTorch FSDP2 (fsdp2)",
    )
    add_objective_args(p, pareto=True)
    add_flop_args(p)
    add_output_args(p)
    add_report_arg(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Flags -> :func:`planner.api.recommend` -> :func:`planner.recommend_report.render`."""
    refuse_serving(args)
    if args.layout is not None:  # the search chooses the layout; the flag was accepted and ignored
        raise SpecError(
            "layout", args.layout, "unset for recommend (the search chooses the layout; evaluate --layout prices one)"
        )
    if args.mode == "infer":
        if args.objective != "step" or args.train_tokens is not None or args.pareto:
            raise SpecError("objective", args.objective, "step, without --train-tokens or --pareto, in --mode infer")
        if args.global_batch is not None:  # the serving search sizes the batch itself; the flag was ignored
            raise SpecError(
                "global_batch",
                args.global_batch,
                "unset for recommend --mode infer (it searches the batch per replica; bound it with --max-batch)",
            )
        return recommend_infer.run(args)
    recommend_infer.reject_serving_flags(args)
    if args.dtype == "auto" or "," in args.dtype:
        return _each_recipe(args)
    model, cluster, workload = problem_from_args(args)
    if not cluster.num_gpus:
        raise SpecError("gpus", None, "given (--gpus N): recommend plans for a GPU count")
    _check_dma_engines(args.dma, cluster)
    grad_dtype = getattr(args, "grad_dtype", None) or "fp32"
    if args.emit:  # a gradient dtype the emitted format cannot state: refused before the search
        refuse_unstated_gradients(args.emit, grad_dtype, workload.dtype)
    # --time-limit bounds the whole command from its start (cli.main puts it on args): what start-up and
    # reading the problem took is deducted, and a tenth (at most 1 s) is kept for building and printing the plans
    started = getattr(args, "started_s", None)
    deadline = (time.perf_counter() if started is None else started) + args.time_limit - min(1.0, 0.1 * args.time_limit)
    result = api.recommend(
        model,
        cluster,
        workload,
        framework=framework_from_args(args),
        grad_dtype=grad_dtype,
        plan_options=dict(plan_options(args, model)),
        workers=args.workers,
        seed=args.seed,
        top_k=_asked(args.top),
        robust=args.robust,
        rescore=not args.robust,
        memory_margin=args.memory_margin,
        prefer=args.prefer,
        mfu_convention=args.mfu_convention,
        refuse_pins=True,
        deadline=deadline,
        **objective_options(args),
        **constraints_from_args(args),
    )
    if result.plans:  # the step time --dtype auto compares recipes by (_each_recipe)
        b = result.plans[0]
        args._best_step_s = b.graph_step_time_s if b.graph_step_time_s is not None else b.estimate.step_time_s
    code = render(result, args, model, cluster, workload)  # result.plans: the plans it showed
    if code == 0:
        write_report_of(
            args,
            result=result,
            model=model,
            cluster=cluster,
            workload=workload,
            objectives=report_objectives(args),
            baseline=args.baseline,
        )
    return code


def _check_dma_engines(dma, cluster) -> None:
    """``--dma``'s engine classes and counts against the device, before the search: every plan broke them alike
    and the search answered "no plan fits in memory" (as evaluate, costmodel.physics.comm.dma.check)."""
    if dma is None:
        return
    streams = [s for g in dma.groups for s in g.streams]
    if len(streams) != len(set(streams)):
        raise SpecError("dma", str(dma), "each stream in one group only")
    have = {e.name: e.count for e in cluster.device.dma_engines}
    used: dict = {}
    for g in dma.groups:
        if g.engine not in have:
            raise SpecError(
                "dma", str(dma), f"engine classes of {cluster.device.name}: {', '.join(have)} (got {g.engine!r})"
            )
        used[g.engine] = used.get(g.engine, 0) + g.engines
        if used[g.engine] > have[g.engine]:
            raise SpecError(
                "dma",
                str(dma),
                f"at most {have[g.engine]} {g.engine} engines in all (the groups of {g.engine} hold {used[g.engine]})",
            )


def _each_recipe(args: argparse.Namespace) -> int:
    """``--dtype auto`` (every recipe the GPU runs: :func:`costmodel.spec.precision.check_supported`) or a comma
    list: each recipe is searched on its own (each answer proven as a single-recipe search is), the fastest
    answer is shown, and one line per recipe states its best step time. A listed recipe the GPU lacks is
    refused as ``--dtype`` alone refuses it."""
    import contextlib
    import io

    from costmodel.spec.precision import RECIPE_NAMES, check_supported

    _, cluster, _ = problem_from_args(argparse.Namespace(**{**vars(args), "dtype": "bf16"}))
    dev = cluster.device
    if args.dtype == "auto":
        names = []
        for n in RECIPE_NAMES:
            if n == "fp16" or (n != "bf16" and not dev.peak_fp8_flops_per_s):
                continue  # fp16 trains as bf16 does (no recipe of its own); FP8 recipes need an FP8 peak
            try:
                check_supported(n, dev.name, dev.peak_fp8_flops_per_s)
            except SpecError:
                continue
            names.append(n)
    else:
        names = args.dtype.split(",")
        for n in names:
            check_supported(n, dev.name, dev.peak_fp8_flops_per_s)
    times = {}
    for n in names:
        one = argparse.Namespace(
            **{**vars(args), "dtype": n, "report": None, "emit": None, "json": False, "started_s": None}
        )
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = run(one)
            except SpecError:
                code = 2
        times[n] = getattr(one, "_best_step_s", None) if code == 0 else None
    fits = {n: t for n, t in times.items() if t is not None}
    if not fits:
        raise SpecError("dtype", args.dtype, "a recipe with a plan that fits (no recipe listed has one)")
    best = min(fits, key=fits.get)
    code = run(argparse.Namespace(**{**vars(args), "dtype": best, "started_s": None}))
    print(
        "precision: "
        + "; ".join(f"{n} {t:.3f} s" if t is not None else f"{n} no plan" for n, t in times.items())
        + f" (best plan of each, op graph where re-scored; chosen: {best}; MXFP8/NVFP4/blockwise GEMM rates "
        "on the fitted path are assumed: costmodel/trust/data/constant_evidence.json 'recipes')"
    )
    return code


def _asked(top: int) -> int:
    """Plans to ask the search for, so that ``top`` remain after the twins are left out and the bucket- and
    chunk-only variants folded into one row (:func:`planner.recommend_report.render`)."""
    return top if top == 1 else min(4 * top, 2 * MAX_TOP)
