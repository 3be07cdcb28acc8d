"""Fit the one device-level constant the dev set can pin down: achieved GEMM efficiency.

    python benchmarks/calibrate.py

For each device family in the development set (A100: BF16 GEMMs; H100: FP8 GEMMs) this
scans the GEMM efficiency (fraction of dense peak a large GEMM sustains in a training run,
with clocks under load) and prints the value that minimises the mean absolute step-time
error over that family's rows, plus leave-one-source-out values so a reader can see how
much each source pulls. Nothing else is fitted: no per-row or per-model constant. The
presets record the chosen value and name this script; rerun it when the model changes.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import load_rows, predict  # noqa: E402

FAMILIES = {"A100": ("gemm_efficiency", "A100"), "H100": ("fp8_gemm_efficiency", "H100")}
GRID = [round(0.35 + 0.01 * i, 2) for i in range(61)]  # 0.35 .. 0.95


def errors(rows, field: str, value: float) -> list[float]:
    out = []
    for r in rows:
        dev = replace(r.cluster.device, **{field: value})
        r2 = replace(r, cluster=replace(r.cluster, device=dev))
        est, _ = predict(r2, engine="analytic")  # both engines share the device constants
        if est is not None:
            out.append(est.step_time_s / r.measured_s - 1)
    return out


def best(rows, field):
    scored = [(statistics.mean(abs(e) for e in errors(rows, field, v)), v) for v in GRID]
    return min(scored)


def main() -> int:
    rows = [r for r in load_rows() if not r.skip]
    for fam, (field, tag) in FAMILIES.items():
        fam_rows = [r for r in rows if tag in r.cluster.device.name]
        if not fam_rows:
            continue
        err, v = best(fam_rows, field)
        print(f"{fam}: {field} = {v:.2f}  (mean |err| {100 * err:.2f}% over {len(fam_rows)} rows)")
        for src in sorted({r.source for r in fam_rows}):
            rest = [r for r in fam_rows if r.source != src]
            if rest:
                e2, v2 = best(rest, field)
                held = errors([r for r in fam_rows if r.source == src], field, v2)
                print(f"   without {src:<22} -> {v2:.2f}; held-out mean |err| on it "
                      f"{100 * statistics.mean(abs(e) for e in held):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
