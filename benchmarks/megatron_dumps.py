"""Make real Megatron-LM argument dumps: run Megatron-LM's own ``parse_args`` and ``validate_args``
(which ends with ``_print_args``; ``megatron/training/arguments.py``) on CPU for a few configurations and
write what they print, as a training log starts, to ``data/components/megatron_dumps/``.

    PYTHONPATH=/path/to/Megatron-LM  /path/to/venv-with-torch/bin/python -m benchmarks.megatron_dumps

Needs a checkout of NVIDIA/Megatron-LM (not part of this repository; on ``PYTHONPATH``) and a Python >= 3.12
environment with torch (CPU), numpy, packaging, pyyaml, einops and triton; the planner itself is
not imported. The GPU architecture queries of ``validate_args`` (``get_device_arch_version``,
``torch.cuda.get_device_capability``) are answered with sm_90 (Hopper), the only device facts it asks for. The commit of the checkout is
written to ``dumps.csv`` beside the dumps; ``python -m benchmarks.calibrate_dumps`` reads them back.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "components" / "megatron_dumps"

LLAMA3_8B = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
    "--vocab-size 128256 --tokenizer-type NullTokenizer"
)
LLAMA3_70B = LLAMA3_8B.replace(
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32",
    "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64",
)
MIXTRAL = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
    "--vocab-size 32000 --tokenizer-type NullTokenizer --num-experts 8 --moe-router-topk 2 "
    "--moe-grouped-gemm --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2"
)

#: name -> (world size, environment, command line): dense, MoE EP>1, CP, FP8, and the attention
#: backends the planner reads (TE auto, TE unfused, Megatron's local spec)
CASES = {
    "dense_llama3_8b_tp2_pp2": (
        16,
        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        f"{LLAMA3_8B} --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
        "--overlap-param-gather --micro-batch-size 1 --global-batch-size 128 --bf16 --use-flash-attn",
    ),
    "moe_mixtral_ep8_alltoall": (
        64,
        {},
        f"{MIXTRAL} --seq-length 4096 --max-position-embeddings 4096 --expert-model-parallel-size 8 "
        "--moe-token-dispatcher-type alltoall --use-distributed-optimizer --overlap-grad-reduce "
        "--micro-batch-size 1 --global-batch-size 256 --bf16",
    ),
    "moe_mixtral_ep8_tp2_flex_deepep": (
        64,
        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        f"{MIXTRAL} --seq-length 4096 --max-position-embeddings 4096 --tensor-model-parallel-size 2 "
        "--sequence-parallel --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 "
        "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep --use-distributed-optimizer "
        "--micro-batch-size 1 --global-batch-size 256 --bf16",
    ),
    "cp4_llama3_70b_tp8_32k": (
        128,
        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        f"{LLAMA3_70B} --seq-length 32768 --max-position-embeddings 32768 --tensor-model-parallel-size 8 "
        "--context-parallel-size 4 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
        "--overlap-param-gather --recompute-granularity selective --micro-batch-size 1 --global-batch-size 64 --bf16",
    ),
    "fp8_llama3_70b_tp4_pp4_vp5": (
        128,
        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        f"{LLAMA3_70B} --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 4 "
        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel "
        "--tp-comm-overlap --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
        "--micro-batch-size 1 --global-batch-size 512 --bf16 --fp8-format hybrid --fp8-amax-history-len 1024 "
        "--fp8-amax-compute-algo max",
    ),
    "dense_llama3_8b_te_unfused_attention": (
        8,
        {},
        f"{LLAMA3_8B} --seq-length 4096 --max-position-embeddings 4096 --attention-backend unfused "
        "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 64 --bf16",
    ),
    "dense_llama3_8b_local_spec": (
        8,
        {},
        f"{LLAMA3_8B} --seq-length 4096 --max-position-embeddings 4096 --transformer-impl local "
        "--attention-backend local --spec local --micro-batch-size 1 --global-batch-size 64 --bf16",
    ),
    "dense_llama3_8b_megatron_fsdp": (
        8,
        {},
        f"{LLAMA3_8B} --seq-length 4096 --max-position-embeddings 4096 --use-megatron-fsdp "
        "--data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor "
        "--overlap-grad-reduce --overlap-param-gather --micro-batch-size 2 --global-batch-size 64 --bf16",
    ),
}


def dump(world: int, env: dict, line: str) -> str:
    """What Megatron-LM prints for ``line`` on rank 0 of ``world`` ranks (parse, validate, print)."""
    from megatron.training import arguments as A

    for k in ("CUDA_DEVICE_MAX_CONNECTIONS",):
        os.environ.pop(k, None)
    os.environ.update({"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0", **env})
    import torch

    A.get_device_arch_version = lambda: 9  # Hopper (sm_90): the device facts validate_args asks for
    torch.cuda.get_device_capability = lambda *a: (9, 0)
    sys.argv = ["pretrain_gpt.py"] + line.split()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        args = A.parse_args()
        A.validate_args(args)  # ends by printing the arguments (_print_args), as a training log starts
    return buf.getvalue()


def main() -> int:
    import megatron.training  # the checkout on PYTHONPATH

    root = Path(megatron.training.__file__).resolve().parents[2]
    commit = (
        os.environ.get("MEGATRON_COMMIT")
        or subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    )
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (world, env, line) in CASES.items():
        text = dump(world, env, line)
        (OUT / f"{name}.log").write_text(text)
        rows.append(
            {
                "name": name,
                "world_size": world,
                "env": " ".join(f"{k}={v}" for k, v in env.items()),
                "command_line": line,
                "megatron_commit": commit,
                "source_url": "https://github.com/NVIDIA/Megatron-LM",
                "source_location": f"megatron/training/arguments.py@{commit}: parse_args, validate_args, _print_args",
            }
        )
        print(f"{name}: {len(text.splitlines())} lines")
    with open(OUT / "dumps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
