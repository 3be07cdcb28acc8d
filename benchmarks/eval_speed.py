"""Evaluations per second of the analytical cost model (one core).

    python benchmarks/eval_speed.py

Times ``costmodel.estimate.evaluate`` on GPT-3 175B / 1024 A100 and GPT 1T / 3072 A100 over a
batch of distinct configs (cold: caches cleared first) and repeated configs (warm).
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costmodel import analytic, compute  # noqa: E402
from costmodel.config import ParallelConfig  # noqa: E402
from costmodel.errors import PlannerError  # noqa: E402
from costmodel.estimate import evaluate  # noqa: E402
from costmodel.presets import load_cluster, load_model  # noqa: E402
from costmodel.specs import Workload  # noqa: E402

CASES = [("gpt3-175b", "a100-80g", 1024, 1536, 2048), ("gpt-1t", "a100-80g", 3072, 3072, 2048)]


def configs(gpus):
    for tp, pp, mb, sp, rec in itertools.product([2, 4, 8], [4, 8, 16, 32, 64], [1, 2], [False, True],
                                                 ["selective", "full"]):
        if gpus % (tp * pp) == 0:
            yield ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), mb=mb, sp=sp, recompute=rec)


def main() -> int:
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
            print(f"{name:<10} {gpus:>5} GPUs  {label}: {n} valid configs in {dt * 1e3:7.1f} ms "
                  f"-> {n / dt:8.0f} evaluations/s ({dt / max(n, 1) * 1e3:.2f} ms each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
