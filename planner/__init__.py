"""The planner: Python API and CLI over the cost model (``costmodel``) and the search (``search``).

>>> from planner import evaluate
>>> evaluate("llama3-8b", "h100-sxm", gpus=8, global_batch=8, seq=4096, tp=8).config.dp
1
"""

from costmodel.config import ParallelConfig
from costmodel.errors import InfeasibleConfig, PlannerError, SpecError
from costmodel.estimate import Estimate
from costmodel.presets import load_cluster, load_model
from costmodel.specs import ClusterSpec, DeviceSpec, DmaEngineClass, LinkSpec, ModelSpec, Workload

from .api import evaluate, recommend, sweep
from .tuner import Planner, Score

__all__ = [
    "ModelSpec", "ClusterSpec", "DeviceSpec", "LinkSpec", "DmaEngineClass", "Workload",
    "ParallelConfig", "Estimate",
    "PlannerError", "SpecError", "InfeasibleConfig",
    "load_model", "load_cluster",
    "evaluate", "recommend", "sweep", "Planner", "Score",
]
