"""Why communication is or is not hidden: the overlap table per strategy.

For each strategy the graph engine reports, over one step of the slowest pipeline stage:
``T_comm`` (link time of its transfers), the ``T_compute`` window (compute that does not depend
on those transfers and that they do not depend on: what they could hide behind), the achieved
overlap ``r``, the exposed seconds, the prerequisite that failed for the largest exposure
(source document section 1: data dependency, no free DMA engine, synchronous issue), the
critical condition ``T_comm <= T_compute`` (section 2) and the DMA engines its stream ran on
(``engines``: class and count of the plan's assignment, :mod:`costmodel.physics.comm.dma`).

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> rows = explain(load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64),
...                Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8, vp=3))
>>> [(r["strategy"], r["critical_condition"]) for r in rows]
[('tp', True), ('pp', True), ('dp', True)]
>>> print(format_explain(rows).splitlines()[0])
strategy   T_comm ms  T_compute ms      r  exposed ms  T_comm<=T_compute  engines    blocking prerequisite
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np

from costmodel.physics.mechanics import act_offload, fg_offload
from costmodel.spec.plan_checks import OFFLOAD_MODULES
from costmodel.physics.comm import dma
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.frameworks.stacks import tp_from_nccl_tables
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.compute import layer_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.compose.overlap import overlap_rate
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.engines.graph.builders import plan_dma
from costmodel.engines.graph.compose import WHY_PP_DATA, WHY_PP_SYNC, graph_step, layer_schedule
from costmodel.engines.graph.nodes import COMPUTE, TRAINING_STRATEGIES
from costmodel.engines.graph.scheduler import Schedule

MS = 1e-3
#: why activation offload copies are exposed: Transformer Engine's limit of sets on the GPU (costmodel.physics.mechanics.act_offload)
WHY_ACT_OFFLOAD = (
    "data dependency: at most {n} layers' activations stay on the GPU, so compute waits for the copies "
    "that free them and the backward for the reloads (Transformer Engine's offload schedule)"
)

#: why fine-grained offload copies are exposed: a layer's later group is reloaded when the earlier backward ends
#: and awaited at once (costmodel.physics.mechanics.fg_offload)
WHY_FG_OFFLOAD = (
    "data dependency: each MoE layer's {first} reload starts when its {second} backward ends and the {first} "
    "backward, next, waits for it (Megatron-Core's fine-grained offload prefetches one group ahead)"
)


def schedule_windows(s: Schedule) -> dict:
    """Per strategy: seconds of compute independent of at least one of its transfers (neither
    an ancestor nor a descendant in the graph), the compute those transfers could hide behind."""
    if "windows" in s.extra:
        return s.extra["windows"]
    g: nx.DiGraph = s.extra["graph"]
    compute = {n for n in g if g.nodes[n]["resource"] == COMPUTE}
    free: dict = {}
    for n in g:
        strat = g.nodes[n]["strategy"]
        if not strat:
            continue
        dep = nx.ancestors(g, n) | nx.descendants(g, n)
        free.setdefault(strat, set()).update(compute - dep)
    s.extra["windows"] = {k: sum(g.nodes[n]["duration_s"] for n in v) for k, v in free.items()}
    return s.extra["windows"]


def _row(strategy, t_comm, window, exposed, why) -> dict:
    r = overlap_rate(t_comm, exposed)
    return {
        "strategy": strategy,
        "t_comm_s": t_comm,
        "t_compute_s": window,
        "r": r,
        "exposed_s": exposed,
        "prerequisite": why.split(":")[0] if exposed > 1e-3 * t_comm and why else "",
        "reason": why if exposed > 1e-3 * t_comm else "",
        "critical_condition": t_comm <= window,
        "ratio": t_comm / window if window > 0 else float("inf"),
    }


def explain(model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig) -> list[dict]:
    """Overlap rows per strategy (SI units), slowest stage, one step; see the module docstring.

    An inference workload (``mode="infer"``) is explained as one forward pass of a micro-batch
    through the first stage's layers (no backward, no DP or pipeline communication).
    """
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    validate_config(model, cluster, workload, config)  # SpecError names the field, never a traceback
    if workload.mode == "infer":
        return _explain_forward(model, cluster, workload, config)
    gs = graph_step(model, cluster, workload, config)
    st = max(gs.stages, key=lambda x: x.microbatch_s)
    link, exp, win, why = {}, {}, {}, {}
    for cw in gs.chunks[st.stage]:
        for _, s, count in cw.fwd + cw.bwd:
            if s is None:
                continue
            w = schedule_windows(s)
            for strat, t in s.link_s.items():
                link[strat] = link.get(strat, 0.0) + gs.m * count * t
                exp[strat] = exp.get(strat, 0.0) + gs.m * count * s.exposed_s.get(strat, 0.0)
                win[strat] = win.get(strat, 0.0) + gs.m * count * w.get(strat, 0.0)
            for e in s.exposures:
                if e.exposed_s > why.get(e.strategy, (0.0, ""))[0]:
                    why[e.strategy] = (e.exposed_s, f"{e.prerequisite}: {e.detail}")
    rows = [_row(k, link[k], win[k], exp[k], why.get(k, (0, ""))[1]) for k in TRAINING_STRATEGIES if link.get(k, 0) > 0]
    pipe = gs.pipeline
    if pipe.p > 1:
        rows.append(
            _row(
                "pp",
                pipe.transfers(st.stage) * pipe.t_p2p_s,
                _pp_window(pipe, st.stage),
                pipe.pp_exposed_s,
                WHY_PP_SYNC if pipe.sync else WHY_PP_DATA,
            )
        )
    if gs.dp_link_s > 0:
        s = gs.dp_schedules[gs.dp_stage]
        slack = pipe.makespan_s - float(pipe.last_backward_end_s[gs.dp_stage])
        why_dp = s.reasons().get("dp", "")
        if slack > 0 and why_dp:
            why_dp += f" (the drain bubble of {slack / MS:.1f} ms is used first)"
        rows.append(_row("dp", gs.dp_link_s, s.compute_s + slack, gs.dp_exposed_s, why_dp))
    if gs.zero_link_s > 0:
        fill = float(pipe.first_forward_start_s[st.stage]) + float(pipe.end[st.stage, 0] - pipe.start[st.stage, 0])
        z = next((r for r in rows if r["strategy"] == "zero"), None)
        why_z = (
            "data dependency: the next step's first forward needs the gathered parameters"
            if config.bucket_bytes > 0
            else "synchronous issue: gathered after the optimizer step (bucket_mb=0)"
        )
        new = _row("zero", gs.zero_link_s, fill, gs.zero_exposed_s, why_z)
        if z is None:
            rows.append(new)
        else:  # ZeRO-3 per-layer gathers and ZeRO-1/2 end-of-step gathers together
            rows[rows.index(z)] = _row(
                "zero",
                z["t_comm_s"] + new["t_comm_s"],
                z["t_compute_s"] + fill,
                z["exposed_s"] + new["exposed_s"],
                z["reason"] or new["reason"],
            )
    if (
        config.activation_offload_layers
    ):  # pp = 1: the one stage's copies to the host and back (costmodel.physics.mechanics.act_offload)
        one = gs.stages[0]
        t_link, t_exposed = act_offload.step_exposed_s(
            model, cluster, workload, config, one.fwd_s, one.bwd_s + one.recompute_s, gs.m
        )
        rows.append(
            _row(
                "act_offload",
                t_link,
                gs.m * (one.fwd_s + one.bwd_s + one.recompute_s),
                t_exposed,
                WHY_ACT_OFFLOAD.format(n=model.layers - config.activation_offload_layers),
            )
        )
    if config.offload_modules:  # every stage's copies (costmodel.physics.mechanics.fg_offload)
        per = [(t.stage, t.fwd_s, t.bwd_s + t.recompute_s) for t in gs.stages]
        t_link, t_exposed = fg_offload.step_exposed_s(model, cluster, workload, config, per, gs.m)
        mods = [m for m in OFFLOAD_MODULES if m in config.offload_modules]  # forward order
        why = (
            WHY_FG_OFFLOAD.format(first=mods[0], second=mods[-1])
            if len(mods) > 1
            else "window too short: the reload outlasts the layer's backward outside its experts"
        )
        rows.append(_row("fg_offload", t_link, gs.m * max(f + b for _, f, b in per), t_exposed, why))
    order = {k: i for i, k in enumerate(TRAINING_STRATEGIES + ("act_offload", "fg_offload"))}
    rows.sort(key=lambda r: order[r["strategy"]])
    if config.tp > 1:
        rows[[r["strategy"] for r in rows].index("sp" if config.sp_on else "tp")]["feasibility"] = tp_feasibility(
            model, cluster, workload, config
        )
    a = plan_dma(model, cluster, workload, config)
    for (
        r
    ) in rows:  # the engines each stream ran on (costmodel.physics.comm.dma), e.g. "cdma*2" or "cdma*1 shared with dp"
        r["engines"] = "host link" if r["strategy"] in ("act_offload", "fg_offload") else dma.describe(a, r["strategy"])
    return rows


def _pp_window(pipe, stage: int) -> float:
    """Compute a stage's transfers can overlap: with asynchronous send/recv the op after each
    sending op (a receive overlaps the op before its consumer, the same ops); with blocking
    1F1B send/recv none (the stage waits)."""
    if pipe.sync:
        return 0.0
    dur = pipe.end[stage] - pipe.start[stage]
    sends = np.ones_like(dur, dtype=bool)  # every op of a middle stage sends; ends lose one direction
    if stage == pipe.p - 1:
        sends &= pipe.is_b[stage] | (pipe.chunk[stage] < pipe.v - 1)
    if stage == 0:
        sends &= ~pipe.is_b[stage] | (pipe.chunk[stage] > 0)
    return 2.0 * float(np.sum(dur[1:][sends[:-1]]))


def serving_phases(w: Workload, c: ParallelConfig) -> list[tuple[str, Workload, ParallelConfig, bool]]:
    """(phase, workload, config, decode) of an inference request: the prefill of one micro-batch
    of prompts, and one decode step at the average context (prompt + half the output) with the
    replica's concurrent sequences (``global_batch / dp``) as its batch."""
    if not w.input_len:
        return [("forward", w, c, False)]
    prefill = (("prefill", replace(w, seq_len=w.input_len), c, False),)
    ctx = w.input_len + max(1, w.output_len) // 2
    decode = ("decode", replace(w, seq_len=ctx), replace(c, mb=max(1, w.global_batch // c.dp)), True)
    return [*prefill, decode]


def _explain_forward(model, cluster, w, c) -> list[dict]:
    rows = []
    for phase, wp, cfg, decode in serving_phases(w, c):
        for r in _explain_pass(model, cluster, wp, cfg, decode):
            rows.append(dict(r, phase=phase))
    return rows


def _explain_pass(model, cluster, w, c, decode) -> list[dict]:
    from costmodel.physics.memory.stage_contents import is_moe_layer
    from costmodel.spec.stages import stage_layers

    link, exp, win, why = {}, {}, {}, {}
    for layer in stage_layers(model.layers, c.pp, 0, c.layers_per_stage):
        s = layer_schedule(model, cluster, w, c, is_moe_layer(model, layer), "fwd", decode=decode)
        wnd = schedule_windows(s)
        for strat, t in s.link_s.items():
            link[strat] = link.get(strat, 0.0) + t
            exp[strat] = exp.get(strat, 0.0) + s.exposed_s.get(strat, 0.0)
            win[strat] = win.get(strat, 0.0) + wnd.get(strat, 0.0)
        for strat, reason in s.reasons().items():
            why.setdefault(strat, reason)
    rows = [_row(k, link[k], win[k], exp[k], why.get(k, "")) for k in TRAINING_STRATEGIES if link.get(k, 0) > 0]
    if c.tp > 1 and rows and not decode:
        rows[0]["feasibility"] = tp_feasibility(model, cluster, w, c)
    return rows


def tp_feasibility(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig) -> dict:
    """Source section 3's feasibility ratio: one TP AllReduce of the layer output (``b s h``
    activations) over the layer's forward GEMM time; below 1 it can be hidden when chunked.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> f = tp_feasibility(load_model("gpt3-175b"), load_cluster("a100-80g"), Workload(global_batch=1, seq_len=2048),
    ...                    ParallelConfig(tp=8))
    >>> round(f["msg_bytes"] / 1e6, 1), f["ratio"] < 1
    (50.3, True)
    """
    msg = c.mb * w.seq_len / c.cp * model.hidden * ACT_BYTES
    t_ar = collective_time_s(
        "allreduce",
        msg,
        c.tp,
        1,
        cluster,
        engines=dma.engines_of(cluster, plan_dma(model, cluster, w, c), "tp"),
        tables=tp_from_nccl_tables(w, c),
    )
    t_mm = sum(
        o.fwd_s
        for o in layer_ops(model, cluster.device, w, c, model.is_moe and model.dense_layers == 0)
        if o.kind == "gemm"
    )
    return {"msg_bytes": msg, "t_allreduce_s": t_ar, "t_matmul_s": t_mm, "ratio": t_ar / t_mm if t_mm else float("inf")}


def _label(row: dict) -> str:
    return row["strategy"] + (f" ({row['phase']})" if row.get("phase") else "")


def format_explain(rows: list[dict]) -> str:
    """The rows as a fixed-width table, with the TP feasibility line when present."""
    wide = max([8] + [len(_label(r)) for r in rows])
    eng = max([7] + [len(r.get("engines") or "-") for r in rows])
    head = (
        f"{'strategy':<{wide}} {'T_comm ms':>11} {'T_compute ms':>13} {'r':>6} {'exposed ms':>11}  "
        f"{'T_comm<=T_compute':<17}  {'engines':<{eng}}  blocking prerequisite"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{_label(r):<{wide}} {r['t_comm_s'] / MS:11.3f} {r['t_compute_s'] / MS:13.3f} {r['r']:6.2f} "
            f"{r['exposed_s'] / MS:11.3f}  {str(r['critical_condition']).lower():<17}  "
            f"{r.get('engines') or '-':<{eng}}  {r['reason'] or '-'}"
        )
    for r in rows:
        f = r.get("feasibility")
        if f:
            verdict = (
                "< 1: shorter than the GEMMs it can run beside, so splitting both into chunks can hide it"
                if f["ratio"] < 1
                else ">= 1: longer than all the GEMMs it could run beside, so part of it stays exposed"
            )
            lines.append(
                f"feasibility ({r['strategy']}): one AllReduce of the layer output ({f['msg_bytes'] / 1e6:.1f} MB) "
                f"takes {f['t_allreduce_s'] / MS:.3f} ms, the layer's GEMMs {f['t_matmul_s'] / MS:.3f} ms: "
                f"ratio {f['ratio']:.2f} ({verdict})"
            )
    return "\n".join(lines)
