"""DeepSeek-V3 with and without its MTP module on Megatron-Bridge's pipeline shapes (issue 22).

    python -m benchmarks.mtp_cost

For each plan (1,024 H800, global batch 4096 x 4096 tokens, tp 1, ep 64, ZeRO-1, full recompute):
the predicted step time (op-graph and closed-form engines), MFU (Megatron-LM's FLOP count, which
counts the MTP layer and its logits: :func:`costmodel.physics.kernels.flops.forward_flops_per_token`), the peak memory
per GPU and that of the rank holding ``m`` and of the last rank, with the model's MTP layer
(``mtp_layers`` 1) and with it off (``--mtp-layers 0``; the same layout without ``m``). Predictions,
not measurements.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.api import evaluate
from costmodel.spec.layout import parse
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.units import GiB
from costmodel.spec.workload import Workload

PLANS = [  # (name, pp, layout with m): Megatron-Bridge's DeepSeek-V3 layouts (benchmarks/published, issue 22)
    ("PP8 VP4 Et|(tt|)*30mL", 8, "Et|(tt|)*30mL"),
    ("PP16 VP2 Et*3|(tt|)*29,m|L", 16, "Et*3|(tt|)*29,m|L"),
]


def main() -> None:
    model, cluster = load_model("deepseek-v3"), load_cluster("h800").with_gpus(1024)
    w = Workload(global_batch=4096, seq_len=4096)
    print(
        f"{'plan':30s} {'mtp':>3s} {'graph s':>8s} {'closed s':>8s} {'MFU':>6s} {'peak GiB':>8s} "
        f"{'m rank GiB':>10s} {'last GiB':>8s}"
    )
    for name, pp, text in PLANS:
        rank = next(r for r in range(pp) if sum(parse(text, pp).mtp_chunks(r)))
        for k in (1, 0):
            m = replace(model, mtp_layers=k)
            c = ParallelConfig(
                tp=1,
                pp=pp,
                dp=1024 // pp,
                ep=64,
                mb=1,
                zero=1,
                recompute="full",
                layout=text if k else text.replace("m", ""),
            )
            g, a = evaluate(m, cluster, w, c), evaluate(m, cluster, w, c, engine="analytic")
            mem = [s["total_bytes"] / GiB for s in g.memory]
            print(
                f"{name:30s} {k:3d} {g.step_time_s:8.2f} {a.step_time_s:8.2f} {g.mfu:6.1%} {max(mem):8.1f} "
                f"{mem[rank]:10.1f} {mem[-1]:8.1f}"
            )


if __name__ == "__main__":
    main()
