"""MoE layer times (grouped GEMMs with routing, on one rank) from the measured tables:
AIConfigurator's TensorRT-LLM ``moe_perf`` (latency in ms; ``collector/trtllm/collect_moe.py``),
the balanced token distribution (power_law_1.01 where a collection has none: A100), without the
min-latency decode kernels; stored in float16 (rounding <= 0.05%).

``num_tokens`` is what the collector feeds the MoE module on one rank; the rank runs its
``experts / ep`` local experts with ``inter / tp`` columns (routing included; the EP dispatch and
combine communication are not). A configuration measured exactly (dtype, gated, hidden, inter, topk,
experts, tp, ep) is interpolated between the two grid counts around num_tokens affinely in the
timed rank's load (:func:`load_coordinate`, :func:`.grid.affine_in`), not in num_tokens: the rank's
time is its local experts' weights read once plus its per-assignment work,
``a + b (n_loc + L_loc / R)``, where ``n_loc`` is how many of its local experts receive a token,
``L_loc`` how many (token, expert) assignments they receive and ``R`` the roofline ridge in tokens
(:func:`ridge_tokens`). Both follow the collector's routing generator (:func:`local_load`), which is
not proportional to num_tokens at small counts: AIConfigurator's ``power_law_logits_v3``
(``collector/trtllm/collect_moe.py``, A100) rounds ``T topk`` shares of a power-law draw, and where
every share rounds to zero (small ``T topk`` against the experts) its fix-up hands the ``T topk``
assignments to the first experts by index, all on the timed rank; one more doubling of ``T`` and
the shares spread over every rank (the A100 table's E = 384 rows run 0.97 ms at T = 4 and 0.26 ms at
T = 8 on tp 2, ep 8). ``balanced_logits`` spreads ``T topk`` distinct experts evenly until every
expert is hit at ``T = ceil(E / topk)``. Where the asked count's load lies outside its two grid
neighbours' (the load is not monotone in num_tokens) the line is extended within the bounds
``a, b >= 0`` allow and the evidence is ``extrapolated``.
Above the largest count the time grows in proportion (constant throughput), below the smallest it
stays (floor).
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
from .grid import affine_in, bracket
from .store import DEVICE_SYSTEM, load, manifest, system_of, table_for

#: the 1-D scheme of the num_tokens axis: affine in the timed rank's load (:func:`load_coordinate`)
SCHEME = ("load", 1.0)
#: Monte Carlo draws of the power-law generator per (tokens, experts, topk, ep), fixed seed
DRAWS = 256
#: bytes per weight and dense tensor-core rate relative to BF16 of each table dtype. The rates double per
#: halving of the operand width (NVIDIA H100 SXM datasheet: BF16 989, FP8 1,979 TFLOPS dense; DGX B200
#: datasheet: FP8 72, FP4 144 PFLOPS per 8 GPUs); w4a16 computes in BF16, w4a8 in FP8.
WEIGHT_BYTES_RATE = {0: (2.0, 1.0), 1: (1.0, 2.0), 2: (1.0, 2.0), 3: (0.5, 4.0), 4: (0.5, 1.0), 5: (0.5, 2.0)}
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
def local_load(tokens: int, experts: int, topk: int, ep: int, distribution: str) -> tuple[float, float]:
    """``(n_loc, L_loc)``: the local experts of the timed rank (EP rank 0, experts ``[0, E / ep)``) that
    receive a token and the (token, expert) assignments they receive, under the collector's routing.

    ``balanced``: AIConfigurator's ``balanced_logits`` (collector/helper.py), exactly: with
    ``s = ceil(E / topk)``, token ``t``'s ``i``-th expert is ``(t + i s) mod E`` when ``T >= s``, else
    ``int((t s / T + i s) mod E)``.
    ``power_law_<alpha>``: the mean over :data:`DRAWS` seeded draws of ``power_law_logits_v3``
    (collector/trtllm/collect_moe.py; the table's time is the mean of 5 such draws): per-expert weights
    ``sample_power_law(E, alpha, 1, 0.8 T)`` when ``T topk > E``, else ``(E, alpha, 0.01, 2)``; the
    counts ``round(T topk w / sum w)`` (half to even); the shortfall ``delta`` added one at a time down the
    counts sorted descending (ties by index), an excess taken from the smallest; then the EP group with
    the most assignments swapped into group 0, the timed rank's."""
    g = experts // ep
    if distribution == "balanced":
        s = -(-experts // topk)
        t, i = np.arange(tokens)[:, None], np.arange(topk)[None, :]
        ex = (t + i * s) % experts if tokens >= s else np.floor((t * s / tokens + i * s) % experts).astype(np.int64)
        cnt = np.bincount(ex.ravel(), minlength=experts)[:g]
        return float((cnt > 0).sum()), float(cnt.sum())
    if not distribution.startswith("power_law_"):
        raise ValueError(f"MoE token distribution {distribution!r}: balanced or power_law_<alpha>")
    alpha, target = float(distribution[len("power_law_") :]), tokens * topk
    lo, hi = (1.0, 0.8 * tokens) if target > experts else (0.01, 2.0)
    a = 1.0 - alpha
    u = np.random.default_rng(0).random((DRAWS, experts))
    w = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    cnt = np.round(w / w.sum(axis=1, keepdims=True) * target).astype(np.int64)
    delta = target - cnt.sum(axis=1)
    order = np.argsort(-cnt, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(experts)[None, :], axis=1)
    up = delta > 0
    cnt[up] += (delta[up] // experts)[:, None] + (rank[up] < (delta[up] % experts)[:, None])
    for d in np.nonzero(delta < 0)[0]:
        c = cnt[d]
        for r in range(-int(delta[d])):
            j = order[d, -(r % experts) - 1]
            c[j if c[j] > 0 else int(np.argmax(c))] -= 1
    grp = cnt.reshape(DRAWS, ep, g)
    loc = grp[np.arange(DRAWS), np.argmax(grp.sum(axis=2), axis=1)]
    return float((loc > 0).sum(axis=1).mean()), float(loc.sum(axis=1).mean())


@lru_cache(maxsize=64)
def ridge_tokens(system: str, code: int) -> float:
    """``R``: the assignments one local expert's weight read costs as much time as, on the table's GPU:
    the weights ``3 h i / tp`` parameters of ``b`` bytes read at the HBM bandwidth against ``2 * 3 h i / tp``
    FLOPs per assignment at the dtype's dense rate, ``R = b * rate / (2 * bandwidth)`` (the roofline ridge;
    :data:`WEIGHT_BYTES_RATE`); peak BF16 and bandwidth from the GPU's cluster preset
    (``costmodel/spec/presets/clusters``)."""
    from costmodel.spec.presets import load_cluster, preset_names

    name = {v: k for k, v in DEVICE_SYSTEM.items()}.get(system, system)
    dev = next((d for d in (load_cluster(n).device for n in preset_names("clusters")) if d.name == name), None)
    if dev is None:
        raise ValueError(f"no cluster preset with the device {name!r} of the MoE table's system {system!r}")
    b, m = WEIGHT_BYTES_RATE[code]
    return b * m * dev.peak_bf16_flops_per_s / (2.0 * dev.hbm_bw_bytes_per_s)


def load_coordinate(tokens: int, experts: int, topk: int, ep: int, distribution: str, ridge: float) -> float:
    """The timed rank's load ``n_loc + L_loc / R`` in units of one expert's weight read (module doc)."""
    n, assigned = local_load(int(tokens), int(experts), int(topk), int(ep), distribution)
    return n + assigned / ridge


def interp_tokens(axis, lat_ms, tokens: int, experts: int, topk: int, ep: int, distribution: str, ridge: float):
    """``(ms, corners, on_point, clamped, beyond)``: a configuration's row ``lat_ms`` over the num_tokens
    grid ``axis`` (raw counts) at ``tokens`` clamped to the grid, affine in :func:`load_coordinate`
    between the two grid counts around it (:func:`.grid.affine_in`); ``beyond`` > 0 where the load
    lies outside the two neighbours' (log2 of the ratio to the nearer)."""
    x = np.log(np.asarray(axis, dtype=float))
    j, t, xc = bracket(x, log(tokens))
    if len(x) == 1 or t in (0.0, 1.0):
        k = j if t == 0.0 else j + 1
        return float(lat_ms[k]), [k], abs(log(tokens) - xc) < 1e-9, float(axis[k]), 0.0
    t0, t1, tk = int(axis[j]), int(axis[j + 1]), int(tokens)
    c0, c1, c = (load_coordinate(v, experts, topk, ep, distribution, ridge) for v in (t0, t1, tk))
    ms, beyond = affine_in(c0, c1, c, float(lat_ms[j]), float(lat_ms[j + 1]), (t0, t1, tk))
    return ms, [j, j + 1], False, float(tokens), beyond


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
    h, n, k, e, t, p = (int(x) for x in cfg[i, 2:])
    ms, corners, on_point, xc, beyond = interp_tokens(
        raw, np.exp(loglat[i]), tokens, e, k, p, dist, ridge_tokens(system, code)
    )
    v = float(loglat[i][corners[0]]) if len(corners) == 1 else log(ms)
    d = log2(tokens / xc)
    if d > 1e-9:
        v += log(tokens / xc)
        notes.append(f"num_tokens {2**d:.1f}x beyond the table's largest ({int(raw[-1])})")
    elif d < -1e-9:
        notes.append(f"num_tokens below the table's smallest ({int(raw[0])}): latency floor")
    if beyond > 0:
        notes.append(
            f"the rank's load at {tokens} tokens lies outside its grid neighbours' ({int(raw[corners[0]])}, "
            f"{int(raw[corners[-1]])}): the line extended within a, b >= 0"
        )
    hole = max(int(fill[i][c]) for c in corners) / 10.0
    far = max(far, abs(d), hole, beyond)
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
    local_load.cache_clear()
