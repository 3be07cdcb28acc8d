"""The answers of a fixed set of searches and evaluations, one line each, for refactors that must not move them.

Training and serving, both engines, every framework, the CLI and the library API. Seconds the
search spends (``time_s``, ``*_s`` under ``stats``) are dropped; everything else is printed with
floats rounded to 9 significant digits, so two commits' dumps compare with ``diff``::

    python -m benchmarks.answer_dump > before.txt   # at the old commit
    python -m benchmarks.answer_dump > after.txt    # at the new one
    diff before.txt after.txt                       # empty: the answers did not move
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

T = "--model llama3-70b --cluster h100-sxm --gpus 64 --global-batch 128 --seq 8192"
CLI = [
    # training evaluate: both engines' step times are in the JSON (engine + analytic)
    f"evaluate {T} --tp 8 --pp 4 --json",
    f"evaluate {T} --tp 4 --pp 2 --cp 2 --vp 4 --zero 1 --recompute selective --json",
    f"evaluate {T} --tp 8 --pp 8 --framework-defaults --json",
    f"evaluate {T} --tp 8 --zero 3 --framework deepspeed --json",
    f"evaluate {T} --tp 8 --framework fsdp2 --zero 3 --json",
    f"evaluate {T} --tp 8 --pp 4 --stack megatron-lm-2021 --json",
    "evaluate --model gpt3-175b --cluster a100-80g --gpus 1024 --global-batch 1536 --seq 2048 --tp 8 --pp 8 --json",
    "evaluate --model deepseek-v3 --cluster h800 --gpus 1024 --global-batch 4096 --seq 4096 --tp 1 --pp 8 --ep 64"
    " --vp 4 --json",
    "evaluate --model mixtral-8x7b --cluster h100-sxm --gpus 64 --global-batch 256 --seq 4096 --tp 2 --ep 8"
    " --ep-dispatcher deepep --json",
    "evaluate --model llama3-8b --cluster h100-sxm --gpus 8 --global-batch 64 --seq 8192 --tp 1 --zero 3"
    " --framework fsdp2 --dtype fp8 --json",
    "evaluate --model llama3.1-405b --cluster h100-sxm --gpus 8192 --global-batch 2048 --seq 8192 --tp 8"
    " --pp 16 --json",
    # serving, every engine
    "evaluate --mode infer --model llama3-70b --cluster h100-sxm --gpus 8 --tp 8 --input-len 2048"
    " --output-len 256 --global-batch 32 --json",
    "evaluate --mode infer --model llama3-70b --cluster h100-sxm --gpus 8 --tp 8 --input-len 2048"
    " --output-len 256 --global-batch 32 --engine vllm --json",
    "evaluate --mode infer --model llama3-70b --cluster h100-sxm --gpus 8 --tp 8 --input-len 2048"
    " --output-len 256 --global-batch 32 --engine sglang --json",
    "evaluate --mode infer --model llama3.1-70b --cluster b200 --tp 8 --gpus 8 --dtype fp8 --kv-dtype fp8"
    " --input-len 8192 --output-len 1024 --global-batch 8 --prefill-tokens 8192 --engine trtllm --json",
    "evaluate --mode infer --model deepseek-v3 --cluster h200 --gpus 8 --tp 8 --ep 8 --dtype fp8 --input-len 1024"
    " --output-len 512 --global-batch 64 --json",
    "recommend --mode infer --model llama3-70b --cluster h100-sxm --gpus 8 --input-len 2048 --output-len 256 --json",
    # searches
    "recommend --model gpt3-175b --cluster a100-80g --gpus 1024 --global-batch 1536 --seq 2048 --json",
    "recommend --model llama3-8b --cluster h100-sxm --gpus 64 --global-batch 256 --seq 8192 --top 3 --json",
    "recommend --model mixtral-8x7b --cluster h100-sxm --gpus 256 --global-batch 1024 --seq 4096 --json",
    "recommend --model llama3-8b --cluster h100-sxm --gpus 64 --global-batch 256 --seq 8192"
    " --framework deepspeed --json",
    "recommend --model llama3-8b --cluster h100-sxm --gpus 64 --global-batch 256 --seq 8192 --framework fsdp2 --json",
    # emitted lines
    "recommend --model gpt3-175b --cluster a100-80g --gpus 1024 --global-batch 1536 --seq 2048 --emit megatron",
    f"evaluate {T} --tp 8 --zero 3 --framework deepspeed --emit deepspeed",
    f"evaluate {T} --tp 8 --framework fsdp2 --zero 3 --emit fsdp2",
]
DROP = {"time_s", "solver_time_s", "wall_s", "elapsed_s"}


def _clean(x, key: str = ""):
    """``x`` without timing fields, floats at 9 significant digits."""
    if isinstance(x, dict):
        return {k: _clean(v, k) for k, v in x.items() if k not in DROP and not (key == "stats" and k.endswith("_s"))}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    if isinstance(x, float):
        return float(f"{x:.9g}")
    return x


def run_cli(line: str) -> str:
    """The CLI's output for ``line``, JSON cleaned of timings; exit codes other than 0 are printed."""
    from planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(line.split()) or 0
        except SystemExit as e:  # argparse and refusals exit
            code = e.code
    text = out.getvalue()
    if "--json" in line.split() and code == 0:
        text = json.dumps(_clean(json.loads(text)), sort_keys=True)
    else:
        text = " | ".join(s for s in text.splitlines() if "seconds" not in s and "solved in" not in s)
    return f"rc={code} {text}" + (f" stderr={err.getvalue().strip()!r}" if code else "")


def run_api() -> list[str]:
    """The library API's answers (``recommend``, ``Planner``, ``evaluate`` with both engines)."""
    from costmodel.api import evaluate as cm_evaluate
    from planner import Planner, evaluate, recommend
    from planner.problem import resolve_cluster, resolve_model, make_workload

    out = []
    e = evaluate("gpt3-175b", "a100-80g", gpus=64, global_batch=64, seq=2048, tp=8, pp=8)
    out.append(f"api.evaluate {e.step_time_s:.9g} {e.peak_memory_bytes:.9g} {e.fits}")
    m, cl = resolve_model("llama3-70b"), resolve_cluster("h100-sxm", 64)
    w = make_workload(128, 8192, "bf16")
    for engine in ("graph", "analytic"):
        est = cm_evaluate(m, cl, w, e.config.__class__(tp=8, pp=4, dp=2), engine=engine)
        out.append(f"costmodel.evaluate[{engine}] {est.step_time_s:.9g} {est.peak_memory_bytes:.9g}")
    r = recommend("llama3-70b", "h100-sxm", gpus=128, global_batch=512, seq=4096, top_k=2)
    out.append(
        f"api.recommend {r.status} " + " ; ".join(f"{p.config.to_dict()} {p.estimate.step_time_s:.9g}" for p in r.plans)
    )
    p = Planner("llama3-8b", "h100-sxm", gpus=16, global_batch=64, seq=4096)
    rr = p.recommend(top_k=2)
    out.append(
        f"Planner.recommend {rr.status} "
        + " ; ".join(f"{q.config.to_dict()} {q.estimate.step_time_s:.9g}" for q in rr.plans)
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", type=int, default=None, help="run only the first N CLI lines (quick look)")
    a = ap.parse_args(argv)
    for line in CLI[: a.only]:
        print(f"$ planner {line}\n{run_cli(line)}", flush=True)
    for line in run_api():
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
