"""``evaluate`` with what the source states against pinned ``recommend``, on every published row.

    python -m benchmarks.evaluate_partial [--set dev|new|all] [--source KEY] [--limit N]

A user reproducing a published run states what the source states and leaves the rest to the
planner (issue 23). For every usable row of the set (``benchmarks/published``; ``all`` is dev
and the unsealed new set, never the sealed split) this builds the planner flags such a user would
type (:func:`stated_flags`): the degrees (tp, pp, dp, cp, ep), the micro-batch, interleave,
recompute, ZeRO stage and sequence parallelism *where the source's CSV row states them*, and
the software facts of the stack (framework, attention kernel, gradient dtype, dispatcher, the
era's missing features: Megatron-LM 2020-22 had no distributed optimizer and no overlapped
gradient reduce). Everything else (chunks, bucket, unstated micro-batch / interleave /
recompute / ZeRO / SP, the stage split) is left to the planner. The same flags then run
``planner evaluate`` (:func:`planner.completion.evaluate_stated`: unstated knobs chosen as
``recommend`` would) and pinned ``planner recommend`` (the stated flags pinned, the search
chooses the rest; :func:`planner.commands.recommend.problem_of`), both on the row's own model,
cluster and workload objects (the source facts :mod:`benchmarks.published` puts there).

Printed per row: the stated flags, both predictions' error against the measured step time, and
both wall times; then mean |err| of each (target: within 0.5 points of each other; they agree by
construction when both return the same plan) and the median seconds per call (target: evaluate
as fast as pinned recommend). Row settings the planner's flags cannot state (PyTorch's
context_parallel, FSDP1 flat buffers, eager element-wise kernels) are left out of both and
listed: the error of such rows is the CLI's, not the model's.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

from benchmarks import results_io
from benchmarks.pinned_recommend import _cold
from benchmarks.published import MEGATRON_ERA, SETS, TORCHTITAN, load_set

from costmodel.spec.errors import PlannerError
from planner.cli import build_parser
from planner.commands.recommend import problem_of
from planner.completion import evaluate_stated
from search.solve import SolveOptions, solve

#: ParallelConfig settings of a row that no planner flag states (left out of both paths, listed)
UNSTATABLE = {"cp_impl": "ring", "fsdp_copies": True, "fused_elementwise": True}


def csv_row(row) -> dict:
    """The raw CSV record of a published row (what the source states, before the rules of :mod:`benchmarks.published`)."""
    with open(SETS[row.set], newline="") as f:
        return next(r for r in csv.DictReader(f) if r["row_id"] == row.row_id)


def _number(text: str) -> int | None:
    try:
        return int(float(text.split(" ")[0]))
    except (ValueError, IndexError):
        return None


def stated_flags(row) -> list[str]:
    """The planner flags of what ``row``'s source states (see the module doc), as a user types them."""
    raw, f = csv_row(row), row.fixed
    out = [f"--{k}={f[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if f.get(k, 1) != 1]
    if "mb" in f and (_number(raw["micro_batch"]) is not None or row.source in TORCHTITAN):
        out.append(f"--mb={f['mb']}")  # torchtitan: no accumulation, the stated local batch is the micro-batch
    if "vp" in f and _number(raw["vp"]) is not None and f["pp"] > 1:
        out.append(f"--vp={f['vp']}")
    if raw["recompute"].strip() or any(n.startswith("full recompute: activation_checkpointing") for n in row.notes):
        out.append(f"--recompute={f['recompute']}")
        if f.get("recompute_modules"):  # Megatron-Core --recompute-modules, as the source lists them
            out.append("--recompute-modules=" + ",".join(f["recompute_modules"]))
    sharding = raw["zero_or_sharding"].lower()
    if (sharding and "not stated" not in sharding) or row.source in MEGATRON_ERA:
        out.append(f"--zero={f['zero']}")  # the era had no distributed optimizer
    if raw["sp"] in ("yes", "no") and f["tp"] > 1:
        out.append("--sp" if raw["sp"] == "yes" else "--no-sp")
    if row.source in MEGATRON_ERA:
        out.append("--bucket-mb=0")  # no overlapped gradient reduce before Megatron-Core
    lps = f.get("layers_per_stage")
    if lps and row.source == "llama3_2024":  # the paper states its split (Section 3.3.2)
        out.append("--layers-per-stage=" + ",".join(map(str, f["layers_per_stage"])))
    out.append(f"--framework={f.get('framework', 'megatron')}")
    if not f.get("flash_attention", True):
        out.append("--no-flash-attention")
    out.append(f"--grad-dtype={f.get('grad_dtype', 'fp32')}")
    if f.get("optimizer_dtype", "fp32") != "fp32":
        out.append(f"--optimizer-dtype={f['optimizer_dtype']}")
    if f.get("fp8_param_gather"):
        out.append("--fp8-param-gather")
    if f.get("ep_dispatcher", "alltoall") != "alltoall" and f.get("ep", 1) > 1:
        out.append(f"--ep-dispatcher={f['ep_dispatcher']}")
    return out


def unstatable(row) -> list[str]:
    return [k for k, default in UNSTATABLE.items() if k in row.fixed and row.fixed[k] != default]


def namespace(command: str, row, flags: list[str]) -> argparse.Namespace:
    """The parsed command line ``planner <command> --model ... <flags>`` (the model and cluster names
    are placeholders: the row's own objects are used)."""
    problem = [
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        str(row.gpus),
        "--global-batch",
        str(row.workload.global_batch),
        "--seq",
        str(row.workload.seq_len),
        "--dtype",
        row.workload.dtype,
    ]
    return build_parser().parse_args([command, *problem, *flags])


def run_evaluate(row, flags):
    args = namespace("evaluate", row, flags)
    _cold()
    t0 = time.perf_counter()
    est, config, chosen, note, _ = evaluate_stated(args, row.model, row.cluster, row.workload)
    return est, chosen, note, time.perf_counter() - t0


def run_recommend(row, flags):
    args = namespace("recommend", row, flags)
    problem = problem_of(args, row.model, row.cluster, row.workload)
    _cold()
    t0 = time.perf_counter()
    r = solve(problem, SolveOptions(time_limit_s=args.time_limit, workers=args.workers, seed=args.seed, rescore=True))
    took = time.perf_counter() - t0
    return (r.best.reported if r.best is not None else None), took


def rows_of(set_name: str, source: str | None = None):
    return [r for r in load_set(set_name) if not r.skip and (source is None or r.source == source)]


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="all", choices=("dev", "new", "all"))
    ap.add_argument("--source", help="only rows of this source_key")
    ap.add_argument("--limit", type=int, help="only the first N rows")
    args = ap.parse_args(argv)
    rows = rows_of(args.set, args.source)[: args.limit]
    print(
        f"{'row':>5} {'source':22} {'gpus':>5} {'meas s':>8} {'eval s':>8} {'err':>7} {'rec s':>8} {'err':>7} "
        f"{'t eval':>7} {'t rec':>7}  stated / chosen"
    )
    errs_e, errs_r, t_e, t_r, differ, by_set, unanswered = [], [], [], [], [], {}, []
    for row in rows:
        flags = stated_flags(row)
        try:
            est, chosen, note, te = run_evaluate(row, flags)
            rec, tr = run_recommend(row, flags)
        except PlannerError as e:
            print(f"{row.row_id:>5} {row.source:22} refused: {e}")
            continue
        if rec is None:
            print(
                f"{row.row_id:>5} {row.source:22} recommend found no plan; evaluate {est.step_time_s:.3f} s "
                f"({note or 'completed'})"
            )
            unanswered.append(row.row_id)
            continue
        ee, er = est.step_time_s / row.measured_s - 1, rec.step_time_s / row.measured_s - 1
        errs_e.append(abs(ee))
        errs_r.append(abs(er))
        by_set.setdefault(row.set, []).append((abs(ee), abs(er)))
        t_e.append(te)
        t_r.append(tr)
        same = abs(est.step_time_s / rec.step_time_s - 1) < 1e-6
        if not same:
            differ.append((row.row_id, est.config, rec.config))
        extra = unstatable(row)
        print(
            f"{row.row_id:>5} {row.source:22} {row.gpus:>5} {row.measured_s:>8.3f} {est.step_time_s:>8.3f} "
            f"{100 * ee:>+6.1f}% {rec.step_time_s:>8.3f} {100 * er:>+6.1f}% {te:>7.2f} {tr:>7.2f}  "
            f"{' '.join(flags)} / {' '.join(f'{k}={v}' for k, v in chosen.items())}"
            + (f"; {note}" if note else "")
            + (f"; not statable: {', '.join(extra)}" if extra else "")
            + ("" if same else "  DIFFERENT PLAN")
        )
    if not errs_e:
        return 1
    me, mr = 100 * statistics.mean(errs_e), 100 * statistics.mean(errs_r)
    print(
        f"\n{len(errs_e)} rows: mean |err| evaluate {me:.2f}%, pinned recommend {mr:.2f}%, difference "
        f"{me - mr:+.2f} points (target within 0.5); median seconds per call: evaluate "
        f"{statistics.median(t_e):.3f} s, recommend {statistics.median(t_r):.3f} s"
    )
    for name, es in by_set.items():
        print(
            f"   {name} set, {len(es)} rows: mean |err| evaluate {100 * statistics.mean(e for e, _ in es):.2f}%, "
            f"pinned recommend {100 * statistics.mean(r for _, r in es):.2f}%"
        )
    print(
        f"{len(differ)} rows where the two return different plans"
        + (": " + ", ".join(d[0] for d in differ) if differ else "")
    )
    if unanswered:
        print(
            f"{len(unanswered)} rows pinned recommend cannot plan (evaluate falls back to the framework's "
            f"defaults and says so): {', '.join(unanswered)}"
        )
    results_io.record(
        "evaluate_partial",
        argv,
        enabled=record_results and args.set == "all" and not args.source and args.limit is None,
        title="evaluate with what the source states against pinned recommend, every published row",
        headline={
            "rows": len(errs_e),
            "evaluate mean |err| %": round(me, 2),
            "pinned recommend mean |err| %": round(mr, 2),
            "rows with different plans": len(differ),
            "rows recommend cannot plan": len(unanswered),
            "evaluate median s": round(statistics.median(t_e), 3),
            "recommend median s": round(statistics.median(t_r), 3),
        },
        targets=[
            {"name": "mean |err| within 0.5 points", "met": abs(me - mr) <= 0.5},
            {
                "name": "evaluate's median seconds <= pinned recommend's",
                "met": statistics.median(t_e) <= statistics.median(t_r),
            },
        ],
        inputs=[
            "costmodel",
            "search",
            "planner",
            "benchmarks/evaluate_partial.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )
    for rid, a, b in differ:
        da, db = a.to_dict(), b.to_dict()
        print(
            f"   {rid}: evaluate "
            + " ".join(f"{k}={da[k]}" for k in da if da[k] != db.get(k))
            + " | recommend "
            + " ".join(f"{k}={db[k]}" for k in db if da.get(k) != db[k])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
