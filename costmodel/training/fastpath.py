"""Fast scoring of many plans of one problem: :class:`Scorer`, behind :meth:`planner.Planner.evaluate_many`.

It computes the same step time, MFU and peak memory as :func:`costmodel.api.evaluate`,
from the same cost-model functions, with two shortcuts and no formula of its own:

* **one representative per stage class.** Stages holding the same number of (dense, MoE)
  layers at the same position (first, middle, last) have the same per-micro-batch time, DP
  collectives, optimizer time and model state; the middle stage nearest the front holds the
  most in-flight micro-batches (peak memory) and has the least 1F1B head start for its
  gradient reduction (largest DP exposure), so it stands for its class in every maximum of
  ``evaluate``. So ``stage_timing``, ``dp_comm`` and ``stage_memory`` run once per class, not
  once per stage.
* **caches keyed on what each function reads.** Within one problem, ``stage_timing`` does not
  read the bucket size, ``stage_memory`` neither the bucket size nor the chunk count, and
  ``dp_comm``/``stage_params`` only the degrees, ZeRO stage and stage split; configs that differ
  elsewhere share these results.

``tests/test_tuner.py`` checks both shortcuts against ``evaluate`` on random plans (dense, MoE,
uneven stages, every ZeRO stage, recompute, interleaving); a cost-model change that breaks one
of them fails there. The full :class:`~costmodel.training.estimate.Estimate` (breakdown, overlap,
reasons, memory per stage) stays :func:`costmodel.api.evaluate`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.physics.comm import dma
from costmodel.frameworks import rules as frameworks
from costmodel.compose.stage_terms import dp_interference, stage_dp_terms, stage_optimizer_s
from costmodel.engines.analytic import stage_timing
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import PlannerError
from costmodel.training.estimate import Estimate
from costmodel.physics.kernels.flops import hardware_flops_per_step, model_flops_per_step
from costmodel.physics.mechanics import act_offload, fg_offload
from costmodel.physics.memory.stage_memory import stage_memory
from costmodel.physics.memory.stage_contents import chunk_counts, layer_counts
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.compose.step import compose


@dataclass(frozen=True)
class Score:
    """The headline numbers of one plan (SI units); ``status`` is ``ok`` or ``invalid``.

    An invalid plan (it breaks a divisibility rule) has ``reason`` set and ``inf``/``0``
    numbers, so a list of scores stays aligned with the configs it scores.
    """

    config: ParallelConfig | None  # None: an invalid entry that is no config at all (``reason`` says why)
    status: str
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    peak_memory_bytes: float
    hbm_bytes: float
    fits: bool
    reason: str = ""

    @property
    def ok(self) -> bool:
        """Valid and fits in memory."""
        return self.status == "ok" and self.fits

    def to_dict(self) -> dict:
        """Plain JSON-ready values (the DESIGN.md keys it has, and ``reason``)."""
        inf = float("inf")
        return {
            "status": self.status,
            "config": None if self.config is None else self.config.to_dict(),
            "step_time_s": None if self.step_time_s == inf else self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "hbm_bytes": self.hbm_bytes,
            "fits": self.fits,
            "reason": self.reason,
        }

    @classmethod
    def from_estimate(cls, e: Estimate) -> "Score":
        return cls(
            config=e.config,
            status="ok",
            step_time_s=e.step_time_s,
            tokens_per_s=e.tokens_per_s,
            mfu=e.mfu,
            hfu=e.hfu,
            model_tflops_per_gpu=e.model_tflops_per_gpu,
            peak_memory_bytes=e.peak_memory_bytes,
            hbm_bytes=e.hbm_bytes,
            fits=e.fits,
        )

    @classmethod
    def invalid(cls, config: ParallelConfig, reason: str, hbm_bytes: float) -> "Score":
        return cls(
            config=config,
            status="invalid",
            step_time_s=float("inf"),
            tokens_per_s=0.0,
            mfu=0.0,
            hfu=0.0,
            model_tflops_per_gpu=0.0,
            peak_memory_bytes=0.0,
            hbm_bytes=hbm_bytes,
            fits=False,
            reason=" ".join(reason.split()),
        )


class Scorer:
    """Scores plans of one (model, cluster sized to its GPUs, workload); caches grow with use."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload):
        self.model, self.cluster, self.workload = model, cluster, workload
        self.model_flops = model_flops_per_step(model, workload)
        self.peak_flops = cluster.device.peak_flops_per_s(workload.dtype)
        self.hbm = cluster.device.hbm_bytes
        self._classes: dict = {}
        self._timing: dict = {}
        self._dp: dict = {}
        self._optim: dict = {}
        self._memory: dict = {}

    # ---- stage classes
    def classes(self, c: ParallelConfig) -> tuple[int, ...]:
        """The first stage of each class (same layer counts and position), in stage order."""
        return self._class_counts(c)[0]

    def _class_counts(self, c: ParallelConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(first stage of each class, stages in that class)."""
        key = (c.pp, c.vp, c.layers_per_stage, c.layout)
        out = self._classes.get(key)
        if out is None:
            first, count = {}, {}
            for s in range(c.pp):
                # (dense, MoE) layers of each chunk: stages alike in these hold alike in-flight memory
                k = (chunk_counts(self.model, c, s), s == 0, s == c.pp - 1)
                first.setdefault(k, s)
                count[k] = count.get(k, 0) + 1
            out = self._classes[key] = (tuple(first.values()), tuple(count[k] for k in first))
        return out

    # ---- cached per-class terms (keys: the fields each cost-model function reads)
    def _stage(self, c: ParallelConfig, s: int):
        sem = frameworks.of(c)
        key = (
            s,
            c.tp,
            c.pp,
            c.dp,
            c.ep,
            c.cp,
            c.sp,
            (sem, c.fsdp_copies) if sem.per_microbatch else None,
            c.recompute,
            c.recompute_layers,
            c.recompute_modules,
            c.mb,
            c.vp,
            c.chunks,
            c.flash_attention,
            c.cp_impl,
            c.layers_per_stage,
            c.layout,
            dma.resolve(self.cluster, c, self.model),
        )
        st = self._timing.get(key)
        if st is None:
            t = stage_timing(self.model, self.cluster, self.workload, c, s)
            st = self._timing[key] = (t.microbatch_s, t.fwd_s, t.bwd_s + t.recompute_s)
        return st

    def _dp_terms(self, c: ParallelConfig, s: int):
        key = (
            s,
            c.tp,
            c.pp,
            c.dp,
            c.ep,
            c.cp,
            c.vp,
            c.zero,
            c.framework,
            c.layers_per_stage,
            c.layout,
            c.bucket_bytes,
            c.grad_dtype,
            c.fp8_param_gather,
            c.pp_grad_reduce,
            dma.resolve(self.cluster, c, self.model),
        )  # the engines each stream runs on (costmodel.physics.comm.dma)
        d = self._dp.get(key)
        if d is None:
            d = self._dp[key] = stage_dp_terms(self.model, self.cluster, c, s)
        return d

    def _optimizer(self, c: ParallelConfig, s: int) -> float:
        key = (
            s,
            c.tp,
            c.pp,
            c.dp,
            c.ep,
            c.cp,
            c.zero >= 1,
            c.layers_per_stage,
            c.optimizer_dtype,
            c.layout,
            c.optimizer_offload_fraction,
            c.overlap_cpu_optimizer_d2h_h2d,
        )
        t = self._optim.get(key)
        if t is None:
            t = self._optim[key] = stage_optimizer_s(self.model, self.cluster, c, s)
        return t

    def _peak_memory(self, c: ParallelConfig, reps) -> float:
        key = (
            c.tp,
            c.pp,
            c.dp,
            c.ep,
            c.cp,
            c.sp,
            c.zero,
            c.framework,
            c.recompute,
            c.recompute_layers,
            c.mb,
            c.vp,
            c.flash_attention,
            c.layers_per_stage,
            c.recompute_modules,
            c.fp8_param_gather,
            c.optimizer_dtype,
            c.grad_dtype,
            c.layout,
            c.pp_grad_reduce,
            c.optimizer_offload_fraction,
            c.sp_saved_inputs,
            c.pp_free_stage_inputs,
            c.activation_offload_layers,
            c.offload_modules,
            c.loss_impl,
        )
        peak = self._memory.get(key)
        if peak is None:
            peak = self._memory[key] = max(
                stage_memory(self.model, self.workload, c, s, self.cluster.device).total_bytes for s in reps
            )
        return peak

    # ---- scoring
    def score(self, c: ParallelConfig) -> Score:
        """The :class:`Score` of ``c`` (invalid plans scored ``invalid``, never raised)."""
        try:
            validate_config(self.model, self.cluster, self.workload, c)
        except PlannerError as e:
            return Score.invalid(c, str(e), self.hbm)
        reps, weights = self._class_counts(c)
        timing = [self._stage(c, s) for s in reps]
        step = compose(
            [t[0] for t in timing],
            [t[1] for t in timing],
            [t[2] for t in timing],
            *zip(*(self._dp_terms(c, s) for s in reps)),
            [self._optimizer(c, s) for s in reps],
            reps,
            [sum(layer_counts(self.model, c, s)) for s in reps],
            micro_batches(self.workload, c),
            c.pp,
            c.vp,
            weights,
            interference=dp_interference(self.cluster, c),
        ).step_s
        if c.activation_offload_layers:  # pp = 1: one stage (costmodel.physics.mechanics.act_offload)
            step += act_offload.step_exposed_s(
                self.model, self.cluster, self.workload, c, timing[0][1], timing[0][2], micro_batches(self.workload, c)
            )[1]
        if c.offload_modules:  # each class's stage stands for its class (costmodel.physics.mechanics.fg_offload)
            step += fg_offload.step_exposed_s(
                self.model,
                self.cluster,
                self.workload,
                c,
                [(s, t[1], t[2]) for s, t in zip(reps, timing)],
                micro_batches(self.workload, c),
            )[1]
        peak = self._peak_memory(c, reps)
        gpus = c.gpus
        hw = hardware_flops_per_step(self.model, self.workload, c)
        return Score(
            config=c,
            status="ok",
            step_time_s=step,
            tokens_per_s=self.workload.tokens / step,
            mfu=self.model_flops / step / gpus / self.peak_flops,
            hfu=hw / step / gpus / self.peak_flops,
            model_tflops_per_gpu=self.model_flops / step / gpus / 1e12,
            peak_memory_bytes=peak,
            hbm_bytes=self.hbm,
            fits=peak <= self.hbm,
        )
