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

What this model charges (the TE side was NOT read: TransformerEngine's ``cpu_offload`` was not fetched; the
schedule below is the documented intent "offloaded asynchronously", assumed):

* memory: the offloaded layers' saved activations leave HBM, except one layer's in flight (the layer whose copy
  runs while the next computes in forward, the layer reloaded while the next one's backward runs), so an offload
  of ``N`` layers saves ``N - 1`` layers' activations of the one micro-batch a PP=1 schedule holds.
* time: each offloaded layer's saved activations go D2H once in forward and H2D once in backward, over the host
  link (:func:`costmodel.offload.host_link_s`, the one formula of host-link time), on a copy engine beside the
  compute: a copy is hidden behind one layer's forward (D2H) or backward (H2D), and what is longer is exposed.
"""
from __future__ import annotations

from .errors import SpecError
from .offload import host_link_s


def check(c) -> None:
    """Megatron's refusals that need no model (``transformer_config.py@d98e8a64 __post_init__``)."""
    n = c.activation_offload_layers
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise SpecError("activation_offload_layers", n, "an integer >= 0 (Megatron --cpu-offloading-num-layers; "
                        "0 = off)")
    if n == 0:
        return
    if c.framework != "megatron":
        raise SpecError("activation_offload_layers", n, "0 unless framework=megatron (Megatron-Core's "
                        "--cpu-offloading-num-layers)")
    if c.pp > 1:
        raise SpecError("activation_offload_layers", n, "0 with pp > 1 (Megatron: no support for pipeline "
                        "parallelism with CPU offloading)")
    if c.recompute != "none" or c.recompute_modules is not None:
        raise SpecError("activation_offload_layers", n, "0 with recompute (Megatron: CPU offloading does not "
                        "work when activation recomputation is enabled)")


def check_model(model, c) -> None:
    """``cpu_offloading_num_layers >= num_layers`` is refused (``transformer_config.py@d98e8a64``)."""
    if c.activation_offload_layers >= model.layers and c.activation_offload_layers:
        raise SpecError("activation_offload_layers", c.activation_offload_layers,
                        f"an integer from 0 to {model.layers - 1} (Megatron offloads fewer layers than "
                        f"num_layers={model.layers})")


def saved_bytes(c, layer_act_bytes: float) -> float:
    """HBM bytes the offload frees on the one stage: ``N - 1`` layers' activations (one layer in flight)."""
    return max(0, c.activation_offload_layers - 1) * layer_act_bytes


def exposed_s(c, cluster, layer_act_bytes: float, layer_fwd_s: float, layer_bwd_s: float, micro_batches: int):
    """(copy seconds on the link, exposed seconds) per step: each of the ``N`` offloaded layers' activations
    copied D2H (hidden behind one layer's forward) and H2D (behind one layer's backward), per micro-batch."""
    n = c.activation_offload_layers
    if n == 0:
        return 0.0, 0.0
    t = host_link_s(layer_act_bytes, cluster)
    link = 2 * n * micro_batches * t
    exposed = n * micro_batches * (max(0.0, t - layer_fwd_s) + max(0.0, t - layer_bwd_s))
    return link, exposed


def step_exposed_s(model, cluster, w, c, stage_fwd_s: float, stage_bwd_s: float, micro_batches: int):
    """(link, exposed) seconds per step of the plan's one stage (pp = 1) from its forward and backward (with
    recompute) per micro-batch, split evenly over its layers: the one place ``evaluate`` (both engines) and the
    fast path charge the offload's time."""
    if c.activation_offload_layers == 0:
        return 0.0, 0.0
    from .memory import offloaded_layer_bytes  # memory imports this module
    from .stage_contents import layer_counts
    n = sum(layer_counts(model, c, 0))
    return exposed_s(c, cluster, max(offloaded_layer_bytes(model, w, c)), stage_fwd_s / n, stage_bwd_s / n,
                     micro_batches)
