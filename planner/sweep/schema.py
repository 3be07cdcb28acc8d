"""The stable schema of a sweep's results: one row per case in ``results.csv`` and ``results.jsonl``.

Both files hold the same flat columns, in the order of :data:`COLUMNS`; a JSONL line also
carries ``estimate``, the full :meth:`costmodel.training.estimate.Estimate.to_dict` of the best plan
(``null`` when there is none). Columns are only ever added at the end, under a new
:data:`SCHEMA_VERSION`; none is renamed or removed. Units are SI (seconds, bytes) except the
hardware what-if inputs, which keep the human units of their flags (GB/s, GiB).

In CSV a missing value is an empty cell, booleans are ``true``/``false`` and
``layers_per_stage`` is dash-joined (``"11-12-12-13"``); in JSONL they are ``null``, JSON
booleans and a list.

>>> [c.name for c in COLUMNS][:6]
['case_id', 'model', 'cluster', 'gpus', 'global_batch', 'seq']
>>> row = csv_row({"case_id": "ab", "sp": True, "layers_per_stage": [3, 5], "mfu": None})
>>> row["sp"], row["layers_per_stage"], row["mfu"]
('true', '3-5', '')
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 8  # 2: the step-time band columns; 3: the DMA assignment and the critical condition;
#                     4: the framework and gradient dtype inputs; 5: the band's notes, and the estimate
#                     columns are the op-graph engine's (as evaluate and recommend report them),
#                     analytic_step_time_s added; 6: the software stack the numbers assume; 7: the optimizer
#                     CPU offload fraction the plan runs; 8: the run's time, cost and energy (--train-tokens)

#: ``status`` values: a plan was found (``ok``); the combination is well formed but no plan
#: fits or none is valid (``infeasible``); the search found no plan within its time limit
#: (``unsolved``); the combination is malformed or the case raised (``error``); the worker
#: running the case died on every attempt (``crashed``).
STATUSES = ("ok", "infeasible", "unsolved", "error", "crashed")


@dataclass(frozen=True)
class Column:
    """One result column: its name, type (``str``, ``int``, ``float``, ``bool``) and meaning."""

    name: str
    type: str
    group: str
    doc: str


def _cols(group: str, *specs: tuple[str, str, str]) -> list[Column]:
    return [Column(n, t, group, d) for n, t, d in specs]


COLUMNS: tuple[Column, ...] = tuple(
    _cols(
        "input",
        ("case_id", "str", "deterministic id of the case: a hash of every input below and the solver options"),
        ("model", "str", "model preset name or spec file path, as given"),
        ("cluster", "str", "cluster preset name or spec file path, as given"),
        ("gpus", "int", "total GPUs"),
        ("global_batch", "int", "sequences per optimizer step"),
        ("seq", "int", "tokens per sequence"),
        ("dtype", "str", "GEMM format: bf16, fp16 or fp8"),
        (
            "dma_engines",
            "int",
            "what-if: engine count of every collective-carrying DMA engine class (empty: the cluster's)",
        ),
        ("nvlink_gbps", "float", "what-if: intra-node link bandwidth per GPU in GB/s (empty: the cluster's)"),
        ("nic_gbps", "float", "what-if: inter-node bandwidth per GPU in GB/s (empty: the cluster's)"),
        ("hbm_gib", "float", "what-if: HBM capacity per GPU in GiB (empty: the cluster's)"),
        ("model_params", "int", "total parameters of the model (for ordering by size)"),
    )
    + _cols(
        "outcome",
        ("status", "str", "ok | infeasible | unsolved | error | crashed (see STATUSES)"),
        ("reason", "str", "why there is no plan (one line), empty when status is ok"),
    )
    + _cols(
        "plan",
        ("tp", "int", "tensor-parallel degree"),
        ("pp", "int", "pipeline-parallel degree"),
        ("dp", "int", "data-parallel degree"),
        ("ep", "int", "expert-parallel degree"),
        ("cp", "int", "context-parallel degree"),
        ("vp", "int", "interleaved chunks per pipeline stage"),
        ("mb", "int", "micro-batch size in sequences"),
        ("sp", "bool", "sequence parallelism"),
        ("zero", "int", "ZeRO stage"),
        ("recompute", "str", "none | selective | full"),
        ("recompute_layers", "int", "with full recompute: layers per stage recomputed (empty: all)"),
        ("bucket_mb", "float", "DP gradient bucket size in MB (0: no overlap)"),
        ("chunks", "int", "pieces each overlappable collective is split into"),
        ("layers_per_stage", "str", "layers on each pipeline stage, first to last (empty: uniform)"),
    )
    + _cols(
        "estimate",
        (
            "step_time_s",
            "float",
            "predicted seconds per optimizer step by the op-graph scheduler, the default "
            "engine (every estimate column below is its, as evaluate and recommend "
            "report them; the analytic optimum CP-SAT proves is analytic_step_time_s)",
        ),
        (
            "graph_step_time_s",
            "float",
            "the same as step_time_s (kept for schema versions <= 4, where step_time_s was the analytic model's)",
        ),
        ("tokens_per_s", "float", "global tokens per second"),
        ("mfu", "float", "model FLOPs utilisation (0-1)"),
        ("hfu", "float", "hardware FLOPs utilisation (0-1)"),
        ("model_tflops_per_gpu", "float", "model TFLOP/s per GPU"),
        ("peak_memory_bytes", "float", "peak memory of the fullest GPU"),
        ("hbm_bytes", "float", "HBM capacity per GPU"),
        ("fits", "bool", "peak memory within HBM"),
        ("compute_s", "float", "forward + backward compute in the step"),
        ("bubble_s", "float", "pipeline bubble in the step"),
        ("exposed_comm_s", "float", "communication left exposed, all strategies (sum of *_exposed_s)"),
    )
    + _cols(
        "solve",
        ("solver", "str", "what produced the plan: cp-sat"),
        ("solve_status", "str", "the solver's status (OPTIMAL, FEASIBLE, INFEASIBLE, ...)"),
        ("solve_time_s", "float", "solver wall time in seconds"),
        ("objective_s", "float", "the solver's objective (step time it optimised)"),
        ("bound_s", "float", "the solver's best bound"),
        ("gap", "float", "relative gap between objective and bound"),
        ("case_time_s", "float", "wall time of the whole case, in its worker"),
        ("attempts", "int", "times the case was started (more than 1 after a worker died)"),
    )
    + _cols(
        "meta",
        ("schema_version", "int", "this schema's version"),
        ("finished_at", "str", "UTC time the case finished (ISO 8601)"),
    )
    + _cols(
        "estimate",  # schema version 2
        (
            "step_time_band_lo_s",
            "float",
            "low end of the 80% band of the measured step time around "
            "step_time_s (costmodel.trust.uncertainty; 10% of runs fall below)",
        ),
        ("step_time_band_hi_s", "float", "high end of that band (10% of runs fall above)"),
    )
    + _cols(
        "estimate",  # schema version 3
        (
            "dma_assignment",
            "str",
            "DMA engines each communication stream of the plan runs on, in --dma form "
            "(costmodel.physics.comm.dma.resolve, e.g. tp:cdma*2,pp:cdma*1,dp:cdma*1; "
            "'tp+dp:cdma*1': the two share one engine)",
        ),
        (
            "critical_strategy",
            "str",
            "the plan's binding communication: the strategy with the largest "
            "T_comm / T_compute in `planner explain` (empty: no communication)",
        ),
        (
            "t_comm_s",
            "float",
            "that strategy's T_comm: link time of its transfers per step on the slowest "
            "stage (op-graph engine, as `planner explain`)",
        ),
        (
            "t_compute_s",
            "float",
            "the compute window it can hide behind: compute independent of those "
            "transfers, per step (`planner explain`'s T_compute)",
        ),
        (
            "critical_holds",
            "bool",
            "the critical condition T_comm <= T_compute holds for every strategy "
            "of the plan (true with no communication)",
        ),
    )
    + _cols(
        "input",  # schema version 4
        ("framework", "str", "framework every plan of the case runs: megatron, deepspeed or fsdp2"),
        ("grad_dtype", "str", "dtype gradients are accumulated and reduced in: fp32, bf16 or fp16"),
    )
    + _cols(
        "estimate",  # schema version 5
        (
            "band_notes",
            "str",
            "what widened the 80% band, in words, '; '-separated (costmodel.trust.band_scope: "
            "beyond the measured runs or component data; inside the data, one sentence saying so)",
        ),
        (
            "analytic_step_time_s",
            "float",
            "the plan's step time by the analytic closed form, which the search optimises and proves optimal",
        ),
    )
    + _cols(
        "estimate",  # schema version 6
        (
            "stack",
            "str",
            "software stack the numbers assume (costmodel.frameworks.stacks: the cluster's stack, "
            "e.g. mcore-2025); a band's note names a stack without measured runs",
        ),
    )
    + _cols(
        "plan",  # schema version 7
        (
            "optimizer_offload_fraction",
            "float",
            "optimizer CPU offload (Megatron --optimizer-cpu-offload "
            "--optimizer-offload-fraction, copies overlapped): the fraction "
            "of the optimizer state on the host, 0: none (chosen only where "
            "no plan fits without it, search.offload_choice)",
        ),
    )
    + _cols(
        "objective",  # schema version 8: empty unless the sweep was given --train-tokens (costmodel.objectives)
        ("objective", "str", "what chose the case's plan: step (the fastest), time-to-train, cost or energy"),
        ("train_tokens", "float", "the run's token budget the columns below price"),
        ("objective_candidates", "int", "plans the objective ranked (the fastest the search found, within its band)"),
        ("days", "float", "days to train train_tokens with failures, checkpoints and restarts"),
        ("goodput", "float", "effective training time ratio: failure-free compute / wall time (0-1)"),
        ("checkpoint_interval_s", "float", "compute between checkpoints (Daly's optimum unless pinned)"),
        ("checkpoint_interval_steps", "int", "the same in steps"),
        ("lost_checkpoint_s", "float", "wall time lost to checkpoint writes over the run"),
        ("lost_work_s", "float", "work redone after failures over the run"),
        ("lost_restart_s", "float", "restarts over the run"),
        ("usd", "float", "dollars of the run (empty: no price for the device; give --gpu-hour-usd)"),
        ("usd_per_million_tokens", "float", "dollars per million tokens trained"),
        ("kwh", "float", "energy of the run at the meter (PUE included), kWh"),
        ("j_per_token", "float", "joules per token trained, at the meter"),
    )
)

NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
INPUT_NAMES: tuple[str, ...] = tuple(
    c.name for c in COLUMNS if c.group == "input" and c.name not in ("case_id", "model_params")
)
PLAN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.group == "plan")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "-".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_row(record: dict) -> dict:
    """The CSV cells (strings) of one record: every column of :data:`NAMES`, in order."""
    return {name: _cell(record.get(name)) for name in NAMES}


def parse_cell(column: str, text: str):
    """A CSV cell back to its JSON value (the inverse of the CSV writer).

    >>> parse_cell("gpus", "64"), parse_cell("fits", "false"), parse_cell("mfu", "")
    (64, False, None)
    """
    if text == "":
        return None
    kind = _TYPES[column]
    if column == "layers_per_stage":
        return [int(x) for x in text.split("-")]
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text == "true"
    return text


_TYPES = {c.name: c.type for c in COLUMNS}


def markdown() -> str:
    """The schema as a Markdown table (for documentation)."""
    lines = ["| column | type | group | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c.name}` | {c.type} | {c.group} | {c.doc} |" for c in COLUMNS]
    return "\n".join(lines)
