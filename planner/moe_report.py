"""What recommend says about an MoE answer's stack choices (issue 39): the EP all-to-all overlap (the same plan
without it) and the dispatcher (the answer's plan under each one, :func:`planner.api.recommend`)."""

from __future__ import annotations

from dataclasses import replace

from costmodel.api import evaluate


def ep_overlap_gain(plan, model, cluster, workload) -> tuple[float, float] | None:
    """``(step time with, without)`` the EP all-to-all overlap for a plan that runs it (the plan's engine), else
    None: what the overlap gives, stated beside the answer (issue 39)."""
    if not plan.config.ep_overlap:
        return None
    engine = plan.reported.engine
    off = evaluate(model, cluster, workload, replace(plan.config, ep_overlap=False), engine=engine)
    return plan.reported.step_time_s, off.step_time_s


def dispatcher_lines(result) -> list[str]:
    """The MoE dispatcher the answer runs and what each other would give on the plan it was chosen for."""
    d = getattr(result, "dispatchers", None)
    if not d:
        return []
    times, chosen = d["step_time_s"], d["chosen"]
    base = times[chosen]
    others = ", ".join(f"{k} {v:.3f} s ({100 * (v / base - 1):+.1f}%)" for k, v in times.items() if k != chosen)
    fastest = min(times, key=times.get)
    how = {
        "yes": f"; searched again with {fastest}" + ("" if fastest == chosen else ": no faster answer"),
        "time limit": f"; {fastest} not searched: the time limit ran out (--time-limit, or --ep-dispatcher {fastest})",
        "cut short": f"; searched again with {fastest}, but the time limit stopped that search before it proved its"
        f" answer{'' if fastest == chosen else ' and it found none faster'}"
        f" (--time-limit, or --ep-dispatcher {fastest})",
    }.get(d["searched"], "")
    return [
        f"MoE dispatcher: {chosen} ({base:.3f} s on the plan it was chosen for; {others}{how}); --ep-dispatcher pins one"
    ]


def ep_overlap_lines(plan, model, cluster, workload) -> list[str]:
    gain = ep_overlap_gain(plan, model, cluster, workload)
    if gain is None:
        return []
    on, off = gain
    return [
        f"EP all-to-all overlap (Megatron --overlap-moe-expert-parallel-comm --delay-wgrad-compute): {on:.3f} s; "
        f"the same plan without it {off:.3f} s ({100 * (off / on - 1):+.1f}%); --no-ep-overlap plans without it"
    ]
