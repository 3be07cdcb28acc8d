"""Replay a serving engine's step loop: continuous batching, chunked prefill, admission and queueing.

``simulate(cost, scheduler, ...)`` runs the loop of :class:`~costmodel.serving.engines.SchedulerSpec`
over requests of ``input_len`` prompt and ``output_len`` generated tokens and returns the means a
serving benchmark reports. Load is either

* a **closed loop** of ``concurrency`` clients (vLLM ``benchmark_serving --max-concurrency C
  --request-rate inf``, SGLang ``bench_serving --max-concurrency``, genai-perf
  ``--concurrency``): ``C`` requests start at time 0 and each finished request is replaced by a
  new one until ``num_requests`` have been sent; or
* **open-loop arrivals** at ``request_rate`` requests/s (seeded, so deterministic): Poisson, or
  with ``arrival_cv`` != 1 Gamma-distributed gaps of the same mean and that coefficient of
  variation (burstier above 1): vLLM ``benchmark_serving --burstiness B`` draws Gamma gaps of shape B,
  that is cv = 1/sqrt(B).

Closed-loop clients out of step (``stagger``, what :func:`costmodel.serving.inference.evaluate_inference`
runs): real clients do not stay synchronised (their requests end at different steps: lengths and
timing vary). A lockstep replay of identical requests sent at time 0 puts every client's prompt
into one prefill batch each cycle: issue 40 found 1.05 s TTFT for 16 SGLang clients (Llama-3.1-70B
TP8, 8 H200) against 125 ms for Poisson arrivals at a similar mean concurrency. With ``stagger`` the first
requests arrive spread over one request's cycle, the phase such a loop settles into; the
clients keep their requests identical (``output_spread`` > 0 instead draws each output length
uniformly within +-that fraction of ``output_len``). Without it they all start at time 0.

When a closed loop's next request reaches the scheduler (issue 40): ``reissue_s`` after the step that ended the
client's last request (the bench tool sends it once the last chunk is back,
:func:`costmodel.serving.engine_host.reissue_s`), so it waits for the step the engine runs meanwhile (0: admitted
in the next step); with ``sched.overlap`` (SGLang's overlap loop, :mod:`costmodel.serving.engines`) a step's batch
is chosen when the step before it starts, so a request arriving mid-step is scheduled two steps on, and an eager
prefill's host launch (``cost.host_s``) overlaps the step before: ``max(GPU, launch end - step start)``.

A benchmark's own requests (``lengths``, ``cached``; issue 40): each request's prompt and output tokens in the order
sent, and its prompt tokens already in the engine's prefix cache, of which it prefills the rest and at least the last
(:func:`costmodel.serving.replay_stats.request_lengths`); its decodes read the whole prompt.

Open loop: an arrival rate the engine cannot serve is reported as such (``overloaded``, the
served rate and the growth of the queue, :func:`_overload`) rather than as the means of a finite
replay. Percentiles (p50/p90/p99) of TTFT, TPOT and e2e come from the same requests as the means.

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

from costmodel.spec.errors import SpecError
from costmodel.serving.engines import SchedulerSpec
from costmodel.serving.speculative import step_s
from costmodel.serving.replay_stats import ServingStats, _of_sorted, _overload, percentile, request_lengths  # noqa: F401

#: closed-loop benchmarks send this many requests per client unless told otherwise
REQUESTS_PER_CLIENT = 8
MIN_REQUESTS = 16
#: open-loop replays send this many requests unless told otherwise (enough for p99 and for the queue's trend)
OPEN_LOOP_REQUESTS = 200


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
    output_spread: float = 0.0,
    arrival_cv: float = 1.0,
    stagger: bool = False,
    reissue_s: float = 0.0,
    lengths=None,
    cached=None,
    speculation=None,
) -> ServingStats:
    """Run the engine loop (module doc). ``cost.time_s(tokens=, sampled=, prefill_pairs=,
    decode_ctx=, micro_batches=)`` prices one step (:class:`costmodel.serving.step.StepCost`).
    ``reissue_s`` and ``sched.overlap``: when a closed loop's next request reaches the scheduler (module doc).
    ``lengths``: each request's ``(prompt, output)`` tokens in the order the requests are sent (a benchmark whose
    draws are known, ``num_requests`` of them; ``input_len`` / ``output_len`` stay the run's means, for ``stagger``);
    ``cached``: each request's prompt tokens already in the engine's prefix cache (module doc).
    ``speculation``: a :class:`costmodel.serving.speculative.Speculation`: each decode step is K draft passes and
    one verify pass of ``1 + K`` tokens per decoding request, and emits ``per_step`` tokens per request (so a
    request takes ``Speculation.steps(output)`` decode steps and its context grows ``per_step`` a step)."""
    I, O, T = input_len, output_len, sched.token_budget
    _check_int("input_len", I)
    _check_int("output_len", O)
    _check_int("kv_capacity", kv_capacity, 0)
    if not (isinstance(output_spread, (int, float)) and 0 <= output_spread < 1):
        raise SpecError("output_spread", output_spread, "a fraction in [0, 1)")
    if not (isinstance(arrival_cv, (int, float)) and math.isfinite(arrival_cv) and arrival_cv > 0):
        raise SpecError("arrival_cv", arrival_cv, "a positive coefficient of variation (1 = Poisson)")
    if not (isinstance(reissue_s, (int, float)) and math.isfinite(reissue_s) and reissue_s >= 0):
        raise SpecError("reissue_s", reissue_s, "a non-negative number of seconds")
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
    n_req = num_requests or (
        max(MIN_REQUESTS, REQUESTS_PER_CLIENT * concurrency) if concurrency is not None else OPEN_LOOP_REQUESTS
    )
    _check_int("num_requests", n_req)
    if concurrency is not None:
        n_req = max(n_req, concurrency)
    # per request (index: rid): prompt and output tokens, and the prompt tokens in the prefix cache (module doc)
    ilen, olen, pre = request_lengths(lengths, cached, n_req, I)
    if not sched.chunked and max(a - c for a, c in zip(ilen, pre)) > T:
        raise SpecError("token_budget", T, f">= every prompt: {sched.engine} does not chunk prompts here")

    arrivals: list = []  # future arrivals, a heap of (time, rid) (ascending lists as built below)
    via_back = reissue_s > 0 or sched.overlap  # a client's next request among them (else waiting at once)
    waiting: deque = deque()  # rids in arrival order
    # per request (index: rid; rids are issued in order, every one of the n_req): arrival, admission,
    # first token, finish, and the three latencies
    arr, adm, first, fin = [0.0] * n_req, [0.0] * n_req, [0.0] * n_req, [0.0] * n_req
    ttft, tpot, e2e = [0.0] * n_req, [0.0] * n_req, [0.0] * n_req
    if olen is not None:
        pass
    elif output_spread == 0 or O == 1:
        olen = [O] * n_req
    else:  # uniform over O * (1 +- spread), mean O: clients whose requests end at different steps (drawn in rid order)
        lrng = random.Random(seed + 1)
        olen = [max(1, round(O * (1 + output_spread * (2 * lrng.random() - 1)))) for _ in range(n_req)]

    # decode steps of each request after its first token, and the tokens its context grows by a step (speculation)
    if speculation is None:
        nsteps, E = [o - 1 for o in olen], 1
    else:
        nsteps, E = [speculation.steps(o) for o in olen], speculation.per_step
    if concurrency is not None:
        issued = concurrency
        # stagger: the clients' first requests spread over one request's life (period below), the
        # phase a closed loop of real clients settles into; otherwise all at time 0 (lockstep)
        period = _cycle_s(cost, concurrency, I, O, T, speculation) if stagger else 0.0
        for r in range(concurrency):
            arr[r] = r * period / concurrency
            if r and stagger:
                arrivals.append((arr[r], r))
            else:
                waiting.append(r)
    else:
        rng, ta = random.Random(seed), 0.0
        k = 1.0 / (arrival_cv * arrival_cv)
        for r in range(n_req):
            # Poisson (cv 1): exponential gaps; otherwise Gamma gaps of the same mean and the given cv
            ta += rng.expovariate(request_rate) if arrival_cv == 1 else rng.gammavariate(k, 1.0 / (request_rate * k))
            arrivals.append((ta, r))
            arr[r] = ta
        issued = n_req
    closed = concurrency is not None

    prefilling: deque = deque()  # [rid, prompt tokens done], admitted
    # decoding requests as finish tick * n_req + rid (one int orders as the pair (tick, rid))
    heap: list = []
    g0 = [0] * n_req  # the tick at which a request's decoding began
    g0sum, isum, d, G, t = 0, 0, 0, 0, 0.0  # isum: the decoding requests' prompt tokens
    done_n, steps, busy_integral = 0, 0, 0.0
    chunk_count = 0
    pp = max(1, micro_batches_max)

    def finish(rid: int, at: float) -> None:  # a request of one output token (the loop inlines the rest)
        nonlocal done_n, issued
        done_n += 1
        tpot[rid] = 0.0
        e2e[rid] = at - arr[rid]
        fin[rid] = at
        if closed and issued < n_req:  # the client sends its next request
            arr[issued] = at + reissue_s
            if via_back:
                heappush(arrivals, (arr[issued], issued))
            else:
                waiting.append(issued)
            issued += 1

    lines: dict = {}  # (decodes, micro-batches[, context octave]) -> (time at no context, slope)
    octaves = bool(getattr(cost, "ctx_octaves", False))
    chunked, mixed = sched.chunked, sched.mixed
    need, bound = (0 if chunked else max(a - c for a, c in zip(ilen, pre))), False  # ServingStats.budget_need
    heappop, heappush = heapq.heappop, heapq.heappush
    # cost.time_s by position (StepCost.price), else through its keywords
    price = getattr(cost, "price", None) or (
        lambda tokens, sampled, pairs, ctx, mm: cost.time_s(
            tokens=tokens, sampled=sampled, prefill_pairs=pairs, decode_ctx=ctx, micro_batches=mm
        )
    )

    def decode_step(d, ctx, running):  # a step of d decodes reading ctx cached tokens, speculating or not
        return step_s(price, cost, speculation, d, ctx, min(pp, max(1, running)))

    # overlap (module doc): a batch is chosen, and an eager prefill's host launch starts, at the step before's start
    overlap = sched.overlap
    host = getattr(cost, "host_s", 0.0) if overlap else 0.0
    gpu_price = cost.gpu_price if host > 0 else None
    prev_dt, cpu_free = 0.0, 0.0  # the last step's time; when the host finished launching the last prefill

    while done_n < n_req:
        v = t if not overlap else (cpu_free if cpu_free > t - prev_dt else t - prev_dt)  # arrivals seen by now
        while arrivals and arrivals[0][0] <= v:
            waiting.append(heappop(arrivals)[1])
        running = len(prefilling) + d
        # decodes run unless the engine does not mix them with prompts and a prompt can be prefilled
        decode_now = d > 0 and (mixed or not (prefilling or (waiting and running < limit)))
        # the step's prompt chunks, priced as they are scheduled (the prompts advance at once: nothing
        # reads them again before the step ends): causal pairs (step.chunk_pairs, summed in schedule
        # order), prompt tokens, prompts completing
        chunks, pairs, ptokens, completing, cut = 0, 0, 0, 0, False
        if mixed or not decode_now:
            budget = T - (d if decode_now else 0)
            for e in prefilling:
                if budget <= 0:
                    break
                done = e[1]
                left = ilen[e[0]] - done
                c = (left if left < budget else budget) if chunked else (left if left <= budget else 0)
                if c <= 0:
                    break
                chunks += 1
                pairs += c * (done + c / 2.0)
                ptokens += c
                e[1] = done + c
                if c < left:
                    cut = True
                else:
                    completing += 1
                budget -= c
            while (
                waiting and budget > 0 and running < limit and (chunked or ilen[waiting[0]] - pre[waiting[0]] <= budget)
            ):
                rid = waiting.popleft()
                adm[rid] = t
                done, left = pre[rid], ilen[rid] - pre[rid]
                c = left if left < budget else budget
                prefilling.append([rid, done + c])
                running += 1
                chunks += 1
                pairs += c * (done + c / 2.0)
                ptokens += c
                if c < left:
                    cut = True
                else:
                    completing += 1
                budget -= c
            # the budget decided nothing this step when every prompt in flight got the rest of its
            # prompt (only the last chunk can be cut) and admission stopped for want of requests or
            # room; then any budget of at least the tokens scheduled schedules the same (once it decided
            # a step, the replay stands for its own budget only, and need is no longer read)
            if bound:
                pass
            elif chunks != len(prefilling) or (waiting and running < limit) or cut:
                bound = True
            elif chunks and T - budget > need:
                need = T - budget
        if not chunks and not decode_now:
            if arrivals:  # idle until the next request arrives (an idle loop polls: seen at once)
                t = max(t, arrivals[0][0])
                prev_dt = 0.0
                continue
            raise SpecError("kv_capacity", kv_capacity, "enough for one request (the engine cannot progress)")
        # cached tokens the decodes read at tick G+1: each its prompt, its first token and E a decode step
        ctx0 = (isum + d * (G + 1) - g0sum if E == 1 else isum + d + E * (d * G - g0sum)) if decode_now else 0
        if not chunks and not (waiting and running < limit):
            # decode-only stretch up to the next finish (or arrival): context grows d tokens a step
            k = heap[0] // n_req - G
            key = (d, pp if running >= pp else (running if running > 1 else 1))
            if octaves:  # piecewise linear: the secant over the octave of the mean context (StepCost.ctx_octaves)
                key = (*key, max(0, int(math.log2(max(ctx0 / d, 1.0)))))
            line = lines.get(key)
            if octaves:  # the run stops at the octave's end; the next one takes its own line
                k = max(1, min(k, math.ceil((d * 2.0 ** (key[2] + 1) - ctx0) / (d * E))))
            if line is None and octaves:
                c1, c2 = d * 2.0 ** key[2], d * 2.0 ** (key[2] + 1)
                t1, t2 = decode_step(d, c1, running), decode_step(d, c2, running)
                line = lines[key] = (t1 - (t2 - t1) / (c2 - c1) * c1, (t2 - t1) / (c2 - c1) * d)
            elif line is None:  # a decode step's time is linear in the context it reads
                b0 = decode_step(d, 0.0, running)
                line = lines[key] = (b0, (decode_step(d, 1e6, running) - b0) / 1e6 * d)
            base, slope = line  # slope: the time of d more context tokens; per step the context grows d * E
            grow = slope * E
            # k steps take k * (base + slope / d * ctx0) + grow * k * (k - 1) / 2 (written out below)
            if arrivals and running < limit:
                gap = arrivals[0][0] - t
                if gap <= 0:  # arrived, not seen yet (overlap): one step, then the scheduler sees it
                    k = 1
                elif k * (base + slope / d * ctx0) + grow * k * (k - 1) / 2 > gap:  # stop at the first step past it
                    a, b = grow / 2, base + slope / d * ctx0 - grow / 2
                    n = math.ceil((-b + math.sqrt(b * b + 4 * a * gap)) / (2 * a)) if a > 0 else math.ceil(gap / b)
                    k = max(1, min(k, n))
            dt = k * (base + slope / d * ctx0) + grow * k * (k - 1) / 2
            if overlap:
                prev_dt = base + slope / d * ctx0 + grow * (k - 1)  # the stretch's last step
            t += dt
            busy_integral += running * dt
            G += k
            steps += k
        else:
            dd = d if decode_now else 0
            mm = pp if running >= pp else (running if running > 1 else 1)
            if gpu_price is not None and chunks:  # eager prefill launched from the iteration's start (overlap)
                cpu_free = max(cpu_free, t - prev_dt) + host
                dt = max(step_s(gpu_price, cost, speculation, dd, ctx0, mm, ptokens, completing, pairs), cpu_free - t)
            else:
                dt = step_s(price, cost, speculation, dd, ctx0, mm, ptokens, completing, pairs)
            if overlap:
                prev_dt = dt
            t += dt
            busy_integral += running * dt
            steps += 1
            if decode_now:
                G += 1
            chunk_count += chunks
        due = (G + 1) * n_req  # the decodes whose last token was this step's (finish tick <= G)
        while heap and heap[0] < due:
            rid = heappop(heap) % n_req
            d -= 1
            g0sum -= g0[rid]
            isum -= ilen[rid]
            done_n += 1
            tpot[rid] = (t - first[rid]) / (olen[rid] - 1)  # more than one output token: it decoded
            e2e[rid] = t - arr[rid]
            fin[rid] = t
            if closed and issued < n_req:  # the client sends its next request
                arr[issued] = t + reissue_s
                if via_back:
                    heappush(arrivals, (arr[issued], issued))
                else:
                    waiting.append(issued)
                issued += 1
        while prefilling and prefilling[0][1] >= ilen[prefilling[0][0]]:
            rid = prefilling.popleft()[0]
            first[rid] = t
            ttft[rid] = t - arr[rid]
            if olen[rid] == 1:
                finish(rid, t)
            else:
                g0[rid] = G
                g0sum += G
                isum += ilen[rid]
                d += 1
                heappush(heap, (G + nsteps[rid]) * n_req + rid)
    steady = measure == "steady" and concurrency is not None and n_req > concurrency
    ids = range(concurrency, n_req) if steady else range(n_req)
    n = len(ids)

    def mean(d):  # summed in the order of ids
        return sum(map(d.__getitem__, ids)) / n

    def sorted_of(d):  # for percentile, once for its three quantiles
        return sorted(map(d.__getitem__, ids))

    mean_e2e = mean(e2e)
    rps = concurrency / mean_e2e if steady else n_req / t
    over = _overload(arr, adm, fin, request_rate) if concurrency is None else {}
    return ServingStats(
        ttft_s=mean(ttft),
        tpot_s=mean(tpot),
        e2e_s=mean_e2e,
        queue_s=sum(adm[i] - arr[i] for i in ids) / n,
        duration_s=t,
        output_tokens_per_s=rps * mean(olen),
        requests_per_s=rps,
        running_mean=busy_integral / t,
        admitted_limit=limit,
        steps=steps,
        prefill_steps_per_request=chunk_count / n_req,
        requests=n_req,
        budget_need=None if bound else need,
        percentiles={
            name: {f"p{q}": _of_sorted(xs, q) for q in (50, 90, 99)}
            for name, xs in (("ttft_s", sorted_of(ttft)), ("tpot_s", sorted_of(tpot)), ("e2e_s", sorted_of(e2e)))
        },
        **over,
    )


def _cycle_s(cost, C: int, I: int, O: int, T: int, speculation=None) -> float:
    """About one client's request cycle with ``C`` clients decoding: ``O`` decode steps of ``C``
    requests at the mean context (what spreads a closed loop's clients over a cycle,
    :func:`simulate` ``stagger``; only the spread of the first requests depends on it); with ``speculation``, its
    verify steps (:func:`costmodel.serving.speculative.step_s`), one per ``per_step`` tokens."""

    def price(tokens, sampled, pairs, ctx, mm):
        return cost.time_s(tokens=tokens, sampled=sampled, prefill_pairs=pairs, decode_ctx=ctx, micro_batches=mm)

    steps = O if speculation is None else speculation.steps(O) + 1
    return steps * step_s(price, cost, speculation, C, C * (I + O / 2))
