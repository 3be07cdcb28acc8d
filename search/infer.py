"""Inference planning: the TP/PP/EP/DP, SP/chunks and concurrency that maximise output tokens/s
per GPU under TTFT/TPOT targets, and the throughput/latency Pareto front.

The same pipeline as training, on a small space: candidates from :mod:`search.candidates` (the
one source of TP/PP/EP degrees) x sequence-parallel/chunk options x concurrency per replica
(powers of two up to the largest that fits, and that largest; the plan's ``--max-num-seqs``)
x the engine's step token budget (:func:`token_budgets`); a table of
:func:`costmodel.serving.inference.evaluate_inference` for each, run on the engine's scheduler
(:mod:`costmodel.serving.scheduler`: chunked prefill mixed with decodes, queueing); CP-SAT chooses one candidate among
those that fit and meet the targets (one-hot ``add_exactly_one``, integer objective in
milli-tokens/s per GPU, STYLE.md item 9); :func:`solve_infer_exhaustive` is the baseline it
must agree with. A target no plan meets is explained by the best value any plan reaches.

The search covers only what the target serving engine can run (``InferProblem.engine``, one of
:data:`search.serving_engines.ENGINES`; ``None``: every shape the cost model accepts). No engine exposes sequence
parallelism or chunked TP-communication overlap as a setting (vLLM's ``enable_sp`` compilation
pass rewrites AllReduce into ReduceScatter + RMSNorm + AllGather, the same bytes, unchunked, and
its gain comes from separate GEMM-collective fusion passes the cost model does not describe), so
with an engine ``sp`` is off and ``chunks`` is 1. :func:`search.serving_engines.server_layout` maps a plan to the
engine's own settings (one server's TP/PP/DP/EP sizes and how many identical servers), and
:func:`~search.serving_engines.engine_config` reads them back with the engine's semantics; a plan is runnable only when
the two agree, so the emitted launch arguments are exactly the evaluated plan.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> p = InferProblem(model=load_model("llama3-8b"), cluster=load_cluster("h100-sxm").with_gpus(8),
...                  input_len=1000, output_len=200, tpot_target_s=0.02)
>>> r = solve_infer(p)
>>> r.status, r.best.tpot_s <= 0.02, r.best.fits
('OPTIMAL', True, True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import PlannerError, SpecError
from costmodel.serving.inference import InferenceEstimate, evaluate_inference
from costmodel.trust.serving_band import with_serving_bands
from costmodel.serving.memory import check_weights_fit
from costmodel.physics.kernels.kvcache import kv_dtype_bytes
from costmodel.serving.engines import default_scheduler
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from search.serving_engines import ENGINES, server_layout

from .candidates import ep_values, pp_values, tp_values
from .problem import Limits, Problem
from .result import INFEASIBLE, OPTIMAL
from .options import SolveOptions

MILLI = 1000  # objective ticks per token/s per GPU
#: step token budgets the search tries under latency targets, besides the engine's default
BUDGETS = (2048, 4096, 8192, 16384)
#: a concurrency missing the targets by more than this factor stops the budget sweep for larger ones
PRUNE_FACTOR = 1.5


@dataclass(frozen=True, kw_only=True)
class InferProblem:
    """A serving question: requests of ``input_len``/``output_len`` tokens on ``cluster.num_gpus`` GPUs.

    max_batch_per_replica : largest concurrency per replica considered (a serving engine's cap).
    prefill_tokens : the step token budget, fixed (``None``: the engine's default, and under
        latency targets also :data:`BUDGETS`).
    ttft_target_s, tpot_target_s : latency targets (``None``: none).
    limits : fix, bound or exclude ``tp pp dp ep sp chunks`` as in training (:class:`Limits`).
    engine : the serving engine whose settings the search is restricted to (:data:`ENGINES`);
        ``None``: every shape the cost model accepts (sequence parallelism and chunks included).
    speculation : speculative decoding every plan runs (:class:`costmodel.serving.speculative.Speculation`), or
        ``None``.
    """

    model: ModelSpec
    cluster: ClusterSpec
    input_len: int
    output_len: int
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    ttft_target_s: float | None = None
    tpot_target_s: float | None = None
    max_batch_per_replica: int = 1024
    prefill_tokens: int | None = None
    limits: Limits = field(default_factory=Limits)
    engine: str | None = "vllm"
    speculation: object | None = None

    def __post_init__(self):
        if not self.cluster.num_gpus:
            raise SpecError("gpus", self.cluster.num_gpus, "a positive GPU count (--gpus N)")
        Workload(mode="infer", global_batch=1, input_len=self.input_len, output_len=self.output_len, dtype=self.dtype)
        for f in ("input_len", "output_len", "max_batch_per_replica"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SpecError(f, v, "a positive integer")
        kv_dtype_bytes(self.kv_dtype)
        v = self.prefill_tokens
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise SpecError("prefill_tokens", v, "a positive integer (the step token budget)")
        if self.engine is not None:
            if self.engine not in ENGINES:
                raise SpecError("engine", self.engine, "one of " + ", ".join(ENGINES))
            spec, fixed = ENGINES[self.engine], self.limits.fixed
            if fixed.get("sp") and not spec.sp:
                raise SpecError(
                    "sp",
                    True,
                    f"off with --engine {self.engine} ({spec.title} has no launch setting for sequence parallelism)",
                )
            if (fixed.get("chunks") or 1) > 1 and not spec.chunks:
                raise SpecError(
                    "chunks",
                    fixed["chunks"],
                    f"1 with --engine {self.engine} ({spec.title} has no launch setting that chunks TP/EP collectives)",
                )
        for f in ("ttft_target_s", "tpot_target_s"):
            v = getattr(self, f)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise SpecError(f.replace("_target_s", "_ms"), v, "a positive number of milliseconds")

    def workload(self, batch: int) -> Workload:
        return Workload(
            mode="infer", global_batch=batch, input_len=self.input_len, output_len=self.output_len, dtype=self.dtype
        )

    def meets(self, e: InferenceEstimate) -> bool:
        return (
            e.fits
            and (self.ttft_target_s is None or e.ttft_s <= self.ttft_target_s)
            and (self.tpot_target_s is None or e.tpot_s <= self.tpot_target_s)
        )


@dataclass
class InferResult:
    """Plans best first (re-scored estimates), the Pareto front, the solve status and why."""

    status: str
    plans: list = field(default_factory=list)
    pareto: list = field(default_factory=list)  # fitting plans not beaten on both tokens/s/GPU and TPOT
    explanation: str = ""
    evaluated: int = 0
    rejected: int = 0  # candidates the cost model refused (invalid for serving)
    time_s: float = 0.0
    objective: float | None = None  # tokens/s per GPU of the best plan
    bound: float | None = None
    closest: InferenceEstimate | None = None  # no plan meets the targets: the fitting plan nearest them

    @property
    def best(self) -> InferenceEstimate | None:
        return self.plans[0] if self.plans else None

    def solve_dict(self) -> dict:
        return {
            "status": self.status,
            "time_s": self.time_s,
            "objective_tokens_per_s_per_gpu": self.objective,
            "bound_tokens_per_s_per_gpu": self.bound,
            "gap": 0.0 if self.objective is not None else None,
            "evaluated": self.evaluated,
            "rejected": self.rejected,
            "explanation": self.explanation,
        }


# --------------------------------------------------------------------------- candidates
def _as_training(p: InferProblem) -> Problem:
    """The degree enumerators of :mod:`search.candidates` take a training Problem; only the
    model, the GPU count, the node size and the limits matter to them."""
    w = Workload(global_batch=p.cluster.num_gpus, seq_len=p.input_len + p.output_len)
    return Problem(model=p.model, cluster=p.cluster, workload=w, limits=p.limits)


def shapes(p: InferProblem) -> list[ParallelConfig]:
    """Every (tp, pp, dp, ep, sp, chunks) the search considers, before evaluation."""
    tr, lim, out = _as_training(p), p.limits, []
    for tp in tp_values(tr):
        for pp in pp_values(tr):
            if p.cluster.num_gpus % (tp * pp) or p.model.layers % pp:
                continue
            dp = p.cluster.num_gpus // (tp * pp)
            if not lim.allows("dp", dp):
                continue
            for ep in ep_values(tr, tp, 1, dp):
                if ep > 1 and tp % ep and not (pp == 1 and ep % tp == 0):
                    continue
                comm = tp > 1 or ep > 1
                for sp in lim.filter("sp", [False, True] if tp > 1 else [False]):
                    for chunks in lim.filter("chunks", [c for c in lim.chunk_options if c <= 4] if comm else [1]):
                        c = ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep, sp=sp, chunks=chunks)
                        if p.engine is None or server_layout(p.engine, c, p.model.is_moe) is not None:
                            out.append(c)
    return out


def launch_key(p: InferProblem, c: ParallelConfig):
    """What the user sets for ``c``: the engine's server layout (the config itself without an engine)."""
    return c if p.engine is None else server_layout(p.engine, c, p.model.is_moe)


def batch_values(largest: int, cap: int) -> list[int]:
    """Concurrency per replica: powers of two up to ``min(largest, cap)``, and that value.

    >>> batch_values(100, 1024)
    [1, 2, 4, 8, 16, 32, 64, 100]
    """
    top = min(largest, cap)
    vals = [2**k for k in range(int(math.log2(top)) + 1)] if top >= 1 else []
    return sorted(set(vals + ([top] if top >= 1 else [])))


def token_budgets(p: InferProblem, batch: int) -> list[int]:
    """Step token budgets tried for ``batch`` requests per replica: ``p.prefill_tokens`` when the
    user fixed it; else the engine's default and, with a TTFT/TPOT target, :data:`BUDGETS` (a
    smaller budget shortens the steps decodes wait through, a larger one prefills more per step).
    vLLM requires ``max_num_batched_tokens >= max_num_seqs``; an engine that does not chunk
    prompts needs ``budget >= input_len``."""
    sched = default_scheduler(p.engine or "vllm", p.cluster.device)
    if p.prefill_tokens is not None:
        vals = [p.prefill_tokens]
    elif p.ttft_target_s is None and p.tpot_target_s is None:
        vals = [sched.token_budget]
    else:
        vals = sorted({sched.token_budget, *BUDGETS})
    return [t for t in vals if t >= batch and (sched.chunked or t >= p.input_len)] or [max(batch, p.input_len)]


def table(p: InferProblem) -> tuple[list[InferenceEstimate], int]:
    """(every evaluated plan that fits in memory, number of candidates the cost model rejected).

    Each shape is evaluated at each concurrency of :func:`batch_values` (the plan's
    ``--max-num-seqs``: clients per replica, all admitted) and token budget of
    :func:`token_budgets`. Once a concurrency misses the targets with every budget by more than
    :data:`PRUNE_FACTOR`, larger ones are evaluated at the default budget only (TTFT and TPOT grow
    with concurrency; those rows still feed the Pareto front)."""
    check_weights_fit(p.model, p.cluster, p.dtype)  # "too big at any TP" is the user's error
    engine = p.engine or "vllm"
    default = default_scheduler(engine, p.cluster.device).token_budget
    # one memo for the whole table: an engine replay whose token budget never bound serves every
    # larger budget, and each reported phase is computed once (evaluate_inference's memo)
    opts = dict(kv_dtype=p.kv_dtype, engine=engine, memo={}, speculation=p.speculation)
    rows, rejected = [], 0
    for c in shapes(p):
        probe_budget = token_budgets(p, 1)[-1]
        try:
            probe = evaluate_inference(
                p.model, p.cluster, p.workload(c.dp), c, max_seqs=1, **opts, prefill_tokens=probe_budget
            )
        except PlannerError:
            rejected += 1
            continue
        hopeless = False
        for b in batch_values(probe.max_concurrency_per_replica, p.max_batch_per_replica):
            budgets = token_budgets(p, b)
            if hopeless:
                budgets = [t for t in budgets if t == (p.prefill_tokens or default)] or budgets[-1:]
            worst = []
            for t in budgets:
                if b == 1 and t == probe_budget:  # the probe's own arguments: its estimate
                    e = probe
                else:
                    e = evaluate_inference(
                        p.model, p.cluster, p.workload(b * c.dp), c, max_seqs=b, prefill_tokens=t, **opts
                    )
                if e.fits:
                    rows.append(with_serving_bands(e))
                    worst.append(shortfall(p, e))
            hopeless = hopeless or bool(worst) and min(worst) > PRUNE_FACTOR
    return rows, rejected


# --------------------------------------------------------------------------- choosing
def pareto_front(plans: list[InferenceEstimate]) -> list[InferenceEstimate]:
    """Plans no other plan beats on both tokens/s per GPU (higher) and TPOT (lower), by TPOT."""
    front, best = [], -1.0
    for e in sorted(plans, key=lambda e: (e.tpot_s, -e.tokens_per_s_per_gpu)):
        if e.tokens_per_s_per_gpu > best:
            front.append(e)
            best = e.tokens_per_s_per_gpu
    return front


def _key(e: InferenceEstimate):
    """Best first: tokens/s per GPU, then lower TPOT, then fewer GPUs per replica (deterministic)."""
    c = e.config
    return (
        -round(e.tokens_per_s_per_gpu * MILLI),
        e.tpot_s,
        c.tp * c.pp,
        c.tp,
        c.ep,
        c.sp,
        c.chunks,
        e.batch_per_replica,
        e.serving.get("token_budget", 0),
    )


def _distinct_top(p: InferProblem, ok: list[InferenceEstimate], k: int, first=None) -> list[InferenceEstimate]:
    """``first`` (if given), then the best plan of each next distinct launch layout, ``k`` in all:
    plans whose emitted parallel settings are identical count once (the best of them)."""
    out, seen = [], set()
    for e in ([first] if first is not None else []) + sorted(ok, key=_key):
        key = launch_key(p, e.config)
        if key not in seen:
            seen.add(key)
            out.append(e)
        if len(out) == k:
            break
    return out


def explain(p: InferProblem, plans: list[InferenceEstimate]) -> str:
    """Why no plan meets the targets: the best TTFT / TPOT any fitting plan reaches, and with which plan."""
    if not plans:
        return (
            "no plan fits in memory: the weights plus one sequence's KV cache exceed HBM at every "
            "TP/PP/EP split considered (use more GPUs, fp8 weights or KV cache, or shorter requests)"
        )
    parts = []
    for name, target, attr in (("TTFT", p.ttft_target_s, "ttft_s"), ("TPOT", p.tpot_target_s, "tpot_s")):
        if target is None:
            continue
        e = min(plans, key=lambda e: (getattr(e, attr), _key(e)))
        if getattr(e, attr) > target:
            c = e.config
            parts.append(
                f"{name} <= {target * 1e3:g} ms cannot be met: the lowest reachable is "
                f"{getattr(e, attr) * 1e3:.2f} ms (tp={c.tp} pp={c.pp} ep={c.ep} sp={c.sp} "
                f"chunks={c.chunks}, {e.batch_per_replica} request(s) per replica)"
            )
    if not parts:
        parts.append("each target is reachable alone but no single plan meets both")
    return "; ".join(parts)


def shortfall(p: InferProblem, e: InferenceEstimate) -> float:
    """How far ``e`` is from the targets: the largest predicted/target ratio (<= 1: met)."""
    ratios = [getattr(e, a) / t for t, a in ((p.ttft_target_s, "ttft_s"), (p.tpot_target_s, "tpot_s")) if t]
    return max(ratios, default=0.0)


def closest(p: InferProblem, plans: list[InferenceEstimate]) -> InferenceEstimate | None:
    """The fitting plan nearest the targets (smallest :func:`shortfall`, then the best keyed)."""
    return min(plans, key=lambda e: (shortfall(p, e), _key(e))) if plans else None


def _finish(p, plans, ok, best, rejected, t0, k) -> InferResult:
    if best is None:
        return InferResult(
            INFEASIBLE,
            [],
            pareto_front(plans),
            explain(p, plans),
            len(plans),
            rejected,
            time.perf_counter() - t0,
            closest=closest(p, plans),
        )
    top = _distinct_top(p, ok, max(k, 1), first=best)
    obj = best.tokens_per_s_per_gpu
    return InferResult(OPTIMAL, top, pareto_front(plans), "", len(plans), rejected, time.perf_counter() - t0, obj, obj)


def solve_infer_exhaustive(p: InferProblem, top_k: int = 1) -> InferResult:
    """The baseline: the best feasible row of the table."""
    t0 = time.perf_counter()
    plans, rejected = table(p)
    ok = [e for e in plans if p.meets(e)]
    best = min(ok, key=_key) if ok else None
    return _finish(p, plans, ok, best, rejected, t0, top_k)


def solve_infer(p: InferProblem, options: SolveOptions = SolveOptions()) -> InferResult:
    """CP-SAT over the table: one-hot choice of a feasible plan maximising tokens/s per GPU."""
    t0 = time.perf_counter()
    plans, rejected = table(p)
    ok = sorted((e for e in plans if p.meets(e)), key=_key)  # a fixed order: ties break the same way
    if not ok:
        return _finish(p, plans, ok, None, rejected, t0, options.top_k)
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(len(ok))]
    model.add_exactly_one(x)
    ticks = [round(e.tokens_per_s_per_gpu * MILLI) for e in ok]
    # lexicographic tie-break inside one objective: earlier (better-keyed) rows win equal ticks
    model.maximize(sum((t * len(ok) + (len(ok) - i)) * v for i, (t, v) in enumerate(zip(ticks, x))))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = options.time_limit_s
    solver.parameters.num_workers = options.workers
    solver.parameters.random_seed = options.seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise PlannerError(f"CP-SAT returned {solver.status_name(status)} on a non-empty feasible table")
    best = ok[next(i for i, v in enumerate(x) if solver.boolean_value(v))]
    return _finish(p, plans, ok, best, rejected, t0, options.top_k)


def with_targets(p: InferProblem, ttft_s: float | None = None, tpot_s: float | None = None) -> InferProblem:
    return replace(p, ttft_target_s=ttft_s, tpot_target_s=tpot_s)
