"""Where the time of each MoE row goes, and what the forced-balance / dropless pairs imply about routing imbalance.

    python -m benchmarks.moe_parts [--set dev|new|all] [--engine graph|analytic]

Part 1, for every published row of the ``moe_ep`` regime (``benchmarks/regimes.py``): measured and
predicted step (seconds, signed error: + = predicted slower), the predicted step's parts over the
slowest stage as ``estimate.evaluate`` reports them (``breakdown``: compute, recompute, bubble, exposed
EP / ZeRO / other communication), the shares of one MoE layer's forward + backward op time
(:func:`costmodel.physics.kernels.compute.layer_ops` with ``moe=True``: routed experts' grouped GEMMs, attention core,
the other GEMMs, permute + unpermute + router) and the rows per expert of the grouped GEMM (``M/exp``,
read back from the ``experts`` op's FLOPs), the size the kernel data of ``component_kernels.py`` covers
(DeepGEMM contiguous layout: 4096-8192 rows per group).

Part 2, the rows a source ran twice with one change, forced-balanced routing against its learned router
(the Megatron-MoE-ModelZoo long-context table: ``--moe-router-force-load-balancing`` or dropless, same
plan): the measured ratio of the two step times, the ratio the model predicts (``moe_load_cv`` 0 against
the default), and the per-EP-rank load (busiest rank over the mean, :func:`costmodel.physics.kernels.moe_load.moe_imbalance`)
at which the model would reproduce the dropless row from the forced one. The implied figure is a
diagnostic read off measured step times: it is printed, never used by the model (nothing here is fitted),
and the sealed split is never read (``--set`` offers no ``sealed``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

from benchmarks.published import load_set, predict
from costmodel.physics.kernels.compute import layer_ops
from costmodel.physics.kernels.moe_load import moe_imbalance

PARTS = ("compute", "recompute", "bubble", "ep", "zero", "other")
SHARES = ("experts", "attn_core", "other_gemm", "perm_router")
PERM_ROUTER = ("permute", "unpermute", "router", "router_topk", "tokens_per_expert_sync")


def parts(est) -> dict:
    """The predicted step's parts (seconds), from ``est.breakdown``."""
    b = est.breakdown
    other = sum(b.get(f"{k}_exposed_s", 0.0) for k in ("tp", "sp", "cp", "pp", "dp")) + b.get("optimizer_s", 0.0)
    return {
        "compute": b["compute_s"],
        "recompute": b["recompute_s"],
        "bubble": b["bubble_s"],
        "ep": b.get("ep_exposed_s", 0.0),
        "zero": b.get("zero_exposed_s", 0.0),
        "other": other,
    }


def moe_layer_shares(row, est) -> tuple[dict, float]:
    """Shares of one MoE layer's op time (forward + backward) and the grouped GEMM's rows per expert."""
    ops = layer_ops(row.model, row.cluster.device, row.workload, est.config, moe=True)
    t = {o.name: o.fwd_s + o.bwd_s for o in ops}
    total = sum(t.values())
    gemm = {o.name for o in ops if o.kind == "gemm"}
    sh = {
        "experts": t.get("experts", 0.0),
        "attn_core": t.get("attn_core", 0.0),
        "perm_router": sum(t.get(k, 0.0) for k in PERM_ROUTER if k != "router"),
    }
    sh["other_gemm"] = sum(v for k, v in t.items() if k in gemm and k not in ("experts", "attn_core"))
    m = row.model
    experts = next(o for o in ops if o.name == "experts")
    etp = est.config.tp if est.config.ep == 1 else 1
    f = m.moe_ffn_hidden / etp
    widths = 3 if m.activation == "swiglu" else 2  # fc1 (2 f when gated) + fc2 (f), each 2 M h width FLOPs
    groups = max(1, m.experts // est.config.ep)
    rows_per_expert = experts.fwd_flops / (2.0 * m.hidden * f * widths * groups)
    return {k: v / total for k, v in sh.items()}, rows_per_expert


def _with_cv(row, cv: float):
    return replace(row, model=replace(row.model, moe_load_cv=cv))


def implied_rank_load(forced, measured_dropless: float, engine: str, hi: float = 8.0) -> tuple[float, float] | None:
    """The ``moe_load_cv`` (and busiest-rank load over the mean) at which ``forced``'s plan predicts
    ``measured_dropless`` seconds, by bisection; ``None`` where even ``hi`` stays below it."""
    # the model predicts the forced row itself within a few percent; compare ratios, not absolute times,
    # so that its own error on the forced row does not enter the implied load
    est0, _ = predict(forced, engine=engine)
    target = measured_dropless / forced.measured_s * est0.step_time_s
    lo_cv, hi_cv = 0.0, hi
    if predict(_with_cv(forced, hi_cv), engine=engine)[0].step_time_s < target:
        return None
    for _ in range(30):
        mid = 0.5 * (lo_cv + hi_cv)
        if predict(_with_cv(forced, mid), engine=engine)[0].step_time_s < target:
            lo_cv = mid
        else:
            hi_cv = mid
    cv = 0.5 * (lo_cv + hi_cv)
    c = est0.config
    local = c.mb * forced.workload.seq_len / c.cp * forced.model.topk / (c.tp if c.ep > 1 else 1)
    m = forced.model
    return cv, moe_imbalance(replace(m, moe_load_cv=cv), c.ep, local * c.ep / m.experts)


def balance_pairs(rows) -> list[tuple]:
    """(forced, learned) row pairs: same source, model, workload and stated plan; ``moe_load_cv`` 0 in one."""
    key = lambda r: (r.source, r.label, r.gpus, r.workload, repr(sorted(r.fixed.items())))  # noqa: E731
    by = {}
    for r in rows:
        by.setdefault(key(r), []).append(r)
    out = []
    for group in by.values():
        forced = [r for r in group if r.model.moe_load_cv == 0]
        learned = [r for r in group if r.model.moe_load_cv > 0]
        if len(forced) == 1 and len(learned) == 1:
            out.append((forced[0], learned[0]))
    return sorted(out, key=lambda p: int(p[0].row_id))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("dev", "new", "all"), default="all")
    ap.add_argument("--engine", choices=("graph", "analytic"), default="graph")
    args = ap.parse_args(argv)
    rows = [r for r in load_set(args.set) if "moe_ep" in r.regimes and not r.skip and r.measured_s]
    print(
        f"{'row':>4} {'source':<18} {'label':<16} {'meas s':>7} {'pred s':>7} {'err':>7} | "
        + " ".join(f"{p:>7}" for p in PARTS)
        + " | MoE layer: "
        + " ".join(f"{s:>10}" for s in SHARES)
        + f" {'M/exp':>6}"
    )
    errs = []
    for row in rows:
        est, why = predict(row, engine=args.engine)
        if est is None:
            print(f"{row.row_id:>4} {row.source[:18]:<18} {row.label[:16]:<16} not predicted: {why}")
            continue
        err = est.step_time_s / row.measured_s - 1
        errs.append(err)
        p = parts(est)
        sh, m_exp = moe_layer_shares(row, est)
        print(
            f"{row.row_id:>4} {row.source[:18]:<18} {row.label[:16]:<16} {row.measured_s:7.2f} {est.step_time_s:7.2f} "
            f"{100 * err:+6.1f}% | "
            + " ".join(f"{p[k]:7.2f}" for k in PARTS)
            + " |            "
            + " ".join(f"{100 * sh[k]:9.0f}%" for k in SHARES)
            + f" {m_exp:6.0f}"
        )
    if errs:
        print(
            f"\n{len(errs)} rows: signed mean {100 * statistics.mean(errs):+.1f}%, "
            f"mean |err| {100 * statistics.mean(map(abs, errs)):.1f}%"
        )
    pairs = balance_pairs(rows)
    if pairs:
        print(
            "\nforced balance vs the learned router (same plan): measured and predicted step ratio, and the "
            "busiest-EP-rank load that would reproduce the learned row"
        )
        print(f"{'rows':>9} {'seq':>7} {'meas ratio':>10} {'pred ratio':>10} {'model load':>10} {'implied load':>12}")
    for forced, learned in pairs:
        ef, _ = predict(forced, engine=args.engine)
        el, _ = predict(learned, engine=args.engine)
        c = el.config
        m = learned.model
        local = c.mb * learned.workload.seq_len / c.cp * m.topk / (c.tp if c.ep > 1 else 1)
        model_load = moe_imbalance(m, c.ep, local * c.ep / m.experts)
        imp = implied_rank_load(forced, learned.measured_s, args.engine)
        imp_s = "> cv 8" if imp is None else f"{imp[1]:.2f} (cv {imp[0]:.2f})"
        print(
            f"{forced.row_id:>4}/{learned.row_id:<4} {forced.workload.seq_len:7d} "
            f"{learned.measured_s / forced.measured_s:10.3f} {el.step_time_s / ef.step_time_s:10.3f} "
            f"{model_load:10.3f} {imp_s:>12}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
