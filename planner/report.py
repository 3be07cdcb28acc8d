"""Printing results: strict JSON of plain Python values, and readable text tables.

Human units appear only here, converted once through :mod:`costmodel.spec.units`.

>>> print(table(["name", "s"], [["x", 1.5], ["yy", "22"]]))
name    s
----  ---
x     1.5
yy     22
>>> to_plain({"r": float("nan"), "t": (1, 2)})
{'r': None, 't': [1, 2]}
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from dataclasses import asdict

from costmodel.physics.comm import dma
from costmodel.physics.memory.verdict import FITS, TIGHT, memory_verdict, peak_without_allowance, tight_warning
from costmodel.training.estimate import Estimate
from costmodel.trust.memory_margin import MEMORY_MARGIN, at_risk
from costmodel.spec.presets import cluster_to_dict, model_to_dict
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.frameworks.stacks import load_stack
from costmodel.spec.units import GiB
from costmodel.trust.attach import attach


#: how each engine (``Estimate.engine``) is named in text output
ENGINE_NAMES = {"graph": "op graph", "analytic": "analytic"}


# --------------------------------------------------------------------------- JSON
def to_plain(obj):
    """Plain JSON values: numpy scalars unwrapped, tuples as lists, NaN/inf as None."""
    if hasattr(obj, "item") and not isinstance(obj, (dict, list, tuple, str)):
        obj = obj.item()  # numpy scalar
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def print_json(obj, file=None) -> None:
    """Exactly one strict JSON object on ``file`` (stdout)."""
    print(json.dumps(to_plain(obj), indent=2, allow_nan=False), file=file or sys.stdout)


def model_json(model: ModelSpec) -> dict:
    """The ``model`` object of the JSON outputs: the spec, and the parameter counts the planner derived."""
    return {**model_to_dict(model), "params": model.params, "active_params": model.active_params}


def with_trust(
    est: Estimate, model: ModelSpec, cluster: ClusterSpec, workload: Workload, completion_log_sd: float = 0.0
) -> Estimate:
    """``est`` with its band and trust notes: :func:`costmodel.trust.attach.attach`, the one place they are made."""
    return attach(est, model, cluster, workload, completion_log_sd)


def band_note_lines(est: Estimate) -> list[str]:
    """The band's notes, one indented line each (empty when the plan lies inside the data), then how each
    component is known in one line (:func:`costmodel.trust.evidence.summary`)."""
    lines = [f"  band: {n}" for n in getattr(est, "band_notes", ())]
    summary = getattr(est, "evidence_summary", "")
    return [*lines, f"  {summary}"] if summary else lines


def estimate_json(
    est: Estimate, model: ModelSpec, cluster: ClusterSpec, workload: Workload, completion_log_sd: float = 0.0
) -> dict:
    """``Estimate.to_dict()`` plus an echo of the problem it answers (``config.sp``: in effect)."""
    d = with_trust(est, model, cluster, workload, completion_log_sd).to_dict()
    d["config"]["sp"] = est.config.sp_on
    d["model"] = model_json(model)
    d["cluster"] = cluster_to_dict(cluster)
    d["workload"] = asdict(workload)
    d["dma_assignment"] = dma_assignment_json(model, cluster, workload, est.config)
    d["stack"] = stack_json(cluster)
    d["memory_margin"] = {"margin": MEMORY_MARGIN, "at_risk": bool(_risk(est))}
    return d


def stack_json(cluster: ClusterSpec) -> dict:
    """The software stack the numbers assume (:mod:`costmodel.frameworks.stacks`): ``name`` and ``title``."""
    s = load_stack(cluster.stack)
    return {"name": s.name, "title": s.title}


def stack_line(cluster: ClusterSpec) -> str:
    """``stack: NAME (what it is)``, printed with every result."""
    s = stack_json(cluster)
    return f"stack: {s['name']} ({s['title']}; --stack names another)"


def dma_assignment_json(model: ModelSpec, cluster: ClusterSpec, workload: Workload, config) -> dict | None:
    """The DMA engines each stream of a training plan ran on (:meth:`costmodel.spec.dma_plan.Assignment.to_dict`,
    plus ``text``, the ``--dma`` form); None for serving plans (no assignment)."""
    if workload.mode != "train":
        return None
    a = dma.resolve(cluster, config, model)
    return {"text": str(a), "streams": a.to_dict()}


# --------------------------------------------------------------------------- text
def _is_number(cell) -> bool:
    try:
        float(str(cell).replace(",", ""))
        return True
    except ValueError:
        return False


def table(headers: list[str], rows: list[list]) -> str:
    """A plain-text table; numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(_is_number(r[i]) for r in rows) for i in range(len(headers))]

    def line(r):
        out = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)]
        return "  ".join(out).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def _s(x: float) -> str:
    """Seconds to 4 significant digits without exponents (at most 6 decimals)."""
    if x == 0:
        return "0"
    decimals = min(6, max(0, 3 - math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def count_text(n: float) -> str:
    """``8.03B``, ``124M``, ``1.02T``: three significant digits."""
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= factor:
            x = n / factor
            return f"{x:,.0f}{suffix}" if x >= 1000 else f"{x:.3g}{suffix}"
    return f"{n:.0f}"


def model_label(model: ModelSpec) -> str:
    """The model's name with the parameter count the planner derived: ``llama3-8b (8.03B params)``;
    an MoE model adds its active count (``46.7B params, 12.9B active``)."""
    active = f", {count_text(model.active_params)} active" if model.is_moe else ""
    return f"{model.name} ({count_text(model.params)} params{active})"


def _gib(x: float) -> str:
    return f"{x / GiB:.1f}"


def _nodes(gpus: int, cluster: ClusterSpec) -> str:
    """``36 nodes of 8``; where one NVLink domain joins several nodes, the domains too."""
    per_node, dom = cluster.gpus_per_node, cluster.domain
    n = -(-gpus // per_node)
    out = f"{n} node{'s' if n != 1 else ''} of {per_node}"
    if dom > per_node:
        d = -(-gpus // dom)
        out += f", {d} NVLink domain{'s' if d != 1 else ''} of {dom}"
    return out


def _onoff(v) -> str:
    return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def config_line(est: Estimate) -> str:
    """``key=value`` of the plan; ``sp`` is the effective value (on only with tp > 1)."""
    d = est.config.to_dict()
    d["sp"] = est.config.sp_on
    return " ".join(f"{k}={_onoff(v) if not isinstance(v, float) else f'{v:g}'}" for k, v in d.items() if v is not None)


def warn_if_tight(est: Estimate) -> None:
    """A plan the user gave that is over HBM only by the assumed fragmentation allowance (``tight``,
    :mod:`costmodel.physics.memory.verdict`) is evaluated with a one-line warning naming both peaks (issue 42)."""
    if est.memory_verdict == TIGHT:
        warnings.warn(
            tight_warning(est.peak_memory_bytes, est.peak_memory_without_allowance_bytes, est.hbm_bytes), stacklevel=3
        )


def fits_text(est: Estimate) -> str:
    """The ``fits`` line's value: ``yes`` (with the margin's risk), ``tight`` with the peak without the assumed
    allowance, or ``NO`` (:attr:`Estimate.memory_verdict`)."""
    verdict = est.memory_verdict
    if verdict == FITS:
        return "yes" + _risk(est)
    if verdict == TIGHT:
        return (
            f"tight: over HBM only by the assumed fragmentation allowance, "
            f"{_gib(est.peak_memory_without_allowance_bytes)} GiB without it; it may not fit"
        )
    return "NO"


def _stage_fits(m: dict, hbm_bytes: float) -> str:
    """``yes``, ``tight`` or ``NO`` of one stage (its ``StageMemory.to_dict``) against ``hbm_bytes``."""
    verdict = memory_verdict(m["total_bytes"], peak_without_allowance([m]), hbm_bytes)
    return {FITS: "yes", TIGHT: "tight"}.get(verdict, "NO")


def _risk(est: Estimate) -> str:
    """A plan that fits only if the memory model errs less than it did on measured runs says so."""
    if not est.fits or not at_risk(est.peak_memory_bytes, est.hbm_bytes):
        return ""
    return f" (at risk: within {100 * MEMORY_MARGIN:g}% of HBM, the memory model's largest measured under-prediction)"


def memory_lines(est: Estimate, max_rows: int = 16) -> list[str]:
    """Peak memory per GPU of each pipeline stage against HBM, and which stages overflow."""
    stages = est.memory
    if len(stages) > max_rows:  # keep the first, last and the peak stage
        peak = max(stages, key=lambda m: m["total_bytes"])
        keep = {m["stage"] for m in stages[:4] + stages[-2:]} | {peak["stage"]}
        shown = [m for m in stages if m["stage"] in keep]
    else:
        shown = stages
    rows = [
        [
            m["stage"],
            _gib(m["weights_bytes"]),
            _gib(m["grads_bytes"]),
            _gib(m["optimizer_bytes"]),
            _gib(m["activations_bytes"]),
            _gib(m["buffers_bytes"]),
            _gib(m.get("allocated_bytes", m["total_bytes"] - m["reserved_bytes"])),
            _gib(m["reserved_bytes"]),
            _gib(m["total_bytes"]),
            _stage_fits(m, est.hbm_bytes),
        ]
        for m in shown
    ]
    # allocated: the tensors; reserved: what the allocator and libraries hold beyond them (costmodel.physics.memory.stage_memory.reserved_bytes)
    out = [
        table(
            [
                "stage",
                "weights",
                "grads",
                "optimizer",
                "activations",
                "buffers",
                "allocated",
                "reserved",
                "total GiB",
                "fits",
            ],
            rows,
        )
    ]
    if len(shown) < len(stages):
        out.append(f"({len(stages) - len(shown)} more stages not shown; --json lists all)")
    verdicts = {m["stage"]: _stage_fits(m, est.hbm_bytes) for m in stages}
    over = [s for s, v in verdicts.items() if v == "NO"]
    tight = [s for s, v in verdicts.items() if v == "tight"]
    if over:
        out.append(f"does not fit: stage(s) {', '.join(map(str, over))} exceed {_gib(est.hbm_bytes)} GiB HBM")
    if tight:
        out.append(
            f"tight: stage(s) {', '.join(map(str, tight))} exceed {_gib(est.hbm_bytes)} GiB HBM only by the assumed "
            "fragmentation allowance"
        )
    return out


def breakdown_lines(est: Estimate) -> list[str]:
    """Each step-time component in seconds and % of the step (zero rows left out)."""
    step = est.step_time_s
    rows = [[k.removesuffix("_s"), _s(v), f"{100 * v / step:.1f}"] for k, v in est.breakdown.items() if v > 0]
    rows.append(
        ["total (= step time)", _s(sum(est.breakdown.values())), f"{100 * sum(est.breakdown.values()) / step:.1f}"]
    )
    return [table(["component", "seconds", "% of step"], rows)]


def overlap_lines(est: Estimate) -> list[str]:
    """Per strategy with communication: link time, exposed time, r = 1 - exposed/link, and why."""
    if not est.overlap:
        return ["no communication"]
    rows = [
        [
            s,
            _s(est.comm_link_s.get(s, 0.0)),
            _s(est.comm_exposed_s.get(s, 0.0)),
            f"{r:.2f}",
            est.reasons.get(s, "fully hidden" if r >= 1 else "-"),
        ]
        for s, r in est.overlap.items()
    ]
    return [table(["strategy", "link s", "exposed s", "r", "why exposed"], rows)]


def estimate_text(
    est: Estimate, model: ModelSpec, cluster: ClusterSpec, workload: Workload, completion_log_sd: float = 0.0
) -> str:
    """The human report of one estimate."""
    est = with_trust(est, model, cluster, workload, completion_log_sd)
    gpus = cluster.num_gpus or est.config.gpus
    peak_stage = max(est.memory, key=lambda m: m["total_bytes"])["stage"] if est.memory else 0
    lines = [
        f"{model_label(model)} on {gpus} x {cluster.device.name} ({cluster.name}, "
        f"{_nodes(gpus, cluster)}), "
        f"global batch {workload.global_batch} x {workload.seq_len} tokens, {workload.recipe}",
        stack_line(cluster),
        f"config: {config_line(est)}",
        *([f"pipeline layout: {est.layout}"] if est.config.pp > 1 and est.layout else []),
        "",
        f"step time             {_s(est.step_time_s)} s ({ENGINE_NAMES.get(est.engine, est.engine)} engine)",
        f"  80% band            {_s(est.step_time_band_s[0])} - {_s(est.step_time_band_s[1])} s "
        "(measured runs of plans like this one fall inside 80% of the time)",
        *band_note_lines(est),
        f"tokens/s              {est.tokens_per_s:,.0f}",
        f"model TFLOP/s/GPU     {est.model_tflops_per_gpu:.1f}",
        f"hardware TFLOP/s/GPU  {est.hardware_tflops_per_gpu:.1f}",
        f"MFU / HFU             {100 * est.mfu:.1f} % / {100 * est.hfu:.1f} %",
        f"  FLOP convention: {est.flop_convention}",
        f"peak memory/GPU       {_gib(est.peak_memory_bytes)} GiB of {_gib(est.hbm_bytes)} GiB HBM "
        f"(stage {peak_stage})",
        f"fits                  {fits_text(est)}",
        "",
        "memory per GPU by pipeline stage (GiB)",
        *memory_lines(est),
        "",
        "step time breakdown",
        *breakdown_lines(est),
        "",
        "communication overlap",
        *overlap_lines(est),
    ]
    if est.notes:
        lines += ["", "notes:", *(f"  - {n}" for n in est.notes)]
    return "\n".join(lines)
