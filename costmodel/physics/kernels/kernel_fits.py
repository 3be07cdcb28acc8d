"""Isolated-kernel efficiencies fitted to published kernel measurements, and the attention kernel's shape model.

The step-time model's device constants (``DeviceSpec.gemm_efficiency`` 0.53 for Hopper BF16, ...) were
fitted to end-to-end step times. This module holds what single kernels reach on their own, fitted to
``benchmarks/data/components/kernels.csv`` by ``benchmarks/component_kernels.py --fit`` (the values below
are that command's output; ``tests/test_component_kernels.py`` refits and compares):

* GEMM: the roofline and tile/wave/short-K shape factors of :func:`costmodel.physics.kernels.gemm.gemm_time_s`
  unchanged, with one large-GEMM efficiency per device and dtype (:data:`GEMM_FITS`), and the HBM
  bandwidth and per-kernel time of weight-streaming GEMMs (M < 128) per device (:data:`STREAM_FITS`).
* Attention (FlashAttention-class fused kernels): a fraction ``eta`` of the BF16 peak, lowered by three
  shape factors (:func:`attention_utilization`):

  - the per-query-tile prologue/epilogue (load Q, rescale and write O, ``L0`` key tokens' worth of work):
    ``L / (L + L0)`` with ``L`` the keys each query tile visits (``s_kv``; causal: ``(s_kv + TILE) / 2``);
  - the non-matmul work per score (exp, max, rescale on the special-function units; H100 SXM5 has 989
    TFLOP/s of matmul but 3.9 TFLOP/s of exponentials, Shah et al. 2024, FlashAttention-3, arXiv
    2407.08608, section 3): ``d / (d + D0)`` for head dimension ``d``, ``D0`` the matmul FLOPs per head
    dimension one score's softmax work costs;
  - causal masking computes the diagonal tiles whole: of ``nb (nb + 1) / 2`` tiles per head, ``nb^2 / 2``
    are counted (``nb = s / TILE``), a fraction ``nb / (nb + 1)``.

  One fit per device, kernel (``fa2``, ``fa3``, ``cudnn``) and direction (:data:`ATTENTION_FITS`).

Devices are matched by family (:func:`device_family`): H200 and H800 share H100's compute die (132 SMs,
same clocks and tensor cores), so a fit of one Hopper part stands for the others where they have no
data of their own (assumption).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.spec.specs import DeviceSpec

TILE = 128  # FlashAttention query/key tile edge (FA2/FA3 use 128-row tiles at head dim 64-128)


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmFit:
    """Large-GEMM efficiency of isolated kernels on one device family and dtype.

    eta : fraction of the dense peak, multiplying :func:`costmodel.physics.kernels.gemm.gemm_utilization`.
    k0 : the per-tile prologue/epilogue in K elements, fitted only where the rows span three or more K
    values; None: the step time's :func:`costmodel.physics.kernels.gemm.k_overhead` (64 at BF16, 128 at FP8 on Hopper). rows : how many measurements it was fitted on; source : which
    kernels they time.
    """

    eta: float
    k0: float | None
    rows: int
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamFit:
    """Weight-streaming (HBM-bound, M < 128) GEMMs of isolated kernels on one device family.

    mem_bw_efficiency : fraction of HBM bandwidth reached; kernel_overhead_s : fixed time per kernel in
    back-to-back timing loops (launch latency hidden by the queue); rows : measurements fitted.
    """

    mem_bw_efficiency: float
    kernel_overhead_s: float
    rows: int


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionFit:
    """Fused-attention efficiency of one kernel and direction on one device family.

    eta : fraction of the BF16 peak at long sequences and large head dimension.
    l0_tokens : per-query-tile overhead in key tokens (``L0``); d0 : softmax work per score in
    head-dimension units (``D0``); rows : measurements fitted.
    """

    eta: float
    l0_tokens: float
    d0: float
    rows: int


#: (family, dtype) -> fit. Output of ``benchmarks/component_kernels.py --fit``.
GEMM_FITS: dict[tuple[str, str], GemmFit] = {
    ("A100", "bf16"): GemmFit(eta=0.965, k0=None, rows=2, source="CUTLASS (CUDA 11.3); cuBLAS (CUDA 11.3)"),
    ("B200", "bf16"): GemmFit(eta=0.97, k0=None, rows=4, source="torch-bf16 (vLLM bench_fp8_gemm.py)"),
    ("B200", "fp8"): GemmFit(
        eta=0.66, k0=None, rows=4, source="vLLM CUTLASS fp8 tensor-scaled, no quant (bench_fp8_gemm.py)"
    ),
    ("H100", "bf16"): GemmFit(
        eta=0.815,
        k0=0,
        rows=7,
        source="torch-bf16 (vLLM bench_fp8_gemm.py); torch.matmul (PyTorch 2.7.0+cu128, cuBLAS)",
    ),
    ("H100", "fp8"): GemmFit(
        eta=0.49, k0=None, rows=2, source="vLLM CUTLASS fp8 tensor-scaled, no quant (bench_fp8_gemm.py)"
    ),
    ("H100-500W", "bf16"): GemmFit(
        eta=0.635,
        k0=None,
        rows=3,
        source="torch bf16 matmul (FBGEMM bench; Meta H100 at 500 W, memory type not stated)",
    ),
    ("H100-500W", "fp8"): GemmFit(eta=0.635, k0=None, rows=3, source="FBGEMM fp8 row-wise GEMM (gemm only)"),
    ("H800", "fp8"): GemmFit(eta=0.76, k0=480, rows=22, source="DeepGEMM (1x128/128x128 block-scaled FP8, NVCC 12.8)"),
}
#: family -> fit. Output of ``benchmarks/component_kernels.py --fit``.
STREAM_FITS: dict[str, StreamFit] = {
    "B200": StreamFit(mem_bw_efficiency=1.0, kernel_overhead_s=2.5e-06, rows=6),
    "H100": StreamFit(mem_bw_efficiency=0.94, kernel_overhead_s=4.5e-06, rows=12),
    "H800": StreamFit(mem_bw_efficiency=0.78, kernel_overhead_s=1.0e-06, rows=6),
}
#: (family, kernel, direction) -> fit, direction in fwd / bwd / fwd_bwd.
ATTENTION_FITS: dict[tuple[str, str, str], AttentionFit] = {
    ("A100", "fa2", "fwd_bwd"): AttentionFit(eta=0.745, l0_tokens=192, d0=20, rows=21),
    ("H100", "cudnn", "bwd"): AttentionFit(eta=0.549, l0_tokens=368, d0=0, rows=6),
    ("H100", "cudnn", "fwd"): AttentionFit(eta=0.74, l0_tokens=112, d0=48, rows=36),
    ("H100", "fa2", "bwd"): AttentionFit(eta=0.501, l0_tokens=272, d0=64, rows=6),
    ("H100", "fa2", "fwd"): AttentionFit(eta=0.352, l0_tokens=96, d0=4, rows=36),
    ("H100", "fa2", "fwd_bwd"): AttentionFit(eta=0.398, l0_tokens=208, d0=20, rows=24),
    ("H100", "fa3", "bwd"): AttentionFit(eta=0.597, l0_tokens=400, d0=0, rows=6),
    ("H100", "fa3", "fwd"): AttentionFit(eta=0.939, l0_tokens=288, d0=52, rows=35),
}

FAMILIES = ("A100", "H100", "H800", "H200", "B200")
#: where a family has no data of its own: the part whose fit stands in (same compute die)
STAND_IN = {"H200": "H100", "H800": "H100"}


def device_family(dev: DeviceSpec) -> str:
    """``A100``, ``H100``, ``H800``, ``H200``, ``B200`` from the device name, ``""`` when none matches.

    >>> from costmodel.spec.presets import load_cluster
    >>> device_family(load_cluster("h200").device)
    'H200'
    """
    for fam in FAMILIES:
        if fam in dev.name:
            return fam
    return ""


def _lookup(table: dict, fam: str, *rest):
    for f in (fam, STAND_IN.get(fam, "")):
        if (f, *rest) in table:
            return table[(f, *rest)]
    return None


def gemm_fit(dev: DeviceSpec, dtype: str) -> GemmFit | None:
    """The isolated-GEMM fit for ``dev`` at ``dtype`` (FP16 as BF16), or None without data."""
    fam = device_family(dev)
    key = "bf16" if dtype in ("bf16", "fp16") else dtype
    if dev.name.endswith("500W") and (fam + "-500W", key) in GEMM_FITS:
        return GEMM_FITS[(fam + "-500W", key)]
    return _lookup(GEMM_FITS, fam, key)


def stream_fit(dev: DeviceSpec) -> StreamFit | None:
    fam = device_family(dev)
    return STREAM_FITS.get(fam) or STREAM_FITS.get(STAND_IN.get(fam, ""))


def kernel_device(dev: DeviceSpec) -> DeviceSpec:
    """``dev`` with the isolated-kernel GEMM efficiencies of :data:`GEMM_FITS` and the weight-streaming
    bandwidth and per-kernel time of :data:`STREAM_FITS` where there are data."""
    bf, f8, st = gemm_fit(dev, "bf16"), gemm_fit(dev, "fp8"), stream_fit(dev)
    return replace(
        dev,
        gemm_efficiency=bf.eta if bf else dev.gemm_efficiency,
        fp8_gemm_efficiency=f8.eta if f8 and dev.peak_fp8_flops_per_s else dev.fp8_gemm_efficiency,
        mem_bw_efficiency=st.mem_bw_efficiency if st else dev.mem_bw_efficiency,
        kernel_overhead_s=st.kernel_overhead_s if st else dev.kernel_overhead_s,
    )


def attention_fit(dev: DeviceSpec, kernel: str, direction: str) -> AttentionFit | None:
    """The fit for ``kernel`` and ``direction`` on ``dev``; a ``fwd_bwd`` fit stands in for either direction."""
    fam = device_family(dev)
    return _lookup(ATTENTION_FITS, fam, kernel, direction) or _lookup(ATTENTION_FITS, fam, kernel, "fwd_bwd")


def attention_utilization(seq_kv: float, head_dim: float, causal: bool, l0_tokens: float, d0: float) -> float:
    """Fraction of a fused-attention kernel's long-sequence throughput reached at this shape (module docstring).

    >>> round(attention_utilization(16384, 128, False, 0.0, 0.0), 3)
    1.0
    >>> attention_utilization(512, 128, True, 100.0, 30.0) < attention_utilization(16384, 128, True, 100.0, 30.0)
    True
    """
    if causal:
        nb = max(seq_kv / TILE, 1.0)
        visited = (seq_kv + TILE) / 2
        masked = nb / (nb + 1)
    else:
        visited, masked = seq_kv, 1.0
    return visited / (visited + l0_tokens) * head_dim / (head_dim + d0) * masked


def attention_time_s(
    flops: float,
    dev: DeviceSpec,
    *,
    seq_kv: float,
    head_dim: float,
    causal: bool,
    eta: float,
    l0_tokens: float = 0.0,
    d0: float = 0.0,
) -> float:
    """Time of a fused attention kernel doing ``flops`` (counted with the causal saving) at BF16 peak
    times ``eta`` times :func:`attention_utilization`, plus one kernel overhead."""
    util = attention_utilization(seq_kv, head_dim, causal, l0_tokens, d0)
    return flops / (dev.peak_bf16_flops_per_s * eta * util) + dev.kernel_overhead_s


#: the kernel each family's preset ``attention_efficiency`` describes (``costmodel/spec/presets/clusters/*.json``):
#: Transformer Engine's cuDNN fused attention on Hopper, FlashAttention-2 on A100
NATIVE_ATTENTION = {"A100": "fa2", "H100": "cudnn", "H800": "cudnn", "H200": "cudnn"}
#: the shape at which a preset's ``attention_efficiency`` is read: causal, 16k tokens, head dim 128
#: (h100-sxm.json cites the cuDNN causal forward at 8k-16k tokens, head dim 128)
REF_SEQ, REF_HEAD_DIM = 16384, 128


def attention_shape_factor(dev: DeviceSpec, seq_kv: float, head_dim: float, causal: bool, direction: str) -> float:
    """Throughput of the device's native fused-attention kernel at this shape over its throughput at the
    reference shape (:data:`REF_SEQ`, :data:`REF_HEAD_DIM`, causal), from the fit of that kernel and
    direction; 1 where the family has no attention data (B200: none published with shapes).

    >>> from costmodel.spec.presets import load_cluster
    >>> h100 = load_cluster("h100-sxm").device
    >>> attention_shape_factor(h100, 2048, 128, True, "fwd") < 1.0 < attention_shape_factor(h100, 16384, 128, False, "fwd")
    True
    >>> attention_shape_factor(load_cluster("b200").device, 2048, 128, True, "fwd")
    1.0
    """
    kernel = NATIVE_ATTENTION.get(device_family(dev))
    fit = attention_fit(dev, kernel, direction) if kernel else None
    if fit is None:
        return 1.0
    return attention_utilization(seq_kv, head_dim, causal, fit.l0_tokens, fit.d0) / attention_utilization(
        REF_SEQ, REF_HEAD_DIM, True, fit.l0_tokens, fit.d0
    )
