"""CP-SAT's pipeline layout against an exhaustive layout search, on random small instances.

    python -m benchmarks.layout_equality [--instances N] [--seed S]

Each instance is a small random model and cluster with every degree and option pinned (tp, pp,
dp, vp, mb, sp, ZeRO, recompute, bucket, chunks), so the search decides only the layout: the
layers of each pipeline rank (first, middle ones, last) and with them every virtual stage's
(:func:`costmodel.spec.layout.from_split`), under per-rank memory. CP-SAT decides it (``small_space=-1``:
no exhaustive shortcut; OPTIMAL required). The exhaustive search scores every
``(first, mid, ..., mid, last)`` split of the search's space (:func:`search.layout.rank_splits`,
counts multiples of :func:`search.candidates.stage_unit`: ``vp`` where it divides the layers, else
any) with ``evaluate``'s closed form and keeps the fastest that fits. Equal means the two step times agree to 1e-6
(the tables' integer resolution is 1e-6 of the step; tied layouts may differ). A last count scores
*every* per-rank composition (middle ranks unequal, any counts) for the instances small enough,
to say how often the search's space misses the optimum over all per-rank layouts.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import random
import sys
import time
from dataclasses import replace

from benchmarks import results_io
from costmodel.spec.plan import ParallelConfig
from costmodel.training.fastpath import Scorer
from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB, MB
from search.candidates import stage_unit
from search.layout import rank_splits
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve


def instance(rng: random.Random):
    """A random (problem, config) with only the layout free."""
    layers = rng.randint(5, 22)
    pp = rng.choice([2, 3, 4])
    vp = rng.choice([v for v in (1, 2, 3, 4) if pp * v <= layers])
    tp, dp, mb = rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([1, 2])
    heads = rng.choice([16, 32])
    hidden = heads * rng.choice([64, 128, 192])
    model = ModelSpec(
        name=f"rand{layers}",
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn_hidden=4 * hidden,
        vocab=rng.choice([32000, 128256]),
    )
    gb = dp * mb * pp * rng.choice([1, 2, 4])
    w = Workload(global_batch=gb, seq_len=rng.choice([2048, 4096, 8192]))
    recompute = rng.choice(["none", "selective", "full"])
    c = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        vp=vp,
        mb=mb,
        sp=tp > 1,
        zero=rng.choice([0, 1]),
        recompute=recompute,
        bucket_bytes=25 * MB,
        chunks=1,
    )
    # HBM cut so memory binds on some instances (the whole device on others)
    headroom = rng.choice([0.0, 0.0, rng.uniform(40, 79)]) * GiB
    cluster = load_cluster("a100-80g").with_gpus(c.gpus)
    fixed = dict(
        tp=tp, pp=pp, dp=dp, vp=vp, mb=mb, sp=c.sp, zero=c.zero, recompute=recompute, bucket_mb=25, chunks=1, cp=1, ep=1
    )
    p = Problem(
        model=model,
        cluster=cluster,
        workload=w,
        limits=Limits(fixed=fixed, headroom_bytes=headroom, partial_recompute=False),
    )
    return p, c


def exhaustive(p: Problem, c: ParallelConfig, splits) -> tuple[float, tuple | None]:
    sc = Scorer(p.model, p.cluster, p.workload)
    best = (float("inf"), None)
    for split in splits:
        s = sc.score(replace(c, layers_per_stage=split))
        if s.status == "ok" and s.peak_memory_bytes <= p.hbm_cap_bytes and s.step_time_s < best[0]:
            best = (s.step_time_s, split)
    return best


def all_compositions(layers: int, pp: int):
    for cut in itertools.combinations(range(1, layers), pp - 1):
        b = (0,) + cut + (layers,)
        yield tuple(b[i + 1] - b[i] for i in range(pp))


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=100)
    ap.add_argument("--seed", type=int, default=22)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    equal = optimal = infeasible_both = mismatched = beaten = checked_all = 0
    answers = []
    t_cp = t_ex = 0.0
    for i in range(args.instances):
        p, c = instance(rng)
        t0 = time.perf_counter()
        res = solve(p, SolveOptions(small_space=-1, explain=False, time_limit_s=60, offload=False, act_offload=False))
        t_cp += time.perf_counter() - t0
        t0 = time.perf_counter()
        unit = stage_unit(p, c.vp)  # the search's layer-count step (vp where it divides the layers)
        ex_s, ex_split = exhaustive(
            p, c, [s for s in rank_splits(p.model.layers, c.pp) if all(n % unit == 0 for n in s)]
        )
        t_ex += time.perf_counter() - t0
        if res.best is None:
            ok = ex_split is None
            infeasible_both += ok
        else:
            optimal += res.status == "OPTIMAL"
            cp_split = res.best.config.layers_per_stage or (p.model.layers // c.pp,) * c.pp
            cp_s = exhaustive(p, c, [tuple(cp_split)])[0]
            ok = ex_split is not None and abs(cp_s - ex_s) <= 1e-6 * ex_s
        equal += ok
        answers.append(f"{i} {ok} {None if res.best is None else res.best.config.layers_per_stage} {ex_split}")
        if not ok:
            mismatched += 1
            print(
                f"instance {i}: CP-SAT {res.status} {None if res.best is None else res.best.config.layers_per_stage} "
                f"vs exhaustive {ex_split} ({ex_s:.6g} s)"
            )
        if ex_split is not None and sum(1 for _ in all_compositions(p.model.layers, c.pp)) <= 5000:
            checked_all += 1
            all_s, all_split = exhaustive(p, c, all_compositions(p.model.layers, c.pp))
            if all_s < ex_s * (1 - 1e-9):
                beaten += 1
                print(
                    f"instance {i}: any per-rank counts: {all_split} {all_s:.6g} s < the search's "
                    f"{ex_split} {ex_s:.6g} s ({100 * (1 - all_s / ex_s):.2f}%; vp={c.vp}, layers={p.model.layers})"
                )
    print(
        f"instances: {args.instances} (seed {args.seed}); CP-SAT layout = exhaustive: {equal} "
        f"({infeasible_both} of them: no layout fits, both say so); OPTIMAL: {optimal}; mismatches: {mismatched}"
    )
    print(
        f"the search's layouts beaten by one with any per-rank counts (unequal middle ranks, counts not "
        f"multiples of a vp dividing the layers): {beaten} of {checked_all} checked"
    )
    print(f"time: CP-SAT search {t_cp:.1f} s, exhaustive {t_ex:.1f} s")
    results_io.record(
        "layout_equality",
        argv,
        enabled=record_results and (args.instances, args.seed) == (100, 22),
        title="CP-SAT's pipeline layout against an exhaustive layout search, random small instances",
        headline={
            "instances": args.instances,
            "equal": equal,
            "no layout fits (both)": infeasible_both,
            "OPTIMAL": optimal,
            "mismatches": mismatched,
            "checked": checked_all,
            "beaten": beaten,
            "answers digest": hashlib.sha256("\n".join(answers).encode()).hexdigest()[:12],
            "CP-SAT s": round(t_cp, 1),
            "exhaustive s": round(t_ex, 1),
        },
        targets=[{"name": "every instance equal", "met": mismatched == 0}],
        inputs=["costmodel", "search", "benchmarks/layout_equality.py"],
    )
    return 0 if mismatched == 0 else 1


if __name__ == "__main__":
    sys.exit(main(record_results=True))
