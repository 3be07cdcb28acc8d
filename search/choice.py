"""A plan without its stage split (:class:`Choice`): what the search picks per group, the key of every cost table.

The stage split is decided per choice by :mod:`search.tables` (its :class:`~search.tables.StageTable`) and CP-SAT.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

from costmodel.frameworks import rules as frameworks
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.units import MB

from .candidates import Shape


@lru_cache(maxsize=None)
def _semantics(framework: str, zero: int, pp: int, pp_grad_reduce: str = "step"):
    """:func:`costmodel.frameworks.rules.of` of a choice's framework, ZeRO stage, pipeline and gradient-reduce option."""
    return frameworks.of(SimpleNamespace(framework=framework, zero=zero, pp=pp, pp_grad_reduce=pp_grad_reduce))


@lru_cache(maxsize=None)
def _per_microbatch(framework: str, zero: int, pp: int, dp_cp: int, pp_grad_reduce: str = "step"):
    sem = _semantics(framework, zero, pp, pp_grad_reduce)
    return sem if sem.per_microbatch and dp_cp > 1 else None


@dataclass(frozen=True)
class Choice:
    """A plan without its stage split. ``recompute_layers``: with ``full``, layers recomputed
    per stage (``None`` = all)."""

    shape: Shape
    mb: int
    vp: int
    sp: bool
    chunks: int
    zero: int
    recompute: str
    recompute_layers: int | None
    bucket_mb: float
    framework: str = "megatron"  # costmodel.frameworks.rules: whose ZeRO semantics are charged
    dma: object = None  # costmodel.spec.dma_plan.Assignment (None: the default split of the engines)
    grad_dtype: str = "fp32"  # the problem's (search.problem.Problem.grad_dtype)
    options: tuple = ()  # the problem's plan options (search.problem.Problem.options)

    def key(self) -> tuple:
        """A total order (``recompute_layers=None``, all layers, sorts after any number; the
        default DMA assignment first)."""
        return (
            self.shape,
            self.mb,
            self.vp,
            self.sp,
            self.chunks,
            self.zero,
            self.recompute,
            self.recompute_layers if self.recompute_layers is not None else 1 << 30,
            self.bucket_mb,
            self.framework,
            "" if self.dma is None else str(self.dma),
            self.grad_dtype,
            self.options,
        )

    def __lt__(self, other: "Choice") -> bool:
        return self.key() < other.key()

    def config(
        self, flash_attention: bool = True, layers_per_stage=None, fused_elementwise: bool = True
    ) -> ParallelConfig:
        s = self.shape
        return ParallelConfig(
            tp=s.tp,
            pp=s.pp,
            dp=s.dp,
            ep=s.ep,
            cp=s.cp,
            sp=self.sp,
            zero=self.zero,
            recompute=self.recompute,
            recompute_layers=self.recompute_layers,
            mb=self.mb,
            vp=self.vp,
            bucket_bytes=self.bucket_mb * MB,
            chunks=self.chunks,
            flash_attention=flash_attention,
            layers_per_stage=layers_per_stage,
            fused_elementwise=fused_elementwise,
            framework=self.framework,
            dma=self.dma,
            grad_dtype=self.grad_dtype,
            **self.config_options(),
        )

    def plain_config(self, layers_per_stage=None) -> ParallelConfig:
        """:meth:`config` (default flags) without recompute and with one model chunk (``vp = 1``): the
        probe of the per-stage parameters, model state and DP collectives, built once (not as
        ``replace`` of a second config: each construction validates every field)."""
        s = self.shape
        opts = self.config_options()
        opts.pop("recompute_modules", None)
        return ParallelConfig(
            tp=s.tp,
            pp=s.pp,
            dp=s.dp,
            ep=s.ep,
            cp=s.cp,
            sp=self.sp,
            zero=self.zero,
            recompute="none",
            recompute_layers=None,
            mb=self.mb,
            vp=1,
            bucket_bytes=self.bucket_mb * MB,
            chunks=self.chunks,
            layers_per_stage=layers_per_stage,
            framework=self.framework,
            dma=self.dma,
            grad_dtype=self.grad_dtype,
            **opts,
        )

    def config_options(self) -> dict:
        """The problem's plan options this choice runs (:data:`search.problem.PLAN_OPTIONS`): recompute
        modules only with selective recompute, ``fp8_param_gather`` only with ZeRO >= 1 (Megatron refuses it
        without the distributed optimizer; those plans keep TE's FP8 weight copies)."""
        opts = dict(self.options)
        if self.recompute != "selective":
            opts.pop("recompute_modules", None)
        if self.zero < 1:
            opts.pop("fp8_param_gather", None)
        if self.shape.ep == 1:
            opts.pop("ep_dispatcher", None)  # no expert-parallel dispatch to run
        if self.shape.cp == 1:
            opts.pop("cp_impl", None)  # no context parallelism to run
        if opts.get("ep_overlap") and (
            self.shape.ep == 1
            or self.recompute == "full"
            or (self.shape.pp > 1 and self.vp < 2)
            or "moe" in (opts.get("recompute_modules") or ())
        ):
            # the EP all-to-all overlap where Megatron-Core runs it (costmodel.spec.plan_checks.check_ep_overlap);
            # the other plans run without it
            opts.pop("ep_overlap")
        if self.framework != "fsdp2" or self.zero != 2:
            opts.pop("pp_grad_reduce", None)  # only FSDP without resharding has the choice (ParallelConfig)
        if self.framework == "megatron" and self.zero != 1:
            # BF16 Adam state under Megatron-Core is the ZeRO-1 distributed_fused_adam: the Problem pins zero=1, so
            # only the bounds' probes of other stages get here (their memory and DP terms do not read the optimizer)
            opts.pop("optimizer_dtype", None)
        if self.framework != "megatron" or self.zero != 1:
            # optimizer CPU offload runs on Megatron's distributed optimizer only: the Problem pins zero=1, so only
            # the bounds' probes of other stages get here (search.offload_choice)
            opts.pop("optimizer_offload_fraction", None)
            opts.pop("overlap_cpu_optimizer_d2h_h2d", None)
        if self.shape.pp > 1 or self.recompute != "none" or opts.get("activation_offload_layers", 0) < 0:
            # activation offload runs at pp = 1 without recompute only: the Problem pins both, so only the
            # bounds' probes of other stages get here; a negative count (search.problem.FEWEST_FITTING) is the
            # search's own, charged by the tables per plan (search.act_offload_choice): the config is without it
            opts.pop("activation_offload_layers", None)
        return opts

    def __hash__(self) -> int:
        """The hash of the fields, computed once: a search hashes a choice tens of times (cache keys,
        heaps, its tables), and the generated ``__hash__`` builds and hashes the field tuple each time
        (with the shape's). Not pickled (:meth:`__getstate__`): string hashes differ between processes."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(
                (
                    self.shape,
                    self.mb,
                    self.vp,
                    self.sp,
                    self.chunks,
                    self.zero,
                    self.recompute,
                    self.recompute_layers,
                    self.bucket_mb,
                    self.framework,
                    self.dma,
                    self.grad_dtype,
                    self.options,
                )
            )
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_pmb")}

    def per_microbatch(self):
        """The DP collectives this choice runs inside each micro-batch (``None``: none), a cache key;
        computed once per choice (the bounds' and tables' cache keys ask for it tens of thousands of
        times, each building :meth:`config_options`), kept beside the hash and, like it, not pickled."""
        d = self.__dict__
        if "_pmb" not in d:
            # config_options() keeps ``pp_grad_reduce`` for FSDP2 ZeRO-2 only (its other rules drop other
            # keys), read here without building the options dict
            reduce = (
                dict(self.options).get("pp_grad_reduce", "step")
                if self.framework == "fsdp2" and self.zero == 2
                else "step"
            )
            object.__setattr__(
                self,
                "_pmb",
                _per_microbatch(self.framework, self.zero, self.shape.pp, self.shape.dp * self.shape.cp, reduce),
            )
        return d["_pmb"]

    def micro_batches(self, global_batch: int) -> int:
        return global_batch // (self.shape.dp * self.mb)
