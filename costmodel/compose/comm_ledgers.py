"""The communication ledgers of one layer (TP/SP, the MoE forward all-to-alls, the TP/SP collectives an op-SAC
replay repeats) and the reasons an exposed transfer gives (``WHY_*``): shared by
the closed form, the op-graph engine's reports and the serving phases, so each names a failed overlap alike."""

from __future__ import annotations

from costmodel.compose.ep_overlap import pair_exposed_s, parts_of
from costmodel.compose.overlap import FREE, CommLedger
from costmodel.physics.comm.split_overhead import column_parallel


ROW_PARALLEL = ("attn_out", "fc2", "shared_fc2")


WHY_TP = "data dependency: the next op consumes the AllReduce result (TP on the critical path)"


WHY_SP = "data dependency: not chunked (chunks=1), so the GEMM waits for the whole AllGather/ReduceScatter"


WHY_CHUNKS = "window too short: with chunks>1 the first chunk cannot overlap and T_comm > T_GEMM exposes the rest"


WHY_WINDOW = "window too short: T_comm > T_compute of the op it overlaps"


WHY_EP = "data dependency: dispatch needs the router output; combine not chunked"


WHY_EP_PAIR = "window too short: the all-to-all outlasts the other micro-batch's compute it is paired with (EP overlap)"


WHY_PP = "data dependency: 1F1B send/recv sits between dependent micro-batch computations"


WHY_CP = "window too short: K/V block transfer longer than the attention block"


WHY_Z3 = "window too short: parameter AllGather longer than the previous layer's compute"


WHY_LINK = "no free link: collectives on the same link share its bandwidth"


WHY_ENGINE = "no free engine: streams that share DMA engines run one at a time"


def _tp_ledger(ops, t_ag, t_rs, t_ar, sp: bool, chunks: int, coef: float) -> tuple[CommLedger, CommLedger]:
    """TP/SP communication of one layer: (forward+backward ledger, forward-only ledger)."""
    fwd, bwd = CommLedger(), CommLedger()
    k = chunks if chunks > 1 else 0
    why_fwd = WHY_CHUNKS if k else (WHY_SP if sp else WHY_TP)
    for op in ops:
        if sp:
            if column_parallel(op, sp):
                fwd.overlap("sp", t_ag, op.fwd_s, k, why_fwd, coef)
                dgrad = op.bwd_s - op.wgrad_s
                bwd.overlap("sp", t_ag, dgrad, FREE, WHY_WINDOW, coef)
                bwd.overlap("sp", t_rs, op.wgrad_s, FREE, WHY_WINDOW, coef)
            if op.comm_after == "rs":
                fwd.overlap("sp", t_rs, op.fwd_s, k, why_fwd, coef)
                bwd.overlap("sp", t_ag, op.bwd_s - op.wgrad_s, k, why_fwd, coef)
        else:
            if op.comm_after == "ar":
                fwd.overlap("tp", t_ar, op.fwd_s, k, why_fwd, coef)
            if column_parallel(op, sp):
                bwd.overlap("tp", t_ar, op.wgrad_s, FREE, WHY_WINDOW, coef)
    return fwd.merge(bwd), fwd


def _ep_forward_ledger(t_a2a: float, experts_fwd_s: float, k: int, coef: float) -> CommLedger:
    """An MoE layer's forward all-to-alls: the dispatch exposed, the combine behind the experts."""
    f = CommLedger()
    f.add("ep", t_a2a, t_a2a, WHY_EP)  # dispatch
    f.overlap("ep", t_a2a, experts_fwd_s, k, WHY_EP, coef)  # combine
    return f


def _ep_pair_ledgers(
    ops, t_a2a: float, coef: float, paired: float = 1.0, unpaired: tuple | None = None
) -> tuple[CommLedger, CommLedger]:
    """The four all-to-alls of an MoE layer under the combined 1F1B schedule: what one forward/backward layer
    pair leaves exposed (:func:`costmodel.compose.ep_overlap.pair_exposed_s`, its SM slowdown included), half
    charged to the forward, half to the backward. Only the ``paired`` share of the passes runs paired
    (:func:`costmodel.compose.ep_overlap.paired_fraction`: the warm-up forwards and cool-down backwards run
    alone); the rest is charged as ``unpaired``, the (forward, backward) ledgers of the layer without the overlap."""
    half = pair_exposed_s(parts_of(ops, t_a2a), coef) / 2
    f, b = CommLedger(), CommLedger()
    f.add("ep", 2 * t_a2a, half, WHY_EP_PAIR, uses_compute=False)
    b.add("ep", 2 * t_a2a, half, WHY_EP_PAIR, uses_compute=False)
    if unpaired is None or paired >= 1.0:
        return f, b
    u_f, u_b = unpaired
    return f.scaled(paired).merge(u_f.scaled(1 - paired)), b.scaled(paired).merge(u_b.scaled(1 - paired))


def _ep_ledgers(ops, t_a2a: float, k: int, coef: float, paired: float | None = None) -> tuple[CommLedger, CommLedger]:
    """An MoE layer's all-to-alls, (forward, backward): the dispatch exposed and the combine behind the experts,
    and in the backward the combine's gradient exposed and the dispatch's behind the experts' backward; with
    the overlap (``paired``: the share of the passes the combined 1F1B schedule pairs), :func:`_ep_pair_ledgers`."""
    experts = next(o for o in ops if o.name == "experts")
    f = _ep_forward_ledger(t_a2a, experts.fwd_s, k, coef)
    b = CommLedger()
    b.add("ep", t_a2a, t_a2a, WHY_EP)  # gradient of combine, before expert backward
    b.overlap("ep", t_a2a, experts.bwd_s, k, WHY_EP, coef)
    return (f, b) if paired is None else _ep_pair_ledgers(ops, t_a2a, coef, paired, (f, b))


def _op_sac_ledger(ops, sac, t_ag, t_ar, sp: bool, chunks: int, coef: float) -> CommLedger:
    """TP/SP communication of the forward that per-op selective checkpointing replays
    (:func:`costmodel.physics.kernels.recompute.op_sac_fractions`): the sequence-parallel all-gather in front of every
    column-parallel GEMM (pipelined with its replayed share when chunked), or without SP the
    all-reduce after every row-parallel GEMM; the reduce-scatters' outputs are saved."""
    led = CommLedger()
    k = chunks if chunks > 1 else 0
    why = WHY_CHUNKS if k else (WHY_SP if sp else WHY_TP)
    for op, f in zip(ops, sac):
        if sp and column_parallel(op, sp):
            led.overlap("sp", t_ag, f * op.fwd_s, k, why, coef)
        elif not sp and op.comm_after == "ar":
            led.overlap("tp", t_ar, f * op.fwd_s, k, why, coef)
    return led
