"""``planner recommend --mode infer``: the serving plan that maximises output tokens/s per GPU
under TTFT/TPOT targets, the throughput/latency Pareto front, and launch arguments.

A thin layer over :func:`search.infer.solve_infer`. The ``recommend`` subcommand adds these
options with :func:`add_arguments` and hands ``--mode infer`` to :func:`run`; parallel-config
flags (``--tp 8``, ``--sp``) fix that variable for the search. A target no plan meets is
reported like training's infeasible problems: the report (with the Pareto front) is printed,
then exit code 2 with one line saying the best TTFT/TPOT any plan reaches and with which plan.
"""

from __future__ import annotations

import argparse

from costmodel.errors import InfeasibleConfig, SpecError
from costmodel.inference import PREFILL_TOKENS
from search.infer import InferProblem, InferResult, solve_infer
from search.problem import Limits
from search.solve import SolveOptions

from .args import add_inference_args, int_arg
from .emit_serving import launch_for_estimate
from .inference_report import launch_lines
from .problem import resolve_cluster, resolve_model
from .report import model_json, model_label, print_json, table

FIXABLE = ("tp", "pp", "dp", "ep", "sp", "chunks")


def add_arguments(parser: argparse.ArgumentParser, *, with_mode: bool = True) -> None:
    """Serving options of ``recommend`` (``with_mode=False`` when the parser already has ``--mode``)."""
    if with_mode:
        add_inference_args(parser)
    g = parser.add_argument_group("serving search (--mode infer)")
    g.add_argument("--max-batch", type=int_arg("max_batch"), metavar="N", default=1024,
                   help="largest concurrency per replica considered (default: %(default)s)")
    g.add_argument("--plot", metavar="FILE.png", help="write the throughput/latency Pareto front (needs matplotlib)")


SERVING_ONLY = ("input_len", "output_len", "kv_dtype", "prefill_tokens", "ttft_ms", "tpot_ms", "plot")


def reject_serving_flags(args: argparse.Namespace) -> None:
    """Training mode: a serving-only flag is a mistake, not something to ignore."""
    for f in SERVING_ONLY:
        if getattr(args, f, None) is not None:
            raise SpecError(f, getattr(args, f), "unset unless --mode infer")


def problem_from_args(args: argparse.Namespace) -> InferProblem:
    if args.gpus is None:
        raise SpecError("gpus", None, "given for recommend (--gpus N)")
    for f in ("input_len", "output_len"):
        if getattr(args, f, None) is None:
            raise SpecError(f, None, f"given with --mode infer (--{f.replace('_', '-')} N)")
    if getattr(args, "seq", None) is not None:
        raise SpecError("seq", args.seq, "unset with --mode infer (give --input-len and --output-len)")
    fixed = {k: getattr(args, k) for k in FIXABLE if getattr(args, k, None) is not None}
    ms = {f: getattr(args, f, None) for f in ("ttft_ms", "tpot_ms")}
    return InferProblem(
        model=resolve_model(args.model), cluster=resolve_cluster(args.cluster, args.gpus),
        input_len=args.input_len, output_len=args.output_len, dtype=args.dtype, kv_dtype=args.kv_dtype or "bf16",
        ttft_target_s=None if ms["ttft_ms"] is None else ms["ttft_ms"] / 1e3,
        tpot_target_s=None if ms["tpot_ms"] is None else ms["tpot_ms"] / 1e3,
        max_batch_per_replica=getattr(args, "max_batch", 1024) or 1024,
        prefill_tokens=getattr(args, "prefill_tokens", None) or PREFILL_TOKENS,
        limits=Limits(fixed=fixed))


def _plan_row(rank, e) -> list:
    c = e.config
    return [rank, c.tp, c.pp, c.dp, c.ep, "on" if c.sp else "off", c.chunks, e.batch_per_replica,
            f"{e.tokens_per_s_per_gpu:,.1f}", f"{e.ttft_s * 1e3:.1f}", f"{e.tpot_s * 1e3:.2f}",
            f"{e.e2e_latency_s:.2f}", f"{e.peak_memory_bytes / 2**30:.1f}"]


PLAN_HEADERS = ["rank", "tp", "pp", "dp", "ep", "sp", "chunks", "batch/replica", "tok/s/GPU", "TTFT ms",
                "TPOT ms", "e2e s", "GiB/GPU"]


def result_text(p: InferProblem, r: InferResult, prefill_tokens: int | None) -> str:
    targets = [f"{n} <= {v * 1e3:g} ms" for n, v in (("TTFT", p.ttft_target_s), ("TPOT", p.tpot_target_s)) if v]
    lines = [f"{model_label(p.model)} on {p.cluster.num_gpus} x {p.cluster.device.name}, serving {p.input_len} in / "
             f"{p.output_len} out tokens ({p.dtype} weights, {p.kv_dtype} KV cache); "
             f"targets: {', '.join(targets) or 'none'}",
             f"solve: {r.status} in {r.time_s:.2f} s ({r.evaluated} plans that fit evaluated, "
             f"{r.rejected} rejected)", ""]
    if r.plans:
        lines += ["best plans (output tokens/s per GPU, highest first)",
                  table(PLAN_HEADERS, [_plan_row(i + 1, e) for i, e in enumerate(r.plans)]), ""]
    else:
        lines += [f"no plan meets the targets: {r.explanation}", ""]
    lines += ["throughput/latency Pareto front (plans that fit; no other plan has both more tokens/s/GPU "
              "and lower TPOT)", table(PLAN_HEADERS, [_plan_row("-", e) for e in r.pareto])]
    if r.best:
        lines += ["", *launch_lines(launch_for_estimate(r.best, p.workload(r.best.batch), prefill_tokens))]
    return "\n".join(lines)


def result_json(p: InferProblem, r: InferResult, prefill_tokens: int | None) -> dict:
    def brief(e):
        return {"config": e.config.to_dict(), "batch_per_replica": e.batch_per_replica,
                "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu, "ttft_ms": e.ttft_s * 1e3, "tpot_ms": e.tpot_s * 1e3}
    plans = [{**e.to_dict(), "launch": launch_for_estimate(e, p.workload(e.batch), prefill_tokens)} for e in r.plans]
    return {"status": r.status, "mode": "infer", "model": model_json(p.model), "solve": r.solve_dict(), "plans": plans,
            "pareto": [brief(e) for e in r.pareto], "explanation": r.explanation}


def write_plot(p: InferProblem, r: InferResult, path: str) -> None:
    """The Pareto front (TPOT vs tokens/s per GPU) with the targets and the best plan, as an image."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecError("plot", path, "written only with matplotlib installed (pip install 'overlap-planner[plot]')") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [e.tpot_s * 1e3 for e in r.pareto]
    ax.plot(xs, [e.tokens_per_s_per_gpu for e in r.pareto], "o-", label="Pareto front (plans that fit)")
    for e, x in zip(r.pareto, xs):
        c = e.config
        ax.annotate(f"tp{c.tp} pp{c.pp} b{e.batch_per_replica}", (x, e.tokens_per_s_per_gpu), fontsize=7)
    if r.best:
        ax.plot([r.best.tpot_s * 1e3], [r.best.tokens_per_s_per_gpu], "r*", markersize=14, label="recommended")
    if p.tpot_target_s:
        ax.axvline(p.tpot_target_s * 1e3, color="grey", linestyle="--", label="TPOT target")
    ax.set_xlabel("TPOT (ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{p.model.name}, {p.cluster.num_gpus} x {p.cluster.device.name}, {p.input_len}/{p.output_len} tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise SpecError("plot", path, f"a writable file path ({e.strerror})") from None
    finally:
        plt.close(fig)


def run(args: argparse.Namespace) -> int:
    p = problem_from_args(args)
    if getattr(args, "emit", None):
        raise SpecError("emit", args.emit, "unset with --mode infer (the vLLM and SGLang launch arguments are printed)")
    options = SolveOptions(time_limit_s=getattr(args, "time_limit", None) or 10.0,
                           workers=getattr(args, "workers", None) or 2, seed=getattr(args, "seed", None) or 0,
                           top_k=max(3, getattr(args, "top", None) or 1))
    r = solve_infer(p, options)
    if args.plot:
        write_plot(p, r, args.plot)
    prefill = getattr(args, "prefill_tokens", None)
    if args.json:
        print_json(result_json(p, r, prefill))
    else:
        print(result_text(p, r, prefill))
    if not r.plans:
        raise InfeasibleConfig(f"targets=unmet: {r.explanation}")
    return 0
