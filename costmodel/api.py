"""The cost model's one front door: ``evaluate(model, cluster, workload, config, engine=...)``.

A workload in mode ``train`` gets one training step (:class:`~costmodel.training.estimate.Estimate`, from the op-graph
engine or the closed form, ``engine``); a workload in mode ``infer`` is served (:class:`~costmodel.serving.inference.
InferenceEstimate`, the engine's scheduler replayed). Bands are not attached here: :mod:`costmodel.trust` adds them
for every caller above.
"""

from __future__ import annotations

from costmodel.spec.plan import ParallelConfig
from costmodel.training.estimate import DEFAULT_ENGINE, ENGINES, Estimate
from costmodel.training.estimate import evaluate as evaluate_training
from costmodel.serving.inference import InferenceEstimate, evaluate_inference
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload

__all__ = [
    "evaluate",
    "evaluate_training",
    "evaluate_inference",
    "Estimate",
    "InferenceEstimate",
    "ENGINES",
    "DEFAULT_ENGINE",
]


def evaluate(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, engine: str = DEFAULT_ENGINE
) -> Estimate | InferenceEstimate:
    """Predict ``workload`` run with ``config``: one training step, or (mode ``infer``) serving on the default
    engine's scheduler. Raises :class:`~costmodel.spec.errors.SpecError` for an invalid plan."""
    if workload.mode == "infer":
        if not cluster.num_gpus:
            cluster = cluster.with_gpus(config.gpus)
        return evaluate_inference(model, cluster, workload, config)
    return evaluate_training(model, cluster, workload, config, engine)
