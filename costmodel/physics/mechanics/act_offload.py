"""Activation CPU offloading as Megatron-Core runs it: ``--cpu-offloading-num-layers N`` (layer level).

Semantics read in NVIDIA/Megatron-LM@d98e8a64:

* ``megatron/core/model_parallel_config.py``: ``cpu_offloading`` ("all the activations are offloaded to the CPU
  asynchronously"), ``cpu_offloading_num_layers`` ("the number of transformer layers for which activations has to
  be offloaded"), ``cpu_offloading_activations`` (default True), ``cpu_offloading_weights`` (default False),
  ``cpu_offloading_double_buffering`` (default False). ``megatron/training/arguments.py`` ``validate_args``:
  ``cpu_offloading_num_layers > 0`` sets ``cpu_offloading``.
* ``megatron/core/transformer/transformer_config.py`` ``__post_init__`` refuses: ``cpu_offloading_num_layers < 0``
  or ``>= num_layers`` ("CPU offloading can be done only for layers less than {num_layers}"); pipeline parallelism
  ("Currently there is no support for Pipeline parallelism with CPU offloading"); any activation recomputation
  ("CPU offloading does not work when activation recomputation is enabled": ``recompute_granularity`` not None,
  i.e. full or selective). The fine-grained offloading (``--fine-grained-activation-offloading
  --offload-modules``) "cannot be enabled with cpu_offloading"; it is not modelled here.
* ``megatron/core/transformer/transformer_block.py``: the block enters Transformer Engine's
  ``get_cpu_offload_context(cpu_offloading, cpu_offloading_num_layers, num_layers, activations, weights,
  double_buffering, ...)`` (``megatron/core/extensions/transformer_engine.py``) and calls
  ``group_prefetch_offload_commit_async`` on each layer's output: the copies are TE's, issued asynchronously.

What this model charges, as Transformer Engine's default offload scheduling documents it
(``docs/features/other_optimizations/cpu_offloading/cpu_offloading.rst``, TransformerEngine@d0067d0, "Default
Offloading Scheduling"; the scheduler's code was not read):

* memory (charged in :func:`costmodel.physics.memory.stage_memory.stage_memory`): "the first ``num_layers`` layers are offloaded" and
  "at most ``(model_layers - num_layers)`` sets of activations are on GPU at any time", so an offload of ``N``
  layers saves ``N`` layers' activations of the one micro-batch a PP=1 schedule holds. Megatron's refusals
  (pp > 1, recompute, ``N >= num_layers``) are :class:`costmodel.spec.plan.ParallelConfig`'s and
  :func:`costmodel.physics.validity.validate_config`'s.
* time (:func:`schedule_s`): each offloaded layer's saved activations go D2H once in forward ("offloading starts
  as soon as tensors are saved for backward", taken as the layer's start; the set is freed when its copy ends and
  not before the layer ends) and H2D once in backward ("reloading must complete by the time the tensor is needed
  for the layer's backward pass"), one copy at a time on the offload stream, over the host link
  (:func:`costmodel.physics.mechanics.offload.host_link_s`, the one formula of host-link time); "both compute and reload may be
  stalled" so that no more than ``L - N`` sets are on the GPU. What the schedule takes beyond the layers' compute
  is exposed: none with enough sets to spare (the document's Figure 3), stalls when ``N`` nears ``L`` (Figure 4;
  ``N = L - 1``: "compute and transfers cannot overlap"). The copies' use of HBM bandwidth is not charged.
"""

from __future__ import annotations

from costmodel.physics.memory.stage_memory import offloaded_layer_bytes
from costmodel.physics.mechanics.offload import host_link_s
from costmodel.physics.memory.stage_contents import layer_counts


def schedule_s(layers: int, offloaded: int, fwd_s: float, bwd_s: float, copy_s: float) -> float:
    """Seconds of one micro-batch's forward and backward over ``layers`` equal layers of which the first
    ``offloaded`` are offloaded, each copy taking ``copy_s`` one way, under TE's limit of ``layers - offloaded``
    activation sets on the GPU (module docstring)."""
    cap, inf = layers - offloaded, float("inf")
    copy_free = now = 0.0
    freed = []  # when each layer's set leaves the GPU in forward (inf: kept for backward)
    for j in range(layers):
        held = sorted(x for x in freed if x > now)  # a layer starts only with a set to spare
        start = now if len(held) < cap else max(now, held[len(held) - cap])
        now = start + fwd_s
        if j < offloaded:
            copy_free = max(copy_free, start) + copy_s
            freed.append(max(copy_free, now))
        else:
            freed.append(inf)
    ends = []  # backward ends of the layers above, latest first
    for j in reversed(range(layers)):
        start = now
        if j < offloaded:  # its reload needs a set to spare: the layers above still resident
            above = sorted(ends)
            slot = above[len(above) - cap] if len(above) >= cap else 0.0
            copy_free = max(copy_free, slot) + copy_s
            start = max(start, copy_free)
        now = start + bwd_s
        ends.append(now)
    return now


def exposed_s(
    c, cluster, layers: int, layer_act_bytes: float, layer_fwd_s: float, layer_bwd_s: float, micro_batches: int
):
    """(copy seconds on the link, exposed seconds) per step: the ``N`` offloaded layers' activations copied D2H
    and H2D once per micro-batch, exposed where :func:`schedule_s` takes longer than the layers' compute."""
    n = c.activation_offload_layers
    if n == 0:
        return 0.0, 0.0
    t = host_link_s(layer_act_bytes, cluster)
    stall = schedule_s(layers, n, layer_fwd_s, layer_bwd_s, t) - layers * (layer_fwd_s + layer_bwd_s)
    return 2 * n * micro_batches * t, micro_batches * max(0.0, stall)


def step_exposed_s(model, cluster, w, c, stage_fwd_s: float, stage_bwd_s: float, micro_batches: int):
    """(link, exposed) seconds per step of the plan's one stage (pp = 1) from its forward and backward (with
    recompute) per micro-batch, split evenly over its layers: the one place ``evaluate`` (both engines) and the
    fast path charge the offload's time."""
    if c.activation_offload_layers == 0:
        return 0.0, 0.0
    n = sum(layer_counts(model, c, 0))
    return exposed_s(
        c, cluster, n, max(offloaded_layer_bytes(model, w, c)), stage_fwd_s / n, stage_bwd_s / n, micro_batches
    )
