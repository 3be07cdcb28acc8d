"""What every sweep backend shares about its workers: how many a machine gives by default.

Imported by the local pool (:mod:`planner.sweep.runner`) and by Ray (:mod:`planner.sweep.ray_backend`),
which never import each other: the driver (:mod:`planner.sweep.api`) picks one from its table.
"""

from __future__ import annotations

import os


def default_workers() -> int:
    """Cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
