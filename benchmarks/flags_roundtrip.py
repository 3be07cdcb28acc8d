"""Emitted Megatron-LM flags read back: the same plan and the same predicted step time, for every published plan.

    python -m benchmarks.flags_roundtrip [--set dev|new|all] [--rows ID,ID,...]

For every usable Megatron-framework row of the set (``benchmarks/published``: the plan as
``benchmarks.published.predict`` prices it, with the op-graph engine), the plan is emitted the way
``planner recommend ... --emit megatron`` prints it (:func:`planner.emit.emit_text`, the architecture lines
first) and read back the way ``planner evaluate --megatron-args LINE --gpus N`` reads it
(:func:`planner.completion.stated_plan` on the ``evaluate`` command line of :func:`planner.cli.build_parser`,
with the row's model and cluster specs as ``--model`` and ``--cluster``). Compared: every
:class:`~costmodel.spec.plan.ParallelConfig` field of the read-back plan against the original (less
:data:`EXCLUDED`, each with its reason) and the predicted step time of the same engine, within
:data:`REL_TOL` relative.

Printed per plan: ``same``, ``differs`` with each field that differs (original -> read back) and the step
time's change, ``emit refused`` (the emitter has no Megatron-LM flags for the plan, with its one-line
reason) or ``read refused`` (the emitted line is not read back, with the reason). Exit 1 when an emitted
plan does not read back identical.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import fields

from benchmarks import results_io
from benchmarks.published import Row, load_set, predict
from costmodel.spec.errors import PlannerError
from costmodel.spec.plan import ParallelConfig

#: relative tolerance of the step time read back (the same engine on the same plan: equal up to rounding)
REL_TOL = 1e-9
#: ParallelConfig fields left out of the comparison: fields no Megatron-LM flag states (modelling-only), each
#: with its reason. Every other field is compared.
EXCLUDED = {
    "dma": "the DMA engines each communication stream runs on: no framework has a flag for it (--emit says it "
    "in a note, planner.emit.dma_notes), so it reads back unset (the default assignment)",
}
#: the fields compared
COMPARED = tuple(f.name for f in fields(ParallelConfig) if f.name not in EXCLUDED)
#: compared fields whose value is compared by what it means, not as it is spelt, each with its reason (the values
#: compared: :func:`meaning`)
BY_MEANING = {
    "layout": "compared as the layout the plan runs (costmodel.spec.layout.of: unset stands for the layout of "
    "layers_per_stage and vp): Megatron-LM states a split one way, so a plan stating a layout that a per-rank "
    "split flag builds is written with that flag and reads back unset, and a plan whose split no flag builds is "
    "written as --pipeline-model-parallel-layout and reads back with the layout",
    "sp": "compared as sequence parallelism in effect (ParallelConfig.sp_on: it needs tp > 1); --sequence-parallel "
    "is written only then, and Megatron-LM turns it off at tp 1",
    "ep_dispatcher": "compared where ep > 1: at ep 1 no token is dispatched, and the line's dispatcher is not read",
    "pp_free_stage_inputs": "compared where pp > 1, where --emit megatron refuses it (no framework frees a "
    "stage's received input); at pp 1 it changes nothing and is not written",
}


def meaning(model, c: ParallelConfig, k: str):
    """Field ``k`` of plan ``c`` as compared: its value, or for :data:`BY_MEANING` what it means for ``model``."""
    from costmodel.spec.layout import of

    if k == "layout":
        return of(model, c)
    if k == "sp":
        return c.sp_on
    if k == "ep_dispatcher":
        return c.ep_dispatcher if c.ep > 1 else None
    if k == "pp_free_stage_inputs":
        return c.pp_free_stage_inputs and c.pp > 1
    return getattr(c, k)


def megatron_rows(name: str = "all") -> list[Row]:
    """The usable rows of set ``name`` whose plan runs under Megatron (``framework`` unstated: Megatron)."""
    return [r for r in load_set(name) if not r.skip and r.fixed.get("framework", "megatron") == "megatron"]


def emitted_line(config: ParallelConfig, model, workload) -> str:
    """The plan as ``planner recommend ... --emit megatron`` prints it (``planner.recommend_report._emit``)."""
    from planner.emit import emit_text

    text, _notes = emit_text("megatron", config, workload, model.layers, model.is_moe, model=model)
    return text


def read_back(text: str, model, cluster, gpus: int):
    """``planner evaluate --megatron-args TEXT --gpus N`` on ``model`` and ``cluster``: the estimate it prints."""
    from planner.cli import build_parser
    from planner.completion import stated_plan

    args = build_parser().parse_args(
        ["evaluate", "--megatron-args", text, "--model", "spec", "--cluster", "spec", "--gpus", str(gpus), "--json"]
    )
    args.model, args.cluster = model, cluster  # the specs themselves, as a --model/--cluster file would give them
    return stated_plan(args).estimate


def differences(want: ParallelConfig, got: ParallelConfig, model) -> dict:
    """``{field: (original, read back)}`` of the :data:`COMPARED` fields that differ (:func:`meaning`)."""
    pairs = {k: (meaning(model, want, k), meaning(model, got, k)) for k in COMPARED}
    return {k: (a, b) for k, (a, b) in pairs.items() if a != b}


def roundtrip_estimate(est, model, cluster, workload) -> dict:
    """The round trip of the plan of estimate ``est`` (of ``model``, ``cluster``, ``workload``): ``status``
    (``same``, ``differs``, ``emit refused``, ``read refused``), ``fields`` (:func:`differences`), ``rel``
    (read-back step time / original - 1) and ``why`` (the refusal)."""
    out = {"fields": {}, "rel": None, "why": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tight or framework-refused plan is still priced, with a warning
        try:
            text = emitted_line(est.config, model, workload)
        except PlannerError as e:
            return {**out, "status": "emit refused", "why": str(e)}
        try:
            back = read_back(text, model, cluster, est.config.gpus)
        except PlannerError as e:
            return {**out, "status": "read refused", "why": str(e)}
    diff = differences(est.config, back.config, model)
    rel = back.step_time_s / est.step_time_s - 1
    same = not diff and abs(rel) <= REL_TOL
    return {**out, "status": "same" if same else "differs", "fields": diff, "rel": rel}


def roundtrip(row: Row) -> dict:
    """One published plan's round trip (:func:`roundtrip_estimate` of ``benchmarks.published.predict``'s estimate;
    ``status`` ``no prediction`` where it has none), with the row's id, set, source and label."""
    out = {"row": row.row_id, "set": row.set, "source": row.source, "label": row.label}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est, why = predict(row)
    if est is None:
        return {**out, "status": "no prediction", "fields": {}, "rel": None, "why": why}
    return {**out, **roundtrip_estimate(est, row.model, row.cluster, row.workload)}


def _fmt(v) -> str:
    return str(v) if not isinstance(v, tuple) else "(" + ",".join(map(str, v)) + ")"


def detail(r: dict) -> str:
    """The printed reason: each field that differs (original -> read back) and the step time's change, or why."""
    if r["status"] == "differs":
        parts = [f"{k} {_fmt(a)} -> {_fmt(b)}" for k, (a, b) in r["fields"].items()]
        return f"step {100 * r['rel']:+.4f}%" + ("; " + "; ".join(parts) if parts else "")
    return r["why"]


def readback_counts(counts: dict, compared: tuple = COMPARED) -> dict:
    """The headline figures of a round trip's status counts (this benchmark's and ``emit_roundtrip_other``'s)."""
    return {
        "emitted": sum(counts.get(s, 0) for s in ("same", "differs", "read refused")),
        "read back identical": counts.get("same", 0),
        "differ": counts.get("differs", 0),
        "not read back": counts.get("read refused", 0),
        "not emitted": counts.get("emit refused", 0),
        "fields compared": len(compared),
    }


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="all", choices=("dev", "new", "all"))
    ap.add_argument("--rows", help="only these row ids (comma-separated)")
    args = ap.parse_args(argv)
    rows = megatron_rows(args.set)
    if args.rows:
        keep = set(args.rows.split(","))
        rows = [r for r in rows if r.row_id in keep]
    print(f"compared: every ParallelConfig field but {', '.join(EXCLUDED)}; step time within {REL_TOL:g} relative")
    for k, why in EXCLUDED.items():
        print(f"  not compared: {k}: {why}")
    for k, why in BY_MEANING.items():
        print(f"  {k}: {why}")
    print(f"\n{'row':>5} {'set':<3} {'source':22} {'model':20} {'status':13} detail")
    results, counts, by_field = [], {}, {}
    for row in rows:
        r = roundtrip(row)
        results.append(r)
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        for k in r["fields"]:
            by_field[k] = by_field.get(k, 0) + 1
        print(f"{row.row_id:>5} {row.set:<3} {row.source[:22]:22} {row.label[:20]:20} {r['status']:13} {detail(r)}")
    bad = counts.get("differs", 0) + counts.get("read refused", 0)
    print(
        f"\n{len(results)} Megatron plans: {counts.get('same', 0)} read back identical (config and step time), "
        f"{counts.get('differs', 0)} differ, {counts.get('read refused', 0)} not read back, "
        f"{counts.get('emit refused', 0)} not emitted, {counts.get('no prediction', 0)} without a prediction"
    )
    if by_field:
        print("fields that differ: " + ", ".join(f"{k} ({n})" for k, n in sorted(by_field.items())))
    results_io.record(
        "flags_roundtrip",
        argv,
        enabled=record_results and args.set == "all" and not args.rows,
        title="emitted Megatron-LM flags read back by evaluate --megatron-args: same plan and step time",
        headline={
            "Megatron plans": len(results),
            **readback_counts(counts),
        },
        table=[
            {"row": r["row"], "set": r["set"], "source": r["source"], "status": r["status"], "detail": detail(r)}
            for r in results
            if r["status"] != "same"
        ],
        targets=[{"name": "every emitted plan reads back with the same config and step time", "met": not bad}],
        inputs=[
            "costmodel",
            "planner",
            "benchmarks/flags_roundtrip.py",
            "benchmarks/published",
            "benchmarks/data/published_dev.csv",
            "benchmarks/data/published_new.csv",
        ],
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
