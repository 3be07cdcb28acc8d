"""The best model-FLOPs utilisation published for a hardware class and dtype: a sanity ceiling.

``costmodel/trust/data/best_mfu.csv`` (a copy of ``benchmarks/data/best_mfu.csv``, every row with its
source) holds the highest MFU a public training run reports per hardware class (A100,
H100/H800/H200, B200), dtype and kind (dense, MoE). A prediction above it is not impossible,
but it claims to beat every published run on that hardware: :func:`mfu_warning` says so.
Nothing in the cost model is tuned to stay under it.

>>> best_published_mfu("h100", "bf16", moe=False)[0]
0.49
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "best_mfu.csv"
FAMILY_CLASS = {
    "a100": "A100",
    "h100": "H100/H800/H200",
    "h800": "H100/H800/H200",
    "h200": "H100/H800/H200",
    "b200": "B200",
}


@lru_cache(maxsize=1)
def _rows() -> tuple:
    with open(DATA, newline="") as f:
        return tuple(csv.DictReader(f))


def best_published_mfu(family: str, dtype: str, moe: bool) -> tuple[float, str] | None:
    """``(mfu, "model on N GPUs (source, location)")`` of the best published run of the hardware
    ``family`` (``a100``, ``h100``, ...), ``dtype`` and kind, or None when none is recorded."""
    cls = FAMILY_CLASS.get(family)
    kind = "moe" if moe else "dense"
    rows = [r for r in _rows() if r["hardware_class"] == cls and r["dtype"] == dtype and r["kind"] == kind]
    if not rows:
        return None
    r = max(rows, key=lambda r: float(r["best_mfu_pct"]))
    return float(
        r["best_mfu_pct"]
    ) / 100, f"{r['model']} on {r['num_gpus']} GPUs ({r['source_title']}, {r['source_location']})"


def mfu_warning(mfu: float, family: str, dtype: str, moe: bool) -> str | None:
    """One line when ``mfu`` exceeds the best published MFU of its class, else None."""
    best = best_published_mfu(family, dtype, moe)
    if best is None or mfu <= best[0]:
        return None
    return (
        f"predicted MFU {100 * mfu:.1f}% exceeds the best published {family.upper()} {dtype} "
        f"{'MoE' if moe else 'dense'} MFU {100 * best[0]:.1f}% ({best[1]}): treat the prediction as optimistic"
    )
