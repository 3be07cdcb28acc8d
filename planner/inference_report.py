"""The human report of one serving estimate (``planner evaluate --mode infer``).

Human units (ms, GiB) only here; the estimate itself is in SI units.
"""

from __future__ import annotations

from costmodel.serving.inference import InferenceEstimate
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GiB

from .report import _gib, _nodes, _onoff, model_label, table

#: plan keys that matter for serving, in print order
SERVING_KEYS = ("tp", "pp", "dp", "ep", "sp", "chunks")


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}" if x < 1 else f"{x * 1e3:,.0f}"


def _dur(x: float) -> str:
    """Milliseconds below a second, seconds above."""
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:,.2f} s"


def serving_config_line(est: InferenceEstimate) -> str:
    d = est.config.to_dict()
    return " ".join(f"{k}={_onoff(d[k])}" for k in SERVING_KEYS)


def _breakdown_lines(est: InferenceEstimate) -> list[str]:
    pf, dec = est.breakdown["prefill"], est.breakdown["decode"]
    rows = [[k.removesuffix("_s").replace("_", " "), _ms(pf[k]), _ms(dec[k])] for k in pf if pf[k] > 0 or dec[k] > 0]
    rows.append(["total", _ms(sum(pf.values())), _ms(sum(dec.values()))])
    return [table(["component", "prefill ms", "decode step ms"], rows)]


def _overlap_lines(est: InferenceEstimate) -> list[str]:
    rows = []
    for phase in ("prefill", "decode"):
        for s, r in est.overlap[phase].items():
            rows.append(
                [
                    phase,
                    s,
                    _ms(est.comm_link_s[phase][s]),
                    _ms(est.comm_exposed_s[phase][s]),
                    f"{r:.2f}",
                    est.reasons[phase].get(s, "fully hidden" if r >= 1 else "-"),
                ]
            )
    if not rows:
        return ["no communication"]
    return [table(["phase", "strategy", "link ms", "exposed ms", "r", "why exposed"], rows)]


def _band(bands: dict, key: str, scale: float, point: float | None = None) -> str:
    """`` (80% band lo-hi)`` in the unit :func:`_dur` picks for the band's upper end; where the prediction lies
    outside its own band (the validation rows behind the band were all measured below it, or all above), says so."""
    if key not in bands:
        return ""
    lo, hi = (v * scale for v in bands[key])
    side = "" if point is None or lo <= point <= hi else "below" if hi < point else "above"
    why = f": the runs behind it measured {side} the prediction" if side else ""
    return f" (80% band {_dur(lo)}-{_dur(hi)}{why})"


def _engine_line(sv: dict) -> str:
    """The engine's scheduler as simulated: budget, limit, chunking, mixing, load and queueing."""
    from costmodel.serving.inference import ENGINE_TITLES

    if not sv:
        return "-"
    limit = "KV cache only" if sv["max_seqs"] is None else f"at most {sv['max_seqs']}"
    if sv["load"] == "poisson":
        load = f"Poisson arrivals at {sv['request_rate_per_s']:g}/s"
    elif sv["load"] == "gamma":
        load = f"Gamma arrivals at {sv['request_rate_per_s']:g}/s (cv {sv['arrival_cv']:g})"
    else:
        load = f"closed loop, {'steady state' if sv['measure'] == 'steady' else 'all requests'}"
        if sv.get("clients") == "staggered":
            load += ", clients out of step"
        if sv.get("output_spread"):
            load += f", output lengths +-{100 * sv['output_spread']:.0f}%"
    return (
        f"{ENGINE_TITLES[sv['engine']]} scheduler, {sv['token_budget']} tokens per step, running requests "
        f"{limit}, {'chunked' if sv['chunked_prefill'] else 'whole'} prompts, "
        f"{'prefill mixed with decodes' if sv['mixed_batches'] else 'prefill and decode steps apart'}; "
        f"{load}; {sv['admitted_per_replica']} admitted per replica, {sv['queue_ms']:,.0f} ms queued on average, "
        f"{sv['prefill_steps_per_request']:.2f} steps per prompt; GEMMs "
        + (f"from the measured table {sv['gemm_table']}" if sv.get("gemm_table") else "from the fitted roofline")
        + (f"; TP all-reduce from the measured table {sv['allreduce_table']}" if sv.get("allreduce_table") else "")
    )


def speculation_lines(spec: dict | None) -> list[str]:
    """Speculative decoding as replayed (``serving["speculation"]``): the draft, its tokens a step, the acceptance
    and how it is known."""
    if not spec:
        return []
    how = (
        "assumed: DeepSeek-V3's reported MTP rate; --spec-accept states your workload's"
        if spec["acceptance_evidence"] == "assumed"
        else "stated"
    )
    return [
        f"speculative: {spec['method']} drafts {spec['draft_tokens']} token(s) a step, each accepted at "
        f"{spec['acceptance']:g} ({how}): {spec['tokens_per_step']:.2f} tokens per request per step; the bands are "
        "of runs without speculation"
    ]


def _percentile_lines(sv: dict) -> list[str]:
    """p50 / p90 / p99 of TTFT, TPOT and end-to-end latency over the replayed requests."""
    pct = sv.get("percentiles_ms") if sv else None
    if not pct:
        return []
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "e2e"}
    parts = [
        f"{names[k]} " + " / ".join(_dur(p[q] / 1e3) for q in ("p50", "p90", "p99"))
        for k, p in pct.items()
        if k in names
    ]
    return [f"p50 / p90 / p99       {'; '.join(parts)} (over the replayed requests)"]


def _sla_line(est: InferenceEstimate) -> str:
    parts = [
        f"{k.removesuffix('_ms').upper()} <= {v['target']:g} ms: {'met' if v['met'] else 'MISSED'} "
        f"({v['predicted']:.2f} ms)"
        for k, v in est.sla.items()
    ]
    return "; ".join(parts)


def inference_text(est: InferenceEstimate, model: ModelSpec, cluster: ClusterSpec, w: Workload) -> str:
    gpus = cluster.num_gpus or est.config.gpus
    mem = est.memory
    sv, bd = est.serving, est.bands
    lines = [
        f"{model_label(model)} on {gpus} x {cluster.device.name} ({cluster.name}, "
        f"{_nodes(gpus, cluster)}), "
        f"serving {est.batch} concurrent request{'s' if est.batch != 1 else ''} "
        f"({est.batch_per_replica} per replica x {est.config.dp}), {w.input_len} in / {w.output_len} out tokens, "
        f"{w.dtype} weights, {est.kv_dtype} KV cache",
        f"config: {serving_config_line(est)}",
        f"engine: {_engine_line(sv)}",
        *speculation_lines((sv or {}).get("speculation")),
        "",
        f"TTFT                  {_dur(est.ttft_s)}{_band(bd, 'ttft_ms', 1e-3, est.ttft_s)}",
        f"TPOT                  {_dur(est.tpot_s)}{_band(bd, 'tpot_ms', 1e-3, est.tpot_s)} ("
        + ("a plain " if sv.get("speculation") else "")
        + f"decode step alone {_dur(est.decode_step_s)}; other requests' prefill chunks share or interleave with "
        "its steps)",
        f"end-to-end latency    {_dur(est.e2e_latency_s)}",
        *_percentile_lines(sv),
        f"output tokens/s       {est.tokens_per_s:,.1f} ({est.tokens_per_s_per_replica:,.1f} per replica, "
        f"{est.tokens_per_s_per_gpu:,.1f} per GPU)"
        + (f", 80% band {bd['tokens_per_s'][0]:,.0f}-{bd['tokens_per_s'][1]:,.0f}" if "tokens_per_s" in bd else ""),
        f"requests/s            {est.requests_per_s:.3f}",
        f"KV cache              {est.kv_cache_bytes_per_token:,.0f} B per token (whole model), "
        f"{est.kv_cache_bytes_per_sequence_per_gpu / GiB:.3f} GiB per sequence per GPU",
        f"max concurrency       {est.max_concurrency} ({est.max_concurrency_per_replica} per replica)",
        f"peak memory/GPU       {_gib(est.peak_memory_bytes)} GiB of {_gib(est.hbm_bytes)} GiB HBM "
        f"(weights {_gib(mem['weights_bytes'])}, KV {_gib(mem['kv_cache_bytes'])}, "
        f"workspace {_gib(mem['workspace_bytes'])}, reserved {_gib(mem['reserved_bytes'])})",
        f"fits                  {'yes' if est.fits else 'NO'}",
        f"decode HBM use        {100 * est.decode_hbm_utilization:.0f} % of peak bandwidth",
    ]
    if est.sla:
        lines.append(f"latency targets       {_sla_line(est)}")
    if "basis" in bd:
        lines.append(f"bands                 {bd['basis']}")
    lines += [
        "",
        "time breakdown (one prefill chunk alone; one decode step of the admitted requests)",
        *_breakdown_lines(est),
        "",
        "communication overlap",
        *_overlap_lines(est),
    ]
    if est.notes:
        lines += ["", "notes:", *(f"  - {n}" for n in est.notes)]
    return "\n".join(lines)


def launch_lines(launch: dict) -> list[str]:
    """The plan as each engine's command line (:func:`planner.emit_serving.serving_launch`); a
    plan an engine cannot run exactly says so (its notes name what differs)."""
    from search.infer import ENGINES

    out = ["launch (set MODEL to the checkpoint path or Hugging Face id)"]
    for name, d in launch.items():
        exact = "" if d.get("exact", True) else " (not this plan exactly, see notes)"
        out.append(f"  {ENGINES[name].title}{exact}: {d['command']}")
        out += [f"    note: {n}" for n in d["notes"]]
    return out
