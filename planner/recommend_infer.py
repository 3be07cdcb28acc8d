"""``planner recommend --mode infer``: the serving plan that maximises output tokens/s per GPU
under TTFT/TPOT targets, the throughput/latency Pareto front, and launch arguments.

A thin layer over :func:`search.infer.solve_infer`. The ``recommend`` subcommand adds these
options with :func:`add_arguments` and hands ``--mode infer`` to :func:`run`; parallel-config
flags (``--tp 8``) fix that variable for the search. ``--engine vllm|sglang|trtllm`` (default
vllm) restricts the search to what that engine's launch settings express
(:data:`search.infer.ENGINES`) and prints its launch command, which runs the top plan exactly;
the best plans differ in their emitted parallel settings. A target no plan meets is
reported like training's infeasible problems: the report (with the Pareto front) is printed,
then exit code 2 with one line saying the best TTFT/TPOT any plan reaches and with which plan.
"""

from __future__ import annotations

import argparse
import os
import sys

from costmodel.spec.errors import InfeasibleConfig, SpecError
from search.infer import ENGINES, InferProblem, InferResult, shortfall, solve_infer
from search.problem import Limits
from search.solve import SolveOptions

from . import disagg_report
from .args import add_inference_args, choice_arg, int_arg
from .args_infer import add_speculation_args
from .flags import speculation_from_args, with_mtp_layers
from .emit_serving import launch_for_estimate
from .inference_report import SERVING_KEYS, launch_lines, speculation_lines
from .no_plan_line import no_plan_line
from .problem import resolve_cluster, resolve_model
from .report import model_json, model_label, print_json, table

#: the serving plan keys; a flag that states one pins it in the search
FIXABLE = SERVING_KEYS


def add_arguments(parser: argparse.ArgumentParser, *, with_mode: bool = True) -> None:
    """Serving options of ``recommend`` (``with_mode=False`` when the parser already has ``--mode``)."""
    if with_mode:
        add_inference_args(parser)
    g = parser.add_argument_group("serving search (--mode infer)")
    g.add_argument(
        "--max-batch",
        type=int_arg("max_batch"),
        metavar="N",
        default=1024,
        help="largest concurrency per replica considered (default: %(default)s)",
    )
    g.add_argument(
        "--engine",
        type=choice_arg("engine", tuple(ENGINES)),
        metavar="{" + ",".join(ENGINES) + "}",
        help="serving engine: search only the settings its launch flags express, and print its "
        "launch command (default: vllm)",
    )
    g.add_argument("--plot", metavar="FILE.png", help="write the throughput/latency Pareto front (needs matplotlib)")
    add_speculation_args(g)
    disagg_report.add_arguments(g)


SERVING_ONLY = (
    "input_len",
    "output_len",
    "kv_dtype",
    "prefill_tokens",
    "ttft_ms",
    "tpot_ms",
    "plot",
    "engine",
    "disagg",
    "spec_tokens",
    "spec_accept",
    "spec_method",
)


def reject_serving_flags(args: argparse.Namespace) -> None:
    """Training mode: a serving-only flag is a mistake, not something to ignore."""
    for f in SERVING_ONLY:
        if getattr(args, f, None) is not None:
            raise SpecError(f, getattr(args, f), "unset unless --mode infer")


#: training-only flags of ``recommend`` (the serving search has none of these settings)
TRAINING_ONLY = (
    "cp",
    "cp_impl",
    "vp",
    "mb",
    "zero",
    "recompute",
    "recompute_layers",
    "bucket_mb",
    "framework",
    "grad_dtype",
    "dma",
    "flash_attention",
    "layers_per_stage",
    "first_stage_layers",
    "last_stage_layers",
    "baseline",
)
TRAINING_SWITCHES = ("no_zero3", "robust", "account_for_embedding", "account_for_loss")


def reject_training_flags(args: argparse.Namespace) -> None:
    """Serving mode: a training-only flag is a mistake, not something to ignore."""
    for f in TRAINING_ONLY:
        if getattr(args, f, None) is not None:
            raise SpecError(f, getattr(args, f), "unset with --mode infer (a training setting)")
    for f in TRAINING_SWITCHES:
        if getattr(args, f, False):
            raise SpecError(f, True, "unset with --mode infer (a training setting)")
    if getattr(args, "headroom_gib", 0.0):
        raise SpecError("headroom_gib", args.headroom_gib, "unset with --mode infer (a training setting)")


def problem_from_args(args: argparse.Namespace) -> InferProblem:
    if args.gpus is None:
        raise SpecError("gpus", None, "given for recommend (--gpus N)")
    reject_training_flags(args)
    for f in ("input_len", "output_len"):
        if getattr(args, f, None) is None:
            raise SpecError(f, None, f"given with --mode infer (--{f.replace('_', '-')} N)")
    if getattr(args, "seq", None) is not None:
        raise SpecError("seq", args.seq, "unset with --mode infer (give --input-len and --output-len)")
    fixed = {k: getattr(args, k) for k in FIXABLE if getattr(args, k, None) is not None}
    maximum = {k: getattr(args, f"{k}_max") for k in ("tp", "pp") if getattr(args, f"{k}_max", None) is not None}
    ms = {f: getattr(args, f, None) for f in ("ttft_ms", "tpot_ms")}
    model = with_mtp_layers(resolve_model(args.model), args)  # --mtp-layers (speculative drafts), as evaluate reads it
    ctx = model.max_position_embeddings
    if ctx is not None and args.input_len + args.output_len > ctx:  # as evaluate refuses it (validate_inference)
        raise SpecError(
            "input_len",
            args.input_len,
            f"at most {max(0, ctx - args.output_len)} with output_len={args.output_len}: prompt + output must fit "
            f"the model's context of {ctx} tokens (max_position_embeddings)",
        )
    return InferProblem(
        model=model,
        cluster=resolve_cluster(args.cluster, args.gpus),
        input_len=args.input_len,
        output_len=args.output_len,
        dtype=args.dtype,
        kv_dtype=args.kv_dtype or "bf16",
        ttft_target_s=None if ms["ttft_ms"] is None else ms["ttft_ms"] / 1e3,
        tpot_target_s=None if ms["tpot_ms"] is None else ms["tpot_ms"] / 1e3,
        max_batch_per_replica=getattr(args, "max_batch", 1024) or 1024,
        prefill_tokens=getattr(args, "prefill_tokens", None),
        limits=Limits(fixed=fixed, maximum=maximum, tp_across_nodes=getattr(args, "tp_across_nodes", False)),
        engine=getattr(args, "engine", None) or "vllm",
        speculation=speculation_from_args(args, model),
    )


def _plan_row(rank, e, p: InferProblem | None = None, r=None) -> list:
    c = e.config
    row = [rank, c.tp, c.pp, c.dp, c.ep]
    if p is None or p.engine is None:
        row += ["on" if c.sp else "off", c.chunks]
    else:
        row += [_launch(p, e, None)["replicas"]]
    row += [
        e.batch_per_replica,
        e.serving.get("token_budget", "-"),
        f"{e.tokens_per_s_per_gpu:,.1f}",
        f"{e.ttft_s * 1e3:.1f}",
        f"{e.tpot_s * 1e3:.2f}",
        f"{e.e2e_latency_s:.2f}",
        f"{e.peak_memory_bytes / 2**30:.1f}",
    ]
    if r is not None:
        row.append("met" if p.meets(e) else f"x{shortfall(p, e):.2f}")
    return row


PLAN_HEADERS = [
    "rank",
    "tp",
    "pp",
    "dp",
    "ep",
    "sp",
    "chunks",
    "batch/replica",
    "tokens/step",
    "tok/s/GPU",
    "TTFT ms",
    "TPOT ms",
    "e2e s",
    "GiB/GPU",
]


def _headers(p: InferProblem, targets: bool = False) -> list[str]:
    h = list(PLAN_HEADERS)
    if p.engine is not None:
        h[5:7] = ["servers"]
    return h + (["targets"] if targets else [])


def _launch(p: InferProblem, e, prefill_tokens: int | None) -> dict:
    """The chosen engine's launch (:func:`planner.emit_serving.engine_launch`) for plan ``e``."""
    engines = (p.engine,) if p.engine else ("vllm", "sglang")
    d = launch_for_estimate(e, p.workload(e.batch), prefill_tokens, moe=p.model.is_moe, engines=engines)
    return d[p.engine] if p.engine else d


def _describe(e) -> str:
    c = e.config
    return (
        f"tp={c.tp} pp={c.pp} dp={c.dp} ep={c.ep}, {e.batch_per_replica} request(s) per replica: "
        f"TTFT {e.ttft_s * 1e3:.1f} ms, TPOT {e.tpot_s * 1e3:.2f} ms, {e.tokens_per_s_per_gpu:,.1f} tok/s/GPU"
    )


def pareto_lines(p: InferProblem, r: InferResult) -> list[str]:
    """The Pareto table, or one line saying why there is none; with targets no plan meets, one
    line naming the closest plan first. Never a table without rows."""
    has_targets = bool(p.ttft_target_s or p.tpot_target_s)
    if not r.pareto:
        return [
            "throughput/latency Pareto front: none (no plan fits in memory; use more GPUs, fp8 weights or "
            "KV cache, or shorter requests)"
        ]
    lines = [
        "throughput/latency Pareto front (plans that fit; no other plan has both more tokens/s/GPU "
        "and lower TPOT" + ("; targets: met, or the factor by which the worse one is missed)" if has_targets else ")")
    ]
    if has_targets and not r.plans and r.closest is not None:
        lines.append(
            f"no plan meets the targets; closest ({shortfall(p, r.closest):.2f}x the target it misses "
            f"most): {_describe(r.closest)}"
        )
    lines.append(table(_headers(p, has_targets), [_plan_row("-", e, p, r if has_targets else None) for e in r.pareto]))
    return lines


def result_text(p: InferProblem, r: InferResult, prefill_tokens: int | None) -> str:
    targets = [f"{n} <= {v * 1e3:g} ms" for n, v in (("TTFT", p.ttft_target_s), ("TPOT", p.tpot_target_s)) if v]
    engine = f", engine {ENGINES[p.engine].title}" if p.engine else ""
    lines = [
        f"{model_label(p.model)} on {p.cluster.num_gpus} x {p.cluster.device.name}, serving {p.input_len} in / "
        f"{p.output_len} out tokens ({p.dtype} weights, {p.kv_dtype} KV cache{engine}); "
        f"targets: {', '.join(targets) or 'none'}",
        f"solve: {r.status} in {r.time_s:.2f} s ({r.evaluated} plans that fit evaluated, {r.rejected} rejected)",
        *speculation_lines(p.speculation.to_dict() if p.speculation is not None else None),
        "",
    ]
    if r.plans:
        what = "each a different launch layout" if p.engine else "each a different parallel config"
        lines += [
            f"best plans (output tokens/s per GPU, highest first; {what})",
            table(_headers(p), [_plan_row(i + 1, e, p) for i, e in enumerate(r.plans)]),
            "",
        ]
    else:
        lines += [f"no plan meets the targets: {r.explanation}", ""]
    lines += pareto_lines(p, r)
    if r.best and p.engine:
        lines += ["", f"launch ({ENGINES[p.engine].title}; set MODEL to the checkpoint path or Hugging Face id)"]
        for i, e in enumerate(r.plans):
            d = _launch(p, e, prefill_tokens)
            lines.append(f"  {i + 1}: {d['command']}")
            lines += [f"     note: {n}" for n in d["notes"]]
    elif r.best:
        lines += ["", *launch_lines(_launch(p, r.best, prefill_tokens))]
    return "\n".join(lines)


def result_json(p: InferProblem, r: InferResult, prefill_tokens: int | None) -> dict:
    def brief(e):
        return {
            "config": e.config.to_dict(),
            "batch_per_replica": e.batch_per_replica,
            "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
            "ttft_ms": e.ttft_s * 1e3,
            "tpot_ms": e.tpot_s * 1e3,
            "meets_targets": p.meets(e),
        }

    def launch(e):
        d = _launch(p, e, prefill_tokens)
        return {p.engine: d} if p.engine else d

    plans = [{**e.to_dict(), "launch": launch(e)} for e in r.plans]
    return {
        "status": r.status,
        "mode": "infer",
        "engine": p.engine,
        "model": model_json(p.model),
        "solve": r.solve_dict(),
        "plans": plans,
        "pareto": [brief(e) for e in r.pareto],
        "closest": None if r.closest is None else {**brief(r.closest), "launch": launch(r.closest)},
        "explanation": r.explanation,
    }


def check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` target that is a directory before the search (savefig would write
    ``DIR.png`` beside it and say nothing)."""
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise SpecError("plot", path, "an image file path such as DIR/pareto.png (it names a directory)")


#: where a label may sit around its point (points, x right / y up), nearest first; a label goes to the first that
#: overlaps no other label, marker or the legend and stays inside the axes (greedy placement: no new dependency,
#: and unlike force-directed placement, e.g. the adjustText package, it never leaves two labels overlapping)
LABEL_OFFSETS = tuple(
    (sx * dx, sy * dy)
    for dx, dy in ((6, 4), (6, 14), (20, 4), (6, 26), (30, 16), (40, 30))
    for sx in (1, -1)
    for sy in (1, -1)
)


def place_labels(ax, points: list, labels: list[str], obstacles: list) -> int:
    """Annotate each ``(x, y)`` data point with its label at the first of :data:`LABEL_OFFSETS` where the label's
    box overlaps no label placed before, no box of ``obstacles`` (display coordinates) and stays inside the
    axes; a label with no such place is left out. Returns how many were placed."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = list(obstacles)
    placed = 0
    for (x, y), text in zip(points, labels):
        for dx, dy in LABEL_OFFSETS:
            far = (abs(dx), abs(dy)) != (6, 4)  # a leader line to any label not beside its point
            t = ax.annotate(
                text,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=7,
                ha="left" if dx > 0 else "right",
                va="bottom" if dy > 0 else "top",
                arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5} if far else None,
            )
            box = t.get_window_extent(renderer)
            fits = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if fits and not any(box.overlaps(o) for o in taken):
                taken.append(box)
                placed += 1
                break
            t.remove()
    return placed


def write_plot(p: InferProblem, r: InferResult, path: str) -> tuple[int, int]:
    """The Pareto front (TPOT vs tokens/s per GPU) with the targets and the best plan, as an image; each
    plan labelled where its label overlaps nothing (:func:`place_labels`). Returns (plans, labelled)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.transforms import Bbox
    except ImportError:
        raise SpecError(
            "plot", path, "written only with matplotlib installed (pip install 'overlap-planner[plot]')"
        ) from None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    try:
        xs = [e.tpot_s * 1e3 for e in r.pareto]
        ys = [e.tokens_per_s_per_gpu for e in r.pareto]
        ax.plot(xs, ys, "o-", label="Pareto front (plans that fit)")
        if r.best:
            ax.plot([r.best.tpot_s * 1e3], [r.best.tokens_per_s_per_gpu], "r*", markersize=14, label="recommended")
        if p.tpot_target_s:
            ax.axvline(p.tpot_target_s * 1e3, color="grey", linestyle="--", label="TPOT target")
        ax.margins(0.12)
        ax.set_xlabel("TPOT (ms)")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_title(
            f"{p.model.name}, {p.cluster.num_gpus} x {p.cluster.device.name}, {p.input_len}/{p.output_len} tokens"
        )
        legend = ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()  # the axes are fixed before the labels are placed in them
        renderer = fig.canvas.get_renderer()
        marks = [(x, y) for x, y in zip(xs, ys)] + (
            [(r.best.tpot_s * 1e3, r.best.tokens_per_s_per_gpu)] if r.best else []
        )
        obstacles = [legend.get_window_extent(renderer)]
        for x, y in marks:
            px, py = ax.transData.transform((x, y))
            obstacles.append(Bbox.from_extents(px - 5, py - 5, px + 5, py + 5))
        labels = [
            f"tp{e.config.tp} pp{e.config.pp}"
            + (f" dp{e.config.dp}" if e.config.dp > 1 else "")
            + f" b{e.batch_per_replica}"
            for e in r.pareto
        ]
        placed = place_labels(ax, list(zip(xs, ys)), labels, obstacles)
        try:
            fig.savefig(path)
        except OSError as e:
            raise SpecError("plot", path, f"a writable file path ({e.strerror})") from None
    finally:
        plt.close(fig)
    return len(r.pareto), placed


def plot_line(path: str, plans: int, labelled: int) -> str:
    """The one line that says which file ``--plot`` wrote."""
    rest = "" if labelled == plans else f", {labelled} labelled (the others would overlap; all are in the table)"
    return f"plot: wrote {path} (throughput/latency Pareto front, {plans} plan{'s' if plans != 1 else ''}{rest})"


def run(args: argparse.Namespace) -> int:
    p = problem_from_args(args)
    if getattr(args, "emit", None):
        raise SpecError("emit", args.emit, "unset with --mode infer (the vLLM and SGLang launch arguments are printed)")
    options = SolveOptions(
        time_limit_s=getattr(args, "time_limit", None) or 10.0,
        workers=getattr(args, "workers", None) or 2,
        seed=getattr(args, "seed", None) or 0,
        top_k=max(3, getattr(args, "top", None) or 1),
    )
    if args.plot:
        check_plot_path(args.plot)
    r = solve_infer(p, options)
    plotted = write_plot(p, r, args.plot) if args.plot else None
    prefill = getattr(args, "prefill_tokens", None)
    d = disagg_report.compare(args, p, r)  # aggregated vs disaggregated (--disagg)
    if args.json:
        print_json({**result_json(p, r, prefill), **({"disaggregation": disagg_report.as_json(p, d)} if d else {})})
    else:
        print(result_text(p, r, prefill) + ("\n".join(["", *disagg_report.lines(p, d)]) if d else ""))
    if plotted:  # on stderr under --json: stdout stays one JSON object
        print(plot_line(args.plot, *plotted), file=sys.stderr if args.json else sys.stdout)
    if not r.plans and not (d and d.choice == "disaggregated"):
        raise InfeasibleConfig(no_plan_line("targets=unmet", r.explanation))
    return 0
