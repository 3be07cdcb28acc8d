"""Sweeps: plan every case of a grid (models x clusters x GPUs x batches x sequences x what-ifs).

* :mod:`~planner.sweep.grid` parses flags or a YAML file into :class:`Case` objects;
* :mod:`~planner.sweep.api` is the front door: :func:`sweep`, and :func:`run_sweep`, which runs cases on a
  backend of its table (the local pool of :mod:`~planner.sweep.runner`, or Ray) and resumes after a kill;
* :mod:`~planner.sweep.store` and :mod:`~planner.sweep.schema` are the result files and their columns;
* :mod:`~planner.sweep.codesign` gives each plan its DMA assignment and critical condition, and
  summarises a sweep over the DMA engine count;
* :mod:`~planner.sweep.plots` draws scaling, TP x PP and hardware co-design plots.
"""

from .grid import Case, Grid, apply_whatifs, grid_from_mapping, load_grid_file
from .api import run_sweep, sweep
from .runner import SweepSummary
from .schema import COLUMNS, SCHEMA_VERSION
from .solve import solve_case
from .store import ResultStore

__all__ = [
    "Case",
    "Grid",
    "apply_whatifs",
    "grid_from_mapping",
    "load_grid_file",
    "SweepSummary",
    "run_sweep",
    "sweep",
    "COLUMNS",
    "SCHEMA_VERSION",
    "solve_case",
    "ResultStore",
]
