"""MoE routing imbalance on its own measurements: published per-expert load statistics of MoE training
against the load distribution the cost model assumes.

    python -m benchmarks.component_routing [--csv PATH] [--check]

The cost model prices the busiest expert-parallel rank (:func:`costmodel.physics.kernels.moe_load.moe_imbalance`) from one
assumption about a routed expert's token count in one batch: normal, with coefficient of variation
:func:`costmodel.physics.kernels.moe_load.moe_expert_load_cv` (``ModelSpec.moe_load_cv`` 0.3 of routing skew, plus
multinomial sampling), experts independent. Every row of ``benchmarks/data/components/moe_routing.csv``
is one published statistic of expert loads (sources in ``README_moe_routing.md``); for each this prints
what that assumption predicts, with the default ``moe_load_cv``:

* ``maxvio_global`` (Wang et al. 2024, arXiv 2408.15664, Eq. 4): the busiest of ``experts`` experts over the
  mean, minus 1, per layer and averaged over layers: predicted ``moe_imbalance`` with one expert a rank
  (``ep = experts``) at the row's slots per expert, minus 1. Scored on the ratio ``1 + MaxVio``.
* ``max_over_mean``: the same ratio computed here from raw per-layer counts (``moe_routing_counts.csv``);
  with granularity ``rank`` the counts are first summed over ``experts / ranks`` contiguous experts a rank
  (Megatron-Core's placement) and predicted with ``ep = ranks``, which tests the averaging over a rank's
  experts (the independence assumption) on the same counts.
* ``drop_fraction``: the fraction of assignments over a per-expert capacity of ``capacity_factor`` times
  the mean: the expected overflow of the assumed normal load, :func:`overflow_fraction`; with granularity
  ``rank`` the capacity is per receiving EP rank and the load a sum of ``experts / ranks`` independent experts.
* ``step_time_ratio``: context only (the plan behind it is not stated); printed, not scored.

Each row also prints the routing skew it implies under the same assumption (``implied cv``: the
``moe_load_cv`` at which the prediction equals the measurement), which is what the data says about the
constant. No row is fitted; rows with ``role`` ``calibrates`` set the default and are scored apart.
``--check`` exits 1 when the mean |err| of the aux-loss-balanced checking rows (the balancing the default
stands for) exceeds :data:`AUX_LOSS_MEAN_LIMIT`; the other groups are printed as they come out.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

from benchmarks import results_io
from benchmarks.component_rows import RowError

from costmodel.physics.kernels.moe_load import moe_expert_load_cv, moe_imbalance
from costmodel.spec.specs import ModelSpec

DATA = Path(__file__).resolve().parent / "data" / "components" / "moe_routing.csv"
COUNTS = DATA.with_name("moe_routing_counts.csv")
#: the aux-loss rows the default stands for (16.2% over 5: 3B sigmoid +11.9%, 1B softmax -12.2%, the 8-expert
#: counts +32.3% by expert, +17.9% / +7.0% by EP 4 / 2 ranks); issue 20's kernel bound is 8%, none is set for
#: routing: this limit only keeps the component from getting worse than it is
AUX_LOSS_MEAN_LIMIT = 0.20
STATISTICS = ("maxvio_global", "max_over_mean", "drop_fraction", "step_time_ratio")
GRANULARITIES = ("expert", "expert_per_sender", "rank", "step")
REQUIRED = (
    "case_id",
    "source_key",
    "source_url",
    "source_location",
    "experts",
    "balancing",
    "granularity",
    "statistic",
    "measured_value",
    "training_phase",
    "role",
)
_N = NormalDist()


def overflow_fraction(cv: float, capacity_factor: float) -> float:
    """Expected load above ``capacity_factor`` times the mean, over the mean, of a normal load of
    coefficient of variation ``cv``: ``E[(X - c)+]`` for ``X ~ N(1, cv)``, ``cv phi(x) - (c - 1)(1 - Phi(x))``
    with ``x = (c - 1) / cv`` (the normal partial expectation) -- the dropped share of assignments.

    >>> round(overflow_fraction(0.3, 1.0), 4)   # cv / sqrt(2 pi)
    0.1197
    >>> overflow_fraction(0.0, 1.25)
    0.0
    """
    if cv <= 0:
        return max(0.0, 1.0 - capacity_factor)
    x = (capacity_factor - 1.0) / cv
    return cv * _N.pdf(x) - (capacity_factor - 1.0) * (1.0 - _N.cdf(x))


def _spec(row: dict, load_cv: float | None = None) -> ModelSpec:
    experts = int(row["experts"])
    topk = int(row.get("topk") or 1)  # top-k does not enter the load statistics (slots per expert do)
    m = ModelSpec(
        name=f"routing-{row['case_id']}",
        layers=1,
        hidden=64,
        heads=1,
        ffn_hidden=64,
        vocab=1,
        experts=experts,
        topk=topk,
        moe_ffn_hidden=64,
        router_expert_bias=row["balancing"] == "loss_free",  # its skew: ModelSpec.moe_load_cv's default
    )
    return m if load_cv is None else replace(m, moe_load_cv=load_cv)


def _ranks(row: dict) -> int:
    return int(row.get("ranks") or row["experts"]) if row["granularity"] == "rank" else int(row["experts"])


def load_counts(path: Path = COUNTS) -> dict[str, list[list[int]]]:
    """Per-layer expert counts by case id."""
    out: dict[str, list[list[int]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out.setdefault(r["case_id"], []).append([int(v) for k, v in r.items() if k.startswith("expert")])
    return out


def _predict(row: dict, slots: float, load_cv: float | None = None) -> float:
    """The prediction in the row's own statistic (``maxvio_global`` as the ratio ``1 + MaxVio``)."""
    m = _spec(row, load_cv)
    if row["statistic"] in ("maxvio_global", "max_over_mean"):
        # granularity expert: one expert a "rank" (the busiest expert over the mean); rank: ``ranks`` EP ranks
        return moe_imbalance(m, _ranks(row), slots)
    # a rank sums experts / ranks independent experts: its cv is the expert's over the square root of that
    # (the averaging moe_imbalance does)
    per_rank = int(row["experts"]) // _ranks(row) if row["granularity"] == "rank" else 1
    return overflow_fraction(moe_expert_load_cv(m, slots) / math.sqrt(per_rank), float(row["capacity_factor"]))


def implied_cv(row: dict, measured: float, slots: float) -> float | None:
    """The ``moe_load_cv`` at which the row's prediction equals ``measured`` (bisection; the prediction
    rises with it); None where even a perfectly balanced router (0) predicts more than was measured."""
    lo, hi = 0.0, 5.0
    if _predict(row, slots, lo) >= measured:
        return None
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _predict(row, slots, mid) < measured else (lo, mid)
    return 0.5 * (lo + hi)


def case(row: dict, counts: dict[str, list[list[int]]] | None = None) -> dict:
    """One row's measured value, the model's prediction, its error and the skew it implies."""
    for f in REQUIRED:
        if not str(row.get(f, "")).strip():
            raise RowError(f"case {row.get('case_id')}: field {f} is empty")
    stat = row["statistic"]
    if stat not in STATISTICS:
        raise RowError(f"case {row['case_id']}: statistic={stat!r}, one of {', '.join(STATISTICS)}")
    if row["granularity"] not in GRANULARITIES:
        raise RowError(f"case {row['case_id']}: granularity={row['granularity']!r}, one of {', '.join(GRANULARITIES)}")
    measured = float(row["measured_value"])
    if stat == "step_time_ratio":
        return dict(row=row, measured=measured, predicted=None, err=None, implied=None, slots=None)
    slots = float(row["slots_per_expert"])
    if stat == "max_over_mean":
        layers = (counts if counts is not None else load_counts()).get(row.get("counts_case") or row["case_id"])
        if not layers:
            raise RowError(f"case {row['case_id']}: no per-layer counts in {COUNTS.name}")
        per = int(row["experts"]) // _ranks(row)  # contiguous experts a rank (Megatron-Core's placement)
        ranked = [[sum(c[j * per : (j + 1) * per]) for j in range(len(c) // per)] for c in layers]
        from_counts = statistics.mean(max(c) / (sum(c) / len(c)) for c in ranked)
        if abs(from_counts - measured) > 5e-4:
            raise RowError(f"case {row['case_id']}: measured_value={measured} but the counts give {from_counts:.4f}")
        measured = from_counts
    if stat == "maxvio_global":
        measured = 1.0 + measured
    predicted = _predict(row, slots)
    return dict(
        row=row,
        measured=measured,
        predicted=predicted,
        err=predicted / measured - 1,
        slots=slots,
        implied=implied_cv(row, measured, slots),
    )


def load(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def groups(cases: list[dict]) -> dict[str, list[dict]]:
    """The scored groups: by balancing method and statistic; calibrating and context rows apart."""
    out: dict[str, list[dict]] = {}
    for c in cases:
        r = c["row"]
        if c["err"] is None:
            continue
        if r["role"] == "calibrates":
            out.setdefault("calibrating row (apart)", []).append(c)
            continue
        out.setdefault("all checked", []).append(c)
        out.setdefault(f"{r['balancing']} / {r['statistic']} / {r['granularity']}", []).append(c)
        if r["balancing"] == "aux_loss":
            out.setdefault("aux_loss (the default's balancing)", []).append(c)
    return out


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DATA)
    ap.add_argument(
        "--check", action="store_true", help=f"exit 1 if the aux-loss rows' mean |err| > {AUX_LOSS_MEAN_LIMIT:.0%}"
    )
    args = ap.parse_args(argv)
    try:
        counts = load_counts(args.csv.with_name(COUNTS.name)) if args.csv.with_name(COUNTS.name).exists() else {}
        cases = [case(r, counts) for r in load(args.csv)]
    except (OSError, RowError, KeyError, ValueError) as e:
        print(f"--csv: {e}", file=sys.stderr)
        return 2
    print(
        f"default moe_load_cv {ModelSpec.__dataclass_fields__['moe_load_cv'].default}; maxvio rows scored on "
        f"1 + MaxVio; implied cv: the moe_load_cv that reproduces the row"
    )
    print(
        f"{'id':>3} {'source':<19} {'E':>4} {'k':>2} {'EP':>3} {'balancing':<16} {'statistic':<15} {'cap':>5} "
        f"{'slots/exp':>9} | {'measured':>8} {'model':>8} {'err':>8} | {'implied cv':>10}  phase"
    )
    for c in cases:
        r = c["row"]
        pred = "" if c["predicted"] is None else f"{c['predicted']:8.4f}"
        err = "context" if c["err"] is None else f"{100 * c['err']:+7.1f}%"
        imp = "-" if c["implied"] is None else f"{c['implied']:.3f}"
        slots = "" if c["slots"] is None else f"{c['slots']:9.0f}"
        ep = r["ranks"] if r["granularity"] == "rank" else "-"
        print(
            f"{r['case_id']:>3} {r['source_key']:<19} {r['experts']:>4} {r.get('topk') or '?':>2} {ep:>3} "
            f"{r['balancing']:<16} {r['statistic']:<15} {r.get('capacity_factor') or '':>5} {slots:>9} | "
            f"{c['measured']:8.4f} {pred:>8} {err:>8} | {imp:>10}  {r['training_phase']}"
        )
    print(f"\n{'group':<48} {'n':>3} {'mean|e|':>8} {'signed':>8} {'max|e|':>8}")
    g = groups(cases)
    for name, cs in g.items():
        e = [c["err"] for c in cs]
        print(
            f"{name:<48} {len(cs):>3} {100 * statistics.mean(map(abs, e)):7.1f}% {100 * statistics.mean(e):+7.1f}% "
            f"{100 * max(map(abs, e)):7.1f}%"
        )
    aux = g.get("aux_loss (the default's balancing)", [])
    mean = statistics.mean(abs(c["err"]) for c in aux) if aux else math.inf
    checked = [c["err"] for c in g.get("all checked", [])]
    results_io.record(
        "component_routing",
        argv,
        enabled=record_results and args.csv == DATA,
        title="MoE routing imbalance against published expert-load statistics",
        headline={
            "checked cases": len(checked),
            "mean |err| %": results_io.pct(statistics.mean(map(abs, checked)) if checked else None),
            "signed %": results_io.pct(statistics.mean(checked) if checked else None),
            "aux-loss cases": len(aux),
            "aux-loss mean |err| %": results_io.pct(mean if aux else None),
        },
        targets=[
            {"name": f"aux-loss rows mean |err| <= {AUX_LOSS_MEAN_LIMIT:.0%}", "met": mean <= AUX_LOSS_MEAN_LIMIT}
        ],
        table=[
            {
                "group": n,
                "cases": len(cs),
                "mean |err| %": results_io.pct(statistics.mean(abs(c["err"]) for c in cs)),
                "signed %": results_io.pct(statistics.mean(c["err"] for c in cs)),
            }
            for n, cs in g.items()
        ],
        inputs=[
            "costmodel",
            "benchmarks/component_routing.py",
            "benchmarks/data/components/moe_routing.csv",
            "benchmarks/data/components/moe_routing_counts.csv",
        ],
    )
    if args.check and mean > AUX_LOSS_MEAN_LIMIT:
        print(f"check: aux-loss rows mean |err| {100 * mean:.1f}% > {100 * AUX_LOSS_MEAN_LIMIT:.0f}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
