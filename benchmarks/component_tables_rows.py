"""kernels.csv and collectives.csv rows predicted from the measured tables (issue 38), grouped by what
the row times beside the operation the table times (``benchmarks.component_tables`` reports them).

AIConfigurator's GEMM collectors (``collector/<backend>/collect_gemm.py`` @095f58a) time a framework
Linear's forward on bf16 activations (fp8, fp8_block and nvfp4: the activation quantisation kernel
included; the trtllm collector's comment says so) and cycle several weight copies (trtllm:
``ceil(L2 bytes / weight bytes)`` up to 5; vLLM: 6) so every call reads its weight from HBM. The
kernels.csv GEMM rows are grouped by their protocol (``PROTOCOLS``):

- ``cuBLAS/CUTLASS``: torch.matmul / cuBLAS / CUTLASS bf16 rows, the table's bf16 path;
- ``vLLM bench``: vLLM's ``benchmarks/kernels/bench_fp8_gemm.py`` (``triton.testing.do_bench_cudagraph``
  replaying one weight tensor: L2-warm where the weight fits in L2, e.g. the B200 rows' 50 MB bf16 /
  25 MB fp8 weight in B200's L2; its fp8 ``noquant`` columns on pre-quantised activations);
- ``kernel alone``: fp8 rows timing the GEMM kernel without the activation quantisation
  (DeepGEMM's README, FBGEMM "gemm only").

collectives.csv rows likewise (``COLLECTIVE_PROTOCOLS``): nccl-tests' timing, as the tables' collector,
or a PyTorch-level timing (``all_reduce_bench.py``: host launch overhead in every call).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from benchmarks import results_io
from benchmarks.component_collectives import load_cases, measured_s
from costmodel.physics.tables import attention_lookup, collective_lookup, gemm_lookup, system_of
from costmodel.spec.presets import load_cluster

KERNELS = Path(__file__).resolve().parent / "data" / "components" / "kernels.csv"
COLLECTIVES = KERNELS.with_name("collectives.csv")
GENERATION = {
    "a100_sxm": "Ampere",
    "h100_sxm": "Hopper",
    "h200_sxm": "Hopper",
    "b200_sxm": "Blackwell",
    "b300_sxm": "Blackwell",
    "gb200": "Blackwell",
    "gb300": "Blackwell",
}
#: kernels.csv device -> (table system, stand-in note)
KERNEL_DEVICES = {
    "A100-SXM4-80GB": ("a100_sxm", ""),
    "H100-SXM5-80GB": ("h100_sxm", ""),
    "H200-SXM5-141GB": ("h200_sxm", ""),
    "B200": ("b200_sxm", ""),
    "A100-SXM4-40GB": ("a100_sxm", "stand-in: A100 80 GB table"),
    "H100-500W": ("h100_sxm", "stand-in: H100 SXM table (a 700 W part; this one capped at 500 W)"),
    "H800-SXM5-80GB": ("h100_sxm", "stand-in: H100 SXM table"),
}


#: kernels.csv GEMM protocol groups (see the module docstring)
PROTOCOLS = (
    "cuBLAS/CUTLASS",
    "vLLM bench (L2-warm; fp8 without activation quant)",
    "kernel alone (fp8 without activation quant)",
)


def protocol(impl: str, dtype: str) -> str:
    """The protocol group of a kernels.csv GEMM row (``impl`` column, the row's dtype)."""
    if "bench_fp8_gemm" in impl:
        return PROTOCOLS[1]
    if dtype != "bf16" and re.search(r"DeepGEMM|no quant|gemm only", impl):
        return PROTOCOLS[2]
    return PROTOCOLS[0]


def attention_rows(path: Path = KERNELS) -> list[dict]:
    """The causal forward attention rows of kernels.csv (FlashAttention's FLOP count) from the tables."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["kernel"] != "attention" or r["direction"] != "fwd" or r["causal"] != "1":
                continue
            system, stand_in = KERNEL_DEVICES.get(r["device"], (None, ""))
            if system is None:
                continue
            b, s, h, d = (int(r[c]) for c in ("batch", "seq_len", "heads", "head_dim"))
            meas = 4.0 * b * s * s * h * d / 2 / (float(r["measured_tflops"]) * 1e12)
            t, ev = attention_lookup(system, "bf16", b, s, h, h, d)
            out.append(
                {
                    "row": int(r["row_id"]),
                    "impl": r["impl"],
                    "generation": GENERATION[system],
                    "shape": f"b{b} s{s} h{h} d{d}",
                    "measured_us": round(meas * 1e6, 1),
                    "table_us": None if t is None else round(t * 1e6, 1),
                    "err %": None if t is None else results_io.pct(t / meas - 1),
                    "evidence": ev.kind,
                    "note": "; ".join(x for x in (stand_in, ev.note) if x),
                }
            )
    return out


def kernel_rows(path: Path = KERNELS) -> list[dict]:
    """The GEMM rows of kernels.csv predicted from the tables."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["kernel"] != "gemm" or r["device"] not in KERNEL_DEVICES:
                continue
            system, stand_in = KERNEL_DEVICES[r["device"]]
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
            dtype = "bf16" if r["dtype"] in ("bf16", "fp16") else "fp8_block" if "DeepGEMM" in r["impl"] else r["dtype"]
            # the table whose kernel library is the row's: vLLM's benchmark -> vllm; DeepGEMM -> sglang
            # (its fp8_block kernel_source is DeepGEMM); cuBLAS / torch.matmul -> trtllm (torch_flow)
            backend = "vllm" if "vllm" in r["impl"].lower() else "sglang" if "DeepGEMM" in r["impl"] else None
            meas = 2.0 * m * n * k / (float(r["measured_tflops"]) * 1e12)
            t, ev = gemm_lookup(system, dtype, m, n, k, backend=backend)
            out.append(
                {
                    "row": int(r["row_id"]),
                    "device": r["device"],
                    "generation": GENERATION[system],
                    "dtype": dtype,
                    "shape": f"{m}x{n}x{k}",
                    "own table": not stand_in,
                    "protocol": protocol(r["impl"], dtype),
                    "measured_us": round(meas * 1e6, 2),
                    "table_us": None if t is None else round(t * 1e6, 2),
                    "err %": None if t is None else results_io.pct(t / meas - 1),
                    "evidence": ev.kind,
                    "table": ev.table,
                    "note": "; ".join(x for x in (stand_in, ev.note) if x),
                }
            )
    return out


#: collectives.csv protocol groups: nccl-tests' own timing (the tables' collector runs nccl-tests) or a
#: PyTorch-level timing of torch.distributed (host launch overhead included; the row's notes say so)
COLLECTIVE_PROTOCOLS = ("nccl-tests", "torch.distributed timing (launch overhead included)")


def collective_rows() -> list[dict]:
    """The intra-node NCCL rows of collectives.csv predicted from the tables."""
    with open(COLLECTIVES, newline="") as f:
        rows = list(csv.DictReader(f))
    versions = {r["case_id"]: re.findall(r"\d+\.\d+(?:\.\d+)?", r["nccl_version"]) for r in rows}
    torch_timed = {r["case_id"] for r in rows if "PyTorch-level timing" in r["notes"]}
    out = []
    for c in load_cases():
        if c.nodes != 1 or c.source_key.startswith("deepep"):
            continue
        device = load_cluster(c.cluster_preset).device
        system = system_of(device)
        if system is None:
            continue
        nccl = (versions.get(c.case_id) or [None])[0]
        t, ev = collective_lookup(device, c.collective, c.message_bytes, c.gpus, nccl=nccl)
        meas = measured_s(c)
        out.append(
            {
                "row": c.case_id,
                "source": c.source_key,
                "generation": GENERATION[system],
                "op": c.collective,
                "bytes": c.message_bytes,
                "gpus": c.gpus,
                "measured_us": round(meas * 1e6, 1),
                "table_us": None if t is None else round(t * 1e6, 1),
                "err %": None if t is None else results_io.pct(t / meas - 1),
                "evidence": ev.kind,
                "protocol": COLLECTIVE_PROTOCOLS[c.case_id in torch_timed],
                "note": ev.note,
            }
        )
    return out
