"""GEMM times of the step model from the measured tables (issue 38), where the device names a table.

``DeviceSpec.kernel_table`` names the library whose measured GEMM table times the step's GEMMs (a
:mod:`costmodel.physics.tables` backend: ``trtllm``, ``vllm`` or ``sglang``, with an optional version); empty,
the fitted roofline of :mod:`costmodel.physics.kernels.gemm` times them (the default until the mechanisms
the fitted constants absorbed are charged on their own: ``benchmarks/kernel_regimes.py``).

A table point is an isolated kernel timed in a short loop at the clocks the GPU holds for milliseconds. A
training step holds the GPU at its power limit for seconds, and the clock falls (:data:`SUSTAINED_CLOCK`), so a
table time is divided by the sustained clock ratio of the device's generation. Single GEMMs only: grouped and
batched GEMMs (routed experts, the unfused attention's batched products) keep the fitted model, whose
evidence they keep.

The tables have no H800, H100-96GB or A100-40GB: the part with the same compute die stands in
(:data:`STAND_IN`: H800 and the 500 W H100 share GH100 with H100 SXM; A100 40 GB shares GA100 with the 80 GB
part), and the evidence note says so.
"""

from __future__ import annotations

from functools import lru_cache

from costmodel.physics.tables import KINDS, Evidence, collective_lookup, gemm_lookup, system_of, table_for
from costmodel.physics.tables.collectives import OPS, counts as nccl_counts

#: the table's dtype for a planner dtype (``fp8``: per-tensor scaled FP8, Transformer Engine's delayed and
#: current scaling; DeepSeek's blockwise recipe is ``fp8_block``)
TABLE_DTYPE = {
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8-tensorwise": "fp8",
    "fp8-blockwise": "fp8_block",
    "nvfp4": "nvfp4",
    "mxfp8": "fp8",
}

#: recipes read from another recipe's table, and why (their evidence is ``assumed``, not the table's kind):
#: no MXFP8 GEMM table exists here; MXFP8 is taken at the per-tensor FP8 table's time (the Blackwell tensor
#: core's block-scaled MMA runs at the FP8 rate; NVIDIA Blackwell architecture technical brief)
TABLE_STAND_IN = {"mxfp8": "mxfp8 read from the per-tensor fp8 table (assumed: the same tensor-core rate)"}

#: device name -> the table system of the part with the same compute die (module docstring)
STAND_IN = {
    "H800-SXM5-80GB": "h100_sxm",
    "H100-SXM-96GB-HBM2e-500W": "h100_sxm",
    "A100-SXM4-40GB": "a100_sxm",
}

#: sustained / short-run throughput under a long compute-bound load, per generation, from
#: ``benchmarks/data/components/sustained_clocks.csv``: Hopper the mean of its two rows (DeepGEMM PR #44: a
#: stress test at 1300 of 1980 MHz; DeepGEMM issue #120: 1575 of 1980 MHz under the power limit), 0.73;
#: Blackwell its one row (FlashInfer PR #2899, B200: 1237 of 1450 TFLOP/s once throttled), 0.853; Ampere its one
#: row (NVIDIA's HPL Rpeak clock, "the clock that can be sustained at a GPU's power limit while running HPL (e.g.,
#: 1305 MHz for A100)", glennklockwood.com/garden/peak-FLOPS section Rpeak: a secondary source and an FP64 load),
#: 0.926. The rows a generation takes, and those left out, by the rule in benchmarks/data/components/README.md;
#: tests/test_fitted_constants.py holds these means to the CSV.
SUSTAINED_CLOCK = {"ampere": 1305 / 1410, "hopper": (1300 / 1980 + 1575 / 1980) / 2, "blackwell": 1237 / 1450}

_GENERATION = {"a100": "ampere", "h100": "hopper", "h200": "hopper", "b200": "blackwell", "b300": "blackwell"}


def table_system(dev) -> tuple[str | None, str]:
    """``(system, note)``: the table system timing ``dev``'s GEMMs and, for a stand-in, why."""
    if dev.name in STAND_IN:
        return STAND_IN[dev.name], f"{STAND_IN[dev.name]} stands in for {dev.name} (same compute die)"
    return system_of(dev), ""


def generation(system: str) -> str:
    """``ampere``, ``hopper`` or ``blackwell`` for a table system (``gb200`` is Blackwell)."""
    return _GENERATION.get(system.split("_")[0], "blackwell" if system.startswith("gb") else "hopper")


@lru_cache(maxsize=65536)
def table_gemm(m: float, n: float, k: float, dev, dtype: str) -> tuple[float | None, Evidence]:
    """``(seconds, evidence)`` of one (m x k) @ (k x n) GEMM in training on ``dev`` from its measured table, or
    ``(None, evidence)`` where no table times it (then the fitted model does)."""
    system, stand_in = table_system(dev)
    tdt = TABLE_DTYPE.get(dtype)
    if system is None or tdt is None:
        return None, Evidence("assumed", "", f"no measured {dtype} GEMM table for {dev.name}")
    t, ev = gemm_lookup(system, tdt, max(1, round(m)), max(1, round(n)), max(1, round(k)), dev.kernel_table or None)
    if t is None:
        return None, ev
    clock = SUSTAINED_CLOCK[generation(system)] if dev.sustained_clocks else 1.0
    at = f"/ {clock:.3f} sustained clock" if dev.sustained_clocks else "at the table's clocks (serving)"
    note = "; ".join(x for x in (ev.note, stand_in, TABLE_STAND_IN.get(dtype, ""), at) if x)
    kind = "assumed" if dtype in TABLE_STAND_IN else ev.kind
    return t / clock, Evidence(kind, ev.table, note, ev.distance)


def table_evidence(shapes, dev, dtype: str) -> str:
    """The weakest evidence kind of the GEMMs ``shapes`` (``(m, n, k)`` each) on ``dev``: ``fitted`` where any of
    them has no table (the fitted model times it); ``""`` where none has one."""
    looked = [table_gemm(m, n, k, dev, dtype) for m, n, k in shapes]
    if all(t is None for t, _ in looked):
        return ""
    return max((ev.kind if t is not None else "fitted" for t, ev in looked), key=KINDS.index)


#: parts whose NVLink matches a measured part's (the GEMM stand-ins less H800, whose NVLink is 400 GB/s, not 900)
NCCL_STAND_IN = {k: v for k, v in STAND_IN.items() if k != "H800-SXM5-80GB"}


@lru_cache(maxsize=256)
def table_counts(system: str, kind: str) -> tuple[int, ...]:
    """The GPU counts the newest NCCL table of ``system`` measured ``kind`` on (its ``half`` series; () without
    one). A legacy table lacking the op is not the one a look-up reads first, so the newest table decides."""
    choice = table_for(system, "nccl")
    op = OPS.get(kind)
    return tuple(nccl_counts(choice.file, op, "half")) if choice is not None and op else ()


@lru_cache(maxsize=65536)
def table_collective(kind: str, nbytes: float, ngpus: int, dev) -> tuple[float | None, Evidence]:
    """``(seconds, evidence)`` of one NCCL collective over ``ngpus`` GPUs of one node of ``dev`` from the measured
    nccl-tests table (``kind`` all-reduce, all-gather, reduce-scatter or all-to-all, ``nbytes`` nccl-tests' size),
    or ``(None, evidence)`` where no table times it (then the modelled NCCL algorithms do).

    Only inside the table's GPU counts (issue 38: "the fitted model only outside the table"): a group larger
    than the largest count measured (an NVL72 domain's 8 or 16 GPUs against GB200's 2-4) or smaller than the
    smallest is left to the model, not held at the nearest count's bus bandwidth. A count between two measured
    ones is interpolated (:func:`costmodel.physics.tables.collective_lookup`); a message beyond the largest
    measured size continues the last interval's law (``extrapolated``)."""
    system = NCCL_STAND_IN.get(dev.name) or system_of(dev)
    if system is None or nbytes <= 0:
        return None, Evidence("assumed", "", f"no measured NCCL table for {dev.name}")
    ns = table_counts(system, kind)
    if not ns or not ns[0] <= ngpus <= ns[-1]:
        where = f"{ns[0]}-{ns[-1]}" if ns else "none"
        return None, Evidence("assumed", "", f"{ngpus} GPUs outside the {system} table's counts ({where})")
    return collective_lookup(system, kind, nbytes, ngpus)
