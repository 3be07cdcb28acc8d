"""The report's plots, each a matplotlib figure rendered to an inline SVG string (:func:`planner.html_report.deps.svg_of`):
the step-time breakdown with its band, memory per pipeline stage against HBM, the overlap timeline of one step (from
the op-graph trace's events, :func:`costmodel.engines.graph.trace.timeline`), where a run's wall time goes, and a
sweep's Pareto fronts."""

from __future__ import annotations

from dataclasses import replace

from costmodel.engines.graph.trace import COLORS, timeline
from costmodel.spec.errors import PlannerError
from costmodel.spec.units import GiB

from .deps import figure, rc_context, svg_of

#: colours of the step-time components (communication strategies take the trace's colours)
PART_COLORS = {
    "compute": "#4C72B0",
    "recompute": "#A1C9F4",
    "interference": "#8C8C8C",
    "bubble": "#D9D9D9",
    "optimizer": "#FFB000",
    "act_offload_exposed": "#2F4F4F",
}
MEMORY_PARTS = (
    ("weights", "#4C72B0"),
    ("grads", "#DD8452"),
    ("optimizer", "#55A868"),
    ("activations", "#C44E52"),
    ("buffers", "#8172B2"),
    ("reserved", "#BBBBBB"),
)
#: above this many bars, a panel's bars are drawn as one embedded bitmap inside the SVG (still one file, no
#: network): a step of a large model has tens of thousands of ops
RASTER_ABOVE = 2500


def part_color(key: str) -> str:
    name = key.removesuffix("_s")
    if name in PART_COLORS:
        return PART_COLORS[name]
    return COLORS.get(name.removesuffix("_exposed"), "#333333")


def breakdown_svg(est) -> str:
    """One horizontal bar: the step's components left to right (seconds), and under it the 80% band of the
    measured step time around the prediction."""
    parts = [(k, v) for k, v in est.breakdown.items() if v > 1e-9 * est.step_time_s]
    band = est.step_time_band_s
    with rc_context():
        rows = -(-(len(parts) + bool(band)) // 6)  # legend rows under the axes
        fig = figure(9.0, (1.9 if band else 1.4) + 0.22 * rows)
        ax = fig.add_subplot(1, 1, 1)
        left = 0.0
        for k, v in parts:
            ax.barh(
                1,
                v,
                left=left,
                height=0.6,
                color=part_color(k),
                label=k.removesuffix("_s"),
                edgecolor="white",
                linewidth=0.5,
            )
            left += v
        ticks, labels = [1], ["step"]
        if band:
            lo, hi = band
            ax.errorbar(
                [est.step_time_s],
                [0],
                xerr=[[est.step_time_s - lo], [hi - est.step_time_s]],
                fmt="o",
                color="#222222",
                capsize=4,
                label="80% band",
            )
            ticks, labels = [1, 0], ["step", "band"]
        ax.set_yticks(ticks, labels)
        ax.set_ylim(-0.6 if band else 0.5, 1.5)
        ax.set_xlim(0, max(left, band[1] if band else 0) * 1.02)
        ax.set_xlabel(f"seconds per step ({est.engine} engine)")
        fig.legend(loc="outside lower center", ncols=min(6, len(parts) + bool(band)), fontsize=8, frameon=False)
        return svg_of(fig, "breakdown")


def memory_svg(est, margin: float) -> str:
    """Stacked bars: each pipeline stage's memory per GPU (GiB) by what holds it, with the HBM and the
    memory-margin lines."""
    stages = est.memory
    xs = [m["stage"] for m in stages]
    with rc_context():
        fig = figure(9.0, 3.2)
        ax = fig.add_subplot(1, 1, 1)
        bottom = [0.0] * len(stages)
        for name, color in MEMORY_PARTS:
            vals = [m.get(f"{name}_bytes", 0.0) / GiB for m in stages]
            ax.bar(xs, vals, bottom=bottom, color=color, label=name, width=0.8)
            bottom = [b + v for b, v in zip(bottom, vals)]
        other = [m["total_bytes"] / GiB - b for m, b in zip(stages, bottom)]
        if any(o > 1e-3 for o in other):
            ax.bar(xs, [max(0.0, o) for o in other], bottom=bottom, color="#EEEEEE", label="other", width=0.8)
        hbm = est.hbm_bytes / GiB
        ax.axhline(hbm, color="#C00000", linewidth=1.2, label=f"HBM {hbm:.0f} GiB")
        ax.axhline(
            hbm * (1 - margin),
            color="#C00000",
            linewidth=1,
            linestyle="--",
            label=f"HBM less the {100 * margin:g}% memory margin",
        )
        ax.set_xlabel("pipeline stage")
        ax.set_ylabel("GiB per GPU")
        if len(xs) <= 32:
            ax.set_xticks(xs)
        pad = max(0.0, (6 - len(xs)) / 2)  # a few stages keep bars of a readable width
        ax.set_xlim(min(xs) - 0.5 - pad, max(xs) + 0.5 + pad)
        ax.set_ylim(0, max(hbm, max(m["total_bytes"] for m in stages) / GiB) * 1.08)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
        return svg_of(fig, "memory")


def _lanes(events: list) -> list[str]:
    """Compute first, then the DMA engines' lanes by name."""
    return sorted({e["lane"] for e in events}, key=lambda x: (x != "compute", x))


def _draw(ax, events: list, row: dict, t0: float = 0.0) -> set:
    """Bars of ``events`` on ``ax`` (ms from ``t0``), one colour per category; the categories drawn."""
    groups: dict = {}
    for e in events:
        groups.setdefault((e["lane"], e["cat"]), []).append(((e["start_s"] - t0) * 1e3, max(e["dur_s"] * 1e3, 1e-6)))
    raster = len(events) > RASTER_ABOVE
    for (lane, cat), spans in groups.items():
        ax.broken_barh(
            spans, (row[lane] - 0.4, 0.8), facecolors=COLORS.get(cat, "#333333"), linewidth=0, rasterized=raster
        )
    ax.set_yticks(range(len(row)), list(row))
    ax.set_ylim(len(row) - 0.5, -0.5)
    return {c for _, c in groups}


def micro_batch_windows(events: list) -> list[tuple[str, float, float]]:
    """``(title, start_s, end_s)`` of the forward and the backward of micro-batch 0 (chunk 0) on the stage: the
    span of their events on every lane."""
    out = []
    for phase, title in (("fwd", "forward"), ("bwd", "backward")):
        mine = [
            e
            for e in events
            if e["args"].get("microbatch") == 0
            and e["args"].get("chunk", 0) == 0
            and e["args"].get("phase") == phase
            and not e["name"].startswith("send")
        ]
        if mine:
            out.append(
                (
                    f"{title} of micro-batch 0",
                    min(e["start_s"] for e in mine),
                    max(e["start_s"] + e["dur_s"] for e in mine),
                )
            )
    return out


def _detailed(model, cluster, workload, config, stage: int, events: list) -> tuple[list, int | None]:
    """Events with each op's kernels and transfers: ``events`` when they have them, else (a step too large to
    detail, :data:`costmodel.engines.graph.trace.MAX_EVENTS`) the same stage's step at ``pp`` micro-batches, whose
    micro-batches run the same ops; and that micro-batch count (None: ``events`` as given)."""
    if any(e["cat"] != "op" for e in events if e["lane"] == "compute"):
        return events, None
    m = config.pp
    try:
        small = replace(workload, global_batch=config.mb * config.dp * m)
        return timeline(model, cluster, small, config, stage)["events"], m
    except (PlannerError, ValueError):  # not a valid batch for this plan: the ops stay whole
        return events, None


def timeline_svg(model, cluster, workload, config, stage: int | None = None) -> tuple[str, dict]:
    """The overlap timeline of one step of one pipeline stage (default: the slowest): the whole step on top, the
    forward and backward of one micro-batch below, one row per resource (compute, each DMA engine's lanes); and
    ``{"stage", "step_s", "events", "lanes", "detail_from"}`` for the caption (``detail_from``: the micro-batch count
    of the smaller step the micro-batch view was scheduled from, when the whole step is too large to detail)."""
    tl = timeline(model, cluster, workload, config, stage)
    events = tl["events"]
    detail, detail_from = _detailed(model, cluster, workload, config, tl["stage"], events)
    lanes = _lanes(events + detail)
    row = {name: i for i, name in enumerate(lanes)}
    windows = micro_batch_windows(detail)
    height = 0.9 + 0.32 * len(lanes)
    with rc_context():
        fig = figure(11.0, height * (2 if windows else 1) + 0.6)
        grid = fig.add_gridspec(2 if windows else 1, max(1, len(windows)))
        ax = fig.add_subplot(grid[0, :])
        cats = _draw(ax, events, row)
        ax.set_xlim(0, tl["step_s"] * 1e3)
        ax.set_xlabel("ms")
        ax.set_title(f"one step of pipeline stage {tl['stage']} ({tl['step_s'] * 1e3:,.1f} ms)", loc="left")
        for i, (title, a, b) in enumerate(windows):
            sub = fig.add_subplot(grid[1, i])
            inside = [e for e in detail if e["start_s"] < b and e["start_s"] + e["dur_s"] > a]
            cats |= _draw(sub, inside, row, t0=a)
            sub.set_xlim(0, (b - a) * 1e3)
            sub.set_xlabel("ms from its start" + (f" at {a * 1e3:,.1f} ms" if detail_from is None else ""))
            sub.set_title(f"{title} ({(b - a) * 1e3:,.2f} ms)", loc="left")
            if i:
                sub.set_yticklabels([])
        from matplotlib.patches import Patch

        fig.legend(
            handles=[Patch(color=COLORS.get(c, "#333333"), label=c) for c in sorted(cats)],
            loc="outside right upper",
            fontsize=8,
            frameon=False,
        )
        svg = svg_of(fig, "timeline")
    return svg, {
        "stage": tl["stage"],
        "step_s": tl["step_s"],
        "events": len(events),
        "lanes": lanes,
        "detail_from": detail_from,
    }


def lost_time_svg(lost) -> str:
    """One horizontal bar: a run's wall time (days) as failure-free compute, checkpoint writes, work redone after
    failures and restarts (:class:`costmodel.objectives.failures.LostTime`)."""
    parts = (
        ("compute", lost.compute_s, "#4C72B0"),
        ("checkpoint writes", lost.checkpoint_s, "#FFB000"),
        ("lost work", lost.lost_work_s, "#C44E52"),
        ("restarts", lost.restart_s, "#8172B2"),
    )
    with rc_context():
        fig = figure(9.0, 1.4)
        ax = fig.add_subplot(1, 1, 1)
        left = 0.0
        for name, s, color in parts:
            if s > 0:
                ax.barh(0, s / 86400, left=left, height=0.6, color=color, label=f"{name} {s / 86400:,.2f} d")
                left += s / 86400
        ax.set_yticks([])
        ax.set_xlim(0, left * 1.01)
        ax.set_xlabel("days of wall time")
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
        return svg_of(fig, "lost-time")


MARKERS = "osD^v<>ph*"


def pareto_svg(groups: list) -> str:
    """A sweep's trade-offs, one colour per problem (model, batch, sequence) and one marker per cluster: step time
    against GPUs, and throughput against the price of a million tokens; each problem's Pareto front joined by a
    line, the plans off it as open markers. ``groups``: ``(label, points)``, each point ``{"gpus", "step_time_s",
    "tokens_per_s", "cost", "cluster", "front_gpus", "front_cost"}`` (:func:`planner.html_report.sweep_view.pareto_groups`)."""
    from matplotlib.lines import Line2D

    priced = any(p["cost"] is not None for _, pts in groups for p in pts)
    clusters = sorted({p["cluster"] for _, pts in groups for p in pts})
    marker = {c: MARKERS[i % len(MARKERS)] for i, c in enumerate(clusters)}
    with rc_context():
        fig = figure(11.0, 4.2)
        axes = fig.subplots(1, 2 if priced else 1, squeeze=False)[0]
        colors = [f"C{i % 10}" for i in range(len(groups))]
        for (_, pts), color in zip(groups, colors):
            _front(axes[0], pts, "gpus", "step_time_s", "front_gpus", color, marker)
            if priced:
                _front(
                    axes[1],
                    [p for p in pts if p["cost"] is not None],
                    "cost",
                    "tokens_per_s",
                    "front_cost",
                    color,
                    marker,
                )
        axes[0].set_xscale("log", base=2)
        axes[0].set_yscale("log")
        axes[0].set_xlabel("GPUs")
        axes[0].set_ylabel("step time (s)")
        axes[0].set_title("step time against GPUs (front: no plan with as few GPUs is faster)", loc="left")
        if priced:
            axes[1].set_xlabel("USD per million tokens trained")
            axes[1].set_ylabel("tokens/s")
            axes[1].set_yscale("log")
            axes[1].set_title("throughput against price (front: none as cheap is faster)", loc="left")
        handles = [Line2D([], [], color=c, marker="o", label=label) for (label, _), c in zip(groups, colors)]
        handles += [Line2D([], [], color="#555555", marker=marker[c], linestyle="none", label=c) for c in clusters]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(5, len(handles)), fontsize=8, frameon=False)
        return svg_of(fig, "pareto")


def _front(ax, pts, x, y, flag, color, marker) -> None:
    """The front as a line through its points, every point with its cluster's marker (open: off the front)."""
    on = sorted((p for p in pts if p[flag]), key=lambda p: p[x])
    if on:
        ax.plot([p[x] for p in on], [p[y] for p in on], "-", color=color, linewidth=1.5)
    for p in pts:
        ax.plot(
            [p[x]],
            [p[y]],
            marker[p["cluster"]],
            color=color,
            markersize=6,
            markerfacecolor=color if p[flag] else "white",
        )
