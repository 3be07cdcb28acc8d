"""The step-end gradient collectives a framework issues on one pipeline stage: how many, how large.

Megatron-Core (``megatron/core/distributed``, ``megatron/training/training.py`` at
d98e8a64ddf34856e74b24714e3bedb2f5a39553):

* every model chunk is its own ``DistributedDataParallel``, with its own gradient buffers:
  dense parameters and expert-parallel ones apart (``group_params_for_buffers``, keyed by
  ``is_expert_parallel``, ``distributed_data_parallel.py@d98e8a64`` line 192), the expert buffer
  reduced over the expert-data-parallel group (``intra_expt_dp_group``, lines 306-312);
* a buffer is split into buckets walking its parameters in reverse (backprop) order; a bucket
  closes after the parameter that brings it to ``>= bucket_size`` elements, the rest is one more
  bucket (``param_and_grad_buffer.py@d98e8a64`` ``_compute_default_per_buffer_param_layout``,
  lines 980-996; the distributed optimizer's layout the same, ``distrib_optimizer.py`` 567-575);
* bucketing is off -- one bucket per buffer -- on pipeline ranks > 0 and on every model chunk
  after the first (``distributed_data_parallel.py@d98e8a64`` lines 146-155: "data-parallel
  communication on these stages is not on the critical path"; ``training.py@d98e8a64``
  lines 2504-2514), and without ``--overlap-grad-reduce`` (``bucket_size = None``);
* with ``--overlap-grad-reduce`` a bucket is launched from the backward hook once all its
  gradients of the last micro-batch are ready (``param_and_grad_buffer.py@d98e8a64`` lines
  682-685); without it all buckets are reduced after backward (``finish_grad_sync``).

DeepSpeed (``deepspeed/runtime`` at edaa7221267243c7be7fb49c5d5f5c4fb97b4641): the ZeRO-1/2
optimizer reduces gradients in ``reduce_bucket_size``-element buckets, a bucket reduced before a
tensor that would overflow it (``zero/stage_1_and_2.py@edaa72212`` line 1201:
:func:`costmodel.physics.mechanics.zero3_fetch.deepspeed_reduces`). Under the pipeline engine this runs once,
after the last backward, over the parameter groups in forward order (``engine.py@edaa72212``
lines 2906-2910 ``reduce_gradients(pipeline_parallel=True)``; ``stage_1_and_2.py@edaa72212``
lines 861-881: ``overlap_comm`` is forced off, ``for param in group``), ZeRO-0 through
``buffered_allreduce_fallback`` in ``MEMORY_OPT_ALLREDUCE_SIZE`` = 5e8-element buffers
(``engine.py@edaa72212`` line 160). Outside a pipeline the backward hooks fill the buckets in
backprop order, overlapped when ``overlap_comm`` (the plan's bucket > 0).

PyTorch DDP / FSDP2 (``framework="fsdp2"``): not modelled here (:func:`stage_grad_buckets`
returns ``None``; the caller keeps ``costmodel.compose.step.dp_buckets``).

Parameter tensors per layer are :func:`costmodel.physics.mechanics.zero3_fetch.layer_tensors` (Megatron-Core's fused
``linear_qkv`` / ``linear_fc1``); the embedding leads the first model chunk of stage 0, the LM
head (and final norm) closes the last chunk of the last stage.

>>> close_ge([30.0, 30.0, 30.0, 5.0], 50.0)
[60.0, 35.0]
>>> close_ge([30.0, 30.0], None)
[60.0]
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.frameworks import rules as frameworks
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.physics.memory.stage_contents import chunk_counts, expert_dp, stage_params
from costmodel.physics.mechanics.zero3_fetch import coalesce, deepspeed_buckets, deepspeed_reduces, fill, layer_tensors

#: DeepSpeed ``MEMORY_OPT_ALLREDUCE_SIZE``: the all-reduce buffer of ``allreduce_gradients``
#: (ZeRO-0 and the BF16 optimizer), elements (``deepspeed/runtime/engine.py@edaa72212`` line 160)
DS_ALLREDUCE_BUFFER = 5e8


def close_ge(tensors: list[float], bucket: float | None) -> list[float]:
    """Megatron-Core's bucket layout over ``tensors`` (already in reverse order): a bucket closes
    after the tensor that brings it to ``>= bucket`` elements; ``None``: one bucket."""
    if not tensors:
        return []
    if bucket is None:
        return [float(sum(tensors))]
    return coalesce(tensors, bucket)


def close_ge_runs(runs, bucket: float | None) -> list[float]:
    """:func:`close_ge` over ``runs`` of ``(tensors, repeats)`` (identical layers in a row), one pass
    per distinct bucket fill at a layer's start (the searches ask for every layer count).

    >>> close_ge_runs([((30.0, 30.0), 2), ((5.0,), 1)], 50.0) == close_ge([30.0] * 4 + [5.0], 50.0)
    True
    """
    if bucket is None:
        total = float(sum(sum(t) * k for t, k in runs))
        return [total] if runs and total > 0 else []
    out, acc = [], 0.0
    for tensors, reps in runs:
        memo: dict = {}
        for _ in range(reps):
            hit = memo.get(acc)
            if hit is None:
                hit = memo[acc] = fill(tensors, bucket, acc)
            out.extend(hit[0])
            acc = hit[1]
    if acc > 0:
        out.append(acc)
    return out


def _chunk_runs(model, c, stage: int, layout: str = "fused") -> list[tuple[list, list]]:
    """Per model chunk of ``stage``: its ``(dense, expert)`` tensors in forward order as runs of
    ``(tensors, repeats)`` (:func:`chunk_tensors` unrolls them)."""
    chunks = []
    for nd, nm in chunk_counts(model, c, stage):
        dense, expert = [], []
        for moe, k in ((False, nd), (True, nm)):
            if k:
                d, e = _layer_tensors(model, c, moe, layout)
                dense.append((d, k))
                expert.append((e, k))
        chunks.append([dense, expert])
    tot_d, _ = stage_params(model, c, stage)
    emb = model.embedding_params / c.tp if stage == 0 else 0.0
    if emb:
        chunks[0][0].insert(0, ((emb,), 1))
    head = tot_d - sum(sum(t) * k for ch in chunks for t, k in ch[0])
    if head > 0.5:
        chunks[-1][0].append(((head,), 1))
    return [(d, [(t, k) for t, k in e if t]) for d, e in chunks]


_TENSORS: dict = {}


def _layer_tensors(model, c, moe: bool, layout: str) -> tuple[tuple, tuple]:
    """:func:`costmodel.physics.mechanics.zero3_fetch.layer_tensors` as tuples, memoised on what it reads (``tp``, ``ep``,
    expert TP, the layer kind and module layout): the searches probe every layer count of hundreds of
    stages, each asking again for the same few layers."""
    key = (model, c.tp, c.ep, c.expert_tp(), moe, layout)
    hit = _TENSORS.get(key)
    if hit is None:
        if len(_TENSORS) > 4096:
            _TENSORS.clear()
        d, e = layer_tensors(model, c, moe, layout)
        hit = _TENSORS[key] = (tuple(d), tuple(e))
    return hit


def chunk_tensors(model, c, stage: int, layout: str = "fused") -> list[tuple[list[float], list[float]]]:
    """Per model chunk of ``stage`` (chunk order, as many layers as the plan's layout puts there):
    its ``(dense, expert)`` parameter tensors in forward order, elements on one GPU; the embedding
    first in chunk 0 of stage 0, the head (and final norm) last in the last chunk of the last
    stage, so their sums are :func:`costmodel.physics.memory.stage_contents.stage_params`."""
    return [
        tuple([x for t, k in runs for x in list(t) * k] for runs in ch) for ch in _chunk_runs(model, c, stage, layout)
    ]


def _reversed_runs(runs):
    return [(t[::-1], k) for t, k in runs[::-1]]


@dataclass(frozen=True, kw_only=True)
class GradBuckets:
    """The step-end gradient collectives one GPU of a stage issues.

    ``chunks``: per model chunk (chunk order), per gradient buffer (dense, then expert), the
    elements of each of its buckets in issue order (a buffer whose group has one rank issues none,
    and is left out). ``overlapped``: issued from the backward hooks as buckets fill (else all
    after backward). ``bucketed``: per chunk, whether its buckets are issued as they fill
    (Megatron: chunk 0 of pipeline rank 0 only); an unbucketed chunk's collectives all start when
    its backward ends."""

    chunks: tuple[tuple[tuple[float, ...], ...], ...]
    overlapped: bool
    bucketed: tuple[bool, ...]
    dense_count: int = 0
    expert_count: int = 0

    @property
    def count(self) -> int:
        """Collectives in all: every one pays its latency."""
        return self.dense_count + self.expert_count

    def chunk_count(self, chunk: int) -> int:
        return sum(len(b) for b in self.chunks[chunk])

    def pieces(self) -> tuple[float, float]:
        """``(k_first, k_rest)``: pieces the reduction of chunk 0 / of each later chunk pipelines
        with that chunk's last backward (:func:`costmodel.compose.step.dp_exposure`); ``(0, 0)``: not
        overlapped. A bucketed chunk pipelines its buckets, an unbucketed one starts when its
        backward ends (one piece)."""
        if not self.overlapped or not self.count:
            return 0.0, 0.0
        k = [float(max(1, self.chunk_count(i))) if b else 1.0 for i, b in enumerate(self.bucketed)]
        return k[0], (k[1] if len(k) > 1 else 1.0)


def stage_grad_buckets(model, c, stage: int) -> GradBuckets | None:
    """The step-end gradient collectives of ``stage`` under ``c.framework`` (module docstring), or
    ``None`` where the framework reduces no gradients after the step or is not modelled here."""
    if not frameworks.of(c).step_grad or c.framework not in ("megatron", "deepspeed"):
        return None
    # only these fields shape the buckets (a search asks for many plans that differ elsewhere)
    key = (
        model,
        c.framework,
        c.tp,
        c.pp,
        c.dp,
        c.cp,
        c.ep,
        c.expert_tp(),
        c.vp,
        c.zero,
        c.bucket_bytes,
        c.grad_dtype,
        c.layers_per_stage,
        c.layout,
        c.module_layout,
        stage,
    )
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) > 65536:
            _CACHE.clear()
        hit = _CACHE[key] = _compute(model, c, stage)
    return hit


_CACHE: dict = {}


def _cache_clear() -> None:
    _CACHE.clear()
    _TENSORS.clear()


stage_grad_buckets.cache_clear = _cache_clear  # as an lru_cache (analytic._layer_base): benchmarks start cold


def _compute(model, c, stage: int) -> GradBuckets:
    dense_n, expert_n = c.dp * c.cp, expert_dp(c)
    chunks = _chunk_runs(model, c, stage, c.module_layout)  # Megatron: always "fused" (ParallelConfig)
    if c.framework == "megatron":
        size = c.bucket_bytes / grad_elem_bytes(c) if c.bucket_bytes > 0 else None
        out, bucketed, nd, ne = [], [], 0, 0
        for i, (dense, expert) in enumerate(chunks):
            b = size if (i == 0 and stage == 0) else None  # bucketing on pp rank 0, chunk 0 only
            d = tuple(close_ge_runs(_reversed_runs(dense), b)) if dense_n > 1 else ()
            e = tuple(close_ge_runs(_reversed_runs(expert), b)) if expert_n > 1 else ()
            out.append(tuple(x for x in (d, e) if x))
            bucketed.append(b is not None)
            nd, ne = nd + len(d), ne + len(e)
        return GradBuckets(
            chunks=tuple(out), overlapped=c.bucket_bytes > 0, bucketed=tuple(bucketed), dense_count=nd, expert_count=ne
        )
    # DeepSpeed: one flat stage-wide pass over every parameter (the ZeRO optimizer's groups)
    tensors = [x for d, e in chunks for t, k in d + e for x in list(t) * k]
    if dense_n <= 1:
        return GradBuckets(chunks=((),), overlapped=False, bucketed=(False,))
    if c.zero == 0:  # engine.allreduce_gradients -> buffered_allreduce_fallback after backward
        pieces, overlapped = deepspeed_reduces(tensors, DS_ALLREDUCE_BUFFER), False
    elif c.pp > 1:  # the pipeline engine: reduce_gradients once after the last backward, forward order
        pieces, overlapped = deepspeed_reduces(tensors, deepspeed_buckets(c)[1]), False
    else:  # the backward hooks of the last micro-batch fill the buckets (overlap_comm: the plan's bucket)
        pieces, overlapped = deepspeed_reduces(tensors[::-1], deepspeed_buckets(c)[1]), c.bucket_bytes > 0
    return GradBuckets(chunks=((tuple(pieces),),), overlapped=overlapped, bucketed=(True,), dense_count=len(pieces))
