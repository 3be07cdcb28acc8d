"""One forward pass of one micro-batch through the serving pipeline: a prefill chunk or a decode step
(:class:`Phase`), its layers' compute and communication ledger (the layer costs every serving path reads)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from costmodel.compose.comm_ledgers import WHY_EP, WHY_TP, _tp_ledger
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.kernels.gemm import ACT_BYTES, elementwise_time_s, gemm_time_s
from costmodel.physics.kernels.compute import embedding_op, layer_ops
from costmodel.physics.kernels.moe_decode import serving_moe_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.comm.ep_dispatch import ep_dispatch_time_s
from costmodel.physics.memory.stage_contents import is_moe_layer
from costmodel.serving.engines import engine_allreduce_s
from costmodel.compose.overlap import CommLedger, exposed_s
from costmodel.spec.stages import stage_layers
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload


WHY_PP = "data dependency: the next stage needs this micro-batch's activations (pipeline not full)"


SERVING_STRATEGIES = ("tp", "sp", "ep", "pp")


@dataclass(frozen=True)
class Phase:
    """One forward pass of one micro-batch through the pipeline (a prefill, or a decode step)."""

    stage_s: tuple[float, ...]  # per stage: compute + exposed communication + interference
    compute_s: float  # summed over stages (the path one micro-batch takes)
    attention_s: float  # the attention-core part of compute_s
    interference_s: float
    ledger: CommLedger  # summed over stages, P2P included
    period_s: float  # time between two passes of the same micro-batch (decode) / latency (prefill)

    @property
    def latency_s(self) -> float:
        return self.compute_s + self.interference_s + self.ledger.total_exposed_s

    def breakdown(self) -> dict:
        """Seconds by component; they sum to ``period_s``."""
        d = {"compute_s": self.compute_s, "interference_s": self.interference_s}
        for s in SERVING_STRATEGIES:
            d[f"{s}_exposed_s"] = self.ledger.exposed_s.get(s, 0.0)
        d["pipeline_wait_s"] = max(0.0, self.period_s - self.latency_s)
        return d


#: the dense MLP ops a MoE layer's block stands in for (:func:`serving_layer_ops`)
DENSE_MLP_OPS = frozenset(("fc1", "act", "fc2"))


def serving_layer_ops(
    model: ModelSpec, dev, w: Workload, c: ParallelConfig, moe: bool, decode: bool, kv_dtype: str
) -> tuple:
    """The forward ops of one layer of a serving step on one GPU: :func:`layer_ops` with serving semantics
    (``mode="infer"``: no dropout), and a MoE block as the engines run it
    (:func:`costmodel.physics.kernels.moe_decode.serving_moe_ops`: one fused top-k, no host sync of the
    expert counts, the grouped GEMMs over the experts the tokens hit, from the measured MoE table where the
    GPU has one) instead of Megatron-Core's training block.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> ops = serving_layer_ops(load_model("deepseek-v3"), load_cluster("b200").device,
    ...     Workload(global_batch=32, seq_len=1536, dtype="fp8"), ParallelConfig(tp=8, ep=8, mb=32), True, True, "fp8")
    >>> [o.name for o in ops if o.block == "mlp"]
    ['ln2', 'router', 'experts', 'shared_fc1', 'shared_act', 'shared_fc2', 'bda2']
    """
    if w.mode != "infer":
        w = replace(w, mode="infer")
    ops = layer_ops(model, dev, w, c, False, decode=decode, kv_dtype=kv_dtype)
    if not moe:
        return ops
    keep = [o for o in ops if o.name not in DENSE_MLP_OPS]  # the attention block, ln2 and bda2
    n = c.mb if decode else c.mb * w.seq_len / c.cp
    tp_comm = "rs" if c.sp_on else "ar"
    block = serving_moe_ops(model, dev, w.dtype, n, c.tp, c.ep, model.activation == "swiglu", tp_comm)
    return tuple(keep[:-1]) + tuple(block) + (keep[-1],)


@lru_cache(maxsize=4096)
def _layer(
    model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig, moe: bool, decode: bool, kv_dtype: str
) -> tuple[float, float, CommLedger]:
    """Forward compute seconds, its attention-core part and the communication ledger of one
    layer for one micro-batch.

    The layer runs as a serving engine runs it (:func:`serving_layer_ops`), whatever ``w.mode`` says."""
    ops = serving_layer_ops(model, cluster.device, w, c, moe, decode, kv_dtype)
    tokens = c.mb if decode else c.mb * w.seq_len
    led = CommLedger()
    sm = cluster.device.engines_for("intra").uses_compute
    k = c.chunks
    if c.tp > 1:
        msg = tokens * model.hidden * ACT_BYTES
        # chunked: the pieces are the steps of one decomposed collective (as in costmodel.engines.graph),
        # so the whole collective's time, latency included, is split among them
        t = {
            kind: collective_time_s(kind, msg, c.tp, 1, cluster, algorithm="direct")
            for kind in ("allreduce", "allgather", "reducescatter")
        }
        # the engine's own all-reduce (custom kernels below a size, NCCL above) where its table times it
        measured = engine_allreduce_s(cluster, msg, c.tp)
        if measured is not None:
            t["allreduce"] = measured
        coef = cluster.device.comm_compute_interference if sm else 0.0
        _, fwd = _tp_ledger(ops, t["allgather"], t["reducescatter"], t["allreduce"], c.sp_on, c.chunks, coef)
        led = led.merge(fwd)
    if moe and c.ep > 1:
        experts = next(o for o in ops if o.name == "experts")
        t_a2a = ep_dispatch_time_s(model, tokens, c.tp, c.ep, cluster, c.ep_dispatcher)
        why = WHY_EP if k == 1 else "data dependency: dispatch needs the router output (combine chunked)"
        led.add("ep", t_a2a, t_a2a, why, uses_compute=sm)  # dispatch
        led.add("ep", t_a2a, exposed_s(t_a2a, experts.fwd_s, k if k > 1 else 0), why, uses_compute=sm)
    return sum(o.fwd_s for o in ops), sum(o.fwd_s for o in ops if o.name == "attn_core"), led


def _moe_layers(model: ModelSpec, layers: range) -> int:
    """How many of ``layers`` are MoE layers (:func:`is_moe_layer`: those from ``dense_layers`` on).

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("deepseek-v3")   # 3 dense layers lead its 61
    >>> [_moe_layers(m, r) for r in (range(0, 2), range(0, 8), range(8, 16))] == [
    ...     sum(1 for i in r if is_moe_layer(m, i)) for r in (range(0, 2), range(0, 8), range(8, 16))]
    True
    """
    if not layers or not is_moe_layer(model, layers[-1]):
        return 0
    return len(range(max(layers.start, model.dense_layers), layers.stop))


def _phase(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    c: ParallelConfig,
    *,
    decode: bool,
    kv_dtype: str,
    micro_batches: int,
    sampled: int | None = None,
) -> Phase:
    """``c.mb`` sequences (prompts of ``w.seq_len`` tokens, or decode steps at context ``w.seq_len``).

    ``sampled``: rows the LM head computes (default ``c.mb``, each sequence's last token; a
    scheduler step passes the sequences that emit a token, :mod:`costmodel.serving.step`)."""
    dev = cluster.device
    tokens = c.mb if decode else c.mb * w.seq_len
    stage_s, compute, attention, interference, led = [], 0.0, 0.0, 0.0, CommLedger()
    for stage in range(c.pp):
        layers = stage_layers(model.layers, c.pp, stage, c.layers_per_stage)
        n_moe = _moe_layers(model, layers)
        t, sl = 0.0, CommLedger()
        for moe, count in ((False, len(layers) - n_moe), (True, n_moe)):
            if count:
                lt, la, ll = _layer(model, cluster, w, c, moe, decode, kv_dtype)
                t, sl, attention = t + count * lt, sl.merge(ll.scaled(count)), attention + count * la
        if stage == 0:  # embedding lookup; vocab-parallel embedding all-reduces its output
            t += embedding_op(model, dev, replace(w, seq_len=1) if decode and w.seq_len != 1 else w, c).fwd_s
            if c.tp > 1:
                ar = collective_time_s("allreduce", tokens * model.hidden * ACT_BYTES, c.tp, 1, cluster, "direct")
                sl.add("tp", ar, ar, WHY_TP)
        rows = c.mb if sampled is None else sampled
        if stage == c.pp - 1 and rows:  # LM head on each sequence's last token, logits gathered, sampling
            v = model.vocab / c.tp
            t += gemm_time_s(rows, v, model.hidden, dev, w.dtype) + elementwise_time_s(6 * rows * v, dev)
            if c.tp > 1:
                ag = collective_time_s("allgather", rows * model.vocab * ACT_BYTES, c.tp, 1, cluster)
                sl.add("tp", ag, ag, "data dependency: sampling needs the gathered logits")
        inter = sl.interference_s(dev.comm_compute_interference)
        stage_s.append(t + sl.total_exposed_s + inter)
        compute, interference, led = compute + t, interference + inter, led.merge(sl)
    path = sum(stage_s)
    period = path
    if c.pp > 1:
        t_p2p = collective_time_s("p2p", tokens * model.hidden * ACT_BYTES, c.pp, c.tp, cluster)
        link = (c.pp - 1) * t_p2p
        busy = micro_batches * max(stage_s)  # a full pipeline paces on its slowest stage
        period = max(path + link, busy)
        led.add("pp", link, max(0.0, period - max(path, busy)), WHY_PP, uses_compute=False)
    return Phase(tuple(stage_s), compute, attention, interference, led, period)
