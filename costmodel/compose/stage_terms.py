"""A pipeline stage's end-of-step terms, shared by both engines: its per-micro-batch timing record
(:class:`StageTiming`), the gradient reduction and parameter gather after the last micro-batch (:func:`dp_comm`,
:func:`dp_latency`, :func:`stage_dp_terms`), its gradient bytes and its optimizer step."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dataclasses import dataclass
from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.physics.mechanics import offload
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import group_stride, layout
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.mechanics.grad_buckets import stage_grad_buckets
from costmodel.physics.memory.stage_memory import grad_elem_bytes, param_gather_bytes
from costmodel.physics.memory.stage_contents import expert_dp, stage_params
from costmodel.compose.overlap import CommLedger
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.compose.step import dp_buckets


@dataclass(frozen=True)
class StageTiming:
    """Per-micro-batch time of one pipeline stage (one GPU of it)."""

    stage: int
    fwd_s: float
    bwd_s: float
    recompute_s: float
    ledger: CommLedger
    interference_s: float

    @property
    def compute_s(self) -> float:
        return self.fwd_s + self.bwd_s

    @property
    def microbatch_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.recompute_s + self.ledger.total_exposed_s + self.interference_s


def _dp_groups(model: ModelSpec, c: ParallelConfig, stage: int, params) -> tuple:
    """``(parameters, group size, stride)`` of the dense (DP x CP) and expert (expert-DP) gradient
    groups of ``stage``; ``params``: its ``(dense, expert)`` parameters, or ``None`` for
    :func:`~costmodel.physics.memory.stage_contents.stage_params`."""
    dense, expert = stage_params(model, c, stage) if params is None else params
    return (
        (dense, c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp)),
        (
            expert,
            c.tp * c.dp * c.cp // (c.ep * c.expert_tp()),
            group_stride("edp", c.tp, c.cp, c.dp, c.ep, c.expert_tp()),
        ),
    )


def dp_comm(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, stage: int, params=None) -> tuple:
    """(gradient reduction, parameter gather) seconds after the last micro-batch of ``stage``.

    ZeRO-0 all-reduces FP32 gradients (Megatron-LM accumulates and reduces BF16 runs' gradients
    in FP32); ZeRO-1 reduce-scatters them and all-gathers BF16 parameters after the optimizer
    step (Megatron distributed optimizer); DeepSpeed ZeRO-2 reduces per micro-batch (in the
    stage ledger) and all-gathers parameters after the step; ZeRO-3 / FSDP2 do both per
    micro-batch (:func:`costmodel.frameworks.rules.semantics`).

    ``params``: the stage's ``(dense, expert)`` parameters (numpy arrays allowed: the cost tables
    pass one entry per layer count); default :func:`~costmodel.physics.memory.stage_contents.stage_params`.
    """
    sem = frameworks.of(c)
    t_grad = t_param = 0.0
    a = dma.resolve(cluster, c, model)
    dp, zero = dma.engines_of(cluster, a, "dp"), dma.engines_of(cluster, a, "zero")
    for params, size, stride in _dp_groups(model, c, stage, params):
        if size <= 1:
            continue
        if sem.step_grad:
            t_grad += collective_time_s(sem.step_grad, params * grad_elem_bytes(c), size, stride, cluster, engines=dp)
        if sem.step_param_gather:
            t_param += collective_time_s(
                "allgather", params * param_gather_bytes(c), size, stride, cluster, engines=zero
            )
    if model.tied_embeddings and c.pp > 1 and stage in (0, c.pp - 1):
        # word-embedding gradient all-reduce between first and last stage (Megatron-LM)
        t_grad += collective_time_s(
            "allreduce",
            model.embedding_params / c.tp * grad_elem_bytes(c),
            2,
            group_stride("pp", c.tp, c.cp, c.dp) * (c.pp - 1),
            cluster,
            engines=dp,
        )
    return t_grad, t_param


def dp_latency(
    model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, stage: int, params=None, counts=None
) -> tuple:
    """(gradient, parameter) latency of one more bucket: the alpha terms of the collectives of
    :func:`dp_comm` (a 1-byte message of the same groups), paid again by every extra bucket;
    ``params`` as in :func:`dp_comm` (a group without parameters pays none). ``counts``: the
    ``(dense, expert)`` collectives the framework issues (:mod:`costmodel.physics.mechanics.grad_buckets`): the
    latency is then their mean, each group's weighted by its own count (its buffer's buckets)."""
    lat = [[0.0, 0.0], [0.0, 0.0]]
    sem = frameworks.of(c)
    a = dma.resolve(cluster, c, model)
    dp, zero = dma.engines_of(cluster, a, "dp"), dma.engines_of(cluster, a, "zero")
    for i, (params, size, stride) in enumerate(_dp_groups(model, c, stage, params)):
        if size <= 1:
            continue
        held = params > 0
        if sem.step_grad:
            lat[0][i] = held * collective_time_s(sem.step_grad, 1.0, size, stride, cluster, engines=dp)
        if sem.step_param_gather:
            lat[1][i] = held * collective_time_s("allgather", 1.0, size, stride, cluster, engines=zero)
    if counts is None:
        return lat[0][0] + lat[0][1], lat[1][0] + lat[1][1]
    nd, ne = (np.asarray(x, float) for x in counts)
    n = np.maximum(nd + ne, 1.0)
    out = tuple((l0 * nd + l1 * ne) / n for l0, l1 in lat)
    return tuple(float(x) if np.ndim(x) == 0 else x for x in out)


class DpTerms(NamedTuple):
    """A stage's end-of-step DP traffic (:func:`stage_dp_terms`), in the order :func:`costmodel.compose.step.compose`
    takes its arrays: gradient reduction and parameter gather seconds, their per-bucket latencies, the
    collectives the framework issues and how they pipeline with the last backward (``None``: one piece each)."""

    t_grad: float
    t_param: float
    lat_grad: float
    lat_param: float
    buckets: float
    pieces: tuple | None


def stage_dp_terms(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, stage: int) -> tuple:
    """``(t_grad, t_param, lat_grad, lat_param, buckets, pieces)`` of ``stage``'s end-of-step DP
    traffic, the inputs of :func:`costmodel.compose.step.dp_exposure`: ``buckets`` the collectives the
    framework issues and ``pieces`` how they pipeline with the last backward
    (:func:`costmodel.physics.mechanics.grad_buckets.stage_grad_buckets`: Megatron-Core's per-chunk, per-buffer
    buckets, DeepSpeed's reduce buckets); ``pieces`` ``None`` for the frameworks that module does not
    model (PyTorch DDP's ``bucket_cap_mb``: ``grad_bytes / bucket_bytes`` buckets, :func:`dp_buckets`)."""
    t_grad, t_param = dp_comm(model, cluster, c, stage)
    gb = stage_grad_buckets(model, c, stage)
    if gb is None:
        lat_grad, lat_param = dp_latency(model, cluster, c, stage)
        return DpTerms(
            t_grad, t_param, lat_grad, lat_param, dp_buckets(grad_bytes(model, c, stage), c.bucket_bytes), None
        )
    lat_grad, lat_param = dp_latency(model, cluster, c, stage, counts=(gb.dense_count, gb.expert_count))
    return DpTerms(t_grad, t_param, lat_grad, lat_param, gb.count, gb.pieces())


def dp_interference(cluster: ClusterSpec, c) -> float:
    """The fraction by which the end-of-step DP reductions slow the last backward they overlap
    (:func:`costmodel.compose.step.dp_exposure`'s ``interference``): :meth:`DeviceSpec.interference_on` the DP x CP
    group's link. ``c``: anything with ``tp``, ``cp`` and ``dp`` (a plan, or the search's shape)."""
    scope = layout(c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp), cluster.domain).scope
    return cluster.device.interference_on(scope)


def stage_optimizer_s(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, stage: int) -> float:
    """Adam update of ``stage``'s local shard (sharded over DP x CP with ZeRO >= 1)."""
    shard_d = c.dp * c.cp if c.zero >= 1 else 1
    shard_e = expert_dp(c) if c.zero >= 1 else 1
    d, e = stage_params(model, c, stage)
    local = d / shard_d + e / shard_e
    # optimizer CPU offload (costmodel.physics.mechanics.offload): the GPU Adam on the kept part beside the host's part
    return offload.shard_optimizer_s(
        local, cluster, c.optimizer_dtype, c.optimizer_offload_fraction, c.overlap_cpu_optimizer_d2h_h2d
    )


def grad_bytes(model: ModelSpec, c: ParallelConfig, stage: int, params=None) -> float:
    """Gradient bytes of ``stage`` (``params`` as in :func:`dp_comm`)."""
    dense, expert = stage_params(model, c, stage) if params is None else params
    return (dense + expert) * grad_elem_bytes(c)
