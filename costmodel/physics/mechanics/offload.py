"""Optimizer CPU offload as Megatron-Core runs it: ``HybridDeviceOptimizer``.

Semantics, from NVIDIA/Megatron-LM@d98e8a64 (``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``,
``megatron/core/optimizer/__init__.py``, ``megatron/training/arguments.py``):

* ``--optimizer-cpu-offload --optimizer-offload-fraction f`` (arguments.py default f = 1.0) hands the
  distributed optimizer's local shard to ``HybridDeviceOptimizer``; ``_get_sub_optimizer_param_groups``
  moves parameters, in order, to pinned CPU FP32 copies until ``f`` of the shard's elements are offloaded.
  Those elements' FP32 master weights and Adam moments live on the host; the rest keep an FP32 copy on the
  GPU (``param_update_in_fp32=True``) and are stepped by the GPU Adam. The BF16 weights and the gradient
  buffer stay on the GPU either way.
* Each step (``step``): the offloaded elements' gradients are copied device-to-host into pinned FP32
  buffers (the CPU copy's dtype), the GPU Adam is launched, the CPU Adam (``torch.optim.AdamW``,
  ``fused=True``) steps the offloaded elements, and a post-step hook copies them host-to-device into
  the BF16 parameters. ``torch.Tensor.copy_`` with ``non_blocking`` converts the dtype on the GPU
  (pytorch ``aten/src/ATen/native/cuda/Copy.cu``, ``copy_kernel_cuda``: "If non_blocking is true - type
  conversions are performed on the GPU"; read in the code index, commit not known), so a transfer carries the host side's FP32 bytes: 4 B down, 4 B up.
* Without ``--overlap-cpu-optimizer-d2h-h2d`` the copies run on the compute stream and one CPU
  optimizer steps everything: D2H, then the CPU Adam (beside the GPU Adam), then H2D, in sequence. With
  it, one CPU optimizer per parameter and separate D2H / H2D streams pipeline the three, so the
  slowest of them sets the time.
* Refused combinations (arguments.py ``validate_args``; ``optimizer/__init__.py``): offload needs
  ``--use-precision-aware-optimizer``, which needs the distributed optimizer and ``--optimizer adam``;
  with ``--fp8-param-gather`` it needs ``--fp8-recipe delayed`` (this model refuses fp8_param_gather
  with offload: the recipe is not a plan field).

Constants: :data:`HOST_LINK_BYTES_PER_S` (one direction of the GPU's PCIe x16 link, measured copies) and
:data:`HOST_MEM_BYTES_PER_S` (the CPU Adam is memory-bound; assumed). See each for its source.
"""

from __future__ import annotations

import numpy as np

from costmodel.physics.kernels.compute import optimizer_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec

GB = 1e9

#: one direction of the host link, by device-name prefix: nvbandwidth's copy-engine host <-> device copies per GPU
#: (``benchmarks/data/components/host_link.csv``, the lower direction of a system): H100 80GB HBM3 51 GB/s
#: (Azure ND H100 v5: H2D 51, D2H 52; samuel-bohman/AI-benchmarking-guide@26d18e9
#: Azure_Results/ND_H100_v5_results.md, "NV Bandwidth"); H200 52 GB/s (Azure ND H200 v5: 52 / 52;
#: Azure/AI-benchmarking-guide@7f20e5f Azure_Results/ND_H200_v5_results.md); A100 26 GB/s (Azure ND A100 v4 H2D
#: 26.28, Azure/AI-benchmarking-guide@3bb66ca Azure_Results/ND_A100_v4_results.md; "around 25-26GB/s" both ways,
#: github.com/NVIDIA/nvbandwidth/issues/11; that Azure file's D2H 6.27 is not used, see the CSV). One GPU copying
#: at a time: eight ranks copying at once are not measured. H800, B200: ASSUMED as H100 (PCIe Gen5 x16, no
#: measurement read). GB200, GB300: ASSUMED from the spec, no copy measured: the superchip joins one Grace CPU to its
#: two GPUs by NVLink-C2C at 900 GB/s bidirectional ("The GB200 Grace Blackwell Superchip connects two B200 GPUs to
#: a Grace CPU over a 900 GB/s ultra-low-power NVLink chip-to-chip interconnect", NVIDIA GB200 NVL72 product page),
#: so 450 GB/s a direction shared by two GPUs copying at once: 225 GB/s each (an upper figure: PCIe copies
#: reach about 80% of their line rate, see the rows above)
HOST_LINK_BYTES_PER_S = {
    "A100": 26 * GB,
    "H100": 51 * GB,
    "H200": 52 * GB,
    "H800": 51 * GB,
    "B200": 51 * GB,
    "GB200": 225 * GB,
    "GB300": 225 * GB,
}

#: host memory bandwidth a node's CPU Adam streams at (all its ranks together). ASSUMED (no source found):
#: 200 GB/s, about a third of a two-socket server's nominal DDR5 bandwidth.
HOST_MEM_BYTES_PER_S = 200 * GB

#: host bytes a CPU Adam step moves per parameter: FP32 master, gradient, m, v read (16 B); master, m, v
#: written (12 B) (the state layout of Rajbhandari et al. 2020, section 3.1, as ``compute.ADAM_STEP_BYTES``
#: without the BF16 weight write, which here is the H2D copy)
CPU_ADAM_BYTES_PER_PARAM = 28.0

#: bytes per offloaded element over the link: the FP32 gradient down, the FP32 parameter up (module docstring)
D2H_BYTES_PER_PARAM = 4.0
H2D_BYTES_PER_PARAM = 4.0


def host_link_bytes_per_s(cluster: ClusterSpec) -> float:
    """One direction of a GPU's host link (:data:`HOST_LINK_BYTES_PER_S`); 0 where the device is not listed."""
    name = cluster.device.name.upper()
    return next((bw for k, bw in HOST_LINK_BYTES_PER_S.items() if name.startswith(k)), 0.0)


def host_link_s(nbytes, cluster: ClusterSpec):
    """Seconds to copy ``nbytes`` one way over the GPU's host link (:func:`host_link_bytes_per_s`): the one formula
    of host-link time (optimizer offload here, activation offload in :mod:`costmodel.physics.mechanics.act_offload`)."""
    link = host_link_bytes_per_s(cluster)
    if link <= 0:
        raise SpecError(
            "device",
            cluster.device.name,
            f"one of {', '.join(HOST_LINK_BYTES_PER_S)} for CPU "
            "offload (no host-link bandwidth is known for this device)",
        )
    return nbytes / link


def offload_times_s(params_offloaded: float, cluster: ClusterSpec) -> tuple[float, float, float]:
    """(D2H, CPU Adam, H2D) seconds for ``params_offloaded`` elements of one GPU's shard per step.

    The node's CPU memory bandwidth is shared by its ``gpus_per_node`` ranks, each stepping its own shard.
    """
    if np.all(np.asarray(params_offloaded) <= 0):  # (an array over stage sizes: search.tables)
        return 0.0, 0.0, 0.0
    cpu_bw = HOST_MEM_BYTES_PER_S / max(1, cluster.gpus_per_node)
    return (
        host_link_s(D2H_BYTES_PER_PARAM * params_offloaded, cluster),
        CPU_ADAM_BYTES_PER_PARAM * params_offloaded / cpu_bw,
        host_link_s(H2D_BYTES_PER_PARAM * params_offloaded, cluster),
    )


def optimizer_step_s(gpu_adam_s: float, params_offloaded: float, cluster: ClusterSpec, c: ParallelConfig) -> float:
    """The optimizer step with ``c.optimizer_offload_fraction`` of the shard on the CPU.

    ``gpu_adam_s``: the GPU Adam over the elements kept on the GPU. Not overlapped: D2H, then the GPU and
    CPU Adams side by side, then H2D (``HybridDeviceOptimizer.step`` on one stream); overlapped
    (``--overlap-cpu-optimizer-d2h-h2d``): the slowest of the GPU Adam and the three pipelined parts.
    """
    return _step_s(gpu_adam_s, params_offloaded, cluster, c.overlap_cpu_optimizer_d2h_h2d)


def _step_s(gpu_adam_s, params_offloaded, cluster: ClusterSpec, overlap: bool):
    d2h, cpu, h2d = offload_times_s(params_offloaded, cluster)
    if overlap:
        return (
            np.maximum(np.maximum(gpu_adam_s, d2h), np.maximum(cpu, h2d))
            if np.ndim(gpu_adam_s)
            else max(gpu_adam_s, d2h, cpu, h2d)
        )
    return d2h + (np.maximum(gpu_adam_s, cpu) if np.ndim(gpu_adam_s) else max(gpu_adam_s, cpu)) + h2d


def shard_optimizer_s(
    local_params,
    cluster: ClusterSpec,
    optimizer_dtype: str = "fp32",
    optimizer_offload_fraction: float = 0.0,
    overlap_cpu_optimizer_d2h_h2d: bool = False,
):
    """The optimizer step of one GPU's shard of ``local_params`` elements (a number, or an array over stage
    sizes): the GPU Adam (:func:`costmodel.physics.kernels.compute.optimizer_time_s`) without offload, else
    :func:`optimizer_step_s` with ``optimizer_offload_fraction`` of the shard on the CPU. The one formula of
    the optimizer step: :func:`costmodel.compose.stage_terms.stage_optimizer_s` (``evaluate``), the search's tables and
    its bounds call it (``search.offload_choice.optimizer_s``).

    Nondecreasing in ``local_params`` (every part is affine in it with a nonnegative slope, and max and sum
    keep that), so a bound that evaluates it at a stage's fewest parameters stays below the stage's step."""
    f = optimizer_offload_fraction
    if f == 0.0:
        return optimizer_time_s(local_params, cluster.device, optimizer_dtype)
    return _step_s(
        optimizer_time_s((1.0 - f) * local_params, cluster.device, optimizer_dtype),
        f * local_params,
        cluster,
        overlap_cpu_optimizer_d2h_h2d,
    )
