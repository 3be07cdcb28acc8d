"""The sweep's front door: :func:`sweep` (values or lists of values in, a summary out) and the driver
:func:`run_sweep` that opens the result files, skips the finished cases and runs the rest on a backend
from :data:`BACKENDS` (the local pool of :mod:`planner.sweep.runner` or Ray,
:mod:`planner.sweep.ray_backend`; neither imports the other).
"""

from __future__ import annotations

import time

from costmodel.spec.errors import SpecError
from search.options import ANSWER_OPTIONS

from .grid import Case, grid_from_mapping
from .progress import Progress
from .ray_backend import run_ray
from .runner import SweepSummary, make_record, run_pool
from .solve import solve_case
from .store import ResultStore
from .worker import default_workers

#: each backend's run function: ``run(cases, solve, on_result, *, workers, address, max_attempts)``,
#: ``on_result(case, result, attempts)`` called in this process as each case finishes
BACKENDS = {"local": run_pool, "ray": run_ray}


def run_sweep(
    cases: list[Case],
    out_dir,
    *,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: bool = True,
    solve=solve_case,
    max_attempts: int = 3,
    stream=None,
) -> SweepSummary:
    """Run every case not already finished in ``out_dir`` and append one record per case as it
    finishes (the driver alone writes the result files; a rerun resumes).

    ``solve`` must be a picklable top-level function ``Case -> dict`` (the default plans with
    the search). Returns a :class:`SweepSummary` of this run.
    """
    if backend not in BACKENDS:
        raise SpecError("backend", backend, f"one of {', '.join(BACKENDS)}")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise SpecError("workers", workers, "a positive integer")
    if address is not None and backend != "ray":
        raise SpecError("address", address, "given only with --backend ray")
    n_workers = workers or default_workers()
    store = ResultStore(out_dir)
    done = store.open()
    todo = [c for c in cases if c.id not in done]
    resumed = len(cases) - len(todo)
    bar = Progress(len(cases), skipped=resumed, stream=stream, enabled=progress)
    counts = {"ok": 0, "infeasible": 0, "unsolved": 0, "error": 0, "crashed": 0}
    t0 = time.perf_counter()

    def on_result(case: Case, result: dict, attempts: int) -> None:
        rec = make_record(case, result, attempts)
        store.append(rec)
        bar.update(rec["status"])

    try:
        if todo:
            BACKENDS[backend](todo, solve, on_result, workers=workers, address=address, max_attempts=max_attempts)
    finally:
        store.close()
        bar.close()
    ids = {c.id for c in cases}
    for rec in store.read():  # statuses over the whole grid, resumed cases included
        if rec["case_id"] in ids:
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    return SweepSummary(
        out_dir=str(out_dir),
        total=len(cases),
        resumed=resumed,
        ran=len(todo),
        ok=counts["ok"],
        infeasible=counts["infeasible"],
        unsolved=counts["unsolved"],
        error=counts["error"],
        crashed=counts["crashed"],
        wall_s=time.perf_counter() - t0,
        backend=backend,
        workers=n_workers,
    )


def sweep(
    models,
    clusters,
    gpus,
    global_batch,
    seq,
    *,
    out,
    dtype="bf16",
    dma_engines=None,
    nvlink_gbps=None,
    nic_gbps=None,
    hbm_gib=None,
    time_limit_s: float = ANSWER_OPTIONS.time_limit_s,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
):
    """Plan every combination of the given values and write ``out/results.{csv,jsonl}``.

    Each axis is a value or a list of values (models and clusters: preset names or spec file
    paths); the what-ifs (``dma_engines``, ``nvlink_gbps``, ``nic_gbps`` in GB/s, ``hbm_gib``)
    default to the cluster as specified. Finished cases already in ``out`` are skipped.
    Returns a :class:`planner.sweep.SweepSummary`; the rows are in
    ``planner.sweep.ResultStore(out).read()`` (columns: :mod:`planner.sweep.schema`).

    Examples
    --------
    >>> import tempfile
    >>> s = sweep("llama3-8b", "h100-sxm", gpus=[8, 16], global_batch=64, seq=2048,
    ...           out=tempfile.mkdtemp(), workers=1)
    >>> s.total, s.ok
    (2, 2)
    """
    axes = {
        "models": models,
        "clusters": clusters,
        "gpus": gpus,
        "global_batch": global_batch,
        "seq": seq,
        "dtype": dtype,
        "dma_engines": dma_engines,
        "nvlink_gbps": nvlink_gbps,
        "nic_gbps": nic_gbps,
        "hbm_gib": hbm_gib,
        "time_limit_s": time_limit_s,
    }
    grid = grid_from_mapping({k: v for k, v in axes.items() if v is not None})
    return run_sweep(grid.cases(), out, workers=workers, backend=backend, address=address, progress=progress)
