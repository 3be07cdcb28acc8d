"""Frozen, keyword-only specs of the hardware: DMA engine classes, the device, its links and the cluster.

SI units inside, the unit in every name; each validates itself on construction and raises
:class:`~costmodel.spec.errors.SpecError` naming the field, the value and what is allowed
(:mod:`costmodel.spec.specs` re-exports them beside the model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from costmodel.spec.bounds import MAX_HBM_BYTES, _bounded, _in_range, _positive, _positive_int
from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB


#: the most engines of one DMA class a device may have: a sanity bound (B200 has a few tens of copy engines);
#: a count of 1e30 was an OverflowError traceback
MAX_DMA_ENGINES = 1_024
#: the smallest kernel or link efficiency a cluster file may state (a sanity bound: no kernel that runs reaches under
#: 1% of its peak; 1e-300 priced a step past float range, with numpy overflow warnings)
MIN_EFFICIENCY = 0.01


def _text(name: str, value) -> None:
    """A name-like field must be a string: a list or object failed later, unhashable, as a traceback."""
    if not isinstance(value, str):
        raise SpecError(name, value, "a string")


def _finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise SpecError(name, value, "true or false")


# --------------------------------------------------------------------------- cluster
@dataclass(frozen=True, kw_only=True)
class DmaEngineClass:
    """A class of data-movement engines on one device.

    Attributes
    ----------
    name : e.g. ``nccl-sm`` (NCCL kernels on SMs), ``copy`` (NVIDIA copy engines), ``cdma``.
    count : engines of this class that can run transfers concurrently.
    bw_bytes_per_s : peak bandwidth of one engine; 0 means limited by the link only.
    scopes : which transfers it serves: ``intra`` (inside a node) and/or ``inter`` (across nodes).
    uses_compute : True when the engine is really compute cores running a communication
        kernel (NCCL on SMs); it then slows concurrent compute by the device's
        ``comm_compute_interference``. Dedicated DMA engines do not.
    """

    name: str
    count: int
    bw_bytes_per_s: float = 0.0
    scopes: tuple[str, ...] = ("intra", "inter")
    uses_compute: bool = False

    def __post_init__(self):
        _text("dma.name", self.name)
        _positive_int(f"dma.{self.name}.count", self.count)
        if self.count > MAX_DMA_ENGINES:
            raise SpecError(f"dma.{self.name}.count", self.count, f"at most {MAX_DMA_ENGINES:,} (a sanity bound)")
        _positive(f"dma.{self.name}.bw_bytes_per_s", self.bw_bytes_per_s, allow_zero=True)
        _in_range(self, "bw_bytes_per_s", f"dma.{self.name}.bw_bytes_per_s", kind="zero")
        object.__setattr__(self, "scopes", tuple(self.scopes))
        for s in self.scopes:
            if s not in ("intra", "inter"):
                raise SpecError(f"dma.{self.name}.scopes", s, "'intra' or 'inter'")
        _flag(f"dma.{self.name}.uses_compute", self.uses_compute)


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """One accelerator.

    Attributes
    ----------
    peak_bf16_flops_per_s : dense BF16/FP16 tensor-core peak. peak_fp8_flops_per_s : dense FP8 (0: none).
    hbm_bytes, hbm_bw_bytes_per_s : memory capacity and peak bandwidth.
    sm_count : streaming multiprocessors (or cores) that GEMM tiles are spread over.
    gemm_efficiency : fraction of peak a large BF16 GEMM achieves (cuBLAS-class kernels).
    fp8_gemm_efficiency : the same for FP8 GEMMs.
    attention_efficiency : fraction of BF16 peak a fused (flash) attention kernel achieves.
    mem_bw_efficiency : fraction of HBM bandwidth a streaming element-wise kernel achieves.
    kernel_overhead_s : fixed cost per kernel (launch and tail).
    comm_compute_interference : fraction of compute throughput lost while an SM-based
        collective runs concurrently (NCCL kernels occupy SMs and HBM bandwidth).
    dma_engines : engine classes (see :class:`DmaEngineClass`).
    kernel_table : the library whose measured GEMM table times single GEMMs (``trtllm``, ``vllm``, ``sglang``,
        optionally with a version; :mod:`costmodel.physics.kernels.measured`); empty: the fitted roofline.
    sustained_clocks : a table time is divided by the generation's sustained clock ratio (a training step holds
        the GPU at its power limit for seconds); False: as the table measured it (a serving engine's steps, as
        AIConfigurator's tables time them for that engine: :func:`costmodel.serving.engines.engine_cluster`).
    fp8_transpose : whether per-tensor-scaled FP8 GEMMs take only the TN layout, so that Transformer Engine keeps a
        transposed copy of an FP8 tensor for the backward GEMMs (True: Hopper, Ada, the default). Blackwell (sm100,
        sm103) takes any layout: ``is_non_tn_fp8_gemm_supported`` is true for compute capability 10.x and >= 13
        (``transformer_engine/pytorch/utils.py`` at NVIDIA/TransformerEngine@70f536662, v2.9), and
        ``Float8Quantizer``/``Float8CurrentScalingQuantizer::create_tensor`` then allocate the row-wise data alone,
        ``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()`` (``csrc/quantizer.cpp``).
    """

    name: str = "device"
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float = 0.0
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    sm_count: int = 108
    gemm_efficiency: float = 0.8
    fp8_gemm_efficiency: float = 0.6
    attention_efficiency: float = 0.6
    mem_bw_efficiency: float = 0.8
    kernel_overhead_s: float = 4e-6
    comm_compute_interference: float = 0.1
    dma_engines: tuple[DmaEngineClass, ...] = ()
    kernel_table: str = ""
    sustained_clocks: bool = True
    fp8_transpose: bool = True

    def __post_init__(self):
        for f in ("name", "kernel_table"):
            _text(f, getattr(self, f))
        for f in ("sustained_clocks", "fp8_transpose"):
            _flag(f, getattr(self, f))
        _positive("peak_bf16_flops_per_s", self.peak_bf16_flops_per_s)
        _positive("peak_fp8_flops_per_s", self.peak_fp8_flops_per_s, allow_zero=True)
        _positive("hbm_bytes", self.hbm_bytes)
        if not self.hbm_bytes <= MAX_HBM_BYTES:
            raise SpecError(
                "hbm_gib",
                self.hbm_bytes / GiB,
                f"at most {MAX_HBM_BYTES / GiB:,.0f} GiB per device (a sanity bound; was it given in bytes?)",
            )
        _positive("hbm_bw_bytes_per_s", self.hbm_bw_bytes_per_s)
        for f in ("peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "hbm_bw_bytes_per_s"):
            _in_range(self, f)
        _positive_int("sm_count", self.sm_count)
        _bounded(self)
        for f in ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "mem_bw_efficiency"):
            v = getattr(self, f)
            _positive(f, v, allow_zero=f == "fp8_gemm_efficiency")
            if v > 1 or 0 < v < MIN_EFFICIENCY:
                raise SpecError(f, v, f"a fraction in [{MIN_EFFICIENCY:g}, 1] (a sanity bound)")
        _positive("kernel_overhead_s", self.kernel_overhead_s, allow_zero=True)
        _in_range(self, "kernel_overhead_s")
        _positive("comm_compute_interference", self.comm_compute_interference, allow_zero=True)
        if self.comm_compute_interference >= 1:
            raise SpecError("comm_compute_interference", self.comm_compute_interference, "a fraction in [0, 1)")
        object.__setattr__(self, "dma_engines", tuple(self.dma_engines))
        if not self.dma_engines:
            raise SpecError("dma_engines", [], "at least one engine class")

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense tensor-core peak for GEMMs in ``dtype`` (FP8 falls back to BF16 when absent)."""
        if dtype == "fp8" and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s

    def gemm_peak_fraction(self, dtype: str) -> float:
        return self.fp8_gemm_efficiency if dtype == "fp8" and self.peak_fp8_flops_per_s else self.gemm_efficiency

    def engines_for(self, scope: str) -> DmaEngineClass:
        """The engine class that carries collectives of ``scope`` ('intra' or 'inter')."""
        for e in self.dma_engines:
            if scope in e.scopes:
                return e
        raise SpecError("dma_engines", [e.name for e in self.dma_engines], f"an engine class serving '{scope}'")

    def interference_on(self, scope: str) -> float:
        """The fraction by which collectives of ``scope`` slow concurrent compute: ``comm_compute_interference``
        where SM-based engines (NCCL kernels) carry them, 0 on dedicated DMA engines."""
        return self.comm_compute_interference if self.engines_for(scope).uses_compute else 0.0


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """A network level, seen from one GPU.

    bw_bytes_per_s : unidirectional bandwidth per GPU. latency_s : per-message latency (alpha).
    efficiency : fraction of ``bw_bytes_per_s`` that NCCL-class collectives achieve (bus bandwidth).
    nvls_efficiency : NVLink SHARP (in-switch reduction, NCCL's NVLS algorithm) on this link: the
        fraction of the effective bandwidth an NVLS all-reduce moves its buffer at; 0 means the
        link has no NVLS (no NVSwitch, or pre-Hopper). See :mod:`costmodel.physics.comm.collectives`.
    nvls_tree_channel_bw_bytes_per_s, nvls_tree_2node_channel_bw_bytes_per_s : NCCL's cap on the
        bus bandwidth of one NVLSTree channel (NVLS inside each node, a tree between nodes: the
        multi-node all-reduce of NVSwitch nodes) across more than two nodes and across two nodes
        (``perChMaxNVLSTreeBws`` in NCCL's ``src/graph/tuning.cc``: Hopper 45.5 / 57.7 GB/s,
        Blackwell 80 / 96 GB/s); 0 means NCCL runs no NVLSTree on this link.
    nvls_tree_medium_correction : NCCL applies its medium-size tree correction (``treeCorrectionFactor``)
        to the NVLSTree all-reduce too; ``src/graph/tuning.cc`` ``ncclTopoGetAlgoTime`` does so on
        Blackwell (compute capability >= 10.0) with x86 hosts only.
    """

    bw_bytes_per_s: float
    latency_s: float = 5e-6
    efficiency: float = 0.8
    nvls_efficiency: float = 0.0
    nvls_tree_channel_bw_bytes_per_s: float = 0.0
    nvls_tree_2node_channel_bw_bytes_per_s: float = 0.0
    nvls_tree_medium_correction: bool = False

    def __post_init__(self):
        _positive("bw_bytes_per_s", self.bw_bytes_per_s)
        _positive("latency_s", self.latency_s, allow_zero=True)
        _positive("efficiency", self.efficiency)
        if self.efficiency > 1 or self.efficiency < MIN_EFFICIENCY:
            raise SpecError("efficiency", self.efficiency, f"a fraction in [{MIN_EFFICIENCY:g}, 1] (a sanity bound)")
        _positive("nvls_efficiency", self.nvls_efficiency, allow_zero=True)
        if self.nvls_efficiency > 1:
            raise SpecError("nvls_efficiency", self.nvls_efficiency, "a fraction in [0, 1]")
        _positive("nvls_tree_channel_bw_bytes_per_s", self.nvls_tree_channel_bw_bytes_per_s, allow_zero=True)
        _positive(
            "nvls_tree_2node_channel_bw_bytes_per_s", self.nvls_tree_2node_channel_bw_bytes_per_s, allow_zero=True
        )
        for f in (
            "bw_bytes_per_s",
            "latency_s",
            "nvls_tree_channel_bw_bytes_per_s",
            "nvls_tree_2node_channel_bw_bytes_per_s",
        ):
            _in_range(self, f)
        _flag("nvls_tree_medium_correction", self.nvls_tree_medium_correction)

    @property
    def effective_bw_bytes_per_s(self) -> float:
        return self.bw_bytes_per_s * self.efficiency


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Nodes of identical devices: NVLink-class links inside an NVLink domain, NICs between domains.

    gpus_per_node : GPUs per host (one OS, one CPU memory, one storage path): the unit of CPU offload and
        checkpoint writes, and what ``nodes`` counts.
    nvlink_domain : GPUs joined by one NVLink/NVSwitch fabric (the scale-up domain); 0 means one node
        (HGX/DGX: the 8 GPUs of a node). A GB200/GB300 NVL72 rack joins 72 GPUs of 18 four-GPU hosts
        through its NVSwitch trays. Every collective is priced on this domain: a group inside it runs
        over ``intra_link``, a group spanning domains over ``inter_link`` (groups are taken as placed
        domain-aligned, as a scheduler's block/segment placement puts them).
    num_gpus : total GPUs (set from ``--gpus``; 0 until known).
    calibrated_constants : constants fitted to the user's measured runs (``planner calibrate``;
        empty: the cluster is not calibrated).
    calibration_log_residuals : leave-one-out ``ln(predicted / measured)`` of those runs; they
        narrow the uncertainty band (:mod:`costmodel.trust.uncertainty`).
    stack : the software stack the device's kernel constants are for (:mod:`costmodel.frameworks.stacks`;
        :func:`costmodel.frameworks.stacks.apply_stack` sets it); the default is the current NVIDIA stack.
    """

    name: str = "cluster"
    device: DeviceSpec
    gpus_per_node: int
    intra_link: LinkSpec
    inter_link: LinkSpec
    nvlink_domain: int = 0
    num_gpus: int = 0
    calibrated_constants: tuple[str, ...] = ()
    calibration_log_residuals: tuple[float, ...] = ()
    stack: str = "mcore-2025"

    def __post_init__(self):
        for f in ("name", "stack"):
            _text(f, getattr(self, f))
        _positive_int("gpus_per_node", self.gpus_per_node)
        _positive_int("nvlink_domain", self.nvlink_domain, allow_zero=True)
        _positive_int("num_gpus", self.num_gpus, allow_zero=True)
        _bounded(self)
        if self.nvlink_domain and self.nvlink_domain % self.gpus_per_node:
            raise SpecError(
                "nvlink_domain",
                self.nvlink_domain,
                f"a multiple of gpus_per_node={self.gpus_per_node} (or 0: one node)",
            )
        # a list, never a string: "x" was read as the constants 'x' (its characters), "1" as the residual 1.0
        names, resid = self.calibrated_constants, self.calibration_log_residuals
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise SpecError("calibrated_constants", names, "a list of constant names (strings)")
        if not isinstance(resid, (list, tuple)) or not all(_finite_number(x) for x in resid):
            raise SpecError("calibration_log_residuals", resid, "a list of finite numbers")
        object.__setattr__(self, "calibrated_constants", tuple(names))
        object.__setattr__(self, "calibration_log_residuals", tuple(float(x) for x in resid))

    def with_gpus(self, num_gpus: int) -> "ClusterSpec":
        return replace(self, num_gpus=num_gpus)

    @property
    def nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain: ``nvlink_domain``, or one node's GPUs where it is 0."""
        return self.nvlink_domain or self.gpus_per_node
