"""Aggregated or disaggregated serving: the best xPyD split against the targets, compared with the
aggregated best (:func:`search.infer.solve_infer`), both by goodput (requests/s meeting the targets).

Pool plans are the serving search's own candidates (:func:`search.infer.shapes`, restricted to what
the engine launches) on an instance of ``g`` GPUs, ``g`` a divisor of the GPU count below it, ``pp = 1``
(a pipelined prefill or decode instance is not enumerated: a gap). A split is ``x`` prefill instances
of plan P and ``y`` decode instances of plan D with ``x * P.gpus + y * D.gpus`` = the GPU count; each is
scored by :func:`costmodel.serving.disagg.disagg_estimate` and the highest goodput kept (pairs whose
capacity bound cannot beat the best so far are skipped).

Aggregated goodput: the requests/s of the aggregated table's rows (best plans and Pareto front)
whose p90 TTFT and TPOT meet the targets, p90 from the engine replay's percentiles
(``serving["percentiles_ms"]``; the means where a row has none). The aggregated rows are closed-loop
replays at a concurrency, the disaggregated pools open-loop Poisson at a rate: the two goodputs
are the rates each model sustains under the same p90 targets, not one replay (assumption).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from costmodel.serving.disagg import DisaggEstimate, Pool, _draws, REQUESTS, disagg_estimate

from .infer import InferProblem, InferResult, shapes, solve_infer
from .options import SolveOptions


@dataclass
class DisaggResult:
    """The aggregated and the disaggregated best, their goodputs and the choice."""

    aggregated: InferResult
    aggregated_best: object | None  # the InferenceEstimate with the highest goodput
    aggregated_goodput_rps: float
    disaggregated: DisaggEstimate | None
    choice: str  # "aggregated" | "disaggregated" | "none"
    splits: int = 0  # pool splits scored
    time_s: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def disaggregated_goodput_rps(self) -> float:
        return self.disaggregated.goodput_rps if self.disaggregated else 0.0


def p90(e, name: str) -> tuple[float, bool]:
    """(the p90 of ``ttft``/``tpot`` in seconds, whether it is a replay percentile, not the mean)."""
    pct = (e.serving or {}).get("percentiles_ms", {}).get(f"{name}_ms", {})
    if "p90" in pct:
        return pct["p90"] / 1e3, True
    return getattr(e, f"{name}_s"), False


def meets_p90(p: InferProblem, e) -> bool:
    if not e.fits:
        return False
    for name, t in (("ttft", p.ttft_target_s), ("tpot", p.tpot_target_s)):
        if t is not None and p90(e, name)[0] > t:
            return False
    return True


def aggregated_goodput(p: InferProblem, r: InferResult):
    """(the row with the highest requests/s meeting the p90 targets, its requests/s)."""
    rows = [e for e in list(r.plans) + list(r.pareto) if meets_p90(p, e)]
    if not rows:
        return None, 0.0
    best = max(rows, key=lambda e: e.requests_per_s)
    return best, best.requests_per_s


def pool_plans(p: InferProblem) -> dict[int, list]:
    """{instance GPUs: the engine-launchable pp=1 shapes of that size}, sizes dividing the GPU count."""
    n, out = p.cluster.num_gpus, {}
    for g in range(1, n):
        if n % g:
            continue
        sub = replace(p, cluster=p.cluster.with_gpus(g))
        plans = [c for c in shapes(sub) if c.pp == 1]
        if plans:
            out[g] = plans
    return out


def best_split(p: InferProblem) -> tuple[DisaggEstimate | None, int]:
    """The split of the GPUs into a prefill and a decode pool with the highest goodput."""
    n = p.cluster.num_gpus
    plans = pool_plans(p)
    gaps = _draws(REQUESTS, 1.0)
    kw = dict(
        input_len=p.input_len,
        output_len=p.output_len,
        dtype=p.dtype,
        kv_dtype=p.kv_dtype,
        ttft_target_s=p.ttft_target_s,
        tpot_target_s=p.tpot_target_s,
        gaps=gaps,
        engine=p.engine or "vllm",  # each pool's KV as its engine sizes it; vLLM where none is named (the launches')
        speculation=p.speculation,  # the decode pool drafts and verifies
    )
    best, scored = None, 0
    for gp, pplans in plans.items():
        for gd, dplans in plans.items():
            for x in range(1, n // gp + 1):
                rest = n - x * gp
                if rest < gd or rest % gd:
                    continue
                y = rest // gd
                for cp in pplans:
                    for cd in dplans:
                        floor = best.goodput_rps if best else 0.0
                        pools = Pool("prefill", cp, x), Pool("decode", cd, y)
                        e = disagg_estimate(p.model, p.cluster, *pools, floor=floor, **kw)
                        scored += 1
                        if e is None:
                            continue
                        if best is None or (e.goodput_rps, -e.transfer_s) > (best.goodput_rps, -best.transfer_s):
                            best = e
    return best, scored


def solve_disagg(
    p: InferProblem, options: SolveOptions = SolveOptions(), aggregated: InferResult | None = None
) -> DisaggResult:
    """Compare the aggregated best with the best disaggregated split; pick the higher goodput."""
    t0 = time.perf_counter()
    r = aggregated if aggregated is not None else solve_infer(p, options)
    agg, agg_rps = aggregated_goodput(p, r)
    dis, scored = best_split(p) if p.cluster.num_gpus > 1 else (None, 0)
    dis_rps = dis.goodput_rps if dis else 0.0
    notes = []
    if agg is not None and not (p90(agg, "ttft")[1] and p90(agg, "tpot")[1]):
        notes.append("aggregated p90 not in the replay: its means are used")
    if max(agg_rps, dis_rps) <= 0:
        choice = "none"
    else:
        choice = "disaggregated" if dis_rps > agg_rps else "aggregated"
    return DisaggResult(r, agg, agg_rps, dis, choice, scored, time.perf_counter() - t0, notes)
