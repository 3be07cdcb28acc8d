"""CP-SAT's optimum equals the exhaustive optimum on random small instances (issue 13).

    python -m benchmarks.search_equality [--instances N] [--seed S] [--no-bounds-every K] [--verbose]

Each instance is a preset model (gpt-1.7b, llama3-8b (GQA), llama3.1-8b (GQA), mixtral-8x7b
(MoE), gpt-oss-20b (MoE, GQA)) on a preset cluster (a100-80g, h100-sxm, or sg2262-like with
1, 2, 4 or 8 CDMA engines, so the DMA-engine assignment is a decision and the engine count
binds in some) with 8-64 GPUs, a random batch and sequence length, random candidate-list
sizes, and random pins taken from one random plan of the space, added one at a time until
the space holds at most a random target of choices (so the exhaustive baseline finishes in
about a second). The DMA assignment is never pinned: it is always searched.

Per instance:

* ``solve`` (pins -> tables -> presolve -> CP-SAT; ``small_space=-1`` so the CP-SAT path
  runs even on small spaces) and ``solve_exhaustive`` (every choice and split), on the same
  integer tables; the objectives are compared exactly in ticks and the statuses must agree
  (both infeasible counts as equal). Every ``--no-bounds-every``-th instance is solved a
  second time with ``presolve_bounds=False`` (CP-SAT holds every choice that fits).
* on sg2262-like: whether the optimum needs a non-default DMA assignment (the best plan
  restricted to default assignments is strictly worse), and whether the engine count binds
  (the exhaustive optimum with ``n`` engines differs from the one with ``2n``); a case where
  fewer engines are faster is counted as a monotonicity violation.

A mismatch prints a reproducer line (``--instance-seed``). Seeded and deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace

from benchmarks import results_io
from costmodel.physics.comm import dma
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.sweep.grid import apply_whatifs
from search.candidates import bucket_values, mb_values, recompute_values, shapes, sp_chunk_pairs, vp_values, zero_values
from search.exhaustive import all_choices, best_splits, count_space, max_stage_layers, solve_exhaustive
from search.problem import Limits, Problem
from search.result import INFEASIBLE, OPTIMAL
from search.solve import SolveOptions, solve
from search.tables import Tables

MODELS = ("gpt-1.7b", "llama3-8b", "llama3.1-8b", "mixtral-8x7b", "gpt-oss-20b")
CLUSTERS = ("a100-80g", "h100-sxm", "sg2262-like", "sg2262-like")  # sg2262-like drawn half the time
ENGINES = (1, 2, 4, 8)
GPUS = (8, 16, 32, 64)
#: pinned variables, in the order a random permutation draws from (the DMA assignment never)
PIN_VARS = ("tp", "pp", "cp", "ep", "mb", "vp", "sp", "chunks", "zero", "recompute", "bucket_mb")


@dataclass(frozen=True)
class Instance:
    seed: int
    problem: Problem
    cluster: str  # preset name, with the engine count on sg2262-like: "sg2262-like/4"
    engines: int | None
    choices: int
    plans: int

    def reproducer(self) -> str:
        return f"python -m benchmarks.search_equality --instance-seed {self.seed}"

    def describe(self) -> str:
        p = self.problem
        return (
            f"seed={self.seed} {p.model.name} {self.cluster} gpus={p.gpus} batch={p.workload.global_batch} "
            f"seq={p.workload.seq_len} fixed={p.limits.fixed} mb_max={p.limits.mb_max} vp_max={p.limits.vp_max} "
            f"chunks={p.limits.chunk_options} buckets={p.limits.bucket_mb_options} "
            f"partial_recompute={p.limits.partial_recompute} space={self.choices} choices / {self.plans} plans"
        )


def _cluster(name: str, engines: int | None, gpus: int):
    c = load_cluster(name)
    if engines is not None:
        c = apply_whatifs(c, dma_engines=engines)
    return c.with_gpus(gpus)


def _random_choice(p: Problem, rng: random.Random) -> dict | None:
    """The pinnable values of one random plan of ``p``'s space (each variable drawn from the
    candidate lists of the values drawn before it), or None if the space is empty."""
    ss = shapes(p)
    if not ss:
        return None
    s = rng.choice(ss)
    mbs = mb_values(p, s.dp)
    if not mbs:
        return None
    mb = rng.choice(mbs)
    vps = vp_values(p, s.pp, p.workload.global_batch // (s.dp * mb))
    if not vps:
        return None
    vp = rng.choice(vps)
    lists = [
        sp_chunk_pairs(p, s),
        zero_values(p, s),
        bucket_values(p, s),
        recompute_values(p, max_stage_layers(p, s.pp, vp) if s.pp > 1 else p.model.layers),
    ]
    if not all(lists):
        return None
    (sp, chunks), zero, bucket, (kind, k) = (rng.choice(v) for v in lists)
    out = dict(
        tp=s.tp,
        pp=s.pp,
        cp=s.cp,
        ep=s.ep,
        mb=mb,
        vp=vp,
        sp=sp,
        chunks=chunks,
        zero=zero,
        bucket_mb=bucket,
        recompute=kind,
    )
    if kind == "full":
        out["recompute_layers"] = 0 if k is None else k
    return out


def make_instance(seed: int, max_choices: tuple[int, int] = (40, 900)) -> Instance:
    """Instance ``seed``: a random problem pinned until its space holds at most a random number
    of choices in ``max_choices`` (the exhaustive baseline takes ~1 ms a choice)."""
    rng = random.Random(seed)
    model = load_model(rng.choice(MODELS))
    name = rng.choice(CLUSTERS)
    engines = rng.choice(ENGINES) if name == "sg2262-like" else None
    gpus = rng.choice(GPUS)
    seq = rng.choice((1024, 2048, 4096))
    batch = max(1, gpus * rng.choice((1, 2, 4)) // rng.choice((1, 2)))
    limits = Limits(
        mb_max=rng.choice((1, 2, 4)),
        vp_max=rng.choice((1, 2, 4)),
        chunk_options=rng.choice(((1,), (1, 2), (1, 2, 4))),
        bucket_mb_options=rng.choice(((25,), (0, 25), (25, 160))),
        partial_recompute=rng.random() < 0.5,
    )
    p = Problem(
        model=model,
        cluster=_cluster(name, engines, gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=limits,
    )
    target = rng.randint(*max_choices)
    plan = _random_choice(p, rng)
    order = list(PIN_VARS)
    rng.shuffle(order)
    choices, plans = count_space(p)
    fixed: dict = {}
    while plan is not None and choices > target and order:
        var = order.pop()
        fixed[var] = plan[var]
        if var == "recompute" and "recompute_layers" in plan:
            fixed["recompute_layers"] = plan["recompute_layers"]
        p = replace(p, limits=replace(limits, fixed=dict(fixed)))
        choices, plans = count_space(p)
    label = name if engines is None else f"{name}/{engines}"
    return Instance(seed, p, label, engines, choices, plans)


def _default_only_best(p: Problem, tables: Tables) -> int | None:
    """The best objective (ticks) over the plans whose DMA assignment is the default one."""
    best = None
    for c in all_choices(p):
        if c.dma is not None and c.dma != dma.default_assignment(p.cluster, c.config(), p.model):
            continue
        for sc in best_splits(tables.stage_table(c), p.model.layers, 1):
            best = sc.objective if best is None else min(best, sc.objective)
    return best


def check(inst: Instance, no_bounds: bool = False, engines_probe: bool = True) -> dict:
    """Solve ``inst`` both ways; the row of the report (``ok``: objectives and statuses agree)."""
    p = inst.problem
    t0 = time.perf_counter()
    tables = Tables(p)
    e = solve_exhaustive(p, tables=tables)
    t1 = time.perf_counter()
    # the exhaustive baseline enumerates plans without CPU offload: the offload searches are off here (they are
    # checked against one search per option value: tests/test_offload_search.py, benchmarks/act_offload_search.py)
    opts = SolveOptions(workers=1, explain=False, small_space=-1, time_limit_s=60, offload=False, act_offload=False)
    r = solve(p, opts, tables=Tables(p))  # cold tables: the search builds its own
    t2 = time.perf_counter()
    row = dict(
        seed=inst.seed,
        cluster=inst.cluster,
        model=p.model.name,
        choices=inst.choices,
        plans=inst.plans,
        ex_s=t1 - t0,
        cp_s=t2 - t1,
        status=r.status,
        res_s=tables.res_s,
        ex_ticks=None if e.best is None else e.best.objective,
        cp_ticks=None if r.objective_s is None else round(r.objective_s / tables.res_s),
        kept=r.stats.kept,
        model_choices=r.stats.model_choices,
    )
    if not e.complete:
        row["ok"], row["why"] = False, "exhaustive incomplete"
        return row
    if e.best is None:
        row["ok"] = r.status == INFEASIBLE and not r.plans
        row["why"] = "" if row["ok"] else f"exhaustive infeasible, search {r.status} {row['cp_ticks']}"
    else:
        row["ok"] = r.status == OPTIMAL and row["cp_ticks"] == e.best.objective
        row["why"] = (
            "" if row["ok"] else (f"exhaustive {e.best.objective} ticks, search {r.status} {row['cp_ticks']} ticks")
        )
    if no_bounds:
        rb = solve(p, replace(opts, presolve_bounds=False), tables=Tables(p))
        nb = None if rb.objective_s is None else round(rb.objective_s / tables.res_s)
        row["nb_checked"] = True
        row["nb_ok"] = (
            (rb.status == INFEASIBLE) if e.best is None else (rb.status == OPTIMAL and nb == e.best.objective)
        )
        if not row["nb_ok"]:
            row["ok"] = False
            row["why"] += f" | presolve_bounds=False: {rb.status} {nb} ticks"
        row["cp_s"] += time.perf_counter() - t2
    if inst.engines is not None and e.best is not None:
        default = _default_only_best(p, tables)
        row["non_default"] = default is None or default > e.best.objective
        row["assignment"] = str(e.best.choice.dma)
        if engines_probe:  # the same problem with twice the engines
            p2 = replace(p, cluster=_cluster("sg2262-like", 2 * inst.engines, p.gpus))
            e2 = solve_exhaustive(p2)
            if e2.best is not None:
                obj1, obj2 = e.best.objective * tables.res_s, e2.best.objective * Tables(p2).res_s
                row["binds"] = not math.isclose(obj1, obj2, rel_tol=0, abs_tol=0.5 * tables.res_s)
                row["monotone"] = obj1 >= obj2 - 0.5 * tables.res_s
                row["gain_2n"] = obj1 / obj2 - 1
    return row


def run(seeds, no_bounds_every: int = 4, verbose: bool = False, out=sys.stdout) -> list[dict]:
    rows = []
    start = time.perf_counter()
    for i, seed in enumerate(seeds):
        inst = make_instance(seed)
        row = check(inst, no_bounds=no_bounds_every > 0 and i % no_bounds_every == 0)
        row["describe"], row["reproducer"] = inst.describe(), inst.reproducer()
        rows.append(row)
        flag = "ok" if row["ok"] else "MISMATCH"
        print(
            f"[{i + 1}/{len(seeds)}] {time.perf_counter() - start:6.1f}s seed={seed} {inst.cluster} {row['model']} "
            f"{inst.choices} choices: {flag} ({row['ex_ticks']} vs {row['cp_ticks']} ticks)",
            file=sys.stderr,
        )
        if verbose:
            print("  ", inst.describe(), file=sys.stderr)
    return rows


def report(rows: list[dict], total_s: float, out=sys.stdout) -> int:
    n = len(rows)
    bad = [r for r in rows if not r["ok"]]
    print(
        f"instances: {n}   equal: {n - len(bad)}   mismatches: {len(bad)}   total {total_s:.1f} s "
        f"(load average at the end {os.getloadavg()[0]:.1f})",
        file=out,
    )
    print(
        f"{'cluster':<16}{'n':>5}{'feasible':>10}{'infeasible':>12}{'choices med':>13}{'max':>7}"
        f"{'ex s':>8}{'search s':>10}{'non-default':>13}{'binds':>7}",
        file=out,
    )
    by = Counter(r["cluster"] for r in rows)
    for cl in sorted(by):
        rs = [r for r in rows if r["cluster"] == cl]
        ch = sorted(r["choices"] for r in rs)
        feas = sum(r["ex_ticks"] is not None for r in rs)
        nd = sum(bool(r.get("non_default")) for r in rs)
        bi = sum(bool(r.get("binds")) for r in rs)
        sg = cl.startswith("sg2262")
        print(
            f"{cl:<16}{len(rs):>5}{feas:>10}{len(rs) - feas:>12}{ch[len(ch) // 2]:>13}{ch[-1]:>7}"
            f"{sum(r['ex_s'] for r in rs):>8.1f}{sum(r['cp_s'] for r in rs):>10.1f}"
            f"{(str(nd) if sg else '-'):>13}{(str(bi) if sg else '-'):>7}",
            file=out,
        )
    sg = [r for r in rows if "non_default" in r]
    probed = [r for r in rows if "binds" in r]
    print(
        f"sg2262-like feasible: {len(sg)}; optimum needs a non-default DMA assignment: "
        f"{sum(r['non_default'] for r in sg)}; engine count binds (optimum with n != with 2n engines): "
        f"{sum(r['binds'] for r in probed)} of {len(probed)}",
        file=out,
    )
    gains = sorted(r["gain_2n"] for r in probed if r["binds"])
    if gains:
        print(
            f"  step time with n engines over 2n where it binds: median +{100 * gains[len(gains) // 2]:.2f}%, "
            f"max +{100 * gains[-1]:.2f}%",
            file=out,
        )
    nonmono = [r for r in probed if not r["monotone"]]
    print(f"  fewer engines faster (monotonicity violations): {len(nonmono)}", file=out)
    for r in nonmono:
        print(f"    {r['reproducer']}  ({r['describe']})", file=out)
    nb = [r for r in rows if r.get("nb_checked")]
    print(f"also solved with presolve_bounds=False: {len(nb)}, equal: {sum(r['nb_ok'] for r in nb)}", file=out)
    st = Counter(r["status"] for r in rows)
    print("search statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(st.items())), file=out)
    kept = sorted(r["model_choices"] or 0 for r in rows)
    print(
        f"choices in the CP-SAT model: median {kept[n // 2]}, max {kept[-1]}; "
        f"space: median {sorted(r['choices'] for r in rows)[n // 2]} choices, "
        f"max {max(r['plans'] for r in rows)} plans",
        file=out,
    )
    for r in bad:
        print(f"MISMATCH {r['why']}\n  {r['describe']}\n  reproduce: {r['reproducer']}", file=out)
    return 1 if bad else 0


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="instance i uses seed SEED*100003 + i")
    ap.add_argument("--instance-seed", type=int, default=None, help="run only this instance (a reproducer)")
    ap.add_argument(
        "--no-bounds-every",
        type=int,
        default=4,
        help="also solve every K-th instance with presolve_bounds=False (0: never)",
    )
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    seeds = [a.instance_seed] if a.instance_seed is not None else [a.seed * 100003 + i for i in range(a.instances)]
    start = time.perf_counter()
    rows = run(seeds, a.no_bounds_every, a.verbose or a.instance_seed is not None)
    code = report(rows, time.perf_counter() - start)
    record(
        argv,
        rows,
        record_results and a.instance_seed is None and (a.instances, a.seed, a.no_bounds_every) == (200, 0, 4),
    )
    return code


def record(argv, rows: list[dict], enabled: bool) -> None:
    """``benchmarks/results/search_equality.json``; ``answers digest`` hashes every instance's
    (reproducer, equal, exhaustive ticks, CP-SAT ticks), so two runs with the same answers share it."""
    nb = [r for r in rows if r.get("nb_checked")]
    probed = [r for r in rows if "binds" in r]
    digest = hashlib.sha256(
        "\n".join(f"{r['reproducer']} {r['ok']} {r['ex_ticks']} {r['cp_ticks']}" for r in rows).encode()
    ).hexdigest()[:12]
    table = []
    for cl in sorted({r["cluster"] for r in rows}):
        rs = [r for r in rows if r["cluster"] == cl]
        table.append(
            {
                "cluster": cl,
                "instances": len(rs),
                "equal": sum(r["ok"] for r in rs),
                "feasible": sum(r["ex_ticks"] is not None for r in rs),
                "exhaustive s": round(sum(r["ex_s"] for r in rs), 1),
                "search s": round(sum(r["cp_s"] for r in rs), 1),
            }
        )
    bad = sum(not r["ok"] for r in rows)
    results_io.record(
        "search_equality",
        argv,
        enabled=enabled,
        table=table,
        title="CP-SAT's optimum against the exhaustive optimum on random small instances",
        headline={
            "instances": len(rows),
            "equal": len(rows) - bad,
            "mismatches": bad,
            "also without presolve bounds": len(nb),
            "equal without bounds": sum(r["nb_ok"] for r in nb),
            "engine count binds": sum(r["binds"] for r in probed),
            "monotonicity violations": sum(not r["monotone"] for r in probed),
            "answers digest": digest,
        },
        targets=[{"name": "every instance equal", "met": bad == 0}],
        inputs=["costmodel", "search", "planner/sweep/grid.py", "benchmarks/search_equality.py"],
    )


if __name__ == "__main__":
    sys.exit(main(record_results=True))
