"""Replay a serving engine's step loop: continuous batching, chunked prefill, admission and queueing.

``simulate(cost, scheduler, ...)`` runs the loop of :class:`~costmodel.serving.engines.SchedulerSpec`
over requests of ``input_len`` prompt and ``output_len`` generated tokens and returns the means a
serving benchmark reports. Load is either

* a **closed loop** of ``concurrency`` clients (vLLM ``benchmark_serving --max-concurrency C
  --request-rate inf``, SGLang ``bench_serving --max-concurrency``, genai-perf
  ``--concurrency``): ``C`` requests start at time 0 and each finished request is replaced by a
  new one until ``num_requests`` have been sent; or
* **Poisson arrivals** at ``request_rate`` requests/s (seeded, so deterministic).

One step (vLLM V1 ``Scheduler.schedule``; TensorRT-LLM in-flight batching): every decoding
request gets one token, then the prompts being prefilled get their next chunk, then waiting
requests are admitted in arrival order while the step's token budget lasts, the number of
running requests stays within ``max_seqs`` and the KV cache holds them (``kv_capacity``
sequences, reserved whole at admission). A prompt longer than what is left of the budget is cut
there (``chunked``) or waits for a step where it fits whole. Without ``mixed`` (SGLang's
default) a step is either a prefill batch of up to ``token_budget`` prompt tokens, run whenever
one can be formed, or a decode step of every decoding request.

Two measurements (``measure``). ``"steady"`` (the default): the means over the requests sent
after the first ``C`` (the clients' synchronised first wave, whose prompts all arrive at once,
is warm-up), and throughput by Little's law for a closed loop, ``C * output_len / mean e2e``
(e2e including the wait for admission) -- the stable-window measurement of ``perf_analyzer``,
which genai-perf (NIM's benchmark) runs. ``"all"``: every request, throughput = generated
tokens / time until the last finished, as ``benchmark_serving`` reports one run (first wave
and drain included); static-batch rows are one wave and use it.

Request timing, as the benchmarks measure it: TTFT = end of the step in which the prompt's
last chunk ran - arrival (queueing + every step the prompt spans); TPOT = (finish - first
token) / (output_len - 1), so prefill steps of other requests that interleave with a
request's decoding lengthen its TPOT; output throughput = all generated tokens / time until
the last request finished.

Steps in which only decodes run and nothing can be admitted (no waiting request, or the
engine is full) are advanced together up to the next request that finishes (or the next
arrival): their context grows by one token per step, so their time is an arithmetic series.
The loop therefore costs O(requests x prompt chunks), not O(tokens).

>>> from costmodel.serving.engines import SchedulerSpec
>>> class Flat:  # 10 ms per step whatever it holds
...     def time_s(self, **kw): return 0.010
>>> s = simulate(Flat(), SchedulerSpec(engine="vllm", token_budget=512, max_seqs=8),
...              input_len=1000, output_len=11, concurrency=1, num_requests=1, kv_capacity=8)
>>> round(s.ttft_s, 3), round(s.tpot_s, 3)  # 2 chunks of 512 + 488 tokens; then 10 decode steps
(0.02, 0.01)
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass

from costmodel.spec.errors import SpecError
from costmodel.serving.engines import SchedulerSpec
from costmodel.serving.step import chunk_pairs

#: closed-loop benchmarks send this many requests per client unless told otherwise
REQUESTS_PER_CLIENT = 8
MIN_REQUESTS = 16


@dataclass(frozen=True)
class ServingStats:
    """Means over all requests of one simulated benchmark (seconds)."""

    ttft_s: float
    tpot_s: float
    e2e_s: float
    queue_s: float  # arrival -> admission
    duration_s: float  # time until the last request finished
    output_tokens_per_s: float
    requests_per_s: float
    running_mean: float  # time-averaged running requests
    admitted_limit: int  # min(kv_capacity, max_seqs)
    steps: int
    prefill_steps_per_request: float  # steps a prompt spans, on average
    requests: int


def _check_int(name: str, v, low: int = 1) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise SpecError(name, v, f"an integer >= {low}")


def simulate(
    cost,
    sched: SchedulerSpec,
    *,
    input_len: int,
    output_len: int,
    kv_capacity: int,
    concurrency: int | None = None,
    request_rate: float | None = None,
    num_requests: int | None = None,
    micro_batches_max: int = 1,
    seed: int = 0,
    measure: str = "steady",
) -> ServingStats:
    """Run the engine loop (module doc). ``cost.time_s(tokens=, sampled=, prefill_pairs=,
    decode_ctx=, micro_batches=)`` prices one step (:class:`costmodel.serving.step.StepCost`)."""
    I, O, T = input_len, output_len, sched.token_budget
    _check_int("input_len", I)
    _check_int("output_len", O)
    _check_int("kv_capacity", kv_capacity, 0)
    if measure not in ("steady", "all"):
        raise SpecError("measure", measure, "'steady' or 'all'")
    if (concurrency is None) == (request_rate is None):
        raise SpecError("concurrency", concurrency, "given, or request_rate given instead (exactly one)")
    if concurrency is not None:
        _check_int("concurrency", concurrency)
    elif not (isinstance(request_rate, (int, float)) and math.isfinite(request_rate) and request_rate > 0):
        raise SpecError("request_rate", request_rate, "a positive number of requests per second")
    limit = kv_capacity if sched.max_seqs is None else min(kv_capacity, sched.max_seqs)
    if limit < 1:
        raise SpecError("kv_capacity", kv_capacity, "at least one sequence of input_len + output_len tokens")
    if not sched.chunked and I > T:
        raise SpecError("token_budget", T, f">= input_len={I}: {sched.engine} does not chunk prompts here")
    n_req = num_requests or max(MIN_REQUESTS, REQUESTS_PER_CLIENT * (concurrency or 1))
    _check_int("num_requests", n_req)
    if concurrency is not None:
        n_req = max(n_req, concurrency)

    arrivals: deque = deque()  # future arrivals (Poisson), times ascending
    waiting: deque = deque()  # (rid, arrival time)
    arr, adm, first = {}, {}, {}
    if concurrency is not None:
        issued = concurrency
        waiting.extend((r, 0.0) for r in range(concurrency))
        arr.update({r: 0.0 for r in range(concurrency)})
    else:
        rng, ta = random.Random(seed), 0.0
        for r in range(n_req):
            ta += rng.expovariate(request_rate)
            arrivals.append((r, ta))
            arr[r] = ta
        issued = n_req

    prefilling: deque = deque()  # [rid, prompt tokens done], admitted
    heap: list = []  # (finish tick, rid) of decoding requests
    g0: dict = {}
    g0sum, d, G, t = 0, 0, 0, 0.0
    done_n, steps, busy_integral = 0, 0, 0.0
    ttft, tpot, e2e = {}, {}, {}
    chunk_count = 0
    pp = max(1, micro_batches_max)

    def finish(rid: int, at: float) -> None:
        nonlocal done_n, issued
        done_n += 1
        tpot[rid] = (at - first[rid]) / (O - 1) if O > 1 else 0.0
        e2e[rid] = at - arr[rid]
        if concurrency is not None and issued < n_req:  # the client sends its next request
            waiting.append((issued, at))
            arr[issued] = at
            issued += 1

    def step_time(tokens, sampled, pairs, ctx, running):
        return cost.time_s(
            tokens=tokens, sampled=sampled, prefill_pairs=pairs, decode_ctx=ctx, micro_batches=min(pp, max(1, running))
        )

    while done_n < n_req:
        while arrivals and arrivals[0][1] <= t:
            waiting.append(arrivals.popleft())
        running = len(prefilling) + d
        admissible = bool(waiting) and running < limit and (sched.chunked or I <= T)
        prefill_work = bool(prefilling) or admissible
        decode_now = d > 0 and (sched.mixed or not prefill_work)
        chunks = []  # [entry, tokens]
        if sched.mixed or not decode_now:
            budget = T - (d if decode_now else 0)
            for e in prefilling:
                if budget <= 0:
                    break
                c = min(I - e[1], budget) if sched.chunked else (I - e[1] if I - e[1] <= budget else 0)
                if c <= 0:
                    break
                chunks.append([e, c])
                budget -= c
            while waiting and budget > 0 and running < limit and (sched.chunked or I <= budget):
                rid, _ = waiting.popleft()
                adm[rid] = t
                e = [rid, 0]
                prefilling.append(e)
                running += 1
                c = min(I, budget)
                chunks.append([e, c])
                budget -= c
        if not chunks and not decode_now:
            if arrivals:  # idle until the next request arrives
                t = max(t, arrivals[0][1])
                continue
            raise SpecError("kv_capacity", kv_capacity, "enough for one request (the engine cannot progress)")
        ctx0 = d * (I + G + 1) - g0sum if decode_now else 0  # cached tokens the decodes read at tick G+1
        if not chunks and not (waiting and running < limit):
            # decode-only stretch up to the next finish (or arrival): context grows d tokens a step
            k = heap[0][0] - G
            base = step_time(d, d, 0.0, 0.0, running)
            slope = (step_time(d, d, 0.0, 1e6, running) - base) / 1e6 * d  # per step, context + d
            span = lambda n: n * (base + slope / d * ctx0) + slope * n * (n - 1) / 2  # noqa: E731
            if arrivals and running < limit:
                gap = arrivals[0][1] - t
                if span(k) > gap:  # stop at the first step boundary past the arrival
                    a, b = slope / 2, base + slope / d * ctx0 - slope / 2
                    n = math.ceil((-b + math.sqrt(b * b + 4 * a * gap)) / (2 * a)) if a > 0 else math.ceil(gap / b)
                    k = max(1, min(k, n))
            dt = span(k)
            t += dt
            busy_integral += running * dt
            G += k
            steps += k
        else:
            pairs = sum(chunk_pairs(e[1], c) for e, c in chunks)
            completing = sum(1 for e, c in chunks if e[1] + c >= I)
            tokens = sum(c for _, c in chunks) + (d if decode_now else 0)
            dt = step_time(tokens, completing + (d if decode_now else 0), pairs, ctx0, running)
            t += dt
            busy_integral += running * dt
            steps += 1
            if decode_now:
                G += 1
            for e, c in chunks:
                e[1] += c
                chunk_count += 1
        while heap and heap[0][0] <= G:
            _, rid = heapq.heappop(heap)
            d -= 1
            g0sum -= g0.pop(rid)
            finish(rid, t)
        while prefilling and prefilling[0][1] >= I:
            rid = prefilling.popleft()[0]
            first[rid] = t
            ttft[rid] = t - arr[rid]
            if O == 1:
                finish(rid, t)
            else:
                g0[rid] = G
                g0sum += G
                d += 1
                heapq.heappush(heap, (G + O - 1, rid))
    steady = measure == "steady" and concurrency is not None and n_req > concurrency
    ids = range(concurrency, n_req) if steady else range(n_req)
    n = len(ids)

    def mean(d):
        return sum(d[i] for i in ids) / n

    mean_e2e = mean(e2e)
    rps = concurrency / mean_e2e if steady else n_req / t
    return ServingStats(
        ttft_s=mean(ttft),
        tpot_s=mean(tpot),
        e2e_s=mean_e2e,
        queue_s=sum(adm[i] - arr[i] for i in ids) / n,
        duration_s=t,
        output_tokens_per_s=rps * O,
        requests_per_s=rps,
        running_mean=busy_integral / t,
        admitted_limit=limit,
        steps=steps,
        prefill_steps_per_request=chunk_count / n_req,
        requests=n_req,
    )
