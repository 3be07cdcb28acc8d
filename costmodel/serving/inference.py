"""``evaluate_inference(model, cluster, workload, config) -> InferenceEstimate``: serving cost.

Forward passes only, with the op inventory of training (:func:`costmodel.physics.kernels.compute.layer_ops`):

* **prefill** of a batch of prompts: ``mb`` prompts of ``input_len`` tokens, compute-bound;
* **decode step**: one new token for each running sequence (``decode=True``): GEMMs with
  ``m = batch`` rows read every weight on the GPU once, attention reads the KV cache of the
  whole context, so a step is HBM-bound at small batch (DIGEST section 9).

Communication per layer, exposed through the unified formula (:func:`costmodel.compose.overlap.exposed_s`):
the TP AllReduce after the row-parallel GEMMs sits on the critical path (r = 0) unless it is
split into ``chunks`` pieces pipelined with the GEMM, as are the SP AllGather/ReduceScatter
(same placement as training's forward, :func:`costmodel.compose.comm_ledgers._tp_ledger`); EP dispatch is
exposed, the combine pipelines with the expert GEMMs when chunked. Small TP all-reduces use
the direct (one-/two-shot) algorithm of inference engines. DP replicas are independent.

PP is a throughput pipeline: a replica's ``B`` sequences run as ``m = min(pp, B)``
micro-batches (vLLM's virtual engines), so the time between two tokens of a sequence is
``max(sum of stage times + P2P, m * slowest stage)``; with ``m < pp`` stages idle (bubbles).

Serving model (issue 24): the engine's own step loop, not one big prefill batch.
:mod:`costmodel.serving.engines` holds each engine's scheduler (vLLM V1: chunked prefill mixed
with decodes under ``max_num_batched_tokens``, ``max_num_seqs``; SGLang: ``chunked_prefill_size``,
prefill and decode steps apart; TensorRT-LLM: in-flight batching under ``max_num_tokens``,
whole prompts); :mod:`costmodel.serving.step` prices one step of any mix of prompt chunks and
decodes from the layer costs below; :mod:`costmodel.serving.scheduler` replays the loop for a closed
loop of ``global_batch / dp`` clients per replica (or Poisson arrivals), admitting requests
while the KV cache and the running-request limit allow and queueing the rest. TTFT = queueing
+ the steps the prompt spans (+ SGLang's host path, with its eager prefill a floor under its prefill steps:
:mod:`costmodel.serving.engine_host`); TPOT = (finish - first token) / (output_len - 1), the mixed or
interleaved steps included; output tokens/s from the simulated load (steady state by default).
The ``prefill`` and ``decode`` phases of the breakdown are one prompt chunk alone and one decode
step of the admitted requests at their mean context; their overlap ledgers are the reported
``overlap``. Bands: :mod:`costmodel.trust.serving_band`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.serving.memory import serving_memory
from costmodel.physics.kernels.kvcache import kv_bytes_per_token, kv_dtype_bytes
from costmodel.serving.scheduler import simulate
from costmodel.serving.engines import allreduce_table_of, engine_cluster, gemm_table_of, scheduler_for
from costmodel.serving.engine_host import engine_step_cost, host_report, reissue_s, request_path_s, with_request_path
from costmodel.serving.step import step_cost
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.serving.phase import _phase

#: vLLM's step token budget on a >= 70 GiB GPU (``max_num_batched_tokens``, :mod:`costmodel.serving.engines`)
PREFILL_TOKENS = 8192
ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@dataclass(frozen=True)
class InferenceEstimate:
    """Predicted serving cost of one plan (SI units; ``to_dict`` adds milliseconds)."""

    config: ParallelConfig
    batch: int  # concurrent requests over all replicas
    batch_per_replica: int
    prefill_batch: int  # prompts prefilled together
    ttft_s: float
    tpot_s: float
    decode_step_s: float  # one decode step alone (no interleaved prefills)
    e2e_latency_s: float
    tokens_per_s: float  # output tokens/s, all replicas
    tokens_per_s_per_replica: float
    tokens_per_s_per_gpu: float
    requests_per_s: float
    kv_cache_bytes_per_token: float  # whole model, one token
    kv_cache_bytes_per_sequence_per_gpu: float
    max_concurrency: int  # over all replicas
    max_concurrency_per_replica: int
    peak_memory_bytes: float
    hbm_bytes: float
    fits: bool
    memory: dict
    breakdown: dict  # {"prefill": {...}, "decode": {...}} seconds by component
    comm_link_s: dict
    comm_exposed_s: dict
    overlap: dict  # {"prefill": {strategy: r}, "decode": {strategy: r}}
    reasons: dict
    decode_hbm_utilization: float  # bytes read per decode step / (step time * HBM bandwidth)
    kv_dtype: str = "bf16"
    sla: dict = field(default_factory=dict)
    serving: dict = field(default_factory=dict)  # the engine's scheduler settings and the simulated load
    bands: dict = field(
        default_factory=dict
    )  # 80% bands of ttft_ms, tpot_ms, tokens_per_s (costmodel.trust.serving_band)
    status: str = "ok"
    mode: str = "infer"
    notes: list = field(default_factory=list)

    @property
    def meets_sla(self) -> bool:
        return all(v["met"] for v in self.sla.values())

    def to_dict(self) -> dict:
        ms = {
            "ttft_ms": self.ttft_s,
            "tpot_ms": self.tpot_s,
            "decode_step_ms": self.decode_step_s,
            "e2e_latency_ms": self.e2e_latency_s,
        }
        return {
            "status": self.status,
            "mode": self.mode,
            "config": self.config.to_dict(),
            "batch": self.batch,
            "batch_per_replica": self.batch_per_replica,
            "prefill_batch": self.prefill_batch,
            **{k: v * 1e3 for k, v in ms.items()},
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_replica": self.tokens_per_s_per_replica,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "requests_per_s": self.requests_per_s,
            "kv_cache_dtype": self.kv_dtype,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
            "kv_cache_bytes_per_sequence_per_gpu": self.kv_cache_bytes_per_sequence_per_gpu,
            "max_concurrency": self.max_concurrency,
            "max_concurrency_per_replica": self.max_concurrency_per_replica,
            "peak_memory_bytes": self.peak_memory_bytes,
            "hbm_bytes": self.hbm_bytes,
            "fits": self.fits,
            "memory": dict(self.memory),
            "decode_hbm_utilization": self.decode_hbm_utilization,
            "breakdown": {p: dict(b) for p, b in self.breakdown.items()},
            "comm_link_s": {p: dict(b) for p, b in self.comm_link_s.items()},
            "comm_exposed_s": {p: dict(b) for p, b in self.comm_exposed_s.items()},
            "overlap": {p: dict(b) for p, b in self.overlap.items()},
            "exposed_reasons": {p: dict(b) for p, b in self.reasons.items()},
            "sla": {k: dict(v) for k, v in self.sla.items()},
            "meets_sla": self.meets_sla,
            "serving": dict(self.serving),
            "bands": {k: (list(v) if isinstance(v, list) else v) for k, v in self.bands.items()},
            "notes": list(self.notes),
        }


def validate_inference(model: ModelSpec, cluster: ClusterSpec, w: Workload, c: ParallelConfig) -> None:
    """Raise :class:`SpecError` for a plan or workload inference cannot run."""
    if w.mode != "infer":
        raise SpecError("mode", w.mode, "'infer' for an inference estimate")
    for f, what in (("input_len", "prompt tokens per request"), ("output_len", "generated tokens per request")):
        if getattr(w, f) < 1:
            raise SpecError(f, getattr(w, f), f"a positive integer ({what})")
    ctx = model.max_position_embeddings
    if ctx is not None and w.input_len + w.output_len > ctx:  # every engine refuses such a request
        what = f"at most {ctx - w.output_len} with output_len={w.output_len}" if w.output_len < ctx else "below it"
        raise SpecError(
            "input_len",
            w.input_len,
            f"{what}: prompt + output must fit the model's context of {ctx} tokens (max_position_embeddings)",
        )
    for f, ok in (
        ("cp", 1),
        ("vp", 1),
        ("zero", 0),
        ("recompute", "none"),
        ("grad_dtype", "fp32"),
        ("framework", "megatron"),
    ):
        if getattr(c, f) != ok:
            raise SpecError(f, getattr(c, f), f"{ok!r} in inference mode (not modelled for serving)")
    validate_config(model, cluster, w, replace(c, sp=False))
    if c.ep > 1 and c.tp % c.ep and not (c.pp == 1 and c.ep % c.tp == 0):
        raise SpecError(
            "ep",
            c.ep,
            f"a divisor of tp={c.tp}, or a multiple of it with pp=1 (expert groups spanning replicas, DP attention)",
        )


def _replay(sc, sched, sim: dict, memo: dict | None):
    """:func:`simulate` of ``sc`` under ``sched`` with ``sim``, or an identical replay from ``memo``
    (see :func:`evaluate_inference`). The budget enters the loop only through what it lets a step
    schedule, and the KV capacity only through ``min(capacity, max_seqs)``: the key holds the rest."""
    if memo is None:
        return simulate(sc, sched, **sim)
    cap = sim["kv_capacity"]
    limit = cap if sched.max_seqs is None else min(cap, sched.max_seqs)
    key = (
        "replay",
        (sc.model, sc.cluster, sc.dtype, sc.config, sc.kv_dtype),
        (sched.engine, sched.chunked, sched.mixed, sched.overlap, limit),
        tuple((k, v) for k, v in sorted(sim.items()) if k != "kv_capacity"),
    )
    T = sched.token_budget
    for budget, need, st in memo.get(key, ()):
        if budget == T or (need is not None and need <= T):
            return st
    st = simulate(sc, sched, **sim)
    memo.setdefault(key, []).append((T, st.budget_need, st))
    return st


def _phase_memo(memo: dict | None, *args, **kw):
    """:func:`_phase` of these arguments, once per ``memo`` (its result is only read)."""
    if memo is None:
        return _phase(*args, **kw)
    key = ("phase", args, tuple(sorted(kw.items())))
    if key not in memo:
        memo[key] = _phase(*args, **kw)
    return memo[key]


def evaluate_inference(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    config: ParallelConfig,
    *,
    kv_dtype: str = "bf16",
    prefill_tokens: int | None = None,
    engine: str = "vllm",
    max_seqs: int | None = None,
    request_rate: float | None = None,
    arrival_cv: float = 1.0,
    output_spread: float | None = None,
    stagger: bool = True,
    chunked: bool | None = None,
    num_requests: int | None = None,
    measure: str = "steady",
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
    memo: dict | None = None,
    lengths=None,
    cached=None,
    engine_memory: bool = True,
    speculation=None,
) -> InferenceEstimate:
    """Predict TTFT, TPOT, throughput and memory of serving ``workload`` with ``config`` on ``engine``.

    ``workload.global_batch`` is the number of concurrent clients over all ``dp`` replicas (a
    closed-loop benchmark, :mod:`costmodel.serving.scheduler`), or, with ``request_rate`` (requests/s
    over all replicas), the Poisson arrival rate replaces it. ``prefill_tokens`` is the
    engine's step token budget and ``max_seqs`` its running-request limit (``None``: the
    engine's default, :func:`costmodel.serving.engines.default_scheduler`); ``measure`` is
    ``"steady"`` (after the first wave) or ``"all"`` requests (:func:`costmodel.serving.scheduler.simulate`). Raises
    :class:`SpecError` for invalid input, including a model whose weights cannot fit even when
    spread over every GPU.

    ``memo``: a dict one search shares over its evaluations (:func:`search.infer.table`), holding
    replays and the two reported phases by their inputs. A replay is keyed by every input of
    :func:`~costmodel.serving.scheduler.simulate` but the token budget, and one whose budget never
    decided a step (``ServingStats.budget_need``) stands for every budget of at least what it
    scheduled: the engine loop then takes the same steps, so the figures are identical.

    ``engine_memory``: the KV pool is what the engine's default memory setting leaves
    (:mod:`costmodel.serving.kv_pool`); ``False``: the whole memory left (a static benchmark whose stated batch ran).

    ``lengths`` / ``cached``: a benchmark's own requests, each one's ``(prompt, output)`` tokens in the order sent
    and its prompt tokens already in the prefix cache (:func:`~costmodel.serving.scheduler.simulate`); the
    workload's lengths are then their means.

    ``speculation``: a :class:`~costmodel.serving.speculative.Speculation` (speculative decoding: K draft tokens a
    step, verified in one target pass); its draft's weights and KV are added to the memory.
    """
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    kv_dtype_bytes(kv_dtype)
    for name, v in (("ttft_ms", ttft_target_s), ("tpot_ms", tpot_target_s)):
        if v is not None and not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise SpecError(name, v if v is None else v * 1e3, "a positive number of milliseconds")
    for name, v in (("prefill_tokens", prefill_tokens), ("max_seqs", max_seqs)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise SpecError(name, v, "a positive integer")
    validate_inference(model, cluster, workload, config)
    cluster = engine_cluster(cluster, engine)  # the engine's own measured GEMMs (costmodel.serving.engines)
    c, w, dev = config, workload, cluster.device
    sched = scheduler_for(engine, dev, token_budget=prefill_tokens, max_seqs=max_seqs, chunked=chunked)
    I, O, T = w.input_len, w.output_len, sched.token_budget
    B = w.global_batch // c.dp
    pb = max(1, T // I)  # whole prompts one step can hold (its activation workspace)
    pool = dict(engine=engine if engine_memory else None, token_budget=T)  # the KV pool (costmodel.serving.kv_pool)
    if speculation is not None:
        pool["draft"] = speculation.method
    cap = serving_memory(model, cluster, w, c, kv_dtype, 1, pb, **pool)["max_concurrency_per_replica"]
    limit = cap if sched.max_seqs is None else min(cap, sched.max_seqs)
    admitted = max(1, min(B, limit)) if request_rate is None else max(1, limit)
    mem = serving_memory(model, cluster, w, c, kv_dtype, admitted, pb, **pool)  # raises when the weights never fit
    # the engine's eager prefill host time as a floor under its prefill steps (SGLang: costmodel.serving.engine_host)
    sc = engine_step_cost(step_cost(model, cluster, w.dtype, c, kv_dtype), engine, model, dev)
    rate = None if request_rate is None else request_rate / c.dp
    st_spread = 0.0 if output_spread is None else output_spread
    sim = dict(
        input_len=I,
        output_len=O,
        kv_capacity=max(1, cap),
        concurrency=None if rate is not None else B,
        request_rate=rate,
        num_requests=num_requests,
        micro_batches_max=c.pp,
        measure=measure,
        arrival_cv=arrival_cv,
        output_spread=st_spread,
        stagger=rate is None and stagger,
        # a closed loop's client sends its next request once the last chunk is back (SGLang: engine_host)
        reissue_s=reissue_s(engine, I) if rate is None else 0.0,
    )
    if lengths is not None:
        sim["lengths"] = tuple(tuple(x) for x in lengths)
    if cached is not None:
        sim["cached"] = tuple(cached)
    if speculation is not None:
        sim["speculation"] = speculation
    st = _replay(sc, sched, sim, memo)
    st = with_request_path(st, request_path_s(engine, I), rate is None)  # the request's host hops (SGLang)

    # the two phases the breakdown and overlap report: one prefill chunk, one decode step of the
    # admitted requests at their mean context
    n = max(1, round(st.running_mean)) if rate is not None else admitted
    m = min(c.pp, n)
    mb_dec = math.ceil(n / m)
    ctx = max(1, round(I + (O - 1) / 2))
    chunk = min(I, T)
    pf = _phase_memo(
        memo,
        model,
        cluster,
        Workload(global_batch=1, seq_len=chunk, dtype=w.dtype),
        replace(c, mb=1),
        decode=False,
        kv_dtype=kv_dtype,
        micro_batches=1,
    )
    dec = _phase_memo(
        memo,
        model,
        cluster,
        Workload(global_batch=mb_dec, seq_len=ctx, dtype=w.dtype),
        replace(c, mb=mb_dec),
        decode=True,
        kv_dtype=kv_dtype,
        micro_batches=m,
    )
    per_replica = st.output_tokens_per_s

    read = m * mem["weights_bytes"] + n * ctx * mem["kv_cache_bytes_per_token_per_gpu"]  # per GPU per decode step
    sla, notes = {}, list(mem["notes"])
    if cap >= 1:
        notes = [x for x in notes if not x.startswith("KV cache:")]
    for name, target, got in (("ttft_ms", ttft_target_s, st.ttft_s), ("tpot_ms", tpot_target_s, st.tpot_s)):
        if target is not None:
            sla[name] = {"target": target * 1e3, "predicted": got * 1e3, "met": got <= target}
    if rate is None and B > limit >= 1:
        why = "its KV cache" if limit == cap else f"its limit of {limit} running requests"
        notes.append(
            f"{B} concurrent requests per replica exceed what {ENGINE_TITLES[engine]} admits ({limit}, "
            f"{why}): the rest queue, {st.queue_s * 1e3:,.0f} ms on average before admission"
        )
    if st.overloaded:
        notes.append(
            f"OVERLOADED: {request_rate:g} requests/s offered, the engine serves about "
            f"{c.dp * st.served_rps:.3g}/s; the queue grows by {c.dp * st.queue_growth_per_s:.3g} requests/s "
            f"({st.queue_at_last_arrival * c.dp} waiting when the last of {st.requests * c.dp} arrived), so TTFT grows "
            "with the length of the run: the latencies above are of this finite replay, not a steady state"
        )
    if m < c.pp:
        notes.append(
            f"pipeline not full: {n} sequence(s) per replica < pp={c.pp}, stages idle "
            f"{100 * (1 - m * sum(dec.stage_s) / c.pp / dec.period_s):.0f}% of a decode step"
        )
    if c.ep > c.tp:
        notes.append(f"ep={c.ep} spans {c.ep // c.tp} replicas: their MoE layers run in lockstep (DP attention)")
    phases = {"prefill": pf, "decode": dec}
    serving = {
        "engine": engine,
        "gemm_table": gemm_table_of(dev),
        "allreduce_table": allreduce_table_of(dev, c.tp),
        "token_budget": T,
        "max_seqs": sched.max_seqs,
        "chunked_prefill": sched.chunked,
        "mixed_batches": sched.mixed,
        "admitted_per_replica": min(B, limit) if rate is None else limit,
        "queue_ms": st.queue_s * 1e3,
        "running_mean": st.running_mean,
        "requests_simulated": st.requests,
        "steps": st.steps,
        "prefill_steps_per_request": st.prefill_steps_per_request,
        **host_report(sc, request_path_s(engine, I)),
        **({"speculation": speculation.to_dict()} if speculation is not None else {}),
        "load": ("poisson" if arrival_cv == 1 else "gamma") if rate is not None else "closed_loop",
        "measure": measure,
        "percentiles_ms": {
            k.removesuffix("_s") + "_ms": {q: v * 1e3 for q, v in p.items()} for k, p in st.percentiles.items()
        },
        **(
            {
                "request_rate_per_s": request_rate,
                "arrival_cv": arrival_cv,
                "served_requests_per_s": c.dp * st.served_rps,
                "overloaded": st.overloaded,
                "queue_growth_per_s": c.dp * st.queue_growth_per_s,
                "queue_at_last_arrival": c.dp * st.queue_at_last_arrival,
            }
            if rate is not None
            else {"clients": "staggered" if stagger else "lockstep", "output_spread": st_spread}
        ),
    }
    return InferenceEstimate(
        config=c,
        batch=w.global_batch,
        batch_per_replica=B,
        prefill_batch=pb,
        ttft_s=st.ttft_s,
        tpot_s=st.tpot_s,
        decode_step_s=dec.period_s,
        e2e_latency_s=st.e2e_s,
        tokens_per_s=c.dp * per_replica,
        tokens_per_s_per_replica=per_replica,
        tokens_per_s_per_gpu=c.dp * per_replica / c.gpus,
        requests_per_s=c.dp * st.requests_per_s,
        kv_cache_bytes_per_token=kv_bytes_per_token(model, kv_dtype),
        kv_cache_bytes_per_sequence_per_gpu=mem["kv_cache_bytes_per_sequence_per_gpu"],
        max_concurrency=c.dp * mem["max_concurrency_per_replica"],
        max_concurrency_per_replica=mem["max_concurrency_per_replica"],
        peak_memory_bytes=mem["total_bytes"],
        hbm_bytes=dev.hbm_bytes,
        fits=cap >= 1 and mem["total_bytes"] <= dev.hbm_bytes,
        memory={k: v for k, v in mem.items() if k != "notes"},
        breakdown={p: ph.breakdown() for p, ph in phases.items()},
        comm_link_s={p: dict(ph.ledger.link_s) for p, ph in phases.items()},
        comm_exposed_s={p: dict(ph.ledger.exposed_s) for p, ph in phases.items()},
        overlap={p: ph.ledger.rates() for p, ph in phases.items()},
        reasons={
            p: {s: r for s, r in ph.ledger.reasons.items() if ph.ledger.exposed_s.get(s, 0) > 0}
            for p, ph in phases.items()
        },
        decode_hbm_utilization=min(1.0, read / (dec.period_s * dev.hbm_bw_bytes_per_s)),
        kv_dtype=kv_dtype,
        sla=sla,
        notes=notes,
        serving=serving,
    )
