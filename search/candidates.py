"""The one source of candidate values: every degree, option and stage split the search may choose.

The exhaustive baseline, the CP-SAT domains and the tests all draw from these functions
(STYLE.md item 4; Calculon's ``get_all_tensor_parallelisms``). Divisibility follows
:func:`costmodel.physics.validity.validate_config`; user :class:`~search.problem.Limits` filter every list.

>>> divisors(12)
[1, 2, 3, 4, 6, 12]
>>> list(splits(layers=6, pp=3, vp=1))[:4]
[(1, 4, 1), (1, 3, 2), (2, 3, 1), (1, 2, 3)]
>>> len(list(splits(layers=8, pp=3, vp=1))), list(splits(layers=8, pp=2, vp=2))
(21, [(2, 0, 6), (4, 0, 4), (6, 0, 2)])
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.frameworks.degrees import check_degrees
from costmodel.frameworks.defaults import megatron_ddp_bucket_elements
from costmodel.spec.units import GRAD_BYTES
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError

from .problem import Problem


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


@dataclass(frozen=True, order=True)
class Shape:
    """The degrees that multiply to the GPU count (``tp * cp * pp * dp``), and ``ep`` inside them."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int = 1

    def __hash__(self) -> int:
        """The hash of the degrees, computed once (every cache key of the search holds a shape). Integers
        hash alike in every process, so a pickled copy's stored hash stays right."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.tp, self.cp, self.pp, self.dp, self.ep))
            object.__setattr__(self, "_hash", h)
        return h


@dataclass(frozen=True, order=True)
class Split:
    """Layers on the first stage, on each middle stage, and on the last stage (Megatron-Core's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``).

    With ``pp = 1`` only ``first`` is used; with ``pp = 2`` ``mid`` is 0.

    >>> Split(3, 4, 2).layers_per_stage(4)
    (3, 4, 4, 2)
    """

    first: int
    mid: int
    last: int

    def layers_per_stage(self, pp: int) -> tuple[int, ...]:
        if pp == 1:
            return (self.first,)
        return (self.first,) + (self.mid,) * (pp - 2) + (self.last,)

    def count(self, kind: str) -> int:
        return {"first": self.first, "mid": self.mid, "last": self.last}[kind]


def stage_kinds(pp: int) -> tuple[str, ...]:
    """Distinct stage positions: ``only`` (pp=1), ``first``/``last``, and ``mid`` when pp >= 3."""
    if pp == 1:
        return ("only",)
    return ("first", "last") if pp == 2 else ("first", "mid", "last")


# --------------------------------------------------------------------------- degrees
def tp_values(p: Problem) -> list[int]:
    m, lim = p.model, p.limits
    out = []
    for tp in divisors(p.gpus):
        if m.heads % tp or m.ffn_hidden % tp or (m.kv_heads % tp and tp % m.kv_heads):
            continue
        if tp > p.cluster.domain and not lim.tp_across_nodes and not is_pinned(p, "tp", tp):
            continue
        out.append(tp)
    return lim.filter("tp", out)


def cp_values(p: Problem) -> list[int]:
    s, lim = p.workload.seq_len, p.limits
    out = [
        cp
        for cp in divisors(p.gpus)
        if cp == 1 or (s % (2 * cp) == 0 and (s // cp >= lim.min_tokens_per_cp_rank or is_pinned(p, "cp", cp)))
    ]
    return lim.filter("cp", out)


def pp_values(p: Problem) -> list[int]:
    pinned = p.limits.layers_per_stage
    return p.limits.filter(
        "pp", [pp for pp in divisors(p.gpus) if pp <= p.model.layers and (pinned is None or pp == len(pinned))]
    )


def pinned_split(p: Problem) -> Split | None:
    """The user's pinned stage split (:attr:`Limits.layers_per_stage`) as a :class:`Split`, or None.

    >>> from costmodel.spec.presets import load_model, load_cluster
    >>> from costmodel.spec.workload import Workload
    >>> from search.problem import Limits
    >>> pr = Problem(model=load_model("llama3.1-405b"), cluster=load_cluster("h100-sxm").with_gpus(1024),
    ...              workload=Workload(global_batch=512, seq_len=8192),
    ...              limits=Limits(layers_per_stage=(7,) + (8,) * 14 + (7,)))
    >>> pinned_split(pr), pp_values(pr)
    (Split(first=7, mid=8, last=7), [16])
    """
    lps = p.limits.layers_per_stage
    if lps is None:
        return None
    if len(lps) == 1:
        return Split(lps[0], 0, 0)
    return Split(lps[0], lps[1] if len(lps) > 2 else 0, lps[-1])


def stage_count_ok(p: Problem, kind: str, vp: int, n, pp: int = 1):
    """Whether a stage at position ``kind`` of ``pp`` may hold ``n`` layers (``n`` may be a numpy
    array): a positive multiple of :func:`stage_unit` when the search chooses the split (without
    ``uneven_stages``, the even share ``layers / pp`` only), exactly the pinned count when the user
    pinned one. Where ``vp`` does not divide the layers, a count need not be a multiple of it: the plan's layout (:func:`costmodel.spec.layout.from_split`) places
    a stage's layers over its ``vp`` chunks as :func:`costmodel.spec.stages.chunk_layers` does, and
    Megatron-Core runs it with ``--pipeline-model-parallel-layout`` (issue 22)."""
    pin = pinned_split(p)
    if pin is None:
        u = stage_unit(p, vp)
        ok = (n >= u) & (n % u == 0)
        return ok if p.limits.uneven_stages or kind == "only" else ok & (n * pp == p.model.layers)
    return n == pin.count("first" if kind == "only" else kind)


def stage_unit(p: Problem, vp: int) -> int:
    """The step between the layer counts a stage may hold: ``vp`` where it divides the layers
    (every stage whole chunks of equal size, Megatron-Core's even chunks), else 1 (any count, the
    chunks placed by a layout); 1 with a pinned split."""
    return vp if p.limits.layers_per_stage is None and p.model.layers % vp == 0 else 1


def ep_values(p: Problem, tp: int, cp: int, dp: int) -> list[int]:
    m = p.model
    if not m.is_moe:
        return p.limits.filter("ep", [1])
    return p.limits.filter("ep", [ep for ep in divisors(m.experts) if (tp * dp * cp) % ep == 0])


def shapes(p: Problem) -> list[Shape]:
    """Every ``(tp, cp, pp, dp, ep)`` with ``tp*cp*pp*dp = GPUs``, ``dp`` dividing the batch and degrees the
    framework runs together (:func:`costmodel.frameworks.degrees.check_degrees`)."""
    out = []
    for tp, cp, pp in itertools.product(tp_values(p), cp_values(p), pp_values(p)):
        inner = tp * cp * pp
        if p.gpus % inner:
            continue
        dp = p.gpus // inner
        if p.workload.global_batch % dp or not p.limits.allows("dp", dp):
            continue
        try:
            check_degrees(
                p.framework, tp=tp, pp=pp, cp=cp, dp=dp, bf16_model=dict(p.options).get("optimizer_dtype") == "bf16"
            )
        except SpecError:
            continue
        out.extend(Shape(tp, cp, pp, dp, ep) for ep in ep_values(p, tp, cp, dp))
    return sorted(out)


def mb_values(p: Problem, dp: int) -> list[int]:
    per_dp = p.workload.global_batch // dp
    return p.limits.filter("mb", [mb for mb in divisors(per_dp) if mb <= p.limits.mb_max or is_pinned(p, "mb", mb)])


def vp_values(p: Problem, pp: int, micro_batches: int) -> list[int]:
    """Interleave factors up to ``vp_max`` (or the pinned one), at most ``layers / pp`` (every virtual stage
    holds a layer on average), and for ``vp > 1`` micro-batches a multiple of
    ``pp`` (Megatron-LM's interleaved schedule). ``vp`` need not divide the layers: a layout places
    them (:func:`stage_count_ok`); without ``uneven_stages`` the even split must exist."""
    if pp == 1:
        return p.limits.filter("vp", [1])
    L = p.model.layers
    most = max(p.limits.vp_max, p.limits.fixed.get("vp", 1))
    # the divisors of the layers (even chunks) and, where a layout places the layers, the powers of
    # two (the interleaves Megatron-Bridge's recipes run: VP4 for DeepSeek-V3 and Qwen3-235B, VP8 for
    # Llama-3.1-405B); any value when pinned
    out = [
        v
        for v in range(1, most + 1)
        if (v <= p.limits.vp_max or is_pinned(p, "vp", v))
        and (L % v == 0 or v & (v - 1) == 0 or is_pinned(p, "vp", v) or p.limits.layers_per_stage is not None)
        and (v == 1 or micro_batches % pp == 0)
    ]
    if p.limits.layers_per_stage is None:  # a pinned split: any vp (chunk_layers splits each stage)
        out = [v for v in out if pp * v <= most_virtual_stages(p) or is_pinned(p, "vp", v)]
        if not p.limits.uneven_stages:
            out = [v for v in out if L % (pp * v) == 0]
    return p.limits.filter("vp", out)


def most_virtual_stages(p: Problem) -> int:
    """The most virtual pipeline stages ``pp * vp`` the framework can build for the model's layers.

    Megatron-Core: ``layers + 2``, the embedding and the loss each alone in a virtual stage
    (``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``,
    ``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build`` at d98e8a64, or the
    same as ``--pipeline-model-parallel-layout "E|(t|)*94L"``, which allows a chunk without a decoder
    layer: ``pipeline_parallel_layer_layout.py`` ``validate_layer_layout``); the Megatron-MoE-ModelZoo's
    Qwen3-235B-A22B H100 run is PP32 x VPP3 = 96 virtual stages over 94 layers. Other frameworks: the
    layers (the split :mod:`planner.emit` states for them gives every virtual stage a layer)."""
    return p.model.layers + 2 if p.framework == "megatron" else p.model.layers


def is_pinned(p: Problem, var: str, value) -> bool:
    """Whether the user pinned ``var = value``: a pin joins the candidates even where the search's
    own sizing (``mb_max``, ``vp_max``, TP within a node, tokens per CP rank) would leave it out;
    only the plan's own rules refuse it (:mod:`search.pins`)."""
    return var in p.limits.fixed and p.limits.fixed[var] == value


def _moot(p: Problem, var: str, default):
    """The value of an option that changes nothing for this shape: the user's if fixed."""
    return [p.limits.fixed.get(var, default)]


def sp_values(p: Problem, s: Shape) -> list[bool]:
    if s.tp == 1:
        return _moot(p, "sp", False)
    values = [False] if (p.workload.seq_len // s.cp) % s.tp else [False, True]
    if frameworks.moe_needs_sp(p.framework, moe=p.model.is_moe, tp=s.tp):
        values = [True] if True in values else []
    return _runnable(p, s, "sp", p.limits.filter("sp", values))


def data_parallel(p: Problem, s: Shape) -> bool:
    """Whether any parameter is replicated (dense over dp*cp, experts over their data-parallel
    ranks ``tp*dp*cp / (ep * expert_tp)``), i.e. whether ZeRO and DP buckets matter."""
    expert_dp = s.tp * s.dp * s.cp // (s.ep * (s.tp if s.ep == 1 else 1))
    return s.dp * s.cp > 1 or (p.model.is_moe and expert_dp > 1)


def _runnable(p: Problem, s: Shape, var: str, values: list) -> list:
    """``values`` of ``var`` that ``p.framework`` can run with shape ``s`` (costmodel.frameworks.rules)."""
    return [v for v in values if frameworks.allows(p.framework, var, v, pp=s.pp, tp=s.tp, cp=s.cp, dp=s.dp, ep=s.ep)]


def zero_values(p: Problem, s: Shape) -> list[int]:
    if not data_parallel(p, s):
        return _moot(p, "zero", 0)
    return _runnable(p, s, "zero", p.limits.filter("zero", [0, 1, 2, 3]))


def chunk_values(p: Problem, s: Shape, sp: bool = True) -> list[int]:
    """Chunk counts of shape ``s`` with sequence parallelism ``sp`` (Megatron's TE userbuffers
    overlap needs it: :func:`costmodel.frameworks.rules.check_userbuffers_chunks`)."""
    ub = frameworks.userbuffers(p.framework, p.cluster.device)
    if not (s.tp > 1 or (p.model.is_moe and s.ep > 1)) or (ub and not sp):
        return _runnable(p, s, "chunks", p.limits.filter("chunks", [1]) if ub else _moot(p, "chunks", 1))
    opts = frameworks.chunk_options(
        p.framework, s.tp, set(p.limits.chunk_options) | set(_moot(p, "chunks", 1)), p.cluster.device
    )
    return _runnable(p, s, "chunks", p.limits.filter("chunks", opts))


def sp_chunk_pairs(p: Problem, s: Shape) -> list[tuple[bool, int]]:
    """``(sp, chunks)`` pairs shape ``s`` may take (:func:`sp_values` x :func:`chunk_values`)."""
    return [(sp, ch) for sp in sp_values(p, s) for ch in chunk_values(p, s, sp)]


def dma_values(p: Problem, s: Shape, zero: int) -> list:
    """DMA-engine assignments (:mod:`costmodel.physics.comm.dma`) of a plan of shape ``s`` and ZeRO stage
    ``zero``: every full use of the engines when a stream runs on an engine class with a
    bandwidth of its own (engine-bound: the split changes the plan's cost, e.g. ``sg2262-like``'s
    4 CDMA), else only the default (``None``: on link-bound classes such as NVIDIA's NCCL SM
    channels the split changes no closed-form cost). A pinned assignment is the only one."""
    pinned = "dma" in p.limits.fixed
    if not pinned and not any(e.bw_bytes_per_s > 0 and e.scopes for e in p.cluster.device.dma_engines):
        return [None]
    c = ParallelConfig(tp=s.tp, cp=s.cp, pp=s.pp, dp=s.dp, ep=s.ep, zero=zero, framework=p.framework)
    if pinned:  # only plans whose streams and scopes the pinned assignment fits
        try:
            dma.check(p.cluster, replace(c, dma=p.limits.fixed["dma"]), p.model)
        except SpecError:
            return []
        return [p.limits.fixed["dma"]]
    if not engine_bound(p.cluster, c, p.model):
        return [None]
    return dma.assignments(p.cluster, c, p.model)


def engine_bound(cluster, c, model) -> bool:
    """Whether a stream of plan ``c`` may run on an engine class with a bandwidth of its own."""
    return any(
        e.bw_bytes_per_s > 0
        for sc in dma.stream_scopes(cluster, c, model).values()
        for e in dma.classes_for(cluster, sc)
    )


def bucket_values(p: Problem, s: Shape) -> list[float]:
    """Bucket sizes in MB; without data parallelism the bucket is irrelevant (40 MB default); a
    framework that fixes its bucket (torchtitan's 100 MB, :data:`costmodel.frameworks.rules.FIXED_BUCKET_MB`)
    runs that one unless the user pins another; DeepSpeed's pipeline engine overlaps none (0). Megatron's options hold its own default for the shape's DP
    (:func:`costmodel.frameworks.defaults.megatron_ddp_bucket_elements`: 48M elements at DP 48, 192 MB of FP32
    gradients), what its published plans run (row 109, Megatron-LM 2024's GPT 462B, DP 48)."""
    if not data_parallel(p, s):
        return [float(b) for b in _moot(p, "bucket_mb", 40.0)]
    if p.framework in frameworks.FIXED_BUCKET_MB:
        return [float(b) for b in _moot(p, "bucket_mb", frameworks.FIXED_BUCKET_MB[p.framework])]
    if p.framework == "deepspeed" and s.pp > 1:
        # DeepSpeed's pipeline engine reduces the gradients after the schedule, not from the backward hooks
        # (deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__: "We schedule the all-reduces, so disable it
        # in super().backward()", enable_backward_allreduce = False): no overlapped bucket
        return [float(b) for b in _moot(p, "bucket_mb", 0.0)]
    opts = set(float(b) for b in p.limits.bucket_mb_options)
    if "bucket_mb" in p.limits.fixed:
        opts.add(float(p.limits.fixed["bucket_mb"]))
    elif p.framework == "megatron":  # what Megatron-Core runs without --ddp-bucket-size: it grows with DP past 40
        opts.add(megatron_ddp_bucket_elements(s.dp) * (GRAD_BYTES if p.grad_dtype == "fp32" else 2) / 1e6)
    return p.limits.filter("bucket_mb", sorted(opts))


#: layer counts considered for partial full recompute (Megatron ``--recompute-num-layers``)
RECOMPUTE_LAYER_LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)


def recompute_values(p: Problem, max_stage_layers: int) -> list[tuple[str, int | None]]:
    """``(kind, layers)``: none, selective, full (all layers) and, with ``partial_recompute``,
    full recompute of the first ``k`` layers of each stage for ``k`` on a ladder below the
    largest stage (an MoE model with leading dense layers recomputes all or nothing).

    A fixed or bounded ``recompute_layers`` of 0 means all layers.
    """
    lim = p.limits
    kinds = lim.filter("recompute", list(frameworks.recompute_kinds(p.framework)))
    out = [(k, None) for k in kinds]
    if "full" in kinds and lim.partial_recompute and not p.model.dense_layers:
        out += [("full", k) for k in RECOMPUTE_LAYER_LADDER if k < max_stage_layers]
    k = lim.fixed.get("recompute_layers")
    if "full" in kinds and k and k <= max_stage_layers and ("full", k) not in out:  # a pin (search.pins)
        out.append(("full", k))
    return [(kind, k) for kind, k in out if kind != "full" or lim.allows("recompute_layers", 0 if k is None else k)]


def splits(layers: int, pp: int, vp: int, first_min: int = 1, uneven: bool = True, pinned: Split | None = None):
    """Stage splits :class:`Split`-like tuples ``(first, mid, last)``, each a multiple of ``vp``
    and at least ``vp``; ``first >= first_min`` (an MoE model's leading dense layers stay on stage 0).
    With ``pinned`` (:func:`pinned_split`) only that split, whatever ``vp``.

    Ordered by the middle stage (largest first), then the first stage.

    >>> list(splits(126, 16, 8, pinned=Split(7, 8, 7)))
    [(7, 8, 7)]
    """
    if pinned is not None:
        if pinned.first >= first_min and pinned.first + (pp - 2) * pinned.mid + pinned.last * (pp > 1) == layers:
            yield (pinned.first, pinned.mid, pinned.last)
        return
    if pp == 1:
        if first_min <= layers:
            yield (layers, 0, 0)
        return
    if layers % vp:
        return
    units, fmin = layers // vp, -(-first_min // vp)
    if not uneven:
        if units % pp == 0 and units // pp >= fmin:
            n = vp * units // pp
            yield (n, n if pp > 2 else 0, n)
        return
    if pp == 2:
        for f in range(max(1, fmin), units):
            yield (vp * f, 0, vp * (units - f))
        return
    for m in range((units - 2) // (pp - 2), 0, -1):
        rest = units - (pp - 2) * m
        for f in range(max(1, fmin), rest):
            yield (vp * f, vp * m, vp * (rest - f))
