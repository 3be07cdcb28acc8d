"""GEMM, grouped GEMM and element-wise kernel time on one GPU.

Each op is timed with a roofline, ``max(FLOPs / achieved FLOP/s, bytes / achieved HBM bandwidth)``
plus a per-kernel overhead. GEMM throughput falls for small shapes through two factors
(NVIDIA, "Matrix Multiplication Background User's Guide", sections on tile and wave
quantization):

* wave quantization: output tiles spread over the SMs; a partial last wave idles SMs. With
  stream-K/split-K kernels about a quarter wave is lost on average (assumption). The library runs
  the tile of :data:`TILE_SHAPES` that finishes first (as in the kernel benchmark);
* short reduction dimension: each tile pays a prologue/epilogue, modelled as ``K / (K + K0)``
  with ``K0 = 64`` elements at the BF16 rate, or the kernel benchmark's fit where its data span
  three or more K (:func:`step_k_overhead`). The prologue/epilogue is a fixed time per tile, so
  at a dtype that runs ``r`` times faster per element (FP8: twice BF16) it costs ``r K0``
  elements: FP8 gains least on short-K GEMMs. DeepGEMM's FP8 table on H800 shows the effect
  (README of 2025-03-25: 4096x32768x512 at 751 TFLOP/s against 4096x7168x16384 at 1426).
"""

from __future__ import annotations

import math
from functools import lru_cache
from costmodel.physics.kernels.kernel_fits import gemm_fit
from costmodel.physics.kernels.measured import table_gemm
from costmodel.spec.precision import RECIPES, bytes_per_element, generation
from costmodel.spec.specs import DeviceSpec
from costmodel.spec.units import DTYPE_BYTES

#: NVFP4 dense tensor-core peak over FP8's, per generation: B200 9 PFLOP/s dense FP4 vs 4.5 PFLOP/s dense
#: FP8 (NVIDIA B200 datasheet; the b200 preset's FP8 peak is that 4.5). Assumed 2 for every Blackwell part:
#: Blackwell Ultra (B300/GB300) is quoted at 1.5x B200's NVFP4, which this under-charges (a conservative gap).
NVFP4_PEAK_VS_FP8 = {"blackwell": 2.0}

#: fitted path (``--kernels fitted``): the fraction of its peak an NVFP4 GEMM reaches relative to the FP8
#: GEMM's fraction. Assumed from one measured point: B200's tables (costmodel/physics/tables, b200_sxm,
#: 8192 x 8192 x 8192) give FP8 per-tensor 0.4709 ms (2.335 PFLOP/s, 51.9% of 4.5) and NVFP4 0.2846 ms
#: (3.864 PFLOP/s, 42.9% of 9): 0.83. Carried to every shape: an assumption (evidence ``gemm.nvfp4``).
NVFP4_EFFICIENCY_VS_FP8 = 0.83

#: fitted path: MXFP8 and FP8 blockwise GEMMs at the FP8 per-tensor GEMM's efficiency (1.0). Assumed: the
#: Blackwell tensor core applies the E8M0 block scales inside the block-scaled MMA at the FP8 rate (no
#: measured MXFP8 table here); the FP8 blockwise kernels on Hopper apply FP32 scales in the epilogue of each
#: 128-deep K step (the H800 DeepGEMM fit, 0.76, is of that kind). Evidence ``gemm.mxfp8``.
MXFP8_EFFICIENCY_VS_FP8 = 1.0


def gemm_class(dtype: str) -> str:
    """The GEMM format a dtype or recipe name runs as (``mxfp8`` -> ``fp8``)."""
    r = RECIPES.get(dtype)
    return r.gemm_class if r is not None else dtype


def recipe_rate_factor(dev: DeviceSpec, dtype: str) -> float:
    """The fitted GEMM rate of recipe ``dtype`` over its GEMM class's (FP8) rate: NVFP4
    :data:`NVFP4_PEAK_VS_FP8` x :data:`NVFP4_EFFICIENCY_VS_FP8`; MXFP8 and FP8 blockwise
    :data:`MXFP8_EFFICIENCY_VS_FP8`; the rest 1.

    >>> from costmodel.spec.presets import load_cluster
    >>> d = load_cluster("b200").device
    >>> recipe_rate_factor(d, "fp8"), recipe_rate_factor(d, "mxfp8"), recipe_rate_factor(d, "nvfp4")
    (1.0, 1.0, 1.66)
    """
    if dtype == "nvfp4":
        return NVFP4_PEAK_VS_FP8.get(generation(dev.name), 2.0) * NVFP4_EFFICIENCY_VS_FP8
    if dtype in ("mxfp8", "fp8-blockwise"):
        return MXFP8_EFFICIENCY_VS_FP8
    return 1.0


TILE = 128  # GEMM output tile edge (assumption: cuBLAS-class 128x128 tiles)


#: Output tile shapes a GEMM library chooses among when its grid would leave SMs idle (CUTLASS, cuBLAS and
#: DeepGEMM ship 64- and 128-row tiles with 32-256 columns; DeepGEMM's JIT picks the block N that fills the
#: SMs): the kernel runs the shape that finishes first (:func:`gemm_utilization` takes the best). A
#: ``bm x bn`` tile reuses each loaded operand element ``bm bn / (bm + bn)`` times; below the 128x128
#: tile's reuse (64) the SM's operand bandwidth limits it to that ratio of the tensor-core rate (assumption).
TILE_SHAPES = ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32))


#: The step time's GEMMs choose among the same tiles as the kernel benchmark (one GEMM shape model for both;
#: benchmarks/RESULTS.md section 26: the published sets' accuracy and the fitted GEMM levels are unchanged by it).
STEP_TILE_SHAPES = TILE_SHAPES


#: Routed-expert GEMMs in training run as Transformer Engine's ``GroupedLinear`` (Megatron-Core
#: ``--moe-grouped-gemm`` -> ``TEGroupedMLP``): one cuBLAS GEMM per expert issued round-robin over TE's compute
#: streams ("Grouped GEMM via multi-stream cuBLAS", NVIDIA/TransformerEngine PR #853; 4 streams,
#: ``get_num_compute_streams`` in ``common/util/multi_stream.cpp`` and ``multi_stream_cublas_gemm`` in
#: ``common/gemm/cublaslt_gemm.cu``, TE@d0067d0), the default on Hopper (the CUTLASS grouped
#: kernel of TE PR #2045 is opt-in, ``NVTE_USE_CUTLASS_GROUPED_GEMM=1``, and no published run sets it). Fewer
#: expert GEMMs than the streams share the SMs at a time: TE's own H100 BF16 figures (PR #2045, TE 2.7 / CUDA
#: 12.9: 627.9 TFLOP/s at 8 x 4096x768x2048, 553.9 at 16 x 2048x768x2048; ``kernels.csv`` rows 242-243) are
#: what 2 concurrent experts give in the kernel model (-4.4%, +0.0%; 4: 13-16% faster than measured; all
#: groups at once, the single grouped kernel: 18-28% faster). TE 2.2's figures (rows 244-245) are 1 at a time.
#: NeMo AutoModel's ``experts: gmm`` (nv-grouped-gemm 1.1.4.post8, ``csrc/grouped_gemm.cu``) runs the same
#: mechanism on Hopper: one cuBLAS GEMM per expert over 4 streams (RESULTS.md section 42).
TE_GROUPED_GEMM_STREAMS = 2


K_OVERHEAD = 64  # reduction-dimension prologue/epilogue cost, in K elements (assumption)


WAVE_TAIL = 0.25  # average wasted fraction of a wave with stream-K/split-K (assumption)


def gemm_utilization(
    m: float,
    n: float,
    k: float,
    sm_count: int,
    k_overhead: float = K_OVERHEAD,
    ragged_groups: int = 0,
    tile_shapes: tuple[tuple[int, int], ...] = ((128, 128),),
) -> float:
    """Fraction of a device's large-GEMM throughput a GEMM of shape (m x k) @ (k x n) reaches.

    ``ragged_groups``: the ``m`` rows are the rows of that many groups of a grouped GEMM whose
    sizes vary (MoE experts receive data-dependent token counts), so every group ends in a
    partial tile: ``m / TILE + 1/2`` tile rows per group on average instead of ``ceil(m / TILE)``
    (grouped kernels tile each group separately; DeepGEMM README: every expert segment is padded
    to the GEMM M block). ``m`` is then the rows of one group and ``n`` the columns of all groups.

    >>> round(gemm_utilization(8192, 8192, 8192, 108), 3)
    0.986
    >>> gemm_utilization(128, 128, 64, 108) < 0.01
    True
    >>> gemm_utilization(256, 1536 * 16, 2048, 132, ragged_groups=16) < gemm_utilization(256, 1536 * 16, 2048, 132)
    True
    """
    return max(_tile_utilization(m, n, k, sm_count, k_overhead, ragged_groups, bm, bn) for bm, bn in tile_shapes)


def _tile_utilization(m, n, k, sm_count, k_overhead, ragged_groups, bm, bn) -> float:
    """:func:`gemm_utilization` for one output tile shape ``bm x bn``."""
    reuse = min(1.0, bm * bn / (bm + bn) / (TILE / 2))
    if ragged_groups:
        tiles = (m / bm + 0.5) * math.ceil(n / bn)
        useful = m / bm * math.ceil(n / bn)
        waves = tiles / sm_count
        wave_util = waves if waves < 1 - WAVE_TAIL else waves / (waves + WAVE_TAIL)
        return reuse * wave_util * useful / tiles * k / (k + k_overhead)
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    waves = tiles / sm_count
    wave_util = waves if waves < 1 - WAVE_TAIL else waves / (waves + WAVE_TAIL)
    return reuse * wave_util * k / (k + k_overhead)


def k_overhead(dev: DeviceSpec, dtype: str) -> float:
    """The per-tile prologue/epilogue in K elements at ``dtype``: fixed time, so it spans as many
    more elements as the dtype's peak exceeds BF16's (FP8 on Hopper: 2 x 64)."""
    return K_OVERHEAD * dev.peak_flops_per_s(dtype) / dev.peak_bf16_flops_per_s


def step_k_overhead(dev: DeviceSpec, dtype: str) -> float:
    """The per-tile K overhead a GEMM is charged: the kernel benchmark's fit for the device family and dtype
    where its rows span three or more reduction lengths (:data:`costmodel.physics.kernels.kernel_fits.GEMM_FITS`: H100 BF16 0,
    H800 FP8 480 elements), else :func:`k_overhead`. The isolated kernel and the step time share it.

    >>> from costmodel.spec.presets import load_cluster
    >>> step_k_overhead(load_cluster("h800").device, "fp8"), step_k_overhead(load_cluster("a100-80g").device, "bf16")
    (480, 64.0)
    """
    fit = gemm_fit(dev, dtype)
    return fit.k0 if fit is not None and fit.k0 is not None else k_overhead(dev, dtype)


def gemm_time_s(
    m: float,
    n: float,
    k: float,
    dev: DeviceSpec,
    dtype: str,
    batch: int = 1,
    ragged: bool = False,
    *,
    k0: float | None = None,
    tile_shapes: tuple[tuple[int, int], ...] | None = None,
) -> float:
    """Roofline time of ``batch`` GEMMs (m x k) @ (k x n); ``ragged``: their row counts vary around
    ``m`` (an M-grouped MoE GEMM, see :func:`gemm_utilization`). ``k0``: the per-tile K overhead in
    elements (default :func:`step_k_overhead`); ``tile_shapes``: the tile shapes the kernel chooses among
    (default :data:`STEP_TILE_SHAPES`)."""
    if tile_shapes is not None and type(tile_shapes) is not tuple:
        tile_shapes = tuple(tuple(t) for t in tile_shapes)
    return _gemm_time_s(m, n, k, dev, dtype, batch, ragged, k0, tile_shapes)


@lru_cache(maxsize=65536)
def _gemm_time_s(m, n, k, dev, dtype, batch, ragged, k0, tile_shapes) -> float:
    """:func:`gemm_time_s`, memoised: a search times each GEMM shape about 13 times (DeepSeek-V3 / 2048
    H800: 39,732 calls, 3,079 shapes), for the many plans whose layers share a TP/CP/EP/micro-batch."""
    flops = 2.0 * m * n * k * batch
    if flops <= 0:  # an empty problem (no routed tokens, an empty chunk): no kernel is launched
        return 0.0
    if dev.kernel_table and batch == 1 and not ragged:  # a single GEMM timed from its measured table
        t, _ = table_gemm(m, n, k, dev, dtype)
        if t is not None:
            return t
    recipe, dtype = dtype, gemm_class(dtype)  # a recipe name times as its GEMM class, at its rate and bytes
    util = gemm_utilization(
        m,
        n * batch,
        k,
        dev.sm_count,
        step_k_overhead(dev, dtype) if k0 is None else k0,
        batch if ragged and batch > 1 else 0,
        STEP_TILE_SHAPES if tile_shapes is None else tile_shapes,
    )
    rate = dev.peak_flops_per_s(dtype) * dev.gemm_peak_fraction(dtype) * util
    in_bytes = DTYPE_BYTES[dtype] if dtype == "fp8" else ACT_BYTES
    if recipe != dtype and dtype == "fp8":
        rate *= recipe_rate_factor(dev, recipe)
        in_bytes = bytes_per_element(recipe, usages=1)
    bytes_moved = batch * ((m * k + k * n) * in_bytes + m * n * ACT_BYTES)
    return max(flops / rate, bytes_moved / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency)) + dev.kernel_overhead_s


def elementwise_time_s(bytes_moved: float, dev: DeviceSpec, kernels: int = 1) -> float:
    """A memory-bound kernel: bytes over achieved HBM bandwidth, plus launch overhead."""
    return bytes_moved / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency) + kernels * dev.kernel_overhead_s


def grouped_gemm_time_s(
    m: float,
    n: float,
    k: float,
    dev: DeviceSpec,
    dtype: str,
    groups: int = 1,
    ragged: bool = False,
    streams: int | None = None,
    *,
    k0: float | None = None,
    tile_shapes: tuple[tuple[int, int], ...] | None = None,
) -> float:
    """``groups`` GEMMs of (m x k) @ (k x n), issued as one grouped kernel (``streams`` None: all groups share
    the SMs, :func:`gemm_time_s` with ``batch=groups``) or as one GEMM per group over ``streams`` CUDA streams
    (Transformer Engine's ``GroupedLinear``, "Grouped GEMM via multi-stream cuBLAS", TE PR #853): ``streams``
    groups run at a time, so the SMs are filled by the tiles of ``streams`` groups, not of all of them, and
    ``ceil(groups / streams)`` rounds run one after another (:data:`TE_GROUPED_GEMM_STREAMS`). ``k0``,
    ``tile_shapes``: as :func:`gemm_time_s` (the kernel benchmark passes its fits).

    >>> from costmodel.spec.presets import load_cluster
    >>> d = load_cluster("h100-sxm").device
    >>> t = [grouped_gemm_time_s(2048, 768, 2048, d, "bf16", 16, streams=s) for s in (None, 2, 1)]
    >>> t[0] < t[1] < t[2]
    True
    """
    if streams is None or groups <= 1 or streams >= groups:
        return gemm_time_s(m, n, k, dev, dtype, batch=groups, ragged=ragged, k0=k0, tile_shapes=tile_shapes)
    rounds = math.ceil(groups / streams)
    return rounds * gemm_time_s(m, n, k, dev, dtype, batch=streams, ragged=ragged, k0=k0, tile_shapes=tile_shapes)


ACT_BYTES = 2  # activations are BF16 (also under FP8 GEMMs, whose outputs are BF16)
