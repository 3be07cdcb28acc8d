"""Fit the one device-level constant per device family and dtype: achieved GEMM efficiency.

    python -m benchmarks.calibrate [--set dev|new|all]

For each device family and dtype in the chosen set (development set by default: A100 BF16
GEMMs and H100 FP8 GEMMs; the new set adds H100-class BF16 and B200 FP8) this scans the GEMM
efficiency (fraction of dense peak a large GEMM sustains in a training run, with clocks under
load) and prints the value that minimises the mean absolute step-time error over that
family's rows, plus leave-one-source-out values: for every source, the value fitted without it
and the mean |err| (and signed mean) on its rows at that value, so a reader can see how much
each source pulls and how well a source is predicted by the others. With ``--set all`` it also
prints, per new-set source, the error at the value fitted on the development set alone (the
constants the presets carry). Nothing else is fitted: no per-row or per-model constant. The
presets record the chosen value and name this script; rerun it when the model changes.
This script prints; it never writes a preset.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

from benchmarks.published import load_set, predict
from costmodel.frameworks.stacks import FA2_HOPPER_RATIO, HOPPER

GRID = [round(0.25 + 0.01 * i, 2) for i in range(71)]  # 0.25 .. 0.95


def family(r) -> tuple[str, str] | None:
    """(family label, DeviceSpec field fitted) of a row: one constant per device family and dtype."""
    name, dtype = r.cluster.device.name, r.workload.dtype
    field = "fp8_gemm_efficiency" if dtype == "fp8" else "gemm_efficiency"
    if "A100" in name:
        return f"A100 {dtype.upper()}", field
    if any(h in name for h in HOPPER):
        return f"H100-class {dtype.upper()}", field
    if "B200" in name:
        return f"B200 {dtype.upper()}", field
    return None


def kernel_class(r) -> tuple[str, str] | None:
    """The per-kernel-class constant a Hopper row also carries: fused attention (cuDNN-class kernel;
    FlashAttention-2 stacks run it at ``FA2_HOPPER_RATIO`` of that, a measured kernel ratio, not fitted)."""
    if any(h in r.cluster.device.name for h in HOPPER):
        return "H100-class attention (cuDNN-class kernel)", "attention_efficiency"
    return None


def _is_fa2(r) -> bool:
    return any("FlashAttention-2" in n for n in r.notes)


def with_constants(r, values: dict):
    """Row ``r`` with the device constants ``{field: value}`` set (attention at ``FA2_HOPPER_RATIO`` of
    the value on a FlashAttention-2 stack, as the fit scans it)."""
    dev = r.cluster.device
    for field, value in values.items():
        v = value * FA2_HOPPER_RATIO if field == "attention_efficiency" and _is_fa2(r) else value
        dev = replace(dev, **{field: v})
    return replace(r, cluster=replace(r.cluster, device=dev))


def errors(rows, field: str, value: float) -> list[float]:
    out = []
    for r in rows:
        est, _ = predict(with_constants(r, {field: value}), engine="analytic")  # both engines share them
        if est is not None:
            out.append(est.step_time_s / r.measured_s - 1)
    return out


def error_matrix(rows, field: str) -> dict:
    """{row_id-and-set: [signed error at each GRID value, or None]} (each row predicted once per value)."""
    m = {}
    for r in rows:
        col = []
        for v in GRID:
            e = errors([r], field, v)
            col.append(e[0] if e else None)
        m[(r.set, r.row_id)] = col
    return m


def _mean_abs(E, keys, i):
    vals = [E[k][i] for k in keys if E[k][i] is not None]
    return statistics.mean(abs(e) for e in vals) if vals else float("inf")


def best(E, keys) -> tuple[float, float]:
    """(mean |err|, value) minimising the mean |err| over ``keys``."""
    return min((_mean_abs(E, keys, i), v) for i, v in enumerate(GRID))


def held_out(E, keys, v) -> tuple[float, float, int]:
    i = GRID.index(v)
    vals = [E[k][i] for k in keys if E[k][i] is not None]
    if not vals:
        return float("nan"), float("nan"), 0
    return statistics.mean(abs(e) for e in vals), statistics.mean(vals), len(vals)


def fitted_families(rows) -> dict:
    """{(family label, field): rows}: every constant fitted per device family and dtype (and the
    Hopper attention kernel class) with the rows it is fitted on."""
    fams: dict = {}
    for r in rows:
        for f in (family(r), kernel_class(r)):
            if f:
                fams.setdefault(f, []).append(r)
    return fams


def held_out_values(rows, fits=None) -> dict:
    """{(family label, source): (field, value fitted on the family's other sources)} for the families
    ``fits`` (default: all of :func:`fitted_families`) with two or more sources; a family of one source
    has no held-out value (its rows keep the preset's, an in-sample constant)."""
    out = {}
    for (label, field), fam in sorted(fitted_families(rows).items()):
        if fits is not None and (label, field) not in fits:
            continue
        sources = sorted({r.source for r in fam})
        if len(sources) < 2:
            continue
        E = error_matrix(fam, field)
        for src in sources:
            rest = [(r.set, r.row_id) for r in fam if r.source != src]
            out[(label, src)] = (field, best(E, rest)[1])
    return out


def held_out_constants(r, values: dict) -> dict:
    """``{field: value}`` of row ``r``'s fitted constants at the values fitted without its source
    (``values`` from :func:`held_out_values`); constants without a held-out value are left out."""
    out = {}
    for f in (family(r), kernel_class(r)):
        if f and (f[0], r.source) in values:
            field, v = values[(f[0], r.source)]
            out[field] = v
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--set",
        choices=("dev", "new", "all"),
        default="dev",
        help="rows to fit on (default dev: the constants the presets carry)",
    )
    args = ap.parse_args(argv)
    rows = [r for r in load_set(args.set) if not r.skip]
    fams = fitted_families(rows)
    for (label, field), fam_rows in sorted(fams.items()):
        E = error_matrix(fam_rows, field)
        keys = list(E)
        err, v = best(E, keys)
        sets = sorted({r.set for r in fam_rows})
        print(
            f"{label}: {field} = {v:.2f}  (mean |err| {100 * err:.2f}% over {len(fam_rows)} rows, set {'+'.join(sets)})"
        )
        sources = sorted({(r.set, r.source) for r in fam_rows})
        if len(sources) == 1:
            print("   one source only: no leave-one-source-out estimate")
        pooled = []  # every row's error at the value fitted without its source
        for s, src in sources:
            mine = [(r.set, r.row_id) for r in fam_rows if (r.set, r.source) == (s, src)]
            rest = [k for k in keys if k not in set(mine)]
            if not rest:
                continue
            _, v2 = best(E, rest)
            m, sg, n = held_out(E, mine, v2)
            pooled += [E[k][GRID.index(v2)] for k in mine if E[k][GRID.index(v2)] is not None]
            print(
                f"   without {s} {src:<24} -> {v2:.2f}; held-out on its {n:>2} rows: mean |err| "
                f"{100 * m:6.2f}%  signed {100 * sg:+6.2f}%"
            )
        if pooled:
            print(
                f"   leave-one-source-out, all {len(pooled)} rows each at the value fitted without its source: "
                f"mean |err| {100 * statistics.mean(abs(e) for e in pooled):.2f}%  "
                f"signed {100 * statistics.mean(pooled):+.2f}%"
            )
        dev_keys = [k for k in keys if k[0] == "dev"]
        if args.set == "all" and dev_keys and len(dev_keys) < len(keys):
            _, vd = best(E, dev_keys)
            print(f"   fitted on the development set alone -> {vd:.2f}; on each new-set source:")
            for s, src in sources:
                if s != "new":
                    continue
                mine = [(r.set, r.row_id) for r in fam_rows if (r.set, r.source) == (s, src)]
                m, sg, n = held_out(E, mine, vd)
                print(f"      {src:<28} {n:>2} rows: mean |err| {100 * m:6.2f}%  signed {100 * sg:+6.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
