"""Search time against the size of the space, dense and MoE, 64 to 16,384 GPUs (issue 13).

    python -m benchmarks.search_scaling [--time-limit SECONDS] [--cases SUBSTRING,...] [--workers N]

Per case (default limits, as ``planner recommend``): the size of the space
(:func:`search.exhaustive.count_space`: choices and plans, every stage split counted), the size
of the factor tables the costs are built from (``layer``: distinct per-layer timing keys
computed, ``Tables._layer``; ``affine``: per-stage affine tables, ``Tables._affine``; ``stage``:
stage tables built, one per choice the search looked at closely, ``Tables._stage``; with an
engine-bound DMA class the relaxed tables the bounds use are counted too), presolve's counts
from ``SolveResult.stats`` (groups ``(shape, mb, vp)``, choices pruned by dominance / memory /
bound, probed, left to CP-SAT), the status, the search time (``solve``, cold caches:
tables, presolve, CP-SAT, no op-graph re-score unless ``--rescore``) and the objective.

At the end, log-log slopes (numpy ``polyfit``) of search time against choices, plans and the
table sizes over the cases: a slope near 1 against choices means time grows with the product
of the choices; near 0 against choices and near 1 against the tables, with the tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from search.exhaustive import count_space
from search.problem import Problem
from search.solve import SolveOptions, solve
from search.tables import Tables

#: (model preset, cluster preset, GPUs, global batch in sequences, sequence length); batches
#: as published where there is a source (GPT-3 1536 x 2K on 1024 A100, Narayanan et al. 2021;
#: Llama-3.1-405B 16M tokens = 2048 x 8K, Llama 3 report; DeepSeek-V3 15360 x 4K on 2048 H800),
#: elsewhere ~0.5-4M tokens growing with the GPU count.
CASES = [
    ("gpt3-175b", "a100-80g", 64, 64, 2048),
    ("gpt3-175b", "a100-80g", 256, 512, 2048),
    ("gpt3-175b", "a100-80g", 1024, 1536, 2048),
    ("gpt3-175b", "a100-80g", 4096, 3072, 2048),
    ("gpt3-175b", "a100-80g", 16384, 8192, 2048),
    ("llama3-70b", "h100-sxm", 64, 128, 8192),
    ("llama3-70b", "h100-sxm", 256, 256, 8192),
    ("llama3-70b", "h100-sxm", 1024, 512, 8192),
    ("llama3-70b", "h100-sxm", 4096, 1024, 8192),
    ("llama3-70b", "h100-sxm", 16384, 2048, 8192),
    ("llama3.1-405b", "h100-sxm", 1024, 512, 8192),
    ("llama3.1-405b", "h100-sxm", 4096, 1024, 8192),
    ("llama3.1-405b", "h100-sxm", 16384, 2048, 8192),
    ("mixtral-8x7b", "h100-sxm", 64, 256, 4096),
    ("mixtral-8x7b", "h100-sxm", 256, 512, 4096),
    ("mixtral-8x7b", "h100-sxm", 1024, 1024, 4096),
    ("mixtral-8x7b", "h100-sxm", 4096, 2048, 4096),
    ("qwen3-30b-a3b", "h100-sxm", 64, 512, 4096),
    ("qwen3-30b-a3b", "h100-sxm", 256, 1024, 4096),
    ("qwen3-30b-a3b", "h100-sxm", 1024, 2048, 4096),
    ("deepseek-v3", "h800", 256, 1920, 4096),
    ("deepseek-v3", "h800", 1024, 7680, 4096),
    ("deepseek-v3", "h800", 2048, 15360, 4096),
    ("deepseek-v3", "h800", 16384, 15360, 4096),
]


def name(case) -> str:
    model, cluster, gpus, batch, seq = case
    return f"{model}/{gpus} {cluster}"


def table_sizes(tables: Tables) -> dict:
    """Entries of the factor tables computed (the relaxed tables of the bounds included)."""
    out = {"layer": len(tables._layer), "affine": len(tables._affine), "stage": len(tables._stage)}
    relaxed = tables._relaxed  # Tables.relaxed(): None when the tables are their own, unset before it is asked
    if isinstance(relaxed, Tables) and relaxed is not tables:
        for k, v in table_sizes(relaxed).items():
            out[k] += v
    return out


def run_case(case, time_limit_s: float, workers: int, rescore: bool) -> dict:
    model, cluster, gpus, batch, seq = case
    p = Problem(
        model=load_model(model),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
    )
    t0 = time.perf_counter()
    choices, plans = count_space(p)
    count_s = time.perf_counter() - t0
    tables = Tables(p)
    t0 = time.perf_counter()
    r = solve(p, SolveOptions(time_limit_s=time_limit_s, workers=workers, seed=0, rescore=rescore), tables=tables)
    solve_s = time.perf_counter() - t0
    st = r.stats
    return dict(
        case=name(case),
        moe=p.model.is_moe,
        choices=choices,
        plans=plans,
        count_s=count_s,
        **table_sizes(tables),
        groups=st.groups or 0,
        dominated=st.dominated or 0,
        memory=(st.memory or 0) + (st.groups_memory or 0),
        bound=(st.bound or 0) + (st.groups_bound or 0),
        probed=st.probed or 0,
        kept=st.model_choices if st.model_choices is not None else st.kept or 0,
        presolve_s=st.presolve_s or 0.0,
        cpsat_s=r.solver_time_s or 0.0,
        status=r.status,
        time_s=solve_s,
        objective_s=r.objective_s,
        gap=r.gap,
        timed_out=st.timed_out,
        plan=r.best.config if r.best else None,
    )


def slope(x, y) -> float:
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(x, y, 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per search (default 10)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    ap.add_argument("--cases", help="comma-separated substrings of case names ('qwen', '/1024', 'h800')")
    ap.add_argument("--rescore", action="store_true", help="re-score the plans near the optimum with the op graph")
    a = ap.parse_args(argv)
    cases = [c for c in CASES if not a.cases or any(s.lower() in name(c).lower() for s in a.cases.split(","))]
    if not cases:
        ap.error(f"no case matches {a.cases!r}")
    hdr = (
        f"{'case':<30}{'choices':>12}{'plans':>16}{'layer':>7}{'affine':>7}{'stage':>7}{'groups':>7}"
        f"{'domin.':>8}{'memory':>8}{'bound':>9}{'probed':>7}{'kept':>6}{'status':>10}{'presolve':>9}"
        f"{'cp-sat':>7}{'time s':>8}{'objective s':>12}{'gap':>7}  plan"
    )
    print(hdr, flush=True)
    rows = []
    start = time.perf_counter()
    for i, case in enumerate(cases):
        print(
            f"[{i + 1}/{len(cases)}] {time.perf_counter() - start:6.1f}s {name(case)} ...", file=sys.stderr, flush=True
        )
        r = run_case(case, a.time_limit, a.workers, a.rescore)
        rows.append(r)
        c = r["plan"]
        plan = f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp} ep{c.ep} vp{c.vp} mb{c.mb} z{c.zero} {c.recompute}" if c else "-"
        obj = "-" if r["objective_s"] is None else f"{r['objective_s']:.4f}"
        status = r["status"] + ("*" if r["timed_out"] else "")
        gap = "-" if r["gap"] is None else f"{100 * r['gap']:.1f}%"
        print(
            f"{r['case']:<30}{r['choices']:>12,}{r['plans']:>16,}{r['layer']:>7}{r['affine']:>7}{r['stage']:>7}"
            f"{r['groups']:>7}{r['dominated']:>8}{r['memory']:>8}{r['bound']:>9}{r['probed']:>7}{r['kept']:>6}"
            f"{status:>10}{r['presolve_s']:>9.2f}{r['cpsat_s']:>7.2f}{r['time_s']:>8.2f}{obj:>12}{gap:>7}  {plan}",
            flush=True,
        )
    print()
    print(
        "layer: per-layer timing keys computed (Tables._layer); affine: per-stage affine tables; stage: stage "
        "tables built (choices scored closely); relaxed tables of the bounds included. domin./memory/bound: "
        "choices (and groups) presolve pruned; kept: choices in the CP-SAT model; * presolve timed out; "
        f"time: whole solve, --time-limit {a.time_limit:g} s, {a.workers} workers, total "
        f"{time.perf_counter() - start:.1f} s, load average at the end {os.getloadavg()[0]:.1f}"
    )
    optimal = [r for r in rows if r["status"] == "OPTIMAL"]
    for title, sub in (
        ("all cases (those stopped by the time limit censor the fit)", rows),
        ("the OPTIMAL cases only (search ran to its proof)", optimal),
    ):
        if len(sub) < 3:
            continue
        t = [r["time_s"] for r in sub]
        print(f"log-log slope of search time over {title}, {len(sub)} cases (1 = proportional):")
        for label, key in (
            ("choices", "choices"),
            ("plans", "plans"),
            ("per-layer table (layer)", "layer"),
            ("stage tables built (stage)", "stage"),
            ("all tables (layer+affine+stage)", None),
        ):
            xs = [r["layer"] + r["affine"] + r["stage"] if key is None else r[key] for r in sub]
            print(f"  vs {label:<34} {slope(xs, t):+.2f}   (x from {min(xs):,} to {max(xs):,})")
        for kind, part in (("dense", [r for r in sub if not r["moe"]]), ("MoE", [r for r in sub if r["moe"]])):
            if len(part) >= 3:
                ts = [r["time_s"] for r in part]
                print(
                    f"  {kind:<5}: vs choices {slope([r['choices'] for r in part], ts):+.2f}, vs layer table "
                    f"{slope([r['layer'] for r in part], ts):+.2f}, vs stage tables "
                    f"{slope([r['stage'] for r in part], ts):+.2f}"
                )
    not_optimal = [r["case"] for r in rows if r["status"] != "OPTIMAL"]
    print(
        f"OPTIMAL {len(rows) - len(not_optimal)} of {len(rows)}"
        + (f"; not: {', '.join(not_optimal)}" if not_optimal else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
