"""Cost tables: the step time of ``evaluate`` decomposed over the choices each term depends on.

A :class:`Choice` is everything the search picks except the stage split. For one choice the
step time of ``costmodel.api.evaluate`` is (its docstring)::

    step = (m - 1/v) * max_stage t_mb(stage) + sum_stage t_mb(stage) / v
           + max_stage dp_exposed(stage) + max_stage optimizer(stage) [+ max_stage stall(stage)]

(``stall``: fine-grained activation offloading's exposed reloads over the step, with the option on:
:meth:`Tables.fg_stall_s`), and every per-stage term is a function of the *number of layers on the
stage* and its position:
``first`` (embedding; the leading dense layers of an MoE model), ``mid`` (the middle stages,
all holding the same number of layers; stage 1 holds the most in-flight micro-batches, so it
binds their memory, and has the least 1F1B head start, so it binds their DP exposure),
``last`` (LM head and loss) and ``only`` (``pp = 1``). :class:`StageTable` holds, per position
and per layer count ``n``, the micro-batch time, DP exposure, optimizer time (stall) and peak memory.

Where the numbers come from (one source each, all in ``costmodel``):

* per layer: :func:`costmodel.engines.analytic.layer_timing` (compute, exposed communication and its
  SM interference, recompute) and :func:`costmodel.physics.memory.activations.activation_bytes_per_layer`;
* per stage position: one :func:`costmodel.engines.analytic.stage_timing` and one
  :func:`costmodel.physics.memory.stage_memory.stage_memory` probe give the embedding / LM-head extras and the PP
  send/recv time; parameters, ZeRO state and DP collectives are affine in the layer count and
  come from two probes of :func:`stage_params`, :func:`model_state_bytes` and :func:`dp_comm`.

The assembly (``count * per-layer + extras``, recompute of the first ``k`` layers, PP exposure
``max(0, t - fwd / v)`` when interleaved) mirrors ``stage_timing`` / ``stage_memory``;
``tests/test_search_tables.py`` checks it against ``evaluate`` to 1e-9 on random plans, and
every plan the search returns is re-scored by ``evaluate``.

The modules, one concept each: :mod:`.ticks` (the one time resolution), :mod:`.probe` (stage
positions and probe splits), :mod:`.stage_table` (one choice's tables), the terms :class:`Tables`
mixes in (:mod:`.layers` per layer, :mod:`.offload` activation offload, :mod:`.affine` parameters,
state and DP collectives, :mod:`.buckets` the step-end gradient buckets, :mod:`.stage` a position's
time and memory) and :mod:`.core` (the caches, and the assembly of a :class:`StageTable`).
"""

from .core import Tables
from .probe import KIND_INDEX, probe_split, stage_weight, with_layers_per_stage
from .stage_table import StageTable
from .ticks import resolution_s, ticks


__all__ = [
    "KIND_INDEX",
    "StageTable",
    "Tables",
    "probe_split",
    "resolution_s",
    "stage_weight",
    "ticks",
    "with_layers_per_stage",
]
