"""Issue 39's rack-scale cases as recommend answers them: DeepSeek-V3 on 1,152 GB200 NVL72 and Llama-3.1-405B on
4,608 GB300 NVL72.

    python -m benchmarks.rack_scale [--time-limit SECONDS]

For each case: the plan ``planner recommend`` answers (in process, ``--json``), its predicted step time, where each
parallel group runs (inside one 72-GPU NVLink domain or across domains: ``costmodel.physics.comm.groups.placement``),
the solve status and its time, the wall time of the whole command, and for the MoE case the EP overlap and the
dispatcher recommend chose with what the alternatives give on the same plan. Targets (issue 39): the answer proven
OPTIMAL within 3 s of solve time, and every group of TP, EP and CP inside the domain. The time limit (default 60 s)
lets each search finish on a loaded host; the solve time it reports is what the 3 s target reads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time

from benchmarks.results_io import record
from costmodel.physics.comm.groups import placement
from costmodel.spec.presets import load_cluster

CASES = (
    dict(model="deepseek-v3", cluster="gb200-nvl72", gpus=1152, global_batch=9216, seq=4096, dtype="fp8"),
    dict(model="llama3.1-405b", cluster="gb300-nvl72", gpus=4608, global_batch=2304, seq=8192, dtype="bf16"),
)
SOLVE_TARGET_S = 3.0


def run_case(case: dict, time_limit_s: float) -> dict:
    from planner.cli import main as cli

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in case.items()]
    out = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cli(["recommend", *flags, "--json", "--time-limit", str(time_limit_s)])
    wall = time.perf_counter() - t
    if code != 0:
        return {"case": f"{case['model']} / {case['gpus']} {case['cluster']}", "status": f"exit {code}"}
    d = json.loads(out.getvalue())
    c = d["config"]
    domain = load_cluster(case["cluster"]).domain
    where = {g: (lay.intra, lay.inter) for g, _, lay in placement(c["tp"], c["cp"], c["dp"], c["ep"], c["pp"], domain)}
    inside = all(where.get(g, (1, 1))[1] == 1 for g in ("tp", "ep", "cp"))
    row = {
        "case": f"{case['model']} / {case['gpus']} {case['cluster']}",
        "plan": " ".join(f"{k}={c[k]}" for k in ("tp", "cp", "ep", "pp", "vp", "dp", "mb", "recompute", "zero")),
        "step_time_s": round(d["step_time_s"], 3),
        "mfu_pct": round(100 * d["mfu"], 1),
        "placement": "; ".join(f"{g} {n}x{m}" for g, (n, m) in where.items()),
        "tp_ep_cp_in_domain": inside,
        "status": d["solve"]["status"],
        "solve_s": round(d["solve"]["time_s"], 2),
        "wall_s": round(wall, 1),
    }
    if d.get("ep_overlap_step_time_s"):
        o = d["ep_overlap_step_time_s"]
        row["ep_overlap_gain_pct"] = round(100 * (o["without"] / o["with"] - 1), 1)
    if d.get("dispatchers"):
        row["dispatcher"] = d["dispatchers"]["chosen"]
        row["dispatcher_times_s"] = ", ".join(f"{k} {v:.3f}" for k, v in d["dispatchers"]["step_time_s"].items())
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args(argv)
    rows = [run_case(case, args.time_limit) for case in CASES]
    for r in rows:
        print("  ".join(f"{k}: {v}" for k, v in r.items()))
    proven = [r for r in rows if r.get("status") == "OPTIMAL"]
    fast = [r for r in proven if r["solve_s"] <= SOLVE_TARGET_S]
    record(
        "rack_scale",
        argv,
        title="issue 39's rack-scale cases: recommend's answer, its placement in the NVLink domain and the solve time",
        headline={
            "cases": len(rows),
            "OPTIMAL": len(proven),
            f"proven in <= {SOLVE_TARGET_S:g} s": len(fast),
            "largest solve s": max((r.get("solve_s", 0.0) for r in rows), default=0.0),
            "TP/EP/CP inside the domain": sum(bool(r.get("tp_ep_cp_in_domain")) for r in rows),
        },
        table=rows,
        targets=[
            {"name": f"every case OPTIMAL in <= {SOLVE_TARGET_S:g} s of solve", "met": len(fast) == len(rows)},
            {"name": "TP, EP and CP inside the 72-GPU domain", "met": all(r.get("tp_ep_cp_in_domain") for r in rows)},
        ],
        inputs=["costmodel", "search", "planner", "benchmarks/rack_scale.py"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
