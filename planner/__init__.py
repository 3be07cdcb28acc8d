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


def _version() -> str:
    """The installed distribution's version; a source tree that is not installed says so."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("overlap-planner")
    except PackageNotFoundError:
        return "0+unknown"


#: the version of the installed ``overlap-planner`` distribution (``planner --version``)
__version__ = _version()

__all__ = [
    "ModelSpec", "ClusterSpec", "DeviceSpec", "LinkSpec", "DmaEngineClass", "Workload",
    "ParallelConfig", "Estimate",
    "PlannerError", "SpecError", "InfeasibleConfig",
    "load_model", "load_cluster",
    "evaluate", "recommend", "sweep", "Planner", "Score", "__version__",
]
