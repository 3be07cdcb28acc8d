"""Why a problem has no plan, and the smallest changes that give it one.

Two causes: no way to divide the GPUs and the batch (divisibility), or no plan fits in memory.
The changes are found by re-checking relaxed problems: more GPUs, more HBM per GPU, another
global batch. Feasibility is decided on each shape's leanest choice (micro-batch 1, no
interleaving, most ZeRO sharding, full recompute, sequence parallel): every other choice of the
shape needs at least as much memory.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from search.problem import Problem
>>> p = Problem(model=load_model("gpt3-175b"), cluster=load_cluster("a100-80g").with_gpus(2),
...             workload=Workload(global_batch=8, seq_len=2048))
>>> why, changes = explain_infeasible(p)
>>> why.startswith("no plan fits in memory"), changes[0].startswith("--gpus")
(True, True)
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np

from costmodel.frameworks.degrees import check_degrees
from costmodel.spec.bounds import MAX_HBM_BYTES
from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB

from .candidates import (
    bucket_values,
    chunk_values,
    cp_values,
    mb_values,
    most_virtual_stages,
    pp_values,
    recompute_values,
    shapes,
    sp_values,
    tp_values,
    vp_values,
    zero_values,
)
from .exhaustive import best_splits, max_stage_layers
from .problem import Problem
from .choice import Choice
from .tables import Tables


def lean_choices(p: Problem):
    """Per shape, the choice needing the least memory."""
    for s in shapes(p):
        mbs = mb_values(p, s.dp)
        if not mbs:
            continue
        mb = mbs[0]
        vps = vp_values(p, s.pp, p.workload.global_batch // (s.dp * mb))
        if not vps:
            continue
        recs, sps, zeros = recompute_values(p, max_stage_layers(p, s.pp, vps[0])), sp_values(p, s), zero_values(p, s)
        chunks, buckets = chunk_values(p, s), bucket_values(p, s)
        if not (recs and sps and zeros and chunks and buckets):
            continue
        full = [r for r in recs if r[0] == "full"]  # the most recompute: all layers, else the most layers
        rec, k = ("full", None) if ("full", None) in recs else max(full, key=lambda r: r[1]) if full else recs[-1]
        yield Choice(
            s,
            mb,
            vps[0],
            max(sps),
            chunks[0],
            max(zeros),
            rec,
            k,
            buckets[0],
            p.framework,
            grad_dtype=p.grad_dtype,
            options=p.options,
        )


def feasible(p: Problem, deadline: float | None = None) -> bool:
    """Whether some lean choice of ``p`` has a split that fits (False once past ``deadline``)."""
    tables = Tables(p)
    return any(best_splits(tables.stage_table(c), p.model.layers, 1) for c in lean_choices(p) if not _late(deadline))


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def least_memory_bytes(p: Problem) -> tuple[float, Choice | None]:
    """The smallest peak memory per GPU any lean plan reaches (HBM ignored: the largest a spec may
    state, :data:`costmodel.spec.bounds.MAX_HBM_BYTES`), and its choice."""
    roomy = replace(
        p,
        limits=replace(p.limits, headroom_bytes=0.0),
        cluster=replace(p.cluster, device=replace(p.cluster.device, hbm_bytes=MAX_HBM_BYTES)),
    )
    tables, best, arg = Tables(roomy), np.inf, None
    L = p.model.layers
    for c in lean_choices(roomy):
        t = tables.stage_table(c)
        for sc in best_splits(_memory_table(t), L, 1):
            if sc.objective < best:
                best, arg = sc.objective, c
    return best, arg


def _memory_table(t):
    """A copy of a stage table whose objective is the peak stage memory (in MiB ticks)."""
    from copy import copy

    m = copy(t)
    zero = {k: np.zeros_like(v) for k, v in t.time_ticks.items()}
    m.time_ticks = {k: np.rint(v / 2**20).astype(np.int64) for k, v in t.mem_bytes.items()}
    m.dp_ticks, m.opt_ticks, m.sum_ticks = zero, zero, zero
    m.stall_ticks = None
    return m


def _why_no_shape(p: Problem) -> str:
    g, b = p.gpus, p.workload.global_batch
    for tp, cp, pp in itertools.product(tp_values(p), cp_values(p), pp_values(p)):
        dp = g // (tp * cp * pp) if g % (tp * cp * pp) == 0 else 0
        if dp and b % dp == 0 and p.limits.allows("dp", dp):  # divisible: the framework's degree rule refused it
            try:
                check_degrees(
                    p.framework, tp=tp, pp=pp, cp=cp, dp=dp, bf16_model=dict(p.options).get("optimizer_dtype") == "bf16"
                )
            except SpecError as e:
                return f"no division of the GPUs {p.framework} runs: {e} (the first: tp={tp} cp={cp} pp={pp} dp={dp})"
    parts = [f"tp in {tp_values(p)}", f"cp in {cp_values(p)}", f"pp in {pp_values(p)}"]
    return (
        f"no way to divide {g} GPUs as tp*cp*pp*dp with dp dividing the global batch {b} "
        f"({'; '.join(parts)}; tp divides heads={p.model.heads} and stays within an NVLink domain of "
        f"{p.cluster.domain})"
    )


def _why_no_choice(p: Problem) -> str | None:
    """Where ``tp*cp*pp*dp`` shapes exist but none has a runnable choice: the first shape's knob left
    without a value, and the rule that empties it (None when no shape exists: :func:`_why_no_shape`)."""
    for s in shapes(p):
        plan = f"tp={s.tp} cp={s.cp} pp={s.pp} dp={s.dp} ep={s.ep}"
        mbs = mb_values(p, s.dp)
        if not mbs:
            return f"{plan}: no micro-batch divides the batch per data-parallel rank {p.workload.global_batch // s.dp}"
        m = p.workload.global_batch // (s.dp * mbs[0])
        vps = vp_values(p, s.pp, m)
        if not vps:
            vp, L = p.limits.fixed.get("vp"), p.model.layers
            if vp is None:
                return f"{plan}: no interleave vp fits ({m} micro-batches, layers={L})"
            if vp > 1 and m % s.pp:
                rule = f"the interleaved schedule needs micro-batches ({m}) a multiple of pp={s.pp}"
            elif s.pp * vp > most_virtual_stages(p):
                rule = f"pp*vp={s.pp * vp} exceeds the {most_virtual_stages(p)} virtual stages layers={L} can fill"
            else:
                rule = (
                    f"pp*vp={s.pp * vp} does not divide layers={L} and {p.framework} plans even stages "
                    "here (no uneven split: --layers-per-stage pins one)"
                )
            return f"{plan}: vp={vp} cannot run: {rule}"
        knobs = {
            "recompute": recompute_values(p, max_stage_layers(p, s.pp, vps[0])),
            "sp": sp_values(p, s),
            "zero": zero_values(p, s),
            "chunks": chunk_values(p, s),
            "bucket_mb": bucket_values(p, s),
        }
        for name, values in knobs.items():
            if not values:
                pin = f" (pinned {name}={p.limits.fixed[name]})" if name in p.limits.fixed else ""
                return f"{plan}: no {name} the {p.framework} framework can run with this shape{pin}"
    return None


def explain_infeasible(p: Problem, deadline: float | None = None) -> tuple[str, list[str]]:
    """(why, [smallest changes]); the changes looked for until ``deadline`` (``time.perf_counter()``)."""
    if not any(True for _ in lean_choices(p)):
        why = _why_no_choice(p) or _why_no_shape(p)
    else:
        need, c = least_memory_bytes(p)
        cap = p.hbm_cap_bytes
        plan = (
            (
                f"tp={c.shape.tp} pp={c.shape.pp} dp={c.shape.dp} cp={c.shape.cp} ep={c.shape.ep} mb={c.mb} "
                f"zero={c.zero} recompute={c.recompute}"
            )
            if c
            else ""
        )
        why = (
            f"no plan fits in memory: the leanest ({plan}) needs {need * 2**20 / GiB:.1f} GiB per GPU, "
            f"{cap / GiB:.1f} GiB usable"
        )
    return why, smallest_changes(p, deadline=deadline)


def smallest_changes(p: Problem, max_factor: int = 64, deadline: float | None = None) -> list[str]:
    """Relaxations that make ``p`` feasible, each the smallest of its kind that was found
    (before ``deadline``, ``time.perf_counter()`` seconds: a change not reached is left out)."""
    out = []
    g, node = p.gpus, p.cluster.gpus_per_node
    steps = sorted({g * k for k in range(2, max_factor + 1)} | {node * k for k in range(1, max_factor * g // node + 1)})
    pinned_gpus = all(k in p.limits.fixed for k in ("tp", "pp", "dp", "cp"))  # the pins fix the GPU count
    for g2 in (x for x in steps if x > g and not pinned_gpus):
        if _late(deadline):
            break
        q = replace(p, cluster=p.cluster.with_gpus(g2))
        if feasible(q, deadline):
            out.append(f"--gpus {g2} (more GPUs: {g2 - g:+d})")
            break
    if any(True for _ in lean_choices(p)):
        need, _ = least_memory_bytes(p)
        need_hbm = need * 2**20 + p.limits.headroom_bytes
        out.append(f"HBM >= {need_hbm / GiB:.1f} GiB per GPU (have {p.cluster.device.hbm_bytes / GiB:.1f})")
    b = p.workload.global_batch
    tried = sorted(
        {
            x
            for k in (1, 2, 4, 8, 16, 32, 64)
            for x in (b - b % k, b + (-b) % k, k * g, max(1, b // k))
            if x > 0 and x != b
        },
        key=lambda x: (abs(x - b), x),
    )
    for b2 in tried[:24]:
        if _late(deadline):
            break
        q = replace(p, workload=replace(p.workload, global_batch=b2))
        if feasible(q, deadline):
            out.append(f"--global-batch {b2}")
            break
    return out
