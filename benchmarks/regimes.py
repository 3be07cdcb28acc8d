"""Regimes of issue 10: where users train today, and where the model is judged separately.

A row of a published set belongs to every regime whose test it passes (several at once, or
none: then it is reported under ``other``). The tests read only what a row states (or what the
loader filled by a documented rule), never a prediction:

>>> sorted(regimes_of(dict(gpu="H100-SXM5-80GB", dtype="bf16", experts=0, topk=0, ep=1, gpus=8192,
...                        cp=1, seq=8192, layers=126, pp=16, vp=1, sharding="fsdp", zero=2)))
['gpus_4k', 'h100_bf16_dense', 'uneven_pp', 'zero3_fsdp']
>>> regimes_of(dict(gpu="A100-SXM4-80GB", dtype="bf16", experts=0, topk=0, ep=1, gpus=64, cp=1,
...                 seq=2048, layers=96, pp=8, vp=3, sharding="megatron", zero=0))
('a100_megatron',)
"""

from __future__ import annotations

from costmodel.frameworks.stacks import HOPPER  # the device names counted as Hopper, as the cost model counts them

#: regime key -> what it covers (issue 10's list; ``moe_fine`` is the fine-grained subset of ``moe_ep``)
REGIMES = {
    "h100_bf16_dense": "Hopper (H100/H200/H800) BF16, dense model",
    "h100_fp8": "Hopper FP8 (dense or MoE)",
    "zero3_fsdp": "ZeRO-3 / FSDP sharded data parallel (any FSDP, incl. no-reshard FSDP)",
    "moe_ep": "MoE (expert parallel in all new-set MoE rows but gpt-oss on AutoModel)",
    "moe_fine": "fine-grained MoE: experts >= 64 and top-k >= 6",
    "gpus_4k": ">= 4,000 GPUs",
    "long_cp": "long context: cp > 1 or sequence >= 32k",
    "uneven_pp": "uneven pipeline stages (layers not divisible by pp x vp)",
    "a100_megatron": "A100 Megatron-LM (the old development set; MegaScale's baseline)",
    "other": "in none of the above (e.g. B200)",
}


def regimes_of(f: dict) -> tuple[str, ...]:
    """Regime keys of one row, from its normalised fields ``f``: gpu (device or CSV name), dtype,
    experts, topk, ep, gpus, cp, seq, layers, pp, vp, sharding (framework/sharding text), zero."""
    gpu = f["gpu"].upper()
    hopper = any(h in gpu for h in HOPPER)
    a100 = "A100" in gpu or "AMPERE" in gpu
    moe = f.get("experts", 0) > 0
    sharding = f.get("sharding", "").lower()
    fsdp = f.get("zero", 0) == 3 or ("fsdp" in sharding and "fsdp=0" not in sharding)  # "ddp (FSDP=0)": no
    out = []
    if hopper and f["dtype"] == "bf16" and not moe:
        out.append("h100_bf16_dense")
    if hopper and f["dtype"] == "fp8":
        out.append("h100_fp8")
    if fsdp:
        out.append("zero3_fsdp")
    if moe:
        out.append("moe_ep")
        if f["experts"] >= 64 and f.get("topk", 0) >= 6:
            out.append("moe_fine")
    if f["gpus"] >= 4000:
        out.append("gpus_4k")
    if f.get("cp", 1) > 1 or f.get("seq", 0) >= 32768:
        out.append("long_cp")
    if f.get("pp", 1) > 1 and f.get("layers") and f["layers"] % (f["pp"] * max(1, f.get("vp", 1))):
        out.append("uneven_pp")
    if a100 and not fsdp:
        out.append("a100_megatron")
    return tuple(out) or ("other",)
