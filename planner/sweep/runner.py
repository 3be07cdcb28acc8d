"""Run a sweep's cases on a local process pool, and the records and summary every backend shares.

:func:`run_pool` runs cases on a local process pool (one worker per core by default; one worker:
in this process). A worker that dies takes only its case down: the pool is rebuilt and the case
retried, up to ``max_attempts`` starts, after which it is recorded as ``crashed``. Workers of the
local pool exit by themselves when the driver is killed. The driver that opens the result files,
skips finished cases and picks this backend or Ray is :func:`planner.sweep.api.run_sweep`.

Interrupts are the driver's: workers ignore SIGINT (a terminal's Ctrl-C reaches the whole
process group), and on ``KeyboardInterrupt`` (or :class:`SweepInterrupted`, what the CLI
turns SIGTERM into) the driver stops the workers, shuts the pool down and closes the result
files before the exception goes on, so a rerun resumes and no semaphore leaks.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from .grid import Case
from .schema import NAMES, SCHEMA_VERSION
from .solve import outcome
from .worker import default_workers


@dataclass
class SweepSummary:
    """What one run of a sweep did. ``resumed``: finished by an earlier run and skipped."""

    out_dir: str
    total: int
    resumed: int
    ran: int
    ok: int
    infeasible: int
    unsolved: int
    error: int
    crashed: int
    wall_s: float
    backend: str
    workers: int

    def to_dict(self) -> dict:
        return asdict(self)


def make_record(case: Case, result: dict, attempts: int) -> dict:
    """One result row: the case's inputs, the solver's outcome, and the meta columns (schema order)."""
    rec = {
        "case_id": case.id,
        **case.inputs(),
        **result,
        "attempts": attempts,
        "schema_version": SCHEMA_VERSION,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    ordered = {k: rec.get(k) for k in NAMES}
    ordered["estimate"] = rec.get("estimate")
    return ordered


def crashed(reason: str) -> dict:
    """The outcome of a case whose worker died on every attempt."""
    return outcome("crashed", reason)


class SweepInterrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM) raised in the driver as an exception, so that the pool
    and the result files are closed as after Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# --------------------------------------------------------------------------- local pool
def _watch_driver(pid: int) -> None:
    """In a worker: leave SIGINT to the driver, and exit when the driver process is gone
    (killed with -9 it cannot tell us)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def loop():
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=loop, daemon=True).start()


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["planner.sweep.solve"])
        return ctx
    return mp.get_context("spawn")


def run_local(cases: list[Case], solve, on_result, *, workers: int, max_attempts: int = 3) -> None:
    """Solve ``cases`` on a process pool; ``on_result(case, result, attempts)`` in this process.

    When a worker dies the pool breaks under every case in flight; those cases are then run
    again one at a time (each alone in the pool), so a death is pinned on the case that caused it.
    """
    pending, suspects = deque(cases), deque()
    attempts: dict[str, int] = {}
    ctx = _context()
    while pending or suspects:
        alone = bool(suspects)
        queue, width = (suspects, 1) if alone else (pending, workers)
        pool = ProcessPoolExecutor(
            max_workers=width, mp_context=ctx, initializer=_watch_driver, initargs=(os.getpid(),)
        )
        inflight: dict = {}
        broken = False
        try:
            while queue and not broken or inflight:
                while queue and not broken and len(inflight) < width:
                    case = queue[0]
                    try:
                        fut = pool.submit(solve, case)
                    except BrokenProcessPool:  # broke before we saw which future it took down
                        broken = True
                        break
                    queue.popleft()
                    attempts[case.id] = attempts.get(case.id, 0) + 1
                    inflight[fut] = case
                if not inflight:
                    break
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for fut in done:
                    case = inflight.pop(fut)
                    err = fut.exception()
                    if isinstance(err, BrokenProcessPool):
                        broken = True
                        n = attempts[case.id]
                        if n >= max_attempts:
                            on_result(case, crashed(f"its worker process died on all {n} attempts"), n)
                        else:
                            suspects.append(case)
                    elif err is not None:  # e.g. the result could not be pickled
                        on_result(
                            case, outcome("error", f"internal error: {type(err).__name__}: {err}"), attempts[case.id]
                        )
                    else:
                        on_result(case, fut.result(), attempts[case.id])
                if alone and not broken:
                    break  # back to the normal pool once a suspect has cleared
        except BaseException:  # Ctrl-C, SIGTERM: stop the cases in flight, then let the workers go
            _stop_workers(pool)
            broken = False  # the pool's threads and queues are joined below, so nothing leaks
            raise
        finally:
            pool.shutdown(wait=not broken, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (their cases are lost; a rerun does them)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError):  # already gone
            pass


def run_serial(cases: list[Case], solve, on_result) -> None:
    """Solve ``cases`` one after another in this process (``workers=1``: no pool to start)."""
    for case in cases:
        on_result(case, solve(case), 1)


def run_pool(
    cases: list[Case],
    solve,
    on_result,
    *,
    workers: int | None = None,
    address: str | None = None,
    max_attempts: int = 3,
) -> None:
    """The local backend: ``cases`` on a process pool of ``workers`` (default: one per core), or in this
    process with one worker; ``address`` is Ray's and must be None here."""
    n = workers or default_workers()
    if n == 1:
        run_serial(cases, solve, on_result)
    else:
        run_local(cases, solve, on_result, workers=min(n, len(cases)), max_attempts=max_attempts)
