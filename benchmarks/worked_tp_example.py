"""The source document's worked TP example (section 3), computed by the model.

    python -m benchmarks.worked_tp_example

BF16 activations, b=1, s=4096, h=7168, TP=8, FP8 MatMul: the source quotes a 58.7 MB AllReduce,
0.1-0.3 ms over 400-900 GB/s, one layer's MatMul 0.5-2 ms and a ratio of 0.05-0.6. The first two
lines use an ideal link (efficiency 1, 2 us per hop) as the source's bandwidth-only arithmetic
does; the last uses the h100-sxm preset (NCCL-like efficiency and latency).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from costmodel.engines.graph.explain import tp_feasibility
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import LinkSpec, ModelSpec
from costmodel.spec.workload import Workload

MODEL = ModelSpec(name="h7168", layers=1, hidden=7168, heads=56, ffn_hidden=4 * 7168, vocab=32000)
W = Workload(global_batch=1, seq_len=4096, dtype="fp8")


def main() -> int:
    base = load_cluster("h100-sxm")
    cases = [
        (
            f"ideal {bw / 1e9:.0f} GB/s link",
            replace(base, intra_link=LinkSpec(bw_bytes_per_s=bw, latency_s=2e-6, efficiency=1.0)),
        )
        for bw in (400e9, 900e9)
    ]
    cases.append(("h100-sxm preset", base))
    print(f"{'link':<22} {'AllReduce MB':>12} {'AllReduce ms':>12} {'MatMul ms':>10} {'ratio':>6}")
    for label, cl in cases:
        f = tp_feasibility(MODEL, cl.with_gpus(8), W, ParallelConfig(tp=8))
        print(
            f"{label:<22} {f['msg_bytes'] / 1e6:12.1f} {f['t_allreduce_s'] * 1e3:12.3f} "
            f"{f['t_matmul_s'] * 1e3:10.3f} {f['ratio']:6.2f}"
        )
    print("source: 58.7 MB, 0.1-0.3 ms, MatMul 0.5-2 ms, ratio 0.05-0.6")
    return 0


if __name__ == "__main__":
    sys.exit(main())
