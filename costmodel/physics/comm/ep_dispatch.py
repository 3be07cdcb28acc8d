"""Expert-parallel token dispatch and combine: how many copies of a token cross which link, and how long
one dispatch (or the combine that mirrors it) takes, per dispatcher.

Two dispatchers (``ParallelConfig.ep_dispatcher``):

* ``alltoall`` -- Megatron-Core ``MoEAlltoAllTokenDispatcher`` (NCCL AllToAll-V): the tokens are permuted
  into one row per routed copy, ``topk`` rows per token, and exchanged by
  :func:`costmodel.physics.comm.collectives.collective_time_s` ``"alltoall"`` (the buffer:
  :func:`ep_alltoall_bytes`). In training (``nccl_table=True``, both engines) a group inside one node of a GPU
  with a measured nccl-tests table, of a size inside its GPU counts, is timed from that table
  (:data:`NCCL_TABLE_PROTOCOL`); elsewhere, and in the serving model, the modelled formula.
* ``deepep`` -- DeepEP's normal (high-throughput) kernels. A token is sent once to every *rank* that holds
  at least one of its experts, not once per expert (DeepEP ``get_dispatch_layout`` builds
  ``is_token_in_rank``; the legacy test counts the NVLink bytes as ``recv_x.numel()``, one row per
  (token, rank): ``tests/legacy/test_internode.py`` and ``test_intranode.py`` @dd758ca). Across nodes a
  token crosses the network once per destination *node*, to the GPU of the same in-node index, which
  forwards it over NVLink to the ranks of that node that need it (DeepSeek-V3 technical report, arXiv
  2412.19437, section 3.2.2; DeepEP ``docs/legacy.md``, "Normal kernels with NVLink and RDMA
  forwarding"; the test counts ``num_rdma_token_sent``, one row per (token, node)). Per GPU and dispatch:

      RDMA bytes   = tokens * row_bytes * nodes_per_token * (1 - 1/nodes)     (the own node's copy stays)
      NVLink bytes = tokens * row_bytes * ranks_per_token * (1 - 1/gpus_in_node)  (the forwarder's own
                     copy stays on the GPU)
      time         = max(RDMA / NIC bandwidth, NVLink / NVLink bandwidth, rows / kernel rate) + latency

  The two links run at once (the kernels pipeline RDMA sends with NVLink forwarding), so the slower one
  bounds the time -- or the internode kernel itself: it moves every delivered row (``tokens * row_bytes *
  ranks_per_token``, the own rank's included) through its SMs at no more than
  :data:`DEEPEP_INTERNODE_ROWS_BYTES_PER_S`, whatever the NVLink rate. The combine moves the same rows back
  (reduced per rank, then per node).

How many distinct ranks and nodes a token reaches depends on the routing (``ModelSpec.moe_routing``):

* ``uniform`` -- each token's ``topk`` experts a uniform random set (a balanced learned router; Megatron-Core's
  ``--moe-router-force-load-balancing`` replaces the logits by random ones, ``router.py`` /
  ``moe_utils.apply_random_logits`` @d98e8a6): a group of ``m`` experts is missed with probability
  ``C(E - m, k) / C(E, k)``. ``max_nodes`` (node-limited routing, DeepSeek-V3 section 2.1.2: at most ``M``
  nodes per token, chosen by the scores of their best experts) reaches all ``M`` nodes, one expert in
  each and the other ``k - M`` uniform among those nodes' experts (an approximation, checked against a
  replay of DeepEP's test routing in ``tests/test_ep_dispatch.py``: within 2%).
* ``consecutive`` -- NeMo AutoModel's ``FakeBalancedGate`` with ``fake_gate_noise`` 0 (the benchmark configs'
  ``fake_balanced_gate: true``): token ``t`` is routed to experts ``(t * k + i) mod E``, ``i < k``
  (``nemo_automodel/components/moe/layers.py@cb97654``, ``FakeBalancedGate.forward``): ``k`` neighbouring
  experts, which sit on one or two neighbouring ranks of one node. Counted exactly over one period.

Experts are laid out contiguously over the EP ranks (``E / ep`` per rank) and the EP group's ranks are
consecutive (stride 1, :func:`costmodel.physics.comm.groups.group_stride`), so node ``j`` of the group holds ranks
``j*g .. j*g + g - 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from costmodel.physics.comm.collectives import Engines, collective_time_s, link_bw_bytes_per_s
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import MOE_ROUTINGS as ROUTINGS  # one list: ModelSpec validates it
from costmodel.spec.specs import ClusterSpec, ModelSpec


#: Rows per second (bytes, the own rank's rows included) DeepEP's V1 internode normal kernels deliver per GPU
#: when neither link limits them, at its tests' 24 SMs: the "NVL" figure test_internode.py prints on 2 x 8 H200
#: with CX7 400 Gb/s IB (deepseek-ai/DeepEP issue 493, "2 nodes": 145.16 combine, 133.78 BF16 dispatch,
#: 124.92 GB/s FP8 dispatch; mean 134.6, +-8%), where the NIC carries about half its 50 GB/s and NVLink a
#: quarter of its 450. The same bound on H800 (160 GB/s NVLink) fits DeepEP's own EP 16 figures
#: (benchmarks/component_ep.py). Not scaled with the SMs a framework gives DeepEP (Megatron-Core and AutoModel
#: default to 20): no measurement at another SM count of the V1 internode kernels was found.
DEEPEP_INTERNODE_ROWS_BYTES_PER_S = 134.6e9


#: SMs Megatron-Core gives DeepEP's kernels unless ``--moe-flex-dispatcher-num-sms`` (formerly
#: ``--moe-deepep-num-sms``) says otherwise: ``token_dispatcher.py``@d98e8a6, ``_DeepepManager.__init__``, "None -> 20
#: (DeepEP's historical mcore default when moe_flex_dispatcher_num_sms is unset)", passed to
#: ``deep_ep.Buffer.set_num_sms`` (``fused_a2a.set_deepep_num_sms``). DeepEP's normal kernels run one persistent
#: block per SM on that many SMs for the whole dispatch or combine (``deep_ep/buffer.py`` ``Buffer.set_num_sms``:
#: "Set the number of SMs to use in high-throughput kernels"), so compute beside them runs on the others (the ModelZoo's overlap recipe
#: reserves them from TE's norm kernels too: ``NVTE_FWD_LAYERNORM_SM_MARGIN``, sbatch_benchmarking.sh@e865051)
MEGATRON_DEEPEP_SMS = 20


def ep_sm_share(dispatcher: str, device, coef: float | None = None) -> float | None:
    """Fraction by which an EP dispatch or combine slows the compute it runs beside: DeepEP's kernels hold
    :data:`MEGATRON_DEEPEP_SMS` of the device's ``sm_count`` SMs (compute progresses on the rest, so a second of
    hidden transfer costs ``20 / 132`` of a second on H100); the NCCL all-to-all and HybridEP (no default SM count
    in Megatron-Core: DeepEP's own) the device's ``comm_compute_interference`` (``coef``), as any SM-based collective.

    >>> from costmodel.spec.presets import load_cluster
    >>> h100 = load_cluster("h100-sxm").device
    >>> round(ep_sm_share("deepep", h100, 0.1), 3), ep_sm_share("alltoall", h100, 0.1)
    (0.152, 0.1)
    """
    return min(1.0, MEGATRON_DEEPEP_SMS / device.sm_count) if dispatcher == "deepep" else coef


@dataclass(frozen=True, kw_only=True)
class Fanout:
    """Expected destinations of one token over an EP group, the source's own rank and node included.

    ranks : distinct EP ranks holding at least one of its experts (1 .. min(topk, ep)).
    nodes : distinct nodes among those ranks (1 .. min(topk, nodes)).
    """

    ranks: float
    nodes: float


def _miss(total: int, group: float, k: int) -> float:
    """Probability that ``k`` experts drawn without replacement from ``total`` avoid a set of ``group``."""
    q = 1.0
    for i in range(k):
        q *= max(0.0, (total - group - i) / (total - i))
    return q


#: dispatchers that send one copy of a token per destination NVLink group over the network and forward it inside
#: the group over NVLink (:func:`deepep_bytes`): DeepEP's normal kernels (``deepep``), whose NVLink group is at most
#: ``NUM_MAX_NVL_PEERS = 8`` GPUs (deepseek-ai/DeepEP ``csrc/deep_ep.hpp``), and HybridEP (``hybridep``, Megatron-Core
#: ``--moe-flex-dispatcher-backend hybridep``: "NVIDIA's optimized dispatcher using TMA and IBGDA, fewer SMs, native
#: MNNVL support", megatron/core/transformer/moe/README.md@d98e8a6), whose group is the whole NVLink domain, 72 GPUs
#: on GB200 NVL72. No HybridEP kernel rate is measured: its network leg is charged at DeepEP V1's measured internode
#: row rate (assumed; :func:`deepep_time_s`), and the permutation it fuses into its kernel is still charged as
#: Megatron's separate permute (conservative)
HIERARCHICAL = ("deepep", "hybridep")
#: DeepEP's NVLink peers per RDMA rank (``NUM_MAX_NVL_PEERS``)
DEEPEP_NVL_PEERS = 8


def nvl_group(dispatcher: str, domain: int) -> int:
    """GPUs a hierarchical dispatcher forwards among over NVLink: DeepEP at most 8, HybridEP the NVLink domain.

    >>> nvl_group("deepep", 72), nvl_group("hybridep", 72), nvl_group("deepep", 8)
    (8, 72, 8)
    """
    return min(domain, DEEPEP_NVL_PEERS) if dispatcher == "deepep" else domain


@lru_cache(maxsize=4096)
def fanout(experts: int, topk: int, ep: int, domain: int, routing: str = "uniform", max_nodes: int = 0) -> Fanout:
    """Distinct ranks and nodes one token's ``topk`` experts lie on, expected over tokens.

    >>> f = fanout(128, 8, 8, 8)            # Qwen3-30B-A3B, EP 8 in one node: 16 experts per rank
    >>> round(f.ranks, 2), f.nodes          # 8 (1 - C(112, 8) / C(128, 8))
    (5.34, 1.0)
    >>> fanout(128, 8, 8, 8, "consecutive")  # experts 8t .. 8t+7 lie on one rank
    Fanout(ranks=1.0, nodes=1.0)
    >>> f = fanout(256, 8, 64, 8, "consecutive")   # DeepSeek-V3, EP 64: 4 experts per rank, 32 per node
    >>> f.ranks, f.nodes
    (2.0, 1.0)
    >>> round(fanout(256, 8, 64, 8).nodes, 2), fanout(256, 8, 64, 8, max_nodes=4).nodes
    (5.29, 4.0)
    """
    if routing not in ROUTINGS:
        raise SpecError("moe_routing", routing, f"one of {', '.join(ROUTINGS)}")
    if experts % ep:
        raise SpecError("ep", ep, f"a divisor of experts={experts}")
    g = min(ep, domain)
    nodes = ep / g  # a group that fills part of its last node counts that part (ep 12 on 8-GPU nodes: 1.5)
    per_rank = experts // ep
    if routing == "consecutive":
        period = experts // math.gcd(experts, topk)
        ranks = nodes_hit = 0
        for t in range(period):
            owners = {((t * topk + i) % experts) // per_rank for i in range(topk)}
            ranks += len(owners)
            nodes_hit += len({r // g for r in owners})
        return Fanout(ranks=ranks / period, nodes=nodes_hit / period)
    if not max_nodes or max_nodes >= nodes:
        return Fanout(
            ranks=ep * (1 - _miss(experts, per_rank, topk)), nodes=nodes * (1 - _miss(experts, per_rank * g, topk))
        )
    # node-limited: the M nodes are chosen by their best experts' scores, so each holds one of the
    # top-k (DeepEP's test replays 3.98 of 4 nodes at EP 64) and the other k - M experts are uniform
    # among the M nodes' experts; a rank is missed when its node's chosen expert is elsewhere
    # (1 - 1/g) and the k - M others avoid it
    m = max_nodes
    pool = per_rank * g * m
    return Fanout(ranks=m * g * (1 - (1 - 1 / g) * _miss(pool - m, per_rank, topk - m)), nodes=float(m))


@dataclass(frozen=True, kw_only=True)
class DeepEPBytes:
    """Per-GPU bytes of one DeepEP dispatch (normal kernels): ``nvlink_bytes`` leave the GPU over NVLink
    (its own tokens inside its node, and the tokens it forwards), ``rdma_bytes`` leave it over its NIC,
    ``rows_bytes`` are the rows it delivers in all (the kernel's work)."""

    nvlink_bytes: float
    rdma_bytes: float
    rows_bytes: float = 0.0  # every row delivered to a rank of the group, the own rank's included


def deepep_bytes(
    model: ModelSpec, tokens: float, ep: int, domain: int, row_bytes: float, max_nodes: int = 0
) -> DeepEPBytes:
    """The bytes of the module docstring's formula: ``tokens`` on this GPU, ``row_bytes`` per token row
    (``hidden * 2`` for BF16; FP8 dispatch with one FP32 scale per 128 values: ``hidden * (1 + 4/128)``).

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("qwen3-235b-a22b")   # 128 experts top-8, hidden 4096
    >>> b = deepep_bytes(m, 4096, 8, 8, 4096 * 2)          # one node: no RDMA
    >>> round(b.nvlink_bytes / (4096 * 8 * 4096 * 2), 3), b.rdma_bytes   # 5.34 ranks x 7/8 of 8 copies
    (0.584, 0.0)
    """
    g = min(ep, domain)
    nodes = ep / g
    f = fanout(model.experts, model.topk, ep, domain, model.moe_routing, max_nodes)
    rows = tokens * row_bytes
    return DeepEPBytes(
        nvlink_bytes=rows * f.ranks * (1 - 1 / g),
        rdma_bytes=rows * f.nodes * (1 - 1 / nodes) if nodes > 1 else 0.0,
        rows_bytes=rows * f.ranks,
    )


def deepep_time_s(b: DeepEPBytes, ep: int, cluster: ClusterSpec, engines: Engines = None, generation: int = 1) -> float:
    """Seconds of one DeepEP dispatch or combine moving ``b``: the slower of the two links (across nodes
    also the internode kernel's row rate, :data:`DEEPEP_INTERNODE_ROWS_BYTES_PER_S`), plus one NVLink
    latency (and one network latency when the group spans nodes), as
    :func:`costmodel.physics.comm.collectives.collective_time_s` charges an all-to-all's alpha.

    ``generation``: DeepEP's kernels, 1 (V1 normal kernels: what the hybrid-ep branch AutoModel pins and
    Megatron-Core's flex dispatcher ran through 2025-26, the step time's choice) or 2 (EPv2, DeepEP
    ``README.md``@dd758ca, released in b306af0 2026-04-30): V2 reaches its links' rates at 6-12 SMs, so no
    kernel rate is charged for it (none measured below the links)."""
    if generation not in (1, 2):
        raise SpecError("generation", generation, "1 (DeepEP V1 normal kernels) or 2 (EPv2)")
    if ep <= 1 or (b.nvlink_bytes <= 0 and b.rdma_bytes <= 0):
        return 0.0
    t = b.nvlink_bytes / link_bw_bytes_per_s(cluster, "intra", engines)
    alpha = cluster.intra_link.latency_s
    if b.rdma_bytes > 0:
        t = max(t, b.rdma_bytes / link_bw_bytes_per_s(cluster, "inter", engines))
        if generation == 1:
            t = max(t, b.rows_bytes / DEEPEP_INTERNODE_ROWS_BYTES_PER_S)
        alpha += cluster.inter_link.latency_s
    return t + alpha


def ep_alltoall_bytes(model: ModelSpec, n: float, tp: int, ep: int, domain: int, dispatcher: str = "alltoall") -> float:
    """Per-GPU send buffer of one MoE dispatch (and of the combine that mirrors it), in bytes.

    ``alltoall`` (Megatron-Core ``MoEAlltoAllTokenDispatcher``, NCCL AllToAll-V): one BF16 row per
    routed copy, ``n * topk / tp`` rows (tokens are split over TP ranks first), timed by
    :func:`costmodel.physics.comm.collectives.collective_time_s` ``"alltoall"``. ``deepep``: one row per distinct
    destination rank (:func:`fanout`), the rows DeepEP's normal kernels
    deliver; its time is not an all-to-all of this buffer but the slower of its NVLink and RDMA
    legs (:func:`ep_dispatch_time_s`, which both engines charge).

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("qwen3-235b-a22b")   # 128 experts, top-8; EP 8: 16 experts per rank
    >>> a, d = (ep_alltoall_bytes(m, 4096, 2, 8, 8, x) for x in ("alltoall", "deepep"))
    >>> round(d / a, 3)   # 5.34 distinct ranks of 8 copies
    0.667

    Padded to capacity (``ModelSpec.moe_pad_to_capacity``) the AllToAll dispatcher sends every expert its whole
    capacity, padding rows included (``MoEAlltoAllTokenDispatcher``@d98e8a6: ``permute(..., drop_and_pad=True)``
    makes ``capacity * num_experts`` rows, exchanged in equal splits): ``moe_capacity_factor`` times the rows. The
    flex dispatcher (DeepEP, HybridEP) sends the routed tokens and pads on the receiving rank.

    >>> from dataclasses import replace
    >>> round(ep_alltoall_bytes(replace(m, moe_capacity_factor=1.5, moe_pad_to_capacity=True), 4096, 2, 8, 8) / a, 2)
    1.5
    """
    rows = n * model.topk / tp
    nbytes = rows * model.hidden * ACT_BYTES
    if dispatcher not in HIERARCHICAL or ep <= 1 or not model.is_moe:
        return nbytes * (model.moe_capacity_factor if model.moe_pad_to_capacity else 1.0)
    f = fanout(model.experts, model.topk, ep, nvl_group(dispatcher, domain), model.moe_routing)
    return nbytes * f.ranks / model.topk


#: why the measured all-to-all table times Megatron-Core's dispatch (``nccl_table=True``): the table is
#: nccl-tests' ``alltoall_perf`` (AIConfigurator ``collector/network/collect_nccl.py``@095f58a: ``-w 40 -n 60``
#: (100 up to 16 MiB) ``-a 1 -c 0``; out of place, one send buffer split evenly over the ranks, each rank's share
#: sent to it with a grouped ``ncclSend``/``ncclRecv``, or NCCL's own ``ncclAlltoAll`` from 2.28); the dispatcher
#: calls ``torch.distributed.all_to_all_single`` (Megatron-LM ``core/tensor_parallel/mappings.py`` ``_AllToAll``
#: @d98e8a6: out of place into a new buffer, on the compute stream), which PyTorch's NCCL backend runs as the same
#: grouped ``ncclSend``/``ncclRecv`` over every rank (``torch/csrc/cuda/nccl.cpp`` ``all2all_single_*_split``).
#: Not the serving model's: inference engines dispatch with their own kernels, which no table here measures.
NCCL_TABLE_PROTOCOL = (
    "nccl-tests alltoall_perf, out of place, even splits = torch all_to_all_single's grouped send/recv"
)


def ep_dispatch_time_s(
    model: ModelSpec,
    tokens: float,
    tp: int,
    ep: int,
    cluster: ClusterSpec,
    dispatcher: str = "alltoall",
    engines: Engines = None,
    share: float = 1.0,
    nccl_table: bool = False,
) -> float:
    """Seconds of one MoE dispatch (or combine) of ``tokens`` per GPU under ``dispatcher``, the one
    place both engines and the serving model take it from. ``share``: the fraction of the tokens moved
    (one of ``k`` combine chunks: ``1/k``), latency paid in full. ``nccl_table``: the ``alltoall`` dispatcher's
    exchange is Megatron-Core's (training, both engines): timed from the measured nccl-tests all-to-all table
    where it has the GPU and the group (:data:`NCCL_TABLE_PROTOCOL`;
    :func:`costmodel.physics.comm.collectives.collective_time_s` ``tables=True``), else the modelled formula.

    >>> from costmodel.spec.presets import load_cluster, load_model
    >>> m, cl = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm").with_gpus(8)
    >>> a, d = (ep_dispatch_time_s(m, 16384, 1, 8, cl, x) for x in ("alltoall", "deepep"))
    >>> round(d / a, 2)   # one node: 5.34 distinct ranks of 8 copies (latency aside)
    0.67
    """
    if ep <= 1:
        return 0.0
    if dispatcher in HIERARCHICAL and model.is_moe:
        b = deepep_bytes(
            model, share * tokens / tp, ep, nvl_group(dispatcher, cluster.domain), model.hidden * ACT_BYTES
        )
        return deepep_time_s(b, ep, cluster, engines)
    a2a = ep_alltoall_bytes(model, tokens, tp, ep, cluster.domain, dispatcher)
    return collective_time_s("alltoall", share * a2a, ep, 1, cluster, engines=engines, tables=nccl_table or None)
