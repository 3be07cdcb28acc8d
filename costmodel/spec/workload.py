"""What runs: a training step over a global batch, or serving requests (:class:`Workload`)."""

from __future__ import annotations

from dataclasses import dataclass
from costmodel.spec.errors import SpecError
from costmodel.spec.bounds import _bounded, _positive_int
from costmodel.spec import precision
from costmodel.spec.units import DTYPES


MODES = ("train", "infer")


# --------------------------------------------------------------------------- workload
@dataclass(frozen=True, kw_only=True)
class Workload:
    """What runs: a training step over a global batch, or inference requests.

    global_batch : sequences per optimizer step (training) or concurrent requests (inference).
    seq_len : tokens per training sequence (inference: ``input_len + output_len`` when 0).
    dtype : compute format of GEMMs (``bf16``, ``fp16`` or ``fp8``; FP8 keeps BF16 weights). A recipe name of
        :mod:`costmodel.spec.precision` (``fp8-tensorwise``, ``fp8-blockwise``, ``mxfp8``, ``nvfp4``) is
        accepted too: it is kept in ``recipe`` and ``dtype`` becomes its GEMM class (``fp8``), so every part of
        the model that treats FP8 (saved FP8 inputs, the FP8 weight cache, cast kernels) treats it.
    recipe : the precision recipe (``""``: the one ``dtype`` names; ``fp8`` is per-tensor delayed scaling).
    input_len, output_len : prompt and generated tokens per request (inference).
    """

    mode: str = "train"
    global_batch: int
    seq_len: int = 0
    dtype: str = "bf16"
    input_len: int = 0
    output_len: int = 0
    recipe: str = ""

    def __post_init__(self):
        if self.mode not in MODES:
            raise SpecError("mode", self.mode, f"one of {', '.join(MODES)}")
        _positive_int("global_batch", self.global_batch)
        if self.dtype not in DTYPES:
            raise SpecError("dtype", self.dtype, f"one of {', '.join(DTYPES)}")
        # the dtype names the recipe; dataclasses.replace(w, dtype="fp8") keeps an FP8-class recipe (mxfp8...)
        if not self.recipe or self.dtype != "fp8" or precision.recipe(self.recipe).gemm_class != "fp8":
            object.__setattr__(self, "recipe", self.dtype)
        object.__setattr__(self, "dtype", precision.recipe(self.recipe).gemm_class)
        _positive_int("input_len", self.input_len, allow_zero=True)
        _positive_int("output_len", self.output_len, allow_zero=True)
        if self.mode == "infer" and not self.seq_len:
            object.__setattr__(self, "seq_len", self.input_len + self.output_len)
        _positive_int("seq_len", self.seq_len)
        _bounded(self)

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len
