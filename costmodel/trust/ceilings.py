"""The best model-FLOPs utilisation published for a hardware class, dtype and scale: a sanity ceiling.

``costmodel/trust/data/best_mfu.csv`` (a copy of ``benchmarks/data/best_mfu.csv``, every row with its
source) holds the highest MFU public training runs report per hardware class (A100, H100/H800/H200,
B200), dtype, kind (dense, MoE) and GPU count, and how each counts the attention core
(``attention_count``: ``full`` s x s scores, or ``causal``, half of them). :func:`mfu_note` compares
like with like: the prediction's MFU counted as the reference counts it, against the best run at
its scale (:func:`best_published_mfu`). A prediction above it is not impossible, but it claims to beat
every published run of its class at that scale: the note says so. No note on a calibrated cluster (its
constants were fitted to the user's own measured runs, which outrank any published ceiling).

:func:`fp8_speedup_note` flags an FP8 plan predicted faster over the same plan in BF16 than any published
FP8 run (:data:`FP8_SPEEDUP_BEST`). Nothing in the cost model is tuned to stay under either ceiling.

>>> best_published_mfu("h100", "bf16", moe=False, gpus=128)[0]
0.49
>>> best_published_mfu("a100", "fp16", moe=False, gpus=1024)[0]
0.563
"""

from __future__ import annotations

import csv
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from costmodel.physics.kernels.flops import with_convention

DATA = Path(__file__).parent / "data" / "best_mfu.csv"
FAMILY_CLASS = {
    "a100": "A100",
    "h100": "H100/H800/H200",
    "h800": "H100/H800/H200",
    "h200": "H100/H800/H200",
    "b200": "B200",
}
#: FP16 and BF16 share the dense tensor-core peak on A100, H100 and B200 (NVIDIA's data sheets: 312, 989 and
#: 2,250 TFLOP/s for both), so an FP16 plan is held to the BF16 runs (GPT-NeoX-20B and OPT trained in FP16)
DTYPE_CLASS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
#: a run on at least 1/SCALE_SLACK of the plan's GPUs counts as evidence at its scale (an assumption: MFU falls
#: with scale, so a small run's MFU is no ceiling for a large plan, while one doubling is within the spread of
#: the published curves, e.g. Megatron-LM's weak-scaling table: 49% at 192 H100, 48% at 3,072, 47% at 6,144)
SCALE_SLACK = 2
#: the largest end-to-end FP8-over-BF16 training speedup published for the same model and GPUs: 1.50x, Llama3-70B
#: on 128 H100 with FP8 compute and FP8 weight all-gather (PyTorch dev-discuss, "Enabling Float8 All-Gather in
#: FSDP2", 2024, https://dev-discuss.pytorch.org/t/enabling-float8-all-gather-in-fsdp2/2359, TL;DR; torchao's
#: float8 README: "up to 1.5x at 512 GPU / 405B", 1.25x at 8 GPU / 8B). Megatron/TE recipes with BF16 all-gathers
#: report less (the issue quotes 1.3-1.4x for Llama-70B); a predicted speedup beyond the best of all is flagged.
FP8_SPEEDUP_BEST = 1.50


@lru_cache(maxsize=1)
def _rows() -> tuple:
    with open(DATA, newline="") as f:
        return tuple(csv.DictReader(f))


def _at_scale(family: str, dtype: str, moe: bool, gpus: int | None) -> list[dict]:
    """The rows of the class that speak for a plan on ``gpus`` GPUs: runs on at least ``gpus / SCALE_SLACK``
    GPUs, or, beyond the largest published run, the largest runs (``gpus`` None: every row)."""
    cls = FAMILY_CLASS.get(family)
    kind = "moe" if moe else "dense"
    dt = DTYPE_CLASS.get(dtype, dtype)
    rows = [r for r in _rows() if r["hardware_class"] == cls and r["dtype"] == dt and r["kind"] == kind]
    if not rows or not gpus:
        return rows
    near = [r for r in rows if int(r["num_gpus"]) * SCALE_SLACK >= gpus]
    if near:
        return near
    largest = max(int(r["num_gpus"]) for r in rows)
    return [r for r in rows if int(r["num_gpus"]) == largest]


def _label(r: dict) -> str:
    return f"{r['model']} on {int(r['num_gpus']):,} GPUs ({r['source_title']}, {r['source_location']})"


def best_published_mfu(family: str, dtype: str, moe: bool, gpus: int | None = None) -> tuple[float, str] | None:
    """``(mfu, "model on N GPUs (source, location)")`` of the best published run of the hardware ``family``
    (``a100``, ``h100``, ...), ``dtype`` (FP16 as BF16) and kind at the scale of ``gpus`` (see
    :func:`_at_scale`), or None when none is recorded."""
    rows = _at_scale(family, dtype, moe, gpus)
    if not rows:
        return None
    r = max(rows, key=lambda r: float(r["best_mfu_pct"]))
    return float(r["best_mfu_pct"]) / 100, _label(r)


def mfu_note(est, model, cluster, workload, family: str) -> str | None:
    """The ceiling note of a training estimate, or None: each reference run at the plan's scale is compared
    with the prediction's MFU counted as that run counts attention; none on a calibrated cluster."""
    if getattr(cluster, "calibrated_constants", ()):
        return None
    gpus = est.config.gpus
    pairs = [
        (with_convention(est, model, workload, r["attention_count"]).mfu, r)
        for r in _at_scale(family, workload.dtype, model.is_moe, gpus)
    ]
    if not pairs or any(mfu <= float(r["best_mfu_pct"]) / 100 for mfu, r in pairs):
        return None  # at or under some run of its class at this scale, counted alike
    mfu, r = max(pairs, key=lambda p: float(p[1]["best_mfu_pct"]))
    return (
        f"predicted MFU {100 * mfu:.1f}% (attention counted {r['attention_count']}, as the reference counts it) "
        f"exceeds the best published {family.upper()} {workload.dtype} {'MoE' if model.is_moe else 'dense'} MFU "
        f"at this scale, {float(r['best_mfu_pct']):.1f}% ({_label(r)}): "
        "treat the prediction as optimistic"
    )


def fp8_speedup_note(est, model, cluster, workload, evaluate) -> str | None:
    """For an FP8 training estimate: a note when the same plan in BF16 (``evaluate(model, cluster, workload,
    config)``, the estimate's own engine) is predicted more than :data:`FP8_SPEEDUP_BEST` times slower; None
    on a calibrated cluster or when the BF16 plan cannot be evaluated."""
    if workload.dtype != "fp8" or getattr(cluster, "calibrated_constants", ()):
        return None
    from costmodel.spec.errors import PlannerError

    config = replace(est.config, fp8_param_gather=False) if est.config.fp8_param_gather else est.config
    try:
        bf16 = evaluate(model, cluster, replace(workload, dtype="bf16"), config, engine=est.engine)
    except PlannerError:
        return None
    speedup = bf16.step_time_s / est.step_time_s
    if speedup <= FP8_SPEEDUP_BEST:
        return None
    return (
        f"predicted FP8 speedup {speedup:.2f}x over the same plan in BF16 ({est.step_time_s:.3g} s against "
        f"{bf16.step_time_s:.3g} s; MFU {100 * est.mfu:.1f}% of the FP8 peak against {100 * bf16.mfu:.1f}% of the BF16 "
        "peak) exceeds the "
        f"best published {FP8_SPEEDUP_BEST:.2f}x (Llama3-70B on 128 H100, FP8 compute and all-gather; PyTorch "
        "dev-discuss 2024, 'Enabling Float8 All-Gather in FSDP2'): treat the FP8 prediction as optimistic"
    )
