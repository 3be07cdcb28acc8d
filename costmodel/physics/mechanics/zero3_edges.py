"""The embedding and LM-head units of a sharded (FSDP2 / DeepSpeed ZeRO-3) plan, per micro-batch.

The per-layer gathers and reduce-scatters (:func:`costmodel.engines.analytic.layer_timing`,
:mod:`costmodel.physics.mechanics.zero3_fetch`) cover the transformer blocks only. The frameworks shard the
embedding and the head too, and issue collectives for them every micro-batch:

* FSDP2 as torchtitan applies it (``torchtitan/distributed/fsdp.py@b5bcd76`` lines 252-265 and
  368; rules 33-34 of ``benchmarks/data/components/framework_mechanics.csv``): ``tok_embeddings``
  is its own unit (resharded after forward under the default policy, so gathered again in
  backward); ``[norm, output]`` is one unit with ``reshard_after_forward`` only under the policy
  ``always``: gathered once per micro-batch, in forward. Every unit reduce-scatters its gradients
  once per backward. With tied embeddings there is no separate head weight (the norm alone is
  left out: ``hidden`` elements).
* DeepSpeed ZeRO-3 fetches the embedding and the head like any module above
  ``stage3_param_persistence_threshold``, and their gradients enter the reduce buckets
  (``deepspeed/runtime/zero/stage3.py@edaa72212`` line 1533): the stage's buckets over all its
  tensors, embedding and head included, less the per-layer ones the layers are charged
  (:func:`costmodel.physics.mechanics.zero3_fetch.reduce_pieces`).

What is exposed: the embedding is the first module of the forward and the last of the backward,
so its forward gather has no earlier compute of the micro-batch to hide behind (FSDP2's pre-forward
hook issues it and the embedding lookup waits for it; DeepSpeed's first fetch of the trace is
not prefetched) and its gradient reduce-scatter no later compute (the next micro-batch's first
gather queues behind it on the same process group). Both are charged exposed on the stage that
holds the embedding. The head's gather (issued while the last block runs), the embedding's
backward re-gather (prefetched during block 0's backward) and the head's reduce-scatter (behind the
last blocks' backward) are charged as link time only, hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.physics.comm.groups import group_stride
from costmodel.physics.mechanics.grad_buckets import chunk_tensors
from costmodel.physics.memory.stage_memory import grad_elem_bytes, param_gather_bytes
from costmodel.physics.memory.stage_contents import layer_counts
from costmodel.physics.mechanics.zero3_fetch import deepspeed_buckets, deepspeed_reduces, reduce_pieces

WHY_EDGE = (
    "embedding unit: its forward gather and gradient reduce-scatter have no compute of the micro-batch to hide behind"
)


@dataclass(frozen=True, kw_only=True)
class EdgeCollectives:
    """The embedding/head collectives of one stage per micro-batch (parameters per GPU, elements)."""

    gathers_fwd: tuple = ()  # parameters of each forward all-gather
    gathers_bwd: tuple = ()
    reduces: tuple = ()  # gradient elements of each reduce-scatter
    exposed_gather: float = 0.0  # the forward gather of the embedding (elements)
    exposed_reduce: float = 0.0  # the embedding's gradient reduce-scatter (elements)


def _units(model, c) -> tuple[float, float]:
    """(embedding unit, head unit) parameters per GPU; the head unit 0 with tied embeddings."""
    emb = model.embedding_params / c.tp
    head = 0.0 if model.tied_embeddings else emb + float(model.hidden)
    return emb, head


def edge_collectives(model, c, stage: int) -> EdgeCollectives:
    """What the framework issues for the embedding (stage 0) and head (last stage) of ``stage``
    each micro-batch; empty when the plan gathers nothing per micro-batch.

    >>> from costmodel.spec.presets import load_model
    >>> from costmodel.spec.plan import ParallelConfig
    >>> e = edge_collectives(load_model("llama3-8b"), ParallelConfig(dp=64, zero=3, framework="fsdp2"), 0)
    >>> len(e.gathers_fwd), len(e.gathers_bwd), len(e.reduces)
    (2, 1, 2)
    """
    sem = frameworks.of(c)
    if not sem.per_microbatch or c.dp * c.cp <= 1 or c.framework not in ("fsdp2", "deepspeed"):
        return EdgeCollectives()
    emb, head = _units(model, c)
    first, last = stage == 0, stage == c.pp - 1
    if c.framework == "fsdp2":
        fwd = ([emb] if first else []) + ([head] if last and head > 0 else [])
        bwd = [emb] if first and sem.gather_backward else []
        red = fwd if sem.reduce_per_microbatch else []
        return EdgeCollectives(
            gathers_fwd=tuple(fwd) if sem.gather_forward else (),
            gathers_bwd=tuple(bwd),
            reduces=tuple(red),
            exposed_gather=emb if first and sem.gather_forward else 0.0,
            exposed_reduce=emb if first and sem.reduce_per_microbatch else 0.0,
        )
    # DeepSpeed ZeRO-3 (and ZeRO-2's per-micro-batch reduce): the stage's reduce buckets beyond the layers'
    tensors = [t for dense, _expert in chunk_tensors(model, c, stage, c.module_layout) for t in dense]
    n_stage = len(deepspeed_reduces(tensors[::-1], deepspeed_buckets(c)[1]))
    n_dense, n_moe = layer_counts(model, c, stage)
    charged = n_dense * len(reduce_pieces(model, c, False)[0]) + (
        n_moe and n_moe * len(reduce_pieces(model, c, True)[0])
    )
    extra = max(0, n_stage - charged)
    edge = (emb if first else 0.0) + (head if last else 0.0)
    red = tuple([edge / extra] * extra) if extra and edge > 0 and sem.reduce_per_microbatch else ()
    fwd = ([emb] if first else []) + ([head] if last and head > 0 else [])
    return EdgeCollectives(
        gathers_fwd=tuple(fwd) if sem.gather_forward else (),
        gathers_bwd=tuple(fwd) if sem.gather_backward else (),
        reduces=red,
        exposed_gather=emb if first and sem.gather_forward else 0.0,
        exposed_reduce=(emb if first else 0.0) if red else 0.0,
    )


def edge_times(model, cluster, c, stage: int) -> tuple[float, float, float]:
    """``(link, exposed forward, exposed backward)`` seconds per micro-batch of
    :func:`edge_collectives` over the data-parallel group (DP x CP), as the per-layer gathers."""
    e = edge_collectives(model, c, stage)
    if not (e.gathers_fwd or e.gathers_bwd or e.reduces):
        return 0.0, 0.0, 0.0
    size, stride = c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp)
    engines = dma.engines_of(cluster, dma.resolve(cluster, c, model), "zero")

    def ag(p):
        return collective_time_s("allgather", p * param_gather_bytes(c), size, stride, cluster, engines=engines)

    def rs(p):
        return collective_time_s("reducescatter", p * grad_elem_bytes(c), size, stride, cluster, engines=engines)

    link = sum(map(ag, e.gathers_fwd + e.gathers_bwd)) + sum(map(rs, e.reduces))
    ex_f = ag(e.exposed_gather) if e.exposed_gather > 0 else 0.0
    ex_b = rs(e.exposed_reduce) if e.exposed_reduce > 0 else 0.0
    return link, ex_f, ex_b
