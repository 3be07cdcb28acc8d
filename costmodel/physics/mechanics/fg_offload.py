"""Fine-grained activation offloading as Megatron-Core runs it: ``--fine-grained-activation-offloading
--offload-modules expert_fc1 moe_act`` (module level; the layer-level ``--cpu-offloading-num-layers`` is
:mod:`costmodel.physics.mechanics.act_offload`).

Semantics read in NVIDIA/Megatron-LM@d98e8a64:

* ``megatron/core/transformer/transformer_config.py``: ``fine_grained_activation_offloading`` ("offload the input of
  the specified modules to the CPU"), ``offload_modules`` (choices ``attn_norm qkv_linear core_attn attn_proj
  mlp_norm expert_fc1 moe_act fused_group_mlp gdp_qkv``), ``min_offloaded_tensor_size`` (1024 * 1024 elements),
  ``activation_offload_fraction`` (1.0), ``delta_offload_bytes_across_pp_ranks`` (0),
  ``delay_offload_until_cuda_graph``. ``__post_init__`` refuses it with ``cpu_offloading``, with an empty or unknown
  module list, and ``moe_act``/``expert_fc1`` with ``moe`` in the recompute modules
  (:func:`costmodel.spec.plan_checks.check_fg_offload`). Pipeline parallelism, interleaving, selective recompute,
  FP8 and the EP overlap are supported (``docs/user-guide/features/fine_grained_activation_offloading.md``).
* ``megatron/core/transformer/moe/experts.py`` (``TEGroupedMLP.forward``): ``expert_fc1`` wraps the fc1 GEMM, its
  group holds what the GEMM saves of the permuted tokens (the MXFP8 / NVFP4 quantized input; under other recipes
  ``set_save_original_input``, the BF16 input) and is committed on the fc1 output; ``moe_act`` wraps the activation
  (inside the ``moe_act`` recompute's ``CheckpointWithoutOutput`` when that is on), its group holds the activation's
  input, the fc1 output, and is committed on the fc2 output ("to make sure the fc1_output is reloaded to GPU before
  recomputing moe_act"). Bytes: :func:`costmodel.physics.memory.activations.offloaded_group_bytes`.
* ``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``: a group's commit in forward makes the
  ``d2h_stream`` wait for the compute stream and copies the group's tensors of at least ``min_offloaded_tensor_size``
  elements into pinned host buffers (``bulk_offload_group``); their GPU memory is freed when the copy ends and the
  compute stream does not wait for it. In backward a group's *start* (the end of its backward) makes the
  ``h2d_stream`` wait for the compute stream and reloads the next group (``bulk_reload``: ``_groups_to_reload[-1]``,
  the group before it in forward order); the group's *commit* (the start of its backward) makes the compute stream
  wait for its reload (``on_group_commit_backward``). After the first iteration (``post_warmup_callback``) the last
  group of each name of the first chunk in backward stays on the GPU ("so that the reloading won't block the
  computing stream"; charged in :func:`costmodel.physics.memory.stage_memory.stage_memory`).

What this model charges per MoE layer and micro-batch, groups ``g_1 .. g_k`` in forward order, each copy taking
``t_g`` one way over the host link (:func:`costmodel.physics.mechanics.offload.host_link_s`, the one formula of
host-link time):

* backward: ``g_k``'s reload is issued at the end of the layer above's last group and hides behind the backward
  between them, taken as the layer's backward outside its routed experts (their share of the layer's forward FLOPs,
  :func:`window_s`); each earlier group's reload is issued when the later one's backward ends and awaited as its own
  begins, with nothing between (for ``moe_act`` then ``expert_fc1``: the activation's backward ends, the fc1's
  begins): exposed whole. :func:`layer_exposed_s`.
* forward: the copies hide unless one micro-batch's copies outlast its forward and backward on the stage (the D2H
  stream falls behind and a reload waits for its copy's event).
* the step: the most exposed stage's seconds per micro-batch, times the micro-batches (the steady state runs at its
  pace; the warm-up and cool-down's share is not charged). The copies' HBM traffic, the CPU's cost of issuing them
  and a chunk's first reload when it is not prefetched are not charged.
"""

from __future__ import annotations

import numpy as np

from costmodel.physics.kernels.flops import layer_forward_flops_per_token
from costmodel.physics.memory.activations import offloaded_group_bytes
from costmodel.physics.memory.stage_contents import layer_counts
from costmodel.physics.mechanics.offload import host_link_s


def window_s(model, seq_len: int, layer_bwd_s: float) -> float:
    """The backward of one MoE layer outside its routed experts (by their share of the layer's forward FLOPs):
    what the first reload of the layer below hides behind."""
    experts = 2.0 * model.topk * model.expert_params / layer_forward_flops_per_token(model, True, seq_len)
    return layer_bwd_s * max(0.0, 1.0 - experts)


def layer_exposed_s(copies_s: list[float], window):
    """Exposed reload seconds of one layer's groups (``copies_s`` in forward order) in backward (module docstring);
    elementwise over an array of ``window``."""
    if not copies_s:
        return 0.0
    last, earlier = copies_s[-1], copies_s[:-1]
    return np.maximum(0.0, last - window) + sum(earlier)


def counts_exposed_s(model, cluster, w, c, n_dense, n_moe, fwd_s, bwd_s):
    """(link seconds both ways, exposed seconds) per micro-batch of a stage holding ``n_dense`` dense and ``n_moe``
    MoE layers whose forward and backward (with recompute) per micro-batch are ``fwd_s``, ``bwd_s``, the backward
    split evenly over its layers: the one formula of a stage's offload time, elementwise over arrays of the counts
    and times (the search's tables, :mod:`search.tables.offload`, take it over every layer count of a stage)."""
    groups = offloaded_group_bytes(model, w, c)
    if not groups:
        return 0.0, 0.0
    t = [host_link_s(b, cluster) for b in groups.values()]
    d2h = n_moe * sum(t)
    layer = layer_exposed_s(t, window_s(model, w.seq_len, bwd_s / np.maximum(1, n_dense + n_moe)))
    return 2 * d2h, n_moe * layer + np.maximum(0.0, d2h - (fwd_s + bwd_s))


def stage_exposed_s(model, cluster, w, c, stage: int, fwd_s: float, bwd_s: float) -> tuple[float, float]:
    """(link seconds both ways, exposed seconds) per micro-batch on ``stage``, from its forward and backward (with
    recompute) per micro-batch (:func:`counts_exposed_s` at the stage's layers)."""
    n_dense, n_moe = layer_counts(model, c, stage)
    if not n_moe:
        return 0.0, 0.0
    link, exposed = counts_exposed_s(model, cluster, w, c, n_dense, n_moe, fwd_s, bwd_s)
    return float(link), float(exposed)


def step_exposed_s(model, cluster, w, c, stages, micro_batches: int) -> tuple[float, float]:
    """(link, exposed) seconds per step from ``stages``, ``(stage, fwd_s, bwd_s with recompute)`` per micro-batch of
    each (every stage, or one of each class of equal stages): the link of the busiest stage and the exposed seconds
    of the most exposed, each per micro-batch times ``micro_batches``. The one place ``evaluate`` (both engines) and
    the fast path charge the offload's time."""
    if not c.offload_modules:
        return 0.0, 0.0
    per = [stage_exposed_s(model, cluster, w, c, s, f, b) for s, f, b in stages]
    return micro_batches * max(p[0] for p in per), micro_batches * max(p[1] for p in per)
