"""The best pipeline layout for a stated plan whose layers do not split evenly.

Megatron-Core refuses ``pp * vp`` not dividing the layers unless a layout says where they go
(``megatron/training/arguments.py`` at d98e8a64), so ``evaluate`` without a split chooses one:
the per-rank layer counts ``(first, mid, ..., mid, last)`` (any counts >= 1, the middle ranks
equal, as the search's splits) with the lowest closed-form step time among those that fit in
memory (the fastest of all if none fits: the report then says it does not fit), each rank's layers placed over its ``vp`` chunks as
:func:`costmodel.spec.stages.chunk_layers` places them (the embedding on virtual stage 0, the loss
on the last: Megatron-Core's rule). Candidates are scored by :class:`costmodel.training.fastpath.Scorer`,
the closed form of ``evaluate``; every split of that form is scored (exhaustive), so the choice
is the optimum of the closed form over them.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from costmodel.spec.plan import ParallelConfig
>>> lay = best_layout(load_model("llama3.1-405b"), load_cluster("h100-sxm").with_gpus(1024),
...                   Workload(global_batch=1024, seq_len=4096), ParallelConfig(tp=8, pp=16, dp=8, sp=True, zero=1))
>>> sum(lay.per_rank()), lay.vp, max(lay.per_rank())
(126, 1, 8)
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.training.fastpath import Scorer
from costmodel.spec.layout import Layout, from_split
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload


def rank_splits(layers: int, pp: int, first_min: int = 1):
    """Every ``(first, mid, ..., mid, last)`` of ``layers`` over ``pp`` ranks, each count >= 1
    (``first >= first_min``: an MoE model's leading dense layers stay on rank 0)."""
    if pp == 1:
        yield (layers,)
        return
    if pp == 2:
        for f in range(max(1, first_min), layers):
            yield (f, layers - f)
        return
    for mid in range(1, (layers - 2) // (pp - 2) + 1):
        rest = layers - (pp - 2) * mid
        for f in range(max(1, first_min), rest):
            yield (f,) + (mid,) * (pp - 2) + (rest - f,)


def needs_layout(model: ModelSpec, c: ParallelConfig) -> bool:
    """A plan that states no split and whose layers do not divide evenly (Megatron needs one)."""
    return c.pp > 1 and c.layout is None and c.layers_per_stage is None and model.layers % (c.pp * c.vp) != 0


def best_layout(model: ModelSpec, cluster: ClusterSpec, workload: Workload, c: ParallelConfig) -> Layout:
    """The layout of ``c`` with the lowest closed-form step time among those that fit (module docstring)."""
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(c.gpus)
    scorer = Scorer(model, cluster, workload)
    best, first = None, None
    for split in rank_splits(model.layers, c.pp):
        first = first or split
        s = scorer.score(replace(c, layers_per_stage=split, layout=None))
        if s.status == "invalid":
            continue
        key = (not s.fits, s.step_time_s, split)
        if best is None or key < best[0]:
            best = (key, split)
    if best is None:  # every split refused: the plan's own rule (e.g. micro-batches vs pp) says why
        if first is not None:
            validate_config(model, cluster, workload, replace(c, layers_per_stage=first, layout=None))
        raise SpecError("pp", c.pp, f"at most layers={model.layers} (a pipeline rank holds at least one layer)")
    return from_split(best[1], c.vp, model.mtp_layers)  # MTP with the loss (costmodel.spec.layout.from_chunks)


def with_best_layout(model: ModelSpec, cluster: ClusterSpec, workload: Workload, c: ParallelConfig) -> ParallelConfig:
    """``c`` with :func:`best_layout` when it needs one (:func:`needs_layout`), else ``c``."""
    if workload.mode != "train" or not needs_layout(model, c):
        return c
    return replace(c, layout=best_layout(model, cluster, workload, c))
