"""The recommended plan against the published plan, both predicted by the same cost model.

    python -m benchmarks.recommend_vs_published [--set dev|new|all] [--source KEY] [--time-limit SECONDS]

For every usable row of the development set (``benchmarks/data/published_dev.csv``, see
``benchmarks/published``; ``--set new`` or ``all`` for the new set) the published plan is
predicted as ``validate_published.py`` does (unstated settings filled by one rule per source; the
best value for unstated micro-batch and interleave; the op-graph engine), and ``planner recommend`` plans the same model,
cluster, GPU count, global batch, sequence length and precision, under the framework that ran it
(Megatron-Core, DeepSpeed or FSDP2) and its gradient dtype, with the attention kernel of the published
software (FlashAttention or not), the run's numerics (its plan options: optimizer dtype, FP8 parameter
gather, ...), an interleave cap that admits the published one, what the 2020-22 Megatron-LM rows' code lacked
(:func:`era_limits`), and everything else free. Rows whose software stack the search does
not choose (eager element-wise kernels, PyTorch's context_parallel, the DeepEP dispatcher, FSDP1's flat
buffers) are listed, not compared: the recommendation would run another stack. Expected: the recommended plan's predicted step time is no worse
than the published plan's (the published plan lies in the search space whenever its settings do).
Both step times are the op graph's, and the answer is ``planner recommend``'s (``search.options.ANSWER_OPTIONS``: the
near-optimal plans re-scored by the op graph, the memory margin kept, the memory tie). Until 2026-12-06 this benchmark
answered with the analytic objective alone (no re-score, no margin) and compared it with the published plan's
op-graph time: row 287 read 0.2% "slower" although recommend's answer was the published plan itself. A recommendation
slower than the published plan is named with the rule that made it so (:func:`answer_rule`: the published plan sits
within the memory model's measured margin of the HBM, or the answer is within the memory tie and leaner), or counted
as slower otherwise (the target). Printed and recorded too: how far the op graph times each answer above the
search's analytic objective (the closed form the CP-SAT tables encode), the optimism the re-score band of 2% is to
absorb. Measured step times are shown for reference; the comparison is prediction against prediction.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import replace
import sys
import time

from benchmarks import results_io
from benchmarks.published import MEGATRON_ERA, load_set, predict
from costmodel.api import evaluate
from costmodel.frameworks.stacks import era_pins
from costmodel.trust.memory_margin import at_risk
from search.problem import Limits, Problem
from search.options import ANSWER_OPTIONS
from search.solve import solve

TOLERANCE = 1e-6  # relative; both numbers come from the same evaluate (the op graph)


def answer_rule(res, pub, usable_bytes: float, ratio: float) -> str:
    """Which of ``planner recommend``'s stated rules makes its answer slower than the published plan, or ''
    (:mod:`search.rescore`): the published plan is within the memory model's measured margin of the HBM and the
    answer keeps it (``--prefer safe``, issue 42), or the answer is within the memory tie of it and leaner."""
    rec = res.best.estimate
    if res.margin_kept and at_risk(pub.peak_memory_bytes, usable_bytes, res.memory_margin):
        return (
            f"the answer keeps the {100 * res.memory_margin:.1f}% memory margin the published plan does not: "
            f"{pub.peak_memory_bytes / 2**30:.1f} GiB predicted of {usable_bytes / 2**30:.0f} GiB usable"
        )
    if res.memory_tie and ratio <= 1 + res.memory_tie and rec.peak_memory_bytes < pub.peak_memory_bytes:
        return (
            f"within the {100 * res.memory_tie:.0f}% memory tie, {rec.peak_memory_bytes / 2**30:.1f} GiB against "
            f"{pub.peak_memory_bytes / 2**30:.1f}"
        )
    return ""


def plan_text(c) -> str:
    split = "" if c.layers_per_stage is None else f" L{c.layers_per_stage[0]}/{c.layers_per_stage[-1]}"
    return (
        f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp}{f' ep{c.ep}' if c.ep > 1 else ''} mb{c.mb} v{c.vp} sp{int(c.sp_on)} z{c.zero} "
        f"{c.recompute[:4]}{'' if c.recompute_layers is None else c.recompute_layers}{split}"
    )


def unsearched_stack(fixed: dict) -> str:
    """What of a row's software stack the search does not choose ('' if nothing)."""
    framework = fixed.get("framework", "megatron")
    out = [
        text
        for on, text in (
            (not fixed.get("fused_elementwise", True), "eager element-wise kernels"),
            (fixed.get("cp_impl", "ring") != "ring", "PyTorch context_parallel"),
            (fixed.get("ep_dispatcher", "alltoall") != "alltoall", f"the {fixed.get('ep_dispatcher')} dispatcher"),
            (framework == "fsdp2" and fixed.get("fsdp_copies") is False, "FSDP1-style flat buffers"),
        )
        if on
    ]
    return ", ".join(out)


#: the Megatron-LM era source that ran the 2022 code: sequence parallelism and selective recompute are its own
#: contribution (Korthikanti et al. 2022, arXiv 2205.05198), the rest of the era stack stands
ERA_WITH_SP = ("korthikanti2022",)


#: the Megatron-LM v1 source (9edfdae, Aug 2020): pipelines without interleaving (the interleaved schedule and
#: ``--num-layers-per-virtual-pipeline-stage`` came with v2.0 and Narayanan et al. 2021, arXiv 2104.04473)
ERA_WITHOUT_INTERLEAVE = ("megatron_readme_2020",)


def era_limits(source: str) -> dict:
    """``Limits`` keywords of what a row's framework version could not choose (``costmodel.frameworks.stacks``
    ``megatron-lm-2021``: no distributed optimizer, overlapped gradient reduction, TP overlap or context
    parallelism, even stages only, and before 2022 no sequence parallelism or selective recompute), as
    ``planner recommend --stack megatron-lm-2021`` pins them; ``{}`` for a row of a later stack. The published
    plan ran on that stack, so its recommendation must.

    >>> era_limits("narayanan2021")["fixed"], era_limits("narayanan2021")["exclude"]
    ({'zero': 0, 'sp': False, 'bucket_mb': 0.0, 'chunks': 1, 'cp': 1}, {'recompute': ('selective',)})
    >>> era_limits("korthikanti2022")
    {'fixed': {'zero': 0, 'bucket_mb': 0.0, 'chunks': 1, 'cp': 1}, 'exclude': {}, 'uneven_stages': False}
    >>> era_limits("megatron_readme_2020")["fixed"]["vp"], era_limits("nemo_2407")
    (1, {})
    """
    if source not in MEGATRON_ERA:
        return {}
    fixed = era_pins("megatron-lm-2021")
    exclude = fixed.pop("exclude", {})
    uneven = fixed.pop("uneven_stages", True)
    if source in ERA_WITH_SP:
        fixed.pop("sp")
        exclude = {}
    if source in ERA_WITHOUT_INTERLEAVE:
        fixed["vp"] = 1
    return {"fixed": fixed, "exclude": exclude, "uneven_stages": uneven}


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="dev", choices=("dev", "new", "all"), help="published rows (default dev)")
    ap.add_argument("--source", help="only rows of this source_key")
    ap.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT time limit per row (default 10)")
    args = ap.parse_args(argv)
    rows = [r for r in load_set(args.set) if not args.source or r.source == args.source]
    print(
        f"{'row':>4} {'model':<18} {'gpus':>5} {'meas s':>8} {'published plan':<40} {'pred s':>8} "
        f"{'recommended plan':<44} {'pred s':>8} {'rec/pub':>8} {'solve':>8}"
    )
    better = same = worse = by_rule = overflow = 0
    gaps = []  # (op graph / analytic objective - 1, row) of each answer: how optimistic the search was about it
    notes, answers = [], []
    for r in rows:
        if r.skip:
            continue
        pub, why = predict(r)
        if pub is None:
            notes.append(f"row {r.row_id}: published plan not predicted ({why})")
            continue
        stack = unsearched_stack(r.fixed)
        if stack:
            notes.append(f"row {r.row_id}: not compared, the published stack runs {stack}")
            continue
        flash = r.fixed.get("flash_attention", True)
        p = Problem(
            model=r.model,
            cluster=r.cluster,
            workload=r.workload,
            limits=Limits(flash_attention=flash, vp_max=max(Limits().vp_max, pub.config.vp), **era_limits(r.source)),
            framework=r.fixed.get("framework", "megatron"),
            grad_dtype=r.fixed.get("grad_dtype", "fp32"),
            options=r.plan_options(),
        )  # the run's numerics, as pinned_recommend keeps them
        t0 = time.perf_counter()
        res = solve(p, replace(ANSWER_OPTIONS, time_limit_s=args.time_limit))  # planner recommend's answer
        dt = time.perf_counter() - t0
        if not res.plans:
            notes.append(f"row {r.row_id}: no recommended plan ({res.explanation})")
            continue
        rec = res.best.estimate
        rec_s = res.best.graph_step_time_s  # the op graph's, as ``predict`` times the published plan
        if rec_s is None:  # not re-scored (a search cut short): schedule the answer itself
            rec_s = evaluate(r.model, r.cluster, r.workload, rec.config, engine="graph").step_time_s
        ratio = rec_s / pub.step_time_s
        gaps.append((rec_s / rec.step_time_s - 1, r.row_id))  # rec.step_time_s: the analytic evaluate (the tables')
        if not pub.fits:
            overflow += 1
            notes.append(
                f"row {r.row_id}: the published plan needs {pub.peak_memory_bytes / 2**30:.1f} GiB, over "
                f"{pub.hbm_bytes / 2**30:.0f} GiB HBM by the cost model: the recommendation must fit "
                f"(ratio {ratio:.3f})"
            )
        elif ratio < 1 - TOLERANCE:
            better += 1
        elif ratio <= 1 + TOLERANCE:
            same += 1
        else:
            rule = answer_rule(res, pub, p.hbm_cap_bytes, ratio)
            if rule:
                by_rule += 1
            else:
                worse += 1
            notes.append(
                f"row {r.row_id}: {100 * (ratio - 1):.2f}% slower than the published plan ("
                + (rule or f"outside the search space, or the solver stopped at its time limit: {res.status}")
                + ")"
            )
        answers.append(f"{r.row_id} {plan_text(rec.config)}")
        meas = f"{r.measured_s:.2f}" if r.measured_s else "-"
        print(
            f"{r.row_id:>4} {r.label[:18]:<18} {r.cluster.num_gpus:>5} {meas:>8} {plan_text(pub.config):<40} "
            f"{pub.step_time_s:>8.3f} {plan_text(rec.config):<44} {rec_s:>8.3f} {ratio:>8.3f} "
            f"{res.status[:3]} {dt:>4.1f}s",
            flush=True,
        )
    print()
    print(
        f"recommended vs published (predicted step time): {better} faster, {same} equal, {by_rule} slower by the "
        f"answer's own rules (memory margin, memory tie), {worse} slower otherwise; "
        f"{overflow} published plans over HBM by the cost model (not compared)"
    )
    off = sorted((g, row) for g, row in gaps if g > ANSWER_OPTIONS.band)
    print(
        f"answers the op graph times more than the {100 * ANSWER_OPTIONS.band:g}% band above the search's analytic "
        f"objective: {len(off)}"
        + (": " + ", ".join(f"row {row} +{100 * g:.1f}%" for g, row in off[::-1]) if off else "")
    )
    for n in notes:
        print("note:", n)
    results_io.record(
        "recommend_vs_published",
        argv,
        enabled=record_results and args.set == "all" and not args.source and args.time_limit == 10.0,
        title="the recommended plan against the published plan, both predicted by the cost model",
        headline={
            "recommended": len(answers),
            "faster": better,
            "equal": same,
            "slower by the answer's rules": by_rule,
            "slower": worse,
            "published plans over HBM": overflow,
            "plans digest": hashlib.sha256("\n".join(answers).encode()).hexdigest()[:12],
            "answers the op graph times > 2% above the objective": sum(g > ANSWER_OPTIONS.band for g, _ in gaps),
            "largest op graph / objective - 1 %": round(100 * max(gaps)[0], 1) if gaps else 0.0,
        },
        targets=[
            {
                "name": "no recommended plan slower than the published one but by the answer's memory rules",
                "met": worse == 0,
            }
        ],
        inputs=[
            "costmodel",
            "search",
            "benchmarks/recommend_vs_published.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )
    return 0 if worse == 0 else 1


if __name__ == "__main__":
    sys.exit(main(record_results=True))
