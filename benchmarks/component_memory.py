"""Memory per GPU on its own measurements: predicted vs measured peak per published case.

    python -m benchmarks.component_memory [--csv PATH] [--check]

Every row of ``benchmarks/data/components/memory.csv`` (sources and conversions in
``README_memory.md`` beside it) is one measured training run: its model preset, cluster preset
and plan (degrees, micro-batch, recompute, dtype, framework and ZeRO stage as the framework ran
it), and one measured peak per GPU, the maximum over the run's GPUs:

* ``max_reserved_gib``: PyTorch's ``reserved_bytes.all.peak`` (what torchtitan logs as
  ``memory``), scored against the model's **total** (:attr:`costmodel.physics.memory.stage_memory.StageMemory.total_bytes`:
  model state, activations, gathered weights and :func:`costmodel.physics.memory.stage_memory.reserved_bytes`), the
  largest over the pipeline stages;
* ``max_allocated_gib``: ``allocated_bytes.all.peak`` (Megatron's ``max allocated``), scored against
  the model's **tensors** (the total less ``reserved_bytes``).

Both are taken on the stage the row's ``stage`` column names (``last``, ``first`` or an index: the
pipeline rank the source logged, e.g. Megatron's TensorBoard writer on rank ``world_size - 1``), the
largest over the stages where it is empty (a maximum over all GPUs).

The plan is built from the row's columns only (no per-row knob): ``sp`` as the row's ``sp`` column
says (0/1), on whenever ``tp > 1`` where it is empty (torchtitan's TP is always sequence-parallel),
``fused_elementwise`` = the row's ``compile``, ``cp_impl='torch'`` for FSDP2 context parallelism,
``chunks = tp`` under async TP, ``loss_impl`` as the row states it (default ``fused``).

``--check`` exits 1 unless the issue-21 targets hold, and says which fail: tensors <= 3% mean
|err| and <= 6% max (over ``max_allocated_gib`` rows), reserved <= 5% mean (over
``max_reserved_gib`` rows); a target without rows fails (it is not met, only unchecked).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import results_io
from benchmarks.component_rows import RowError

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

DATA = Path(__file__).resolve().parent / "data" / "components" / "memory.csv"
GiB = 2**30
KINDS = ("max_reserved_gib", "max_allocated_gib")
#: issue 21, "Done when": tensors <= 3% mean |err| and <= 6% max; reserved <= 5% mean
TENSOR_MEAN_LIMIT, TENSOR_MAX_LIMIT, RESERVED_MEAN_LIMIT = 0.03, 0.06, 0.05
REQUIRED = (
    "case_id",
    "source_key",
    "source_url",
    "source_location",
    "model_preset",
    "cluster_preset",
    "gpus",
    "tp",
    "pp",
    "vp",
    "dp",
    "cp",
    "mb",
    "global_batch",
    "seq_len",
    "dtype",
    "framework",
    "zero",
    "recompute",
    "measured_kind",
    "measured_value",
)


@dataclass(frozen=True, kw_only=True)
class Case:
    case_id: str
    source_key: str
    model_preset: str
    cluster_preset: str
    gpus: int
    workload: Workload
    config: ParallelConfig
    measured_kind: str
    measured_bytes: float
    stage: int | None = None  # the pipeline stage measured; None: the maximum over the stages


def _stage(row: dict, pp: int) -> int | None:
    v = (row.get("stage") or "").strip()
    if not v:
        return None
    if v in ("last", "first"):
        return pp - 1 if v == "last" else 0
    if v.isdigit() and int(v) < pp:
        return int(v)
    raise RowError(f"case {row.get('case_id')}: stage={v!r}: empty, 'first', 'last' or an index below pp={pp}")


def _int(row: dict, field: str, minimum: int = 1) -> int:
    try:
        v = int(row[field])
    except (TypeError, ValueError):
        raise RowError(
            f"case {row.get('case_id')}: {field}={row.get(field)!r}: must be an integer >= {minimum}"
        ) from None
    if v < minimum:
        raise RowError(f"case {row.get('case_id')}: {field}={v!r}: must be an integer >= {minimum}")
    return v


def parse_row(row: dict) -> Case:
    """A :class:`Case` from one CSV row; :class:`RowError` when a field is missing or invalid."""
    for f in REQUIRED:
        if not (row.get(f) or "").strip():
            raise RowError(f"case {row.get('case_id')}: {f} is empty: every row needs it")
    cid = row["case_id"]
    if row["measured_kind"] not in KINDS:
        raise RowError(f"case {cid}: measured_kind={row['measured_kind']!r}: one of {', '.join(KINDS)}")
    try:
        value = float(row["measured_value"])
    except ValueError:
        value = -1.0
    if not value > 0:
        raise RowError(f"case {cid}: measured_value={row['measured_value']!r}: must be a positive number")
    tp, fw = _int(row, "tp"), row["framework"]
    sp_col = (row.get("sp") or "").strip()
    if sp_col not in ("", "0", "1"):
        raise RowError(f"case {cid}: sp={sp_col!r}: 0, 1 or empty (on whenever tp > 1)")
    split = (row.get("layers_per_stage") or "").split()
    try:
        config = ParallelConfig(
            tp=tp,
            pp=_int(row, "pp"),
            vp=_int(row, "vp"),
            dp=_int(row, "dp"),
            cp=_int(row, "cp"),
            mb=_int(row, "mb"),
            zero=_int(row, "zero", 0),
            recompute=row["recompute"],
            framework=fw,
            sp=sp_col == "1" if sp_col else tp > 1,
            fused_elementwise=row.get("compile", "0") == "1" or fw != "fsdp2",
            cp_impl="torch" if fw == "fsdp2" and _int(row, "cp") > 1 else "ring",
            chunks=tp if row.get("async_tp") == "1" else 1,
            loss_impl=row.get("loss_impl") or "fused",
            layers_per_stage=tuple(int(x) for x in split) if split else None,
        )
        workload = Workload(global_batch=_int(row, "global_batch"), seq_len=_int(row, "seq_len"), dtype=row["dtype"])
    except SpecError as e:
        raise RowError(f"case {cid}: {e}") from None
    except ValueError:
        raise RowError(
            f"case {cid}: layers_per_stage={row.get('layers_per_stage')!r}: integers separated by spaces"
        ) from None
    return Case(
        case_id=cid,
        source_key=row["source_key"],
        model_preset=row["model_preset"],
        cluster_preset=row["cluster_preset"],
        gpus=_int(row, "gpus"),
        workload=workload,
        config=config,
        measured_kind=row["measured_kind"],
        measured_bytes=value * GiB,
        stage=_stage(row, config.pp),
    )


def load_cases(path: Path = DATA) -> list[Case]:
    with open(path, newline="") as f:
        return [parse_row(r) for r in csv.DictReader(f)]


@dataclass(frozen=True)
class Result:
    case: Case
    tensors_bytes: float  # the measured stage's (or the largest stage's) total less reserved_bytes
    total_bytes: float  # the measured stage's (or the largest stage's) total
    hbm_bytes: float

    @property
    def predicted_bytes(self) -> float:
        return self.total_bytes if self.case.measured_kind == "max_reserved_gib" else self.tensors_bytes

    @property
    def err(self) -> float:
        return self.predicted_bytes / self.case.measured_bytes - 1


def evaluate(cases: list[Case]) -> list[Result]:
    out = []
    for c in cases:
        if c.config.gpus != c.gpus:
            raise RowError(f"case {c.case_id}: gpus={c.gpus}: must equal tp*pp*dp*cp = {c.config.gpus}")
        mem = memory_per_stage(load_model(c.model_preset), c.workload, c.config, load_cluster(c.cluster_preset).device)
        if c.stage is not None:
            mem = [mem[c.stage]]
        tensors = max(s.total_bytes - s.reserved_bytes for s in mem)
        total = max(s.total_bytes for s in mem)
        out.append(Result(c, tensors, total, load_cluster(c.cluster_preset).device.hbm_bytes))
    return out


def summary(results: list[Result]) -> dict:
    """mean and max |err| of each measured kind (None where a kind has no rows)."""
    s = {}
    for kind in KINDS:
        errs = [abs(r.err) for r in results if r.case.measured_kind == kind]
        s[kind] = {"n": len(errs), "mean": statistics.fmean(errs) if errs else None, "max": max(errs) if errs else None}
    return s


def check(results: list[Result]) -> tuple[int, list[str]]:
    """(exit code, the failed targets): issue 21's targets, a target without rows failing."""
    s, failed = summary(results), []
    t, r = s["max_allocated_gib"], s["max_reserved_gib"]
    if not t["n"]:
        failed.append("tensors: no max-allocated rows")
    else:
        if t["mean"] > TENSOR_MEAN_LIMIT:
            failed.append(f"tensors mean |err| {t['mean']:.1%} > {TENSOR_MEAN_LIMIT:.0%}")
        if t["max"] > TENSOR_MAX_LIMIT:
            failed.append(f"tensors max |err| {t['max']:.1%} > {TENSOR_MAX_LIMIT:.0%}")
    if not r["n"]:
        failed.append("reserved: no max-reserved rows")
    elif r["mean"] > RESERVED_MEAN_LIMIT:
        failed.append(f"reserved mean |err| {r['mean']:.1%} > {RESERVED_MEAN_LIMIT:.0%}")
    return (1 if failed else 0), failed


def report(results: list[Result]) -> None:
    print(
        f"{'case':>4} {'source':12} {'model':16} {'plan':50} {'kind':9} {'tensors':>8} {'total':>7} "
        f"{'measured':>8} {'err':>7}"
    )
    for r in results:
        c, p = r.case, r.case.config
        plan = (
            f"{p.framework} z{p.zero} tp{p.tp} pp{p.pp}"
            + (f"v{p.vp}" if p.vp > 1 else "")
            + f" dp{p.dp} cp{p.cp} mb{p.mb} {p.recompute} {c.workload.dtype}"
            + (" eager" if not p.fused_elementwise else "")
            + (" sp" if p.sp_on else "")
            + (f" @stage{c.stage}" if c.stage is not None else "")
        )
        kind = "reserved" if c.measured_kind == "max_reserved_gib" else "allocated"
        print(
            f"{c.case_id:>4} {c.source_key:12} {c.model_preset:16} {plan:50} {kind:9} "
            f"{r.tensors_bytes / GiB:8.1f} {r.total_bytes / GiB:7.1f} {c.measured_bytes / GiB:8.1f} {r.err:+7.1%}"
        )
    by_source: dict[str, list[float]] = {}
    for r in results:
        by_source.setdefault(r.case.source_key, []).append(abs(r.err))
    print(
        "\nmean |err| by source: "
        + ", ".join(f"{k} {statistics.fmean(v):.1%} ({len(v)})" for k, v in by_source.items())
    )


def record(argv, results: list[Result], s: dict, enabled: bool) -> None:
    """``benchmarks/results/component_memory.json``."""
    t, r = s["max_allocated_gib"], s["max_reserved_gib"]
    by_source: dict[str, list[float]] = {}
    for x in results:
        by_source.setdefault(x.case.source_key, []).append(x.err)
    table = [
        {
            "source": k,
            "cases": len(v),
            "mean |err| %": results_io.pct(statistics.fmean(map(abs, v))),
            "signed %": results_io.pct(statistics.fmean(v)),
        }
        for k, v in by_source.items()
    ]
    met = {
        "tensors mean": bool(t["n"]) and t["mean"] <= TENSOR_MEAN_LIMIT,  # a target without rows is not met
        "tensors max": bool(t["n"]) and t["max"] <= TENSOR_MAX_LIMIT,
        "reserved mean": bool(r["n"]) and r["mean"] <= RESERVED_MEAN_LIMIT,
    }
    results_io.record(
        "component_memory",
        argv,
        enabled=enabled,
        table=table,
        title="memory per GPU against measured peaks (allocated: tensors; reserved: total)",
        headline={
            "tensor cases": t["n"],
            "tensors mean |err| %": results_io.pct(t["mean"]),
            "tensors max |err| %": results_io.pct(t["max"]),
            "reserved cases": r["n"],
            "reserved mean |err| %": results_io.pct(r["mean"]),
            "reserved max |err| %": results_io.pct(r["max"]),
        },
        targets=[
            {"name": f"tensors mean |err| <= {TENSOR_MEAN_LIMIT:.0%}", "met": met["tensors mean"]},
            {"name": f"tensors max |err| <= {TENSOR_MAX_LIMIT:.0%}", "met": met["tensors max"]},
            {"name": f"reserved mean |err| <= {RESERVED_MEAN_LIMIT:.0%}", "met": met["reserved mean"]},
        ],
        inputs=["costmodel", "benchmarks/component_memory.py", "benchmarks/data/components/memory.csv"],
    )


def main(argv: list[str] | None = None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=DATA, help="cases to score (default: the repository's data)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless issue 21's memory targets hold")
    a = ap.parse_args(argv)
    try:
        results = evaluate(load_cases(a.csv))
    except (OSError, RowError, KeyError) as e:
        print(f"--csv {a.csv}: {e}", file=sys.stderr)
        return 2
    report(results)
    s = summary(results)
    for kind, label in (
        ("max_allocated_gib", "tensors vs max allocated"),
        ("max_reserved_gib", "total vs max reserved"),
    ):
        k = s[kind]
        print(
            f"{label}: "
            + (f"mean |err| {k['mean']:.1%}, max {k['max']:.1%} over {k['n']} cases" if k["n"] else "no cases")
        )
    code, failed = check(results)
    print(
        "targets (tensors <= 3% mean, <= 6% max; reserved <= 5% mean): "
        + ("met" if not failed else "NOT met: " + "; ".join(failed))
    )
    record(argv, results, s, record_results and a.csv == DATA)
    return code if a.check else 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
