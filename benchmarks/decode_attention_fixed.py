"""Fixed time of one decode-attention call at small context, read from AIConfigurator's measured
``generation_attention_perf`` tables (issue 40, benchmarks/notes/2026-12-06-small-batch-decode.md).

For each system and each engine backend (newest collected version), the median latency of the points with
context ``isl + step <= 160`` tokens, ``batch_size <= 16``, head_dim 128, BF16 activations and KV cache, no
sliding window (every head configuration measured): the time a decode step's attention call (the KV-cache
write and the attention kernel(s), under CUDA graphs, ``collector/helper.py`` ``benchmark_with_power``)
takes before its cache reads matter. Prints the dict :data:`costmodel.physics.kernels.decode_attention.FIXED_S`
holds. Needs pandas and pyarrow (``pip install '.[tables]'``) and the AIConfigurator repository::

    python -m benchmarks.decode_attention_fixed --aic /work/.mirror/ai-dynamo+aiconfigurator/repo
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys

ROOT = "aic-core/src/aiconfigurator_core/systems/data"
SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
BACKENDS = ("sglang", "trtllm", "vllm")
MAX_CTX, MAX_BATCH = 160, 16


def _git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, check=True).stdout


def _version_key(v: str):
    import re

    return [int(x) if x.isdigit() else x for x in re.split(r"[.]|(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)", v)]


def fixed_times(repo: str) -> dict:
    import numpy as np
    import pandas as pd

    files = [
        f.split(f"{ROOT}/", 1)[1]
        for f in _git(repo, "ls-tree", "-r", "--name-only", "HEAD").decode().splitlines()
        if f.endswith("generation_attention_perf.parquet") and f.startswith(ROOT)
    ]
    out: dict = {}
    for system in SYSTEMS:
        for backend in BACKENDS:
            versions = sorted(
                (f.split("/")[3] for f in files if f.split("/")[0] == system and f.split("/")[2] == backend),
                key=_version_key,
            )
            if not versions:
                continue
            v = versions[-1]
            path = f"{system}/attention/{backend}/{v}/generation_attention_perf.parquet"
            df = pd.read_parquet(io.BytesIO(_git(repo, "show", f"HEAD:{ROOT}/{path}")))
            df = df[(df.head_dim == 128) & df.attn_dtype.isin(["bfloat16"]) & df.kv_cache_dtype.isin(["bfloat16"])]
            if "window_size" in df:
                df = df[df.window_size == 0]
            small = df[(df.isl + df.step <= MAX_CTX) & (df.batch_size <= MAX_BATCH)]
            if len(small):
                out.setdefault(system, {})[f"{backend} {v}"] = (
                    round(float(np.median(small.latency)) * 1e3, 2),  # ms -> us
                    len(small),
                    ",".join(sorted(small.kernel_source.unique())),
                )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="the AIConfigurator git repository (bare is fine)")
    args = ap.parse_args(argv)
    try:
        res = fixed_times(args.aic)
    except ImportError:
        print("decode_attention_fixed: needs pandas and pyarrow", file=sys.stderr)
        return 2
    for system, per in res.items():
        med = statistics.median(us for us, _, _ in per.values())
        print(
            f"{system:9s} median {med:5.2f} us  "
            + "  ".join(f"{k}: {us} us (n={n}, {ks})" for k, (us, n, ks) in per.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
