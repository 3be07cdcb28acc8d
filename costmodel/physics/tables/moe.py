"""MoE layer times (grouped GEMMs with routing, on one rank) from the measured tables:
AIConfigurator's TensorRT-LLM ``moe_perf`` (latency in ms; ``collector/trtllm/collect_moe.py``),
the balanced token distribution (power_law_1.01 where a collection has none: A100), without the
min-latency decode kernels; stored in float16 (rounding <= 0.05%).

``num_tokens`` is what the collector feeds the MoE module on one rank; the rank runs its
``experts / ep`` local experts with ``inter / tp`` columns (routing included; the EP dispatch and
combine communication are not). A configuration measured exactly (dtype, gated, hidden, inter, topk,
experts, tp, ep) is interpolated linearly in num_tokens (:mod:`.grid` ``AFFINE``: expert weights read
once plus per-token work, ``a + b tokens``): above the
largest count the time grows in proportion (constant throughput), below the smallest it stays (floor).
A configuration not measured reads the nearest one (the smallest sum of |log2| ratios of the per-rank
expert width ``hidden * inter / tp``, the local experts ``experts / ep`` and ``topk``), scaled by the
ratio of per-rank expert FLOPs ``topk * hidden * inter / (tp * ep)``: ``extrapolated``, the note names
the stand-in and the distance is that sum.
"""

from __future__ import annotations

from functools import lru_cache
from math import exp, log, log2

import numpy as np

from .evidence import Evidence, join_notes
from .grid import AFFINE, interpolate
from .store import load, manifest, system_of, table_for

#: the 1-D scheme of the num_tokens axis, :mod:`.grid`
SCHEME = AFFINE
DTYPE_CODE = {
    "bf16": 0,
    "bfloat16": 0,
    "fp16": 0,
    "fp8": 1,
    "fp8_block": 2,
    "nvfp4": 3,
    "w4a16_mxfp4": 4,
    "w4a8_mxfp4_mxfp8": 5,
}


@lru_cache(maxsize=16)
def _table(file: str):
    z = load(file)
    return z["cfg"], np.log(z["tokens"].astype(float)), np.log(z["lat_ms"].astype(float)), z["fill"], z["tokens"]


def _flops(h, i, k, e, tp, ep) -> float:
    return k * h * i / (tp * ep)


@lru_cache(maxsize=1 << 14)
def _moe(system, dtype, tokens, hidden, inter, topk, experts, tp, ep, gated, backend):
    code = DTYPE_CODE.get(dtype)
    if code is None:
        return None, Evidence("assumed", "", f"no measured {dtype} MoE table")
    choice = table_for(system, "moe", backend)
    if choice is None:
        return None, Evidence("assumed", "", f"no MoE table on {system}")
    cfg, t_ax, loglat, fill, raw = _table(choice.file)
    sel = np.nonzero((cfg[:, 0] == code) & (cfg[:, 1] == int(gated)))[0]
    if not len(sel):
        return None, Evidence(
            "assumed", choice.label, f"no {dtype} {'gated' if gated else 'non-gated'} MoE configuration"
        )
    want = np.array([hidden, inter, topk, experts, tp, ep])
    exact = sel[(cfg[sel, 2:] == want).all(axis=1)]
    dist = manifest()["files"][choice.file]["moe"]["distribution"]
    notes, far, kind = (
        [choice.note, "" if dist == "balanced" else f"tokens routed {dist} (no balanced rows)"],
        0.0,
        None,
    )
    if len(exact):
        i, scale = int(exact[0]), 0.0
    else:
        c = cfg[sel, 2:].astype(float)
        score = (
            np.abs(np.log2(c[:, 0] * c[:, 1] / c[:, 4]) - log2(hidden * inter / tp))
            + np.abs(np.log2(c[:, 3] / c[:, 5]) - log2(experts / ep))
            + np.abs(np.log2(c[:, 2]) - log2(topk))
        )
        j = int(np.argmin(score))
        i, far, kind = int(sel[j]), float(score[j]), "extrapolated"
        h, n, k, e, t, p = (int(x) for x in cfg[i, 2:])
        scale = log(_flops(hidden, inter, topk, experts, tp, ep) / _flops(h, n, k, e, t, p))
        notes.append(f"no measured config: h{h} i{n} top{k} E{e} tp{t} ep{p} stands in, scaled by per-rank FLOPs")
    v, corners, on_point, (xc,) = interpolate([t_ax], loglat[i], (log(tokens),), (SCHEME,))
    d = (log(tokens) - xc) / log(2)
    if d > 1e-9:
        v += log(tokens) - xc
        notes.append(f"num_tokens {2**d:.1f}x beyond the table's largest ({int(raw[-1])})")
    elif d < -1e-9:
        notes.append(f"num_tokens below the table's smallest ({int(raw[0])}): latency floor")
    hole = max(int(fill[i][c]) for c in corners) / 10.0
    far = max(far, abs(d), hole)
    if kind is None:
        kind = "extrapolated" if far > 1e-9 else "measured" if on_point else "interpolated"
    return exp(v + scale) * 1e-3, Evidence(kind, choice.label, join_notes(*notes), far)


def moe_lookup(device, dtype, num_tokens, hidden, inter, topk, experts, tp=1, ep=1, gated=True, backend=None):
    """``(seconds, Evidence)`` of one MoE layer forward on one rank of ``device`` (see the module
    docstring); ``(None, Evidence("assumed", ...))`` without a table. Cached per shape."""
    args = [int(x) for x in (num_tokens, hidden, inter, topk, experts, tp, ep)]
    if min(args) < 1 or args[4] % args[6] or args[3] > args[4]:
        raise ValueError(f"MoE shape {args}: positive sizes, experts a multiple of ep, topk <= experts")
    system = system_of(device)
    if system is None:
        return None, Evidence("assumed", "", f"no measured MoE table for {getattr(device, 'name', device)}")
    return _moe(system, dtype, *args, bool(gated), backend)


def cache_clear() -> None:
    _moe.cache_clear()
