"""The two step-time engines side by side: dev-set error, step times and evaluation speed.

    python -m benchmarks.graph_vs_analytic [--rows]

* ``analytic``: :mod:`costmodel.engines.analytic`, the unified overlap formula per communication.
* ``graph``: :mod:`costmodel.engines.graph`, op graphs scheduled on compute and DMA engines, composed
  layer -> stage -> simulated pipeline -> DP buckets.

Prints the development-set error of each engine (``benchmarks/data/published_dev.csv``, the
rows and fill rules of ``benchmarks/published``; each engine picks its own best value for
unstated micro-batch / interleave settings), the step times of both on the same plans, and
the cost of one evaluation (cold: caches cleared; warm: repeated), including GPT 1T on 3072
GPUs (128 layers, pp 64), which the issue asks to evaluate in under 50 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks import published
from costmodel.api import evaluate
from costmodel.engines import analytic
from costmodel.engines.graph import builders, compose
from costmodel.physics.kernels import compute
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

ENGINES = ("analytic", "graph")
SPEED = [  # (label, model, cluster, gpus, batch, seq, config)
    (
        "GPT-3 175B / 128 A100, tp8 pp8 v3 sp",
        "gpt3-175b",
        "a100-80g",
        128,
        256,
        2048,
        ParallelConfig(tp=8, pp=8, dp=2, vp=3, sp=True, chunks=8, recompute="selective"),
    ),
    (
        "Llama-3-70B / 64 H100, tp4 pp4 cp2 v5",
        "llama3-70b",
        "h100-sxm",
        64,
        128,
        8192,
        ParallelConfig(tp=4, pp=4, dp=2, cp=2, vp=5, sp=True, chunks=4, zero=1),
    ),
    (
        "GPT 1T / 3072 A100, tp8 pp64 v2 (Narayanan)",
        "gpt-1t",
        "a100-80g",
        3072,
        3072,
        2048,
        ParallelConfig(tp=8, pp=64, dp=6, vp=2, recompute="full", flash_attention=False, bucket_bytes=0),
    ),
]


def clear_caches() -> None:
    analytic.layer_timing.cache_clear()
    analytic._layer_base.cache_clear()  # the DP-independent part, memoised apart
    compute._layer_ops.cache_clear()
    for f in (compose._graph_step, compose._layer_schedule, compose._part_schedule, builders._layer_graph):
        f.cache_clear()


def dev_set(show_rows: bool) -> dict:
    rows = [r for r in published.load_rows() if not r.skip]
    res = {}
    for eng in ENGINES:
        t0 = time.perf_counter()
        res[eng] = {r.row_id: published.predict(r, eng)[0] for r in rows}
        res[eng + "_time_s"] = time.perf_counter() - t0
    print(f"{'row':>4} {'model':<18} {'measured':>9} {'analytic':>9} {'err%':>6} {'graph':>9} {'err%':>6}")
    errs = {e: [] for e in ENGINES}
    for r in rows:
        line = f"{r.row_id:>4} {r.label[:18]:<18} {r.measured_s:9.3f}"
        for eng in ENGINES:
            est = res[eng][r.row_id]
            if est is None:
                line += f" {'-':>9} {'-':>6}"
                continue
            e = est.step_time_s / r.measured_s - 1
            errs[eng].append(abs(e))
            line += f" {est.step_time_s:9.3f} {100 * e:+6.1f}"
        if show_rows:
            print(line)
    for eng in ENGINES:
        a = errs[eng]
        print(
            f"{eng:<9} n={len(a)}  mean |err| {100 * statistics.mean(a):5.2f}%   max |err| {100 * max(a):5.2f}%"
            f"   ({res[eng + '_time_s']:.1f} s for the dev set)"
        )
    return errs


def speed() -> None:
    print(
        f"\n{'plan':<44} {'analytic s':>11} {'graph s':>9} {'diff':>6}  {'cold ms (a / g)':>16}  {'warm ms (a / g)':>16}"
    )
    for label, model, cl, gpus, batch, seq, c in SPEED:
        m, cluster, w = load_model(model), load_cluster(cl).with_gpus(gpus), Workload(global_batch=batch, seq_len=seq)
        step, cold, warm = {}, {}, {}
        for eng in ENGINES:
            best = float("inf")
            for _ in range(3):
                clear_caches()  # presets stay loaded; every cost cache starts empty
                t0 = time.perf_counter()
                e = evaluate(m, cluster, w, c, engine=eng)
                best = min(best, time.perf_counter() - t0)
            cold[eng], step[eng] = best, e.step_time_s
            t0 = time.perf_counter()
            for _ in range(20):
                evaluate(m, cluster, w, c, engine=eng)
            warm[eng] = (time.perf_counter() - t0) / 20
        print(
            f"{label:<44} {step['analytic']:11.3f} {step['graph']:9.3f} {100 * (step['graph'] / step['analytic'] - 1):+5.1f}%"
            f"  {cold['analytic'] * 1e3:7.1f} / {cold['graph'] * 1e3:6.1f}  {warm['analytic'] * 1e3:7.2f} / {warm['graph'] * 1e3:6.2f}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every dev-set row")
    args = ap.parse_args(argv)
    dev_set(args.rows)
    speed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
