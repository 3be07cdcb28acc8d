"""What one checkpoint of a plan costs: the bytes each rank writes, who writes them, how long the write takes,
how long training stops for it and how long a restart takes to read it back.

**What is saved.** The parameters and the optimizer state as one GPU holds them, read from the memory physics
(:func:`costmodel.physics.memory.stage_memory.model_state_bytes`: its weights and optimizer terms; gradients are
not saved): BF16 weights + FP32 master weights + Adam m and v (2 + 12 B per parameter) under Megatron-Core, the FP32
parameter + m and v (4 + 8 B) under FSDP2 with an FP32 optimizer, BF16 weights and moments (2 + 4 B) with a BF16
optimizer; an offloaded optimizer fraction is saved from host memory (no device-to-host copy). TP, PP and EP shard
everything; data parallelism shards what the plan's ZeRO stage shards (:func:`costmodel.frameworks.rules.of`).

**Who writes.** Every rank writes its own shards. A tensor replicated over the data-parallel ranks (the weights
under Megatron's ZeRO-0/1, the optimizer state under ZeRO-0) is written once: Megatron-Core's fully parallel save,
on by default (Megatron-LM@d98e8a64 ``megatron/training/config/training_config.py``: ``fully_parallel_save: bool =
field(default=True, ...)``, off with ``--no-ckpt-fully-parallel-save``), spreads those writes evenly over the
data-parallel group with CP (``megatron/training/checkpointing.py``: ``FullyParallelSaveStrategyWrapper`` over
``mpu.get_data_parallel_group(with_context_parallel=True)``; ``strategies/fully_parallel.py``
``distribute_chunks_to_ranks``: greedy, the least loaded rank first), and PyTorch DCP (torchtitan) does the same
(``torch/distributed/checkpoint/_dedup_save_plans.py``@1baca9bc: "only the smallest SavePlan in terms of planned
storage keeps the entry"). Without it (``fully_parallel=False``) the main replica, data-parallel rank 0, writes
them all. TP-replicated norms are charged on every TP rank (a few MB: an over-count).

**How long.** All ranks write at once: ``max(bytes of the busiest node / node storage bandwidth, all bytes /
aggregate storage bandwidth)``, the busiest node holding ``gpus_per_node`` ranks of the stage that writes most
(as TP-first rank placement puts them; conservative otherwise). The device-to-host copy of a rank's share runs at
its PCIe link (:mod:`costmodel.objectives.hardware`, one direction, a lower bound).

**Synchronous or not** (``mode``): ``sync`` stops training for the copy and the write. ``async`` stops it for the
copy only, the write runs in the background: Megatron's ``--async-save`` ("We do D2H synchronously for now",
``strategies/filesystem_async.py``@d98e8a64 ``prepare_write_data``; ``preload_tensors`` ends in
``torch.cuda.synchronize()``, then a persistent worker process writes) and torchtitan's ``async_mode = "async"``
(``dcp.async_save`` stages the state dict to CPU before it returns). ``async_pinned`` also overlaps the copy:
torchtitan's ``async_mode = "async_with_pinned_mem"`` stages into pinned memory while the next step runs forward and
backward and waits for it only before the optimizer step (pytorch/torchtitan@b5bcd76 ``torchtitan/trainer.py``:
``self.checkpointer.maybe_wait_for_staging()`` then ``self.optimizers.step()``), so it stops training for the part
of the copy that outlasts that window. An asynchronous checkpoint is durable only once written (``durable_s``):
a failure before then falls back to the previous one (:mod:`costmodel.objectives.failures` charges the lag).

**Reading it back** on a restart: every rank needs what it holds (replicas read once and exchanged, Megatron's
fully parallel load), charged as the write's storage time (reads assumed as fast as writes) plus the host-to-device
copy of what the rank holds.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> m, cl = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(16)
>>> c = checkpoint_cost(m, cl, ParallelConfig(tp=8, dp=2, zero=1))
>>> round(c.total_bytes / m.params, 1)          # BF16 weights + FP32 master, m, v: 2 + 12 B per parameter
14.0
>>> c.bytes_per_rank[0] == c.total_bytes / 16   # the replicated BF16 weights split over the 2 DP ranks
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from costmodel.frameworks import rules as frameworks
from costmodel.objectives.hardware import host_bytes_per_s
from costmodel.physics.memory.stage_contents import expert_dp, stage_params
from costmodel.physics.memory.stage_memory import model_state_bytes
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.units import GB

#: ``sync`` stops training for the copy and the write; ``async`` for the copy; ``async_pinned`` for the part of the
#: copy that outlasts the next step's forward and backward
MODES = ("sync", "async", "async_pinned")
#: aggregate storage write bandwidth, GB/s: Meta's Tectonic for Llama 3, "a sustainable throughput of 2 TB/s and a
#: peak throughput of 7 TB/s" (Dubey et al. 2024, arXiv 2407.21783, section 3.3.1, Storage); another cluster's
#: storage is assumed as fast unless stated
DEFAULT_STORAGE_GBPS = 2000.0
#: one node's storage bandwidth, GB/s: "a GDS-enabled application should be able to read data at over 40 GBps"
#: per DGX H100 on the DGX SuperPOD storage fabric (NVIDIA DGX SuperPOD H100 reference architecture); writes are
#: assumed as fast as reads
DEFAULT_NODE_STORAGE_GBPS = 40.0


@dataclass(frozen=True)
class CheckpointCost:
    """One checkpoint of one plan (bytes, seconds)."""

    mode: str
    bytes_per_rank: tuple[float, ...]  # per pipeline stage: the most one rank of the stage writes
    total_bytes: float  # the checkpoint's size (each tensor once)
    write_s: float  # all ranks writing to storage at once
    d2h_s: float  # the busiest rank's device-to-host copy
    blocking_s: float  # training stopped per checkpoint
    durable_s: float  # from the checkpoint's start until it is on storage
    load_s: float  # reading it back on a restart
    writers: str
    sources: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "bytes_per_rank": list(self.bytes_per_rank),
            "total_bytes": self.total_bytes,
            "write_s": self.write_s,
            "d2h_s": self.d2h_s,
            "blocking_s": self.blocking_s,
            "durable_s": self.durable_s,
            "load_s": self.load_s,
            "writers": self.writers,
            "sources": list(self.sources),
        }


def mode_of(value) -> str:
    """``value`` as one of :data:`MODES` (``True`` is ``async``, ``False`` is ``sync``)."""
    if value is True or value is False:
        return "async" if value else "sync"
    if value not in MODES:
        raise SpecError("async_ckpt", value, f"one of {', '.join(MODES)} (or True / False)")
    return value


def rank_bytes(
    model: ModelSpec, c: ParallelConfig, stage: int, *, fully_parallel: bool = True
) -> tuple[float, float, float]:
    """(written, written from the GPU, held) checkpoint bytes of the rank of ``stage`` that writes most."""
    offload = c.optimizer_offload_fraction
    weights, _, optim = model_state_bytes(model, replace(c, optimizer_offload_fraction=0.0) if offload else c, stage)
    sem = frameworks.of(c)
    dense, expert = stage_params(model, c, stage)
    # the fraction of a DP-replicated tensor one replica writes under a fully parallel save
    share = (dense / (c.dp * c.cp) + expert / expert_dp(c)) / (dense + expert) if dense + expert else 1.0
    spread = share if fully_parallel else 1.0
    w = weights if sem.shard_weights else weights * spread
    o = optim if sem.shard_optimizer else optim * spread
    return w + o, w + o * (1.0 - offload), weights + optim * (1.0 - offload)


def checkpoint_cost(
    model: ModelSpec,
    cluster: ClusterSpec,
    c: ParallelConfig,
    *,
    mode="sync",
    storage_gbps: float = DEFAULT_STORAGE_GBPS,
    node_storage_gbps: float = DEFAULT_NODE_STORAGE_GBPS,
    host_gbps: float | None = None,
    fully_parallel: bool = True,
    window_s: float = 0.0,
) -> CheckpointCost:
    """One checkpoint of plan ``c`` (module docstring). ``storage_gbps`` / ``node_storage_gbps``: aggregate and
    per-node storage bandwidth (GB/s); ``host_gbps``: the device's host link, one direction (GB/s; default from
    :mod:`costmodel.objectives.hardware`); ``window_s``: the compute an ``async_pinned`` copy overlaps (one
    step's forward and backward)."""
    mode = mode_of(mode)
    for name, value in (("storage_gbps", storage_gbps), ("node_storage_gbps", node_storage_gbps)):
        _positive(name, value)
    _positive("window_s", window_s, allow_zero=True)
    if fully_parallel is not True and fully_parallel is not False:
        raise SpecError("fully_parallel", fully_parallel, "True or False")
    host, host_source = host_bytes_per_s(cluster.device.name, host_gbps)
    per_stage = [rank_bytes(model, c, s, fully_parallel=fully_parallel) for s in range(c.pp)]
    spread = per_stage if fully_parallel else [rank_bytes(model, c, s) for s in range(c.pp)]
    total = sum(w for w, _, _ in spread) * (c.gpus // c.pp)
    most = max(w for w, _, _ in per_stage)
    node = min(cluster.gpus_per_node, c.gpus) * most
    storage_s = max(node / (node_storage_gbps * GB), total / (storage_gbps * GB))
    d2h = max(g for _, g, _ in per_stage) / host
    blocking = {"sync": d2h + storage_s, "async": d2h, "async_pinned": max(0.0, d2h - window_s)}[mode]
    load = storage_s + max(h for _, _, h in per_stage) / host
    replicated = _replicated(c)
    writers = "every rank writes its shards" + (
        f"; the data-parallel replicas of the {replicated} are written once, "
        + (
            f"spread over the {c.dp * c.cp} data-parallel ranks (fully parallel save)"
            if fully_parallel
            else "by data-parallel rank 0"
        )
        if replicated and c.dp * c.cp > 1
        else ""
    )
    sources = (
        f"storage {storage_gbps:g} GB/s aggregate, {node_storage_gbps:g} GB/s per node"
        + (
            " (defaults: Llama 3 section 3.3.1 Tectonic sustained; DGX SuperPOD H100 storage fabric)"
            if (storage_gbps, node_storage_gbps) == (DEFAULT_STORAGE_GBPS, DEFAULT_NODE_STORAGE_GBPS)
            else ""
        ),
        f"device-to-host {host / GB:g} GB/s per GPU (PCIe peak, one direction: a lower bound on the copy; "
        f"{host_source})",
        "reads assumed as fast as writes",
    )
    return CheckpointCost(
        mode,
        tuple(w for w, _, _ in per_stage),
        total,
        storage_s,
        d2h,
        blocking,
        d2h + storage_s,
        load,
        writers,
        sources,
    )


def _replicated(c: ParallelConfig) -> str:
    sem = frameworks.of(c)
    parts = [
        name
        for name, sharded in (("weights", sem.shard_weights), ("optimizer state", sem.shard_optimizer))
        if not sharded
    ]
    return " and ".join(parts)


def _positive(name: str, value, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        raise SpecError(name, value, "a non-negative finite number" if allow_zero else "a positive finite number")
