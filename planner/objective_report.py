"""What ``planner recommend`` prints of a run's time, cost and energy (issue 41): the lines under the plans table,
the ``objectives`` object of ``--json`` and the ``--pareto`` table. The numbers are
:class:`costmodel.objectives.PlanObjectives`'; every input is printed with the default it came from."""

from __future__ import annotations

from costmodel.objectives.checkpoint import DEFAULT_NODE_STORAGE_GBPS, DEFAULT_STORAGE_GBPS
from costmodel.objectives.energy import DEFAULT_PUE
from costmodel.objectives.failures import DEFAULT_RESTART_S, LLAMA3_FAILURES_PER_GPU_HOUR
from costmodel.spec.units import GB, GiB

from .objective_rank import Ranking, pareto, second_axis
from .report import table


def _days(s: float) -> str:
    return f"{s / 86400:.2f} d"


def _tokens(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def _usd(x: float) -> str:
    return f"${x / 1e6:,.2f}M" if x >= 1e6 else f"${x:,.0f}"


def inputs_line(o) -> str:
    """The inputs the numbers used, each marked default (with its source) or stated."""
    i = o.time_to_train.inputs

    def mark(value, default, source):
        return f"(default: {source})" if value == default else "(stated)"

    parts = [
        f"{_tokens(o.time_to_train.train_tokens)} tokens",
        f"failure rate {i['failure_rate_per_gpu_hour']:.3g}/GPU-h "
        + mark(i["failure_rate_per_gpu_hour"], LLAMA3_FAILURES_PER_GPU_HOUR, "Llama 3 report"),
        f"storage {i['storage_gbps']:g} GB/s " + mark(i["storage_gbps"], DEFAULT_STORAGE_GBPS, "Llama 3 Tectonic"),
        f"node storage {i['node_storage_gbps']:g} GB/s (default: DGX SuperPOD)"
        if i["node_storage_gbps"] == DEFAULT_NODE_STORAGE_GBPS
        else f"node storage {i['node_storage_gbps']:g} GB/s",
        f"checkpoints {i['async_ckpt']}" + (" (default)" if i["async_ckpt"] == "sync" else " (stated)"),
        "interval: Daly's optimum (default)" if i["interval_s"] is None else f"interval {i['interval_s']:g} s (stated)",
        f"restart {i['restart_s']:g} s + checkpoint read "
        + mark(i["restart_s"], DEFAULT_RESTART_S, "assumed, 5 min relaunch + 1 min NCCL init"),
        f"PUE {o.energy.pue:g} " + mark(o.energy.pue, DEFAULT_PUE, "Uptime Institute 2024 average"),
    ]
    if o.cost is not None:
        parts.append(f"${o.cost.gpu_hour_usd:g}/GPU-h ({o.cost.price_source})")
    return "inputs: " + "; ".join(parts)


def objective_lines(ranking: Ranking, best_config) -> list[str]:
    """The best plan's days, goodput, checkpoint interval, lost time by cause, $ and energy, and the inputs."""
    o = ranking.of(best_config)
    if o is None:
        return []
    t, lost, ck = o.time_to_train, o.time_to_train.lost, o.time_to_train.checkpoint
    lines = [
        "",
        f"objective: {ranking.objective}: {ranking.headline()}",
        f"time to train {_tokens(t.train_tokens)} tokens: {t.days:.1f} days, goodput {100 * t.goodput:.1f}% "
        f"({t.steps:,} steps of {t.step_time_s:.3f} s on {t.gpus:,} GPUs; MTBF of the job "
        f"{t.mtbf_s / 3600:.2f} h, {lost.failures:,.1f} failures expected)",
        f"checkpoint: every {t.interval_s:,.0f} s ({t.interval_steps:,} steps, {t.interval_rule}); "
        f"{max(ck.bytes_per_rank) / GB:.2f} GB on the busiest rank, {ck.total_bytes / GB:,.0f} GB in all, "
        f"{ck.mode}: training stops {ck.blocking_s:.1f} s per checkpoint; restart {t.restart_s:.0f} s "
        f"(read {ck.load_s:.1f} s)",
        f"lost time: checkpoint writes {_days(lost.checkpoint_s)}, lost work {_days(lost.lost_work_s)}, "
        f"restarts {_days(lost.restart_s)} (compute {_days(lost.compute_s)})",
    ]
    if o.cost is not None:
        lines.append(
            f"cost: {_usd(o.cost.usd)} per run, ${o.cost.usd_per_million_tokens:.3f} per million tokens "
            f"({o.cost.gpu_hours:,.0f} GPU-hours at ${o.cost.gpu_hour_usd:g})"
        )
    e = o.energy
    lines.append(
        f"energy: {e.kwh:,.0f} kWh, {e.j_per_token:.2f} J/token (board {e.board_w:.0f} W of {e.tdp_w:.0f} W at "
        f"activity {e.activity:.2f}, PUE {e.pue:g})"
    )
    lines.append(inputs_line(o))
    lines += [f"note: {n}" for n in o.notes]
    return lines


def objective_view(result, args) -> tuple:
    """(the result's :class:`Ranking` or None, the ``--pareto`` front over every candidate or None)."""
    ranking = getattr(result, "ranking", None)
    if ranking is None or not getattr(args, "pareto", False):
        return ranking, None
    return ranking, pareto(result.plans, ranking)


def objectives_json(ranking: Ranking, plans: list, front: list | None = None) -> dict:
    """``--json``'s ``objectives``: the objective, the candidates ranked, the best plan's objectives, each shown
    plan's value and, with ``--pareto``, the front."""
    best = ranking.of(plans[0].config)
    extra = {} if front is None else {"pareto": pareto_json(front, ranking)}
    return {
        **extra,
        "objective": ranking.objective,
        "train_tokens": ranking.train_tokens,
        "inputs": dict(ranking.inputs),
        "candidates": ranking.candidates,
        "ranking": ranking.headline(),
        "changed_from_fastest": ranking.changed(),
        "best": None if best is None else best.to_dict(),
        "values": [None if (o := ranking.of(p.config)) is None else o.value(ranking.objective) for p in plans],
    }


def _plan_name(c) -> str:
    return f"tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} ep={c.ep} vp={c.vp} mb={c.mb} zero={c.zero} {c.recompute}"


def pareto_lines(front: list, ranking: Ranking) -> list[str]:
    """The ``--pareto`` table: one row per non-dominated candidate."""
    axis = second_axis(ranking, [o for _, o, _ in front])
    money = "cost" if axis == "cost" else "days"
    rows = [
        [
            _plan_name(p.config),
            f"{o.step_time_s:.3f}",
            _usd(o.cost.usd) if axis == "cost" else f"{o.time_to_train.days:.1f}",
            f"{o.energy.kwh:,.0f}",
            f"{head / GiB:.1f}",
        ]
        for p, o, head in front
    ]
    return [
        "",
        f"pareto: {len(front)} of the {ranking.candidates} candidates are beaten by no other on step time, "
        f"{money}, energy and memory headroom (only these candidates are compared)",
        table(["plan", "step s", money, "kWh", "headroom GiB"], rows),
    ]


def pareto_json(front: list, ranking: Ranking) -> list[dict]:
    return [
        {
            "config": p.config.to_dict(),
            "step_time_s": o.step_time_s,
            "days": o.time_to_train.days,
            "usd": None if o.cost is None else o.cost.usd,
            "kwh": o.energy.kwh,
            "headroom_bytes": head,
        }
        for p, o, head in front
    ]
