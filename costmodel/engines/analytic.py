"""Fast analytical stage timing: compute per micro-batch and per-strategy exposed communication.

Each communication is placed where Megatron-LM issues it and exposed through the unified
formula (:func:`costmodel.compose.overlap.exposed_s`) against the compute it can overlap:

* TP without SP: forward AllReduce after the row-parallel GEMMs sits on the critical path
  (the next op needs it); in backward the column-parallel data-gradient AllReduce runs
  alongside the weight-gradient GEMM (``--async-tensor-model-parallel-allreduce``).
* TP with SP (Korthikanti et al. 2023, section 4.2.2): forward AllGather before and
  ReduceScatter after each GEMM pair are exposed unless split into ``chunks`` pieces
  pipelined with the GEMM (TP communication overlap); backward re-gathers the input while the
  data-gradient GEMM runs and reduce-scatters while the weight-gradient GEMM runs.
* CP: ring attention passes K/V blocks to the neighbour while the current block computes.
* EP: dispatch AllToAll depends on the router output (exposed); combine pipelines with the
  expert GEMMs when chunked.
* PP: 1F1B send/recv sits between dependent computations; interleaving overlaps it with the
  next chunk (Megatron ``overlap_p2p_comm``).
* ZeRO-3: each layer's parameters are gathered behind the previous layer's compute.

The op-graph scheduler (:mod:`costmodel.engines.graph`) replaces these rules with a schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple
from functools import lru_cache

from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.physics.kernels import mtp
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.frameworks.stacks import tp_from_nccl_tables
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.compute import cp_exchange, embedding_op, head_ops, layer_ops
from costmodel.physics.kernels.host import host_gap_s, layer_host_s
from costmodel.physics.kernels.recompute import module_recompute_fractions, op_sac_fractions
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.physics.comm.ep_dispatch import ep_dispatch_time_s, ep_sm_share
from costmodel.compose.ep_overlap import paired_fraction
from costmodel.physics.memory.stage_contents import layer_counts
from costmodel.compose.overlap import FREE, CommLedger
from costmodel.compose.schedule import interleaved_p2p_exposed_s
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.physics.comm.split_overhead import replay_extra_s, with_split_overheads
from costmodel.physics.mechanics.zero3_edges import WHY_EDGE, edge_times
from costmodel.compose.stage_terms import StageTiming
from costmodel.physics.mechanics.fsdp_copies import fsdp2_copies_s, zero3_collectives_s
from costmodel.compose.comm_ledgers import (
    WHY_WINDOW,
    WHY_PP,
    WHY_CP,
    WHY_Z3,
    _ep_forward_ledger,
    _ep_ledgers,
    _op_sac_ledger,
    _tp_ledger,
)
from costmodel.compose.link_floor import link_floor, link_scopes


@dataclass(frozen=True)
class LayerTiming:
    """One layer, one micro-batch, one GPU: compute seconds and its communication ledger."""

    fwd_s: float
    bwd_s: float
    recompute_s: float  # extra forward work when the layer is (selectively or fully) recomputed
    ledger: CommLedger
    recompute_ledger: CommLedger  # forward communication repeated by full recompute


@lru_cache(maxsize=8192)
def layer_timing(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool) -> LayerTiming:
    dev = cluster.device
    a, eng, scopes = _streams(model, cluster, c)
    fwd, bwd, recompute, led, fwd_led, sac_led, replays = _layer_base(model, cluster, w, c, moe, eng)
    # copies: the base is shared by every plan with the same layer (below, the ledger gains ZeRO-3 and the link floor)
    led, fwd_led, sac_led = _copy(led), _copy(fwd_led), _copy(sac_led)
    copy_f, copy_b = fsdp2_copies_s(model, dev, c, moe)  # on the compute stream, not replayed by recompute
    fwd, bwd = fwd + copy_f, bwd + copy_b
    sem = frameworks.of(c)
    if sem.per_microbatch and c.dp * c.cp > 1:
        # FSDP / ZeRO-3: the next layer's parameters are gathered behind this layer's forward; in
        # backward the previous layer's gather and this layer's gradient reduce-scatter run
        # together (one link, shared) behind its backward and recompute (Rajbhandari et al. 2020,
        # section 5; PyTorch FSDP, Zhao et al. 2023, section 3.3 "backward prefetching").
        # DeepSpeed ZeRO-2 only reduce-scatters, every micro-batch (stage_1_and_2.py,
        # reduce_ipg_grads); FSDP2 without resharding gathers in forward only
        # (costmodel.frameworks.rules.semantics).
        zero = dma.engines_of(cluster, a, "zero")
        t_ag, t_rs = _zero3_collectives(model, cluster, c, moe, zero)
        scope = scopes["zero"]
        coef = dev.interference_on(scope)
        # the layer's other exposed communication on *another* link (e.g. TP on NVLink while the
        # gather crosses nodes) is time the gather runs on too; on the same link, or on DMA engines
        # it shares (costmodel.physics.comm.dma), they share it
        pool = dma.pool_of(a, "zero")

        def waits(ledger):
            return ledger.stretch_s + sum(
                v
                for k, v in ledger.exposed_s.items()
                if scopes.get(k, scope) != scope and (pool is None or dma.pool_of(a, k) != pool)
            )

        waits_f = waits(fwd_led)
        waits_b = waits(led) - waits_f
        if c.recompute == "full":
            waits_b += waits_f  # the recompute repeats the forward's communication
        elif replays:
            waits_b += waits(sac_led)
        if sem.gather_forward:
            led.overlap("zero", t_ag, fwd, FREE, WHY_Z3, coef, waits_s=waits_f)
        t_bwd = (t_ag if sem.gather_backward else 0.0) + (t_rs if sem.reduce_per_microbatch else 0.0)
        led.overlap("zero", t_bwd, bwd + recompute, FREE, WHY_Z3, coef, waits_s=waits_b)
    rec_led = fwd_led if c.recompute == "full" else (sac_led if replays else None)
    link_floor(led, fwd + bwd + recompute, scopes, cluster, rec_led, a)
    # each phase (compute and exposed communication) lasts at least its host time (costmodel.physics.kernels.host)
    host_f, host_b = layer_host_s(model, dev, w, c, moe)
    gpu_f, rec_x = fwd + fwd_led.total_exposed_s, rec_led.total_exposed_s if rec_led is not None else 0.0
    gpu_b = bwd + recompute + led.total_exposed_s + rec_x - fwd_led.total_exposed_s
    fwd, bwd = fwd + host_gap_s(gpu_f, host_f), bwd + host_gap_s(gpu_b, host_b)
    return LayerTiming(fwd, bwd, recompute, led, rec_led if rec_led is not None else CommLedger())


_STREAMS: dict = {}


def _streams(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig) -> tuple:
    """``(assignment, {tp, cp, ep: engines}, link scopes)`` of ``c``'s streams, memoised on what they read: ``c.dma`` or
    the default assignment's fields (:func:`costmodel.physics.comm.dma.default_assignment`:
    the degrees, framework and ZeRO stage), and the degrees :func:`~costmodel.compose.link_floor.link_scopes` reads (not to be changed)."""
    key = (model, cluster, c.dma, c.tp, c.cp, c.ep, c.pp, c.dp, c.framework, c.zero)
    return _memo(_STREAMS, key, lambda: _streams_of(model, cluster, c))


def _streams_of(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig) -> tuple:
    a = dma.resolve(cluster, c, model)
    eng = {k: dma.engines_of(cluster, a, k) for k in ("tp", "cp", "ep")}
    return a, eng, link_scopes(c, cluster)


_ZERO3: dict = {}


def _zero3_collectives(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, moe: bool, zero) -> tuple:
    """``(all-gather, reduce-scatter)`` seconds of one sharded layer's ZeRO-3 / FSDP collectives over its groups
    (:func:`~costmodel.physics.mechanics.fsdp_copies.zero3_groups`, summed by
    :func:`~costmodel.physics.mechanics.fsdp_copies.zero3_collectives_s`) on the ``zero`` engines, memoised on what they read: the degrees, the framework's
    pieces (:func:`costmodel.physics.mechanics.zero3_fetch.gather_pieces`, :func:`~costmodel.physics.mechanics.zero3_fetch.reduce_pieces`: module
    layout, bucket, pp), the gradient and gathered parameter bytes; not the micro-batch, chunks or recompute."""
    key = (
        model,
        cluster,
        moe,
        zero,
        c.tp,
        c.cp,
        c.ep,
        c.dp,
        c.pp,
        c.framework,
        c.module_layout,
        c.bucket_bytes,
        c.grad_dtype,
        c.fp8_param_gather,
    )
    return _memo(_ZERO3, key, lambda: zero3_collectives_s(model, cluster, c, moe, zero))


def _copy(led: CommLedger) -> CommLedger:
    return CommLedger(dict(led.link_s), dict(led.exposed_s), led.hidden_sm_s, dict(led.reasons), led.stretch_s)


class LayerCore(NamedTuple):
    """What :func:`_layer_core` memoises for one layer: its ops without recompute, forward and backward seconds, the
    communication ledger and its forward part, the collectives' seconds (TP all-gather, all-reduce, EP all-to-all),
    the experts op, the overlap pieces (``chunks``, 0 when not chunked) and the interference coefficient."""

    plain: tuple
    fwd_s: float
    bwd_s: float
    ledger: CommLedger
    fwd_ledger: CommLedger
    t_ag: float
    t_ar: float
    t_a2a: float
    experts: object
    pieces: int
    coef: float
    split_ops: tuple  # the ops with their split overheads (what the EP ledgers overlap)


class LayerBase(NamedTuple):
    """What :func:`_layer_base` memoises: the layer's seconds and ledgers without DP / ZeRO terms (unchanged)."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    ledger: CommLedger
    fwd_ledger: CommLedger
    replay_ledger: CommLedger
    replays: bool


_BASE: dict = {}
#: entries of :func:`_layer_base`'s memo before it starts again (as ``layer_timing``'s ``lru_cache``)
BASE_ENTRIES = 8192


def _layer_base(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, eng: dict):
    """The part of :func:`layer_timing` that does not depend on the DP degree or ZeRO stage: compute,
    TP/SP, CP and EP communication, recompute, ``eng`` the engines of the tp / cp / ep streams.
    Memoised on exactly what it reads, so the ZeRO-3 layers of every DP degree (which a search
    times one by one) share it: ``(fwd, bwd, recompute, ledger, forward ledger, replayed ledger,
    replays)``, the ledgers not to be changed (``layer_timing`` copies them)."""
    key = (
        model,
        cluster,
        w,
        c.tp,
        c.cp,
        c.ep,
        c.mb,
        c.sp_on,
        c.chunks,
        c.recompute,
        c.recomputed_modules,
        c.flash_attention,
        c.fused_elementwise,
        c.norms_fused,
        c.cp_impl,
        c.ep_dispatcher,
        c.ep_overlap,
        (c.pp, c.vp, micro_batches(w, c)) if c.ep_overlap else None,  # paired_fraction's inputs
        moe,
        tuple(eng[k] for k in ("tp", "cp", "ep")),
    )
    return _memo(_BASE, key, lambda: _layer_base_of(model, cluster, w, c, moe, eng))


def _memo(store: dict, key, make):
    """``store[key]``, made by ``make()`` on a miss; the store starts again past :data:`BASE_ENTRIES` entries."""
    out = store.get(key)
    if out is None:
        if len(store) >= BASE_ENTRIES:
            store.clear()
        out = store[key] = make()
    return out


def _clear_bases() -> None:
    _BASE.clear()
    _CORE.clear()
    _EP_CORE.clear()
    _STREAMS.clear()
    _ZERO3.clear()


_layer_base.cache_clear = _clear_bases  # as an lru_cache: benchmarks start cold by clearing the caches


def _layer_base_of(
    model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, eng: dict
) -> tuple:
    plain, fwd, bwd, led, fwd_led, t_ag, t_ar, t_a2a, experts, k, coef, _ = _layer_core(model, cluster, w, c, moe, eng)
    dev = cluster.device
    sac_led = CommLedger()
    sac = op_sac_fractions(model, plain, c.tp, w.dtype, c.flash_attention) if c.recompute == "op_sac" else None
    replays = sac is not None  # a replayed forward with communication (sac_led)
    if (
        sac is not None and c.tp > 1
    ):  # the replayed forward's collectives: SP all-gathers (or TP all-reduces), not the saved RS
        sac_led = _op_sac_ledger(plain, sac, t_ag, t_ar, c.sp_on, c.chunks, coef)
    if c.recompute == "full":
        recompute = fwd
    elif c.recompute == "selective":  # the core attention, and the ops of the other --recompute-modules
        mods = module_recompute_fractions(plain, c.recomputed_modules, moe, model)
        attn0 = next(o for o in plain if o.name == "attn_core")  # the replayed attention is one kernel
        recompute = (
            (attn0.fwd_s if "core_attn" in c.recomputed_modules else 0.0)
            + sum(f * o.fwd_s for f, o in zip(mods, plain))
            + replay_extra_s(plain, mods, c, dev.kernel_overhead_s, False)
        )
        replayed = [(o, f) for o, f in zip(plain, mods) if f > 0]
        if replayed and c.tp > 1:  # their TP / SP collectives (an MoE block without EP)
            sac_led = sac_led.merge(
                _op_sac_ledger([o for o, _ in replayed], [f for _, f in replayed], t_ag, t_ar, c.sp_on, c.chunks, coef)
            )
            replays = True
        if moe and c.ep > 1 and "moe" in c.recomputed_modules:  # the MoE layer's all-to-alls run again
            sac_led = sac_led.merge(_ep_forward_ledger(t_a2a, experts.fwd_s, k, coef))
            replays = True
    elif sac is not None:
        recompute = sum(f * o.fwd_s for f, o in zip(sac, plain)) + replay_extra_s(
            plain, sac, c, dev.kernel_overhead_s, True
        )
    else:
        recompute = 0.0
    return LayerBase(fwd, bwd, recompute, led, fwd_led, sac_led, replays)


_CORE: dict = {}
_EP_CORE: dict = {}


def _layer_core(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, eng: dict):
    """The part of :func:`_layer_base` that does not depend on recompute: the ops, their compute with the split
    overheads, and the TP/SP, CP and EP ledgers, with what the recompute part reads of them
    (``(plain ops, fwd, bwd, ledger, forward ledger, t_ag, t_ar, t_a2a, experts op, EP chunks, coef, split ops)``; the
    ledgers not to be changed). Memoised on :func:`_layer_base`'s key less the recompute settings: the none,
    selective and full recompute of a layer share it (DeepSeek-V3 / 2048 H800: 4,410 bases, 3,206 cores); and
    less the EP dispatcher and overlap, whose EP terms :func:`_with_ep` adds (searches under each dispatcher)."""
    key = (model, cluster, w, c.tp, c.cp, c.ep, c.mb, c.sp_on, c.chunks, c.flash_attention, c.fused_elementwise)
    key += (c.norms_fused, c.cp_impl, moe, tuple(eng[k] for k in ("tp", "cp", "ep")))
    core = _memo(_CORE, key, lambda: _layer_core_of(model, cluster, w, c, moe, eng))
    if not (moe and c.ep > 1):
        return core
    key += (c.ep_dispatcher, c.ep_overlap, (c.pp, c.vp, micro_batches(w, c)) if c.ep_overlap else None)  # paired's
    return _memo(_EP_CORE, key, lambda: _with_ep(core, model, cluster, w, c, eng))


def _layer_core_of(
    model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, eng: dict
) -> tuple:
    dev = cluster.device
    plain = layer_ops(model, dev, w, c, moe)
    # a chunked op's pieces each pay the kernel overhead again (costmodel.physics.comm.split_overhead): its
    # compute and the window it gives the communication it overlaps; replays split their own share
    ops = with_split_overheads(plain, c, dev.kernel_overhead_s)
    fwd = sum([o.fwd_s for o in ops])
    bwd = sum([o.bwd_s for o in ops])
    n = c.mb * w.seq_len / c.cp
    coef = dev.interference_on("intra")
    t_ag = t_ar = t_a2a = 0.0
    experts, k = None, 0
    if c.tp > 1:
        msg = n * model.hidden * ACT_BYTES
        tp = eng["tp"]
        nccl = tp_from_nccl_tables(w, c)
        t_ar = collective_time_s("allreduce", msg, c.tp, 1, cluster, engines=tp, tables=nccl)
        t_ag = collective_time_s("allgather", msg, c.tp, 1, cluster, engines=tp, tables=nccl)
        t_rs = collective_time_s("reducescatter", msg, c.tp, 1, cluster, engines=tp, tables=nccl)
        led, fwd_led = _tp_ledger(ops, t_ag, t_rs, t_ar, c.sp_on, c.chunks, coef)
    else:
        led, fwd_led = CommLedger(), CommLedger()
    attn = next(o for o in ops if o.name == "attn_core")
    if c.cp > 1:
        x = cp_exchange(model, n, c.tp, c.cp, c.cp_impl)
        stride, e_cp = group_stride("cp", c.tp, c.cp, c.dp), eng["cp"]
        t_kv = collective_time_s("ring_p2p", x.kv_bytes, c.cp, stride, cluster, engines=e_cp)
        steps = c.cp - 1
        f = CommLedger()
        if x.gather_bytes:  # PyTorch context_parallel: one all-gather behind the local block (forward, backward)
            t_gather = collective_time_s("allgather", x.gather_bytes, c.cp, stride, cluster, engines=e_cp)
            t_dkv = collective_time_s("ring_p2p", x.dkv_bytes, c.cp, stride, cluster, engines=e_cp)
            f.overlap("cp", t_gather, attn.fwd_s / c.cp, FREE, WHY_CP, coef)
            led.overlap("cp", t_gather, attn.bwd_s / c.cp, FREE, WHY_CP, coef)
            # dK/dV after every block: each behind the next block, the one after the last block waited on
            led.overlap("cp", steps * t_dkv, attn.bwd_s * steps / c.cp, FREE, WHY_CP, coef)
            led.add("cp", (x.dkv_sends - steps) * t_dkv, (x.dkv_sends - steps) * t_dkv, WHY_CP)
        else:
            f.overlap("cp", steps * t_kv, attn.fwd_s * steps / c.cp, FREE, WHY_CP, coef)
            led.overlap("cp", 2 * steps * t_kv, attn.bwd_s * steps / c.cp, FREE, WHY_CP, coef)
        led = led.merge(f)
        fwd_led = fwd_led.merge(f)
    return LayerCore(plain, fwd, bwd, led, fwd_led, t_ag, t_ar, t_a2a, experts, k, coef, ops)


def _with_ep(core: LayerCore, model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, eng: dict):
    """``core`` of an MoE layer with EP with the EP all-to-alls' ledgers (dispatcher, overlap)."""
    ops, n = core.split_ops, c.mb * w.seq_len / c.cp
    experts = next(o for o in ops if o.name == "experts")
    # Megatron-Core's AllToAll dispatch: from the measured NCCL table where it has the group (ep_dispatch)
    t_a2a = ep_dispatch_time_s(model, n, c.tp, c.ep, cluster, c.ep_dispatcher, engines=eng["ep"], nccl_table=True)
    k = c.chunks if c.chunks > 1 else 0
    # with the overlap, behind another micro-batch's compute where paired (costmodel.compose.ep_overlap)
    paired = paired_fraction(micro_batches(w, c), c.pp, c.vp) if c.ep_overlap else None
    f, b = _ep_ledgers(ops, t_a2a, k, ep_sm_share(c.ep_dispatcher, cluster.device, core.coef), paired)
    led, fwd_led = core.ledger.merge(f).merge(b), core.fwd_ledger.merge(f)
    return core._replace(ledger=led, fwd_ledger=fwd_led, t_a2a=t_a2a, experts=experts, pieces=k)


def stage_timing(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, stage: int) -> StageTiming:
    """Compute and exposed communication of one micro-batch on ``stage``."""
    dev = cluster.device
    n_dense, n_moe = layer_counts(model, c, stage)
    counts = ((False, n_dense), (True, n_moe))
    rec_layers = n_dense + n_moe if c.recompute_layers is None else c.recompute_layers
    fwd = bwd = rec = 0.0
    led = CommLedger()
    for moe, count in counts:
        if not count:
            continue
        lt = layer_timing(model, cluster, w, c, moe)
        k = count if c.recompute != "full" else min(count, rec_layers)
        fwd += count * lt.fwd_s
        bwd += count * lt.bwd_s
        rec += k * lt.recompute_s
        led = led.merge(lt.ledger.scaled(k))
        if k < count:  # partial recompute: the other layers' backward has no recompute to hide behind
            plain = layer_timing(model, cluster, w, replace(c, recompute="none", recompute_layers=None), moe)
            led = led.merge(plain.ledger.scaled(count - k))
        if k:
            led = led.merge(lt.recompute_ledger.scaled(k))
    n = c.mb * w.seq_len / c.cp
    if stage == 0:
        e = embedding_op(model, dev, w, c)
        fwd, bwd = fwd + e.fwd_s, bwd + e.bwd_s
    mf, mb = mtp.extra_s(model, dev, w, c, stage)  # MTP modules beyond their decoder layers (counted above)
    fwd, bwd = fwd + mf, bwd + mb
    if stage == c.pp - 1:
        head, ce = head_ops(model, dev, w, c)
        k = mtp.heads_on(model, c, stage)  # the main and every MTP depth's logits and loss
        fwd += k * (head.fwd_s + ce.fwd_s)
        bwd += k * (head.bwd_s + ce.bwd_s)
        if c.tp > 1:  # data-gradient reduction of the head input, overlapped with its weight gradient
            kind = "reducescatter" if c.sp_on else "allreduce"
            msg, eng = n * model.hidden * ACT_BYTES, dma.engines_of(cluster, dma.resolve(cluster, c, model), "tp")
            t = collective_time_s(kind, msg, c.tp, 1, cluster, engines=eng, tables=tp_from_nccl_tables(w, c, True))
            coef = dev.interference_on("intra")
            led.overlap("sp" if c.sp_on else "tp", t, head.wgrad_s, FREE, WHY_WINDOW, coef)
    # FSDP2 / ZeRO-3: the embedding and head units' collectives (costmodel.physics.mechanics.zero3_edges)
    edge_link, edge_f, edge_b = edge_times(model, cluster, c, stage)
    led.add("zero", edge_link, edge_f + edge_b, WHY_EDGE, uses_compute=False)
    if c.pp > 1:
        msg = n * model.hidden * ACT_BYTES / c.tp  # scatter-gather optimisation / SP shards
        t = collective_time_s(
            "p2p",
            msg,
            c.pp,
            group_stride("pp", c.tp, c.cp, c.dp),
            cluster,
            engines=dma.engines_of(cluster, dma.resolve(cluster, c, model), "pp"),
        )
        chunk_fwd = fwd / c.vp
        sends = 2 * c.vp  # activation forward and gradient backward per model chunk
        ex = t if c.vp == 1 else float(interleaved_p2p_exposed_s(t, chunk_fwd, c.pp, micro_batches(w, c), c.vp))
        led.add("pp", t, ex, WHY_PP, times=sends, uses_compute=False)
    interference = led.interference_s(dev.comm_compute_interference)
    return StageTiming(stage, fwd, bwd, rec, led, interference)
