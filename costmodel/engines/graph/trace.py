"""The scheduled timeline of one step of one pipeline stage: Chrome trace JSON and a Gantt PNG.

One lane per resource: ``compute``, each DMA engine that carried layer communication
(``<pool>#<i>``; a pool is ``<class>/<streams>`` of the plan's DMA assignment, :mod:`costmodel.physics.comm.dma`),
and the engines' point-to-point and data-parallel work (``<pool>#p2p``, ``<pool>#dp``; ``<class>#dp<i>`` per engine when gradient buckets hold several engines at once,
so no two slices on one lane overlap). The Chrome trace-event format (``ph: "X"`` complete events, times in
microseconds; "Trace Event Format", Google, 2016) opens in Perfetto or ``chrome://tracing``.

>>> import json, tempfile, os
>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> path = os.path.join(tempfile.mkdtemp(), "t.json")
>>> write_chrome_trace(path, load_model("gpt-1.7b"), load_cluster("a100-80g"), Workload(global_batch=8, seq_len=1024),
...                    ParallelConfig(tp=2, pp=2, dp=2, mb=2))
>>> lanes = {e["args"]["name"] for e in json.load(open(path))["traceEvents"] if e["name"] == "thread_name"}
>>> sorted(lanes)
['compute', 'nccl-sm/dp#dp', 'nccl-sm/pp#p2p', 'nccl-sm/tp#0']
"""

from __future__ import annotations

import json

from costmodel.physics.kernels.compute import embedding_op
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import PlannerError
from costmodel.physics.memory.stage_contents import is_moe_layer
from costmodel.spec.stages import stage_layers
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.physics.comm import dma
from costmodel.engines.graph.builders import plan_dma
from costmodel.engines.graph.compose import graph_step, layer_schedule
from costmodel.engines.graph.nodes import COMPUTE

MAX_EVENTS = 200_000  # beyond this, pipeline ops are drawn whole, without their layers' detail
COLORS = {
    "gemm": "#4C72B0",
    "attention": "#8172B2",
    "elementwise": "#8C8C8C",
    "tp": "#C44E52",
    "sp": "#DD8452",
    "cp": "#937860",
    "ep": "#55A868",
    "pp": "#CCB974",
    "dp": "#64B5CD",
    "zero": "#DA8BC3",
    "op": "#4C72B0",
}


def _expand(events: list, sched, t0: float, label: str, args: dict) -> None:
    g = sched.extra["graph"]
    for n, s in sched.start.items():
        a = g.nodes[n]
        if a["kind"] == "sink":
            continue
        events.append(
            {
                "name": f"{label}.{n}",
                "cat": a["strategy"] or a["kind"],
                "lane": sched.lanes[n],
                "start_s": t0 + s,
                "dur_s": sched.end[n] - s,
                "args": dict(args, bytes=a["bytes"]),
            }
        )


def timeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    config: ParallelConfig,
    stage: int | None = None,
    max_events: int = MAX_EVENTS,
) -> dict:
    """Events of one step of ``stage`` (default: the slowest) as ``{"stage", "step_s", "events"}``;
    each event has ``name``, ``cat`` (strategy or op kind), ``lane``, ``start_s``, ``dur_s``, ``args``.

    An inference workload gives one decode step through the stage's layers.
    """
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    validate_config(model, cluster, workload, config)  # SpecError names the field, never a traceback
    if workload.mode == "infer":
        return _forward_timeline(model, cluster, workload, config, stage or 0)
    gs = graph_step(model, cluster, workload, config)
    s = max(gs.stages, key=lambda x: x.microbatch_s).stage if stage is None else stage
    if not 0 <= s < config.pp:
        raise PlannerError(f"stage={s}: must be between 0 and pp-1={config.pp - 1}")
    pipe, row = gs.pipeline, gs.chunks[s]
    e_op = embedding_op(model, cluster.device, workload, config)
    per_op = sum(len(sc.start) for cw in row for _, sc, _ in cw.fwd + cw.bwd if sc is not None)
    detail = per_op / max(1, 2 * config.vp) * pipe.end.shape[1] <= max_events
    pp_lane = (
        dma.pool_of(plan_dma(model, cluster, workload, config), "pp")
        or cluster.device.engines_for("inter" if config.tp * config.cp * config.dp >= cluster.domain else "intra").name
    ) + "#p2p"
    events: list = []
    for j in range(pipe.end.shape[1]):
        b, c, mb = bool(pipe.is_b[s, j]), int(pipe.chunk[s, j]), int(pipe.mb[s, j])
        t0, t1 = float(pipe.start[s, j]), float(pipe.end[s, j])
        label = f"{'B' if b else 'F'} c{c} mb{mb}"
        args = {"microbatch": mb, "chunk": c, "phase": "bwd" if b else "fwd"}
        if not detail:
            events.append({"name": label, "cat": "op", "lane": COMPUTE, "start_s": t0, "dur_s": t1 - t0, "args": args})
        else:
            t = t0
            for name, sc, _ in row[c].bwd if b else row[c].fwd:
                if sc is None:
                    secs = e_op.bwd_s if b else e_op.fwd_s
                    events.append(
                        {
                            "name": f"{label}.{name}",
                            "cat": "elementwise",
                            "lane": COMPUTE,
                            "start_s": t,
                            "dur_s": secs,
                            "args": args,
                        }
                    )
                    t += secs
                else:
                    _expand(events, sc, t, f"{label}.{name}", args)
                    t += sc.makespan_s
        sends = (s < pipe.p - 1 or c < pipe.v - 1) if not b else (s > 0 or c > 0)
        if pipe.p > 1 and sends:
            events.append(
                {
                    "name": f"send {'grad' if b else 'act'} c{c} mb{mb}",
                    "cat": "pp",
                    "lane": pp_lane,
                    "start_s": t1,
                    "dur_s": pipe.t_p2p_s,
                    "args": args,
                }
            )
    dps = gs.dp_schedules[s]
    if dps is not None:
        g = dps.extra["graph"]
        comp_end = max(dps.end[n] for n in g if g.nodes[n]["resource"] == COMPUTE)
        off = float(pipe.last_backward_end_s[s]) - comp_end
        comm = [n for n in g if g.nodes[n]["strategy"]]
        several = len({dps.lanes[n] for n in comm}) > 1  # buckets in flight on more than one engine
        for n in comm:
            a = g.nodes[n]
            lane = a["resource"] + "#dp" + (dps.lanes[n].rsplit("#", 1)[1] if several else "")
            events.append(
                {
                    "name": n,
                    "cat": "dp",
                    "lane": lane,
                    "start_s": off + dps.start[n],
                    "dur_s": dps.end[n] - dps.start[n],
                    "args": {"bytes": a["bytes"]},
                }
            )
    step = max((e["start_s"] + e["dur_s"] for e in events), default=0.0)
    return {"stage": s, "step_s": step, "events": events}


def _forward_timeline(model, cluster, w, c, stage) -> dict:
    """One forward through the stage's layers; for a serving workload, one decode step."""
    from costmodel.engines.graph.explain import serving_phases

    phase, w, c, decode = serving_phases(w, c)[-1]
    events, t = [], 0.0
    for layer in stage_layers(model.layers, c.pp, stage, c.layers_per_stage):
        sc = layer_schedule(model, cluster, w, c, is_moe_layer(model, layer), "fwd", decode=decode)
        _expand(events, sc, t, f"layer{layer}", {"phase": phase})
        t += sc.makespan_s
    return {"stage": stage, "step_s": t, "events": events}


def _lanes(events: list) -> list:
    """Lane names in display order: compute, then per engine class its layer lanes, p2p, dp."""

    def key(x):
        cls, _, tail = x.partition("#")
        kind = tail.rstrip("0123456789")  # "" for an engine's layer lane, "p2p", "dp"
        num = tail[len(kind) :]
        return (x != COMPUTE, cls, kind != "", kind, int(num) if num else -1)

    return sorted({e["lane"] for e in events}, key=key)


def write_chrome_trace(
    path, model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, stage: int | None = None
) -> None:
    """Write one step of one stage as Chrome trace-event JSON (one thread per resource lane)."""
    tl = timeline(model, cluster, workload, config, stage)
    lanes = _lanes(tl["events"])
    tid = {name: i for i, name in enumerate(lanes)}
    out = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": f"stage {tl['stage']}"}}]
    for name, i in tid.items():
        out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": name}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": i, "args": {"sort_index": i}})
    for e in tl["events"]:
        out.append(
            {
                "name": e["name"],
                "cat": e["cat"],
                "ph": "X",
                "pid": 0,
                "tid": tid[e["lane"]],
                "ts": e["start_s"] * 1e6,
                "dur": e["dur_s"] * 1e6,
                "args": e["args"],
            }
        )
    with open(path, "w") as f:
        json.dump(
            {
                "traceEvents": out,
                "displayTimeUnit": "ms",
                "otherData": {
                    "stage": tl["stage"],
                    "step_s": tl["step_s"],
                    "model": model.name,
                    "config": config.to_dict(),
                },
            },
            f,
        )


def write_gantt(
    path, model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, stage: int | None = None
) -> None:
    """Draw the same timeline as a PNG (one row per resource lane), with matplotlib; the
    format follows the suffix of ``path`` (``.png``, ``.svg``, ``.pdf``)."""
    gantt_figure(model, cluster, workload, config, stage).savefig(path, dpi=100)


def zoom_window(tl: dict) -> tuple[float, float, str] | None:
    """The time window of one micro-batch in the steady state of ``tl``'s stage: a forward pipeline op and the
    backward op that follows it on the compute lane, near the middle of the step (``(start_s, end_s, label)``),
    or None for a timeline with no backward (serving) or a single op."""
    ops: dict = {}  # (phase, chunk, microbatch) -> [start, end] of its compute work
    for e in tl["events"]:
        a = e["args"]
        if e["lane"] == COMPUTE and "microbatch" in a:
            key = (a["phase"], a["chunk"], a["microbatch"])
            lo, hi = ops.get(key, (e["start_s"], e["start_s"] + e["dur_s"]))
            ops[key] = (min(lo, e["start_s"]), max(hi, e["start_s"] + e["dur_s"]))
    seq = sorted(ops.items(), key=lambda kv: kv[1][0])
    pairs = [i for i in range(len(seq) - 1) if seq[i][0][0] == "fwd" and seq[i + 1][0][0] == "bwd"]
    if not pairs:
        return None
    i = pairs[len(pairs) // 2]
    (_, c, mb), (f0, _) = seq[i]
    (_, cb, mbb), (_, b1) = seq[i + 1]
    return f0, b1, f"forward c{c} mb{mb} then backward c{cb} mb{mbb}"


def gantt_figure(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, stage: int | None = None
):
    """The matplotlib ``Figure`` of :func:`write_gantt`; its legend sits right of the axes,
    outside them, so it covers no lane (the DP tail ends at the right edge). A training step gets a second
    panel, one micro-batch at full width (:func:`zoom_window`): over a step of many micro-batches each
    layer's collectives are sub-pixel (issue 42: 7,680 CP events of a 33 s step drawn as 3 ticks)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as exc:  # optional dependency
        raise PlannerError("gantt: needs matplotlib: pip install 'overlap-planner[plot]'") from exc
    tl = timeline(model, cluster, workload, config, stage)
    lanes = _lanes(tl["events"])
    row = {name: i for i, name in enumerate(lanes)}
    zoom = zoom_window(tl)
    height = 1.5 + 0.5 * len(lanes)
    fig = Figure(figsize=(14, height * (2 if zoom else 1)), layout="constrained")
    groups: dict = {}
    for e in tl["events"]:
        groups.setdefault((e["lane"], e["cat"]), []).append((e["start_s"] * 1e3, max(e["dur_s"] * 1e3, 1e-6)))
    panels = [(fig.add_subplot(2 if zoom else 1, 1, 1), None)]
    if zoom:  # a step of many micro-batches draws each layer's ops sub-pixel: one micro-batch at full width
        panels.append((fig.add_subplot(2, 1, 2), zoom))
    for ax, win in panels:
        for (lane, cat), spans in groups.items():
            if win is not None:
                lo, hi = win[0] * 1e3, win[1] * 1e3
                spans = [(x, w) for x, w in spans if x < hi and x + w > lo]
            ax.broken_barh(spans, (row[lane] - 0.4, 0.8), facecolors=COLORS.get(cat, "#333333"), linewidth=0)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels(lanes)
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)")
        if win is None:
            ax.set_title(f"{model.name}: one step of pipeline stage {tl['stage']} ({tl['step_s'] * 1e3:.1f} ms)")
        else:
            ax.set_xlim(win[0] * 1e3, win[1] * 1e3)
            ax.set_title(f"zoom: one micro-batch, {win[2]} ({(win[1] - win[0]) * 1e3:.1f} ms, shaded above)")
            panels[0][0].axvspan(win[0] * 1e3, win[1] * 1e3, color="0.8", zorder=0)
    cats = sorted({c for _, c in groups})
    panels[0][0].legend(
        handles=[Patch(color=COLORS.get(c, "#333333"), label=c) for c in cats],
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        borderaxespad=0.0,
        fontsize=8,
    )
    return fig
