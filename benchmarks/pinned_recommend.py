"""Pinned ``recommend`` on every problem of the development set: answered as fast as ``evaluate``.

    python -m benchmarks.pinned_recommend [--set dev|new|all] [--limit-s 2] [--time-limit 10]

For every usable row of the set (``benchmarks/published``), the row's stated plan is pinned
(every stated field of ``Row.fixed``: degrees, sp, ZeRO, recompute, bucket, chunks, micro-batch
and interleave when stated; the fields the source leaves out stay free, as ``validate_published``
leaves them) and the search answers with the op-graph re-score on, as ``planner recommend`` does.
Printed per problem: the pins left free, the status, the size of the space the pins leave, the
search's wall time, and ``evaluate``'s wall time of the same plan (graph engine) for comparison; ``tight`` after
it where the answer is the pinned plan over the HBM only by the assumed fragmentation allowance (issue 42,
:mod:`costmodel.physics.memory.verdict`: accepted with a warning).
Issue 9's target: every pinned problem answered in <= 2 s (``--limit-s``); exit 1 if one is not.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks import results_io
from benchmarks.published import load_set
from costmodel.engines.graph import compose
from costmodel.api import evaluate
from search.problem import VARIABLES, Limits, Problem
from search.solve import SolveOptions, solve


def pins_of(row) -> tuple[dict, dict]:
    """``(Limits.fixed, other Limits fields)`` of a row's stated plan: the fields the search
    chooses (:data:`search.problem.VARIABLES`); the framework and gradient dtype are the problem's,
    and the rest of the row's stack (kernels, dispatcher) runs the search's defaults."""
    fixed = {k: v for k, v in row.fixed.items() if k in VARIABLES}
    if "bucket_bytes" in row.fixed:
        fixed["bucket_mb"] = row.fixed["bucket_bytes"] / 1e6
    extra = {"flash_attention": row.fixed.get("flash_attention", True)}
    lps = row.fixed.get("layers_per_stage")
    if lps and searchable_split(lps):
        extra["layers_per_stage"] = tuple(lps)
    return fixed, extra


def searchable_split(lps) -> bool:
    """Whether a stage split can be pinned in ``recommend`` (``first, mid, ..., mid, last``:
    :class:`search.problem.Limits`). Another split is ``published.stage_layout``'s guess where the
    source states none (the AutoModel rows 196-198: 15,16,15,15): the search then chooses the split,
    as it chooses the other unstated knobs (printed ``split`` among the free pins)."""
    return len(lps) <= 2 or len(set(lps[1:-1])) == 1


def _cold() -> None:
    """Empty the op-graph caches, so no problem is timed on another's scheduled graphs."""
    for obj in vars(compose).values():
        if hasattr(obj, "cache_clear"):
            obj.cache_clear()


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="dev", choices=("dev", "new", "all"))
    ap.add_argument("--limit-s", type=float, default=2.0, help="target seconds per problem (default 2)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="the search's time limit (default 10)")
    args = ap.parse_args(argv)
    rows = [r for r in load_set(args.set) if not r.skip]
    print(
        f"{'row':>5}  {'source':22} {'model':16} {'gpus':>5}  {'free':10} {'status':10} {'space':>5}  "
        f"{'recommend s':>11}  {'evaluate s':>10}"
    )
    slow, times, statuses, tight = [], [], {}, []
    for row in rows:
        fixed, extra = pins_of(row)
        framework = row.fixed.get("framework", "megatron")
        try:
            p = Problem(
                model=row.model,
                cluster=row.cluster,
                workload=row.workload,
                limits=Limits(fixed=fixed, **extra),
                framework=framework,
                grad_dtype=row.fixed.get("grad_dtype", "fp32"),
                options=row.plan_options(),
            )
            _cold()
            start = time.perf_counter()
            r = solve(p, SolveOptions(time_limit_s=args.time_limit, rescore=True))
            took = time.perf_counter() - start
        except Exception as e:  # a refused pin is a result too: print it
            print(f"{row.row_id:>5}  {row.source:22} {row.label[:16]:16} {row.gpus:>5}  refused: {e}")
            continue
        t_eval = float("nan")
        if r.best is not None:  # evaluate of the answer, from cold caches as the search was
            _cold()
            start = time.perf_counter()
            evaluate(row.model, row.cluster, row.workload, r.best.config, engine="graph")
            t_eval = time.perf_counter() - start
        st = r.stats
        space = st.space if st.space is not None else st.model_choices or 0
        unpinned = [] if not row.fixed.get("layers_per_stage") or "layers_per_stage" in extra else ["split"]
        free = ",".join([*row.free, *unpinned]) or "-"
        print(
            f"{row.row_id:>5}  {row.source:22} {row.label[:16]:16} {row.gpus:>5}  {free:10} {r.status:10} "
            f"{space:>5}  {took:>11.2f}  {t_eval:>10.2f}" + ("  tight" if r.memory_warning else "")
        )
        if r.memory_warning:
            tight.append(row.row_id)
        times.append(took)
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if took > args.limit_s:
            slow.append(row.row_id)
    if times:
        times.sort()
        print(
            f"\n{len(times)} problems: median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s; "
            f"{len(slow)} above {args.limit_s:g} s"
            + (f" ({', '.join(slow)})" if slow else "")
            + (f"; {len(tight)} tight ({', '.join(tight)})" if tight else "")
        )
    results_io.record(
        "pinned_recommend",
        argv,
        enabled=record_results and times and args.set == "all" and (args.limit_s, args.time_limit) == (2.0, 10.0),
        title="pinned recommend on every published plan, the search's wall time",
        headline={
            "problems": len(times),
            **{f"status {k}": v for k, v in sorted(statuses.items())},
            "median s": round(times[len(times) // 2], 2) if times else None,
            "max s": round(times[-1], 2) if times else None,
            f"above {args.limit_s:g} s": len(slow),
            "memory tight": len(tight),
        },
        targets=[{"name": f"every pinned problem answered in <= {args.limit_s:g} s", "met": not slow}],
        inputs=[
            "costmodel",
            "search",
            "benchmarks/pinned_recommend.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
