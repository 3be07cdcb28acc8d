"""``evaluate(model, cluster, workload, config) -> Estimate``: one training step, explained.

Step time (documented sum, every term in ``breakdown``)::

    step = (m + (p-1)/v) * t_mb          pipelined micro-batches on the slowest stage
         + dp_exposed + zero_exposed      gradient reduction / parameter gather left after backward
         + optimizer                      Adam update of the local shard

    t_mb = forward + backward + recompute + exposed TP/SP/CP/EP/PP communication + interference

``breakdown`` splits ``(m + (p-1)/v) * t_mb`` into ``compute_s``, ``recompute_s``, one
``<strategy>_exposed_s`` each, ``interference_s`` and ``bubble_s = (p-1)/v * t_mb``.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> e = evaluate(load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64),
...              Workload(global_batch=64, seq_len=2048), ParallelConfig(tp=8, pp=8, mb=1, vp=3, sp=True,
...              recompute="selective", flash_attention=False))
>>> e.fits, 10 < e.step_time_s < 20
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.compose.stage_terms import dp_interference, stage_dp_terms, stage_optimizer_s
from costmodel.engines.analytic import stage_timing
from costmodel.spec.plan import ParallelConfig, micro_batches
from costmodel.physics.validity import validate_config
from costmodel.physics.kernels.flops import CONVENTION, hardware_flops_per_step, model_flops_per_step
from costmodel.spec.layout import of as layout_of
from costmodel.physics.mechanics import act_offload, fg_offload
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.physics.memory.stage_contents import layer_counts
from costmodel.physics.memory.verdict import memory_verdict as verdict_of, peak_without_allowance
from costmodel.compose.overlap import TRAINING_STRATEGIES, overlap_rate
from costmodel.compose.step import Composition, compose
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.errors import SpecError

#: the engine every reported step time comes from unless one is asked for: the op-graph scheduler,
#: the reference (DESIGN.md "One model"); ``analytic`` is its closed form, what the search tables encode
DEFAULT_ENGINE = "graph"
ENGINES = ("graph", "analytic")


@dataclass(frozen=True)
class Estimate:
    """The predicted cost of one training step of one plan (SI units)."""

    config: ParallelConfig
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    peak_memory_bytes: float
    hbm_bytes: float
    fits: bool
    breakdown: dict
    comm_link_s: dict
    comm_exposed_s: dict
    overlap: dict
    memory: list
    reasons: dict
    flop_convention: str = CONVENTION
    status: str = "ok"
    notes: list = field(default_factory=list)
    composition: dict = field(default_factory=dict)  # step_s = pipeline + dp + zero + optimizer (seconds)
    step_time_band_s: tuple | None = None  # 80% band of the measured step time (costmodel.trust.uncertainty)
    layout: str = ""  # the pipeline layout the step ran (Megatron-Core text, costmodel.spec.layout)
    engine: str = DEFAULT_ENGINE  # which engine computed it: "graph" (op-graph scheduler) or "analytic"
    band_notes: list = field(default_factory=list)  # what widened the band, in words (costmodel.trust.band_scope)
    evidence: dict = field(default_factory=dict)  # how each component is known (costmodel.trust.evidence)
    evidence_summary: str = ""  # the same in one line

    @property
    def peak_memory_without_allowance_bytes(self) -> float:
        """The peak per GPU less the assumed allocator fragmentation allowance
        (:func:`costmodel.physics.memory.verdict.peak_without_allowance`)."""
        return peak_without_allowance(self.memory) if self.memory else self.peak_memory_bytes

    @property
    def memory_verdict(self) -> str:
        """``fits``, ``tight`` or ``does not fit`` against the HBM (:func:`costmodel.physics.memory.verdict.memory_verdict`;
        :attr:`fits` holds for the first alone)."""
        return verdict_of(self.peak_memory_bytes, self.peak_memory_without_allowance_bytes, self.hbm_bytes)

    def to_dict(self) -> dict:
        """Plain JSON-ready values with the keys of DESIGN.md."""
        return {
            "status": self.status,
            "engine": self.engine,
            "config": self.config.to_dict(),
            "layout": self.layout,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "hbm_bytes": self.hbm_bytes,
            "fits": self.fits,
            "memory_verdict": self.memory_verdict,
            "peak_memory_without_allowance_bytes": self.peak_memory_without_allowance_bytes,
            "breakdown": dict(self.breakdown),
            "comm_link_s": dict(self.comm_link_s),
            "comm_exposed_s": dict(self.comm_exposed_s),
            "overlap": dict(self.overlap),
            "exposed_reasons": dict(self.reasons),
            "memory": [dict(m) for m in self.memory],
            "flop_convention": self.flop_convention,
            "notes": list(self.notes),
            **self._bands(),
            **self._evidence(),
        }

    def _evidence(self) -> dict:
        return {"evidence": self.evidence, "evidence_summary": self.evidence_summary} if self.evidence else {}

    def _bands(self) -> dict:
        if self.step_time_band_s is None:
            return {"step_time_band_s": None, "band_notes": list(self.band_notes)}
        lo, hi = self.step_time_band_s
        t = self.step_time_s
        return {
            "step_time_band_s": [lo, hi],
            "tokens_per_s_band": [self.tokens_per_s * t / hi, self.tokens_per_s * t / lo],
            "mfu_band": [self.mfu * t / hi, self.mfu * t / lo],
            "band_notes": list(self.band_notes),
        }


def evaluate(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, engine: str = DEFAULT_ENGINE
) -> Estimate:
    """Predict one training step of ``config``; raises :class:`SpecError` for an invalid plan.
    (Serving: :func:`costmodel.api.evaluate`, the front door for both.)"""
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    validate_config(model, cluster, workload, config)
    c, w, dev = config, workload, cluster.device
    m = micro_batches(w, c)
    if engine not in ENGINES:
        raise SpecError("engine", engine, "'analytic' or 'graph'")
    gs = None
    if engine == "graph":  # op graphs scheduled on compute and DMA engines (costmodel.engines.graph)
        from costmodel.engines.graph.compose import graph_step

        gs = graph_step(model, cluster, w, c)
        stages = list(gs.stages)
    else:
        stages = [stage_timing(model, cluster, w, c, s) for s in range(c.pp)]
    comp = _analytic_composition(model, cluster, c, stages, m) if gs is None else gs.composition
    slow = stages[comp.slow_stage]
    bubble, optimizer = comp.bubble_s, comp.optimizer_s
    dp_exposed, zero_exposed, dp_link, zero_link = comp.dp_s, comp.zero_s, comp.dp_link_s, comp.zero_link_s
    step = comp.step_s
    act_link_s = act_exposed_s = 0.0
    if c.activation_offload_layers:  # pp = 1: stages[0] is the stage (costmodel.physics.mechanics.act_offload)
        act_link_s, act_exposed_s = act_offload.step_exposed_s(
            model, cluster, w, c, stages[0].fwd_s, stages[0].bwd_s + stages[0].recompute_s, m
        )
        step += act_exposed_s
    fg_link_s = fg_exposed_s = 0.0
    if c.offload_modules:  # every stage's (costmodel.physics.mechanics.fg_offload)
        fg_link_s, fg_exposed_s = fg_offload.step_exposed_s(
            model, cluster, w, c, [(s, t.fwd_s, t.bwd_s + t.recompute_s) for s, t in enumerate(stages)], m
        )
        step += fg_exposed_s

    led = slow.ledger
    breakdown = {
        "compute_s": m * slow.compute_s,
        "recompute_s": m * slow.recompute_s,
        "interference_s": m * slow.interference_s,
        "bubble_s": bubble,
        "optimizer_s": optimizer,
    }
    link, exposed = {}, {}
    for s in TRAINING_STRATEGIES:
        link[s] = m * led.link_s.get(s, 0.0)
        exposed[s] = m * led.exposed_s.get(s, 0.0)
    link["dp"] += dp_link
    exposed["dp"] += dp_exposed
    link["zero"] += zero_link
    exposed["zero"] += zero_exposed
    for s in TRAINING_STRATEGIES:
        breakdown[f"{s}_exposed_s"] = exposed[s]
    if c.activation_offload_layers:  # the key only with the option on: plans without it keep their keys
        breakdown["act_offload_exposed_s"] = act_exposed_s
        link["act_offload"], exposed["act_offload"] = act_link_s, act_exposed_s
    if c.offload_modules:  # the key only with the option on
        breakdown["fg_offload_exposed_s"] = fg_exposed_s
        link["fg_offload"], exposed["fg_offload"] = fg_link_s, fg_exposed_s
    overlap = {s: overlap_rate(link[s], exposed[s]) for s in TRAINING_STRATEGIES if link[s] > 0}
    reasons = {s: r for s, r in led.reasons.items() if exposed.get(s, 0) > 0}
    if zero_exposed > 0:
        reasons.setdefault(
            "zero",
            "parameter all-gather after the optimizer step: not overlapped (bucket_mb=0)"
            if c.bucket_bytes == 0
            else "window too short: parameter all-gather outlasts the first forward",
        )
    if dp_exposed > 0 and dp_link > 0:
        reasons.setdefault(
            "dp",
            "no bucketed overlap (bucket_mb=0)"
            if c.bucket_bytes == 0
            else "window too short: gradient reduction outlasts the last micro-batch's backward"
            if dp_link > slow.bwd_s
            else "the last bucket is reduced after backward ends",
        )

    mem = memory_per_stage(model, w, c, dev)
    peak = max(sm.total_bytes for sm in mem)
    gpus = c.gpus
    model_flops = model_flops_per_step(model, w)
    hw_flops = hardware_flops_per_step(model, w, c)
    peak_flops = dev.peak_flops_per_s(w.dtype)
    return Estimate(
        config=c,
        step_time_s=step,
        tokens_per_s=w.tokens / step,
        model_tflops_per_gpu=model_flops / step / gpus / 1e12,
        hardware_tflops_per_gpu=hw_flops / step / gpus / 1e12,
        mfu=model_flops / step / gpus / peak_flops,
        hfu=hw_flops / step / gpus / peak_flops,
        peak_memory_bytes=peak,
        hbm_bytes=dev.hbm_bytes,
        fits=peak <= dev.hbm_bytes,
        breakdown=breakdown,
        comm_link_s=link,
        comm_exposed_s=exposed,
        overlap=overlap,
        memory=[sm.to_dict() for sm in mem],
        reasons=reasons,
        composition=comp.parts(),
        layout=str(layout_of(model, c)),
        engine=engine,
    )


def _analytic_composition(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, stages, m: int) -> Composition:
    """The closed form of every stage, composed by :func:`costmodel.compose.step.compose`."""
    terms = [stage_dp_terms(model, cluster, c, st.stage) for st in stages]
    return compose(
        [st.microbatch_s for st in stages],
        [st.fwd_s for st in stages],
        [st.bwd_s + st.recompute_s for st in stages],
        *zip(*terms),
        [stage_optimizer_s(model, cluster, c, st.stage) for st in stages],
        [st.stage for st in stages],
        [sum(layer_counts(model, c, st.stage)) for st in stages],
        m,
        c.pp,
        c.vp,
        interference=dp_interference(cluster, c),
    )
