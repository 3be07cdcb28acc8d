"""What the search answers: a :class:`Problem` (model, cluster, workload) under user :class:`Limits`.

``Limits`` fix, bound or exclude any config variable (``tp=8``, ``pp <= 16``, no ZeRO-3), set
a memory headroom, and size the candidate lists the search chooses from. Every candidate
list is built from these by :mod:`search.candidates`, the one source of candidate values.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> p = Problem(model=load_model("gpt3-175b"), cluster=load_cluster("a100-80g").with_gpus(64),
...             workload=Workload(global_batch=64, seq_len=2048), limits=Limits(fixed={"tp": 8}))
>>> p.limits.allows("tp", 8), p.limits.allows("tp", 4)
(True, False)
>>> Limits(maximum={"pp": 16}).allows("pp", 32)
False
>>> Limits(fixed={"warp": 2})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: fixed='warp': must be one of tp, pp, dp, ep, cp, vp, mb, sp, zero, recompute, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.plan_checks import GRAD_DTYPES
from costmodel.frameworks.rules import required_zero
from costmodel.spec.errors import SpecError
from costmodel.spec.plan_checks import FRAMEWORKS
from costmodel.frameworks.rules import (
    check_fields,
    check_userbuffers_chunks,
    refuse_unsearchable_recompute,
    userbuffers,
)
from costmodel.spec.bounds import _positive
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB
from costmodel.physics.memory.stage_memory import FRAGMENTATION

#: config variables a user may fix, bound or exclude (``recompute_layers`` 0 = all layers)
VARIABLES = (
    "tp",
    "pp",
    "dp",
    "ep",
    "cp",
    "vp",
    "mb",
    "sp",
    "zero",
    "recompute",
    "recompute_layers",
    "bucket_mb",
    "chunks",
    "dma",
)
NUMERIC = ("tp", "pp", "dp", "ep", "cp", "vp", "mb", "zero", "recompute_layers", "bucket_mb", "chunks")


@dataclass(frozen=True, kw_only=True)
class Limits:
    """User constraints on the plan and the size of the candidate lists.

    Attributes
    ----------
    fixed : variable -> the only value allowed (``{"tp": 8, "sp": True}``).
    minimum, maximum : variable -> inclusive bound (numeric variables only).
    exclude : variable -> values not allowed (``{"zero": (3,)}``).
    headroom_bytes : HBM kept free on every GPU beyond the cost model's own reserve.
    tp_across_nodes : allow tensor parallelism to span nodes (default: within one node).
    mb_max : largest micro-batch considered. vp_max : largest interleave factor considered.
    min_tokens_per_cp_rank : context parallelism only while each rank keeps this many tokens.
    chunk_options : chunk counts for overlappable collectives (used when tp > 1 or ep > 1).
    bucket_mb_options : DP gradient bucket sizes in MB (0 = no overlap), used when there is DP.
    partial_recompute : also consider full recompute of only some layers per stage.
    uneven_stages : let the first and last pipeline stage hold a different number of layers.
    flash_attention : the attention kernel assumed for every plan.
    fused_elementwise : element-wise kernels fused (False: PyTorch eager; the stack's,
        :func:`costmodel.frameworks.stacks.stack_config`).
    layers_per_stage : a pinned stage split ``(first, mid, ..., mid, last)`` (``None``: searched);
        it fixes ``pp`` to its length and is the only split considered, with any ``vp`` (a stage's
        layers need not be a multiple of ``vp``: :func:`costmodel.spec.stages.chunk_layers`).
    """

    fixed: dict = field(default_factory=dict)
    minimum: dict = field(default_factory=dict)
    maximum: dict = field(default_factory=dict)
    exclude: dict = field(default_factory=dict)
    headroom_bytes: float = 0.0
    tp_across_nodes: bool = False
    mb_max: int = 16
    vp_max: int = 8
    min_tokens_per_cp_rank: int = 1024
    chunk_options: tuple = (1, 2, 4, 8)
    bucket_mb_options: tuple = (25, 160)  # PyTorch DDP's 25 MB, Megatron-Core's 40M FP32 elements
    partial_recompute: bool = True
    uneven_stages: bool = True
    flash_attention: bool = True
    fused_elementwise: bool = True
    layers_per_stage: tuple | None = None

    def __post_init__(self):
        if self.layers_per_stage is not None:
            lps = tuple(self.layers_per_stage)
            object.__setattr__(self, "layers_per_stage", lps)
            if not lps or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in lps):
                raise SpecError("layers_per_stage", ",".join(map(str, lps)), "integers >= 1, one per pipeline stage")
            if len(lps) > 2 and len(set(lps[1:-1])) > 1:
                raise SpecError(
                    "layers_per_stage",
                    ",".join(map(str, lps)),
                    "of the form first,mid,...,mid,last to pin in recommend (the search gives every "
                    "middle stage the same count; evaluate takes any split)",
                )
        for name in ("fixed", "minimum", "maximum", "exclude"):
            d = dict(getattr(self, name))
            object.__setattr__(self, name, d)
            allowed = NUMERIC if name in ("minimum", "maximum") else VARIABLES
            for k in d:
                if k not in allowed:
                    raise SpecError(name, k, f"one of {', '.join(allowed)}")
        object.__setattr__(
            self,
            "exclude",
            {k: tuple(v) if isinstance(v, (list, tuple, set, frozenset)) else (v,) for k, v in self.exclude.items()},
        )
        _positive("headroom_bytes", self.headroom_bytes, allow_zero=True)
        for name in ("mb_max", "vp_max", "min_tokens_per_cp_rank"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SpecError(name, v, "a positive integer")

    def allows(self, var: str, value) -> bool:
        """Whether ``var = value`` passes the fixed values, bounds and exclusions."""
        if var in self.fixed and self.fixed[var] != value:
            return False
        if value in self.exclude.get(var, ()):
            return False
        if var in self.minimum and value < self.minimum[var]:
            return False
        if var in self.maximum and value > self.maximum[var]:
            return False
        return True

    def filter(self, var: str, values) -> list:
        return [v for v in values if self.allows(var, v)]


#: ParallelConfig fields a problem may fix for every plan (:attr:`Problem.options`)
PLAN_OPTIONS = (
    "fp8_param_gather",
    "fused_norm",
    "loss_impl",
    "optimizer_dtype",
    "recompute_modules",
    "ep_dispatcher",
    "ep_overlap",
    "module_layout",
    "pp_grad_reduce",
    "sp_saved_inputs",
    "pp_free_stage_inputs",
    "optimizer_offload_fraction",
    "overlap_cpu_optimizer_d2h_h2d",
    "activation_offload_layers",
    "offload_modules",
    "cp_impl",
)


#: ``activation_offload_layers`` of the search's own problem where each plan offloads the fewest layers that make it
#: fit (:mod:`search.act_offload_choice`; the tables charge that count, ``Tables.with_fewest_fitting``); not a user value
FEWEST_FITTING = -1


def _act_offload_limits(p: "Problem", n: int) -> Limits:
    """Activation CPU offload of ``n`` layers as a plan option (:mod:`costmodel.physics.mechanics.act_offload`): the limits with
    ``pp = 1`` and ``recompute = none`` pinned, as Megatron-LM d98e8a64 runs it (``transformer_config.py``
    ``__post_init__``: no pipeline parallelism, no activation recomputation, ``n`` below the layer count)."""
    lim = p.limits
    if n != FEWEST_FITTING and n >= p.model.layers:
        raise SpecError(
            "activation_offload_layers",
            n,
            f"below the model's layers={p.model.layers} (Megatron: "
            "CPU offloading can be done only for layers less than num_layers)",
        )
    for var, value, why in (
        ("pp", 1, "no support for pipeline parallelism with CPU offloading"),
        ("recompute", "none", "CPU offloading does not work when activation recomputation is enabled"),
    ):
        if not lim.allows(var, value):
            raise SpecError(
                var,
                lim.fixed.get(var, f"excluded {value}"),
                f"{value} with activation_offload_layers={n} (Megatron: {why})",
            )
    return replace(lim, fixed={**lim.fixed, "pp": 1, "recompute": "none"})


def _fg_offload_limits(p: "Problem", given: dict) -> Limits:
    """Fine-grained activation offloading as a plan option (:mod:`costmodel.physics.mechanics.fg_offload`): an MoE
    model's plans without full recompute, as Megatron-LM d98e8a64 runs it (``transformer_config.py``
    ``__post_init__``; the other refusals are the option probe's, :func:`costmodel.spec.plan_checks.check_fg_offload`)."""
    mods = ",".join(given["offload_modules"])
    if not p.model.is_moe:
        raise SpecError("offload_modules", mods, "unset for a dense model (the modelled modules are an MoE layer's)")
    if "moe" in (given.get("recompute_modules") or ()):
        raise SpecError("offload_modules", mods, "unset with moe in the recompute modules (Megatron refuses both)")
    lim = p.limits
    if lim.fixed.get("recompute") == "full":
        raise SpecError("recompute", "full", "none or selective with offload_modules (Megatron refuses full recompute)")
    return replace(lim, exclude={**lim.exclude, "recompute": tuple(set(lim.exclude.get("recompute", ())) | {"full"})})


def _check_offload(limits: Limits, given: dict) -> None:
    """Optimizer CPU offload as a plan option (:mod:`search.offload_choice`): what Megatron-LM d98e8a64 refuses
    with it (``costmodel.spec.plan_checks.check_offload``) that no single option's probe sees."""
    f, overlap = given.get("optimizer_offload_fraction", 0.0), given.get("overlap_cpu_optimizer_d2h_h2d", False)
    if overlap and not f:
        raise SpecError("overlap_cpu_optimizer_d2h_h2d", True, "false unless optimizer_offload_fraction > 0")
    if not f:
        return
    if not limits.allows("zero", 1):
        raise SpecError(
            "zero",
            limits.fixed.get("zero", "excluded 1"),
            "1 with optimizer_offload_fraction "
            "(Megatron's --optimizer-cpu-offload runs on the distributed optimizer, ZeRO-1)",
        )
    if given.get("optimizer_dtype", "fp32") != "fp32":
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "0 with optimizer_dtype=bf16 (Megatron's offload keeps FP32 master weights on the host)",
        )
    if given.get("fp8_param_gather"):
        raise SpecError(
            "optimizer_offload_fraction",
            f,
            "0 with fp8_param_gather (Megatron needs the delayed FP8 recipe for both, which is not a plan field)",
        )


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One planning question: the cluster carries the GPU count (``cluster.num_gpus``)."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    limits: Limits = field(default_factory=Limits)
    framework: str = "megatron"  # the framework that runs the plan (costmodel.frameworks.rules)
    #: the dtype gradients are accumulated and reduced in (``ParallelConfig.grad_dtype``): part of the
    #: run's numerics, so every plan of the search has it; it is not a search variable
    grad_dtype: str = "fp32"
    #: plan settings every plan of the search runs with, as ``(ParallelConfig field, value)`` pairs from
    #: :data:`PLAN_OPTIONS` (e.g. ``(("fp8_param_gather", True),)``): the run's numerics and recompute
    #: modules and the EP dispatcher (a stack choice), not search variables (``recompute_modules`` applies to
    #: the selective-recompute plans, ``ep_dispatcher`` to those with ep > 1)
    options: tuple = ()
    #: the fit tests charge the assumed allocator fragmentation allowance (``FRAGMENTATION`` of the activations,
    #: :func:`costmodel.physics.memory.stage_memory.reserved_bytes`); False only in ``search.solve``'s second look at a
    #: plan whose every degree the user pinned and that fits only without it (:mod:`costmodel.physics.memory.verdict`)
    fragmentation_allowance: bool = True

    def __post_init__(self):
        if self.framework not in FRAMEWORKS:
            raise SpecError("framework", self.framework, f"one of {', '.join(FRAMEWORKS)}")
        opts = []
        for k, v in sorted(dict(self.options).items()):
            if k not in PLAN_OPTIONS:
                raise SpecError("options", k, f"one of {', '.join(PLAN_OPTIONS)}")
            v = tuple(v) if k in ("recompute_modules", "offload_modules") else v
            probe = {
                "recompute_modules": dict(recompute="selective"),
                "fp8_param_gather": dict(zero=1),
                "pp_grad_reduce": dict(zero=2),
                "optimizer_dtype": dict(zero=1),
                "optimizer_offload_fraction": dict(zero=1),
                "overlap_cpu_optimizer_d2h_h2d": dict(zero=1, optimizer_offload_fraction=1.0),
                "ep_overlap": dict(ep=2),
                "cp_impl": dict(cp=2),
            }.get(k, {})
            if not (k == "activation_offload_layers" and v == FEWEST_FITTING):  # (the search's own value)
                ParallelConfig(framework=self.framework, **probe, **{k: v})  # refuses a value the framework cannot run
            opts.append((k, v))
        given = dict(opts)
        _check_offload(self.limits, given)
        if given.get("fp8_param_gather") and self.workload.dtype != "fp8":
            raise SpecError(
                "fp8_param_gather",
                True,
                f"false unless dtype=fp8 (FP8 parameters of an FP8 run; dtype={self.workload.dtype})",
            )
        if (
            "fp8_param_gather" not in given
            and self.workload.dtype == "fp8"
            and self.framework == "megatron"
            and given.get("optimizer_dtype", "fp32") == "fp32"
            and not given.get("optimizer_offload_fraction")
        ):
            # chosen where it runs (the distributed optimizer / Megatron FSDP: Choice.config_options): FP8
            # parameters drop Transformer Engine's FP8 weight copy (costmodel.physics.memory.stage_memory.fp8_weight_cache_bytes) and
            # halve the parameter all-gather (costmodel.physics.memory.stage_memory.param_gather_bytes), so they are never slower and
            # never larger; --no-fp8-param-gather states False
            opts = sorted(opts + [("fp8_param_gather", True)])
        object.__setattr__(self, "options", tuple(opts))
        zero = required_zero(
            self.framework, given.get("optimizer_dtype", "fp32"), given.get("optimizer_offload_fraction", 0.0)
        )
        if zero is not None:  # BF16 Adam state or CPU offload under Megatron-Core: ZeRO-1 only (ParallelConfig)
            if self.limits.fixed.get("zero", zero) != zero:  # (a pinned zero under offload: _check_offload said so)
                raise SpecError(
                    "zero",
                    self.limits.fixed["zero"],
                    "1 with optimizer_dtype=bf16 under framework=megatron "
                    "(NeMo's distributed_fused_adam shards the optimizer state, ZeRO-1)",
                )
            object.__setattr__(self, "limits", replace(self.limits, fixed={**self.limits.fixed, "zero": zero}))
        if given.get("activation_offload_layers"):
            object.__setattr__(self, "limits", _act_offload_limits(self, given["activation_offload_layers"]))
        if given.get("offload_modules"):
            object.__setattr__(self, "limits", _fg_offload_limits(self, given))
        if self.grad_dtype not in GRAD_DTYPES:
            raise SpecError("grad_dtype", self.grad_dtype, f"one of {', '.join(GRAD_DTYPES)}")
        pinned = {k: v for k, v in self.limits.fixed.items() if k in ("zero", "pp", "vp", "tp", "cp", "sp", "chunks")}
        if pinned:  # a pinned setting the framework cannot run: say why, before any search
            probe = dict(pinned)  # unpinned settings as the search may choose them: never the cause
            probe.setdefault("sp", True)
            if probe.get("chunks", 1) > 1:
                probe.setdefault("tp", probe["chunks"])
            check_fields(self.framework, **probe)
            if probe.get("chunks", 1) > 1 and userbuffers(self.framework, self.cluster.device):
                check_userbuffers_chunks(tp=probe["tp"], sp=probe["sp"], chunks=probe["chunks"])
        if "recompute" in self.limits.fixed:
            refuse_unsearchable_recompute(self.framework, self.limits.fixed["recompute"])
        if self.framework == "deepspeed":  # no interleaving, ring CP or chunked overlap (costmodel.frameworks.rules)
            most = {k: min(1, self.limits.maximum.get(k, 1)) for k in ("vp", "cp", "chunks")}
            object.__setattr__(self, "limits", replace(self.limits, maximum={**self.limits.maximum, **most}))
        if self.framework != "megatron":  # what planner.emit can state for them: all-or-no recompute; DeepSpeed
            # even stages (torchtitan takes any split: module_fqns_per_model_part, planner.emit.torchtitan_lines)
            uneven = self.limits.uneven_stages and self.framework == "fsdp2"
            object.__setattr__(self, "limits", replace(self.limits, uneven_stages=uneven, partial_recompute=False))
        if not self.cluster.num_gpus:
            raise SpecError("gpus", self.cluster.num_gpus, "a positive GPU count (--gpus N)")
        if self.workload.mode != "train":
            raise SpecError("mode", self.workload.mode, "'train' (inference planning is not available yet)")
        lps = self.limits.layers_per_stage
        if lps is not None:
            if sum(lps) != self.model.layers:
                raise SpecError(
                    "layers_per_stage",
                    ",".join(map(str, lps)),
                    f"counts summing to layers={self.model.layers} (they sum to {sum(lps)})",
                )
            if self.limits.fixed.get("pp", len(lps)) != len(lps):
                raise SpecError(
                    "layers_per_stage",
                    ",".join(map(str, lps)),
                    f"{self.limits.fixed['pp']} counts, one per stage of pp={self.limits.fixed['pp']}",
                )
        hbm_bytes = self.cluster.device.hbm_bytes
        if self.limits.headroom_bytes >= hbm_bytes:  # nothing left to plan with
            raise SpecError(
                "headroom_gib",
                round(self.limits.headroom_bytes / GiB, 3),
                f"below the device HBM {hbm_bytes / GiB:.1f} GiB ({self.cluster.device.name})",
            )

    @property
    def gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def hbm_cap_bytes(self) -> float:
        """Memory a stage may use: HBM minus the user's headroom."""
        return self.cluster.device.hbm_bytes - self.limits.headroom_bytes

    @property
    def fragmentation(self) -> float:
        """The fragmentation fraction the fit tests charge: :data:`~costmodel.physics.memory.stage_memory.FRAGMENTATION`,
        or 0.0 without the allowance (:attr:`fragmentation_allowance`)."""
        return FRAGMENTATION if self.fragmentation_allowance else 0.0

    @property
    def degrees_pinned(self) -> bool:
        """Whether the user gave every degree (``tp``, ``pp``, ``dp``, ``cp`` pinned, one of them implied by the GPU
        count; ``ep`` too for an MoE model): the plan is the user's, not the search's choice."""
        fixed = self.limits.fixed
        return sum(k not in fixed for k in ("tp", "pp", "dp", "cp")) <= 1 and ("ep" in fixed or not self.model.is_moe)

    def with_margin(self, fraction: float) -> "Problem":
        """This problem with ``fraction`` of its :attr:`hbm_cap_bytes` added to the headroom: the problem whose plans
        keep the memory model's measured margin (:mod:`costmodel.trust.memory_margin`, ``search.solve._keep_margin``)."""
        return replace(
            self, limits=replace(self.limits, headroom_bytes=self.limits.headroom_bytes + fraction * self.hbm_cap_bytes)
        )
