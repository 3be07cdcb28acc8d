"""Where a plan lies outside the data its band is made of, said in words (issue 23).

The 80% band (:mod:`costmodel.trust.uncertainty`) is built from out-of-source residuals of measured runs.
It only means what it says for plans like those runs. :func:`scope` compares one plan with the
measured runs (the rows of ``costmodel/trust/data/residuals.json``, or any pool of them) and with the
component measurements (the kernel and collective kinds of ``benchmarks/data/components``,
summarised in the same file) and returns what the plan rests on that no measurement covers:

* ``outside``: the device family, the software stack (``ClusterSpec.stack``), the regime (kind and
  ZeRO bucket on that device) or a mechanism the plan uses (expert all-to-all, grouped GEMM, FP8
  GEMM, fused attention on that device class) has no measured run / no component data. The band
  then falls back to the band of all measured runs pooled (:func:`costmodel.trust.uncertainty.outside_band`).
* ``scale_ratio``: the plan's GPU count over the largest measured run of its regime (kind, device,
  ZeRO bucket) on its stack, when above 1. The band widens with ``log2`` of it
  (:data:`costmodel.trust.uncertainty.DRIFT_PER_DOUBLING`).

Every finding is one sentence in ``notes`` ("extrapolating: no measured run above 512 GPUs ..."); a plan
with no finding gets one sentence saying so ("within the data: 27 measured runs of dense ZeRO-0 training
on a100 from 3 sources, up to 3,072 GPUs on this stack (mcore-2025): no extrapolation"), so every output
names whether its number is an extrapolation.

>>> rows = [{"regime": {"kind": "dense", "device": "a100", "zero": "0", "scale": "65-512"},
...          "gpus": 512, "stack": "mcore-2025", "source": "s"}]
>>> s = scope({"kind": "dense", "device": "a100", "zero": "0"}, 5120, "mcore-2025", (), rows, ())
>>> s.scale_ratio, s.outside
(10.0, False)
>>> s.notes[0]
'extrapolating: no measured run above 512 GPUs of dense ZeRO-0 training on a100 on this stack (mcore-2025); band widened for 5,120 GPUs'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from costmodel.trust.band_spread import MIN_POOL, MIN_SOURCES

#: device classes of the component data (its GPU names are free text: "SM90 (Hopper)", "H100-500W")
CLASSES = (
    ("a100", "ampere"),
    ("a800", "ampere"),
    ("h100", "hopper"),
    ("h200", "hopper"),
    ("h800", "hopper"),
    ("h20", "hopper"),
    ("sm90", "hopper"),
    ("hopper", "hopper"),
    ("b200", "blackwell"),
    ("gb200", "blackwell"),
    ("sm100", "blackwell"),
    ("blackwell", "blackwell"),
)


@dataclass(frozen=True, kw_only=True)
class Scope:
    """What :func:`scope` found: ``outside`` (fall back to the pooled band), ``scale_ratio`` (>= 1)
    and ``notes`` (one sentence per finding)."""

    outside: bool = False
    scale_ratio: float = 1.0
    notes: tuple = ()


def device_class(name: str) -> str:
    """``H100-SXM5-80GB`` / ``SM90 (Hopper)`` -> ``hopper``; an unknown name -> its first token."""
    low = name.strip().lower()
    for key, cls in CLASSES:
        if re.search(rf"\b{key}", low):
            return cls
    return re.split(r"[-_ ()]", low or "device")[0]


def mechanisms(is_moe: bool, ep: int, dtype: str, offload: bool = False) -> tuple:
    """The component kinds a training plan's step rests on beyond dense BF16 GEMMs, as
    ``(component, dtype or "*", what, in words)``: matched against the component data's kinds.
    ``offload``: optimizer CPU offload (:mod:`costmodel.physics.mechanics.offload`), whose host constants have no measurement."""
    out = [("attention", "*", "fused attention")]
    if offload:
        out.append(("host_offload", "*", "optimizer CPU offload (PCIe copies, CPU Adam)"))
    if dtype == "fp8":
        out.append(("gemm", "fp8", "FP8 GEMMs"))
    if is_moe:
        out.append(("grouped_gemm", "*", "grouped expert GEMMs"))
    if ep > 1:
        out.append(("alltoall", "*", "expert-parallel all-to-all"))
    return tuple(out)


def _has_component(components, kind: str, dtype: str, cls: str) -> bool:
    for c in components:
        k, c_cls, c_dtype = c[0], c[1], c[2]
        if k.startswith(kind) and c_cls == cls and (dtype == "*" or c_dtype == dtype):
            return True
    return False


def scope(
    keys: dict, gpus: int, stack: str, plan_mechanisms, rows, components, device_name: str | None = None
) -> Scope:
    """Compare one plan (regime ``keys``: kind, device, zero; ``gpus``; ``stack``; its
    :func:`mechanisms`) with the measured ``rows`` and the ``components`` summary
    (``[component, device class, dtype]`` triples). See the module doc."""
    notes, outside = [], False
    dev, kind, zero = keys["device"], keys["kind"], keys["zero"]
    on_dev = [r for r in rows if r["regime"].get("device") == dev]
    if not on_dev:
        outside = True
        notes.append(f"no measured run on {dev}: band of all measured runs pooled")
    stacks = {r.get("stack") for r in rows if r.get("stack")}
    if stacks and stack not in stacks:
        outside = True
        notes.append(
            f"no measured run on stack {stack} (measured: {', '.join(sorted(stacks))}): band of all "
            "measured runs pooled"
        )
    regime = [r for r in on_dev if r["regime"].get("kind") == kind and r["regime"].get("zero") == zero]
    if on_dev and not regime:
        outside = True
        notes.append(f"no measured run of {kind} ZeRO-{zero} training on {dev}: band of all measured runs pooled")
    ratio = 1.0
    sized = [r["gpus"] for r in regime if r.get("gpus") and r.get("stack", stack) == stack]
    if sized and gpus > max(sized):
        ratio = gpus / max(sized)
        notes.append(
            f"extrapolating: no measured run above {max(sized):,} GPUs of {kind} ZeRO-{zero} training on "
            f"{dev} on this stack ({stack}); band widened for {gpus:,} GPUs"
        )
    cls = device_class(device_name or dev)
    if components:
        missing = [what for kind_, dtype, what in plan_mechanisms if not _has_component(components, kind_, dtype, cls)]
        if missing:
            outside = True
            notes.append(
                f"no component data (benchmarks/data/components) for {', '.join(missing)} on {cls}-class "
                "GPUs: band of all measured runs pooled"
            )
    if not notes:  # say so in words too: the user should know the number is not an extrapolation
        srcs = len({r.get("source") for r in regime if r.get("source")})
        notes.append(
            f"within the data: {len(regime)} measured run{'s' if len(regime) != 1 else ''} of {kind} "
            f"ZeRO-{zero} training on {dev} from {srcs} source{'s' if srcs != 1 else ''}"
            + (f", up to {max(sized):,} GPUs on this stack ({stack})" if sized else "")
            + ": no extrapolation"
            + (
                ""
                if len(regime) >= MIN_POOL and srcs >= MIN_SOURCES
                else f" (fewer than {MIN_POOL} runs from {MIN_SOURCES} sources: the band's centre comes from a "
                "coarser pool)"
            )
        )
    return Scope(outside=outside, scale_ratio=ratio, notes=tuple(notes))
