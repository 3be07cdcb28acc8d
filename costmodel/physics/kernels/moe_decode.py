"""The MoE block of a serving step as the engines run it: the experts the batch hits, read once each,
timed from the measured MoE table where the GPU has one.

A serving engine runs a MoE layer over the ``n`` tokens of one step (decode tokens and prompt chunks)
as one fused kernel chain under CUDA graphs: the router GEMM, one fused top-k (DeepSeek's ``noaux_tc``
grouped top-k, vLLM's ``topk_softmax``: no auxiliary loss, no host copy of the expert counts), the
routed experts' grouped GEMMs over the experts that received a token, and the shared experts. With
tensor-parallel attention every rank of a TP group holds its ``n`` tokens; with expert parallelism each rank
runs its ``L = experts / ep`` local experts on the tokens routed to them from the EP group, which spans
``ep / tp`` attention groups (data-parallel attention, vLLM's ``--data-parallel-size`` with
``--enable-expert-parallel``: ``n ep / tp`` distinct tokens; TP8 EP8: the ``n`` tokens every rank holds),
and the ranks' outputs are summed (all-reduce) or combined (all-to-all).

Experts hit. Under uniform routing a token misses a given expert with probability ``1 - k/E``, so
``n`` tokens hit it with ``p(n) = 1 - (1 - k/E)^n`` and ``E p(n)`` distinct experts in all
(:func:`hit_fraction`); a rank's count is ``Binomial(L, p)`` (mean ``L p``). Only those experts'
weights are read: the decode step is bound by them. The ranks' outputs are summed before the next
layer, so the step waits for the rank that hit the most: the expected maximum of ``ep`` such counts
(:func:`experts_hit`; independent ranks, an approximation: the counts are weakly anti-correlated).

Time. AIConfigurator's TensorRT-LLM ``moe_perf`` table (:mod:`costmodel.physics.tables.moe`, measured
under CUDA graphs, ``collector/helper.py`` ``benchmark_with_power``) times the fused MoE module on one
rank (routing, permute, the grouped GEMMs, finalize), but under its *balanced* routing
(``helper.balanced_logits``: ``n`` tokens hit ``min(E, n k)`` experts, evenly over the ranks), which
hits more experts than uniform routing does below saturation. The table is therefore read at the
token count whose balanced routing hits as many experts per rank as the step's slowest rank,
``n_eq = h ep / k``, plus the table's growth beyond saturation (``n > E/k``: every expert hit, rows
grow): ``t = T(n_eq) + max(0, T(n) - T(E/k))`` (:func:`table_moe_s`). Without a table, a roofline:
the grouped GEMMs over the ``h`` hit experts (their weights over HBM bandwidth, or their FLOPs), the
activation, permute and finalize (:func:`serving_moe_ops`).

>>> round(hit_fraction(1, 8, 256), 5), round(hit_fraction(32, 8, 256), 3), round(hit_fraction(4096, 8, 256), 3)
(0.03125, 0.638, 1.0)
>>> mean, slowest = experts_hit(32, 8, 256, 8)
>>> round(mean, 1), mean < slowest <= 32
(20.4, True)
"""

from __future__ import annotations

import math
from functools import lru_cache

from costmodel.physics.kernels.compute import Op, _elementwise, _gemm
from costmodel.physics.kernels.gemm import ACT_BYTES, elementwise_time_s, grouped_gemm_time_s
from costmodel.physics.tables.moe import moe_lookup

#: the table dtypes a planner dtype may read: FP8 weights are per-tensor scaled (``fp8``) or 128-block
#: scaled (``fp8_block``, DeepSeek's and Qwen's FP8 checkpoints); a decode step reads the same weight bytes
#: either way, so the row measured nearest the model's shape is used (:func:`table_moe_s`)
TABLE_DTYPES = {"bf16": ("bf16",), "fp16": ("bf16",), "fp8": ("fp8", "fp8_block")}


def hit_fraction(tokens: float, topk: int, experts: int) -> float:
    """Probability that a given expert receives at least one of ``tokens`` uniformly routed tokens."""
    return 1.0 - (1.0 - topk / experts) ** max(0.0, tokens)


@lru_cache(maxsize=8192)
def experts_hit(tokens: float, topk: int, experts: int, ep: int) -> tuple[float, float]:
    """``(mean, slowest)``: the expected distinct local experts one EP rank's tokens hit, and the expected
    maximum of that count over the ``ep`` ranks (module doc). ``ep = 1``: every rank holds a slice of every
    expert, so all read the same ``E p`` experts (mean = slowest)."""
    local = experts // ep
    p = hit_fraction(tokens, topk, experts)
    mean = local * p
    if ep <= 1 or p <= 0.0 or p >= 1.0:
        return mean, mean
    # E[max of ep iid Binomial(local, p)] = sum_j (1 - F(j)^ep)
    pmf = [math.comb(local, j) * p**j * (1 - p) ** (local - j) for j in range(local + 1)]
    cdf, slowest = 0.0, 0.0
    for j in range(local):
        cdf += pmf[j]
        slowest += 1.0 - min(1.0, cdf) ** ep
    return mean, slowest


@lru_cache(maxsize=1024)
def _table_dtype(model, dev, dtype, etp, ep, gated) -> str | None:
    """The table dtype among those ``dtype`` may read whose row is nearest the model's shape (smallest
    distance: a measured shape before an extrapolated one), or None where no table times it."""
    best = None
    for tdt in TABLE_DTYPES.get(dtype, ()):
        t, ev = moe_lookup(dev, tdt, 1, model.hidden, model.moe_ffn_hidden, model.topk, model.experts, etp, ep, gated)
        if t is not None and (best is None or ev.distance < best[1]):
            best = (tdt, ev.distance)
    return None if best is None else best[0]


@lru_cache(maxsize=65536)
def table_moe_s(model, dev, dtype: str, tokens: float, etp: int, ep: int, gated: bool) -> tuple[float, str] | None:
    """Seconds of the routed-expert block (routing to finalize) on the slowest rank for ``tokens`` tokens from
    the measured MoE table (module doc), with the evidence kind; ``None`` where no table times it."""
    n = max(1.0, float(tokens))
    _, slowest = experts_hit(n, model.topk, model.experts, ep)
    n_sat = model.experts / model.topk  # the balanced table hits every expert from here on
    n_eq = max(1.0, slowest * ep / model.topk)

    tdt = _table_dtype(model, dev, dtype, etp, ep, gated)
    if tdt is None:
        return None

    def at(x: float):
        return moe_lookup(
            dev, tdt, max(1, round(x)), model.hidden, model.moe_ffn_hidden, model.topk, model.experts, etp, ep, gated
        )

    t, ev = at(n_eq)
    if n > n_sat:
        t += max(0.0, at(n)[0] - at(n_sat)[0])
    return t, ev.kind


def serving_moe_ops(model, dev, dtype: str, n: float, tp: int, ep: int, gated: bool, tp_comm: str) -> list[Op]:
    """The MoE block of one serving step on one rank for ``n`` tokens (module doc): router GEMM, the routed
    experts (one ``experts`` op: fused top-k, permute, grouped GEMMs over the hit experts, activation,
    finalize; from the measured table where ``dev`` has one) and the shared experts."""
    h, etp = model.hidden, (tp if ep == 1 else 1)
    f = model.moe_ffn_hidden / etp
    ops = [_gemm("router", "mlp", n, model.experts, h, dev, "bf16")]
    group = n * max(1.0, ep / tp)  # distinct tokens routed in the EP group: ep / tp attention groups of n each
    slots = group * model.topk / ep  # token-slots this rank's local experts receive, on average
    mean, slowest = experts_hit(group, model.topk, model.experts, ep)
    active = max(1.0, slowest)
    flops = 2.0 * slots * h * f * (3 if gated else 2)
    table = table_moe_s(model, dev, dtype, group, etp, ep, gated)
    if table is not None:
        t, evidence = table
    else:
        evidence = ""
        # one fused top-k kernel: read the FP32 logits, write k indices and weights per token
        t = elementwise_time_s(4 * n * model.experts + 12 * n * model.topk, dev)
        t += 2 * elementwise_time_s(2 * ACT_BYTES * slots * h, dev)  # permute in, finalize (weighted sum) out
        rows = slots / active
        wide = f * (2 if gated else 1)
        t += grouped_gemm_time_s(rows, wide, h, dev, dtype, active, active > 1)
        t += grouped_gemm_time_s(rows, h, f, dev, dtype, active, active > 1)
        t += elementwise_time_s((3 if gated else 2) * ACT_BYTES * slots * f, dev)
        if dtype == "fp8":  # the activations are quantized before each grouped GEMM (per-token-group FP8)
            t += elementwise_time_s(3 * slots * h, dev) + elementwise_time_s(3 * slots * f, dev)
    comm = "a2a" if ep > 1 else tp_comm
    ops.append(Op("experts", "gemm", "mlp", flops, t, 0.0, comm_after=comm, evidence=evidence))
    if model.shared_experts:
        fs = model.shared_experts * model.moe_ffn_hidden / tp
        ops.append(_gemm("shared_fc1", "mlp", n, fs * (2 if gated else 1), h, dev, dtype))
        ops.append(_elementwise("shared_act", "mlp", (3 if gated else 2) * ACT_BYTES * n * fs, dev))
        ops.append(_gemm("shared_fc2", "mlp", n, h, fs, dev, dtype))
    return ops


def weight_bytes_read(model, dtype_bytes: float, tokens: float, tp: int, ep: int) -> tuple[float, float]:
    """``(mean, slowest)`` routed-expert weight bytes one rank reads per MoE layer when each attention group
    holds ``tokens`` tokens: the hit experts (:func:`experts_hit` of the EP group's ``tokens * max(1, ep/tp)``)
    times one expert's ``(2 if gated else 1) h f + f h`` weights at ``dtype_bytes`` each (``f`` split ``tp``
    ways without EP)."""
    etp = tp if ep == 1 else 1
    per_expert = (3 if model.activation == "swiglu" else 2) * model.hidden * model.moe_ffn_hidden / etp
    mean, slowest = experts_hit(tokens * max(1.0, ep / tp), model.topk, model.experts, ep)
    return mean * per_expert * dtype_bytes, slowest * per_expert * dtype_bytes
