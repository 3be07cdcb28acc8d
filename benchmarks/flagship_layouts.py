"""The best pipeline layout found vs the best whole-chunk split, on the flagship plans' shapes.

    python -m benchmarks.flagship_layouts

For each Megatron-Bridge flagship shape (tp, pp, cp, ep, mb, ZeRO, recompute pinned; the issue's
list) and Llama-3.1-405B's production PP16, ``recommend``'s search runs twice with the interleave
``vp`` and the layout free: with every interleave it now considers (layouts: any layer count per
rank where ``vp`` does not divide the layers, :func:`search.candidates.stage_unit`), and restricted
to what it considered before layouts (``vp`` dividing the layers, every rank whole chunks of ``vp``
layers: the even-chunk splits). Both answers are re-scored by the op-graph engine (``evaluate``'s
default), the layout printed in Megatron-Core's form. DeepSeek-V3's MTP layer (its preset's
``mtp_layers``: 1) sits with the loss, so its layouts end in ``mL`` (:mod:`costmodel.physics.kernels.mtp`).
"""

from __future__ import annotations

import sys
import time

from costmodel.api import evaluate
from costmodel.spec.layout import of as layout_of
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve

CASES = [
    (
        "DeepSeek-V3 PP8 / 1024 H800",
        "deepseek-v3",
        "h800",
        1024,
        4096,
        4096,
        dict(tp=1, pp=8, ep=64, cp=1, mb=1, zero=1, recompute="full"),
    ),
    (
        "Qwen3-235B-A22B PP8 / 256 H100",
        "qwen3-235b-a22b",
        "h100-sxm",
        256,
        1024,
        4096,
        dict(tp=2, pp=8, ep=32, cp=1, mb=1, sp=True, zero=1),
    ),
    (
        "Llama-3.1-405B PP8 CP2 / 1024 H100",
        "llama3.1-405b",
        "h100-sxm",
        1024,
        2048,
        8192,
        dict(tp=8, pp=8, cp=2, mb=1, sp=True, zero=1, recompute="selective"),
    ),
    (
        "Llama-3.1-405B PP16 / 16384 H100",
        "llama3.1-405b",
        "h100-sxm",
        16384,
        2048,
        8192,
        dict(tp=8, pp=16, cp=1, mb=1, sp=True, zero=1),
    ),
]


def best(p: Problem):
    t0 = time.perf_counter()
    res = solve(p, SolveOptions(explain=False, time_limit_s=60))
    if res.best is None:
        return None, res.status, time.perf_counter() - t0
    c = res.best.config
    e = evaluate(p.model, p.cluster, p.workload, c)  # the op-graph engine
    return (c, e), res.status, time.perf_counter() - t0


def main() -> int:
    print(
        f"{'case':<36} {'space':<11} {'status':<8} {'search s':>8} {'vp':>3} {'step s':>8} {'MFU':>6} {'fits':>4}  layout"
    )
    for name, model, cluster, gpus, batch, seq, fixed in CASES:
        m = load_model(model)
        base = dict(
            model=m, cluster=load_cluster(cluster).with_gpus(gpus), workload=Workload(global_batch=batch, seq_len=seq)
        )
        divides = [v for v in range(1, 9) if m.layers % v == 0]
        rows = []
        for label, lim in (
            ("layouts", Limits(fixed=fixed)),
            ("whole-chunk", Limits(fixed=fixed, exclude={"vp": tuple(v for v in range(1, 9) if v not in divides)})),
        ):
            got, status, secs = best(Problem(**base, limits=lim))
            if got is None:
                print(f"{name:<36} {label:<11} {status:<8} {secs:8.1f}  (no plan)")
                continue
            c, e = got
            rows.append(e.step_time_s)
            print(
                f"{name:<36} {label:<11} {status:<8} {secs:8.1f} {c.vp:>3} {e.step_time_s:8.3f} {100 * e.mfu:5.1f}% "
                f"{'yes' if e.fits else 'NO':>4}  {layout_of(m, c)}"
            )
        if len(rows) == 2:
            print(f"{'':<36} layouts vs whole-chunk: {100 * (rows[0] / rows[1] - 1):+.1f}% step time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
