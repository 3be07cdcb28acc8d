"""Activation CPU offload searched (issue 21, ``search/act_offload_choice.py``): what the search chooses, against the
best over every layer count.

    python -m benchmarks.act_offload_search [--cases NAME,...]

Per case: the search without activation offload (status, analytic step), the search as ``recommend`` runs it
(re-scored; the offload it chose, its analytic and op-graph step and search time, and the best plan with offload
its pinned search found), and the brute force: one search per stated layer count ``N = 1 .. L-1`` (``recommend
--activation-offload-layers N``), their best analytic step and its ``N``. A case whose answer without offload
fits shows what the search does not look for (a ``pp = 1`` answer that recomputes, which could trade its
recompute for offload): the brute force says whether an offload plan would have been faster there.
"""

from __future__ import annotations

import argparse
import sys
import time

from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve

#: name, model, cluster, GPUs, global batch, sequence, pins
CASES = [
    (
        "Llama-3.1-8B 16K / 8 H100, tp1 cp1 pp1 no recompute",
        "llama3.1-8b",
        "h100-sxm",
        8,
        64,
        16384,
        {"tp": 1, "cp": 1, "pp": 1, "recompute": "none"},
    ),
    (
        "Llama-3.1-8B 32K / 8 H100, tp1 cp1 pp1 no recompute",
        "llama3.1-8b",
        "h100-sxm",
        8,
        64,
        32768,
        {"tp": 1, "cp": 1, "pp": 1, "recompute": "none"},
    ),
    ("Llama-3.1-8B 16K / 8 H100, tp1 cp1 pp1", "llama3.1-8b", "h100-sxm", 8, 64, 16384, {"tp": 1, "cp": 1, "pp": 1}),
    ("Qwen3-30B-A3B / 64 H100 (search_speed.py)", "qwen3-30b-a3b", "h100-sxm", 64, 512, 4096, {}),
]


def _s(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def run(case) -> None:
    name, model, cluster, gpus, gb, seq, pins = case
    p = Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=gb, seq_len=seq),
        limits=Limits(fixed=pins),
    )
    without = solve(p, SolveOptions(act_offload=False, offload=False))
    t0 = time.perf_counter()
    r = solve(p, SolveOptions(rescore=True, offload=False))
    took = time.perf_counter() - t0
    info = r.stats.activation_offload
    best = r.best.config if r.plans else None
    print(f"{name}")
    print(
        f"  without offload   {without.status:10s} analytic {_s(without.objective_s)} s"
        + (f" (pp={without.best.config.pp} recompute={without.best.config.recompute})" if without.plans else "")
    )
    chosen = best.activation_offload_layers if best is not None else None
    print(
        f"  recommend         {r.status:10s} analytic {_s(r.objective_s)} s, op graph {_s(r.graph_objective_s)} s, "
        f"offload {chosen or 0} layers, search {took:.2f} s"
        + (f"; best with offload {_s(info['best_s'])} s ({info['status']})" if info else "; offload not looked for")
    )
    brute = []
    for n in range(1, p.model.layers):
        q = Problem(
            model=p.model,
            cluster=p.cluster,
            workload=p.workload,
            limits=p.limits,
            options=(("activation_offload_layers", n),),
        )
        x = solve(q, SolveOptions(act_offload=False, offload=False))
        if x.plans:
            brute.append((x.objective_s, n))
    if brute:
        t, n = min(brute)
        ref = r.objective_s if r.plans else float("inf")
        verdict = (
            "equal"
            if abs(t - ref) <= 1e-9 * t
            else "offload faster by %.1f%%" % (100 * (1 - t / ref))
            if t < ref
            else "the answer is faster"
        )
        print(
            f"  best over N=1..{p.model.layers - 1}  analytic {t:.3f} s at N={n} ({len(brute)} counts fit): {verdict}"
        )
    else:
        print(f"  best over N=1..{p.model.layers - 1}  no layer count fits")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    args = ap.parse_args(argv)
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    for case in CASES:
        if not wanted or any(w in case[0] for w in wanted):
            run(case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
