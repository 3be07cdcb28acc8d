"""Issue 42 item 1, the issue's own case: one plan through every entry point for Llama-3-70B on 128 H100.

    python -m benchmarks.one_answer [--time-limit SECONDS]

``planner recommend`` (in process, ``--json``), :func:`planner.recommend`, :meth:`planner.Planner.recommend` and
the sweep answer Llama-3-70B on 128 H100-SXM, global batch 512 x 4096 tokens; the plans (every field) and the
step times must be one. Each search takes ~15-20 s on one core (the plain search and the one with the memory
margin as a hard limit), too long for the test suite, whose twenty smaller problems are
``tests/test_one_answer.py``. The time limit (default 120 s) is raised for every entry point alike so each
search ends OPTIMAL on a loaded host. At 00b7cca the CLI answered TP2 DP64 ZeRO-3 at 57.2 GiB and the others
TP4 PP2 CP2 at 79.6 of 80 GiB (the API skipped the op-graph re-score and the memory margin). Exits 1 when the
entry points disagree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time

PROBLEM = dict(model="llama3-70b", cluster="h100-sxm", gpus=128, global_batch=512, seq=4096)
KEYS = ("tp", "pp", "dp", "cp", "ep", "vp", "mb", "sp", "zero", "recompute", "recompute_layers", "bucket_mb", "chunks")


def _line(name: str, plan: dict, step_s: float, peak_bytes: float, status: str, wall_s: float) -> str:
    knobs = " ".join(f"{k}={plan.get(k)}" for k in KEYS)
    lps = plan.get("layers_per_stage") or "even"
    return (
        f"{name:10s} {knobs} layers_per_stage={lps} step {step_s:.4f} s peak {peak_bytes / 2**30:.1f} GiB "
        f"({status}, {wall_s:.1f} s)"
    )


def _norm(plan: dict) -> dict:
    """The plan's fields as the sweep's columns hold them (sequence parallelism in effect; an even split: None)."""
    d = {k: plan.get(k) for k in KEYS}
    d["sp"] = bool(d["sp"]) and d["tp"] > 1
    d["layers_per_stage"] = list(plan.get("layers_per_stage") or ()) or None
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    tl = ap.parse_args(argv).time_limit
    from planner import Planner, recommend
    from planner.cli import main as cli
    from planner.sweep import ResultStore
    from planner.sweep.api import run_sweep
    from planner.sweep.grid import Case

    answers = {}
    t = time.perf_counter()
    out = io.StringIO()
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in PROBLEM.items()]
    with contextlib.redirect_stdout(out):
        assert cli(["recommend", *flags, "--json", "--time-limit", str(tl)]) == 0
    d = json.loads(out.getvalue())
    plan = {**d["config"], "layers_per_stage": d["config"].get("layers_per_stage") or None}
    answers["cli"] = (plan, d["step_time_s"], d["peak_memory_bytes"], d["solve"]["status"], time.perf_counter() - t)
    for name, ask in (
        ("recommend", lambda: recommend(**PROBLEM, time_limit_s=tl)),
        ("Planner", lambda: Planner(**PROBLEM).recommend(time_limit_s=tl)),
    ):
        t = time.perf_counter()
        r = ask()
        c = r.best.config
        plan = {**c.to_dict(), "sp": c.sp}
        rep = r.best.reported
        answers[name] = (plan, rep.step_time_s, rep.peak_memory_bytes, r.status, time.perf_counter() - t)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run_sweep([Case(**PROBLEM, time_limit_s=tl)], tmp, workers=1, progress=False)
        (row,) = ResultStore(tmp).read()
    answers["sweep"] = (
        {k: row[k] for k in KEYS + ("layers_per_stage",)},
        row["step_time_s"],
        row["peak_memory_bytes"],
        row["solve_status"],
        time.perf_counter() - t,
    )
    for name, a in answers.items():
        print(_line(name, *a))
    ref_plan, ref_step = _norm(answers["cli"][0]), answers["cli"][1]
    same = all(_norm(a[0]) == ref_plan and a[1] == ref_step for a in answers.values())
    print("one answer" if same else "the entry points disagree")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
