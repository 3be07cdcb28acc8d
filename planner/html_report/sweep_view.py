"""What the report shows of a sweep (the records of :meth:`planner.sweep.ResultStore.read`, columns of
:mod:`planner.sweep.schema`): the cases by status, every best plan in a table, and each problem's Pareto fronts:
step time against GPUs, and throughput against the price of a million tokens (the device's dated default price,
:func:`costmodel.objectives.cost.gpu_hour_price`; none for a device without one)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from costmodel.objectives.cost import gpu_hour_price
from costmodel.spec.errors import PlannerError, SpecError
from costmodel.spec.units import GiB

from . import plots

WHATIFS = ("dma_engines", "nvlink_gbps", "nic_gbps", "hbm_gib")


def read_rows(sweep_rows) -> list[dict]:
    """The records: a list of them as given, or read from a sweep's output directory."""
    if isinstance(sweep_rows, (str, os.PathLike)):
        from ..sweep.store import ResultStore

        store = ResultStore(sweep_rows)
        if not store.jsonl_path.exists():
            raise SpecError("sweep_rows", str(sweep_rows), f"a sweep directory holding {store.jsonl_path.name}")
        return store.read()
    rows = list(sweep_rows)
    if not all(isinstance(r, dict) for r in rows):
        raise SpecError("sweep_rows", type(sweep_rows).__name__, "sweep records (dicts), or a sweep directory")
    return rows


def _name(text) -> str:
    t = str(text)
    return Path(t).stem if ("/" in t or os.sep in t or t.endswith((".json", ".yaml", ".yml"))) else t


_PRICES: dict = {}


def price_per_gpu_hour(cluster: str) -> tuple[float, str] | None:
    """(USD per GPU-hour, source) of the cluster's device, or None (no default price, or a cluster that does not
    load here)."""
    if cluster not in _PRICES:
        try:
            from ..problem import resolve_cluster

            _PRICES[cluster] = gpu_hour_price(resolve_cluster(cluster).device.name)
        except PlannerError:
            _PRICES[cluster] = None
    return _PRICES[cluster]


def _dominated(p: dict, pts: list, x: str, y: str, y_higher: bool) -> bool:
    """Whether another point is at least as good on both axes and better on one (x lower is better)."""

    def better(a, b):
        return a > b if y_higher else a < b

    def as_good(a, b):
        return a >= b if y_higher else a <= b

    return any(q is not p and q[x] <= p[x] and as_good(q[y], p[y]) and (q[x] < p[x] or better(q[y], p[y])) for q in pts)


def problem_label(r: dict) -> str:
    return f"{_name(r.get('model'))}, {r.get('global_batch')} x {r.get('seq')} tokens"


def pareto_groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Per problem (model, batch, sequence), its solved plans with their Pareto flags: ``front_gpus`` (no plan
    with as few GPUs is faster) and ``front_cost`` (no plan as cheap per token has more throughput)."""
    groups: dict = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("step_time_s") or not r.get("tokens_per_s"):
            continue
        price = price_per_gpu_hour(str(r.get("cluster")))
        cost = None if price is None else r["gpus"] * price[0] / 3600 / r["tokens_per_s"] * 1e6
        groups.setdefault(problem_label(r), []).append(
            {
                "row": r,
                "gpus": r["gpus"],
                "step_time_s": r["step_time_s"],
                "tokens_per_s": r["tokens_per_s"],
                "cost": cost,
                "cluster": _name(r.get("cluster")),
            }
        )
    for pts in groups.values():
        for p in pts:
            p["front_gpus"] = not _dominated(p, pts, "gpus", "step_time_s", False)
        priced = [p for p in pts if p["cost"] is not None]
        for p in pts:
            p["front_cost"] = p["cost"] is not None and not _dominated(p, priced, "cost", "tokens_per_s", True)
    return list(groups.items())


def sweep_view(sweep_rows) -> dict:
    """The sweep's sections (see the module docstring)."""
    rows = read_rows(sweep_rows)
    groups = pareto_groups(rows)
    flags = {id(p["row"]): p for _, pts in groups for p in pts}
    whatifs = [w for w in WHATIFS if any(r.get(w) is not None for r in rows)]
    table = []
    for r in rows:
        p = flags.get(id(r))
        band = (r.get("step_time_band_lo_s"), r.get("step_time_band_hi_s"))
        table.append(
            {
                "model": _name(r.get("model")),
                "cluster": _name(r.get("cluster")),
                "gpus": r.get("gpus"),
                "global_batch": r.get("global_batch"),
                "seq": r.get("seq"),
                "dtype": r.get("dtype"),
                "whatifs": [r.get(w) for w in whatifs],
                "status": r.get("status"),
                "reason": r.get("reason") or "",
                "plan": " ".join(
                    f"{k}={r[k]}"
                    for k in ("tp", "pp", "dp", "cp", "ep", "vp", "mb", "zero", "recompute")
                    if r.get(k) is not None
                ),
                "zero": r.get("zero"),
                "recompute": r.get("recompute"),
                "step_s": r.get("step_time_s"),
                "band": band if None not in band else None,
                "tokens_per_s": r.get("tokens_per_s"),
                "tokens_per_gpu": r["tokens_per_s"] / r["gpus"] if r.get("tokens_per_s") and r.get("gpus") else None,
                "mfu": r.get("mfu"),
                "peak_gib": r["peak_memory_bytes"] / GiB if r.get("peak_memory_bytes") else None,
                "usd_per_mtok": p["cost"] if p else None,
                "front": ", ".join(n for n, k in (("GPUs", "front_gpus"), ("price", "front_cost")) if p and p[k]),
            }
        )
    prices = sorted(
        {
            (_name(r.get("cluster")), *price_per_gpu_hour(str(r.get("cluster"))))
            for r in rows
            if price_per_gpu_hour(str(r.get("cluster"))) is not None
        }
    )
    return {
        "count": len(rows),
        "statuses": sorted(Counter(str(r.get("status")) for r in rows).items()),
        "whatifs": whatifs,
        "rows": table,
        "prices": prices,
        "pareto_plot": plots.pareto_svg(groups) if groups else None,
    }
