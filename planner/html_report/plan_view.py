"""What the report shows of one plan (a training :class:`~costmodel.training.estimate.Estimate`): its settings, the
launch lines its framework runs it with (:func:`planner.emit.emit_text`, refused with the reason where the format
cannot reproduce it), the step-time breakdown with its band and where each number comes from, memory per stage, the
overlap per strategy and the timeline of one step. Plain values for the templates; the plots are inline SVG."""

from __future__ import annotations

import dataclasses

from costmodel.spec.errors import PlannerError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.units import GiB
from costmodel.trust.memory_margin import MEMORY_MARGIN, at_risk

from ..emit import emit_text
from ..report import ENGINE_NAMES
from . import plots

#: the knobs every plan table shows, in this order (label, how to read it off a config)
MAIN_KNOBS = (
    ("tp", lambda c: c.tp),
    ("pp", lambda c: c.pp),
    ("dp", lambda c: c.dp),
    ("cp", lambda c: c.cp),
    ("ep", lambda c: c.ep),
    ("vp (interleave)", lambda c: c.vp),
    ("micro-batch", lambda c: c.mb),
    ("sequence parallel", lambda c: "on" if c.sp_on else "off"),
    ("ZeRO stage", lambda c: c.zero),
    (
        "recompute",
        lambda c: (
            c.recompute
            + (
                f" ({c.recompute_layers} layer{'' if c.recompute_layers == 1 else 's'} per stage)"
                if c.recompute_layers is not None
                else ""
            )
        ),
    ),
    ("bucket MB", lambda c: f"{c.bucket_bytes / 1e6:g}"),
    ("chunks", lambda c: c.chunks),
    ("layers per stage", lambda c: "even" if c.layers_per_stage is None else "/".join(map(str, c.layers_per_stage))),
    ("framework", lambda c: c.framework),
    ("gradient dtype", lambda c: c.grad_dtype),
)
_SHOWN = {
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vp",
    "mb",
    "sp",
    "zero",
    "recompute",
    "recompute_layers",
    "bucket_bytes",
    "chunks",
    "layers_per_stage",
    "framework",
    "grad_dtype",
}


def degrees(c: ParallelConfig) -> str:
    """``tp=8 pp=4 dp=2 cp=1 ep=1 vp=2 mb=1``: the plan in one line."""
    return f"tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} ep={c.ep} vp={c.vp} mb={c.mb}"


def config_rows(c: ParallelConfig) -> list[tuple[str, str]]:
    """The plan's knobs as (label, value): :data:`MAIN_KNOBS`, then every other setting that is not its default."""
    rows = [(label, str(get(c))) for label, get in MAIN_KNOBS]
    for f in dataclasses.fields(ParallelConfig):
        if f.name in _SHOWN or f.default is dataclasses.MISSING:
            continue
        v = getattr(c, f.name)
        if v != f.default:
            rows.append((f.name.replace("_", " "), _text(v)))
    return rows


def _text(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


def headline(est) -> dict:
    """The numbers a reader looks for first."""
    return {
        "step_time_s": est.step_time_s,
        "engine": ENGINE_NAMES.get(est.engine, est.engine),
        "band": est.step_time_band_s,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_gpu": est.tokens_per_s / est.config.gpus,
        "mfu": est.mfu,
        "hfu": est.hfu,
        "model_tflops": est.model_tflops_per_gpu,
        "flop_convention": est.flop_convention,
        "peak_gib": est.peak_memory_bytes / GiB,
        "hbm_gib": est.hbm_bytes / GiB,
        "fits": est.fits,
        "at_risk": bool(est.fits and at_risk(est.peak_memory_bytes, est.hbm_bytes)),
        "gpus": est.config.gpus,
    }


def part_source(key: str, est, cluster) -> str:
    """Where one breakdown term comes from, in words, with the inputs that set it."""
    c, dev = est.config, cluster.device
    name = key.removesuffix("_s")
    if name == "compute":
        return (
            f"forward and backward kernels of the slowest stage, times the micro-batches: GEMMs at "
            f"{dev.gemm_efficiency:g} of peak (BF16; FP8 {dev.fp8_gemm_efficiency:g}), fused attention at "
            f"{dev.attention_efficiency:g}, element-wise at {dev.mem_bw_efficiency:g} of HBM bandwidth "
            f"({dev.name} constants of the cluster preset)"
        )
    if name == "recompute":
        return f"forward recomputed in backward (recompute={c.recompute})"
    if name == "interference":
        return (
            f"compute slowed while SM-driven communication runs beside it "
            f"(comm_compute_interference {dev.comm_compute_interference:g} of the cluster preset)"
        )
    if name == "bubble":
        return f"pipeline fill and drain: (pp-1)/vp x one micro-batch's time (pp={c.pp}, vp={c.vp})"
    if name == "optimizer":
        return "Adam update of each rank's shard of the parameters (HBM-bound)" + (
            f", {c.optimizer_offload_fraction:g} of it on the host" if c.optimizer_offload_fraction else ""
        )
    strategy = name.removesuffix("_exposed")
    link = est.comm_link_s.get(strategy, 0.0)
    exposed = est.comm_exposed_s.get(strategy, 0.0)
    if link <= 0:
        return f"{strategy} communication: none in this plan"
    hidden = 1 - exposed / link
    why = est.reasons.get(strategy, "fully hidden" if exposed <= 0 else "")
    return f"{strategy} communication: {link:.4g} s on the links, {100 * hidden:.0f}% hidden behind compute" + (
        f"; exposed because {why}" if exposed > 0 and why else ""
    )


def breakdown_rows(est, cluster) -> list[dict]:
    """Each non-zero term of the step with its share and its source (the terms sum to the step time)."""
    step = est.step_time_s
    return [
        {"name": k.removesuffix("_s"), "seconds": v, "pct": 100 * v / step, "source": part_source(k, est, cluster)}
        for k, v in est.breakdown.items()
        if abs(v) > 1e-9 * step
    ]


def overlap_rows(est) -> list[dict]:
    """Per strategy with communication: link time, exposed time, overlap r and why it is exposed."""
    return [
        {
            "strategy": s,
            "link_s": est.comm_link_s.get(s, 0.0),
            "exposed_s": est.comm_exposed_s.get(s, 0.0),
            "r": r,
            "why": est.reasons.get(s, "fully hidden" if r >= 1 else ""),
        }
        for s, r in est.overlap.items()
    ]


def memory_rows(est) -> list[dict]:
    """Each stage's memory per GPU (GiB) by what holds it."""
    out = []
    for m in est.memory:
        row = {
            k: m.get(f"{k}_bytes", 0.0) / GiB
            for k in ("weights", "grads", "optimizer", "activations", "buffers", "reserved", "total")
        }
        row["stage"], row["fits"] = m["stage"], m["total_bytes"] <= est.hbm_bytes
        out.append(row)
    return out


def launch(config, model, workload) -> dict:
    """The launch lines of the plan's framework, the notes on what they cannot say, or why they are refused."""
    try:
        text, notes = emit_text(config.framework, config, workload, model.layers, model.is_moe, model=model)
    except PlannerError as e:  # the format cannot reproduce the plan: say why instead of printing a wrong line
        return {"framework": config.framework, "text": "", "notes": [], "refused": str(e)}
    return {"framework": config.framework, "text": text, "notes": list(notes), "refused": ""}


def plan_view(est, model, cluster, workload, *, timeline: bool = True) -> dict:
    """Everything the report shows of one plan (see the module docstring)."""
    view = {
        "degrees": degrees(est.config),
        "config_rows": config_rows(est.config),
        "headline": headline(est),
        "layout": est.layout if est.config.pp > 1 else "",
        "breakdown": breakdown_rows(est, cluster),
        "composition": dict(est.composition),
        "overlap": overlap_rows(est),
        "memory": memory_rows(est),
        "memory_margin": MEMORY_MARGIN,
        "band_notes": list(est.band_notes),
        "notes": list(est.notes),
        "launch": launch(est.config, model, workload),
        "plots": {"breakdown": plots.breakdown_svg(est), "memory": plots.memory_svg(est, MEMORY_MARGIN)},
    }
    view["timeline"] = None
    if timeline:
        try:
            svg, info = plots.timeline_svg(model, cluster, workload, est.config)
        except PlannerError as e:  # a plan the op graph cannot schedule: the page says so, the rest stands
            view["timeline_error"] = str(e)
        else:
            view["plots"]["timeline"], view["timeline"] = svg, info
    return view
