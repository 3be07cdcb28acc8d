"""How far to trust a serving prediction: 80% bands of TTFT, TPOT and throughput.

The approach of :mod:`costmodel.trust.uncertainty` (the normal prediction interval of validation
residuals in log space, ``mean +- t(n-1) * sd * sqrt(1 + 1/n)``, with a run-to-run noise
floor), applied to the serving validation: ``costmodel/trust/data/serving_residuals.json`` holds
``ln(predicted / measured)`` of every row of ``benchmarks/data/published_inference.csv``
(written by ``benchmarks/validate_inference.py --write-residuals``), tagged with the quantity
(``ttft``, ``tpot``, ``throughput``), the engine and the load (``admitted``: every client runs;
``queued``: more clients than the engine admits). The pool is the rows of the same quantity,
engine and load, backing off to quantity and load, then the quantity alone, until it holds
:data:`MIN_POOL` rows.

The residuals are those of the rows the band is then quoted for (no held-out split: the
serving set is small, 43 rows from two NVIDIA sources, all TensorRT-LLM-scheduled); the band
is a statement of how well the model matched those benchmarks, and says so in ``basis``.

>>> lo, hi = band_log("tpot", "trtllm", "admitted", residuals=[
...     {"quantity": "tpot", "engine": "trtllm", "load": "admitted", "log_residual": e}
...     for e in (0.1, 0.12, 0.08, 0.11, 0.09)])
>>> -0.2 < lo < -0.1 < hi < 0   # predictions ~10% high: the band sits below the prediction
True
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from costmodel.trust.uncertainty import LEVEL, NOISE_SD, _interval, _norm_ppf

RESIDUALS = Path(__file__).parent / "data" / "serving_residuals.json"
MIN_POOL = 4
#: validation metric -> the quantity its error band describes
QUANTITY = {"ttft_ms": "ttft", "tpot_ms": "tpot", "tokens_per_s": "throughput", "tokens_per_s_per_gpu": "throughput"}


def load_state(est) -> str:
    """``queued`` when more clients per replica than the engine admits, else ``admitted``."""
    s = est.serving
    return (
        "queued" if s.get("load") == "closed_loop" and s["admitted_per_replica"] < est.batch_per_replica else "admitted"
    )


@lru_cache(maxsize=1)
def _stored() -> tuple:
    if not RESIDUALS.exists():
        return ()
    return tuple(json.loads(RESIDUALS.read_text())["residuals"])


def pool_for(quantity: str, engine: str, load: str, residuals) -> tuple[list[float], str]:
    """The residuals the band of one prediction is built from, and which backoff level gave them."""
    for keys, label in (
        ((quantity, engine, load), "quantity, engine, load"),
        ((quantity, None, load), "quantity, load"),
        ((quantity, None, None), "quantity"),
    ):
        q, e, lo = keys
        pool = [
            r["log_residual"]
            for r in residuals
            if r["quantity"] == q and (e is None or r["engine"] == e) and (lo is None or r["load"] == lo)
        ]
        if len(pool) >= MIN_POOL:
            return pool, label
    return [r["log_residual"] for r in residuals if r["quantity"] == quantity], "quantity"


def band_log(quantity: str, engine: str, load: str, level: float = LEVEL, residuals=None) -> tuple[float, float]:
    """``(lo, hi)`` in ``ln(measured / predicted)``: the band is ``predicted * exp([lo, hi])``
    (no residuals at all: the noise floor alone)."""
    residuals = list(_stored() if residuals is None else residuals)
    pool, _ = pool_for(quantity, engine, load, residuals)
    z = _norm_ppf(0.5 + level / 2)
    if not pool:
        return -z * NOISE_SD, z * NOISE_SD
    mean, half, _ = _interval(pool, level)
    half = math.sqrt(half**2 + (z * NOISE_SD) ** 2)
    return -mean - half, -mean + half


def serving_bands(
    ttft_s: float, tpot_s: float, tokens_per_s: float, engine: str, load: str, level: float = LEVEL, residuals=None
) -> dict:
    """80% bands of a serving estimate's TTFT and TPOT (ms) and output tokens/s, and their basis."""
    if residuals is None:  # the stored residuals: their bands depend on (engine, load, level) alone
        logs, basis = _stored_bands(engine, load, level)
    else:
        logs, basis = _bands(engine, load, level, list(residuals))
    out = {}
    for (name, value), (lo, hi) in zip(
        (("ttft_ms", ttft_s * 1e3), ("tpot_ms", tpot_s * 1e3), ("tokens_per_s", tokens_per_s)), logs
    ):
        out[name] = [value * math.exp(lo), value * math.exp(hi)]
    out["basis"] = basis
    return out


def _bands(engine: str, load: str, level: float, residuals: list) -> tuple[tuple, str]:
    """(``band_log`` of ttft, tpot and throughput, the basis sentence) for one engine and load."""
    logs = tuple(band_log(q, engine, load, level, residuals) for q in ("ttft", "tpot", "throughput"))
    pools = {q: pool_for(q, engine, load, residuals) for q in ("ttft", "tpot", "throughput")}
    basis = (
        f"{int(level * 100)}% prediction interval of the serving validation residuals "
        f"({', '.join(f'{q}: {len(p)} rows by {lab}' for q, (p, lab) in pools.items())}; "
        "in-sample, TensorRT-LLM-scheduled NVIDIA benchmarks only)"
    )
    return logs, basis


@lru_cache(maxsize=64)
def _stored_bands(engine: str, load: str, level: float) -> tuple[tuple, str]:
    return _bands(engine, load, level, list(_stored()))


def with_serving_bands(est):
    """``est`` (a :class:`~costmodel.serving.inference.InferenceEstimate`) with the 80% bands of its TTFT, TPOT and
    throughput: the one place a serving estimate gets its bands."""
    return replace(
        est, bands=serving_bands(est.ttft_s, est.tpot_s, est.tokens_per_s, est.serving["engine"], load_state(est))
    )
