"""Compute cost of one transformer layer on one GPU, per micro-batch: FLOPs, bytes and time per op.

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

MoE layers (Megatron-Core ``--moe-grouped-gemm``, alltoall or allgather dispatcher) also pay,
per layer and micro-batch: the router's softmax/top-k/aux-loss kernels, the token permute and
unpermute (gathers/scatters of ``topk`` copies of every token), one device-to-host copy of
``tokens_per_expert`` that the host needs before it can size the AllToAll-V and the grouped
GEMM, and the ragged per-expert row counts of the grouped GEMM (each expert's rows end in a
partial tile). The slowest expert-parallel rank sets the pace (``ModelSpec.moe_imbalance``).

Layer structure and GEMM shapes follow Megatron-LM (Shoeybi et al. 2019, Fig. 3): column-
parallel QKV and MLP-in, row-parallel attention-out and MLP-out, each split by ``tp``.

>>> from costmodel.presets import load_model, load_cluster
>>> from costmodel.config import ParallelConfig
>>> from costmodel.specs import Workload
>>> ops = layer_ops(load_model("gpt3-175b"), load_cluster("a100-80g").device,
...                 Workload(global_batch=8, seq_len=2048), ParallelConfig(tp=8, mb=1))
>>> [o.name for o in ops][:4]
['ln1', 'qkv', 'attn_core', 'attn_out']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist

from . import dropout as _dropout
from .config import ParallelConfig
from .kernels import attention_shape_factor, gemm_fit
from .kvcache import kv_dtype_bytes, kv_elements_per_token_layer
from .specs import DeviceSpec, ModelSpec, Workload
from .units import DTYPE_BYTES

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
#: A blocking device-to-host copy of ``tokens_per_expert`` (Megatron-Core token dispatcher,
#: ``tokens_per_expert.cpu()`` / the ``.tolist()`` of the AllToAll-V splits and grouped-GEMM sizes):
#: the copy call alone costs 5-7 us (Wu et al. 2026, "DualPath", arXiv 2602.21548, section 5.2,
#: measured cudaMemcpyAsync per-call latency); the GPU has drained its queue by then, so the
#: launches of the kernels that follow are exposed too (counted as 3 kernel overheads below).
HOST_COPY_S = 7e-6
SYNC_EXPOSED_LAUNCHES = 3  # kernels launched into the empty queue after the sync (assumption)
ACT_BYTES = 2  # activations are BF16 (also under FP8 GEMMs, whose outputs are BF16)
#: FlashAttention-2's throughput over the cuDNN fused-attention kernel's on Hopper (H100 SXM5, head dim
#: 128, causal, 8k-16k tokens: forward 333-335 against 529-539 TFLOP/s, backward 318-322 against 516-518;
#: Shah et al. 2024, "FlashAttention-3", arXiv 2407.08608, Figures 5 and 6): 0.62 in both directions. A
#: Hopper preset's ``attention_efficiency`` is that of the cuDNN/FlashAttention-3-class kernel (Transformer
#: Engine's fused attention); a software stack that runs FlashAttention-2 there (PyTorch SDPA's flash
#: backend, the flash-attn 2 package) reaches this fraction of it.
FA2_HOPPER_RATIO = 0.62
HOPPER = ("H100", "H200", "H800")
#: PyTorch eager element-wise ops of a Llama block (``ParallelConfig.fused_elementwise=False``): HBM
#: bytes per element of the forward and kernel launches, read from torchtitan's model as benchmarked in
#: Dec 2024 (``torchtitan/models/norms.py`` RMSNorm, ``models/llama/model.py`` apply_rotary_emb and
#: FeedForward at 327b72b, 2024-12-11), one kernel per operator as eager PyTorch runs them:
#:
#: * RMSNorm ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w``: upcast (read 2 B,
#:   write 4), pow (4 + 4), mean (4), multiply (4 + 4), downcast (4 + 2), weight (2 + 2) = 36 B per
#:   element in 8 kernels (two on the row statistics); a fused norm reads and writes once, 4 B;
#: * rotary embedding on q and k, ``view_as_complex(x.float()) * freqs`` then ``type_as``: upcast (2 + 4),
#:   complex multiply (4 + 4), downcast (4 + 2) = 20 B per q/k element, 3 kernels each; fused stacks
#:   apply it inside the attention prologue or a fused kernel (not charged there);
#: * SwiGLU ``silu(w1 x) * w3 x``: silu (2 + 2), multiply (4 + 2) = 10 B per FFN element in 2 kernels
#:   (fused: read gate and up, write once, 6 B).
#:
#: ``torch.compile`` (torchtitan ``training.compile``) fuses each chain into one Triton kernel, which is
#: the fused case. Residual adds are one kernel either way.
EAGER_NORM_BYTES, EAGER_NORM_KERNELS = 36, 8
EAGER_ROPE_BYTES, EAGER_ROPE_KERNELS = 20, 6
EAGER_SWIGLU_BYTES, EAGER_SWIGLU_KERNELS = 10, 2


def fa2_device(dev: DeviceSpec) -> DeviceSpec:
    """``dev`` as a FlashAttention-2 stack sees it: on Hopper, attention at :data:`FA2_HOPPER_RATIO` of the
    preset's (cuDNN-class) attention efficiency; other devices unchanged (FA2 is their native kernel)."""
    if not any(h in dev.name for h in HOPPER):
        return dev
    return replace(dev, attention_efficiency=dev.attention_efficiency * FA2_HOPPER_RATIO)


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel of a layer's forward pass on one GPU, with its backward.

    ``fwd_s`` is the forward time; ``bwd_s`` the whole backward (for a GEMM: data-gradient
    plus weight-gradient); ``wgrad_s`` the weight-gradient part alone, the window in which a
    data-gradient collective can hide (Megatron's asynchronous TP all-reduce).
    ``block`` is ``attn`` or ``mlp``; ``comm_after`` names the TP collective that follows it.
    """

    name: str
    kind: str  # gemm | attention | elementwise
    block: str
    fwd_flops: float
    fwd_s: float
    bwd_s: float
    wgrad_s: float = 0.0
    comm_after: str = ""


def gemm_utilization(m: float, n: float, k: float, sm_count: int, k_overhead: float = K_OVERHEAD,
                     ragged_groups: int = 0, tile_shapes: tuple[tuple[int, int], ...] = ((128, 128),)) -> float:
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
    where its rows span three or more reduction lengths (:data:`costmodel.kernels.GEMM_FITS`: H100 BF16 0,
    H800 FP8 480 elements), else :func:`k_overhead`. The isolated kernel and the step time share it.

    >>> from costmodel.presets import load_cluster
    >>> step_k_overhead(load_cluster("h800").device, "fp8"), step_k_overhead(load_cluster("a100-80g").device, "bf16")
    (480, 64.0)
    """
    fit = gemm_fit(dev, dtype)
    return fit.k0 if fit is not None and fit.k0 is not None else k_overhead(dev, dtype)


def gemm_time_s(m: float, n: float, k: float, dev: DeviceSpec, dtype: str, batch: int = 1,
                ragged: bool = False, *, k0: float | None = None,
                tile_shapes: tuple[tuple[int, int], ...] | None = None) -> float:
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
    util = gemm_utilization(m, n * batch, k, dev.sm_count, step_k_overhead(dev, dtype) if k0 is None else k0,
                            batch if ragged and batch > 1 else 0,
                            STEP_TILE_SHAPES if tile_shapes is None else tile_shapes)
    rate = dev.peak_flops_per_s(dtype) * dev.gemm_peak_fraction(dtype) * util
    in_bytes = DTYPE_BYTES[dtype] if dtype == "fp8" else ACT_BYTES
    bytes_moved = batch * ((m * k + k * n) * in_bytes + m * n * ACT_BYTES)
    return max(flops / rate, bytes_moved / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency)) + dev.kernel_overhead_s


def elementwise_time_s(bytes_moved: float, dev: DeviceSpec, kernels: int = 1) -> float:
    """A memory-bound kernel: bytes over achieved HBM bandwidth, plus launch overhead."""
    return bytes_moved / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency) + kernels * dev.kernel_overhead_s


def grouped_gemm_time_s(m: float, n: float, k: float, dev: DeviceSpec, dtype: str, groups: int = 1,
                        ragged: bool = False, streams: int | None = None, *, k0: float | None = None,
                        tile_shapes: tuple[tuple[int, int], ...] | None = None) -> float:
    """``groups`` GEMMs of (m x k) @ (k x n), issued as one grouped kernel (``streams`` None: all groups share
    the SMs, :func:`gemm_time_s` with ``batch=groups``) or as one GEMM per group over ``streams`` CUDA streams
    (Transformer Engine's ``GroupedLinear``, "Grouped GEMM via multi-stream cuBLAS", TE PR #853): ``streams``
    groups run at a time, so the SMs are filled by the tiles of ``streams`` groups, not of all of them, and
    ``ceil(groups / streams)`` rounds run one after another (:data:`TE_GROUPED_GEMM_STREAMS`). ``k0``,
    ``tile_shapes``: as :func:`gemm_time_s` (the kernel benchmark passes its fits).

    >>> from costmodel.presets import load_cluster
    >>> d = load_cluster("h100-sxm").device
    >>> t = [grouped_gemm_time_s(2048, 768, 2048, d, "bf16", 16, streams=s) for s in (None, 2, 1)]
    >>> t[0] < t[1] < t[2]
    True
    """
    if streams is None or groups <= 1 or streams >= groups:
        return gemm_time_s(m, n, k, dev, dtype, batch=groups, ragged=ragged, k0=k0, tile_shapes=tile_shapes)
    rounds = math.ceil(groups / streams)
    return rounds * gemm_time_s(m, n, k, dev, dtype, batch=streams, ragged=ragged, k0=k0, tile_shapes=tile_shapes)


def _gemm(name, block, m, n, k, dev, dtype, comm_after="", groups: int = 1, ragged: bool = False,
          streams: int | None = None) -> Op:
    """A GEMM (or a grouped GEMM of ``groups`` problems, as for MoE experts) with its backward.

    ``ragged``: the groups' row counts ``m`` vary (routed tokens per expert): forward and dgrad
    are M-grouped with a partial last tile per group; wgrad reduces over those rows (its K is
    ``m``, short for fine-grained experts)."""
    t = grouped_gemm_time_s(m, n, k, dev, dtype, groups, ragged, streams)
    # backward: dgrad (m x n)@(n x k) and wgrad (k x m)@(m x n), same FLOPs as forward each
    dgrad = grouped_gemm_time_s(m, k, n, dev, dtype, groups, ragged, streams)
    wgrad = grouped_gemm_time_s(k, n, m, dev, dtype, groups, False, streams)
    if dtype == "fp8":
        # Transformer Engine casts each GEMM input to FP8 with a fused cast+transpose: forward
        # reads the BF16 input (2 B) and writes the FP8 copy and its transpose (1 B + 1 B);
        # backward does the same for the output gradient (NVIDIA Transformer Engine docs, FP8 primer).
        t += elementwise_time_s(4 * m * k * groups, dev)
        dgrad += elementwise_time_s(4 * m * n * groups, dev)
    return Op(name, "gemm", block, 2.0 * m * n * k * groups, t, dgrad + wgrad, wgrad, comm_after)


def _elementwise(name, block, bytes_fwd, dev, kernels=1) -> Op:
    t = elementwise_time_s(bytes_fwd, dev, kernels)
    return Op(name, "elementwise", block, 0.0, t, 2 * t)


def attention_flops(model: ModelSpec, tokens_q: float, seq_kv: float, tp: int, mla_absorbed: bool = False) -> float:
    """Forward FLOPs of scores and context, ``4 * s_q * s_kv * heads * d`` (no causal saving).

    This is the FLOP-counting convention of Narayanan et al. 2021, Eq. 3 (the ``s/6h`` term).
    ``mla_absorbed``: MLA decoding with the up-projections absorbed into the query and output
    projections (DeepSeek-V2, arXiv 2405.04434, section 2.1.2), so every head attends over the
    cached latent: scores over ``kv_lora_rank + qk_rope_head_dim``, context over ``kv_lora_rank``.
    """
    if mla_absorbed and model.is_mla:
        d_qk, d_v = model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    else:
        d_qk = model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0)
        d_v = model.v_head_dim if model.is_mla else model.head_dim
    return 2.0 * tokens_q * seq_kv * (model.heads / tp) * (d_qk + d_v)


def _decode_attention(model, dev, b: int, s: int, tp: int, kv_bytes: int) -> Op:
    """One new query per sequence against a cache of ``s`` tokens (inference decode step).

    A FlashDecoding-style kernel reads the whole KV cache once, so it is HBM-bound unless
    many query heads share each cached byte (MLA): roofline of FLOPs and cache bytes.
    """
    flops = attention_flops(model, b, s, tp, mla_absorbed=True)
    cache_bytes = b * s * kv_elements_per_token_layer(model, tp) * kv_bytes
    t = max(flops / (dev.peak_bf16_flops_per_s * dev.attention_efficiency),
            cache_bytes / (dev.hbm_bw_bytes_per_s * dev.mem_bw_efficiency)) + dev.kernel_overhead_s
    return Op("attn_core", "attention", "attn", flops, t, 0.0)


def _attention_core(model, dev, b: int, s: int, tp: int, cp: int, flash: bool, train: bool = True) -> Op:
    """Attention scores and context of ``b`` sequences of ``s`` tokens, split ``tp`` ways by head and
    ``cp`` ways by query (``flash``: fused FlashAttention, else Megatron's unfused kernels)."""
    sq = s / cp  # queries held by this GPU (context parallel shards the sequence)
    heads = model.heads / tp
    flops = attention_flops(model, b * sq, s, tp)
    if flash:
        # FlashAttention (Dao 2022): fused, skips the masked half of a causal mask; runs in BF16.
        # Backward is 2.5x the forward FLOPs (5 matmuls instead of 2). ``attention_efficiency`` is the
        # kernel's at causal 16k tokens, head dim 128; other shapes scale by the kernel's measured shape
        # factor (costmodel.kernels, fitted to benchmarks/data/components/kernels.csv). Under context
        # parallelism each ring step is a kernel over s/cp keys, the diagonal step causal and the others
        # full blocks (Liu et al. 2023; taken as full blocks of s/cp keys: an approximation).
        rate = dev.peak_bf16_flops_per_s * dev.attention_efficiency
        d = model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0)
        kv, causal = s / cp, cp == 1
        fwd = 0.5 * flops / (rate * attention_shape_factor(dev, kv, d, causal, "fwd"))
        bwd = 2.5 * 0.5 * flops / (rate * attention_shape_factor(dev, kv, d, causal, "bwd"))
        return Op("attn_core", "attention", "attn", flops, fwd + dev.kernel_overhead_s, bwd + dev.kernel_overhead_s)
    # Unfused (Megatron 2021/22): batched QK^T and PV GEMMs over full s x s scores, with the
    # fused scale-mask-softmax (read 2 B, write 2 B per score) and dropout (read 2, write 2 + 1 B mask),
    # which does not run at attention_dropout 0 or in inference (costmodel.dropout)
    d = model.head_dim
    bmm = gemm_time_s(sq, s, d, dev, "bf16", batch=int(b * heads)) + gemm_time_s(sq, d, s, dev, "bf16", batch=int(b * heads))
    scores = b * heads * sq * s
    per_score, kernels = _dropout.score_kernel_bytes(model.attention_dropout, train)
    ew = elementwise_time_s(per_score * scores, dev, kernels=kernels)
    return Op("attn_core", "attention", "attn", flops, bmm + ew, 2 * bmm + 2 * ew)


def layer_ops(model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig,
              moe: bool = False, *, decode: bool = False, kv_dtype: str = "bf16") -> tuple[Op, ...]:
    """The forward ops of one (dense or MoE) layer on one GPU for one micro-batch, in order.

    ``decode``: an inference decode step, one new token for each of ``c.mb`` sequences whose
    KV cache (in ``kv_dtype``) holds ``w.seq_len`` tokens; GEMMs then have ``m = c.mb`` rows.
    """
    kv_bytes = kv_dtype_bytes(kv_dtype) if decode else 0
    return _layer_ops(model, dev, w.seq_len, w.dtype, c.tp, c.cp, c.mb, c.sp_on, c.ep, moe, c.flash_attention,
                      decode, kv_bytes, w.mode == "infer", c.fused_elementwise)


@lru_cache(maxsize=4096)
def _layer_ops(model, dev, seq_len, dtype, tp, cp, mb, sp, ep, moe, flash, decode=False, kv_bytes=0, serving=False,
               fused=True):
    h = model.hidden
    n = mb if decode else mb * seq_len / cp  # tokens on this GPU
    n_sp = n / tp if sp else n  # tokens held by element-wise ops (sequence parallel shards them)
    tp_comm = "rs" if sp else "ar"
    ops: list[Op] = []
    # element-wise ops: fused kernels, or PyTorch eager (EAGER_* above)
    norm_b, norm_k = (2 * ACT_BYTES, 1) if fused else (EAGER_NORM_BYTES, EAGER_NORM_KERNELS)
    ops.append(_elementwise("ln1", "attn", norm_b * n_sp * h, dev, norm_k))
    if model.is_mla:
        qkv_width = (model.attn_params - model.heads * model.v_head_dim * h) / h / tp
        o_in = model.heads * model.v_head_dim / tp
        qk_width = model.heads * model.qk_rope_head_dim / tp + model.qk_rope_head_dim
    else:
        kv_rep = min(tp, model.kv_heads)
        qkv_width = model.heads * model.head_dim / tp + 2 * model.kv_dim / kv_rep
        o_in = model.heads * model.head_dim / tp
        qk_width = model.heads * model.head_dim / tp + model.kv_dim / kv_rep
    ops.append(_gemm("qkv", "attn", n, qkv_width, h, dev, dtype))
    if not fused:
        ops.append(_elementwise("rope", "attn", EAGER_ROPE_BYTES * n * qk_width, dev, EAGER_ROPE_KERNELS))
    ops.append(_decode_attention(model, dev, mb, seq_len, tp, kv_bytes) if decode
               else _attention_core(model, dev, mb, seq_len, tp, cp, flash, not serving))
    ops.append(_gemm("attn_out", "attn", n, h, o_in, dev, dtype, comm_after=tp_comm))
    # bias-dropout-add: read out and residual, write sum, 1-byte mask (none at hidden_dropout 0, costmodel.dropout)
    bda_bytes = (3 * ACT_BYTES + _dropout.mask_bytes(model.hidden_dropout, not serving)) * n_sp * h
    ops.append(_elementwise("bda1", "attn", bda_bytes, dev))
    ops.append(_elementwise("ln2", "mlp", norm_b * n_sp * h, dev, norm_k))
    gated = model.activation == "swiglu"
    if moe:
        ops.extend(_moe_ops(model, dev, dtype, n, tp, ep, gated, tp_comm, host_sync=not serving, n_route=n_sp))
    else:
        f = model.ffn_hidden / tp
        ops.append(_gemm("fc1", "mlp", n, f * (2 if gated else 1), h, dev, dtype))
        act_b, act_k = ((EAGER_SWIGLU_BYTES, EAGER_SWIGLU_KERNELS) if gated and not fused
                        else ((3 if gated else 2) * ACT_BYTES, 1))
        ops.append(_elementwise("act", "mlp", act_b * n * f, dev, act_k))
        ops.append(_gemm("fc2", "mlp", n, h, f, dev, dtype, comm_after=tp_comm))
    ops.append(_elementwise("bda2", "mlp", bda_bytes, dev))
    return tuple(ops)


def op_sac_matmuls(model: ModelSpec, name: str, tp: int) -> tuple[float, ...]:
    """Output widths (elements per token on one GPU) of the ``aten.mm`` calls the GEMM op ``name`` stands for, in
    forward order: ``qkv`` is torchtitan's ``wq``, ``wk``, ``wv``; a gated ``fc1`` its ``w1``, ``w3``
    (``w2(silu(w1(x)) * w3(x))`` evaluates ``w1`` first); ``attn_out``/``fc2`` (``wo``/``w2``) output the
    ``h``-wide partial sums; any other GEMM (MLA projections, MoE router and experts, which torchtitan
    327b72b does not have) counts as one matmul."""
    if name == "qkv" and not model.is_mla:
        kv = model.kv_dim / min(tp, model.kv_heads)
        return (model.heads * model.head_dim / tp, kv, kv)
    if name == "fc1":
        return (model.ffn_hidden / tp,) * (2 if model.activation == "swiglu" else 1)
    if name in ("attn_out", "fc2"):
        return (float(model.hidden),)
    return (1.0,)


def op_sac_fractions(model: ModelSpec, ops, tp: int, dtype: str, flash: bool = True) -> tuple[float, ...]:
    """Share of each op's forward that torchtitan's per-op selective activation checkpointing
    replays in backward (``ParallelConfig.recompute == 'op_sac'``).

    torchtitan ``parallelisms/parallelize_llama.py`` at 327b72b (``_apply_ac_to_transformer_block``,
    ``selective_ac_option = 'op'``, the default of its Llama 3 8B/70B/405B configs): per transformer
    block, the outputs of the ops in ``_save_list`` are saved (``aten.mm``, the flash/efficient SDPA
    kernels, ``reduce_scatter_tensor``, ``abs``/``max``) "except every second mm" (the ``mm`` counter
    runs over the block's forward); every other op is recomputed (``PREFER_RECOMPUTE``). So: every
    element-wise op (norms, rotary embedding, activation, residual adds) is replayed; of the matmuls
    ``wq wk wv wo w1 w3 w2`` the 2nd, 4th and 6th (``wk``, ``wo``, ``w3``); FlashAttention is saved (the
    unfused math kernel is not in the list: replayed). FP8 linears run ``aten._scaled_mm``, which is not in
    ``_save_list``: all of them are replayed. The all-gathers of sequence parallelism (functional
    ``all_gather_into_tensor``) are replayed too, the reduce-scatters saved (charged by the engines).
    """
    count, out = 0, []
    for op in ops:
        if op.kind == "elementwise":
            out.append(1.0)
        elif op.kind == "attention":
            out.append(0.0 if flash else 1.0)
        else:
            parts = op_sac_matmuls(model, op.name, tp)
            rec = 0.0
            for width in parts:
                count += 1
                if dtype == "fp8" or count % 2 == 0:
                    rec += width
            out.append(rec / sum(parts))
    return tuple(out)


#: the ops of an MoE layer's MoE block (:func:`layer_ops`): what Megatron's ``moe`` recompute replays
MOE_BLOCK_OPS = ("router", "router_topk", "tokens_per_expert_sync", "permute", "experts", "unpermute")


def module_recompute_fractions(ops, modules, moe: bool, model: ModelSpec | None = None) -> tuple[float, ...]:
    """Share of each op's forward that Megatron-Core's selective recompute replays in backward for
    ``modules`` beyond the core attention (:data:`costmodel.config.RECOMPUTE_MODULES`; the core attention
    is charged by the engines on their own): ``layernorm`` the pre-MLP norm of an MoE layer (``ln2``;
    the input norm is fused into the QKV GEMM), ``moe`` the MoE block, its all-to-alls included
    (``megatron/core/transformer/transformer_layer.py`` and ``moe/moe_layer.py`` at d98e8a64); ``mlp`` a dense
    layer's MLP (``fc1``, ``act``, ``fc2``); ``mla_up_proj`` (``model`` an MLA model) the up projections' share of
    the ``qkv`` GEMM (:func:`mla_up_share`) and the rotary embedding (``multi_latent_attention.py``,
    ``qkv_up_proj_and_rope_apply``).

    >>> from collections import namedtuple
    >>> O = namedtuple("O", "name")
    >>> module_recompute_fractions([O("ln2"), O("router"), O("experts"), O("bda2")], {"layernorm", "moe"}, True)
    (1.0, 1.0, 1.0, 0.0)
    >>> module_recompute_fractions([O("ln2"), O("fc1"), O("act"), O("fc2")], {"mlp"}, False)
    (0.0, 1.0, 1.0, 1.0)
    """
    up = mla_up_share(model) if model is not None and model.is_mla and "mla_up_proj" in modules else 0.0
    out = []
    for op in ops:
        on = moe and (("layernorm" in modules and op.name == "ln2") or ("moe" in modules and op.name in MOE_BLOCK_OPS))
        on = on or (not moe and "mlp" in modules and op.name in ("fc1", "act", "fc2"))
        out.append(1.0 if on else up if op.name == "qkv" else (1.0 if up and op.name == "rope" else 0.0))
    return tuple(out)


def mla_up_share(model: ModelSpec) -> float:
    """The up projections' share of an MLA layer's Q/K/V projection FLOPs (:attr:`ModelSpec.attn_params` without
    the output projection): ``q_lora x heads (d + d_rope)`` and ``kv_lora x heads (d + d_v)`` of the weights; the
    down projections (``h x q_lora``, ``h x (kv_lora + d_rope)``) stay.

    >>> from costmodel.presets import load_model
    >>> round(mla_up_share(load_model("deepseek-v3")), 3)
    0.783
    """
    h = model.hidden
    up = model.kv_lora_rank * model.heads * (model.head_dim + model.v_head_dim)
    if model.q_lora_rank:
        up += model.q_lora_rank * model.heads * (model.head_dim + model.qk_rope_head_dim)
    return up / (model.attn_params - model.heads * model.v_head_dim * h)


def moe_expert_load_cv(model: ModelSpec, slots_per_expert: float) -> float:
    """Coefficient of variation of one routed expert's token count in one batch.

    ``sqrt(model.moe_load_cv**2 + 1 / slots_per_expert)``: the routing skew the load balancing leaves
    (``ModelSpec.moe_load_cv``), plus the multinomial sampling of a finite batch (variance equal to
    the mean). The one place of this formula; :func:`moe_imbalance` and the routing component
    benchmark (``benchmarks/component_routing.py``) use it.

    >>> from costmodel.presets import load_model
    >>> round(moe_expert_load_cv(load_model("qwen3-30b-a3b"), 100), 4)   # sqrt(0.09 + 0.01)
    0.3162
    """
    return math.sqrt(model.moe_load_cv ** 2 + 1.0 / max(slots_per_expert, 1.0))


def moe_imbalance(model: ModelSpec, ep: int, slots_per_expert: float) -> float:
    """Expected load of the busiest of ``ep`` expert-parallel ranks over the mean load.

    Each expert's token count varies with coefficient of variation
    ``sqrt(model.moe_load_cv**2 + 1 / slots_per_expert)``: the routing skew the load-balancing
    loss leaves, plus the multinomial sampling of a finite batch (variance equal to the mean).
    A rank sums ``experts / ep`` experts, which averages the skew down by ``sqrt(experts / ep)``
    (independent experts, an assumption), and the step waits for the busiest of ``ep`` ranks: the
    expected maximum of ``ep`` normal variables, ``z = Phi^-1((ep - 0.375) / (ep + 0.25))``
    standard deviations above the mean (Blom 1958). Without EP the GPU holds every expert and the
    skew only moves work between them: 1.

    >>> from costmodel.presets import load_model
    >>> m = load_model("qwen3-30b-a3b")   # 128 experts; EP 8 -> 16 experts per rank
    >>> round(moe_imbalance(m, 8, 1e9), 3)   # 1 + 1.434 * 0.3 / sqrt(16)
    1.108
    >>> moe_imbalance(m, 1, 256)
    1.0
    """
    if ep <= 1 or not model.is_moe:
        return 1.0
    cv = moe_expert_load_cv(model, slots_per_expert)
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    return 1.0 + z * cv / math.sqrt(max(1, model.experts // ep))


def _moe_ops(model: ModelSpec, dev, dtype, n, tp, ep, gated, tp_comm, host_sync: bool = True,
             n_route: float | None = None) -> list[Op]:
    """Router, token permutation, routed experts (grouped GEMM over this GPU's experts), shared experts.

    With EP each GPU holds ``experts / ep`` whole experts and receives ``n * topk`` token-slots in
    total across the EP group; tokens are first split across TP ranks (Megatron-Core requires
    sequence parallelism for MoE with TP), so each GPU handles ``n * topk / tp`` slots on average
    and the slowest EP rank ``moe_imbalance`` times that. Without EP every TP rank runs all
    ``n * topk`` slots on a ``1/tp`` slice of each expert, and imbalance only moves work between
    the experts of one GPU.

    ``host_sync``: training frameworks copy ``tokens_per_expert`` to the host once per MoE layer
    and forward (recompute repeats it); serving engines run MoE under CUDA graphs without it.

    ``n_route``: the tokens this GPU routes (default ``n``). Under sequence parallelism each TP rank
    routes its own ``n / tp`` shard: Megatron-Core ``MoELayer.forward`` requires sequence parallelism
    with TP in training and ``MoELayer.route`` applies the router to the layer's input as it arrives,
    the ``[s/tp, b, h]`` shard; only the routing metadata is gathered over TP x EP afterwards
    (``MoEAlltoAllTokenDispatcher.preprocess``: ``gather_from_sequence_parallel_region`` of the
    per-expert counts), NVIDIA/Megatron-LM megatron/core/transformer/moe/moe_layer.py and
    token_dispatcher.py @d98e8a6.
    """
    h = model.hidden
    etp = tp if ep == 1 else 1
    nr = n if n_route is None else n_route
    ops = [_gemm("router", "mlp", nr, model.experts, h, dev, "bf16")]
    # Router scores, top-k and the auxiliary load-balancing loss (Megatron-Core
    # transformer/moe/router.py: TopKRouter.routing -> topk_softmax_with_capacity and
    # switch_load_balancing_loss_func; Fedus et al. 2022, eq. 4), in FP32 over n x experts:
    # softmax (read + write 8 B), top-k (read 4 B; write k indices and probs, 12 B each), the
    # aux-loss scores (a second softmax, 8 B), their sum over tokens (4 B) and the routing map
    # (write + read 2 B): 22 B per score plus 12 B per slot, about 6 unfused kernels.
    router_bytes = 22 * nr * model.experts + 12 * nr * model.topk
    ops.append(_elementwise("router_topk", "mlp", router_bytes, dev, kernels=6))
    if host_sync:
        t_sync = HOST_COPY_S + SYNC_EXPOSED_LAUNCHES * dev.kernel_overhead_s
        ops.append(Op("tokens_per_expert_sync", "elementwise", "mlp", 0.0, t_sync, 0.0))
    local = n * model.topk / (tp if ep > 1 else 1)  # token-slots this GPU routes (its own tokens)
    slots = local * moe_imbalance(model, ep, local * ep / model.experts)  # the slowest EP rank's slots
    # Permute: gather topk copies of each token row into expert order (Megatron-Core
    # moe_utils.permute: index_select; Transformer Engine moe_permute), read + write of
    # ``topk * n`` BF16 rows; its backward is the matching scatter, the same bytes.
    perm = elementwise_time_s(2 * ACT_BYTES * local * h, dev)
    ops.append(Op("permute", "elementwise", "mlp", 0.0, perm, perm))
    local_experts = model.experts // ep
    # Experts that receive a token: all of them at training sizes; in a small decode batch only
    # those the routed tokens pick (a token misses an expert with probability 1 - topk/experts),
    # and only their weights are read.
    tokens_routed = local * ep / model.topk
    hit = 1.0 - (1.0 - model.topk / model.experts) ** tokens_routed
    active = max(1, min(local_experts, math.ceil(local_experts * hit - 1e-9)))
    per_expert = slots / active
    f = model.moe_ffn_hidden / etp
    # one grouped GEMM (Megatron-Core --moe-grouped-gemm) runs the tiles of all active local
    # experts at once; their token counts are data-dependent (ragged)
    ragged = active > 1
    # training: TE's multi-stream grouped GEMM; serving engines run one fused/grouped MoE kernel
    streams = TE_GROUPED_GEMM_STREAMS if host_sync else None
    up = _gemm("expert_fc1", "mlp", per_expert, f * (2 if gated else 1), h, dev, dtype, groups=active, ragged=ragged,
               streams=streams)
    down = _gemm("expert_fc2", "mlp", per_expert, h, f, dev, dtype, groups=active, ragged=ragged,
                 streams=streams)
    act = _elementwise("expert_act", "mlp", (3 if gated else 2) * ACT_BYTES * slots * f, dev)
    fwd, bwd = up.fwd_s + down.fwd_s + act.fwd_s, up.bwd_s + down.bwd_s + act.bwd_s
    if ep > 1 and local_experts > 1:
        # tokens arriving from the EP ranks are regrouped by local expert before the GEMM and back
        # after it (Megatron-Core MoEAlltoAllTokenDispatcher: sort_chunks_by_idxs), read + write
        sort = elementwise_time_s(2 * ACT_BYTES * slots * h, dev)
        fwd, bwd = fwd + 2 * sort, bwd + 2 * sort
    ops.append(Op("experts", "gemm", "mlp", up.fwd_flops + down.fwd_flops, fwd, bwd,
                  up.wgrad_s + down.wgrad_s, comm_after="a2a" if ep > 1 else tp_comm))
    # Unpermute: scale each slot by its router probability and sum the topk copies back into token
    # order (moe_utils.unpermute: mul + scatter_add): read ``topk * n`` rows, write them weighted,
    # accumulate; backward is the matching gather.
    unperm = elementwise_time_s(2 * ACT_BYTES * local * h + ACT_BYTES * n * h / (tp if ep > 1 else 1), dev, kernels=2)
    ops.append(Op("unpermute", "elementwise", "mlp", 0.0, unperm, unperm))
    if model.shared_experts:
        fs = model.shared_experts * model.moe_ffn_hidden / tp
        ops.append(_gemm("shared_fc1", "mlp", n, fs * (2 if gated else 1), h, dev, dtype))
        ops.append(_gemm("shared_fc2", "mlp", n, h, fs, dev, dtype))
    return ops


def head_ops(model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig) -> tuple[Op, ...]:
    """LM head GEMM and vocab-parallel cross-entropy on the last stage (per micro-batch).

    Cross-entropy reads the BF16 logits and writes FP32 softmax (Megatron computes it in FP32).
    """
    n = c.mb * w.seq_len / c.cp
    v = model.vocab / c.tp
    head = _gemm("lm_head", "head", n, v, model.hidden, dev, w.dtype, comm_after="")
    ce = _elementwise("cross_entropy", "head", (ACT_BYTES + 4 + 4) * n * v, dev, kernels=3)
    return head, ce


def embedding_op(model: ModelSpec, dev: DeviceSpec, w: Workload, c: ParallelConfig) -> Op:
    """Embedding lookup on the first stage: a gather of ``n x h`` rows (memory-bound)."""
    n = c.mb * w.seq_len / c.cp
    return _elementwise("embedding", "embed", 3 * ACT_BYTES * n * model.hidden, dev)


#: HBM bytes an Adam step moves per parameter, by the optimizer's dtype (``ParallelConfig.optimizer_dtype``):
#: FP32 master, m, v and gradient read (16 B), master, m, v written (12 B) and the BF16 weight (2 B)
#: (Rajbhandari et al. 2020, section 3.1 state layout); BF16 parameter, m, v and gradient read (8 B), the
#: three written (6 B)
ADAM_STEP_BYTES = {"fp32": 30.0, "bf16": 14.0}


def optimizer_time_s(params_local: float, dev: DeviceSpec, optimizer_dtype: str = "fp32") -> float:
    """Adam step over ``params_local`` parameters, HBM-bound (:data:`ADAM_STEP_BYTES` per parameter)."""
    return elementwise_time_s(ADAM_STEP_BYTES[optimizer_dtype] * params_local, dev, kernels=4)


@dataclass(frozen=True)
class CPExchange:
    """The K/V traffic of one attention under context parallelism (:func:`cp_exchange`).

    ``kv_bytes``: this GPU's K/V shard; ``gather_bytes``: the all-gathered K/V (0 for ``ring``);
    ``dkv_bytes``: one dK/dV transfer of the backward; ``dkv_sends``: how many the backward makes.
    """

    kv_bytes: float
    gather_bytes: float
    dkv_bytes: float
    dkv_sends: int


def cp_exchange(model: ModelSpec, tokens: float, tp: int, cp: int, cp_impl: str = "ring") -> CPExchange:
    """What context parallelism moves per attention for ``tokens`` queries on one GPU.

    * ``ring`` (Megatron-Core / Transformer Engine ring attention, Liu et al. 2023): the GQA K/V shard
      (``kv_heads`` heads, replicated when ``tp > kv_heads``) passes to the neighbour ``cp - 1`` times
      in forward, and again in backward followed by ``cp - 1`` dK/dV partial sums in BF16; each
      transfer hides behind one attention block.
    * ``torch`` (PyTorch ``torch.distributed.tensor.experimental.context_parallel`` as torchtitan
      327b72b runs it): torchtitan's Llama ``Attention.forward`` calls ``repeat_kv`` before
      ``F.scaled_dot_product_attention`` (``torchtitan/models/llama/model.py``), so the K/V that CP
      exchanges have the query head count; PyTorch's default rotater (``_cp_options.rotate_method =
      _RotateMethod.ALL_GATHER``; torchtitan's ``context_parallel_rotate_method`` defaults to
      ``allgather`` from c97876e, 2024-12-11) all-gathers every shard once, issued before the local
      block (``_templated_ring_attention``: ``exchange_buffers`` at ``i == 0``, the wait at ``i == 1``),
      so only the local block hides it; the backward gathers K/V again the same way and passes dK/dV
      with an all-to-all rotater in FP32 (``accum_dtype = torch.float32`` under ``convert_to_f32``)
      after every block, ``cp`` times: each hides behind the next block, the last is waited on after
      the loop (``_templated_ring_attention_backward``).
    """
    if cp_impl == "torch":
        kv = tokens * 2 * model.heads * model.head_dim / tp * ACT_BYTES
        return CPExchange(kv, cp * kv, 2 * kv, cp)
    kv = tokens * 2 * model.kv_dim / min(tp, model.kv_heads) * ACT_BYTES
    return CPExchange(kv, 0.0, kv, cp - 1)
