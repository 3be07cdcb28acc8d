"""A serving engine's own tensor-parallel all-reduce, from its measured table (issues 38 and 40).

Serving engines do not all-reduce through NCCL at decode sizes: vLLM and SGLang run their custom
all-reduce (one-shot / two-shot kernels over IPC buffers) below a size limit and NCCL above it, TensorRT-LLM
picks a strategy per size (``AllReduceStrategy.AUTO``). AIConfigurator measured each engine's own call on a
grid of message sizes (128 to 2^29 bf16 elements, x2) and 2, 4 and 8 GPUs (2 and 4 on GB200/GB300):
``collector/network/collect_all_reduce.py`` (ai-dynamo/aiconfigurator@095f58a) times vLLM's and SGLang's
``tensor_model_parallel_all_reduce`` (SGLang with its custom all-reduce on, mscclpp and symmetric memory off)
replayed 5 at a time in a CUDA graph and called eagerly, and TensorRT-LLM's ``AllReduce`` with strategy AUTO
in a CUDA graph, so each size's time is what that engine's dispatch runs at that size, custom kernel or
NCCL. ``benchmarks.tables_convert`` keeps the newest version of each engine per system (``allreduce_*.npz``,
bytes = elements x 2).

Look-up: the engine's table on the device's system (the stack's version, or the nearest that exists, said in
a note), the series of the plan's GPU count and mode (``graph``: a step replayed as a CUDA graph; ``eager``:
launched from Python; TensorRT-LLM has the graph series only, which stands in), interpolated over the size
as the NCCL tables are (:func:`costmodel.physics.tables.collectives.series_time`: affine between measured
sizes, the latency floor below the smallest, the last interval's bandwidth above the largest). A GPU count
the table lacks, or a device without a table, returns ``None`` and the caller keeps its model.

>>> from costmodel.spec.presets import load_cluster
>>> t, ev = engine_allreduce_lookup(load_cluster("h100-sxm").device, "trtllm", 16384, 2)
>>> round(t * 1e6, 1), ev.kind, ev.table
(2.8, 'measured', 'h100_sxm/allreduce/trtllm/1.3.0rc20')
>>> engine_allreduce_lookup(load_cluster("gb200-nvl72").device, "vllm", 16384, 8)[0] is None  # 2 and 4 GPUs only
True
"""

from __future__ import annotations

from functools import lru_cache

from .collectives import series_time
from .evidence import Evidence, join_notes
from .store import load, system_of, table_for

OP = "all_reduce"


def counts(file: str, mode: str) -> list[int]:
    """GPU counts of ``mode``'s series in one table."""
    return sorted({int(k.split(".")[2]) for k in load(file) if k.startswith(f"{OP}.{mode}.") and k.endswith(".bytes")})


@lru_cache(maxsize=1 << 14)
def _lookup(system: str, engine: str, nbytes: float, ngpus: int, graph: bool):
    choice = table_for(system, "allreduce", engine)
    if choice is None:
        return None, Evidence("assumed", "", f"no engine all-reduce table on {system}")
    mode, note = ("graph" if graph else "eager"), choice.note
    if not counts(choice.file, mode):
        other = "graph" if mode == "eager" else "eager"
        note = join_notes(note, f"{choice.backend} has no {mode} series: its {other} series stands in")
        mode = other
    if ngpus not in counts(choice.file, mode):
        return None, Evidence("assumed", choice.label, f"no {ngpus}-GPU series (measured: {counts(choice.file, mode)})")
    t, kind, d, how = series_time(choice.file, OP, mode, ngpus, nbytes)
    return t, Evidence(kind, choice.label, join_notes(note, f"{mode} series", how), d)


def engine_allreduce_lookup(device, engine: str, nbytes: float, ngpus: int, graph: bool = True):
    """``(seconds or None, Evidence)`` of one all-reduce of ``nbytes`` over ``ngpus`` GPUs of ``device`` as
    serving engine ``engine`` (``"trtllm"``, ``"vllm"``, ``"sglang"``, optionally with a version) runs it."""
    system = system_of(device)
    if system is None:
        return None, Evidence("assumed", "", f"no measured tables for {getattr(device, 'name', device)}")
    if nbytes <= 0:
        return 0.0, Evidence("assumed", "", "nothing to reduce")
    return _lookup(system, engine, float(nbytes), int(ngpus), bool(graph))


def allreduce_table_of(device, engine: str | None) -> str:
    """The engine all-reduce table that times ``device``'s TP all-reduce under ``engine`` (``system/allreduce/
    engine/version``), or ``""`` where none does."""
    system = system_of(device)
    choice = table_for(system, "allreduce", engine) if engine and system else None
    return choice.label if choice else ""


def cache_clear() -> None:
    _lookup.cache_clear()
