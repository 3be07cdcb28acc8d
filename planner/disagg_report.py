"""``recommend --mode infer --disagg auto|on|off``: aggregated vs disaggregated (xPyD) serving, each
plan's goodput (requests/s meeting the p90 targets), the choice, and the launch lines of every pool.

``auto`` (the default) compares when a TTFT or TPOT target is given (goodput needs a target),
``on`` always, ``off`` never. The search is :func:`search.infer_disagg.solve_disagg`.

Launch flags of the pools, checked against the engines' own declarations:

* vLLM: ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'`` on a
  prefill server, ``"kv_role":"kv_consumer"`` on a decode server (``KVTransferConfig`` in
  ``vllm/config/kv_transfer.py`` at vllm-project/vllm 007c643b: ``kv_role`` one of ``kv_producer``,
  ``kv_consumer``, ``kv_both``; ``docs/features/nixl_connector_usage.md`` at 026c83f9, "Multi-Instance
  Setup"); a proxy routes each request to a prefiller then a decoder (vLLM's
  ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``, or Dynamo).
* SGLang: ``--disaggregation-mode prefill|decode`` (choices ``null``, ``prefill``, ``decode``) and
  ``--disaggregation-transfer-backend mooncake`` (SGLang's default backend; ``nixl`` is the other
  choice) from ``server_args.py`` (sgl-project/sglang); a ``sglang_router`` in PD mode routes.
* TensorRT-LLM: its disaggregated serving is a ``trtllm-serve disaggregated`` YAML, not emitted.
"""

from __future__ import annotations

import json
import math

from costmodel.serving.disagg import PREFILL_CHUNK, Z90
from search.infer import InferProblem
from search.infer_disagg import DisaggResult, p90, solve_disagg

from .emit_serving import engine_launch

DISAGG_MODES = ("auto", "on", "off")
#: each engine's flags for a prefill / decode server
ROLE_FLAGS = {
    "vllm": {
        role: [
            "--kv-transfer-config",
            json.dumps({"kv_connector": "NixlConnector", "kv_role": kv}, separators=(",", ":")),
        ]
        for role, kv in (("prefill", "kv_producer"), ("decode", "kv_consumer"))
    },
    "sglang": {
        role: ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]
        for role in ("prefill", "decode")
    },
}


def add_arguments(g) -> None:
    g.add_argument(
        "--disagg",
        choices=DISAGG_MODES,
        default=None,
        help="compare aggregated with disaggregated prefill/decode pools (xPyD) by goodput, requests/s "
        "meeting the p90 targets, and print each pool's launch lines: auto (default) when a TTFT or TPOT "
        "target is given, on, off",
    )


def wanted(args, p: InferProblem) -> bool:
    mode = getattr(args, "disagg", None) or "auto"
    return mode == "on" or (mode == "auto" and bool(p.ttft_target_s or p.tpot_target_s))


def compare(args, p: InferProblem, r) -> DisaggResult | None:
    """The comparison for ``recommend`` (``None`` when not wanted)."""
    return solve_disagg(p, aggregated=r) if wanted(args, p) else None


def _quote(a: str) -> str:
    return f"'{a}'" if a.startswith("{") else a


def pool_launches(p: InferProblem, d: DisaggResult) -> list[dict]:
    """One launch per pool of the disaggregated plan: ``{"role", "instances", "command", "notes"}``."""
    e = d.disaggregated
    if e is None:
        return []
    engine = p.engine or "vllm"
    n = e.at_goodput.get("decode_running_per_replica", 1.0)
    seqs = {
        "prefill": max(1, PREFILL_CHUNK // p.input_len),
        "decode": max(1, min(e.decode_cap_per_replica, math.ceil(n + Z90 * math.sqrt(n)))),
    }
    out = []
    for pool in (e.prefill, e.decode):
        lay = engine_launch(
            engine,
            pool.config,
            input_len=p.input_len,
            output_len=p.output_len,
            batch_per_replica=seqs[pool.role],
            kv_dtype=p.kv_dtype,
            dtype=p.dtype,
            prefill_tokens=PREFILL_CHUNK if pool.role == "prefill" else None,
            moe=p.model.is_moe,
            # the decode pool drafts and verifies (costmodel.serving.disagg)
            speculation=p.speculation.to_dict() if p.speculation is not None and pool.role == "decode" else None,
        )
        notes = list(lay["notes"])
        args = list(lay["args"])
        if engine in ROLE_FLAGS:
            args += ROLE_FLAGS[engine][pool.role]
        else:
            notes.append("TensorRT-LLM disaggregated serving (trtllm-serve disaggregated, a YAML) is not emitted")
        head = lay["head"]
        out.append(
            {
                "role": pool.role,
                "instances": pool.instances,
                "args": args,
                "command": " ".join([head, *map(_quote, args)]),
                "notes": notes,
            }
        )
    return out


def _plan(c) -> str:
    return f"tp={c.tp} dp={c.dp} ep={c.ep}"


def lines(p: InferProblem, d: DisaggResult) -> list[str]:
    out = [
        "",
        f"aggregated vs disaggregated (goodput: requests/s meeting the p90 targets; compared in {d.time_s:.2f} s)",
    ]
    a = d.aggregated_best
    if a is not None:
        ttft, real = p90(a, "ttft")
        tpot, _ = p90(a, "tpot")
        what = "p90" if real else "mean"
        out.append(
            f"  aggregated:    {d.aggregated_goodput_rps:.2f} req/s  {_plan(a.config)} on {a.config.gpus} GPUs, "
            f"{a.batch_per_replica}/replica: TTFT {what} {ttft * 1e3:.0f} ms, TPOT {what} {tpot * 1e3:.1f} ms"
        )
    else:
        out.append("  aggregated:    0 req/s (no aggregated plan meets the p90 targets)")
    e = d.disaggregated
    if e is not None and e.goodput_rps > 0:
        g = e.at_goodput
        out.append(
            f"  disaggregated: {e.goodput_rps:.2f} req/s  {e.label}: prefill {e.prefill.instances} x ({_plan(e.prefill.config)}), "
            f"decode {e.decode.instances} x ({_plan(e.decode.config)}); TTFT p90 {g['ttft_ms']['p90']:.0f} ms, "
            f"TPOT p90 {g['tpot_ms']['p90']:.1f} ms"
        )
        out.append(
            f"    prefill {e.prefill_s * 1e3:.1f} ms/prompt, KV {e.transfer_bytes / 2**20:.0f} MiB/request over "
            f"{'NVLink' if e.link == 'nvlink' else 'the NIC (RDMA)'} in {e.transfer_s * 1e3:.2f} ms; capacity: prefill "
            f"{e.prefill_capacity_rps:.2f}, decode {e.decode_capacity_rps:.2f} req/s ({d.splits} splits scored)"
        )
    else:
        out.append(f"  disaggregated: 0 req/s (no pool split meets the p90 targets; {d.splits} splits scored)")
    out.append(f"  chosen: {d.choice}")
    out += [f"  note: {n}" for n in d.notes]
    if d.choice == "disaggregated":
        out.append(
            f"launch, every pool ({p.engine or 'vllm'}; route requests prefill -> decode with the engine's PD router)"
        )
        for lay in pool_launches(p, d):
            out.append(f"  {lay['role']} x{lay['instances']}: {lay['command']}")
            out += [f"     note: {n}" for n in lay["notes"]]
    return out


def as_json(p: InferProblem, d: DisaggResult) -> dict:
    a = d.aggregated_best
    return {
        "choice": d.choice,
        "time_s": d.time_s,
        "splits_scored": d.splits,
        "aggregated": None
        if a is None
        else {
            "config": a.config.to_dict(),
            "batch_per_replica": a.batch_per_replica,
            "goodput_rps": d.aggregated_goodput_rps,
            "ttft_p90_ms": p90(a, "ttft")[0] * 1e3,
            "tpot_p90_ms": p90(a, "tpot")[0] * 1e3,
            "percentiles_from_replay": p90(a, "ttft")[1],
        },
        "disaggregated": None if d.disaggregated is None else d.disaggregated.to_dict(),
        "launch": pool_launches(p, d) if d.choice == "disaggregated" else [],
        "notes": d.notes,
    }
