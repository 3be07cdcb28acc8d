"""Issue 13's factored CP-SAT model, built on the search's own tables and timed against the search.

    python -m benchmarks.factored_model [--cases NAME,...] [--time-limit 60] [--workers 2]

Issue 13 asks for a CP-SAT model whose *decision variables* are the degrees and knobs, with costs
from small factored tables and no product of choices built in Python. This script builds that
model for a **relaxation** of the search's objective and solves it:

* variables: one Boolean per ``(shape, micro-batch, interleave)`` group (the degrees multiply
  to the GPU count, so they are chosen together), one-hots for sp, chunks, recompute and ZeRO
  stage, and per stage position (first / middle / last) a one-hot over its layer count;
* tables, each over the few variables its entry depends on (:mod:`search.tables`, one source):
  a layer's time with its recompute (``Tables.layer``) by ``(tp, cp, ep, mb) x (sp, chunks,
  recompute)``, dense and MoE; its stored activation bytes by ``(tp, cp, ep, mb) x (sp,
  recompute)``; the stage extras (embedding, LM head) by ``(tp, cp, ep, mb) x sp`` and position;
  model state bytes and the reserve by ``(shape, ZeRO)``, affine in the layer count; in-flight
  micro-batches by group and position. CP-SAT picks entries with ``AddElement``;
* composition: ``(m - 1/v) * slowest + sum / v`` with ``m - 1/v`` an element of the group
  (``AddMultiplicationEquality``), the stage time ``n * layer + extras`` for the chosen ``n``
  (enforced by the count's literal), and peak memory ``state + n * in_flight * activations +
  reserve <= HBM`` (a product of the activation bytes and the group's in-flight factor).

Left out, so the model's optimum is a lower bound of the search's (each term is >= 0 or only
raises a plan's cost): DP/ZeRO exposure, optimizer, PP send/recv, bucket size, DMA assignment,
ZeRO-3's per-layer gathers (charged as ZeRO-0-2 layers), the working layer and logits in memory
(``Bounds.mem_lb``). Proving this relaxation is easier than proving the full model. Both sides
search the same space: ``Limits(partial_recompute=False)``.

Printed per case: the factored tables' entries and build time, CP-SAT's status, objective, bound
and time, and the search's (``search.solve``: branch and bound plus CP-SAT on the survivors) on the
same space, with its objective (always >= the relaxation's when both are proven).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from ortools.sat.python import cp_model

from benchmarks.search_speed import cold
from benchmarks.speed_cases import CASES
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.stages import in_flight_chunks
from costmodel.spec.units import MiB
from costmodel.spec.workload import Workload
from search.bounds import STAGE_OF, Bounds  # STAGE_OF: stage position -> the stage whose bound stands for it
from search.candidates import Shape, chunk_values, recompute_values, sp_values, zero_values
from search.choice import Choice
from search.cpsat import POSITIONS as POS
from search.exhaustive import max_stage_layers
from search.group_expander import _groups
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve
from search.tables import Tables, ticks

V_LCM = 840  # lcm(1..8): (m - 1/v) and 1/v as integers for every interleave factor the search offers


class Factored:
    """The factored model of a problem's relaxation (module docstring)."""

    def __init__(self, p: Problem):
        self.p, self.t = p, Tables(p)
        self.b = Bounds(self.t)
        self.m = cp_model.CpModel()
        self.entries = 0

    def element(self, name: str, index, values) -> cp_model.IntVar:
        """``values[index]`` as a new variable (``index`` any linear expression); entries that no
        plan can take (``None``) hold the largest valid value, so they widen no domain."""
        vals = [v for v in values if v is not None]
        hi = max(vals)
        values = [int(hi if v is None else v) for v in values]
        self.entries += len(values)
        idx = self.m.new_int_var(0, len(values) - 1, name + "_i")
        self.m.add(idx == index)
        var = self.m.new_int_var(min(values), hi, name)
        self.m.add_element(idx, values, var)
        return var

    def onehot(self, name: str, values) -> dict:
        out = {v: self.m.new_bool_var(f"{name}{i}") for i, v in enumerate(values)}
        self.m.add_exactly_one(out.values())
        return out


def build(p: Problem):
    """``(Factored, x, one, y, timings)``: the model of ``p``'s relaxation, its group, knob and
    layer-count literals, and the per-layer timings its tables cost."""
    f = Factored(p)
    m, t, b = f.m, f.t, f.b
    L, d, moe_model = p.model.layers, p.model.dense_layers, p.model.is_moe
    res = t.res_s
    groups = list(_groups(p))
    x = f.onehot("g", groups)
    shapes = sorted({g[0] for g in groups})
    lays = sorted({(g[0].tp, g[0].cp, g[0].ep, g[1]) for g in groups})  # a group's per-layer part
    spv, chv, zv = [False, True], sorted(set(p.limits.chunk_options) | {1}), [0, 1, 2, 3]
    recv = sorted({k for k, _ in recompute_values(p, L)})
    one = {"sp": f.onehot("sp", spv), "ch": f.onehot("ch", chv), "z": f.onehot("z", zv), "rec": f.onehot("rec", recv)}
    pos_of = {
        name: {v: i for i, v in enumerate(vals)} for name, vals in (("sp", spv), ("ch", chv), ("z", zv), ("rec", recv))
    }
    oi = {name: sum(pos_of[name][v] * lit for v, lit in one[name].items()) for name in one}
    for g in groups:  # what each group allows: search.candidates, the one source
        s = g[0]
        allowed = {
            "sp": sp_values(p, s),
            "ch": chunk_values(p, s),
            "z": zero_values(p, s),
            "rec": [k for k, _ in recompute_values(p, max_stage_layers(p, s.pp, g[2]))],
        }
        for name, ok in allowed.items():
            for v, lit in one[name].items():
                if v not in ok:
                    m.add_implication(x[g], lit.Not())

    def by_group(key_of) -> cp_model.LinearExpr:
        return sum(key_of(g) * x[g] for g in groups)

    lay_of = {k: i for i, k in enumerate(lays)}
    shape_of = {k: i for i, k in enumerate(shapes)}
    lay_i = by_group(lambda g: lay_of[(g[0].tp, g[0].cp, g[0].ep, g[1])])
    shape_i = by_group(lambda g: shape_of[g[0]])
    group_i = sum(i * x[g] for i, g in enumerate(groups))
    timings_before = len(t._layer)
    # ---- per layer: time with recompute (ticks), stored activations (MiB); dense and MoE
    nS, nC, nR = len(spv), len(chv), len(recv)
    u = {moe: [None] * (len(lays) * nS * nC * nR) for moe in (False, True)}
    a = {moe: [None] * (len(lays) * nS * nR) for moe in (False, True)}
    xt = {k: [None] * (len(lays) * nS) for k in ("first", "only", "last")}
    for li, (tp, cp, ep, mb) in enumerate(lays):
        s = Shape(tp, cp, 1, 1, ep)
        for si, sp in enumerate(spv):
            if sp and tp == 1:
                continue
            for ri, rec in enumerate(recv):
                c0 = Choice(s, mb, 1, sp, 1, 0, rec, None, 40.0, p.framework)
                acts = b.activations(c0)
                for moe in (False, True):
                    per = t.layer_input_bytes(c0) if rec == "full" else acts[moe]
                    a[moe][(li * nS + si) * nR + ri] = int(np.floor(per / MiB))
                for ci, ch in enumerate(chv):
                    if ch > 1 and not (tp > 1 or (moe_model and ep > 1)):
                        continue
                    try:
                        dl, ml = b.layers(Choice(s, mb, 1, sp, ch, 0, rec, None, 40.0, p.framework))
                    except SpecError:
                        continue
                    for moe, lt in ((False, dl), (True, ml)):
                        u[moe][((li * nS + si) * nC + ci) * nR + ri] = int(ticks(lt[0] + lt[1], res))
            c0 = Choice(s, mb, 1, sp, 1, 0, "none", None, 40.0, p.framework)
            for kind in xt:
                xt[kind][li * nS + si] = int(ticks(b.extras(c0, kind)[0], res))
    U = {
        moe: f.element(f"U{int(moe)}", ((lay_i * nS + oi["sp"]) * nC + oi["ch"]) * nR + oi["rec"], u[moe])
        for moe in (False, True)
    }
    A = {moe: f.element(f"A{int(moe)}", (lay_i * nS + oi["sp"]) * nR + oi["rec"], a[moe]) for moe in (False, True)}
    X = {kind: f.element(f"X{kind}", lay_i * nS + oi["sp"], v) for kind, v in xt.items()}
    timings = len(t._layer) - timings_before
    # ---- pipeline degree, interleave, layer counts
    is_pp = {pp: m.new_bool_var(f"pp{pp}") for pp in sorted({g[0].pp for g in groups})}
    for pp, lit in is_pp.items():
        m.add(lit == sum(x[g] for g in groups if g[0].pp == pp))
    y = {pos: f.onehot(f"y{pos}", range(L + 1)) for pos in POS}
    n = {pos: sum(k * lit for k, lit in y[pos].items()) for pos in POS}
    for pp, lit in is_pp.items():
        if pp == 1:
            m.add(n["first"] == L).only_enforce_if(lit)
            m.add(n["mid"] + n["last"] == 0).only_enforce_if(lit)
        else:
            m.add(n["first"] + (pp - 2) * n["mid"] + n["last"] == L).only_enforce_if(lit)
            m.add(n["last"] >= 1).only_enforce_if(lit)
            m.add(n["mid"] >= 1 if pp > 2 else n["mid"] == 0).only_enforce_if(lit)
    m.add(n["first"] >= max(1, d))
    for vp in sorted({g[2] for g in groups}):  # every stage's layers a multiple of vp
        lit = m.new_bool_var(f"vp{vp}")
        m.add(lit == sum(x[g] for g in groups if g[2] == vp))
        for pos in POS:
            for k, yk in y[pos].items():
                if k % vp:
                    m.add_implication(lit, yk.Not())
    pp1 = is_pp.get(1)

    def dense_moe(pos: str, k: int) -> tuple[int, int]:
        nd = (min(k, d) if pos == "first" else 0) if moe_model else k
        return nd, k - nd

    def first_kind_literals(kind: str) -> list:  # the first position is "only" when pp = 1
        if kind not in ("first", "only") or pp1 is None:
            return []
        return [pp1] if kind == "only" else [pp1.Not()]

    kinds_of = {"first": ("first", "only"), "mid": ("mid",), "last": ("last",)}
    # ---- stage times and the pipeline: (m - 1/v) * slowest + sum / v, scaled by V_LCM
    hi_t = L * max(max(v for v in u[moe] if v is not None) for moe in (False, True)) + max(
        max(v for v in xs if v is not None) for xs in xt.values()
    )
    T = {pos: m.new_int_var(0, hi_t, f"T{pos}") for pos in POS}
    for pos in POS:
        for kind in kinds_of[pos]:
            extras = 0 if kind == "mid" else X[kind]
            for k, yk in y[pos].items():
                if k:
                    nd, nm = dense_moe(pos, k)
                    m.add(T[pos] >= nd * U[False] + nm * U[True] + extras).only_enforce_if(
                        [yk] + first_kind_literals(kind)
                    )
    slow = m.new_int_var(0, hi_t, "slow")
    for pos in POS:
        m.add(slow >= T[pos])
    leads = [V_LCM * (p.workload.global_batch // (g[0].dp * g[1])) - V_LCM // g[2] for g in groups]
    lead = f.element("lead", group_i, leads)
    pipe = m.new_int_var(0, max(leads) * hi_t, "pipe")
    m.add_multiplication_equality(pipe, [lead, slow])
    fill = m.new_int_var(0, V_LCM * L * hi_t, "fill")
    for g in groups:
        pp, vp = g[0].pp, g[2]
        w = {"first": 1, "mid": max(pp - 2, 0), "last": 1 if pp > 1 else 0}
        m.add(fill >= sum(V_LCM // vp * w[pos] * T[pos] for pos in POS)).only_enforce_if(x[g])
    # ---- memory: state(shape, zero, n) + reserve(shape) + n * stored * in_flight / v * (1 + frag) <= HBM
    cap = int(p.hbm_cap_bytes // MiB)
    frag = b._reserve(Choice(shapes[0], 1, 1, False, 1, 0, "none", None, 40.0))[1]
    r0 = [int(np.floor(b._reserve(Choice(s, 1, 1, False, 1, 0, "none", None, 40.0))[0] / MiB)) for s in shapes]
    R0 = f.element("R0", shape_i, r0)
    for pos in POS:
        for kind in kinds_of[pos]:
            s0, s1 = [], []  # state affine in the layer count: its lower envelope s0 + n * s1
            for sh in shapes:
                present = (kind == "only") == (sh.pp == 1) and (kind != "mid" or sh.pp > 2)
                for z in zv:
                    arr = (
                        t.state(Choice(sh, 1, 1, False, 1, z, "none", None, 40.0, p.framework), kind)["state"]
                        if present
                        else np.zeros(L + 1)
                    ) / MiB
                    slope = float(np.min(np.diff(arr[1:]))) if L > 1 else 0.0
                    s1.append(int(np.floor(slope)))
                    s0.append(int(np.floor(np.min(arr[1:] - np.arange(1, L + 1) * np.floor(slope)))))
            sz = shape_i * len(zv) + oi["z"]
            S0, S1 = f.element(f"S0{kind}", sz, s0), f.element(f"S1{kind}", sz, s1)
            infl = [
                int(
                    np.floor(
                        V_LCM
                        * (1 + frag)
                        * in_flight_chunks(
                            g[0].pp, p.workload.global_batch // (g[0].dp * g[1]), g[2], STAGE_OF.get(kind, g[0].pp - 1)
                        )
                        / g[2]
                    )
                )
                for g in groups
            ]
            F = f.element(f"F{kind}", group_i, infl)
            act = {}
            for moe in (False, True):
                act[moe] = m.new_int_var(
                    0, max(max(v for v in a[moe] if v is not None), 1) * max(infl), f"act{kind}{int(moe)}"
                )
                m.add_multiplication_equality(act[moe], [A[moe], F])
            for k, yk in y[pos].items():
                if k:
                    nd, nm = dense_moe(pos, k)
                    m.add(V_LCM * (S0 + k * S1 + R0) + nd * act[False] + nm * act[True] <= V_LCM * cap).only_enforce_if(
                        [yk] + first_kind_literals(kind)
                    )
    m.minimize(pipe + fill)
    return f, x, one, y, timings


def hint(f: Factored, x: dict, one: dict, y: dict, plan) -> None:
    """The search's best plan as CP-SAT's starting solution."""
    c, split = plan.choice, plan.split
    for g, lit in x.items():
        f.m.add_hint(lit, g == (c.shape, c.mb, c.vp))
    for name, v in (("sp", c.sp), ("ch", c.chunks), ("z", c.zero), ("rec", c.recompute)):
        for value, lit in one[name].items():
            f.m.add_hint(lit, value == v)
    counts = {
        "first": split.first,
        "mid": split.mid if c.shape.pp > 2 else 0,
        "last": split.last if c.shape.pp > 1 else 0,
    }
    for pos, lits in y.items():
        for k, lit in lits.items():
            f.m.add_hint(lit, k == counts[pos])


def run(case, time_limit_s: float, workers: int, with_hint: bool) -> dict:
    label, model_name, cluster, gpus, batch, seq = case
    p = Problem(
        model=load_model(model_name),
        cluster=load_cluster(cluster).with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=seq),
        limits=Limits(partial_recompute=False),
    )
    cold()
    t0 = time.perf_counter()
    r = solve(p, SolveOptions(workers=workers, seed=0))
    bb_s = time.perf_counter() - t0
    cold()
    t0 = time.perf_counter()
    f, x, one, y, timings = build(p)
    build_s = time.perf_counter() - t0
    if with_hint and r.best is not None:
        hint(f, x, one, y, r.best)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    t0 = time.perf_counter()
    code = solver.solve(f.m)
    cp_s = time.perf_counter() - t0
    found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    scale = f.t.res_s / V_LCM
    return dict(
        label=label,
        groups=len(x),
        entries=f.entries,
        timings=timings,
        build_s=build_s,
        status=solver.status_name(code),
        obj=solver.objective_value * scale if found else None,
        bound=solver.best_objective_bound * scale,
        cp_s=cp_s,
        bb_status=r.status,
        bb_s=bb_s,
        bb_obj=r.objective_s,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="comma-separated substrings of case names (benchmarks/search_speed.py)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT seconds per case (default 60)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hint", action="store_true", help="start CP-SAT from the search's best plan")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.cases or any(s.lower() in c[0].lower() for s in args.cases.split(","))]
    print(
        f"{'case':<30} {'groups':>6} {'entries':>8} {'timings':>8} {'build s':>8} {'CP-SAT':>9} {'s':>7} "
        f"{'relaxed obj s':>13} {'bound s':>9} | {'search':>8} {'s':>6} {'objective s':>11}"
    )
    for case in cases:
        r = run(case, args.time_limit, args.workers, args.hint)
        obj = f"{r['obj']:.3f}" if r["obj"] is not None else "-"
        print(
            f"{r['label']:<30} {r['groups']:>6} {r['entries']:>8,} {r['timings']:>8,} {r['build_s']:>8.2f} "
            f"{r['status']:>9} {r['cp_s']:>7.1f} {obj:>13} {r['bound']:>9.3f} | {r['bb_status']:>8} "
            f"{r['bb_s']:>6.2f} {r['bb_obj']:>11.3f}",
            flush=True,
        )
    print("\nentries: table entries the factored model holds (AddElement); timings: per-layer timings built for them;")
    print("CP-SAT: the factored relaxation (no DP/ZeRO exposure, optimizer, PP p2p: its optimum is <= the search's);")
    print(
        "search: search.solve on the same space (branch and bound in presolve, CP-SAT on the survivors, full objective)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
