"""Evaluations per second of the analytical cost model (one core).

    python -m benchmarks.eval_speed

Times ``costmodel.api.evaluate`` on GPT-3 175B / 1024 A100 and GPT 1T / 3072 A100 over a
batch of distinct configs (cold: caches cleared first) and repeated configs (warm).
"""

from __future__ import annotations

import itertools
import sys
import time

from benchmarks import results_io
from costmodel.engines import analytic
from costmodel.physics.kernels import compute
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import PlannerError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

CASES = [("gpt3-175b", "a100-80g", 1024, 1536, 2048), ("gpt-1t", "a100-80g", 3072, 3072, 2048)]


def configs(gpus):
    for tp, pp, mb, sp, rec in itertools.product(
        [2, 4, 8], [4, 8, 16, 32, 64], [1, 2], [False, True], ["selective", "full"]
    ):
        if gpus % (tp * pp) == 0:
            yield ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), mb=mb, sp=sp, recompute=rec)


def main(argv=None, record_results: bool = False) -> int:
    rows = []
    for name, cl, gpus, batch, seq in CASES:
        m, c = load_model(name), load_cluster(cl).with_gpus(gpus)
        w = Workload(global_batch=batch, seq_len=seq)
        cfgs = list(configs(gpus))
        analytic.layer_timing.cache_clear()
        analytic._layer_base.cache_clear()  # the DP-independent part, memoised apart
        compute._layer_ops.cache_clear()
        for label in ("cold", "warm"):
            t0, n = time.perf_counter(), 0
            for cfg in cfgs:
                try:
                    evaluate(m, c, w, cfg)
                    n += 1
                except PlannerError:
                    pass
            dt = time.perf_counter() - t0
            print(
                f"{name:<10} {gpus:>5} GPUs  {label}: {n} valid configs in {dt * 1e3:7.1f} ms "
                f"-> {n / dt:8.0f} evaluations/s ({dt / max(n, 1) * 1e3:.2f} ms each)"
            )
            rows.append(
                {
                    "model": name,
                    "gpus": gpus,
                    "caches": label,
                    "configs": n,
                    "evaluations/s": round(n / dt),
                    "ms each": round(dt / max(n, 1) * 1e3, 2),
                }
            )
    results_io.record(
        "eval_speed",
        argv,
        enabled=record_results,
        title="evaluations per second of the analytical cost model, one core",
        headline={f"{r['model']} {r['caches']} evaluations/s": r["evaluations/s"] for r in rows},
        table=rows,
        inputs=["costmodel", "benchmarks/eval_speed.py"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
