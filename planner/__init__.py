"""The planner: Python API and CLI over the cost model (``costmodel``) and the search (``search``).

>>> from planner import evaluate
>>> evaluate("llama3-8b", "h100-sxm", gpus=8, global_batch=8, seq=4096, tp=8).config.dp
1
"""

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import InfeasibleConfig, PlannerError, SpecError
from costmodel.training.estimate import Estimate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import ClusterSpec, DeviceSpec, DmaEngineClass, LinkSpec, ModelSpec
from costmodel.spec.workload import Workload

from .api import evaluate, recommend
from .sweep.api import sweep  # after the package: the name planner.sweep is this function
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
    "ModelSpec",
    "ClusterSpec",
    "DeviceSpec",
    "LinkSpec",
    "DmaEngineClass",
    "Workload",
    "ParallelConfig",
    "Estimate",
    "PlannerError",
    "SpecError",
    "InfeasibleConfig",
    "load_model",
    "load_cluster",
    "evaluate",
    "recommend",
    "sweep",
    "Planner",
    "Score",
    "__version__",
]
