"""Cost tables: the step time of ``evaluate`` decomposed over the choices each term depends on.

A :class:`Choice` is everything the search picks except the stage split. For one choice the
step time of ``costmodel.estimate.evaluate`` is (its docstring)::

    step = (m - 1/v) * max_stage t_mb(stage) + sum_stage t_mb(stage) / v
           + max_stage dp_exposed(stage) + max_stage optimizer(stage)

and every per-stage term is a function of the *number of layers on the stage* and its position:
``first`` (embedding; the leading dense layers of an MoE model), ``mid`` (the middle stages,
all holding the same number of layers; stage 1 holds the most in-flight micro-batches, so it
binds their memory, and has the least 1F1B head start, so it binds their DP exposure),
``last`` (LM head and loss) and ``only`` (``pp = 1``). :class:`StageTable` holds, per position
and per layer count ``n``, the micro-batch time, DP exposure, optimizer time and peak memory.

Where the numbers come from (one source each, all in ``costmodel``):

* per layer: :func:`costmodel.analytic.layer_timing` (compute, exposed communication and its
  SM interference, recompute) and :func:`costmodel.memory.activation_bytes_per_layer`;
* per stage position: one :func:`costmodel.analytic.stage_timing` and one
  :func:`costmodel.memory.stage_memory` probe give the embedding / LM-head extras and the PP
  send/recv time; parameters, ZeRO state and DP collectives are affine in the layer count and
  come from two probes of :func:`stage_params`, :func:`model_state_bytes` and :func:`dp_comm`.

The assembly (``count * per-layer + extras``, recompute of the first ``k`` layers, PP exposure
``max(0, t - fwd / v)`` when interleaved) mirrors ``stage_timing`` / ``stage_memory``;
``tests/test_search_tables.py`` checks it against ``evaluate`` to 1e-9 on random plans, and
every plan the search returns is re-scored by ``evaluate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from costmodel import act_offload, dma, frameworks
from costmodel.analytic import dp_comm, dp_latency, grad_bytes, layer_timing, stage_timing
from costmodel.grad_buckets import stage_grad_buckets
from costmodel.step import dp_buckets, dp_exposure, step_time
from costmodel.config import ParallelConfig
from costmodel.flops import model_flops_per_step
from costmodel.memory import (WEIGHT_BYTES, activation_bytes_per_layer, fp8_weight_cache_bytes, model_state_bytes,
                              FRAGMENTATION, offloaded_layer_bytes, reserved_bytes, stage_memory)
from costmodel.stage_contents import expert_dp, stage_params
from costmodel.pipeline import in_flight_profile, interleaved_p2p_exposed_s
from costmodel.units import MB

from .candidates import stage_count_ok, stage_kinds
from .choice import Choice, _semantics
from .offload_choice import optimizer_s
from .problem import Problem

KIND_INDEX = {"first": 0, "mid": 1, "last": 2, "only": 0}
_UNSET = object()  # Tables._relaxed before relaxed() is first asked


def stage_weight(kind: str, pp: int) -> int:
    """Stages at position ``kind`` of a ``pp``-stage pipeline (the middle ones share a count)."""
    return pp - 2 if kind == "mid" else 1


def resolution_s(p: Problem) -> float:
    """The one time resolution of the integer tables: a millionth of the order of magnitude of
    the ideal step time (model FLOPs at peak on all GPUs), so objectives are about 1e6 ticks."""
    # the resolution was set on the full-attention count; kept, so the integer tables stay as they were
    ideal = (model_flops_per_step(p.model, p.workload, "full")
             / (p.gpus * p.cluster.device.peak_flops_per_s(p.workload.dtype)))
    return 10.0 ** (math.floor(math.log10(max(ideal, 1e-12))) - 6)


def ticks(seconds, res_s: float):
    """Seconds to integer ticks of ``res_s`` (the only conversion to the solver's integers)."""
    return np.rint(np.asarray(seconds, dtype=float) / res_s).astype(np.int64)


def with_layers_per_stage(c: ParallelConfig, lps: tuple[int, ...]) -> ParallelConfig:
    """``replace(c, layers_per_stage=lps)`` without validating every field again (a search probes
    each layer count of a stage: building 60-100 configs per table was a third of GPT-3 175B / 1024
    A100's search). Safe for the tuples :func:`probe_split` makes: ``pp`` integers >= 1, the one rule
    ``ParallelConfig.__post_init__`` has for the field; every other field was validated with ``c``,
    and no field is derived from it (``c.layout`` is ``None``)."""
    if c.layout is not None or len(lps) != c.pp or type(lps) is not tuple or min(lps) < 1:
        return replace(c, layers_per_stage=lps)
    out = object.__new__(ParallelConfig)
    out.__dict__.update(c.__dict__)
    object.__setattr__(out, "layers_per_stage", lps)
    return out


def probe_split(p: Problem, choice: Choice, kind: str, n: int) -> tuple[tuple[int, ...], int]:
    """A ``layers_per_stage`` giving the stage at ``kind`` exactly ``n`` layers, and its index.

    The other stages get a placeholder count; the first holds the leading dense layers so the
    probed middle or last stage is all-MoE, as in every split the search considers."""
    pp, d = choice.shape.pp, p.model.dense_layers
    if kind == "only":
        return (n,), 0
    filler = [max(1, d)] + [1] * (pp - 1)
    stage = {"first": 0, "mid": 1, "last": pp - 1}[kind]
    filler[stage] = n
    return tuple(filler), stage


@dataclass
class StageTable:
    """Per position (``first``/``mid``/``last``/``only``) arrays indexed by the layer count ``n``.

    ``time_s`` is the stage's micro-batch time, ``dp_s`` its exposed DP/ZeRO reduction and gather,
    ``opt_s`` its optimizer step, ``mem_bytes`` its peak memory, ``valid`` whether ``n`` layers
    are allowed there (multiple of ``vp``, dense layers on the first stage, fits in memory).
    """

    choice: Choice
    lead: float  # m - 1/v: micro-batch times the slowest stage sets (costmodel.step.pipeline_s)
    kinds: tuple
    time_s: dict
    dp_s: dict
    opt_s: dict
    mem_bytes: dict
    valid: dict
    res_s: float = 1e-6
    m: int = 1  # micro-batches per step

    def __post_init__(self):
        # the solver's integer tables, at the problem's one resolution (see :func:`ticks`)
        self.time_ticks = {k: ticks(self.lead * v, self.res_s) for k, v in self.time_s.items()}
        # the stages' share of the first micro-batch's pass (sum over the stages of time / v), the
        # middle stages' together
        pp, vp = self.choice.shape.pp, self.choice.vp
        self.sum_ticks = {k: ticks(stage_weight(k, pp) * v / vp, self.res_s) for k, v in self.time_s.items()}
        self.dp_ticks = {k: ticks(v, self.res_s) for k, v in self.dp_s.items()}
        self.opt_ticks = {k: ticks(v, self.res_s) for k, v in self.opt_s.items()}

    def step_s(self, split) -> float:
        """Table step time of ``split`` (a :class:`~search.candidates.Split`) in seconds."""
        ns = [split.count("first" if k == "only" else k) for k in self.kinds]

        def at(table):
            return np.array([table[k][n] for k, n in zip(self.kinds, ns)])
        pp = self.choice.shape.pp
        return step_time(at(self.time_s), at(self.dp_s), at(self.opt_s), self.m, pp, self.choice.vp,
                         [stage_weight(k, pp) for k in self.kinds])

    def fits(self, split) -> bool:
        return all(self.valid[k][split.count("first" if k == "only" else k)] for k in self.kinds)


class Tables:
    """Cost tables of one :class:`Problem`, cached by the sub-choices each quantity depends on."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.res_s = resolution_s(problem)
        self._layer: dict = {}
        self._affine: dict = {}
        self._stage: dict = {}
        self._valid_only: dict = {}  # stage_table(valid_only=True)
        self._parts: dict = {}
        # name -> cache of the search modules above (bounds, presolve): ``shared`` holds only times, bytes and
        # candidate lists (none reads the HBM cap), ``fitted`` what fits under the cap (memory screens)
        self.shared: dict = {}
        self.fitted: dict = {}
        self._relaxed = _UNSET  # relaxed(): the tables of the relaxed cluster (None: these)

    def with_problem(self, problem: Problem) -> "Tables":
        """Tables of ``problem``, the same problem as ``self``'s but for its memory headroom, sharing every cache
        that holds times and bytes (layers, affine terms, stage parts, and the search modules' ``shared``
        caches: bounds, level-0 group bounds, candidate lists; none reads the HBM cap) and none that holds a fit
        (the stage tables' ``valid``, the search modules' ``fitted`` memory screens): the margin solve of
        :func:`search.solve._keep_margin` then times nothing twice. The headroom enters the search only as
        :attr:`search.problem.Problem.hbm_cap_bytes`, which only the fit tests read (``StageTable.valid``,
        :meth:`search.bounds.Bounds.caps` / ``fitting_zeros``); the candidate lists read the limits' pins and
        options, not the headroom."""
        same = replace(problem, limits=replace(problem.limits, headroom_bytes=self.p.limits.headroom_bytes))
        if same != self.p:  # the caches' keys leave out everything else a problem fixes (flash attention, ...)
            raise ValueError("Tables.with_problem: only the memory headroom may differ")
        out = Tables(problem)
        out._layer, out._affine, out._parts = self._layer, self._affine, self._parts
        out.shared = self.shared  # one dict: what either search fills, the other reads
        if self._relaxed is not _UNSET:  # the relaxed cluster's tables, at the new headroom (None: ``self``)
            rt = self._relaxed
            out._relaxed = None if rt is None else rt.with_problem(replace(rt.p, limits=problem.limits))
        return out

    def relaxed(self) -> "Tables":
        """Tables on a cluster where every engine-bound DMA class (:func:`search.candidates.dma_values`)
        has as many engines per stream as it has in all: each stream of any plan at least as fast
        as under any assignment (the cost model is monotone in engines, ``tests/test_dma.py``), so
        bounds computed here hold for every assignment. ``self`` when no class is engine-bound.

        ``self`` is stored as ``None``: a reference from the tables to themselves would make them
        cyclic garbage, left for the collector, whose first pass after the search (the search pauses
        it, :func:`search.solve.cyclic_gc_paused`) walked their ~300,000 objects (0.2 s of DeepSeek-V3
        / 2048 H800's 3.3 s); without the cycle reference counting frees them when the search returns."""
        if self._relaxed is _UNSET:
            dev = self.p.cluster.device
            if not any(e.bw_bytes_per_s > 0 and e.scopes for e in dev.dma_engines):
                self._relaxed = None
            else:
                n = len(dma.STREAMS)
                engines = tuple(replace(e, count=e.count * n) if e.bw_bytes_per_s > 0 else e for e in dev.dma_engines)
                cluster = replace(self.p.cluster, device=replace(dev, dma_engines=engines))
                out = self._relaxed = Tables(replace(self.p, cluster=cluster))
                out._relaxed = None
        out = self._relaxed
        return self if out is None else out

    # ------------------------------------------------------------------ per layer
    def layer(self, choice: Choice, moe: bool) -> tuple[float, ...]:
        """``(U, R, fwd, bwd, rec, act_bytes)`` of one layer and micro-batch: U = fwd + bwd + exposed
        communication + interference; R = recompute time (with its repeated communication)."""
        s = choice.shape
        z3 = choice.per_microbatch()
        key = (s.tp, s.cp, s.ep, s.dp if z3 else 1, choice.mb, choice.sp, choice.chunks, choice.recompute, z3, moe,
               choice.dma, choice.grad_dtype, choice.options)
        if key not in self._layer:
            if choice.dma is None:
                c = ParallelConfig(tp=s.tp, cp=s.cp, ep=s.ep, dp=key[3], mb=choice.mb, sp=choice.sp,
                                   chunks=choice.chunks, recompute=choice.recompute, zero=choice.zero if z3 else 0,
                                   flash_attention=self.p.limits.flash_attention, framework=choice.framework,
                                   grad_dtype=choice.grad_dtype, fused_elementwise=self.p.limits.fused_elementwise,
                                   # the timing reads the recompute modules and the EP dispatcher only
                                   **{k: v for k, v in choice.config_options().items()
                                      if k in ("recompute_modules", "ep_dispatcher")})
            else:  # an assignment names the plan's streams: a layer of the plan itself
                c = choice.config(self.p.limits.flash_attention, fused_elementwise=self.p.limits.fused_elementwise)
            p, coef = self.p, self.p.cluster.device.comm_compute_interference
            lt = layer_timing(p.model, p.cluster, p.workload, c, moe)
            u = lt.fwd_s + lt.bwd_s + lt.ledger.total_exposed_s + lt.ledger.interference_s(coef)
            r = lt.recompute_s + lt.recompute_ledger.total_exposed_s + lt.recompute_ledger.interference_s(coef)
            self._layer[key] = (u, r, lt.fwd_s, lt.bwd_s, lt.recompute_s, self.activations(choice, moe))
        return self._layer[key]

    def activations(self, choice: Choice, moe: bool) -> float:
        """Activation bytes one layer stores per micro-batch (the last entry of :meth:`layer`), without
        the layer's timing: the memory screens need only this, and it does not depend on chunks,
        ZeRO stage, bucket or DMA assignment."""
        s = choice.shape
        key = ("act", s.tp, s.cp, s.ep, choice.mb, choice.sp, choice.recompute, choice.framework, choice.options, moe)
        if key not in self._parts:
            c = choice.config(self.p.limits.flash_attention, fused_elementwise=self.p.limits.fused_elementwise)
            self._parts[key] = activation_bytes_per_layer(self.p.model, self.p.workload, c, moe)
        return self._parts[key]

    def offloaded_bytes(self, choice: Choice) -> float:
        """Activation bytes the choice's CPU offload frees (0 without it): ``N`` layers' of the one micro-batch a
        ``pp = 1`` stage holds, as :func:`costmodel.memory.stage_memory` frees them (with the fewest fitting, at
        most ``L - 1``); the memory bounds (:meth:`search.bounds.Bounds._stored`) take them off, so that they stay
        below the tables' memory."""
        n = (self.p.model.layers - 1 if self._fewest_fitting(choice)
             else choice.config_options().get("activation_offload_layers", 0))
        return n * self._offloaded_layer(choice) if n else 0.0

    def _offloaded_layer(self, choice: Choice) -> float:
        key = ("offloaded", choice.shape, choice.mb, choice.sp, choice.options)
        if key not in self._parts:
            c = choice.config(self.p.limits.flash_attention, (self.p.model.layers,), self.p.limits.fused_elementwise)
            self._parts[key] = min(offloaded_layer_bytes(self.p.model, self.p.workload, c))
        return self._parts[key]

    @staticmethod
    def _fewest_fitting(choice: Choice) -> bool:
        """Whether the choice offloads the fewest layers that make it fit (``search.problem.FEWEST_FITTING``)."""
        return (choice.shape.pp == 1 and choice.recompute == "none"
                and dict(choice.options).get("activation_offload_layers", 0) < 0)

    def with_fewest_fitting(self, choice: Choice, time, fwd, bwd, mem):
        """``(time, mem)`` over ``n`` of a ``pp = 1`` choice of :meth:`_fewest_fitting`, at its one count ``n = L``
        with the fewest offloaded layers ``N`` that make it fit (:meth:`fewest_layers`): the freed bytes (with the
        allocator's fragmentation on them, :func:`costmodel.memory.reserved_bytes`) off its memory and the stall
        on its micro-batch, as ``evaluate`` charges the plan with ``N`` (none where it fits without, left
        unfitting where ``L - 1`` do not make it fit)."""
        L = self.p.model.layers
        n = self.fewest_layers(choice, mem[L])
        if not n or n >= L:
            return time, mem
        time, mem = time.copy(), mem.copy()
        mem[L] -= n * self._offloaded_layer(choice) * (1 + FRAGMENTATION)
        time[L] += self.offload_stall_s(choice, n, fwd, bwd)
        return time, mem

    def offload_stall_s(self, choice: Choice, n: int, fwd, bwd) -> float:
        """The stall per micro-batch an offload of ``n`` layers adds to a ``pp = 1`` stage whose forward and
        backward (with recompute) over ``n = L`` are ``fwd[L]``, ``bwd[L]``: the one place ``evaluate`` charges
        it (:func:`costmodel.act_offload.step_exposed_s`)."""
        p, L = self.p, self.p.model.layers
        c = replace(choice.config(p.limits.flash_attention, (L,), p.limits.fused_elementwise), activation_offload_layers=n)
        return act_offload.step_exposed_s(p.model, p.cluster, p.workload, c, fwd[L], bwd[L], 1)[1]

    def fewest_layers(self, choice: Choice, mem_bytes: float) -> int:
        """The fewest layers ``N`` (0 to ``L - 1``) whose offload brings ``mem_bytes``, a ``pp = 1`` stage's memory
        without offload, within the HBM cap, each freeing :meth:`_offloaded_layer` bytes and their fragmentation
        (``stage_memory``); ``L`` where even ``L - 1`` do not."""
        over = mem_bytes - self.p.hbm_cap_bytes
        if over <= 0:
            return 0
        per = self._offloaded_layer(choice) * (1 + FRAGMENTATION)
        n = max(1, math.ceil(over / per)) if per > 0 else self.p.model.layers
        return n if n < self.p.model.layers else self.p.model.layers

    def layer_input_bytes(self, choice: Choice) -> float:
        """Bytes one fully recomputed layer keeps per micro-batch: its BF16 input, sharded by SP
        (Korthikanti et al. 2023, section 5: full recompute stores only each layer's input)."""
        s = choice.shape
        tokens = choice.mb * self.p.workload.seq_len / s.cp
        return 2 * self.p.model.hidden * tokens / (s.tp if choice.sp and s.tp > 1 else 1)

    # ------------------------------------------------------------------ affine in the layer count
    def affine(self, choice: Choice, kind: str) -> dict:
        """Per-stage quantities affine in the layer count ``n``, as arrays over ``n``: dense and
        expert parameters and ZeRO model state bytes (:meth:`state`), and the DP gradient /
        parameter collective seconds, their latencies and the gradient bytes. They depend on the
        shape and ZeRO stage only (the collectives also on the DMA assignment)."""
        key = ("comm", choice.shape, choice.zero, choice.framework, kind, choice.dma, choice.options)
        if key not in self._affine:
            p, st = self.p, self.state(choice, kind)
            # the collectives from the (exactly affine) parameter counts, one time per count: NCCL's
            # ring / tree choice flips with the message size, so their seconds are not affine
            lps, stage = probe_split(p, choice, kind, self._probe_n(choice, kind))
            c = choice.plain_config(lps)
            params = (st["dense"], st["expert"])
            t_grad, t_param = dp_comm(p.model, p.cluster, c, stage, params)
            lat_grad, lat_param = dp_latency(p.model, p.cluster, c, stage, params)
            n = np.zeros(p.model.layers + 1)
            self._affine[key] = dict(st, t_grad=n + t_grad, t_param=n + t_param, lat_grad=n + lat_grad,
                                     lat_param=n + lat_param, grad_bytes=grad_bytes(p.model, c, stage, params))
        return self._affine[key]

    def dp_buckets(self, choice: Choice, kind: str, at=None) -> dict:
        """The step-end gradient collectives of a stage at ``kind`` as arrays over its layer count
        ``n``, as :func:`costmodel.analytic.stage_dp_terms` charges them: ``buckets`` (how many),
        ``pieces`` (``(k_first, k_rest)``, or ``None``) and the per-bucket latencies ``lat_grad``,
        ``lat_param`` (the framework's buckets: :func:`costmodel.grad_buckets.stage_grad_buckets`,
        one probe split per ``n``). ``at`` (an integer array of layer counts): the same entries at
        those counts only, probing the buckets only there (the DP bound asks for the few counts a
        stage's memory allows; every value is elementwise, so each entry equals the full array's)."""
        key = ("buckets", choice.shape, choice.zero, choice.framework, kind, choice.dma, choice.options, choice.vp,
               choice.bucket_mb, choice.grad_dtype)
        full = self._affine.get(key)
        if full is None and at is None:
            full = self._affine[key] = self._dp_buckets(choice, kind, None)
        if at is None:
            return full
        if full is not None:
            return {k: (None if v is None else tuple(np.asarray(x)[at] for x in v)) if k == "pieces"
                    else np.asarray(v)[at] for k, v in full.items()}
        # entries by layer count, each computed once (the DP bounds of a choice's ZeRO stages and
        # buckets, and of its refinements, ask again for overlapping counts)
        pts = self._parts.setdefault(("buckets_at",) + key, {})
        ns = at.tolist()
        if not ns:
            return self._dp_buckets(choice, kind, at)
        # the same counts again (choices that differ in what the key leaves out: recompute, chunks, sp,
        # mb), the same arrays: read-only, as every caller reads them (GPT-3: 2,362 calls, 822 distinct)
        done = self._parts.setdefault(("buckets_at_out",) + key, {})
        hit = done.get(tuple(ns))
        if hit is not None:
            return hit
        todo = [n for n in ns if n not in pts]
        if todo:
            b = self._dp_buckets(choice, kind, np.array(todo))
            pieces = b["pieces"]
            for j, n in enumerate(todo):
                pts[n] = (b["buckets"][j], b["lat_grad"][j], b["lat_param"][j],
                          None if pieces is None else (pieces[0][j], pieces[1][j]))
        rows = [pts[n] for n in ns]
        out = {name: np.array([r[i] for r in rows], dtype=float)
               for i, name in enumerate(("buckets", "lat_grad", "lat_param"))}
        out["pieces"] = None if rows[0][3] is None else tuple(np.array([r[3][i] for r in rows], dtype=float)
                                                              for i in range(2))
        for v in [out["buckets"], out["lat_grad"], out["lat_param"]] + list(out["pieces"] or ()):
            v.flags.writeable = False
        done[tuple(ns)] = out
        return out

    def _dp_buckets(self, choice: Choice, kind: str, at) -> dict:
        p, a = self.p, self.affine(choice, kind)
        sel = (lambda x: x) if at is None else (lambda x: x[at])
        counts = self._bucket_counts(choice, kind, at)
        if counts is None:
            return dict(buckets=dp_buckets(sel(a["grad_bytes"]), choice.bucket_mb * MB), pieces=None,
                        lat_grad=sel(a["lat_grad"]), lat_param=sel(a["lat_param"]))
        n_all, nd, ne, k_first, k_rest = counts
        lps, stage = probe_split(p, choice, kind, self._probe_n(choice, kind))
        c = choice.plain_config(lps)
        st = self.state(choice, kind)
        lat_grad, lat_param = dp_latency(p.model, p.cluster, c, stage, (sel(st["dense"]), sel(st["expert"])),
                                         counts=(nd, ne))
        return dict(buckets=n_all, pieces=(k_first, k_rest), lat_grad=lat_grad, lat_param=lat_param)

    def _bucket_counts(self, choice: Choice, kind: str, at=None):
        """``(collectives, dense, expert, k_first, k_rest)`` arrays over ``n`` (one probe split
        per ``n``; ``at``: at those ``n`` only), or ``None`` where the framework's buckets are not
        modelled; they depend on the shape, framework, ZeRO stage, interleaving, bucket and gradient
        dtype only, and under Megatron-Core on less (:meth:`_bucket_class`). Each ``n`` is probed once
        (:meth:`_bucket_points`), whichever call asks first."""
        key = ("bucket_counts", choice.shape, choice.zero, choice.framework, kind, choice.vp, choice.bucket_mb,
               choice.grad_dtype)
        if key not in self._affine:
            cls = self._bucket_class(choice, kind)
            if cls is not None and cls in self._affine:
                self._affine[key] = self._affine[cls]
            elif at is not None:
                return self._bucket_points(choice, kind, cls or key, at)
            else:
                self._affine[key] = self._bucket_points(choice, kind, cls or key, np.arange(self.p.model.layers + 1))
                if cls is not None:
                    self._affine[cls] = self._affine[key]
        out = self._affine[key]
        return out if at is None or out is None else tuple(x[at] for x in out)

    def _bucket_points(self, choice: Choice, kind: str, key, ns):
        """:meth:`bucket_counts_of` at the layer counts ``ns``, each probed once per ``key`` (the
        choice's bucket class) and kept: the same ``stage_grad_buckets`` call per ``n``."""
        pts = self._parts.setdefault(("bucket_points", key), {})
        if pts.get("none"):
            return None
        todo = [int(n) for n in ns if int(n) not in pts]
        if todo:
            p, c = self.p, self._bucket_config(choice, kind)
            for n in todo:
                lps, stage = probe_split(p, choice, kind, max(n, 1))
                gb = stage_grad_buckets(p.model, with_layers_per_stage(c, lps), stage)
                if gb is None:
                    pts["none"] = True
                    return None
                pts[n] = (gb.count, gb.dense_count, gb.expert_count) + gb.pieces()
        rows = np.array([pts[int(n)] for n in ns], dtype=float).reshape(len(ns), 5)
        return tuple(rows[:, i].copy() for i in range(5))

    def _bucket_config(self, choice: Choice, kind: str) -> ParallelConfig:
        """The validated config :meth:`bucket_counts_of` probes (one layer count changed per probe)."""
        key = ("bucket_config", choice.shape, choice.zero, choice.framework, kind, choice.vp, choice.bucket_mb,
               choice.grad_dtype)
        if key not in self._parts:
            base = replace(choice, recompute="none", recompute_layers=None, dma=None, options=())
            self._parts[key] = base.config(layers_per_stage=probe_split(self.p, choice, kind, 1)[0])
        return self._parts[key]

    def _bucket_class(self, choice: Choice, kind: str):
        """What Megatron-Core's step-end buckets of a probed stage depend on, as a cache key shared by
        the shapes that differ elsewhere (the searches ask for hundreds of shapes, ~100 probes each);
        ``None`` for other frameworks. :func:`costmodel.grad_buckets.stage_grad_buckets` (Megatron
        branch) reads: the layer tensors (``tp``, ``ep``, expert TP = ``tp`` without EP; on stage 0
        only, the one bucketed: elsewhere only which buffers are empty), the stage's
        chunks (``vp`` and its own layer count ``n``; dense or MoE by the layers before it), whether
        it holds the embedding (stage 0) and the head (the last stage), bucketing (stage 0 only, the
        bucket size in gradient elements: ``bucket_mb``, ``grad_dtype``; on the other stages only
        ``overlapped = bucket_bytes > 0``), ``frameworks.of`` (the framework and ZeRO stage under
        Megatron: whether it has a ``step_grad``, nothing else) and of the DP degree only whether the dense and the
        expert gradient groups have more than one rank (``dp * cp > 1``, ``expert_dp > 1``). The
        rest is fixed by ``kind``: :func:`probe_split` puts ``max(1, dense_layers)`` layers on stage 0,
        so a probed middle or last stage starts past the dense layers for every ``pp`` (all MoE), and
        ``first`` / ``mid`` / ``last`` / ``only`` say which of stage 0 and the last stage it is
        (``tests/test_search_tables.py`` checks the class against the probes themselves)."""
        if choice.framework != "megatron":
            return None
        if not frameworks.lookup(choice.framework, choice.zero).step_grad:
            return ("bucket_class", None)  # stage_grad_buckets is None (Megatron FSDP): for every shape
        s = choice.shape
        expert_tp = s.tp if s.ep == 1 else 1
        edp = max(1, s.tp * s.dp * s.cp // (s.ep * expert_tp))  # costmodel.stage_contents.expert_dp
        # of the ZeRO stage only ``step_grad`` (above) is read; the bucket size and gradient dtype only as
        # stage 0's bucket size (first / only), elsewhere only whether the buckets overlap (bucket > 0)
        if kind in ("first", "only"):
            return ("bucket_class", s.tp, s.ep, kind, choice.vp, (choice.bucket_mb, choice.grad_dtype),
                    s.dp * s.cp > 1, edp > 1)
        # past stage 0 no chunk is bucketed: each buffer holding any tensor issues one collective
        # (grad_buckets.close_ge_runs with bucket None), so the tensors' sizes, and with them tp and
        # ep, are not read; only which chunks hold dense / expert tensors (vp, n, kind)
        return ("bucket_class", kind, choice.vp, choice.bucket_mb > 0, s.dp * s.cp > 1, edp > 1)

    def bucket_counts_of(self, choice: Choice, kind: str):
        """:meth:`_bucket_counts` probed without its cache: one ``stage_grad_buckets`` per ``n``."""
        p, L = self.p, self.p.model.layers
        out = tuple(np.zeros(L + 1) for _ in range(5))
        base = replace(choice, recompute="none", recompute_layers=None, dma=None, options=())
        c = base.config(layers_per_stage=probe_split(p, choice, kind, 1)[0])  # validated once
        for n in range(L + 1):  # no stage holds 0 layers: its entry is never valid, kept finite
            lps, stage = probe_split(p, choice, kind, max(n, 1))
            gb = stage_grad_buckets(p.model, with_layers_per_stage(c, lps), stage)
            if gb is None:
                return None
            out[0][n], out[1][n], out[2][n] = gb.count, gb.dense_count, gb.expert_count
            out[3][n], out[4][n] = gb.pieces()
        return out

    def state(self, choice: Choice, kind: str) -> dict:
        """The part of :meth:`affine` memory screens and optimizer bounds need (no collectives):
        ``dense`` and ``expert`` parameters and ZeRO model ``state`` bytes of the stage."""
        key = ("state", choice.shape, choice.zero, choice.framework, kind, choice.options)
        if key not in self._affine:
            p = self.p

            def state(c, stage):
                dense, expert = stage_params(p.model, c, stage)
                return dict(dense=dense, expert=expert, state=sum(model_state_bytes(p.model, c, stage))
                            + fp8_weight_cache_bytes(p.model, p.workload, c, stage))
            self._affine[key] = self._fit(choice, kind, state)
        return self._affine[key]

    def _fit(self, choice: Choice, kind: str, of) -> dict:
        """``of(config, stage) -> {name: value}`` probed at two layer counts and extended to every
        ``n`` (an MoE first stage holding only the dense layers has no expert group, so
        ``n = dense_layers`` is probed on its own)."""
        p, d, L = self.p, self.p.model.dense_layers, self.p.model.layers
        split_dense = kind in ("first", "only") and p.model.is_moe and d > 0
        n0 = d + 1 if split_dense else 1
        vals, c = [], None
        for n in [n0, n0 + 1] + ([d] if split_dense else []):
            lps, stage = probe_split(p, choice, kind, n)
            # one validated config, its layer counts changed per probe (with_layers_per_stage)
            c = choice.plain_config(lps) if c is None else with_layers_per_stage(c, lps)
            vals.append(of(c, stage))
        n = np.arange(L + 1)
        out = {}
        for name in vals[0]:
            arr = vals[0][name] + (n - n0) * (vals[1][name] - vals[0][name])
            if len(vals) == 3:
                arr[d] = vals[2][name]
            out[name] = arr
        return out

    # ------------------------------------------------------------------ one choice
    def stage_table(self, choice: Choice, valid_only: bool = False) -> StageTable:
        """The choice's tables. ``valid_only``: a table whose DP entries are computed only where a
        stage may hold ``n`` layers (``valid``; 0 elsewhere), for readers that take valid entries
        alone (:func:`search.exhaustive.best_splits`: the re-score's near plans); the full table
        when it is built already. A CP-SAT space takes full tables (its twins compare whole arrays)."""
        if choice in self._stage:
            return self._stage[choice]
        if valid_only:
            if choice not in self._valid_only:
                self._valid_only[choice] = self._build(choice, valid_only=True)
            return self._valid_only[choice]
        self._stage[choice] = self._build(choice)
        return self._stage[choice]

    def _expert_dp(self, choice: Choice) -> int:
        key = ("edp", choice.shape)
        if key not in self._parts:
            self._parts[key] = expert_dp(choice.config())
        return self._parts[key]

    def counts(self, kind: str, n):
        """(dense, MoE) layers of a stage at ``kind`` holding ``n`` layers (leading dense layers
        on the first stage)."""
        model = self.p.model
        if not model.is_moe:
            return n, np.zeros_like(n)
        if kind in ("first", "only"):
            nd = np.minimum(n, model.dense_layers)
            return nd, n - nd
        return np.zeros_like(n), n

    def mtp_on(self, kind: str) -> int:
        """MTP layers a stage at ``kind`` holds besides its ``n`` decoder layers: the model's on the last
        stage (costmodel.layout.from_chunks places them with the loss; their time and state are in the
        stage probe's extras)."""
        return self.p.model.mtp_layers if kind in ("last", "only") else 0

    def _probe_n(self, choice: Choice, kind: str) -> int:
        L, d = self.p.model.layers, self.p.model.dense_layers
        return L if kind == "only" else (max(choice.vp, d) if kind == "first" else choice.vp)

    def timing(self, choice: Choice, kind: str) -> tuple:
        """(micro-batch time, fwd, bwd, recompute) arrays over ``n``; shared by choices that
        differ only in bucket size or ZeRO stage 0-2."""
        s, p = choice.shape, self.p
        key = self._timing_key(choice, kind)
        if key in self._parts:
            return self._parts[key]
        n = np.arange(p.model.layers + 1)
        dense_l, moe_l = self.layer(choice, False), self.layer(choice, True) if p.model.is_moe else None
        nd, nm = self.counts(kind, n)
        k = choice.recompute_layers
        kd, km = (np.minimum(nd, k), np.minimum(nm, k)) if choice.recompute == "full" and k is not None else (nd, nm)

        def lin(i, cd, cm, d=dense_l, m=moe_l):
            return cd * d[i] + (cm * m[i] if m else 0)

        layers_time = lin(0, kd, km) + lin(1, kd, km)
        if choice.recompute == "full" and k is not None:  # the layers not recomputed: a plain layer's U
            plain = replace(choice, recompute="none", recompute_layers=None)
            layers_time = layers_time + lin(0, nd - kd, nm - km, self.layer(plain, False),
                                            self.layer(plain, True) if p.model.is_moe else None)
        fwd, bwd, rec = lin(2, nd, nm), lin(3, nd, nm), lin(4, kd, km)
        # extras (embedding, LM head, PP send/recv) from one stage_timing probe at n0
        n0 = self._probe_n(choice, kind)
        lps, stage = probe_split(p, choice, kind, n0)
        st = stage_timing(p.model, p.cluster, p.workload, choice.config(p.limits.flash_attention, lps, p.limits.fused_elementwise), stage)
        extras = (st.microbatch_s - st.ledger.exposed_s.get("pp", 0.0) - layers_time[n0], st.fwd_s - fwd[n0],
                  st.bwd_s - bwd[n0])
        self._parts[("x",) + key] = tuple(float(x) for x in extras)
        time = layers_time + extras[0]
        fwd, bwd, rec = fwd + extras[1], bwd + extras[2], rec + (st.recompute_s - rec[n0])
        n_off = choice.config_options().get("activation_offload_layers")
        if n_off:  # pp = 1: the one count n = L
            time = time.copy()
            time[p.model.layers] += self.offload_stall_s(choice, n_off, fwd, bwd + rec)
        if s.pp > 1:
            vp = choice.vp
            t_p2p = st.ledger.link_s.get("pp", 0.0) / (2 * vp)
            time = time + 2 * vp * (t_p2p if vp == 1 else interleaved_p2p_exposed_s(
                t_p2p, fwd / vp, s.pp, choice.micro_batches(p.workload.global_batch), vp))
        self._parts[key] = (time, fwd, bwd, rec)
        return self._parts[key]

    @staticmethod
    def _timing_key(choice: Choice, kind: str) -> tuple:
        """What a stage's timing depends on (not the ZeRO stage 0-2, bucket or memory)."""
        return ("t", choice.shape, choice.mb, choice.vp, choice.sp, choice.chunks, choice.recompute,
                choice.recompute_layers, choice.per_microbatch(), kind, choice.dma, choice.options)

    def stage_extras(self, choice: Choice, kind: str) -> tuple[float, float, float]:
        """(time, forward, backward) a stage at ``kind`` adds to its layers in :meth:`timing` (the
        embedding / LM head, and whatever the stage probe charges beyond the per-layer terms),
        without its PP send/recv."""
        key = self._timing_key(choice, kind)
        if ("x",) + key not in self._parts:
            self.timing(choice, kind)
        return self._parts[("x",) + key]

    def memory(self, choice: Choice, kind: str):
        """Peak memory array over ``n``; shared by choices that differ only in chunks or bucket."""
        s, p = choice.shape, self.p
        key = ("m", s, choice.mb, choice.vp, choice.sp, choice.zero, choice.framework, choice.recompute,
               choice.recompute_layers, kind, choice.options)
        if key in self._parts:
            return self._parts[key]
        model, w, L = p.model, p.workload, p.model.layers
        n = np.arange(L + 1)
        nd, nm = self.counts(kind, n)
        ad = self.activations(choice, False)
        am = self.activations(choice, True) if model.is_moe else 0.0
        k = choice.recompute_layers
        n0 = self._probe_n(choice, kind)
        lps, stage = probe_split(p, choice, kind, n0)
        m = choice.micro_batches(w.global_batch)
        # per model chunk (costmodel.pipeline.chunk_layers: the shorter chunks first on stage 0, last
        # elsewhere), the dense layers first, the stage's first k recomputed: memory.stage_memory
        vp = choice.vp
        base, extra = np.divmod(n, vp)
        layer_input = self.layer_input_bytes(choice) if choice.recompute == "full" else 0.0
        kk = n if k is None else np.minimum(n, k)
        stored, before = [], np.zeros_like(n)
        for ch in range(vp):
            size = base + ((ch >= vp - extra) if stage == 0 else (ch < extra))
            dn = np.clip(nd - before, 0, size)
            mo = size - dn
            if choice.recompute == "full":
                kd = np.minimum(dn, np.maximum(0, kk - before))
                km = np.minimum(mo, np.maximum(0, kk - before - kd))
                stored.append((kd + km) * layer_input + (dn - kd) * ad + (mo - km) * am)
            else:
                stored.append(dn * ad + mo * am)
            before = before + size
        k_mtp = self.mtp_on(kind)  # its MTP layers (of the MoE kind in an MoE model), after the decoder layers
        if choice.recompute == "full":
            working = np.maximum(np.where(nd + (0 if model.is_moe else k_mtp) > 0, ad, 0.0),
                                 np.where(nm + (k_mtp if model.is_moe else 0) > 0, am, 0.0))
        else:
            working = np.zeros(L + 1)
        acts = np.max([sum(h * b for h, b in zip(held, stored)) for held in in_flight_profile(s.pp, m, vp, stage)],
                      axis=0) + working
        sm = stage_memory(model, w, choice.config(p.limits.flash_attention, lps, p.limits.fused_elementwise), stage)
        acts = acts + (sm.activations_bytes - acts[n0])  # embedding output, logits of the probe
        a = self.affine(choice, kind)
        held = _semantics(choice.framework, choice.zero, s.pp, choice.config_options().get("pp_grad_reduce", "step"))
        held = held.unsharded_weights if s.dp * s.cp > 1 else None  # as memory.gathered_weight_bytes (frameworks.of)
        buffers = {None: 0.0, "stage": WEIGHT_BYTES * (a["dense"] + a["expert"]),  # memory.gathered_weight_bytes
                   "two_layers": 2 * WEIGHT_BYTES * (a["dense"] + a["expert"]) / np.maximum(1, n + k_mtp)}[held]
        self._parts[key] = a["state"] + acts + buffers + reserved_bytes(choice.config(), acts)
        return self._parts[key]

    def _build(self, choice: Choice, valid_only: bool = False) -> StageTable:
        p, s = self.p, choice.shape
        L, d, vp = p.model.layers, p.model.dense_layers, choice.vp
        n = np.arange(L + 1)
        shard_d = s.dp * s.cp if choice.zero >= 1 else 1
        shard_e = self._expert_dp(choice) if choice.zero >= 1 else 1
        bucket = choice.bucket_mb * MB
        out = {name: {} for name in ("time", "dp", "opt", "mem", "valid")}
        for kind in stage_kinds(s.pp):
            time, fwd, bwd, rec = self.timing(choice, kind)
            stage = {"first": 0, "only": 0, "mid": 1, "last": s.pp - 1}[kind]
            a = self.affine(choice, kind)
            opt = optimizer_s(choice, a["dense"] / shard_d + a["expert"] / shard_e, p.cluster)  # offload's too
            mem = self.memory(choice, kind)
            if kind == "only" and self._fewest_fitting(choice):
                time, mem = self.with_fewest_fitting(choice, time, fwd, bwd + rec, mem)
            valid = stage_count_ok(p, kind, vp, n, s.pp) & (mem <= p.hbm_cap_bytes)  # pinned split: its counts
            if kind in ("first", "only"):
                valid &= n >= d
            if kind == "only":
                valid &= n == L
            # DP / ZeRO exposure after the last backward (head start: ``stage`` backward steps); with
            # ``valid_only`` at the valid counts alone (elementwise in n: the full table's entries there)
            at = np.flatnonzero(valid) if valid_only else n
            dp = np.zeros(L + 1)
            if len(at):
                b = self.dp_buckets(choice, kind, at=at if valid_only else None)
                ex, zx, _, _ = dp_exposure(a["t_grad"][at], a["t_param"][at], b["lat_grad"], b["lat_param"],
                                           b["buckets"], (bwd + rec)[at], fwd[at], stage, s.pp, vp,
                                           (n + self.mtp_on(kind))[at], pieces=b["pieces"])
                dp[at] = ex + zx
            for name, arr in (("time", time), ("dp", dp), ("opt", opt), ("mem", mem), ("valid", valid)):
                out[name][kind] = arr
        m = choice.micro_batches(p.workload.global_batch)
        return StageTable(choice, m - 1.0 / vp, stage_kinds(s.pp), out["time"],
                          out["dp"], out["opt"], out["mem"], out["valid"], self.res_s,
                          m)
