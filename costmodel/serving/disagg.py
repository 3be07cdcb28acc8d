"""Disaggregated serving (xPyD): a prefill pool and a decode pool, each of its own plan, and the KV
cache of every prompt moved from a prefill instance to a decode instance.

How the engines move the cache (what this module charges):

* vLLM ``NixlConnector`` (``docs/features/nixl_connector_usage.md`` at vllm-project/vllm 026c83f9):
  "When a prefill request finishes, its KV blocks are held ... waiting for the decoder to read them";
  the decoder pulls the finished request's blocks (NIXL READ over UCX: NVLink/cuda_ipc inside a node,
  RDMA between nodes). The copy starts after the whole prompt is prefilled: nothing overlaps it.
* SGLang ``--disaggregation-mode prefill|decode`` with ``--disaggregation-transfer-backend
  mooncake|nixl``: the prefill server's KVSender sends a request's pages once its forward is done
  (the decode server pre-allocates them and polls); no layer-by-layer streaming in its default path.
* NVIDIA Dynamo drives vLLM / SGLang workers with the same connectors (NIXL).

So a request's transfer is charged once, after its prefill, as
``latency + bytes / (per-GPU link bandwidth x GPUs sending)``: the prompt's KV bytes over all layers
(:func:`costmodel.physics.kernels.kvcache.kv_bytes_per_token`, MLA's latent + RoPE key for
DeepSeek), split over the prefill instance's ``tp x pp`` GPUs sending in parallel (assumption: each
rank sends its share; MLA's latent is replicated over TP ranks and the engines send one copy split by
rank), over NVLink (``cluster.intra_link``) when the whole deployment sits in one NVLink domain
(``cluster.domain``), else over the NIC (``cluster.inter_link``, one NIC per GPU).
``layerwise=True`` charges the latency once per layer instead (an engine streaming layer by layer;
none of the defaults above does).

Pools (:func:`disagg_estimate`):

* **Prefill**: ``x`` instances of plan ``P``, each of ``P.dp`` replicas, serve prompts one at a time
  (a prompt of >= a few thousand tokens fills a step; batching prompts adds little throughput and
  delays the first of them: assumption). Arrivals are Poisson at ``rate`` (or Gamma with
  ``arrival_cv``), FIFO to the first free replica: a replay of ``REQUESTS`` requests on common random
  numbers (the same draws at every rate, so TTFT is monotone in the rate), from which p50/p90/p99
  TTFT = wait + prefill + transfer + the first decode step.
* **Decode**: ``y`` instances of plan ``D``; by Little's law each replica runs
  ``n = rate x O x TPOT / (y x D.dp)`` sequences, TPOT the decode step at ``n`` (a fixed point);
  its p90 at the p90 of the running count (Poisson: ``n + 1.2816 sqrt(n)``, assumption) capped by
  the KV cache's concurrency. Capacity: the rate at which ``n`` reaches that cap.
* **Goodput**: the largest rate at which p90 TTFT and p90 TPOT meet the targets (bisection).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field, replace
from functools import lru_cache

from costmodel.physics.kernels.kvcache import kv_bytes_per_token
from costmodel.serving.engines import engine_cluster
from costmodel.serving.memory import serving_memory
from costmodel.serving.speculative import step_s
from costmodel.serving.step import chunk_pairs, step_cost
from costmodel.spec.errors import PlannerError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload

#: requests replayed through the prefill pool per rate
REQUESTS = 1500
#: z of the 90th percentile (normal approximation of the decode pool's running count)
Z90 = 1.2816
#: a prompt is prefilled in chunks of at most this many tokens (the engines' default budget, 8192)
PREFILL_CHUNK = 8192


def kv_transfer_bytes(model: ModelSpec, input_len: int, kv_dtype: str = "bf16") -> float:
    """KV-cache bytes of one request's prompt over all layers (the whole model's cache, tp = 1).

    >>> from costmodel.spec.presets import load_model
    >>> kv_transfer_bytes(load_model("deepseek-v3"), 1000, "bf16")   # 61 * (512 + 64) * 2 * 1000
    70272000
    """
    return kv_bytes_per_token(model, kv_dtype) * input_len


def kv_transfer_s(
    nbytes: float, cluster: ClusterSpec, senders: int, *, same_domain: bool, layers: int = 1, layerwise: bool = False
) -> float:
    """Seconds to move ``nbytes`` from a prefill instance of ``senders`` GPUs to a decode instance:
    NVLink (``intra_link``) inside one NVLink domain, else the NIC (``inter_link``, per GPU)."""
    link = cluster.intra_link if same_domain else cluster.inter_link
    alpha = link.latency_s * (layers if layerwise else 1)
    return alpha + nbytes / (link.bw_bytes_per_s * max(1, senders))


def prefill_s(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, input_len: int, dtype: str, kv_dtype: str):
    """One prompt alone on one replica of ``c``, in chunks of :data:`PREFILL_CHUNK` tokens."""
    sc = step_cost(model, cluster, dtype, replace(c, mb=1), kv_dtype)
    t, done = 0.0, 0
    while done < input_len:
        n = min(PREFILL_CHUNK, input_len - done)
        last = done + n >= input_len
        t += sc.time_s(tokens=n, sampled=1 if last else 0, prefill_pairs=chunk_pairs(done, n), decode_ctx=0)
        done += n
    return t


def decode_step_s(
    model, cluster, c: ParallelConfig, n: float, ctx: float, dtype: str, kv_dtype: str, speculation=None
) -> float:
    """One decode step of ``n`` sequences (mean context ``ctx``) on one replica of ``c``; with ``speculation``
    its K draft passes and the verify pass of ``1 + K`` rows per sequence (:mod:`costmodel.serving.speculative`)."""
    sc = step_cost(model, cluster, dtype, replace(c, mb=1), kv_dtype)
    n = max(1.0, n)
    return step_s(sc.price, sc, speculation, n, n * ctx, min(c.pp, math.ceil(n)))


@lru_cache(maxsize=4096)
def concurrency_cap(
    model, cluster, c: ParallelConfig, input_len, output_len, dtype, kv_dtype, engine=None, draft=None
) -> int:
    """Sequences one replica of ``c`` holds in its KV cache (0: the plan does not fit), its pool as ``engine``
    sizes it (:mod:`costmodel.serving.kv_pool`), beside a speculative ``draft``'s weights and KV."""
    w = Workload(mode="infer", global_batch=1, input_len=input_len, output_len=output_len, dtype=dtype)
    cl = cluster.with_gpus(c.gpus)
    try:
        mem = serving_memory(model, cl, w, c, kv_dtype, 1, 1, engine=engine, token_budget=PREFILL_CHUNK, draft=draft)
    except PlannerError:  # the weights never fit on this many GPUs
        return 0
    if mem["total_bytes"] > cl.device.hbm_bytes:
        return 0
    return max(0, int(mem["max_concurrency_per_replica"]))


@dataclass(frozen=True)
class Pool:
    """``instances`` copies of ``config`` (each ``config.gpus`` GPUs, ``config.dp`` replicas)."""

    role: str  # "prefill" | "decode"
    config: ParallelConfig
    instances: int

    @property
    def gpus(self) -> int:
        return self.instances * self.config.gpus

    @property
    def replicas(self) -> int:
        return self.instances * self.config.dp


@dataclass
class DisaggEstimate:
    """A disaggregated deployment's figures at its goodput rate (seconds, requests/s)."""

    prefill: Pool
    decode: Pool
    prefill_s: float  # one prompt on one prefill replica
    transfer_s: float  # its KV cache to the decode instance
    transfer_bytes: float
    link: str  # "nvlink" | "nic"
    decode_cap_per_replica: int  # sequences the decode replica's KV cache holds
    prefill_capacity_rps: float
    decode_capacity_rps: float
    goodput_rps: float  # requests/s at which the targets hold (0: never)
    at_goodput: dict = field(default_factory=dict)  # ttft/tpot percentiles at that rate
    notes: list = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def label(self) -> str:
        return f"{self.prefill.instances}P{self.decode.instances}D"

    def to_dict(self) -> dict:
        def pool(p: Pool):
            return {"instances": p.instances, "gpus": p.gpus, "config": p.config.to_dict()}

        return {
            "layout": self.label,
            "prefill": pool(self.prefill),
            "decode": pool(self.decode),
            "prefill_ms": self.prefill_s * 1e3,
            "kv_transfer_ms": self.transfer_s * 1e3,
            "kv_transfer_bytes": self.transfer_bytes,
            "kv_link": self.link,
            "decode_concurrency_cap_per_replica": self.decode_cap_per_replica,
            "prefill_capacity_rps": self.prefill_capacity_rps,
            "decode_capacity_rps": self.decode_capacity_rps,
            "goodput_rps": self.goodput_rps,
            "at_goodput": self.at_goodput,
            "notes": list(self.notes),
        }


def _draws(n: int, cv: float, seed: int = 0) -> list[float]:
    """Unit-mean inter-arrival gaps (exponential for cv = 1, Gamma otherwise), fixed by ``seed``."""
    rng = random.Random(seed)
    if cv == 1.0:
        return [rng.expovariate(1.0) for _ in range(n)]
    k = 1.0 / (cv * cv)
    return [rng.gammavariate(k, 1.0 / k) for _ in range(n)]


def _pct(xs: list[float], q: float) -> float:
    v = sorted(xs)
    h = (len(v) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (h - lo)


def prefill_waits(rate: float, servers: int, service_s: float, gaps: list[float]) -> list[float]:
    """Queueing delay of each request at a FIFO pool of ``servers`` identical replicas, deterministic
    service ``service_s``, arrivals ``gaps / rate`` apart (the first half of the replay is warm-up)."""
    t, waits, warm = 0.0, [], len(gaps) // 2  # the first `warm` waits are not returned
    if servers == 1:  # the heap below, of one replica
        free = 0.0
        for i, g in enumerate(gaps):
            t += g / rate
            start = free if free > t else t
            free = start + service_s
            if i >= warm:
                waits.append(start - t)
        return waits
    free = [0.0] * servers  # a heap of the times each replica frees up
    replace_min = heapq.heapreplace
    for i, g in enumerate(gaps):
        t += g / rate
        start = free[0] if free[0] > t else t  # the first free replica, once the request is there
        replace_min(free, start + service_s)
        if i >= warm:
            waits.append(start - t)
    return waits


def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits at an M/M/c queue of ``servers`` and offered ``load`` = rate x service."""
    if load >= servers:
        return 1.0
    b = 1.0  # Erlang B by its recursion, then C
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    rho = load / servers
    return b / (1 - rho + rho * b)


def steady_wait_p(rate: float, servers: int, service_s: float, q: float, cv: float = 1.0) -> float:
    """The ``q``-th percentile wait in steady state: M/M/c's ``P(W > t) = C exp(-(c mu - lambda) t)``,
    scaled by Allen-Cunneen's ``(ca^2 + cs^2) / 2`` for deterministic service (cs = 0). Near capacity a
    finite replay has not reached this; the larger of the two is charged."""
    mu = 1.0 / service_s
    if rate >= servers * mu:
        return math.inf
    c = erlang_c(servers, rate * service_s)
    tail = 1 - q / 100
    if c <= tail:
        return 0.0
    return math.log(c / tail) / (servers * mu - rate) * (cv * cv) / 2


class _Decode:
    """The decode pool's time per output token of each of ``n`` running sequences: one decode step, or with
    ``speculation`` one verify step over the tokens it emits per sequence (``Speculation.per_step``)."""

    def __init__(self, model, cluster, c, ctx, dtype, kv_dtype, cap, speculation=None):
        self.args = (model, cluster, c, ctx, dtype, kv_dtype, speculation)
        self.cap = cap
        self.per_step = 1 if speculation is None else speculation.per_step
        self._memo: dict[int, float] = {}

    def raw(self, n: float) -> float:
        """One engine step (a decode step, or a draft-and-verify step) of ``n`` running sequences."""
        k = max(1, min(self.cap, math.ceil(n)))
        if k not in self._memo:
            self._memo[k] = decode_step_s(*self.args[:3], k, *self.args[3:])
        return self._memo[k]

    def step(self, n: float) -> float:
        return self.raw(n) / self.per_step

    def running(self, rate_per_replica: float, output_len: int) -> tuple[float, float]:
        """(mean running sequences, TPOT) at ``rate_per_replica`` by Little's law (fixed point)."""
        n = 1.0
        for _ in range(100):  # n -> rate * O * step(n) rises monotonically to the fixed point
            nxt = rate_per_replica * output_len * self.step(n)
            if nxt > self.cap:
                return nxt, self.step(self.cap)
            if abs(nxt - n) < 1e-4 * max(1.0, n):
                return nxt, self.step(nxt)
            n = nxt
        return n, self.step(n)


def disagg_estimate(
    model: ModelSpec,
    cluster: ClusterSpec,
    prefill: Pool,
    decode: Pool,
    *,
    input_len: int,
    output_len: int,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
    arrival_cv: float = 1.0,
    layerwise: bool = False,
    gaps: list[float] | None = None,
    floor: float = 0.0,
    engine: str | None = None,
    speculation=None,
) -> DisaggEstimate | None:
    """The figures of ``prefill`` + ``decode`` pools (``None`` when a pool's plan does not fit, or
    when their goodput is below ``floor`` requests/s, a search's pruning bound: their capacity does
    not exceed it, or the bisection's upper end has fallen to it, the goodput always below that end)."""
    if engine is not None:
        cluster = engine_cluster(cluster, engine)  # the engine's own measured GEMMs, as the aggregated replay
    caps = []
    for pool in (prefill, decode):
        draft = speculation.method if speculation is not None and pool is decode else None
        cap = concurrency_cap(model, cluster, pool.config, input_len, output_len, dtype, kv_dtype, engine, draft)
        if cap < 1:
            return None
        caps.append(cap)
    p_cl, d_cl = cluster.with_gpus(prefill.config.gpus), cluster.with_gpus(decode.config.gpus)
    t_pf = prefill_s(model, p_cl, prefill.config, input_len, dtype, kv_dtype)
    same = prefill.gpus + decode.gpus <= cluster.domain
    nbytes = kv_transfer_bytes(model, input_len, kv_dtype)
    senders = prefill.config.tp * prefill.config.pp
    t_kv = kv_transfer_s(nbytes, cluster, senders, same_domain=same, layers=model.layers, layerwise=layerwise)
    ctx = input_len + (output_len - 1) / 2
    dec = _Decode(model, d_cl, decode.config, ctx, dtype, kv_dtype, caps[1], speculation)
    first = dec.step(1)
    pf_cap = prefill.replicas / t_pf
    d_cap = decode.replicas * caps[1] / (output_len * dec.step(caps[1]))
    if min(pf_cap, d_cap) <= floor:
        return None
    gaps = gaps if gaps is not None else _draws(REQUESTS, arrival_cv)

    def at(rate: float) -> dict:
        waits = sorted(prefill_waits(rate, prefill.replicas, t_pf, gaps))  # _pct sorts a sorted list in one pass
        n, tpot = dec.running(rate / decode.replicas, output_len)
        n90 = n + Z90 * math.sqrt(n)
        base = t_pf + t_kv + dec.raw(n)
        return {
            "rate_rps": rate,
            "ttft_ms": {
                f"p{q}": (max(_pct(waits, q), steady_wait_p(rate, prefill.replicas, t_pf, q, arrival_cv)) + base) * 1e3
                for q in (50, 90, 99)
            },
            "tpot_ms": {"p50": tpot * 1e3, "p90": dec.step(n90) * 1e3},
            "decode_running_per_replica": n,
            "overloaded": rate >= min(pf_cap, d_cap),
        }

    def ok(rate: float) -> bool:
        if rate >= min(pf_cap, d_cap):
            return False
        a = at(rate)
        n = a["decode_running_per_replica"]
        if n + Z90 * math.sqrt(n) > caps[1]:  # the decode pool full more than 10% of the time: prompts wait
            return False
        return (ttft_target_s is None or a["ttft_ms"]["p90"] <= ttft_target_s * 1e3) and (
            tpot_target_s is None or a["tpot_ms"]["p90"] <= tpot_target_s * 1e3
        )

    hi = min(pf_cap, d_cap)
    lo, good = 0.0, 0.0
    if ok(hi * 1e-3):
        lo = good = hi * 1e-3
        for _ in range(30):
            mid = (lo + hi) / 2
            if ok(mid):
                lo = good = mid
            else:
                hi = mid
            if hi - lo < 1e-3 * hi:
                break
            if hi <= floor:  # good < hi <= floor: not the search's best (floor 0 never prunes)
                return None
    notes = []
    if first > (tpot_target_s or math.inf):
        notes.append("one decode step alone exceeds the TPOT target")
    return DisaggEstimate(
        prefill=prefill,
        decode=decode,
        prefill_s=t_pf,
        transfer_s=t_kv,
        transfer_bytes=nbytes,
        link="nvlink" if same else "nic",
        decode_cap_per_replica=caps[1],
        prefill_capacity_rps=pf_cap,
        decode_capacity_rps=d_cap,
        goodput_rps=good,
        at_goodput=at(good) if good > 0 else {},
        notes=notes,
    )
