"""The time of one serving-engine step: a token budget of prefill chunks mixed with decodes.

A continuous-batching engine (vLLM V1, SGLang, TensorRT-LLM in-flight batching) runs one
forward pass per *step* over every token it scheduled: the prompt chunks of requests being
prefilled and one token of each decoding request (Agrawal et al. 2024, "Sarathi-Serve",
arXiv 2403.02310, section 4: a hybrid batch). Its time splits into parts that scale with
different quantities, so a step of any mix is priced from four pieces of the same op
inventory as :func:`costmodel.serving.phase._phase` (one place for the layer costs):

* ``body_s(m)``: every GEMM, element-wise op and TP/EP collective of all layers for ``m``
  tokens, with the attention kernel launched but holding no work (``_phase`` at
  ``decode=True, seq_len=1, sampled=0``). Its small-``m`` regime reads every weight once
  (HBM-bound), its large-``m`` regime is compute-bound; evaluated on a grid of ``m`` and
  interpolated linearly between grid points (exact on the grid; the grid is dense below 16).
* ``head_s(s)``: the LM head, logits gather and sampling of the ``s`` requests that emit a
  token this step (decodes, and prompts whose last chunk ran).
* prefill attention: a chunk of ``c`` query tokens after ``p`` cached ones attends to
  ``p + c/2`` keys on average under the causal mask, so it costs ``c * (p + c/2)`` query-key
  pairs at :func:`costmodel.physics.kernels.compute.attention_flops` per pair and the fused-attention rate
  (the same rate and causal half as :func:`costmodel.physics.kernels.compute._attention_core`; a whole
  prompt, ``p = 0``, gives its ``0.5 * flops``).
* decode attention: one query against each cached token, the roofline of
  :func:`costmodel.physics.kernels.compute._decode_attention` (KV bytes read, or FLOPs for MLA), linear in the
  number of cached tokens the step's decodes read. The call's fixed time (the KV-cache write and the decode
  kernel at small context, measured per GPU in AIConfigurator's generation-attention tables:
  :mod:`costmodel.physics.kernels.decode_attention`, 9-12 us on Hopper and Blackwell) is in ``body_s``. MLA
  where the engine's measured MLA kernel times it (:mod:`costmodel.physics.tables.mla`) is not linear in the
  cached tokens: a step's decodes share one call, priced at their count and mean context (:meth:`StepCost.mla_s`).

Launches. Engines replay decode steps as CUDA graphs, so no per-step or per-layer launch term is charged: a
step is the sum of its kernels and collectives. vLLM's default (``-O2``) is ``cudagraph_mode
FULL_AND_PIECEWISE``, captured at ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` tokens up to
``max_cudagraph_capture_size`` (capped at ``max_num_batched_tokens``; larger decode batches "fall back to eager
execution"): ``vllm/config/vllm.py`` ``VllmConfig._set_cudagraph_sizes`` at vllm-project/vllm@000fc94, whose
default ceiling is ``min(2 * max_num_seqs * (1 + num_speculative_tokens), 512)`` (the same function as quoted
at 5ac2684; not read at 000fc94). Each kernel keeps the device's fixed per-kernel time
(``DeviceSpec.kernel_overhead_s``, 4 us): a GPU-side time that graphs do not remove (isolated back-to-back
kernels, launch hidden by the queue, fit 2.5 us on B200 and 4.5 us on H100,
:data:`costmodel.physics.kernels.kernel_fits.STREAM_FITS`). Decode batches above the capture ceiling run
eagerly; their host launch cost is not charged (a gap). SGLang's prefill steps run eagerly: the host time of
that forward is a floor under them (:mod:`costmodel.serving.engine_host`, which wraps this cost). MoE layers
run as the engines run them (:func:`costmodel.serving.phase.serving_layer_ops`,
:mod:`costmodel.physics.kernels.moe_decode`), whatever the :class:`~costmodel.spec.workload.Workload` mode the
probes below are built with.

With pipeline parallelism the running requests form ``mm = min(pp, running)`` micro-batches
(vLLM's virtual engines); a step's period is ``_phase``'s ``max(path + P2P, mm * slowest
stage)`` for ``m / mm`` tokens each, and the attention work of all micro-batches is spread
over ``mm`` (exact when the pipeline is full, ``mm = pp``). The head is charged once per step.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> sc = step_cost(load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(1), "bf16", ParallelConfig(), "bf16")
>>> sc.body_s(8) < sc.body_s(4096)           # a small step reads the weights; a big one computes
True
>>> abs(sc.time_s(tokens=16, sampled=16, prefill_pairs=0, decode_ctx=0) - sc.body_s(16) - sc.head_s(16)) < 1e-15
True
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import replace
from functools import lru_cache

from costmodel.physics.kernels.compute import _decode_attention, attention_flops
from costmodel.physics.kernels.decode_attention import decode_attention_fixed_s, mla_curve
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.kernels.kvcache import kv_dtype_bytes
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload

#: exact grid below this token count, geometric (x GRID_RATIO) above
GRID_EXACT = 16
GRID_RATIO = 1.25
_PROBE_CTX = 1 << 20  # cached tokens of the probe decode-attention op (its cost is linear in them)


def _grid_point(k: int) -> int:
    """The ``k``-th grid token count: 1..GRID_EXACT, then geometric."""
    if k < GRID_EXACT:
        return k + 1
    return int(round(GRID_EXACT * GRID_RATIO ** (k - GRID_EXACT + 1)))


_GRID: list[int] = []  # _grid_point(0), _grid_point(1), ... as far as asked (strictly increasing)


def _grid_index(x: float) -> int:
    """The first ``k`` with ``_grid_point(k) >= x`` (a search of the grid's points, computed once).

    >>> [_grid_index(x) for x in (1, 16, 16.5, 20, 21)]
    [0, 15, 16, 16, 17]
    """
    while not _GRID or _GRID[-1] < x:
        _GRID.append(_grid_point(len(_GRID)))
    return bisect_left(_GRID, x)


class StepCost:
    """Seconds of one engine step of plan ``config`` (see the module doc); build with :func:`step_cost`."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, dtype: str, config: ParallelConfig, kv_dtype: str):
        self.model, self.cluster, self.dtype, self.config, self.kv_dtype = model, cluster, dtype, config, kv_dtype
        dev, tp = cluster.device, config.tp
        rate = dev.peak_bf16_flops_per_s * dev.attention_efficiency
        self.prefill_pair_s = model.layers * attention_flops(model, 1, 1, tp) / rate
        probe = _decode_attention(model, dev, 1, _PROBE_CTX, tp, kv_dtype_bytes(kv_dtype))
        # the call's fixed time is in body_s (its attention op at one cached token); this is the cache reads
        self.decode_ctx_s = model.layers * (probe.fwd_s - decode_attention_fixed_s(dev)) / _PROBE_CTX
        # MLA from the engine's measured kernel: its time is no line in the cached tokens (a batch's sequences
        # share a call: its time at b sequences of the mean context, less the fixed time body_s holds)
        self._mla_f = mla_curve(model, dev, tp, kv_dtype_bytes(kv_dtype))
        self.mla = self._mla_f is not None
        self.ctx_octaves = self.mla  # the scheduler's decode-run lines: one per octave of the context
        self._mla_at: dict = {}  # mla_s by its arguments (the replays of one plan price the same steps again)
        self._body: dict[tuple[int, int], float] = {}
        self._head: dict[int, float] = {}
        # time_s's memo of body_s / head_s by their exact arguments (a replay prices thousands of
        # steps at a few hundred distinct token counts); values are body_s's and head_s's own
        self._body_at: dict = {}
        self._head_at: dict = {}
        self._probes: dict = {}

    # -- the pieces ------------------------------------------------------------------
    def _phase_s(self, tokens: int, micro_batches: int, sampled: int, path_only: bool) -> float:
        from costmodel.serving.phase import _phase  # the layer costs live there

        mb = max(1, math.ceil(tokens / micro_batches))
        if mb not in self._probes:  # the probe's workload and plan, built (and checked) once per mb
            self._probes[mb] = Workload(global_batch=mb, seq_len=1, dtype=self.dtype), replace(self.config, mb=mb)
        w, c = self._probes[mb]
        ph = _phase(
            self.model,
            self.cluster,
            w,
            c,
            decode=True,
            kv_dtype=self.kv_dtype,
            micro_batches=micro_batches,
            sampled=sampled,
        )
        return sum(ph.stage_s) if path_only else ph.period_s

    def _interp(self, x: float, table: dict, key, f) -> float:
        """``f(grid point)`` interpolated linearly at ``x`` (grid points cached in ``table``)."""
        x = max(1.0, float(x))
        memo = ("at", key(x))
        if memo in table:
            return table[memo]
        table[memo] = v = self._interp_uncached(x, table, key, f)
        return v

    def _interp_uncached(self, x: float, table: dict, key, f) -> float:
        k = _grid_index(x)
        hi = _GRID[k]
        lo = _GRID[k - 1] if k else hi
        for g in {lo, hi}:
            if key(g) not in table:
                table[key(g)] = f(g)
        if hi == lo:
            return table[key(hi)]
        a = (x - lo) / (hi - lo)
        return (1 - a) * table[key(lo)] + a * table[key(hi)]

    def mla_s(self, b: float, ctx: float) -> float:
        """All layers' MLA decode attention of ``b`` sequences over ``ctx`` cached tokens each (the engine's measured
        kernel, :func:`mla_curve`) beyond the call's fixed time :meth:`body_s` holds: its probe, at one cached token,
        is the roofline's call holding no work whatever the step's token count (a prefill chunk's tokens are no
        decode sequences)."""
        v = self._mla_at.get((b, ctx))
        if v is None:
            fixed = decode_attention_fixed_s(self.cluster.device)  # the call body_s holds (its probe holds no work)
            v = self._mla_at[b, ctx] = self.model.layers * max(0.0, self._mla_f(b, ctx) - fixed)
        return v

    def body_s(self, tokens: float, micro_batches: int = 1) -> float:
        """All layers' GEMMs, element-wise ops and collectives for ``tokens`` tokens (no attention work, no head)."""
        if tokens <= 0:
            return 0.0
        mm = max(1, min(micro_batches, self.config.pp))
        return self._interp(tokens, self._body, lambda g: (mm, g), lambda g: self._phase_s(g, mm, 0, False))

    def head_s(self, sampled: float) -> float:
        """LM head, logits gather and sampling for ``sampled`` rows."""
        if sampled <= 0:
            return 0.0
        if 0 not in self._head:
            self._head[0] = self._phase_s(1, 1, 0, True)
        base = self._head[0]
        return self._interp(sampled, self._head, lambda g: g, lambda g: self._phase_s(1, 1, g, True) - base)

    def time_s(
        self, *, tokens: float, sampled: float, prefill_pairs: float, decode_ctx: float, micro_batches: int = 1
    ) -> float:
        """One step: ``tokens`` scheduled, ``sampled`` of them emit a token, ``prefill_pairs`` causal
        query-key pairs of prompt chunks, ``decode_ctx`` cached tokens read by the decodes."""
        return self.price(tokens, sampled, prefill_pairs, decode_ctx, micro_batches)

    def price(
        self, tokens: float, sampled: float, prefill_pairs: float, decode_ctx: float, micro_batches: int = 1
    ) -> float:
        """:meth:`time_s` with positional arguments (the replay loop's call, :mod:`costmodel.serving.scheduler`)."""
        pp = self.config.pp
        mm = micro_batches if 1 <= micro_batches <= pp else max(1, min(micro_batches, pp))
        if self.mla and decode_ctx > 0 and sampled > 0:
            attn = self.prefill_pair_s * prefill_pairs / mm + self.mla_s(sampled / mm, decode_ctx / sampled)
        else:
            attn = (self.prefill_pair_s * prefill_pairs + self.decode_ctx_s * decode_ctx) / mm
        body = self._body_at.get((tokens, mm))
        if body is None:
            body = self._body_at[tokens, mm] = self.body_s(tokens, mm)
        head = self._head_at.get(sampled)
        if head is None:
            head = self._head_at[sampled] = self.head_s(sampled)
        return body + head + attn


def chunk_pairs(done: float, chunk: float) -> float:
    """Causal query-key pairs of a prompt chunk of ``chunk`` tokens after ``done`` cached ones.

    >>> chunk_pairs(0, 4000) + chunk_pairs(4000, 4000) == chunk_pairs(0, 8000)
    True
    """
    return chunk * (done + chunk / 2.0)


@lru_cache(maxsize=512)
def step_cost(model: ModelSpec, cluster: ClusterSpec, dtype: str, config: ParallelConfig, kv_dtype: str) -> StepCost:
    """The (cached) :class:`StepCost` of one plan."""
    return StepCost(model, cluster, dtype, replace(config, mb=1), kv_dtype)
