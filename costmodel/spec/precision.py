"""Training precision recipes (issue 39): what ``--dtype`` may name beyond ``bf16``/``fp16``/``fp8``.

A recipe is how Transformer Engine quantizes each GEMM's operands and how Megatron-Core asks for it. Every
low-precision recipe keeps BF16 model weights beside FP32 master weights and FP32 Adam moments (the
distributed optimizer's main params), so the model state per parameter is unchanged; what changes is

* the GEMM rate (:mod:`costmodel.physics.kernels.gemm`, :mod:`costmodel.physics.kernels.measured`);
* the bytes of a quantized copy: the data plus its scales (:func:`quantized_bytes`), for the cached weight
  copy, the GEMM inputs saved for backward and the ``--fp8-param-gather`` / ``--fp4-param-gather`` buffers
  (:mod:`costmodel.physics.memory.precision`);
* the Megatron-LM flags (:data:`Recipe.megatron`).

Sources, read at a named commit:

* Megatron-LM ``d98e8a64`` (the version ``planner/emit/megatron.py`` targets),
  ``megatron/core/transformer/transformer_config.py``: ``fp8: Literal['e4m3', 'hybrid']`` parsed as
  ``--fp8-format``; ``fp8_recipe: Literal['tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom'] = "delayed"``
  (so ``--fp8-format hybrid`` alone is the delayed recipe, the planner's ``fp8``); ``fp4: Literal['e2m1']``
  parsed as ``--fp4-format``; ``fp4_recipe: Literal['nvfp4', 'custom'] = "nvfp4"``; ``fp4_param`` parsed as
  ``--fp4-param-gather``. ``megatron/training/arguments.py`` refuses ``--fp4-format`` with ``--fp8-format``.
* Transformer Engine ``d0067d0`` (2026-08-22): ``transformer_engine/pytorch/constants.py``
  ``MXFP8_BLOCK_SCALING_SIZE = 32``, ``NVFP4_BLOCK_SCALING_SIZE = 16``; ``tensor/mxfp8_tensor.py``
  ``get_scale_shape`` (row-wise scales ``[roundup(M, 128), roundup(K / 32, 4)]``, column-wise
  ``[roundup(M / 32, 4), roundup(K, 128)]``, one E8M0 byte each); ``tensor/nvfp4_tensor.py``
  ``get_scale_shape`` (``[roundup(M, 128), roundup(ceil(K / 16), 4)]``, E4M3 bytes) and a ``(1,)`` FP32
  amax per usage; ``common/recipe/__init__.py`` ``Float8BlockScaling``: FP32 scales,
  ``x_block_scaling_dim = 1`` (1x128 activations and gradients), ``w_block_scaling_dim = 2`` (128x128
  weights), and "when Transformer Engine needs both the FP8 tensor and its transpose ... both versions are
  computed"; ``pytorch/quantization.py``: MXFP8 and NVFP4 need compute capability >= 10.0 (Blackwell),
  FP8 block scaling >= 9.0 with CUDA >= 12.9, FP8 >= 8.9.

The device's generation comes from its name (:func:`generation`), as
:mod:`costmodel.physics.kernels.measured` maps names to table systems.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.spec.errors import SpecError


@dataclass(frozen=True)
class Recipe:
    """One precision recipe.

    gemm_class : the planner's GEMM format the rest of the model sees (``bf16``, ``fp16`` or ``fp8``; the
        FP4 recipe runs its non-GEMM work as the FP8 recipes do: BF16 activations between GEMMs).
    elem_bytes : bytes of one quantized element (FP8 1, FP4 E2M1 0.5; BF16 2).
    block : ``(rows, cols)`` of the elements one scale covers in the row-wise copy of a weight, ``None`` for
        one scale per tensor; ``act_block``: likewise for activations and gradients.
    scale_bytes : bytes of one scale (E8M0 1, E4M3 1, FP32 4).
    tensor_scale_bytes : bytes per tensor besides the block scales (NVFP4's FP32 amax; the per-tensor
        recipes' FP32 scale, scale-inverse and amax).
    generations : the GPU generations Transformer Engine runs it on.
    megatron : the Megatron-LM d98e8a64 flags that select it.
    """

    name: str
    gemm_class: str
    elem_bytes: float
    block: tuple[int, int] | None
    act_block: tuple[int, int] | None
    scale_bytes: int
    tensor_scale_bytes: int
    generations: tuple[str, ...]
    megatron: tuple[tuple[str, ...], ...]
    about: str


_ALL = ("ampere", "hopper", "blackwell")
_FP8 = ("hopper", "blackwell")

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("bf16", "bf16", 2, None, None, 0, 0, _ALL, (("--bf16",),), "BF16 GEMMs"),
        Recipe("fp16", "fp16", 2, None, None, 0, 0, _ALL, (("--fp16",),), "FP16 GEMMs"),
        Recipe(
            "fp8",
            "fp8",
            1,
            None,
            None,
            0,
            12,
            _FP8,
            (("--bf16",), ("--fp8-format", "hybrid")),
            "FP8 per-tensor, delayed scaling (E4M3 forward, E5M2 gradients; Megatron's default fp8_recipe)",
        ),
        Recipe(
            "fp8-tensorwise",
            "fp8",
            1,
            None,
            None,
            0,
            12,
            _FP8,
            (("--bf16",), ("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")),
            "FP8 per-tensor, current scaling",
        ),
        Recipe(
            "fp8-blockwise",
            "fp8",
            1,
            (128, 128),
            (1, 128),
            4,
            0,
            _FP8,
            (("--bf16",), ("--fp8-format", "e4m3"), ("--fp8-recipe", "blockwise")),
            "FP8 blockwise (DeepSeek-V3 style): FP32 scales per 128x128 weight block, per 1x128 activation block",
        ),
        Recipe(
            "mxfp8",
            "fp8",
            1,
            (1, 32),
            (1, 32),
            1,
            0,
            ("blackwell",),
            (("--bf16",), ("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")),
            "MXFP8: E4M3 with one E8M0 scale per 32 elements (Blackwell)",
        ),
        Recipe(
            "nvfp4",
            "fp8",
            0.5,
            (1, 16),
            (1, 16),
            1,
            4,
            ("blackwell",),
            (("--bf16",), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")),
            "NVFP4: E2M1 with one E4M3 scale per 16 elements and an FP32 per-tensor scale (Blackwell)",
        ),
    )
}

#: the ``--dtype`` values (``fp8`` keeps its meaning: per-tensor delayed scaling, as before issue 39)
RECIPE_NAMES = tuple(RECIPES)

#: device-name prefixes -> GPU generation (the presets' ``DeviceSpec.name``: ``A100-SXM4-80GB``,
#: ``H100-SXM5-80GB``, ``H800-SXM5-80GB``, ``H200``, ``B200``, ``B300``, ``GB200``, ``GB300``)
_PREFIX = (
    ("GB3", "blackwell"),
    ("GB2", "blackwell"),
    ("B3", "blackwell"),
    ("B2", "blackwell"),
    ("B1", "blackwell"),
    ("H", "hopper"),
    ("A", "ampere"),
    ("V", "volta"),
)


def generation(device_name: str) -> str:
    """The GPU generation of a device by its name (``unknown`` where no prefix matches).

    >>> generation("B200"), generation("H100-SXM5-80GB"), generation("A100-SXM4-80GB"), generation("GB300")
    ('blackwell', 'hopper', 'ampere', 'blackwell')
    """
    name = device_name.upper()
    for prefix, gen in _PREFIX:
        if name.startswith(prefix):
            return gen
    return "unknown"


def recipe(name: str) -> Recipe:
    """The recipe called ``name``; SpecError naming the allowed ones otherwise."""
    if name not in RECIPES:
        raise SpecError("dtype", name, f"one of {', '.join(RECIPE_NAMES)}")
    return RECIPES[name]


def check_supported(name: str, device_name: str, peak_fp8_flops_per_s: float | None = None) -> None:
    """Refuse, in one line, a recipe the device cannot run (Transformer Engine's capability checks, module
    docstring). An unknown device name passes FP8 where it states an FP8 peak and refuses MXFP8/NVFP4.

    >>> check_supported("mxfp8", "H100-SXM5-80GB")
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: dtype='mxfp8': must be one of bf16, fp16, fp8, fp8-tensorwise, fp8-blockwise on H100-SXM5-80GB (hopper; mxfp8 needs blackwell: Transformer Engine d0067d0 requires compute capability >= 10.0)
    """
    r = recipe(name)
    gen = generation(device_name)
    if gen in r.generations:
        return
    if gen == "unknown" and r.gemm_class != "fp8":
        return
    if gen == "unknown" and r.generations == _FP8 and peak_fp8_flops_per_s:
        return
    ok = [n for n, x in RECIPES.items() if gen in x.generations] or ["bf16", "fp16"]
    cc = ">= 10.0" if r.generations == ("blackwell",) else ">= 8.9 (9.0 for blockwise)"
    raise SpecError(
        "dtype",
        name,
        f"one of {', '.join(ok)} on {device_name} ({gen}; {name} needs {' or '.join(r.generations)}: "
        f"Transformer Engine d0067d0 requires compute capability {cc})",
    )


def _up(x: float, m: int) -> float:
    return math.ceil(x / m) * m


def scale_count(r: Recipe, rows: int, cols: int, *, weight: bool = True, columnwise: bool = False) -> float:
    """Scales of one usage (row-wise or column-wise) of a ``rows x cols`` tensor, with Transformer Engine's
    padding of MXFP8/NVFP4 scale tensors to multiples of (128, 4) (module docstring)."""
    block = r.block if weight else r.act_block
    if block is None:
        return 0.0
    if columnwise:
        rows, cols = cols, rows
    br, bc = block
    if r.name in ("mxfp8", "nvfp4"):
        return _up(rows / br, 128) * _up(math.ceil(cols / bc), 4)
    return math.ceil(rows / br) * math.ceil(cols / bc)


def quantized_bytes(name: str, rows: int, cols: int, *, weight: bool = True, usages: int = 2) -> float:
    """Bytes of the quantized copy of a ``rows x cols`` tensor: data plus scales, for ``usages`` copies
    (2: the row-wise copy the forward GEMM reads and the column-wise one the data-gradient GEMM reads, as
    Transformer Engine keeps for a weight; 1: one usage, as for a GEMM input saved for the weight gradient).
    BF16/FP16: no quantized copy (0).

    >>> quantized_bytes("mxfp8", 4096, 4096) / (4096 * 4096)  # 2 x (1 B + 1/32 B)
    2.0625
    >>> quantized_bytes("nvfp4", 4096, 4096) / (4096 * 4096) > 2 * (0.5 + 1 / 16)
    True
    """
    r = recipe(name)
    if r.gemm_class != "fp8":
        return 0.0
    total = 0.0
    for col in (False, True)[:usages]:
        total += rows * cols * r.elem_bytes + scale_count(r, rows, cols, weight=weight, columnwise=col) * r.scale_bytes
        total += r.tensor_scale_bytes
    return total


def bytes_per_element(name: str, *, weight: bool = True, usages: int = 2) -> float:
    """:func:`quantized_bytes` per element of a large tensor (block scales amortised, no padding, no
    per-tensor scale): the rate the memory model charges per GEMM weight or saved input element."""
    r = recipe(name)
    if r.gemm_class != "fp8":
        return 0.0
    block = r.block if weight else r.act_block
    per = r.elem_bytes + (r.scale_bytes / (block[0] * block[1]) if block else 0.0)
    return usages * per
