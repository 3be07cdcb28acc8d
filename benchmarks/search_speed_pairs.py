"""Search time of two commits, pair by pair: the standard speed cases, one fresh process per run.

    python -m benchmarks.search_speed_pairs OLD NEW [--pairs 5] [--cases NAME,...] [--json FILE]
    python -m benchmarks.search_speed --compare OLD NEW [--pairs 5]      # the same

OLD and NEW are each a commit (checked out in a temporary ``git worktree``, removed afterwards
unless ``--keep``) or a directory holding a checkout (``.`` is the working tree). Each run is a
new Python process started in that checkout with it first on ``PYTHONPATH``, so it imports that
commit's code; it does what :func:`benchmarks.search_speed.run_case` does before the exhaustive
baseline: the problem, the space's count, cold caches, the plain search, cold caches again, the
search as ``recommend`` runs it (re-score), each timed in wall and CPU seconds
(``time.process_time``, CP-SAT's worker threads included; the CPU seconds are the figure to read on a shared
host, where the wall time includes waiting for a core). The two commits alternate, the order
swapped every pair (NEW OLD, OLD NEW, ...), so a drift in the host's speed reaches both; the
ratio NEW / OLD is taken within each pair and its median reported, beside each side's median.
The search's time limit is 60 s (``--time-limit``), not ``recommend``'s 10 s, so that a loaded host
times the search and not the limit; a run that is not proven optimal is flagged.

The default cases are the standard set (:data:`benchmarks.speed_cases.STANDARD`): GPT-3 175B / 1024 A100, DeepSeek-V3 /
2048 H800 and GPT 1T / 3072 A100, the last the one whose search time moved alone (issue 37:
``in_flight_profile`` (now ``costmodel.spec.stages``) in the answer's evaluate, since 2d0d72c). ``--cases all`` runs
every case of :data:`benchmarks.speed_cases.CASES`.

The answers are compared too: each run's status, objective and plan (degrees, micro-batch,
ZeRO, recompute). ``same`` means every run of both commits gave one answer; otherwise the
answers are printed (expected where the cost model changed between the commits).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: one run, in the checkout under test (old and new module layouts both import)
DRIVER = r'''
import importlib, json, sys, time
a = json.loads(sys.argv[1])

def first(*places):
    for mod, name in places:
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            pass
    raise ImportError(f"none of {places}")

load_model = first(("costmodel.spec.presets", "load_model"), ("costmodel.presets", "load_model"))
load_cluster = first(("costmodel.spec.presets", "load_cluster"), ("costmodel.presets", "load_cluster"))
Workload = first(("costmodel.spec.workload", "Workload"), ("costmodel.specs", "Workload"))
from search.problem import Problem
from search.solve import SolveOptions, solve
try:
    from search.exhaustive import count_space
except ImportError:
    count_space = None

def cold():
    """As benchmarks.search_speed.cold: every memo of costmodel and search emptied (older commits'
    module-level _CACHE dicts too)."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("costmodel") or name.startswith("search"):
            for key, obj in list(vars(mod).items()):
                if callable(getattr(obj, "cache_clear", None)):
                    obj.cache_clear()
                elif key == "_CACHE" and isinstance(obj, dict):
                    obj.clear()

p = Problem(model=load_model(a["model"]), cluster=load_cluster(a["cluster"]).with_gpus(a["gpus"]),
            workload=Workload(global_batch=a["batch"], seq_len=a["seq"]))
if count_space is not None:
    count_space(p)
out = {}
for key, rescore in (("search", False), ("rescored", True)):
    cold()
    t0, c0 = time.perf_counter(), time.process_time()
    r = solve(p, SolveOptions(workers=a["workers"], seed=0, rescore=rescore, time_limit_s=a["time_limit_s"]))
    out[key + "_s"], out[key + "_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    c = r.best.config if r.best else None
    plan = (f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp} ep{c.ep} vp{c.vp} mb{c.mb} sp{int(c.sp_on)} z{c.zero} {c.recompute}"
            if c else "-")
    out[key + "_answer"] = f"{r.status} {plan} -> {r.objective_s!r}"
print("RESULT " + json.dumps(out))
'''


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Checkout:
    """A directory to run in: the one given, or a detached worktree at a commit (removed by :meth:`close`)."""

    def __init__(self, spec: str, tmp: Path, keep: bool):
        self.spec, self.made = spec, None
        if Path(spec).is_dir():
            self.path = Path(spec).resolve()
            dirty = git("status", "--porcelain", "--untracked-files=no", cwd=self.path)
            self.label = (
                f"{spec} ({git('rev-parse', '--short', 'HEAD', cwd=self.path)}{' + uncommitted' if dirty else ''})"
            )
            return
        sha = git("rev-parse", "--verify", spec + "^{commit}")
        self.label = git("rev-parse", "--short", sha)
        self.path = tmp / sha[:12]
        if not (self.path / ".git").exists():
            git("worktree", "add", "--detach", str(self.path), sha)
            self.made = None if keep else self.path

    def close(self) -> None:
        if self.made is not None:
            git("worktree", "remove", "--force", str(self.made))


def run_once(co: Checkout, case: tuple, args: argparse.Namespace) -> dict:
    label, model, cluster, gpus, batch, seq = case
    arg = json.dumps(
        {
            "model": model,
            "cluster": cluster,
            "gpus": gpus,
            "batch": batch,
            "seq": seq,
            "workers": args.workers,
            "time_limit_s": args.time_limit,
        }
    )
    path = os.pathsep.join([str(co.path)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    proc = subprocess.run(
        [args.python, "-c", DRIVER, arg],
        cwd=co.path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=args.timeout,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{co.label} {label}: no result (exit {proc.returncode})\n{proc.stderr[-3000:]}")


def summary(old: list[dict], new: list[dict], key: str) -> dict:
    """Medians of each side and of the pair ratios new / old for one timing key."""
    ratios = [n[key] / o[key] for o, n in zip(old, new)]
    return {
        "old": statistics.median(o[key] for o in old),
        "new": statistics.median(n[key] for n in new),
        "ratio": statistics.median(ratios),
        "lo": min(ratios),
        "hi": max(ratios),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="commit or checkout directory (the baseline)")
    ap.add_argument("new", help="commit or checkout directory (compared with the baseline)")
    ap.add_argument("--pairs", type=int, default=5, help="interleaved pairs per case (default 5)")
    ap.add_argument(
        "--cases",
        default="standard",
        help="comma-separated substrings of case names, 'standard' (default: GPT-3, DeepSeek-V3, GPT 1T) or 'all'",
    )
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    ap.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="the search's time limit in seconds (default 60, not recommend's 10: on a loaded host a run "
        "cut at the limit would time the limit, not the search)",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for the runs (default: this one)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    ap.add_argument(
        "--worktrees",
        default=str(Path(tempfile.gettempdir()) / "search_speed_pairs"),
        help="where commits are checked out",
    )
    ap.add_argument("--keep", action="store_true", help="keep the worktrees made for commits")
    ap.add_argument("--json", help="write every run's figures and answers to this file")
    args = ap.parse_args(argv)

    from benchmarks.speed_cases import selected

    cases = selected(None if args.cases == "all" else args.cases)
    if not cases:
        ap.error(f"no case matches {args.cases!r}")
    tmp = Path(args.worktrees)
    tmp.mkdir(parents=True, exist_ok=True)
    old, new = Checkout(args.old, tmp, args.keep), Checkout(args.new, tmp, args.keep)
    print(
        f"old = {old.label}, new = {new.label}; {args.pairs} pairs per case, order swapped every pair, "
        f"one process per run, {args.workers} CP-SAT workers, time limit {args.time_limit:g} s",
        flush=True,
    )
    report = []
    try:
        for case in cases:
            runs = {"old": [], "new": []}
            for i in range(args.pairs):
                order = (("new", new), ("old", old)) if i % 2 == 0 else (("old", old), ("new", new))
                for side, co in order:
                    runs[side].append(run_once(co, case, args))
            report.append({"case": case[0], "runs": runs})
            answers = {
                side: {k: sorted({r[k] for r in rs}) for k in ("search_answer", "rescored_answer")}
                for side, rs in runs.items()
            }
            same = answers["old"] == answers["new"] and all(len(a) == 1 for a in answers["old"].values())
            print(f"\n{case[0]}: medians of {args.pairs} runs each; new/old = median of the pair ratios (range)")
            print(f"  {'':<20} {'old':>8} {'new':>8} {'new/old':>8}  range")
            for key, name in (
                ("search_s", "search wall s"),
                ("search_cpu_s", "search CPU s"),
                ("rescored_s", "re-scored wall s"),
                ("rescored_cpu_s", "re-scored CPU s"),
            ):
                s = summary(runs["old"], runs["new"], key)
                print(f"  {name:<20} {s['old']:>8.2f} {s['new']:>8.2f} {s['ratio']:>8.2f}  {s['lo']:.2f}-{s['hi']:.2f}")
            cut = sorted(
                {
                    f"{side} {r[k].split()[0]}"
                    for side, rs in runs.items()
                    for r in rs
                    for k in ("search_answer", "rescored_answer")
                    if not r[k].startswith("OPTIMAL")
                }
            )
            if cut:
                print(
                    f"  not proven optimal ({', '.join(cut)}): these runs may have stopped at the time limit, "
                    f"so their seconds are not the search's"
                )
            if same:
                print(
                    f"  answers: the same in every run: search {runs['old'][0]['search_answer']}; "
                    f"re-scored {runs['old'][0]['rescored_answer']}"
                )
            else:
                for side in ("old", "new"):
                    print(
                        f"  answers {side}: search "
                        + " | ".join(answers[side]["search_answer"])
                        + "; re-scored "
                        + " | ".join(answers[side]["rescored_answer"])
                    )
            sys.stdout.flush()
    finally:
        old.close()
        new.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"old": old.label, "new": new.label, "cases": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
