"""The scheduler each serving engine runs, with its launch defaults (read in the engines' code).

A :class:`SchedulerSpec` is what :func:`costmodel.serving.scheduler.simulate` needs to replay an
engine's step loop: the token budget of one step, the largest number of running requests,
whether prompts are chunked and whether prefill chunks share a step with decodes.

vLLM (V1 engine)
    ``vllm/engine/arg_utils.py`` ``EngineArgs._set_default_args`` (vllm-project/vllm@99d7eb5d):
    chunked prefill is on for generation models; ``max_num_batched_tokens`` defaults to 8192
    for the API server (``UsageContext.OPENAI_API_SERVER``) on GPUs with >= 70 GiB that are not
    A100, else 2048; ``max_num_seqs`` to 1024, else 256 (capped at the token budget). The V1
    scheduler (``vllm/v1/core/sched/scheduler.py``) schedules the running requests first (a
    decode is one token, a partial prefill its next chunk) and then admits waiting requests
    while the step's token budget lasts; the last one admitted may be chunked. Prefill and
    decodes share the step (``mixed``). (``Scheduler.schedule``: ``token_budget =
    self.max_num_scheduled_tokens``, "First, schedule the RUNNING requests", "Next, schedule the
    WAITING requests"; the file is stored in the search index at vllm-project/vllm@b4622cf9.)
SGLang
    ``docs/advanced_features/server_arguments.md`` (sgl-project/sglang@b36e8e19): flags
    ``--chunked-prefill-size`` (default ``None``: set from GPU memory), ``--max-running-requests``
    (``None``: bounded by the KV pool), ``--max-prefill-tokens`` 16384, ``--enable-mixed-chunk``
    ``False``: by default a prefill batch and a decode batch are separate forward passes
    (``mixed`` false), and a waiting prefill runs before the next decode
    (``python/sglang/srt/managers/scheduler.py`` ``Scheduler.get_next_batch_to_run``:
    ``new_batch = self.get_new_batch_prefill()``; "Run prefill first if possible", else the
    running batch decodes; stored in the search index at sgl-project/sglang@d51c1c21). ``server_args.py``
    sets ``chunked_prefill_size`` from GPU memory: 2048 below 35 GiB, 8192 below 160 GiB
    (H100, H200, A100), 16384 above (B200) -- read in a stored copy of that file whose commit
    the search tool does not name; the documented flag table above is the cited commit.
SGLang's overlap scheduler (``overlap``; read in the ``sglang-0.5.6`` wheel, the version the SGLang rows name, paths
    under ``python/sglang/``): ``disable_overlap_schedule`` defaults to ``False`` (``srt/server_args.py`` l. 500), so
    the scheduler runs ``Scheduler.event_loop_overlap`` (``srt/managers/scheduler.py`` l. 992-1050). Each iteration
    runs ``recv_requests`` (non-blocking ZMQ polls, l. 1057-1090) and ``get_next_batch_to_run``, launches that batch
    (``run_batch``) and only then waits for the previous batch's result (``pop_and_process``: ``copy_done``, then
    ``stream_output``). So a step's batch is chosen when the step before it starts on the GPU (or when the host
    finished launching that step, if later); a request that arrives while a step runs is first scheduled two steps
    on; an engine with nothing running polls and sees a request at once; a finished request is streamed at the
    end of its step (its result is processed right after the next launch). The host launch of an eager prefill
    (:mod:`costmodel.serving.engine_host`) starts when its batch is chosen, so it overlaps the step before it
    (``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` defaults to ``False``, ``srt/environ.py`` l. 192, so
    consecutive prefills overlap too). :func:`costmodel.serving.scheduler.simulate` replays this.
TensorRT-LLM
    ``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`` ``MicroBatchScheduler::operator()``
    (NVIDIA/TensorRT-LLM@b8b7b782), the in-flight batching step the PyTorch backend of
    ``trtllm-serve`` also runs: the active requests are walked in order; a generation request
    takes one token (``beam width + draft tokens``) of ``max_num_tokens``; without a context
    chunking config a context request is scheduled whole if ``batchNumTokens + prompt <=
    maxNumTokens``, and the first one that does not fit ends the walk (``break``: no later request
    jumps it); with chunking, the contexts share what the generation requests leave
    (``ctxTokensCapacity = maxNumTokens - batchNumTokens``), first come first served
    (``kFIRST_COME_FIRST_SERVED``: each takes its remaining prompt up to the capacity left, a cut
    chunk rounded down to ``chunkUnitSize``). Defaults in ``tensorrt_llm/llmapi/llm_args.py``
    (same repository): ``max_num_tokens`` 8192, ``enable_chunked_prefill`` ``False``,
    ``SchedulerConfig.capacity_scheduler_policy`` ``GUARANTEED_NO_EVICT`` (a started request's KV
    cache is reserved whole, so it is never paused; ``MAX_UTILIZATION`` packs more and may pause).
    With chunking off, a prompt of ``max_num_tokens - running + 1`` tokens or more cannot start
    while anything decodes, so with 8,192-token prompts under an 8,192-token budget requests run
    one after another (tens of seconds of queueing); the engine measured 0.27 s TTFT on that case
    (issue 40), which only chunked context (or a larger budget) gives. The planner's TensorRT-LLM
    launch therefore turns chunked context on (``enable_chunked_prefill: true`` in its
    ``--extra_llm_api_options`` file, :mod:`planner.emit_serving`) and the model runs it
    (``chunked``); ``chunked=False`` replays the unchunked default. ``max_batch_size`` 2048 is
    the ``BuildConfig`` default used here.

KV admission: every engine is modelled as reserving a request's whole KV cache
(``input_len + output_len`` tokens) when it is admitted, as TensorRT-LLM's default policy
does. vLLM and SGLang allocate blocks as tokens arrive and preempt (vLLM) or retract (SGLang)
when the pool runs out, so near the KV limit they briefly run more requests than modelled.

Kernel and overhead constants are one set for all engines: no source measured per-engine
kernel times on equal hardware that the model could take constants from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.physics.kernels.measured import table_system
from costmodel.physics.tables import engine_allreduce_lookup, table_for
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import DeviceSpec
from costmodel.spec.units import GiB

ENGINE_NAMES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True, kw_only=True)
class SchedulerSpec:
    """One engine's step loop.

    engine : ``vllm``, ``sglang`` or ``trtllm``.
    token_budget : tokens one step may schedule (``--max-num-batched-tokens``,
        ``--chunked-prefill-size``, ``--max_num_tokens``).
    max_seqs : running requests at most (``--max-num-seqs``, ``--max-running-requests``,
        ``--max_batch_size``); ``None``: only the KV cache bounds them.
    chunked : a prompt longer than the remaining budget is split over steps; otherwise it
        waits until it fits whole (and a prompt longer than the budget is refused).
    mixed : prefill chunks and decodes share one step; otherwise a step is all prefill or all decode,
        prefill first.
    overlap : the host chooses and launches a step's batch while the step before it runs (SGLang's overlap
        scheduler, ``disable_overlap_schedule`` default ``False``: :mod:`costmodel.serving.scheduler`), so a
        request is first scheduled in the second step that starts after it arrived.
    """

    engine: str
    token_budget: int
    max_seqs: int | None
    chunked: bool = True
    mixed: bool = True
    overlap: bool = False

    def __post_init__(self):
        if self.engine not in ENGINE_NAMES:
            raise SpecError("engine", self.engine, "one of " + ", ".join(ENGINE_NAMES))
        for name in ("token_budget", "max_seqs"):
            v = getattr(self, name)
            if v is None and name == "max_seqs":
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SpecError(name, v, "a positive integer")


def default_scheduler(engine: str, device: DeviceSpec) -> SchedulerSpec:
    """The engine's scheduler with the launch defaults it picks on ``device`` (module doc)."""
    big = device.hbm_bytes >= 70 * GiB and "a100" not in device.name.lower()
    if engine == "vllm":
        return SchedulerSpec(engine="vllm", token_budget=8192 if big else 2048, max_seqs=1024 if big else 256)
    if engine == "sglang":
        mem = device.hbm_bytes
        size = 2048 if mem < 35 * GiB else 8192 if mem < 160 * GiB else 16384
        return SchedulerSpec(engine="sglang", token_budget=size, max_seqs=None, mixed=False, overlap=True)
    if engine == "trtllm":
        return SchedulerSpec(engine="trtllm", token_budget=8192, max_seqs=2048, chunked=True)
    raise SpecError("engine", engine, "one of " + ", ".join(ENGINE_NAMES))


def scheduler_for(
    engine: str,
    device: DeviceSpec,
    *,
    token_budget: int | None = None,
    max_seqs: int | None = None,
    chunked: bool | None = None,
) -> SchedulerSpec:
    """:func:`default_scheduler` with the given settings overridden (``None``: the default)."""
    s = default_scheduler(engine, device)
    if chunked is not None:
        s = replace(s, chunked=chunked)
    if token_budget is not None:
        s = replace(s, token_budget=token_budget)
    if max_seqs is not None:
        s = replace(s, max_seqs=max_seqs)
    return s


def engine_cluster(cluster, engine: str):
    """``cluster`` as ``engine`` runs its kernels: single GEMMs from that engine's own measured table
    (AIConfigurator's per-engine GEMM tables, :mod:`costmodel.physics.kernels.measured`) at the table's clocks
    (``DeviceSpec.sustained_clocks`` False: the tables time the engine's GEMMs as it launches them, and a serving
    step is no training step held at the power limit), in place of the roofline whose efficiencies were fitted to
    training steps. A table the user named stands; a GPU without a table keeps the roofline."""
    dev = cluster.device
    if table_system(dev)[0] is None:
        return cluster
    return replace(cluster, device=replace(dev, kernel_table=dev.kernel_table or engine, sustained_clocks=False))


def engine_allreduce_s(cluster, nbytes: float, tp: int) -> float | None:
    """Seconds of one TP all-reduce of ``nbytes`` as the stack's serving engine runs it (``DeviceSpec.kernel_table``,
    which :func:`engine_cluster` sets to the engine), from that engine's measured table
    (:mod:`costmodel.physics.tables.allreduce`), or None where no table times it (no engine named, a GPU without
    tables, a GPU count the table lacks, a TP group wider than the NVLink domain): the caller keeps its model.

    The CUDA-graph series times every step. Decode steps are graph replays; an eager prefill step issues the same
    dispatch, and the eager series' floor (20-30 us at any size below 1 MiB on H100 and B200, against 3-8 us in a
    graph) is the host's launch time between back-to-back calls, which an eager forward hides behind its GEMMs
    (SGLang's eager prefill host time is charged by :mod:`costmodel.serving.engine_host`)."""
    dev = cluster.device
    if not dev.kernel_table or tp < 2 or tp > cluster.domain or nbytes <= 0:
        return None
    return engine_allreduce_lookup(dev, dev.kernel_table, nbytes, tp, graph=True)[0]


def allreduce_table_of(dev, tp: int) -> str:
    """The measured engine all-reduce table that times ``dev``'s TP all-reduce at ``tp`` GPUs
    (``system/allreduce/engine/version``), or ``""`` where the collective model does."""
    if not dev.kernel_table or tp < 2:
        return ""
    t, ev = engine_allreduce_lookup(dev, dev.kernel_table, 1 << 20, tp, graph=True)
    return ev.table if t is not None else ""


def gemm_table_of(dev) -> str:
    """The measured GEMM table that times ``dev``'s single GEMMs (``system/gemm/backend/version``), or ``""`` where
    the fitted roofline does."""
    system, _ = table_system(dev)
    choice = table_for(system, "gemm", dev.kernel_table) if dev.kernel_table and system else None
    return choice.label if choice else ""
