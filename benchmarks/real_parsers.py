"""Do emitted plans pass the frameworks' own argument validation? (issue 24: the real-parser check)

    MEGATRON=/path/to/Megatron-LM MEGATRON_PYTHON=/path/to/venv/bin/python \\
        python -m benchmarks.real_parsers [--plans 40] [--seed 0]

Draws random plans (model, degrees, micro-batch, ZeRO, recompute, overlap, attention kernel, dtype),
keeps those the planner accepts and emits (``planner.emit.emit_text`` with the model's architecture),
and runs each through the real parsers in a second Python (``MEGATRON_PYTHON``, with torch CPU, the
Megatron-LM dependencies, ``deepspeed`` and ``torchtitan``; this repository's code is not imported there):

* Megatron-LM: ``megatron.training.arguments.parse_args`` and ``validate_args`` on the emitted
  arguments, then ``argument_utils.core_transformer_config_from_args`` (the model's
  ``TransformerConfig``, whose ``__post_init__`` checks heads, groups, experts, MLA), plus a tokenizer (``--tokenizer-type NullTokenizer --vocab-size V``), with
  ``WORLD_SIZE`` = the plan's GPUs and the environment its notes ask for
  (``CUDA_DEVICE_MAX_CONNECTIONS``). The CPU host has no GPU and no Transformer Engine: the GPU
  queries are answered as sm_90 (Hopper), TE version checks as a current TE (the planner's default
  stack), and RoPE fusion, whose check imports TE's kernels, is off for the ``TransformerConfig`` step.
  The parsed arguments must also hold the model's positions, RoPE base and scaling, QK-norm and router
  (:func:`expected_args`; a line that parses but trains another model counts as rejected).
* DeepSpeed: ``deepspeed.runtime.config.DeepSpeedConfig`` on the emitted JSON, with a model-parallel
  unit stating the plan's data-parallel size (the batch identity is checked against it).
* torchtitan (v0.2.2, ``pip install torchtitan==0.2.2`` with ``tyro``, ``tokenizers``, ``torchdata``): its
  ``ConfigManager`` on the emitted job TOML (unknown keys and wrong types refused), then ``ParallelDims`` on the
  parsed degrees at the plan's GPU count, as its ``train.py`` builds it.

``--published`` adds the plan of every published row of each framework (their recipes, layouts, dispatchers,
recompute modules and offloads), each Megatron line checked on its GPU generation's compute capability.

Prints how many each accepted and every rejection with its message. Not a CI test: CI has neither
Megatron-LM nor torch. Without ``MEGATRON``/``MEGATRON_PYTHON`` it says so and stops.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the second Python runs this module from here
MODELS = (
    "llama3-8b",
    "llama3-70b",
    "llama2-7b",
    "gpt3-175b",
    "mixtral-8x7b",
    "deepseek-v3",
    "llama3.1-8b",
    "qwen3-30b-a3b",
)


def expected_args(m, seq_len: int) -> dict:
    """What Megatron-LM's parsed arguments must hold for the line to train ``m`` (issue 42, item 7): its
    positions, RoPE base and scaling, QK-norm and router, as :mod:`planner.emit_arch` states them."""
    out = {"max_position_embeddings": max(m.max_position_embeddings or 0, seq_len), "qk_layernorm": m.qk_layernorm}
    if m.rope_theta is not None and (m.is_mla or m.activation == "swiglu"):
        out["rotary_base"] = int(round(m.rope_theta))
    out["use_rope_scaling"] = m.rope_scaling == "llama3"
    if m.rope_scaling == "llama3":
        out["rope_scaling_factor"] = m.rope_scaling_factor
    if m.rope_scaling == "yarn" and m.is_mla:
        out["rotary_scaling_factor"] = m.rope_scaling_factor
    if m.experts:
        out.update(
            moe_router_score_function=m.router_score_function,
            moe_router_enable_expert_bias=m.router_expert_bias,
            moe_router_topk_scaling_factor=m.router_topk_scaling_factor,
        )
        if m.router_num_groups > 1:
            out.update(moe_router_num_groups=m.router_num_groups, moe_router_group_topk=m.router_group_topk)
    return out


#: the compute capability major the harness answers for each GPU generation (Megatron-LM's
#: ``get_device_arch_version``, ``torch.cuda.get_device_capability``): MXFP8 / NVFP4 need 10
ARCH = {"ampere": 8, "hopper": 9, "blackwell": 10}


def published_plans(set_name: str = "all", framework: str = "megatron") -> list[dict]:
    """The plan of every usable published row of ``framework`` (``benchmarks.published.predict``: the recipes,
    layouts, dispatchers, recompute modules and offloads the sources state), emitted as ``--emit`` prints it, each on
    its own GPU generation's capability."""
    import warnings

    from benchmarks.published import load_set, predict
    from costmodel.spec.errors import PlannerError
    from costmodel.spec.precision import generation
    from planner.emit import emit_text

    out = []
    rows = [r for r in load_set(set_name) if not r.skip and r.fixed.get("framework", "megatron") == framework]
    for r in rows:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est, _ = predict(r)
            if est is None:
                continue
            c, m = est.config, r.model
            try:
                text, notes = emit_text(framework, c, r.workload, m.layers, m.is_moe, model=m)
            except PlannerError:  # no flags of the framework for the plan (flags_roundtrip counts these)
                continue
        out.append(
            {
                "model": f"row {r.row_id} {m.name}",
                "vocab": m.vocab,
                "gpus": c.gpus,
                "dp": c.dp,
                "config": c.to_dict(),
                "dtype": r.workload.recipe,
                "text": text,
                "notes": notes,
                "arch": ARCH.get(generation(r.cluster.device.name), 9),
                "expect": expected_args(m, r.workload.seq_len) if framework == "megatron" else {},
            }
        )
    return out


def draw_plans(n: int, framework: str, seed: int) -> list[dict]:
    """``n`` random plans the planner accepts and emits for ``framework``, as plain values."""
    from costmodel.frameworks import rules as frameworks
    from costmodel.spec.plan import ParallelConfig
    from costmodel.physics.validity import validate_config
    from costmodel.spec.errors import PlannerError
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from planner.emit import emit_text

    rng = random.Random(seed)
    cluster = load_cluster("h100-sxm")
    out, tries = [], 0
    while len(out) < n and tries < 20000:
        tries += 1
        m = load_model(rng.choice(MODELS))
        tp, pp, cp, dp = (
            rng.choice((1, 2, 4, 8)),
            rng.choice((1, 2, 4)),
            rng.choice((1, 1, 2)),
            rng.choice((1, 2, 4, 8)),
        )
        ep = rng.choice((1, 2, 4, 8)) if m.experts and framework == "megatron" else 1
        vp = rng.choice((1, 2)) if pp > 1 and framework == "megatron" else 1
        sp = tp > 1 and (m.is_moe or rng.random() < 0.7)
        zero = rng.choice((0, 1, 3) if framework == "megatron" else (0, 1, 2, 3))
        fields = dict(
            tp=tp,
            pp=pp,
            cp=cp if framework == "megatron" else 1,
            dp=dp,
            ep=ep,
            vp=vp,
            sp=sp,
            zero=zero,
            mb=rng.choice((1, 2)),
            recompute=rng.choice(("none", "selective", "full")),
            bucket_bytes=rng.choice((0.0, 10e6, 40e6)),
            flash_attention=rng.random() < 0.8,
            chunks=tp if sp and framework == "megatron" and rng.random() < 0.3 else 1,
            framework=framework,
        )
        dtype = rng.choice(("bf16", "bf16", "fp8", "fp16"))
        try:
            c = ParallelConfig(**fields)
            w = Workload(
                global_batch=c.dp * c.mb * rng.choice((1, 2, 4, 8)) * max(c.pp, 1),
                seq_len=rng.choice((2048, 4096, 8192)),
                dtype=dtype,
            )
            frameworks.check(c)
            validate_config(m, cluster.with_gpus(c.gpus), w, c)
            text, notes = emit_text(framework, c, w, m.layers, m.is_moe, model=m)
        except PlannerError:
            continue
        out.append(
            {
                "model": m.name,
                "vocab": m.vocab,
                "gpus": c.gpus,
                "dp": c.dp,
                "config": c.to_dict(),
                "dtype": dtype,
                "text": text,
                "notes": notes,
                "expect": expected_args(m, w.seq_len) if framework == "megatron" else {},
            }
        )
    return out


def broken(plans: dict) -> tuple[list[dict], list[dict]]:
    """Copies of the first plans, each broken in one way the frameworks must refuse: a control that
    the checks below can fail (GPUs not a multiple of the model-parallel size; 7 query groups under
    TP > 1; a layer count the pipeline cannot split; a batch that breaks DeepSpeed's
    batch identity; a ZeRO stage DeepSpeed does not have)."""
    import re

    meg, ds = [], []
    p = plans["megatron"]
    big = next(q for q in p if q["config"]["tp"] * q["config"]["pp"] * q["config"]["cp"] > 1)
    meg.append({**big, "gpus": big["gpus"] + 1})
    gqa = next(q for q in p if "--num-query-groups" in q["text"] and q["config"]["tp"] > 1)
    meg.append({**gqa, "text": re.sub(r"--num-query-groups \d+", "--num-query-groups 7", gqa["text"])})
    piped = next(q for q in p if q["config"]["pp"] > 1)
    meg.append(
        {
            **piped,
            "text": re.sub(
                r"--num-layers (\d+)", lambda m: f"--num-layers {int(m.group(1)) + 1}", piped["text"], count=1
            ),
        }
    )
    d = plans["deepspeed"][0]
    cfg = json.loads(d["text"])
    ds.append({**d, "text": json.dumps({**cfg, "train_batch_size": cfg["train_batch_size"] + 1})})
    ds.append({**d, "text": json.dumps({**cfg, "zero_optimization": {**cfg["zero_optimization"], "stage": 4}})})
    return meg, ds


def broken_torchtitan(plans: list[dict]) -> list[dict]:
    """torchtitan controls: GPUs not the product of the degrees; a misspelt key."""
    t = plans[0]
    return [
        {**t, "gpus": t["gpus"] + 1},
        {**t, "text": t["text"].replace("tensor_parallel_degree", "tensor_parallel_degre", 1)},
    ]


# --------------------------------------------------------------------------- run in MEGATRON_PYTHON
def check_megatron(plans: list[dict]) -> list[str | None]:
    """None for each plan Megatron-LM accepts, else the first line of its error."""
    import contextlib
    import io
    import shlex

    import torch
    from megatron.training import arguments as A
    from megatron.training.argument_utils import core_transformer_config_from_args
    import megatron.core.transformer.transformer_config as TC

    A.is_te_min_version = TC.is_te_min_version = lambda *a, **k: True  # a current Transformer Engine
    results = []
    for p in plans:
        arch = p.get("arch", 9)  # the plan's GPU (the random plans: Hopper)
        A.get_device_arch_version = lambda arch=arch: arch
        torch.cuda.get_device_capability = lambda *a, arch=arch: (arch, 0)
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update({"WORLD_SIZE": str(p["gpus"]), "RANK": "0", "LOCAL_RANK": "0"})
        if any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in p["notes"]):
            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        os.environ.pop("NVTE_CPU_OFFLOAD_V1", None)
        if any("NVTE_CPU_OFFLOAD_V1=1" in n for n in p["notes"]):  # fine-grained activation offloading
            os.environ["NVTE_CPU_OFFLOAD_V1"] = "1"
        sys.argv = (
            ["pretrain_gpt.py"]
            + shlex.split(p["text"].replace("\\\n", " "))
            + ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(p["vocab"])]
        )
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                args = A.parse_args()
                A.validate_args(args)
                args.apply_rope_fusion = False  # its check imports Transformer Engine, absent on a CPU host
                core_transformer_config_from_args(args)  # TransformerConfig.__post_init__'s own checks
            wrong = {
                k: (getattr(args, k, None), v) for k, v in p.get("expect", {}).items() if getattr(args, k, None) != v
            }
            results.append(f"parsed as {wrong} (parsed, the model's)"[:300] if wrong else None)
        except BaseException as e:  # argparse exits, assertions, ValueErrors: all are rejections
            results.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    return results


def check_deepspeed(plans: list[dict]) -> list[str | None]:
    import deepspeed.runtime.config as dsc

    class MPU:  # the data-parallel size the batch identity is checked against
        def __init__(self, dp):
            self.dp = dp

        def get_data_parallel_world_size(self):
            return self.dp

    dsc.dist.get_rank = lambda *a, **k: 0
    results = []
    for p in plans:
        try:
            dsc.DeepSpeedConfig(json.loads(p["text"]), mpu=MPU(p["dp"]))
            results.append(None)
        except BaseException as e:
            results.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    return results


def check_torchtitan(plans: list[dict]) -> list[str | None]:
    """torchtitan's own ``ConfigManager`` on each emitted TOML (unknown keys and wrong types refused), then its
    ``ParallelDims`` on the parsed degrees at the plan's world size, as ``torchtitan/train.py`` builds it."""
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    results = []
    for p in plans:
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(p["text"])
            f.flush()
            try:
                cfg = ConfigManager().parse_args(["--job.config_file", f.name]).parallelism
                ParallelDims(
                    dp_shard=cfg.data_parallel_shard_degree,
                    dp_replicate=cfg.data_parallel_replicate_degree,
                    cp=cfg.context_parallel_degree,
                    tp=cfg.tensor_parallel_degree,
                    pp=cfg.pipeline_parallel_degree,
                    ep=cfg.expert_parallel_degree,
                    etp=cfg.expert_tensor_parallel_degree,
                    world_size=p["gpus"],
                )
                results.append(None)
            except BaseException as e:
                results.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    return results


CHECKS = {"megatron": check_megatron, "deepspeed": check_deepspeed, "torchtitan": check_torchtitan}


def checker_main(path: str) -> int:
    data = json.loads(Path(path).read_text())  # Megatron-LM is on PYTHONPATH (main)
    res = {k: CHECKS[k.split("_")[0]](v) for k, v in data.items()}
    Path(path).with_suffix(".out.json").write_text(json.dumps(res))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=40, help="plans per framework (default 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--published",
        action="store_true",
        help="also check the plan of every Megatron-framework published row (their recipes, layouts, dispatchers)",
    )
    ap.add_argument("--check", help=argparse.SUPPRESS)  # the second Python's entry point
    a = ap.parse_args(argv)
    if a.check:
        return checker_main(a.check)
    meg, py = os.environ.get("MEGATRON"), os.environ.get("MEGATRON_PYTHON")
    if not meg or not py:
        print(
            "skipped: set MEGATRON (a Megatron-LM checkout) and MEGATRON_PYTHON (a Python with torch, its "
            "dependencies and deepspeed)"
        )
        return 0
    plans = {
        "megatron": draw_plans(a.plans, "megatron", a.seed),
        "deepspeed": draw_plans(a.plans, "deepspeed", a.seed),
        "torchtitan": draw_plans(a.plans, "fsdp2", a.seed),
    }
    plans["megatron_broken"], plans["deepspeed_broken"] = broken(plans)
    plans["torchtitan_broken"] = broken_torchtitan(plans["torchtitan"])
    if a.published:
        plans["megatron_published"] = published_plans()
        plans["torchtitan_published"] = published_plans(framework="fsdp2")
        plans["deepspeed_published"] = published_plans(framework="deepspeed")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "plans.json"
        f.write_text(json.dumps(plans))
        path = os.pathsep.join(p for p in (meg, os.environ.get("PYTHONPATH")) if p)
        r = subprocess.run(
            [py, "-m", "benchmarks.real_parsers", "--check", str(f)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
        )
        if r.returncode:
            print(r.stderr[-3000:])
            return 1
        res = json.loads(f.with_suffix(".out.json").read_text())
    commit = subprocess.run(["git", "-C", meg, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(
        f"Megatron-LM {commit or os.environ.get('MEGATRON_COMMIT', '(commit unknown)')}, "
        f"DeepSpeed {subprocess.run([py, '-c', 'import deepspeed; print(deepspeed.__version__)'], capture_output=True, text=True).stdout.strip().splitlines()[-1:]}"
    )
    bad = 0
    published = ("megatron_published", "torchtitan_published", "deepspeed_published") if a.published else ()
    for fw in ("megatron", "deepspeed", "torchtitan") + published:
        if not plans[fw]:  # (no published row of that framework emits)
            continue
        ok = sum(e is None for e in res[fw])
        bad += len(res[fw]) - ok
        models = sorted({p["model"] for p in plans[fw]})
        print(f"{fw}: {ok} of {len(res[fw])} emitted plans accepted (models: {', '.join(models)})")
        for p, e in zip(plans[fw], res[fw]):
            if e is not None:
                print(f"  rejected {p['model']} {p['config']}: {e}")
    for fw in ("megatron_broken", "deepspeed_broken", "torchtitan_broken"):
        refused = sum(e is not None for e in res[fw])
        bad += len(res[fw]) - refused
        print(f"control, {fw.replace('_', ' ')} plans: {refused} of {len(res[fw])} refused")
        for e in res[fw]:
            print(f"  {e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
