"""What is still fitted end to end: each such constant, its leave-one-source-out range, and how far it
sits from its component (single-kernel) measurement (issue 20, "Compose, then fit as little as possible").

    python -m benchmarks.fitted_constants [--set dev|all] [--span 0.12]

For every device constant the step-time model takes from end-to-end fits (the families of
``benchmarks/calibrate.py``: one GEMM efficiency per device family and dtype, the Hopper fused-attention
level) this prints

* the value the presets carry, and the value that minimises the mean |err| of step time over the set's
  rows of that family (unsealed rows only: ``published.load_set`` never returns the sealed split);
* the leave-one-source-out range: the value refitted with each source left out in turn (min-max);
* the component measurement: the large-kernel level the kernel benchmark fits to isolated-kernel
  measurements (:data:`costmodel.physics.kernels.kernel_fits.GEMM_FITS`; for attention the cuDNN fit of
  :data:`costmodel.physics.kernels.kernel_fits.ATTENTION_FITS` read at the presets' reference shape), with that group's
  error band (the kernel model's mean |err| over its rows in ``benchmarks/data/components/kernels.csv``);
* preset / component, and whether the preset lies outside the component's band: outside means the
  end-to-end fit absorbs a mechanism the step time does not charge (issue 20: "a missing mechanism to
  find, not a constant to keep").

``--implied`` adds, per row of each GEMM family, the GEMM efficiency the row implies: the step time is
linearised in the GEMM rate, ``t(eta) = A / eta + R`` (``A``: the GEMM work, from two predictions at the
preset and 10% above it; ``R``: everything else, including exposed communication), and
``eta_row = A / (measured - R)`` is the level at which that row alone would be predicted exactly. The rows'
levels are then grouped by scale (one GPU, one node, several nodes) and set against the share of the
predicted step that is exposed communication or interference: a GEMM level that is right only with
communication around it rises as that share falls (issue 20: "Dense single-GPU steps and multi-GPU runs are
predicted with the same kernel constants").

Then the constants that are *assumed* (not fitted to step times) with their component evidence where the
repository has one. The fit scans values ``preset +- span`` in steps of 0.01 (the error of each row at each
value is computed once; leaving a source out re-minimises over the same matrix). It prints; it never
writes a preset.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks.calibrate import errors, family, fitted_families, with_constants
from benchmarks.component_kernels import (
    attention_key,
    attention_row_time_s,
    gemm_key,
    gemm_row_time_s,
    kernel_class,
    load_rows,
    row_flops,
)
from benchmarks.published import load_set, predict
from costmodel.physics.kernels.kernel_fits import (
    ATTENTION_FITS,
    GEMM_FITS,
    REF_HEAD_DIM,
    REF_SEQ,
    STREAM_FITS,
    attention_utilization,
)
from costmodel.spec.presets import load_cluster

CLOCKS = Path(__file__).resolve().parent / "data" / "components" / "sustained_clocks.csv"
#: fitted family -> the device family of benchmarks/data/components/sustained_clocks.csv
CLOCK_FAMILY = {
    "A100 BF16": "A100",
    "H100-class BF16": "Hopper",
    "H100-class FP8": "Hopper",
    "B200 FP8": "B200",
    "B200 BF16": "B200",
}
#: device family of the CSV -> the GPU generation of costmodel.physics.kernels.measured.SUSTAINED_CLOCK, which is the
#: mean of the family's rows (tests/test_fitted_constants.py holds the two together)
CLOCK_GENERATION = {"A100": "ampere", "Hopper": "hopper", "B200": "blackwell"}
#: fitted family (benchmarks/calibrate.py label) -> the component group(s) it is compared with
GEMM_COMPONENT = {
    "A100 BF16": ("A100", "bf16"),
    "H100-class BF16": ("H100", "bf16"),
    "H100-class FP8": ("H100", "fp8"),
    "B200 FP8": ("B200", "fp8"),
}
ATTENTION_LABEL = "H100-class attention (cuDNN-class kernel)"


def grid(center: float, span: float) -> list[float]:
    lo, hi = max(0.2, center - span), min(0.99, center + span)
    n = int(round((hi - lo) / 0.01))
    return [round(lo + 0.01 * i, 2) for i in range(n + 1)]


def fit_family(rows, field: str, values: list[float]):
    """(value minimising the mean |err| over ``rows``, {source: value refitted without it}, mean |err| there)."""
    E = {(r.set, r.row_id): [(errors([r], field, v) or [None])[0] for v in values] for r in rows}

    def best(keys):
        def m(i):
            vals = [E[k][i] for k in keys if E[k][i] is not None]
            return statistics.mean(abs(e) for e in vals) if vals else float("inf")

        return min((m(i), values[i]) for i in range(len(values)))

    err, v = best(list(E))
    loso = {}
    for src in sorted({r.source for r in rows}):
        rest = [(r.set, r.row_id) for r in rows if r.source != src]
        if rest:
            loso[src] = best(rest)[1]
    return v, loso, err


def _kernel_band(rows, time_fn) -> float:
    """The kernel model's mean |err| of time over ``rows`` of the kernel data."""
    return statistics.mean(abs(time_fn(r) * float(r["measured_tflops"]) * 1e12 / row_flops(r) - 1) for r in rows)


def gemm_component(group: tuple[str, str]):
    """(level, error band, rows, source) of the isolated-GEMM fit ``group``, or None."""
    fit = GEMM_FITS.get(group)
    if fit is None:
        return None
    rows = [r for r in load_rows() if kernel_class(r) == "gemm" and gemm_key(r) == group]
    band = _kernel_band(rows, lambda r: gemm_row_time_s(r, "kernel")) if rows else float("nan")
    return fit.eta, band, fit.rows, fit.source


def attention_component():
    """(level at the reference shape, error band, rows, source) of Hopper's cuDNN fused attention: the mean of
    the forward and backward fits at causal REF_SEQ tokens, head dim REF_HEAD_DIM (the shape a preset's
    ``attention_efficiency`` is read at, :mod:`costmodel.physics.kernels.kernel_fits`)."""
    levels, kr = [], []
    for direction in ("fwd", "bwd"):
        f = ATTENTION_FITS[("H100", "cudnn", direction)]
        levels.append(f.eta * attention_utilization(REF_SEQ, REF_HEAD_DIM, True, f.l0_tokens, f.d0))
        kr += [
            r for r in load_rows() if r["kernel"] == "attention" and attention_key(r) == ("H100", "cudnn", direction)
        ]
    band = _kernel_band(kr, lambda r: attention_row_time_s(r, "kernel"))
    return statistics.mean(levels), band, len(kr), "cuDNN fused attention fwd/bwd (FlashAttention-3 paper figures)"


def sustained_ratios(path: Path = CLOCKS) -> dict:
    """{device family: [ratio, ...]}: sustained over short-kernel throughput per published row (the TFLOP/s
    ratio where the row states both, else the clock ratio: a compute-bound GEMM's rate scales with the clock)."""
    out: dict = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["throughput_before"] and r["throughput_after"]:
                ratio = float(r["throughput_after"]) / float(r["throughput_before"])
            else:
                ratio = float(r["sustained_clock_mhz"]) / float(r["max_clock_mhz"])
            out.setdefault(r["device_family"], []).append(ratio)
    return out


def composed_range(label: str, level: float, band: float, ratios: dict):
    """(lo, hi) of the isolated level at sustained clocks, widened by the kernel band; None without clock data."""
    rs = ratios.get(CLOCK_FAMILY.get(label, ""))
    if not rs:
        return None
    return level * min(rs) * (1 - band), level * max(rs) * (1 + band)


def preset_values(rows, field: str) -> str:
    vals = sorted({round(getattr(r.cluster.device, field), 3) for r in rows})
    return "/".join(f"{v:g}" for v in vals)


def implied_levels(rows) -> list[dict]:
    """Per row of a GEMM family: the GEMM efficiency that predicts it exactly (module doc, ``--implied``)."""
    out = []
    for r in rows:
        fam = family(r)
        if fam is None:
            continue
        label, field = fam
        eta0 = getattr(r.cluster.device, field)
        e0, _ = predict(with_constants(r, {field: eta0}), engine="analytic")
        e1, _ = predict(with_constants(r, {field: 1.1 * eta0}), engine="analytic")
        if e0 is None or e1 is None:
            continue
        a = (e0.step_time_s - e1.step_time_s) / (1 / eta0 - 1 / (1.1 * eta0))
        rest = e0.step_time_s - a / eta0
        comm = sum(v for k, v in e0.breakdown.items() if k.endswith("_exposed_s")) + e0.breakdown["interference_s"]
        out.append(
            {
                "family": label,
                "row": f"{r.set} {r.row_id}",
                "source": r.source,
                "gpus": r.gpus,
                "moe": r.model.is_moe,
                "gemm_share": a / eta0 / e0.step_time_s,
                "comm_share": comm / e0.step_time_s,
                "eta": a / (r.measured_s - rest) if r.measured_s > rest else float("inf"),
            }
        )
    return out


def print_implied(levels: list[dict]) -> None:
    print("\nGEMM level each row implies (step time linearised in the GEMM rate; analytic engine):")
    print(f"{'family':<18} {'scale':<12} {'rows':>4} {'median':>7} {'p10-p90':>11}")
    for fam in sorted({x["family"] for x in levels}):
        mine = [x for x in levels if x["family"] == fam and np.isfinite(x["eta"])]
        for scale, sel in (
            ("1 GPU", lambda x: x["gpus"] == 1),
            ("1 node", lambda x: 1 < x["gpus"] <= 8),
            ("multi-node", lambda x: x["gpus"] > 8),
            ("all", lambda x: True),
        ):
            v = [x["eta"] for x in mine if sel(x)]
            if v:
                print(
                    f"{fam:<18} {scale:<12} {len(v):>4} {np.median(v):7.3f} "
                    f"{np.percentile(v, 10):5.3f}-{np.percentile(v, 90):5.3f}"
                )
        dense = [x for x in mine if not x["moe"]]
        if len(dense) >= 4:
            eta = np.array([x["eta"] for x in dense])
            for key in ("comm_share", "gemm_share"):
                c = np.corrcoef([x[key] for x in dense], eta)[0, 1]
                print(
                    f"{fam:<18} dense rows: correlation of the implied level with {key}: {c:+.2f} "
                    f"({len(dense)} rows, {key} {min(x[key] for x in dense):.2f}-{max(x[key] for x in dense):.2f})"
                )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("dev", "all"), default="all", help="rows fitted (default all unsealed rows)")
    ap.add_argument("--span", type=float, default=0.12, help="scan preset +- span (default 0.12)")
    ap.add_argument("--implied", action="store_true", help="also print the GEMM level each row implies")
    args = ap.parse_args(argv)
    if not 0.01 <= args.span <= 0.5:
        print(f"fitted_constants: span={args.span}: must be within [0.01, 0.5]", file=sys.stderr)
        return 2
    rows = [r for r in load_set(args.set) if not r.skip]
    print(f"constants fitted end to end ({args.set} set, unsealed rows; values scanned at preset +- {args.span:g})")
    print(
        f"{'constant':<44} {'rows':>4} {'src':>3} {'preset':>7} {'fit':>5} {'LOSO range':>11} "
        f"{'component':>9} {'band':>6} {'preset/comp':>11}  verdict"
    )
    details, composed = [], []
    ratios = sustained_ratios()
    for (label, field), fam in sorted(fitted_families(rows).items()):
        preset = statistics.mean(getattr(r.cluster.device, field) for r in fam)
        v, loso, err = fit_family(fam, field, grid(preset, args.span))
        comp = (
            attention_component()
            if label == ATTENTION_LABEL
            else (gemm_component(GEMM_COMPONENT[label]) if label in GEMM_COMPONENT else None)
        )
        rng = f"{min(loso.values()):.2f}-{max(loso.values()):.2f}" if len(loso) > 1 else "one src"
        if comp:
            level, band, n_k, src = comp
            ratio = preset / level
            verdict = (
                "within band"
                if abs(ratio - 1) <= band
                else f"OUTSIDE band by {100 * (abs(ratio - 1) - band):.0f} pts: a missing mechanism"
            )
            ctext = f"{level:9.3f} {100 * band:5.1f}% {ratio:11.2f}"
            details.append(f"   {label}: component = {src} ({n_k} kernel rows)")
            if field != "attention_efficiency":
                rng_c = composed_range(label, level, band, ratios)
                if rng_c is None:
                    composed.append(f"   {label}: no published sustained-clock measurement for this device family")
                else:
                    inside = rng_c[0] <= preset <= rng_c[1] or rng_c[0] <= v <= rng_c[1]
                    composed.append(
                        f"   {label}: isolated {level:.3f} x sustained/short ratio "
                        f"{min(ratios[CLOCK_FAMILY[label]]):.2f}-{max(ratios[CLOCK_FAMILY[label]]):.2f} "
                        f"(+-{100 * band:.1f}% band) = {rng_c[0]:.3f}-{rng_c[1]:.3f}; preset {preset:.2f}, "
                        f"fit {v:.2f}: {'inside' if inside else 'OUTSIDE'}"
                    )
        else:
            ctext, verdict = f"{'none':>9} {'':>6} {'':>11}", "no component data"
        print(
            f"{label + ' ' + field:<44} {len(fam):>4} {len({r.source for r in fam}):>3} "
            f"{preset_values(fam, field):>7} {v:5.2f} {rng:>11} {ctext}  {verdict}"
        )
        details.append(
            f"   {label}: fit mean |err| {100 * err:.2f}%; without each source: "
            + ", ".join(f"{s} {x:.2f}" for s, x in loso.items())
        )
    print("\n".join(details))
    print("composed with sustained clocks (benchmarks/data/components/sustained_clocks.csv; not in the cost model):")
    print("\n".join(composed))
    h800 = GEMM_FITS.get(("H800", "fp8"))
    if h800:
        comp = gemm_component(("H800", "fp8"))
        lo, hi = composed_range("H100-class FP8", comp[0], comp[1], ratios)
        print(
            f"   H100-class FP8: the same die's other FP8 kernel data: {h800.source}, eta {h800.eta:g} over {h800.rows} "
            f"rows (H800; the H100 figure above rests on M = 128 GEMMs only); at sustained clocks "
            f"{lo:.3f}-{hi:.3f} (+-{100 * comp[1]:.1f}% band)"
        )
    if args.implied:
        print_implied(implied_levels(rows))
    h100 = load_cluster("h100-sxm")
    print("\nassumed, not fitted to step times (preset; component evidence):")
    print(
        f"   mem_bw_efficiency {h100.device.mem_bw_efficiency:g} (all presets); weight-streaming GEMMs in isolation: "
        + ", ".join(f"{k} {f.mem_bw_efficiency:g} ({f.rows} rows)" for k, f in sorted(STREAM_FITS.items()))
    )
    print(
        f"   kernel_overhead_s {1e6 * h100.device.kernel_overhead_s:g} us; isolated back-to-back kernels: "
        + ", ".join(f"{k} {1e6 * f.kernel_overhead_s:g} us" for k, f in sorted(STREAM_FITS.items()))
    )
    print(
        f"   comm_compute_interference {load_cluster('a100-80g').device.comm_compute_interference:g} "
        f"(h800 {load_cluster('h800').device.comm_compute_interference:g}); no component data in the repository"
    )
    print(
        f"   intra/inter link efficiency {h100.intra_link.efficiency:g}/{h100.inter_link.efficiency:g} (h100-sxm): "
        "checked by benchmarks/component_collectives.py (RESULTS section 15)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
