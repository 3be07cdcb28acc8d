"""Where the time of each ZeRO-3 / FSDP row goes: which part of its predicted step is too large.

    python -m benchmarks.zero3_parts [--set dev|new|all] [--engine graph|analytic]

For every published row of the ``zero3_fsdp`` regime (``benchmarks/regimes.py``) this prints the
measured and predicted step (seconds, signed error) and the predicted step's parts, summed over
the micro-batches of the slowest stage as ``estimate.evaluate`` reports them (``breakdown``):
compute (without FSDP2's copies), FSDP2's copy-out / copy-in (:func:`costmodel.physics.mechanics.fsdp_copies.fsdp2_copies_s`,
charged as compute), recompute, interference, pipeline bubble, and the exposed communication per
strategy (``zero``: the per-layer gathers and reduce-scatters, the embedding/head units and the
step-end gather). ``no-fsdp err`` is the error with the sharded-DP parts (exposed ``zero`` and the
copies) taken out: how far any correction to the FSDP/ZeRO-3 mechanics alone could move the row.
A diagnostic: nothing here is fitted, and the sealed split is never read (``--set`` offers no
``sealed``).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.published import load_set, predict
from costmodel.physics.mechanics.fsdp_copies import fsdp2_copies_s
from costmodel.physics.memory.stage_contents import layer_counts
from costmodel.spec.plan import micro_batches

PARTS = ("compute", "copies", "recompute", "interference", "bubble", "ep", "zero", "other")


def copies_s(row, est) -> float:
    """FSDP2's copies over one step of the slowest stage (they sit inside ``compute_s``)."""
    c, model = est.config, row.model
    stage = est.composition.get("slow_stage", 0) if isinstance(est.composition, dict) else 0
    n_dense, n_moe = layer_counts(model, c, min(stage, c.pp - 1))
    per_mb = sum(
        n * sum(fsdp2_copies_s(model, row.cluster.device, c, moe)) for moe, n in ((False, n_dense), (True, n_moe))
    )
    return micro_batches(row.workload, c) * per_mb


def parts(row, est) -> dict:
    b = est.breakdown
    cp = copies_s(row, est)
    other = sum(b.get(f"{k}_exposed_s", 0.0) for k in ("tp", "sp", "cp", "pp", "dp")) + b.get("optimizer_s", 0.0)
    return {
        "compute": b["compute_s"] - cp,
        "copies": cp,
        "recompute": b["recompute_s"],
        "interference": b["interference_s"],
        "bubble": b["bubble_s"],
        "ep": b.get("ep_exposed_s", 0.0),
        "zero": b.get("zero_exposed_s", 0.0),
        "other": other,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("dev", "new", "all"), default="all")
    ap.add_argument("--engine", choices=("graph", "analytic"), default="graph")
    args = ap.parse_args(argv)
    print(
        f"{'row':>4} {'label':<18} {'meas s':>7} {'pred s':>7} {'err':>7} {'no-fsdp':>8} | "
        + " ".join(f"{p:>8}" for p in PARTS)
    )
    errs, bounds = [], []
    for row in load_set(args.set):
        if "zero3_fsdp" not in row.regimes or row.skip or not row.measured_s:
            continue
        est, why = predict(row, engine=args.engine)
        if est is None:
            print(f"{row.row_id:>4} {row.label[:18]:<18} not predicted: {why}")
            continue
        p = parts(row, est)
        err = est.step_time_s / row.measured_s - 1
        bound = (est.step_time_s - p["zero"] - p["copies"]) / row.measured_s - 1
        errs.append(err)
        bounds.append(bound)
        print(
            f"{row.row_id:>4} {row.label[:18]:<18} {row.measured_s:7.2f} {est.step_time_s:7.2f} {100 * err:+6.1f}% "
            f"{100 * bound:+7.1f}% | " + " ".join(f"{p[k]:8.2f}" for k in PARTS)
        )
    if errs:
        print(
            f"\n{len(errs)} rows: signed mean {100 * statistics.mean(errs):+.1f}%, mean |err| "
            f"{100 * statistics.mean(map(abs, errs)):.1f}%; with the sharded-DP parts taken out: signed "
            f"{100 * statistics.mean(bounds):+.1f}%, mean |err| {100 * statistics.mean(map(abs, bounds)):.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
