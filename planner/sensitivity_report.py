"""Text and JSON of ``planner explain --sensitivity`` (:mod:`costmodel.trust.sensitivity`)."""

from __future__ import annotations

from costmodel.trust.sensitivity import DELTA, FACTOR_RANGE

from .report import table


def _value(v: float, unit: str) -> str:
    if unit == "fraction":
        return f"{v:.3f}"
    if unit == "count":
        return f"{v:g}"
    return f"{v:.4g} {unit}"


def _critical(c, unit: str, up: bool) -> str:
    if c is None:
        return "none"
    return f"{_value(c.value, unit)} ({c.factor:.2f}x): {c.bottleneck.removesuffix('_s')}"


def sensitivity_text(rows) -> str:
    """A table: step time at -/+20% of each knob, elasticity, and where the bottleneck changes."""
    if not rows:
        return ""
    r0 = rows[0]
    pct = f"{100 * DELTA:g}%"
    out = [
        f"sensitivity: step time {r0.step_s:.4g} s, bottleneck {r0.bottleneck.removesuffix('_s')}; "
        f"each constant at -{pct} / +{pct}, and the nearest value where the bottleneck changes\n"
    ]
    body = [
        [
            r.label,
            _value(r.value, r.unit),
            f"{r.step_minus_s:.4g}",
            f"{r.step_plus_s:.4g}",
            f"{100 * (r.step_minus_s / r.step_s - 1):+.1f}% / {100 * (r.step_plus_s / r.step_s - 1):+.1f}%",
            f"{r.elasticity:+.2f}",
            _critical(r.critical_low, r.unit, False),
            _critical(r.critical_high, r.unit, True),
        ]
        for r in rows
    ]
    out.append(
        table(
            [
                "constant",
                "value",
                f"-{pct} s",
                f"+{pct} s",
                "change",
                "elasticity",
                "bottleneck changes below",
                "above",
            ],
            body,
        )
    )
    out.append(
        f"(searched 1/{FACTOR_RANGE:g}x to {FACTOR_RANGE:g}x of each value, GEMM efficiency up to 1.0; "
        "engine counts change by whole engines)"
    )
    return "\n".join(out)
