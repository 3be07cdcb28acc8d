"""Per-component decode-step time of a MoE model as the serving step prices it (issue 40: MoE decode as it runs).

    python -m benchmarks.moe_decode [--model deepseek-v3] [--cluster b200] [--gpus 8] [--dtype fp8]

For each plan (TP8 with EP8, TP8 alone, data-parallel attention DP8 with EP8: vLLM's ``--data-parallel-size 8
--enable-expert-parallel``, the plan ``recommend --mode infer`` picks for throughput) and batch (1, 32, 128 decodes at the mean context of 1k in / 1k out,
1,536 tokens) it prints, per MoE layer on the slowest rank, the expected distinct experts hit (mean and slowest
EP rank, :func:`costmodel.physics.kernels.moe_decode.experts_hit`), the routed-expert weight bytes those read,
the routed-expert block time (measured MoE table or roofline, and its evidence), the rest of the layer, and the
whole decode step (all layers, collectives, LM head, decode attention) from
:class:`costmodel.serving.step.StepCost`. Nothing is fitted; nothing is recorded (a component table).

Before this change (ce686fa) the step priced a serving MoE layer as Megatron-Core training runs it
(Transformer Engine's two-stream per-expert GEMMs, a host copy of the expert counts, the auxiliary-loss
router): DeepSeek-V3 fp8 on 8 B200, decode step at context 1,536, TP8 EP8: 10.52 / 24.97 / 33.65 ms at batch
1 / 32 / 128 (9.11 / 19.25 / 24.70 ms after); TP8: 12.1 / 79.2 / 119.7 ms (11.2 / 24.2 / 33.8 after).
"""

from __future__ import annotations

import argparse

from costmodel.physics.kernels.moe_decode import experts_hit, weight_bytes_read
from costmodel.physics.memory.stage_contents import is_moe_layer
from costmodel.serving.phase import serving_layer_ops
from costmodel.serving.step import step_cost
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.units import DTYPE_BYTES
from costmodel.spec.workload import Workload

CTX = 1536  # mean context of a 1k-in / 1k-out request over its decode steps


def rows(model_name: str, cluster_name: str, gpus: int, dtype: str) -> list[dict]:
    model, cluster = load_model(model_name), load_cluster(cluster_name).with_gpus(gpus)
    dev, out = cluster.device, []
    n_moe = sum(is_moe_layer(model, i) for i in range(model.layers))
    for tp, ep, dp in ((gpus, gpus, 1), (gpus, 1, 1), (1, gpus, gpus)):
        sc = step_cost(model, cluster, dtype, ParallelConfig(tp=tp, ep=ep, dp=dp), dtype)
        for b in (1, 32, 128):
            n = -(-b // dp)  # decodes per data-parallel attention replica (the busiest)
            c = ParallelConfig(tp=tp, ep=ep, dp=dp, mb=n)
            ops = serving_layer_ops(
                model, dev, Workload(global_batch=n, seq_len=CTX, dtype=dtype), c, True, True, dtype
            )
            experts = next(o for o in ops if o.name == "experts")
            mean, slowest = experts_hit(n * max(1, ep // tp), model.topk, model.experts, ep)
            _, wb = weight_bytes_read(model, DTYPE_BYTES[dtype], n, tp, ep)
            step = sc.time_s(tokens=n, sampled=n, prefill_pairs=0, decode_ctx=n * CTX)
            out.append(
                {
                    "plan": f"TP{tp} EP{ep}" + (f" DP{dp} (attention)" if dp > 1 else ""),
                    "batch": n * dp,
                    "experts hit (mean / slowest rank)": f"{mean:.1f} / {slowest:.1f} of {model.experts // ep}",
                    "expert GB read / layer": round(wb / 1e9, 3),
                    "experts us": round(experts.fwd_s * 1e6, 1),
                    "evidence": experts.evidence or "roofline",
                    "rest of MoE layer us": round((sum(o.fwd_s for o in ops) - experts.fwd_s) * 1e6, 1),
                    f"x {n_moe} MoE layers ms": round(sum(o.fwd_s for o in ops) * n_moe * 1e3, 2),
                    "decode step ms": round(step * 1e3, 2),
                }
            )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--cluster", default="b200")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--dtype", default="fp8")
    a = ap.parse_args(argv)
    table = rows(a.model, a.cluster, a.gpus, a.dtype)
    keys = list(table[0])
    widths = [max(len(k), *(len(str(r[k])) for r in table)) for k in keys]
    print(f"{a.model} on {a.gpus} x {a.cluster}, {a.dtype}, decode at context {CTX}")
    print("  ".join(k.ljust(w) for k, w in zip(keys, widths)))
    for r in table:
        print("  ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths)))


if __name__ == "__main__":
    main()
