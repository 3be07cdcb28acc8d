"""The cost model: what one plan of a model on a cluster costs, training or serving, and how it is known.

Floors, each importing only those below it (``tests/test_architecture.py`` holds the table):
``spec`` (what is planned, as data) < ``frameworks`` (what each framework runs) < ``physics`` (the cost of one
mechanism: ``kernels`` < ``comm`` | ``memory`` < ``mechanics`` < ``validity``) < ``compose`` (what both engines
share) < ``engines`` (``analytic`` | ``graph``) < ``training`` | ``serving`` < ``api`` (the front door) <
``trust`` (calibration, bands, sensitivity, margins). ``search`` and ``planner`` sit above and import the faces
re-exported here.

>>> from costmodel import evaluate, load_model, load_cluster, Workload, ParallelConfig
>>> e = evaluate(load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8), Workload(global_batch=8,
...              seq_len=4096), ParallelConfig(tp=8))
>>> e.fits, e.config.dp
(True, 1)
"""

from costmodel.api import evaluate
from costmodel.serving.inference import InferenceEstimate, evaluate_inference
from costmodel.spec.errors import InfeasibleConfig, PlannerError, SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import ClusterSpec, DeviceSpec, DmaEngineClass, LinkSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.training.estimate import Estimate

__all__ = [
    "evaluate",
    "evaluate_inference",
    "Estimate",
    "InferenceEstimate",
    "ParallelConfig",
    "Workload",
    "ModelSpec",
    "ClusterSpec",
    "DeviceSpec",
    "LinkSpec",
    "DmaEngineClass",
    "load_model",
    "load_cluster",
    "SpecError",
    "PlannerError",
    "InfeasibleConfig",
]
