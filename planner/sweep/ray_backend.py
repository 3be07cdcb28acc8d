"""Run a sweep's cases as Ray tasks: on a local Ray started here, or on a cluster (``--address``).

Ray is an optional extra (``pip install 'overlap-planner[ray]'``). A local Ray listens on
loopback only (:data:`LOOPBACK_ENV`). Each case is one task
(one CPU). A task whose worker dies (killed, out of memory, node lost) is submitted again
by this driver, up to ``max_attempts`` starts in all, and then recorded as ``crashed``; an
exception raised inside the task is recorded as ``error``. Results come back to the driver
as each task finishes, and the driver alone writes the result files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from costmodel.spec.errors import SpecError

from .grid import Case
from .solve import outcome
from .worker import default_workers

#: tasks kept submitted at once, per CPU of the cluster
IN_FLIGHT_PER_CPU = 4
REPO_ROOT = str(Path(__file__).resolve().parents[2])


#: Ray binds a local cluster to the host's network address on Linux (and resolves 127.0.0.1 to
#: it); this keeps a local cluster, or one joined at a loopback address, on loopback. It must be
#: set before ``import ray``: the test and benchmark modules set it too.
LOOPBACK_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _import_ray(local: bool):
    if local and "ray" not in sys.modules:
        os.environ.setdefault(*LOOPBACK_ENV)
    try:
        import ray
    except ImportError:
        raise SpecError("backend", "ray", "installed first: pip install 'overlap-planner[ray]'") from None
    return ray


#: seconds to wait for a TCP answer at ``--address`` before ``ray.init`` (a closed port is refused at once)
PROBE_TIMEOUT_S = 5.0
#: seconds ``ray.init`` may take to join a cluster that answers: Ray's own GCS client retries a closed or
#: silent address for minutes (issue 42: ``--address 127.0.0.1:1`` hung with no output)
JOIN_TIMEOUT_S = 60.0


def _probe(address: str) -> None:
    """Refuse (one line) a ``host:port`` address where nothing accepts a TCP connection within
    :data:`PROBE_TIMEOUT_S`; ``auto`` and addresses without a port are left to Ray."""
    import socket

    host, sep, port = address.split("://")[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else e.strerror or type(e).__name__
        raise SpecError(
            "address", address, f"a Ray cluster that can be joined (nothing accepts a connection there: {why})"
        ) from None


@contextlib.contextmanager
def _deadline(seconds: float):
    """Interrupt the main thread (a ``KeyboardInterrupt`` there, turned into :class:`TimeoutError` here) if
    the block runs longer than ``seconds``; a no-op outside the main thread."""
    import threading
    import _thread

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = threading.Event()
    done = threading.Event()

    def watch():
        if not done.wait(seconds):
            fired.set()
            _thread.interrupt_main()

    threading.Thread(target=watch, daemon=True, name="ray-join-deadline").start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            raise TimeoutError(f"no cluster joined within {seconds:g} s") from None
        raise
    finally:
        done.set()


def connect(address: str | None = None, workers: int | None = None):
    """Join the Ray cluster at ``address`` (or ``auto``), or start a local one with ``workers``
    CPUs. Returns ``(ray, started_here)``; a Ray already initialised in this process is reused.
    An address where nothing answers is refused at once (:func:`_probe`), and joining is bounded by
    :data:`JOIN_TIMEOUT_S`; each as one :class:`SpecError` naming ``address``."""
    host = (address or "").split("://")[-1].rsplit(":", 1)[0]
    ray = _import_ray(local=not address or host in ("localhost", "::1") or host.startswith("127."))
    if ray.is_initialized():
        return ray, False
    if address:
        _probe(address)
    try:
        if address:
            # Ray's retries print a line a second on stderr; the error below says it once
            with _stderr_held(), _deadline(JOIN_TIMEOUT_S):
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        else:
            # address="local": always a new local Ray, never a cluster some earlier process left registered in
            # /tmp/ray/ray_current_cluster (ray.init's default joins it, and then refuses num_cpus)
            ray.init(
                address="local",
                num_cpus=workers or default_workers(),
                include_dashboard=False,
                log_to_driver=False,
                job_config=ray.job_config.JobConfig(code_search_path=[REPO_ROOT]),
            )
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        where = address or "a local Ray"
        raise SpecError(
            "address", where, f"a Ray cluster that can be joined ({' '.join(str(e).split())[:200]})"
        ) from None
    return ray, True


@contextlib.contextmanager
def _stderr_held():
    """File descriptor 2 pointed at a temporary file while inside (Ray's C++ client writes there,
    past Python's ``sys.stderr``); what was written is dropped on success and on failure alike."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _call(solve, case: Case) -> dict:
    """The Ray task: ``solve(case)`` in a worker."""
    return solve(case)


def run_ray(
    cases: list[Case],
    solve,
    on_result,
    *,
    workers: int | None = None,
    address: str | None = None,
    max_attempts: int = 3,
) -> None:
    """Solve ``cases`` as Ray tasks; ``on_result(case, result, attempts)`` runs in this process."""
    ray, started = connect(address, workers)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_call)
        solve_ref = ray.put(solve)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        limit = max(1, IN_FLIGHT_PER_CPU * cpus)
        pending = list(reversed(cases))
        attempts: dict[str, int] = {}
        inflight: dict = {}
        while pending or inflight:
            while pending and len(inflight) < limit:
                case = pending.pop()
                attempts[case.id] = attempts.get(case.id, 0) + 1
                inflight[task.remote(solve_ref, case)] = case
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                case = inflight.pop(ref)
                n = attempts[case.id]
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as e:  # the function raised (solve_case never does)
                    result = outcome("error", f"internal error: {' '.join(str(e.cause).split())}")
                except ray.exceptions.RayError as e:  # the worker or its node died
                    if n < max_attempts:
                        pending.append(case)
                        continue
                    result = outcome("crashed", f"its Ray worker died on all {n} attempts ({type(e).__name__})")
                on_result(case, result, n)
    finally:
        if started:
            ray.shutdown()
