"""Configurations per second of ``Planner.evaluate_many`` (the analytical fast path), one core.

    python -m benchmarks.api_speed

For each problem, a fresh :class:`planner.Planner` (empty caches) scores

* **space**: every valid plan of ``Planner.space(fits=False)`` (degrees x micro-batch x
  interleave x SP x ZeRO x recompute x chunks x bucket), the set an autotuner prunes;
* **distinct**: plans that differ in their degrees, micro-batch, SP and recompute only (the
  ``benchmarks/eval_speed.py`` set: every one misses the caches);

and, for comparison, the full ``costmodel.api.evaluate`` on a sample of the space, with
the analytical engine (the numbers the fast path reproduces) and the op-graph scheduler.
Times are the best of three runs, each on a fresh Planner; the space enumeration is not timed.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time

from benchmarks import results_io
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from planner import Planner

PROBLEMS = [  # model, cluster, GPUs, global batch, sequence
    ("gpt3-175b", "a100-80g", 1024, 1536, 2048),
    ("llama3-70b", "h100-sxm", 64, 128, 4096),
    ("mixtral-8x7b", "h100-sxm", 64, 256, 4096),
    ("deepseek-v3", "h800", 256, 512, 4096),
    ("gpt-1t", "a100-80g", 3072, 3072, 2048),
]
TARGET = 10_000


def distinct(gpus: int) -> list[ParallelConfig]:
    out = []
    for tp, pp, mb, sp, rec in itertools.product(
        [1, 2, 4, 8], [1, 2, 4, 8, 16, 32, 64], [1, 2], [False, True], ["none", "selective", "full"]
    ):
        if gpus % (tp * pp) == 0:
            out.append(ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), mb=mb, sp=sp and tp > 1, recompute=rec))
    return out


def rate(params: dict, configs: list, repeats: int = 3) -> tuple[float, int]:
    best = float("inf")
    for _ in range(repeats):
        p = Planner(**params)
        p.evaluate_many(configs[:1])  # resolve the specs outside the timing
        t0 = time.perf_counter()
        scores = p.evaluate_many(configs)
        best = min(best, time.perf_counter() - t0)
    return len(configs) / best, sum(s.status == "ok" for s in scores)


def main(argv=None, record_results: bool = False) -> int:
    print(f"{'problem':<34} {'set':<9} {'configs':>8} {'valid':>8} {'configs/s':>10}")
    rates = []
    for model, cluster, gpus, batch, seq in PROBLEMS:
        params = dict(model=model, cluster=cluster, gpus=gpus, global_batch=batch, seq=seq)
        name = f"{model} {gpus}x{cluster}"
        space = Planner(**params).space(fits=False)
        for label, configs in (("space", space), ("distinct", distinct(gpus))):
            r, valid = rate(params, configs)
            rates.append((label, r))
            print(f"{name:<34} {label:<9} {len(configs):>8} {valid:>8} {r:>10,.0f}")
        m, cl, w, _ = Planner(**params)._problem()
        for engine, n in (("analytic", 300), ("graph", 60)):
            sample = space[:: max(1, len(space) // n)]
            t0 = time.perf_counter()
            for c in sample:
                evaluate(m, cl, w, c, engine=engine)
            full = len(sample) / (time.perf_counter() - t0)
            print(
                f"{name:<34} {engine:<9} {len(sample):>8} {len(sample):>8} {full:>10,.0f}   "
                f"(costmodel.evaluate(engine={engine!r}), full Estimate, for comparison)"
            )
    head, targets = {}, []
    for label in ("space", "distinct"):
        rs = [r for lab, r in rates if lab == label]
        print(
            f"{label}: median {statistics.median(rs):,.0f} configs/s, min {min(rs):,.0f} "
            f"(target {TARGET:,}: {'met' if min(rs) >= TARGET else 'NOT met'} on every problem)"
        )
        head.update(
            {f"{label} median configs/s": round(statistics.median(rs)), f"{label} min configs/s": round(min(rs))}
        )
        targets.append({"name": f"{label}: >= {TARGET:,} configs/s on every problem", "met": min(rs) >= TARGET})
    results_io.record(
        "api_speed",
        argv,
        enabled=record_results,
        headline=head,
        targets=targets,
        title="configurations per second of Planner.evaluate_many (the analytical fast path), one core",
        inputs=["costmodel", "planner", "benchmarks/api_speed.py"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
