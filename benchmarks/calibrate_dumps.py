"""What ``planner calibrate`` reads from real Megatron-LM argument dumps, against what each dump says.

    python -m benchmarks.calibrate_dumps

The dumps (``data/components/megatron_dumps/*.log``) are what Megatron-LM's own ``parse_args`` and
``validate_args`` printed (commit and command lines in ``dumps.csv``; made by
``benchmarks/megatron_dumps.py``). For each dump this prints the plan, workload and model fields
the planner parsed next to the value the dump's Megatron arguments state and the value the dump's
command line meant (``EXPECTED``, written by hand from ``dumps.csv``), and counts mismatches. It then
prices each plan on ``h100-sxm`` with the attention kernel as read now and as read at cc41895 (the
legacy ``use_flash_attn`` flag, before issue 24): the difference is the error that misreading
alone put into a calibration's starting point.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

from costmodel.api import evaluate
from costmodel.spec.errors import PlannerError
from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner import megatron_model as mm
from planner.problem import make_config
from planner.run_logs import scan_log

DUMPS = Path(__file__).resolve().parent / "data" / "components" / "megatron_dumps"

#: field -> the Megatron-LM arguments of the dump it is read from (shown beside the parsed value)
SOURCES = {
    "tp": ("tensor_model_parallel_size",),
    "pp": ("pipeline_model_parallel_size",),
    "dp": ("data_parallel_size",),
    "cp": ("context_parallel_size",),
    "ep": ("expert_model_parallel_size",),
    "vp": ("num_layers_per_virtual_pipeline_stage", "virtual_pipeline_model_parallel_size"),
    "mb": ("micro_batch_size",),
    "sp": ("sequence_parallel",),
    "zero": ("use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy"),
    "recompute": ("recompute_granularity",),
    "chunks": ("tp_comm_overlap",),
    "bucket_mb": ("overlap_grad_reduce", "ddp_bucket_size"),
    "flash_attention": ("transformer_impl", "attention_backend", "use_flash_attn"),
    "ep_dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend"),
    "gpus": ("world_size",),
    "global_batch": ("global_batch_size",),
    "seq": ("seq_length",),
    "dtype": ("bf16", "fp16", "fp8"),
    "experts": ("num_experts",),
    "kv_heads": ("num_query_groups",),
}

#: what each dump's command line (dumps.csv) sets, by hand; unlisted fields are not checked
EXPECTED = {
    "dense_llama3_8b_tp2_pp2": dict(
        tp=2,
        pp=2,
        dp=4,
        cp=1,
        mb=1,
        sp=True,
        zero=1,
        flash_attention=True,
        gpus=16,
        global_batch=128,
        seq=8192,
        dtype="bf16",
        kv_heads=8,
    ),
    "moe_mixtral_ep8_alltoall": dict(
        tp=1, ep=8, dp=64, zero=1, ep_dispatcher="alltoall", flash_attention=True, gpus=64, experts=8, dtype="bf16"
    ),
    "moe_mixtral_ep8_tp2_flex_deepep": dict(
        tp=2, ep=8, dp=32, sp=True, ep_dispatcher="deepep", bucket_mb=0.0, flash_attention=True, gpus=64, experts=8
    ),
    "cp4_llama3_70b_tp8_32k": dict(
        tp=8, cp=4, dp=4, sp=True, recompute="selective", flash_attention=True, gpus=128, seq=32768, global_batch=64
    ),
    "fp8_llama3_70b_tp4_pp4_vp5": dict(
        tp=4, pp=4, vp=5, dp=8, chunks=4, sp=True, dtype="fp8", flash_attention=True, gpus=128, global_batch=512
    ),
    "dense_llama3_8b_te_unfused_attention": dict(flash_attention=False, zero=1, gpus=8),
    "dense_llama3_8b_local_spec": dict(flash_attention=False, zero=0, gpus=8),
    "dense_llama3_8b_megatron_fsdp": dict(zero=3, mb=2, flash_attention=True, gpus=8),
}


def parsed(path: Path) -> tuple[dict, ModelSpec, dict]:
    args = scan_log(path).args
    m = ModelSpec(name=path.stem, **mm.model_fields(args))
    fields = {**mg.workload_fields(args), **mg.config_fields(args, m.layers)}
    fields["experts"], fields["kv_heads"] = m.experts, m.kv_heads
    return fields, m, args


def main() -> int:
    manifest = {r["name"]: r for r in csv.DictReader(open(DUMPS / "dumps.csv"))}
    commits = sorted({r["megatron_commit"] for r in manifest.values()})
    print(f"Megatron-LM argument dumps: {len(manifest)} (commit {', '.join(commits)})\n")
    checked = wrong = 0
    h100 = load_cluster("h100-sxm")
    effects = []
    for name in manifest:
        fields, m, args = parsed(DUMPS / f"{name}.log")
        print(f"{name}:  {m.params / 1e9:.2f} B params, {m.layers} layers")
        for key, want in EXPECTED[name].items():
            got = fields.get(
                key,
                {
                    "zero": 0,
                    "cp": 1,
                    "ep": 1,
                    "pp": 1,
                    "vp": 1,
                    "sp": False,
                    "chunks": 1,
                    "recompute": "none",
                    "flash_attention": True,
                }.get(key),
            )
            said = ", ".join(f"{a}={args[a]}" for a in SOURCES.get(key, ()) if a in args)
            ok = got == want
            checked += 1
            wrong += not ok
            print(f"  {'ok ' if ok else 'BAD'} {key:16s} parsed {got!s:10s} expected {want!s:10s} dump: {said}")
        plan = {
            k: v for k, v in fields.items() if k not in ("gpus", "global_batch", "seq", "dtype", "experts", "kv_heads")
        }
        try:
            c = make_config(fields["gpus"], **plan)
            w = Workload(global_batch=fields["global_batch"], seq_len=fields["seq"], dtype=fields["dtype"])
            cl = h100.with_gpus(c.gpus)
            t = evaluate(m, cl, w, c).step_time_s
            t_unfused = evaluate(m, cl, w, replace(c, flash_attention=False)).step_time_s
            legacy = mg.as_bool("use_flash_attn", args.get("use_flash_attn", "False"))
            effects.append((name, c.flash_attention, t, t_unfused if not legacy else t))
        except PlannerError as e:
            effects.append((name, None, str(e), None))
        print()
    print(f"fields checked: {checked}, mismatches: {wrong}\n")
    print("step time on h100-sxm (analytic): attention as read now vs as read at cc41895 (the legacy use_flash_attn)")
    for name, flash, t, tu in effects:
        if flash is None:
            print(f"  {name:38s} not priced: {t}")
        else:
            print(f"  {name:38s} flash={flash!s:5s} {t:8.3f} s   at cc41895 {tu:8.3f} s   {100 * (tu / t - 1):+6.1f}%")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
