"""Named unit constants. SI inside (seconds, bytes, FLOP/s); human units only at the edges.

Convert once, at load or print time, through these names:

>>> 900 * GB
900000000000.0
>>> 80 * GiB == 80 * 2**30
True
"""

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TFLOPS = 1e12
GBIT = 1e9 / 8  # one Gb/s in bytes/s
US = 1e-6
MS = 1e-3

#: bytes per element of each supported numeric format
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: the ``--dtype`` values: the GEMM formats, and the low-precision training recipes of issue 39
#: (:mod:`costmodel.spec.precision`; ``fp8`` stays per-tensor delayed scaling)
DTYPES = ("bf16", "fp16", "fp8", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4")


#: bytes per parameter of mixed-precision training: BF16 weights, FP32 gradients, FP32 Adam (master, m, v)
WEIGHT_BYTES, GRAD_BYTES, OPTIM_BYTES = 2, 4, 12
