"""Host (CPU) time to issue one layer's work in Megatron-Core + Transformer Engine training, and the floor it
puts under the GPU's time.

Mechanism. The host runs the layer's Python (Megatron-Core modules, Transformer Engine modules, PyTorch
eager ops and the autograd engine's calls into their backward functions) and issues the kernels in order;
the GPU cannot start a kernel before it is issued. The alltoall token dispatcher blocks the host once per
MoE layer forward until the GPU has drained its queue (``tokens_per_expert`` and the AllToAll-V splits
copied to the host: ``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize``, ``d2h_event.synchronize()``,
NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py @0d8e0714, the Megatron-LM that
Megatron-Bridge v0.2.0 / 25.11 pins), so between two syncs a segment takes about ``max(GPU time, host
time)``: the host runs ahead only as far as the GPU is slower. One layer and one phase is taken as such a
segment (:func:`host_gap_s`); without a sync (dense layers, the backward) a host that is slower in every layer
gives the same sum, and one that is faster gives no floor. Both engines apply it to a layer's time in each
phase, compute and exposed communication together (:mod:`costmodel.engines.analytic` ``layer_timing``,
:mod:`costmodel.engines.graph.compose` ``_layer_schedule``).

Host time of a layer (:func:`layer_host_s`), from CPU times measured per call on a GB200 (Grace) host and
scaled to the plan's host CPU (:func:`host_scale`):

* Transformer Engine modules, per call, forward and forward + backward (:data:`TE_MODULE_S`): the
  attention's ``LayerNormLinear`` (QKV) and ``Linear`` (projection), a dense MLP's ``LayerNormLinear`` (fc1)
  and ``Linear`` (fc2), a shared expert's two ``Linear``;
* the routed experts' grouped MLP, per local expert (:data:`GROUPED_MLP_PER_EXPERT_S`): its CPU cost grows
  with the experts (TE ``GroupedLinear`` loops over them in Python and issues a quantize and three GEMMs per
  expert and linear: ``tex.split_quantize``, ``general_grouped_gemm`` in the forward, dgrad and wgrad,
  ``transformer_engine/pytorch/module/grouped_linear.py`` @v2.10; 10 G + 19 launches for G local experts
  under MXFP8 counted there and in ``csrc/extensions/gemm.cpp``, each at least the 3.0 us of a bare
  ``cuLaunchKernel`` on a GB200 host, :data:`LAUNCH_FLOOR_S`: 30 us or more per expert, below the measured
  52 us that includes the Python);
* every other Python-level op the layer issues (:data:`EAGER_OP_S` each, counts in :func:`eager_ops`).

Not modelled: CUDA graphs (Megatron-Bridge's ``cuda_graph_scope`` ``attn`` / ``moe_router`` /
``moe_preprocess`` replace those parts' host time by one graph launch: not a plan field), the DDP
gradient hooks, the host time of a selectively recomputed module (a full recompute repeats the forward's).
Serving (``Workload.mode == 'infer'``) runs decode under CUDA graphs (:mod:`costmodel.serving.step`) and
other frameworks run other Python: no host floor is charged there by this module (SGLang's eager prefill:
:mod:`costmodel.serving.engine_host`).

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> from costmodel.spec.workload import Workload
>>> m, dev = load_model("qwen3-30b-a3b"), load_cluster("b200").device
>>> w = Workload(global_batch=512, seq_len=4096, dtype="fp8", recipe="mxfp8")
>>> f, b = layer_host_s(m, dev, w, ParallelConfig(dp=8, ep=8), True)
>>> 0.2e-3 < f < b < 1.5e-3   # 16 local experts, an x86 host: under a millisecond and a half
True
"""

from __future__ import annotations

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import DeviceSpec, ModelSpec
from costmodel.spec.workload import Workload

#: CPU time per call of Transformer Engine modules on a GB200 (Grace) host, ``(forward, forward + backward)``
#: seconds, by module and GEMM class: NVIDIA/TransformerEngine PR #3523 ("Remove the view() calls from
#: Linear/LNLinear/LNMLP modules", 2026-09-15), "Results on GB200 (just the CPU time is reported)", the
#: before-the-change column (the 25.11 container's TE predates it). Measured. FP8 per-tensor recipes (FP8-CS,
#: delayed scaling) take the MXFP8 row: the same quantize-then-GEMM Python path (ASSUMED).
TE_MODULE_S = {
    ("linear", "bf16"): (59.19e-6, 311.30e-6),
    ("linear", "fp8"): (114.51e-6, 440.93e-6),
    ("lnlinear", "bf16"): (83.48e-6, 397.73e-6),
    ("lnlinear", "fp8"): (135.42e-6, 518.67e-6),
}
#: CPU time of the routed experts' grouped MLP (two grouped linears and the activation) per local expert on a
#: GB200 host, ``(forward, backward)``: NVIDIA/TransformerEngine issue #2897 ("Reduce CPU overhead in grouped
#: MLP block", 2026-04-16): "on GB200 with 64 experts ... the forward pass takes ~1.2 ms and the backward pass
#: takes ~2.1 ms", its itemised costs (wgrad allocations, scale pointers, weight quantizers, tensor clears)
#: per expert tensor. Measured on TE's fused MXFP8 grouped-MLP op; the 25.11 ``GroupedLinear`` path and BF16
#: taken as the same per expert, all of it as growing with the experts (ASSUMED).
GROUPED_MLP_PER_EXPERT_S = (1.2e-3 / 64, 2.1e-3 / 64)
#: one Python-level PyTorch (or TE extension) op issuing one kernel on an x86 host: "4 us per op on CUDA",
#: pytorch/pytorch issue #82793 (2022-08-04, A100 host, PyTorch 1.12). Measured (a user's figure).
EAGER_OP_X86_S = 4e-6
#: a bare ``cuLaunchKernel`` on a GB200 host, 3.0 us (0 arguments) to 3.3 us (19): meta-pytorch/tritonbench
#: PR #1017 (2026-04-14), "per-kernel overhead breakdown (GB200)". Measured; the floor under every launch
#: (the module docstring's cross-check).
LAUNCH_FLOOR_S = 3.0e-6
#: CPU time of a ``torch.nn.Linear`` forward on GB200 (Grace) over an H100 DGX (Xeon Platinum 8480C) host,
#: 37.08 us / 13.48 us: NVIDIA/TransformerEngine issue #2053 ("High CPU overhead on Grace systems",
#: 2025-08-11), BF16, hidden 2048, 8192 tokens. Measured. Applied to all host time (TaxBreak, arXiv 2603.12465,
#: abstract: "CPU single-thread performance is a first-order parameter" of host-bound work).
GRACE_OVER_X86 = 37.08 / 13.48
#: devices whose host CPU is NVIDIA Grace (GB200 / GB300 NVL72 superchips, GH200); the others (DGX B200 /
#: B300 / H100 / H200 / A100) have x86 hosts
GRACE_HOSTED = ("GB200", "GB300", "GH200")
EAGER_OP_S = EAGER_OP_X86_S * GRACE_OVER_X86  # the Grace-host figure, as the TE tables above


def host_scale(dev: DeviceSpec) -> float:
    """Host time on ``dev``'s host CPU over a GB200 host's (the figures above): 1 on Grace, about 0.36 on x86.

    >>> from costmodel.spec.presets import load_cluster
    >>> host_scale(load_cluster("gb200-nvl72").device), round(host_scale(load_cluster("b200").device), 2)
    (1.0, 0.36)
    """
    return 1.0 if dev.name.upper() in GRACE_HOSTED else 1.0 / GRACE_OVER_X86


def eager_ops(model: ModelSpec, c: ParallelConfig, moe: bool, fp8: bool) -> int:
    """Python-level ops of one layer's forward outside the TE modules and the experts' grouped MLP (the
    backward calls as many backward functions; read in NVIDIA/Megatron-LM @0d8e0714):

    * attention: the fused RoPE on Q and on K, the core attention call, the bias-dropout-add (4);
    * dense MLP: the fused bias-activation, the bias-dropout-add (2);
    * MoE: the pre-MLP norm, the router GEMM, the score / top-k / aux-loss kernels (6, as
      :func:`costmodel.physics.kernels.compute._moe_ops` counts them), the dispatcher's preprocess
      (``MoEAlltoAllTokenDispatcher.preprocess``: per-expert counts, the count all-gather, splits, 12 with the
      device-to-host copies and the event), permute, dispatch AllToAll, ``sort_chunks_by_idxs`` there and
      back, combine AllToAll, unpermute, the activation, the bias-dropout-add (8 more), and under an FP8
      recipe the padding of tokens and probabilities to the quantization block and the unpadding
      (``Fp8Padding`` / ``Fp8Unpadding``, ``moe/experts.py``; 3).

    >>> from costmodel.spec.presets import load_model
    >>> eager_ops(load_model("llama3.1-8b"), ParallelConfig(), False, False)
    6
    >>> eager_ops(load_model("qwen3-30b-a3b"), ParallelConfig(ep=8, dp=8), True, True)
    35
    """
    n = 4
    if not moe:
        return n + 2
    return n + 1 + 1 + 6 + 12 + 8 + (3 if fp8 else 0)


def layer_host_s(
    model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig, moe: bool, recomputed: bool | None = None
) -> tuple[float, float]:
    """``(forward, backward)`` host seconds of one layer and micro-batch on one GPU (module docstring); the
    backward includes the forward again when the layer is recomputed in full (``recomputed``, by default
    ``c.recompute == 'full'``). Zero outside Megatron-Core training."""
    if w.mode != "train" or c.framework != "megatron":
        return 0.0, 0.0
    cls = "fp8" if w.dtype == "fp8" else "bf16"
    mods = [("lnlinear", cls), ("linear", cls)]  # attention: QKV, projection
    if not moe:
        mods += [("lnlinear", cls), ("linear", cls)]  # dense MLP: fc1 (with the norm), fc2
    elif model.shared_experts:
        mods += [("linear", cls), ("linear", cls)]  # shared expert MLP: fc1, fc2
    fwd = sum(TE_MODULE_S[k][0] for k in mods)
    bwd = sum(TE_MODULE_S[k][1] - TE_MODULE_S[k][0] for k in mods)
    if moe:
        g = max(1, model.experts // c.ep)
        fwd += g * GROUPED_MLP_PER_EXPERT_S[0]
        bwd += g * GROUPED_MLP_PER_EXPERT_S[1]
    ops = eager_ops(model, c, moe, cls == "fp8") * EAGER_OP_S
    s = host_scale(dev)
    fwd, bwd = s * (fwd + ops), s * (bwd + ops)
    if c.recompute == "full" if recomputed is None else recomputed:
        bwd += fwd
    return fwd, bwd


def host_gap_s(gpu_s: float, host_s: float) -> float:
    """Seconds a segment lasts beyond its GPU time because the host issues its work more slowly:
    ``max(GPU, host) - GPU`` (module docstring).

    >>> host_gap_s(3e-3, 1e-3), host_gap_s(1e-3, 2.5e-3)
    (0.0, 0.0015)
    """
    return max(0.0, host_s - gpu_s)
