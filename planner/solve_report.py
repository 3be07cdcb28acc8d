"""How a recommend answer was found, in words: the solve's status and proof, the search's counts, the re-score and
the memory-margin choice (:func:`solve_lines`)."""

from __future__ import annotations

from .report import _s


def _opt_s(x) -> str:
    return "-" if x is None else _s(x)


def solve_lines(result) -> list[str]:
    """How the answer was found and what is proven: the solve, the analytic optimum with its bound,
    and the op-graph re-score (both objectives and the band), so "OPTIMAL" keeps its exact meaning."""
    s, gap = result.stats, result.gap
    if s.exhaustive:
        how = (
            f"every plan of the {s.space or 0} choices the pins leave scored exactly "
            f"in {s.exhaustive_s or 0:.2f} s; no presolve or CP-SAT needed"
        )
    else:
        n = s.model_choices or 0
        how = (
            f"presolve {s.presolve_s or 0:.2f} s, branch and bound: {s.probed or 0} choices solved "
            f"exactly, {s.bound or 0} pruned by bound, {s.memory or 0} by memory, "
            f"{s.dominated or 0} dominated; CP-SAT {result.solver_time_s:.2f} s on the "
            f"{n} choice{'' if n == 1 else 's'} left"
        )
    if s.timed_out:
        how += "; the time limit stopped presolve: the best plan found so far"
    if result.robust:
        r = result.robust
        how = (
            f"robust over {len(r['scenarios'])} scenarios: branch and bound on {s.robust_evaluated or 0} of "
            f"{s.robust_candidates or 0} choices within the nominal plan's worst case"
            + ("; CP-SAT with one table per scenario agrees" if s.cpsat_agrees else "")
        )
    lines = [
        f"solve: {result.status} in {result.time_s:.2f} s ({how})",
        f"analytic optimum {_opt_s(result.objective_s)} s, best bound {_opt_s(result.bound_s)} s, gap "
        f"{'-' if gap is None else f'{100 * gap:.2f}%'}; evaluate (analytic tables) agrees within "
        f"{100 * max(p.agreement for p in result.plans):.3f}%",
    ]
    best = result.plans[0]
    if result.robust:
        r = result.robust
        proof = (
            "proven optimal over the scenarios"
            if result.status == "OPTIMAL"
            else f"not proven optimal ({result.status}: the time limit stopped the search)"
        )
        lines[-1] = f"worst-case step time {_opt_s(r['worst_s'])} s (analytic), {proof}"
        per = ", ".join(f"{n} {r['robust_plan'][n]:.2f}" for n in r["scenarios"])
        nom = ", ".join(f"{n} {r['nominal_plan'][n]:.2f}" for n in r["scenarios"])
        lines.append(f"robust plan by scenario (s): {per}")
        lines.append(
            "the nominal optimum is the robust plan"
            if r["same_as_nominal"]
            else f"the nominal optimum differs; by scenario (s): {nom}"
        )
        if r["top_order_swaps_in"]:
            lines.append("the top plans swap order in: " + ", ".join(r["top_order_swaps_in"]))
        return lines
    off = s.optimizer_offload
    if off and off.get("chosen"):  # search.offload_choice: nothing fit without it
        tried = ", ".join(
            f"{t['fraction']:g} ({t['status']}" + (f", {t['step_time_s']:.2f} s)" if t["step_time_s"] else ")")
            for t in off["tried"]
        )
        lines.append(
            f"optimizer CPU offload: no plan fits without it; searched again at fraction {tried}: "
            f"{off['chosen']:g} chosen, copies overlapped (Megatron --optimizer-cpu-offload "
            f"--optimizer-offload-fraction {off['chosen']:g} --overlap-cpu-optimizer-d2h-h2d)"
        )
    act = s.activation_offload
    if act:  # search.act_offload_choice: nothing fit without it, or the answer recomputed at pp=1
        why = (
            "no plan fits without it"
            if act["without_s"] is None
            else f"the best plan without it recomputes at pp=1 ({_opt_s(act['without_s'])} s analytic)"
        )
        found = (
            f"the best with it, each plan offloading the fewest layers that fit it, {_opt_s(act['best_s'])} s "
            f"({act['status']})"
            if act["best_s"] is not None
            else "no plan fits with it either"
        )
        lines.append(
            f"activation CPU offload: {why}; {found}: "
            + (
                f"{act['chosen']} layers chosen (Megatron --cpu-offloading-num-layers {act['chosen']})"
                if act["chosen"]
                else "not chosen"
            )
            + (
                f"; with more headroom, to keep the memory margin ({act['margin_chosen_over']} layers fit without it)"
                if act.get("margin_chosen_over")
                else ""
            )
        )
    ic = s.interleave_check
    if ic:  # search.interleave_check: the interleaved closed form's blind spot, seen on the answer
        lines.append(
            f"interleave check: the best plan (vp {ic['vp']}, {_opt_s(ic['objective_s'])} s analytic) runs "
            f"{100 * ic['gap']:.1f}% slower under the op graph ({_opt_s(ic['graph_s'])} s; the closed form prices a "
            f"stage by the sum of its chunks, unequal chunks stall); "
            + (
                f"the best without interleaving at its TP/CP/EP runs {_opt_s(ic['flat_graph_s'])} s: "
                + ("it answers" if ic["chosen"] else "the interleaved plan stays")
                if ic["flat_graph_s"] is not None
                else "no plan without interleaving at its TP/CP/EP comes within the band of that: it stays"
            )
        )
    if result.band is None:
        lines[-1] += f"; the op-graph scheduler re-scores the best plan at {_opt_s(best.graph_step_time_s)} s"
    else:
        left = result.within_band - result.rescored
        lines.append(
            f"op-graph re-score: {result.rescored} plan{'s' if result.rescored != 1 else ''} within "
            f"{100 * result.band:g}% of the analytic optimum"
            + (f" ({left} not reached before the time limit)" if left else "")
            + f"; the best under the op graph is the answer: {_opt_s(result.graph_objective_s)} s "
            + (
                f"(the least peak memory of the plans within {100 * result.memory_tie:g}% of the fastest, "
                f"{_opt_s(result.fastest_graph_s)} s) "
                if result.fastest_graph_s and result.graph_objective_s > result.fastest_graph_s
                else ""
            )
            + f"(analytic {_opt_s(best.objective_s)} s); the analytic optimum runs "
            f"{_opt_s(result.analytic_best_graph_s)} s under the op graph"
        )
        if result.memory_margin:
            lines.append(_margin_line(result))
    return lines


def _margin_line(result) -> str:
    """The memory-margin choice in words: whether the answer keeps the margin, and what the plan on the other side of
    it (``result.margin_alternative``, shown beside the answer) runs; ``--prefer`` says which one is answered."""
    pct = f"{100 * result.memory_margin:g}%"
    alt = result.margin_alternative_s
    cost = None if not alt else 100 * (alt / result.graph_objective_s - 1)
    band = f"{100 * result.band:g}% band"
    if result.margin_kept:
        head = (
            f"memory margin: the plan keeps {pct} of the usable HBM free beyond its predicted peak (the memory "
            "model's largest measured under-prediction; --memory-margin)"
        )
        if not alt:
            return head
        if -cost <= 100 * result.band + 1e-9:
            return (
                head + f"; the fastest plan without that margin runs {_opt_s(alt)} s ({cost:+.1f}%), inside the {band}"
            )
        return head + (
            f"; the fastest plan, at risk without it, runs {_opt_s(alt)} s ({cost:+.1f}%, shown beside: "
            "--prefer fast answers it, --memory-margin 0 drops the margin)"
        )
    return (
        f"memory margin: at risk: the predicted peak is within {pct} of the usable HBM, the memory model's largest "
        "measured under-prediction; "
        + (
            f"the fastest plan that keeps the margin runs {_opt_s(alt)} s ({cost:+.1f}%, beyond the {band}"
            + (", shown beside: --prefer safe answers it)" if result.margin_alternative is not None else ")")
            if alt
            else "no plan that keeps it was found"
        )
        + "; --headroom-gib requires one"
    )
