"""The Megatron-Bridge 25.11 Blackwell MoE rows: what the model leaves unexplained per MoE layer and micro-batch.

    python -m benchmarks.blackwell_moe_gap

For every MoE row of ``megatron_bridge_perf_blackwell`` (development data, issue 39) it prints the graph
engine's step time, the measured one, the analytic engine's GPU time of one MoE layer and micro-batch
(forward + backward + exposed communication), the host time :mod:`costmodel.physics.kernels.host` gives that
layer (on the row's host, and on a Grace host), and the residual ``(measured - predicted) / slots``: the seconds
per MoE layer and micro-batch the model would need to add, where ``slots = (m + (pp - 1) / vp) * L`` (``m``
micro-batches per pipeline, ``L`` layers of the longest stage: the critical path of an interleaved 1F1B
schedule), and that residual per local expert (``experts / ep``). Then what-ifs that are not the model's
answer: row 289 at the recipe's EP 64 (the table says EP 8), and the measured-kernel path (``trtllm`` GEMM
tables). An analysis aid for ``benchmarks/notes/2026-12-05-blackwell-moe-and-rack-search.md``; it fits nothing.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.published import load_set
from benchmarks.published.row import predict
from costmodel.api import evaluate
from costmodel.engines.analytic import layer_timing
from costmodel.physics.kernels import host
from costmodel.spec.plan import ParallelConfig

SOURCE = "megatron_bridge_perf_blackwell"


def residuals(rows) -> list[dict]:
    out = []
    for r in rows:
        if r.source != SOURCE or not r.model.experts:
            continue
        c = ParallelConfig(**r.fixed)
        est, _ = predict(r, "graph")
        lt = layer_timing(r.model, r.cluster, r.workload, c, True)
        gpu = lt.fwd_s + lt.bwd_s + lt.ledger.total_exposed_s
        hf, hb = host.layer_host_s(r.model, r.cluster.device, r.workload, c, True)
        m = r.workload.global_batch // (c.dp * c.mb)
        lps = est.config.layers_per_stage
        longest = max(lps) if lps else r.model.layers / c.pp
        slots = (m + (c.pp - 1) / c.vp) * longest
        extra = (r.measured_s - est.step_time_s) / slots
        out.append(
            dict(
                row=r.row_id,
                gpu=r.cluster.device.name,
                mb=c.mb,
                ep=c.ep,
                local=r.model.experts // c.ep,
                pred=est.step_time_s,
                meas=r.measured_s,
                layer_gpu=gpu,
                host=hf + hb,
                host_grace=(hf + hb) / host.host_scale(r.cluster.device),
                extra=extra,
            )
        )
    return out


def main() -> int:
    rows = load_set("all")
    print(
        f"{'row':>4} {'gpu':<6} {'mb':>2} {'ep':>3} {'G':>3} {'pred_s':>7} {'meas_s':>7} {'err':>6}"
        f" {'GPU/layer':>10} {'host':>7} {'host@Grace':>10} {'residual/layer':>15} {'per expert':>11}"
    )
    for d in residuals(rows):
        print(
            f"{d['row']:>4} {d['gpu']:<6} {d['mb']:>2} {d['ep']:>3} {d['local']:>3} {d['pred']:7.2f} {d['meas']:7.2f}"
            f" {100 * (d['pred'] / d['meas'] - 1):+5.0f}% {1e3 * d['layer_gpu']:8.2f}ms {1e3 * d['host']:5.2f}ms"
            f" {1e3 * d['host_grace']:8.2f}ms {1e3 * d['extra']:+13.2f}ms {1e3 * d['extra'] / d['local']:+9.3f}ms"
        )
    by_id = {r.row_id: r for r in rows}
    print("\nwhat-ifs (not the model's answer):")
    r = by_id["289"]
    est = evaluate(r.model, r.cluster, r.workload, ParallelConfig(**dict(r.fixed, ep=64)), engine="graph")
    print(
        f"  289 at the v0.2.0 / e940d997d recipe's EP 64: {est.step_time_s:.2f} s ({100 * (est.step_time_s / r.measured_s - 1):+.0f}%),"
        f" EP exposed {est.breakdown['ep_exposed_s']:.2f} s"
    )
    for rid in ("288", "289", "290", "291"):
        r = by_id[rid]
        cl = replace(r.cluster, device=replace(r.cluster.device, kernel_table="trtllm"))
        est = evaluate(r.model, cl, r.workload, ParallelConfig(**r.fixed), engine="graph")
        print(
            f"  {rid} with measured GEMM tables (trtllm): {est.step_time_s:.2f} s ({100 * (est.step_time_s / r.measured_s - 1):+.0f}%)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
