"""Hierarchical composition: layer graphs -> stage times -> pipeline schedule -> step.

1. Each distinct layer graph (dense or MoE, forward or backward, with or without recompute)
   is built and scheduled once; the result is cached by the inputs that shape it.
2. A stage's micro-batch time per model chunk is the sum of its layers' scheduled makespans
   (compute, interference and exposed TP/SP/CP/EP/ZeRO-3 communication), plus the embedding
   on the first stage and the LM head on the last.
3. :func:`costmodel.engines.graph.pipeline.simulate` schedules those chunk times over the micro-batches
   with point-to-point transfers at the stage boundaries.
4. Each stage's DP gradient buckets are scheduled behind its last backward; its drain bubble
   (a later stage finishes before stage 0) is a window in which they run unexposed.

:func:`stage_timing` has the signature and result type of :func:`costmodel.engines.analytic.stage_timing`.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> gs = graph_step(load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64),
...                 Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8, vp=3, sp=True, chunks=4))
>>> 10 < gs.pipeline_s < 20, sorted(gs.rates())   # dp: the tied-embedding gradient all-reduce
(True, ['dp', 'pp', 'sp'])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import networkx as nx
import numpy as np

from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.physics.kernels import mtp
from costmodel.compose.stage_terms import StageTiming, grad_bytes, stage_dp_terms, stage_optimizer_s
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.compute import embedding_op
from costmodel.physics.kernels.host import host_gap_s, layer_host_s
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.physics.mechanics.grad_buckets import stage_grad_buckets
from costmodel.physics.memory.stage_contents import is_moe_layer, rank_layers
from costmodel.compose.overlap import CommLedger, overlap_rate
from costmodel.compose.ep_overlap import paired_fraction
from costmodel.spec.layout import of as layout_of
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.compose.step import Composition, bucketed_s
from costmodel.physics.mechanics.zero3_edges import WHY_EDGE, edge_times
from costmodel.engines.graph.builders import layer_graph, plan_dma
from costmodel.engines.graph.part_graphs import head_graph, mtp_graph
from costmodel.engines.graph.dp import dp_tail, param_gather_lateness_s
from costmodel.engines.graph.pipeline import PipelineResult, simulate
from costmodel.engines.graph.scheduler import Schedule, resources_for, schedule
from costmodel.engines.graph.blend import mix, share

WHY_PP_SYNC = "synchronous issue: 1F1B blocking send/recv between dependent micro-batch computations"
WHY_PP_DATA = "data dependency: the next stage waits for the activation (or the gradient) in flight"


def _with_dma(model, cluster, w, c) -> ParallelConfig:
    """``c`` with its DMA assignment resolved, so a layer's cache key holds the plan's engines."""
    a = plan_dma(model, cluster, w, c)
    return c if a is None or c.dma == a else replace(c, dma=a)


def _layer_key(w: Workload, c: ParallelConfig) -> tuple[Workload, ParallelConfig]:
    """Only what shapes one layer's graph (pipeline and bucket settings do not)."""
    return (
        Workload(mode=w.mode, global_batch=1, seq_len=w.seq_len, dtype=w.dtype, recipe=w.recipe),
        # pp only as "a pipeline or not": FSDP2 without resharding syncs once per step under one
        replace(c, pp=min(c.pp, 2), vp=1, bucket_bytes=0, layers_per_stage=None, recompute_layers=None, layout=None),
    )


def layer_schedule(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    c: ParallelConfig,
    moe: bool,
    phase: str,
    recompute: bool = False,
    decode: bool = False,
) -> Schedule:
    """The scheduled graph of one layer (cached); ``decode``: an inference decode step."""
    wk, ck = _layer_key(w, _with_dma(model, cluster, w, c))
    return _layer_schedule(model, cluster, wk, ck, moe, phase, recompute, decode)


@lru_cache(maxsize=2048)
def _layer_schedule(model, cluster, w, c, moe, phase, recompute, decode=False) -> Schedule:
    s = schedule(
        layer_graph(model, cluster, w, c, moe, phase, recompute, decode),
        resources_for(cluster.device, plan_dma(model, cluster, w, c)),
    )
    # the phase lasts at least the host's time to issue it (costmodel.physics.kernels.host): the GPU waits for it
    host_f, host_b = layer_host_s(model, cluster.device, w, c, moe, recompute)
    gap = 0.0 if decode else host_gap_s(s.makespan_s, host_f if phase == "fwd" else host_b)
    if gap <= 0:
        return s
    ph = dict(s.extra.get("phase_s", {}))
    ph[phase] = ph.get(phase, 0.0) + gap
    return replace(s, makespan_s=s.makespan_s + gap, extra={**s.extra, "phase_s": ph, "host_gap_s": gap})


def pair_schedule(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig) -> Schedule:
    """One MoE layer's forward and another micro-batch's backward of it scheduled together, as Megatron-Core's
    combined 1F1B schedule runs them (``ParallelConfig.ep_overlap``; :mod:`costmodel.compose.ep_overlap`): the
    two graphs side by side, the compute stream in that schedule's order (below), so each all-to-all runs
    beside the other micro-batch's compute."""
    wk, ck = _layer_key(w, _with_dma(model, cluster, w, c))
    return _pair_schedule(model, cluster, wk, ck)


@lru_cache(maxsize=256)
def _pair_schedule(model, cluster, w, c) -> Schedule:
    f = layer_graph(model, cluster, w, c, True, "fwd")
    b = layer_graph(model, cluster, w, c, True, "bwd")
    # compute-stream segments, in run order: the backward up to its combine gradient (0: what precedes it in
    # Megatron-Core's combine node), the forward up to its dispatch (1), the experts' backward (2), the experts'
    # forward (3), the rest of the backward (4), the forward after its combine (5: the combine node's
    # post-processing); each graph's all-to-alls (strategy ep) bound its segments
    seg = {}
    for g, tag, parts in ((f, "f.", (1, 3, 5)), (b, "b.", (0, 2, 4))):
        ep = sorted(a["seq"] for _, a in g.nodes(data=True) if a["strategy"] == "ep")
        for n, a in g.nodes(data=True):
            k = 0 if a["seq"] <= ep[0] else (1 if a["seq"] <= ep[-1] else 2)
            seg[tag + n] = (parts[k], a["seq"])
    g = nx.union(f, b, rename=("f.", "b."))
    for i, n in enumerate(sorted(g.nodes, key=seg.__getitem__)):
        g.nodes[n]["seq"] = i
    return schedule(g, resources_for(cluster.device, plan_dma(model, cluster, w, c)))


def head_schedule(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, phase: str) -> Schedule:
    """The schedule of the embedding/LM-head/loss ops of one micro-batch's ``phase``."""
    return _part_schedule("head", model, cluster, *_layer_key(w, _with_dma(model, cluster, w, c)), phase)


def mtp_schedule(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, phase: str) -> Schedule:
    """The schedule of the MTP extras (eh_proj, norms, extra LM head and loss) of one micro-batch's ``phase``."""
    return _part_schedule("mtp", model, cluster, *_layer_key(w, _with_dma(model, cluster, w, c)), phase)


_PART_GRAPHS = {"head": head_graph, "mtp": mtp_graph}


@lru_cache(maxsize=1024)
def _part_schedule(part, model, cluster, w, c, phase) -> Schedule:
    return schedule(
        _PART_GRAPHS[part](model, cluster, w, c, phase), resources_for(cluster.device, plan_dma(model, cluster, w, c))
    )


@dataclass(frozen=True)
class ChunkWork:
    """One micro-batch through one model chunk of one stage: its scheduled pieces in run order."""

    fwd: tuple  # (name, Schedule, count)
    bwd: tuple


def _pieces(model, cluster, w, c, stage: int, memo: dict) -> list[ChunkWork]:
    paired = paired_fraction(micro_batches(w, c), c.pp, c.vp, stage) if c.ep_overlap else 1.0

    def sched(moe, phase, rec=False):
        pairs = moe and c.ep_overlap and c.ep > 1 and not rec
        key = (moe, phase, rec, paired if pairs else None)
        if key not in memo:
            alone = layer_schedule(model, cluster, w, c, moe, phase, rec)
            if pairs:
                # the combined 1F1B pair, shared between the forward and the backward as their own times are,
                # in the stage's paired passes; the warm-up forwards and cool-down backwards run alone
                f, b = (layer_schedule(model, cluster, w, c, True, ph).makespan_s for ph in ("fwd", "bwd"))
                pair = pair_schedule(model, cluster, w, c)
                memo[key] = mix(share(pair, (f if phase == "fwd" else b) / (f + b), phase), alone, paired)
            else:
                memo[key] = alone
        return memo[key]

    # the stage's layers, as many in each chunk as the plan's layout puts there (costmodel.spec.layout)
    lay = layout_of(model, c)
    layers, sizes = list(rank_layers(model, c, stage)), lay.chunks(stage)
    chunk_ids = [layers[sum(sizes[:ch]) : sum(sizes[: ch + 1])] for ch in range(c.vp)]
    rec_k = sum(map(len, chunk_ids)) if c.recompute_layers is None else c.recompute_layers
    out = []
    for ch in range(c.vp):
        fwd, bwd = [], []
        if stage == 0 and ch == 0:
            fwd.append(("embedding", None, 1))
        lo = sum(map(len, chunk_ids[:ch]))
        for i, layer in enumerate(chunk_ids[ch]):
            moe = is_moe_layer(model, layer)
            rec = c.recompute == "full" and lo + i < rec_k
            fwd.append((f"layer{layer}", sched(moe, "fwd"), 1))
            bwd.append((f"layer{layer}", sched(moe, "bwd", rec), 1))
        k_mtp = lay.at(stage, ch).mtp
        if k_mtp:  # the MTP modules: a decoder layer of the last layer's kind each, and the rest (costmodel.physics.kernels.mtp)
            moe = model.is_moe
            after = lo + len(chunk_ids[ch])  # the MTP layers follow the stage's decoder layers (recompute order)
            for j in range(k_mtp):
                rec = c.recompute == "full" and (c.recompute_layers is None or after + j < rec_k)
                fwd.append((f"mtp{j}_extra", mtp_schedule(model, cluster, w, c, "fwd"), 1))
                fwd.append((f"mtp{j}", sched(moe, "fwd"), 1))
                bwd.append((f"mtp{j}_extra", mtp_schedule(model, cluster, w, c, "bwd"), 1))
                bwd.append((f"mtp{j}", sched(moe, "bwd", rec), 1))
        if stage == c.pp - 1 and ch == c.vp - 1:
            for j in range(mtp.heads_on(model, c, stage)):  # the main and every MTP depth's logits and loss
                fwd.append(("head" if j == 0 else f"head_mtp{j}", head_schedule(model, cluster, w, c, "fwd"), 1))
                bwd.append(("head" if j == 0 else f"head_mtp{j}", head_schedule(model, cluster, w, c, "bwd"), 1))
        if stage == 0 and ch == 0:
            bwd.append(("embedding", None, 1))
        out.append(ChunkWork(tuple(fwd), tuple(reversed(bwd))))
    return out


def _span(piece, emb) -> float:
    _, s, _ = piece
    return emb if s is None else s.makespan_s


@dataclass(frozen=True)
class GraphStep:
    """Everything the graph engine computes for one step (SI units)."""

    stages: tuple  # StageTiming per stage (per micro-batch)
    pipeline: PipelineResult
    pipeline_s: float
    dp_link_s: float
    dp_exposed_s: float
    zero_link_s: float
    zero_exposed_s: float
    dp_stage: int
    dp_schedules: tuple  # Schedule of each stage's last backward with its DP buckets (or None)
    chunks: tuple  # ChunkWork per stage per chunk
    m: int
    composition: Composition  # the simulated pipeline and DP tail, as costmodel.compose.step reports them

    def rates(self) -> dict:
        """Achieved overlap r per strategy on the slowest stage over the whole step."""
        slow = max(self.stages, key=lambda st: st.microbatch_s)
        link = {s: self.m * v for s, v in slow.ledger.link_s.items()}
        exp = {s: self.m * slow.ledger.exposed_s.get(s, 0.0) for s in link}
        if self.dp_link_s > 0:
            link["dp"], exp["dp"] = self.dp_link_s, self.dp_exposed_s
        if self.zero_link_s > 0:
            link["zero"] = link.get("zero", 0.0) + self.zero_link_s
            exp["zero"] = exp.get("zero", 0.0) + self.zero_exposed_s
        return {s: overlap_rate(link[s], exp[s]) for s in sorted(link) if link[s] > 0}


def graph_step(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig) -> GraphStep:
    """Schedule one training step hierarchically (cached)."""
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(c.gpus)
    return _graph_step(model, cluster, w, c)


@lru_cache(maxsize=256)
def _graph_step(model, cluster, w, c) -> GraphStep:
    dev = cluster.device
    m = micro_batches(w, c)
    emb = embedding_op(model, dev, w, c)
    n = c.mb * w.seq_len / c.cp
    t_p2p = 0.0
    if c.pp > 1:  # scatter-gather optimisation / SP shards (Narayanan et al. 2021, section 4.1)
        t_p2p = collective_time_s(
            "p2p",
            n * model.hidden * ACT_BYTES / c.tp,
            c.pp,
            group_stride("pp", c.tp, c.cp, c.dp),
            cluster,
            engines=dma.engines_of(cluster, plan_dma(model, cluster, w, c), "pp"),
        )
    memo: dict = {}
    chunks = tuple(tuple(_pieces(model, cluster, w, c, s, memo)) for s in range(c.pp))
    # the embedding/head units of FSDP2 / ZeRO-3 (costmodel.physics.mechanics.zero3_edges): the embedding's exposed
    # forward gather and gradient reduce-scatter lengthen the embedding's forward and backward
    edges = tuple(edge_times(model, cluster, c, s) for s in range(c.pp))
    emb_f, emb_b = emb.fwd_s + edges[0][1], emb.bwd_s + edges[0][2]
    F = [[sum(_span(p, emb_f) for p in cw.fwd) for cw in row] for row in chunks]
    B = [[sum(_span(p, emb_b) for p in cw.bwd) for cw in row] for row in chunks]
    pipe = simulate(F, B, m, t_p2p)
    stages = tuple(_stage_timing(s, chunks[s], emb, pipe, m, edges[s]) for s in range(c.pp))

    dp_link = dp_exp = zero_link = zero_exp = 0.0
    dp_stage, scheds = 0, []
    kind = frameworks.of(c).step_grad or "reducescatter"
    size, stride = c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp)
    worst, windows = -np.inf, {}
    for s in range(c.pp):
        t_grad, t_param, lat_grad, lat_param, buckets, _pieces_s = stage_dp_terms(model, cluster, c, s)
        t_grad = bucketed_s(t_grad, lat_grad, buckets)  # every extra bucket pays its latency
        t_param = bucketed_s(t_param, lat_param, buckets)
        if t_grad <= 0:  # no step-end gradient collective (e.g. reduced every micro-batch)
            scheds.append(None)
        else:
            window = _last_backward_window(chunks[s], pipe, s, emb_b, grad_bytes(model, c, s), windows)
            tail, sched = dp_tail(
                cluster,
                window,
                t_grad,
                c.bucket_bytes,
                kind,
                max(size, 2),
                stride,
                plan_dma(model, cluster, w, c),
                stage_grad_buckets(model, c, s),
            )
            scheds.append(sched)
            finish = float(pipe.last_backward_end_s[s]) + tail
            if finish > worst:
                worst, dp_stage, dp_link = finish, s, t_grad
        if t_param > 0:  # without buckets the gather runs after the optimizer step, not overlapped
            fr, need = _param_need(chunks[s], pipe, s, emb_f)
            overlapped = c.bucket_bytes > 0 if _pieces_s is None else _pieces_s[0] > 0
            late = param_gather_lateness_s(t_param, fr, need) if overlapped else t_param
            if late >= zero_exp:
                zero_exp, zero_link = late, t_param
    dp_exp = max(0.0, worst - pipe.makespan_s) if worst > -np.inf else 0.0
    slow = max(range(c.pp), key=lambda i: stages[i].microbatch_s)
    comp = Composition(
        pipeline_s=pipe.makespan_s,
        bubble_s=pipe.makespan_s - m * stages[slow].microbatch_s,
        dp_s=dp_exp,
        zero_s=zero_exp,
        dp_link_s=dp_link,
        zero_link_s=zero_link,
        optimizer_s=max(stage_optimizer_s(model, cluster, c, s) for s in range(c.pp)),
        slow_stage=slow,
        dp_stage=dp_stage,
    )
    return GraphStep(
        stages, pipe, pipe.makespan_s, dp_link, dp_exp, zero_link, zero_exp, dp_stage, tuple(scheds), chunks, m, comp
    )


def _stage_timing(stage: int, row, emb, pipe: PipelineResult, m: int, edge=(0.0, 0.0, 0.0)) -> StageTiming:
    fwd = bwd = rec = interference = 0.0
    led = CommLedger()
    led.add("zero", edge[0], edge[1] + edge[2], WHY_EDGE, uses_compute=False)  # costmodel.physics.mechanics.zero3_edges
    reasons: dict = {}  # id(Schedule) -> its reasons (one schedule serves many layers)
    for cw in row:
        for pieces, phase in ((cw.fwd, "fwd"), (cw.bwd, "bwd")):
            for name, s, count in pieces:
                if s is None:
                    secs = emb.fwd_s if phase == "fwd" else emb.bwd_s
                    fwd, bwd = (fwd + secs, bwd) if phase == "fwd" else (fwd, bwd + secs)
                    continue
                ph = s.extra["phase_s"]
                fwd += count * ph.get("fwd", 0.0)
                bwd += count * ph.get("bwd", 0.0)
                rec += count * ph.get("recompute", 0.0)
                interference += count * (s.interference_s + s.idle_s)
                why = reasons.get(id(s))
                if why is None:
                    why = reasons[id(s)] = s.reasons()
                for strat, t in s.link_s.items():
                    led.add(strat, t, s.exposed_s.get(strat, 0.0), why.get(strat, ""), times=count)
    if pipe.p > 1:  # T_comm: the stage's sends and receives; exposed: transfer time on the critical path
        k = pipe.transfers(stage) / m
        why = WHY_PP_SYNC if pipe.sync else WHY_PP_DATA
        led.add("pp", pipe.t_p2p_s, pipe.pp_exposed_s / m / k if k else 0.0, why, times=k, uses_compute=False)
    return StageTiming(stage, fwd, bwd, rec, led, interference)


def _last_backward_window(
    row, pipe: PipelineResult, stage: int, emb_bwd_s: float, total_bytes: float, memo: dict
) -> tuple:
    """The stage's backward ops from the last micro-batch's first chunk-backward to the end:
    each chunk's last backward split by layer (its gradients become ready layer by layer),
    the other micro-batches' backwards in between as whole ops."""
    is_b, ch, mb = pipe.is_b[stage], pipe.chunk[stage], pipe.mb[stage]
    last = {int(ch[j]): int(j) for j in np.nonzero(is_b & (mb == pipe.m - 1))[0]}
    j0 = min(last.values())
    durs = tuple((pipe.end[stage, j0:] - pipe.start[stage, j0:]).tolist())
    # pieces of each chunk's backward: (label, seconds, makes gradients); stage-independent labels
    sig = tuple(
        tuple(
            ("embedding" if s is None else n.split("layer")[0] + "layer", emb_bwd_s if s is None else s.makespan_s)
            for n, s, _ in cw.bwd
        )
        for cw in row
    )
    key = (sig, durs, tuple(ch[j0:].tolist()), tuple(sorted((c, j - j0) for c, j in last.items())), total_bytes)
    if key not in memo:
        memo[key] = _window(*key)
    return memo[key]


def _window(sig, durs, chunk_of, last, total_bytes) -> tuple:
    n_layers = sum(1 for piece in sig for lab, _ in piece if lab != "embedding")
    per_layer = total_bytes / max(1, n_layers)
    last = dict(last)
    window = []
    for j, secs in enumerate(durs):
        c = chunk_of[j]
        if last.get(c) == j:
            for i, (lab, span) in enumerate(sig[c]):
                window.append((f"c{c}.{lab}{i}", span, 0.0 if lab == "embedding" else per_layer, c))
        else:
            window.append((f"op{j}", secs, 0.0, -1))
    return tuple(window)


def _param_need(row, pipe: PipelineResult, stage: int, emb_fwd_s: float) -> tuple[tuple, tuple]:
    """Per layer of the stage (first forward of each chunk, in run order): its share of the
    parameters and when the next step's first forward needs it."""
    is_f = ~pipe.is_b[stage]
    fr, need = [], []
    for c, cw in enumerate(row):
        j = int(np.nonzero(is_f & (pipe.chunk[stage] == c) & (pipe.mb[stage] == 0))[0][0])
        t = float(pipe.start[stage, j])
        for name, s, _ in cw.fwd:
            if name not in ("embedding", "head"):
                fr.append(1.0)
                need.append(t)
            t += emb_fwd_s if s is None else s.makespan_s
    k = len(fr) or 1
    return tuple(f / k for f in fr), tuple(need)


def stage_timing(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, stage: int) -> StageTiming:
    """Per-micro-batch timing of ``stage`` from the graph engine (same type as the analytic one)."""
    return graph_step(model, cluster, w, c).stages[stage]
