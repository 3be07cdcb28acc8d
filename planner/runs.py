"""Read a user's measured training runs: a CSV/YAML table, or Megatron-LM / NeMo training logs.

Table columns (CSV header or YAML keys; a YAML file is a list of runs or ``{runs: [...]}``):

=================  ==========================================================================
``model``          preset name or spec file (or ``--model``)
``cluster``        preset name or spec file (optional; ``--cluster`` overrides)
``gpus``           total GPUs (default ``tp*pp*dp*cp``)
``global_batch``   sequences per step;  ``seq``: tokens per sequence;  ``dtype``: bf16/fp16/fp8
plan               ``tp pp dp ep cp vp mb sp zero recompute recompute_layers bucket_mb chunks
                   flash_attention grad_dtype ep_dispatcher`` (unset: the planner's defaults;
                   ``dp`` from ``gpus``; ``ep_dispatcher``: ``alltoall`` or ``deepep``)
measured           ``step_time_s``, or ``tokens_per_s`` (whole job), or ``tokens_per_s_per_gpu``
``label``          a name for the report (optional; ``notes``/``source``/``date`` are ignored)
=================  ==========================================================================

A log is recognised by its content: the arguments Megatron-LM prints at start-up
(``  tensor_model_parallel_size ...... 8`` between the ``arguments`` rulers) or NeMo's YAML
config (``tensor_model_parallel_size: 8``), and the per-iteration timing lines
(``elapsed time per iteration (ms): 1234.5`` or NeMo's ``train_step_timing in s=1.23``). The
step time is the median of the logged iterations after warm-up (the first
:data:`WARMUP_ENTRIES` entries are dropped when more than twice as many were logged, else the
first one). The model comes from ``--model`` or from the logged shape arguments. An excerpt
(dump lines without the rulers, or iteration lines only) is read too: what a run needs and the
excerpt does not state (:data:`LOG_NEEDS`: GPUs, batch, sequence, dtype, TP, PP, micro-batch; the
model) comes from flags (``--gpus``, ``--global-batch``, ``--seq``, ``--dtype``, ``--tp``, ``--pp``,
``--mb``, ``--model``), and the error names all that is missing. Other settings the excerpt does
not state take Megatron-LM's defaults (no overlap, no recompute, no distributed optimizer).

Any bad input raises :class:`~costmodel.spec.errors.SpecError` naming the file, line and field
(the CLI exits 2 with that one line).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.trust.calibration import MeasuredRun
from costmodel.spec.plan import CONFIG_KEYS, ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import PlannerError, SpecError
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import DTYPES

from . import megatron_args as mg
from . import megatron_model as mm
from .megatron_values import as_bool, as_int
from .problem import make_config, resolve_cluster, resolve_model
from .run_logs import parse_log
from .run_logs import _read

PLAN_KEYS = tuple(CONFIG_KEYS) + (
    "recompute_layers",
    "flash_attention",
    "grad_dtype",
    "ep_dispatcher",
    "fp8_param_gather",
    "recompute_modules",
    "layout",
    # what a log's arguments state besides the degrees (megatron_args.config_fields): an uneven stage split
    # (--decoder-first/last-pipeline-num-layers, account-for flags) and the offloads
    "layers_per_stage",
    "optimizer_offload_fraction",
    "overlap_cpu_optimizer_d2h_h2d",
    "activation_offload_layers",
    "offload_modules",
)
MEASURED_KEYS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu")
KNOWN = set(PLAN_KEYS) | set(MEASURED_KEYS) | {"model", "cluster", "gpus", "global_batch", "seq", "dtype", "label"}
IGNORED = {"notes", "note", "source", "date", "comment", "comments"}

#: what a log must state (or a flag give) to be a run: (run field, Megatron-LM argument, calibrate flag)
LOG_NEEDS = (
    ("gpus", "world_size", "--gpus"),
    ("global_batch", "global_batch_size", "--global-batch"),
    ("seq", "seq_length", "--seq"),
    ("dtype", "bf16/fp16/fp8", "--dtype"),
    ("tp", "tensor_model_parallel_size", "--tp"),
    ("pp", "pipeline_model_parallel_size", "--pp"),
    ("mb", "micro_batch_size", "--mb"),
)
#: run fields a flag may give for a log (those of LOG_NEEDS, and the other degrees)
LOG_FLAGS = tuple(k for k, _, _ in LOG_NEEDS) + ("cp", "ep", "vp")


@dataclass(frozen=True)
class Run:
    """One measured run as read: where it came from, the problem, and the measured step time."""

    label: str
    model: ModelSpec
    model_ref: str  # the preset name or file the model came from ("log" for a logged shape)
    cluster_ref: str | None
    workload: Workload
    config: ParallelConfig
    measured_s: float

    @property
    def gpus(self) -> int:
        return self.config.gpus

    def measured(self) -> MeasuredRun:
        return MeasuredRun(
            model=self.model, workload=self.workload, config=self.config, measured_s=self.measured_s, label=self.label
        )

    def info(self) -> dict:
        """Plain values for the ``runs`` list of a calibrated cluster file."""
        return {
            "model": self.model_ref,
            "gpus": self.gpus,
            "global_batch": self.workload.global_batch,
            "seq": self.workload.seq_len,
            "dtype": self.workload.dtype,
            "config": self.config.to_dict(),
            "measured_s": self.measured_s,
        }


# --------------------------------------------------------------------------- tables
def _num(where: str, key: str, value, integer: bool = False, positive: bool = True):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{where}: {key}", value, "an integer" if integer else "a number") from None
    if not math.isfinite(v) or (positive and v <= 0) or (integer and v != int(v)):
        raise SpecError(f"{where}: {key}", value, "a positive integer" if integer else "a positive number")
    return int(v) if integer else v


def _blank(v) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def run_from_record(rec: dict, where: str, *, model=None, base_dir: Path | None = None) -> Run:
    """A :class:`Run` from one table row (``where`` names it in errors, e.g. ``runs.csv:3``)."""
    rec = {str(k).strip().lower(): v for k, v in rec.items() if k is not None}
    for k in rec:
        if k not in KNOWN and k not in IGNORED:
            raise SpecError(f"{where}: column", k, _known_columns(k))
    rec = {k: v for k, v in rec.items() if k in KNOWN and not _blank(v)}
    model_ref = rec.get("model", model)
    if model_ref is None:
        raise SpecError(f"{where}: model", None, "given (a model column or --model)")
    try:
        m = resolve_model(_relative(model_ref, base_dir) if isinstance(model_ref, str) else model_ref)
    except SpecError as e:
        raise SpecError(f"{where}: {e.field}", e.value, e.allowed) from None
    for key in ("global_batch", "seq"):
        if key not in rec:
            raise SpecError(f"{where}: {key}", None, "given (a positive integer)")
    batch = _num(where, "global_batch", rec["global_batch"], integer=True)
    seq = _num(where, "seq", rec["seq"], integer=True)
    dtype = str(rec.get("dtype", "bf16")).strip().lower()
    if dtype not in DTYPES:
        raise SpecError(f"{where}: dtype", dtype, f"one of {', '.join(DTYPES)}")
    plan = {}
    for key in PLAN_KEYS:
        if key not in rec:
            continue
        v = rec[key]
        try:
            if key in ("sp", "flash_attention", "fp8_param_gather", "overlap_cpu_optimizer_d2h_h2d"):
                plan[key] = as_bool(key, v)
            elif key == "layers_per_stage":
                plan[key] = _stage_counts(where, v)
            elif key == "optimizer_offload_fraction":
                plan[key] = _num(where, key, v, positive=False)
            elif key == "recompute_modules":
                plan[key] = v if isinstance(v, tuple) else mg.recompute_modules(v)
            elif key == "offload_modules":  # checked by ParallelConfig (plan_checks.check_fg_offload)
                plan[key] = tuple(v) if isinstance(v, (tuple, list)) else tuple(str(v).replace(",", " ").split())
            elif key == "layout":
                plan[key] = str(v).strip()
            elif key in ("recompute", "grad_dtype", "ep_dispatcher"):
                plan[key] = str(v).strip().lower()
            elif key == "bucket_mb":
                plan[key] = _num(where, key, v, positive=False)
            elif key in ("zero", "recompute_layers", "activation_offload_layers"):
                plan[key] = as_int(key, v)
            else:
                plan[key] = _num(where, key, v, integer=True)
        except SpecError as e:
            raise SpecError(f"{where}: {key}", e.value, e.allowed) from None
    gpus = _num(where, "gpus", rec["gpus"], integer=True) if "gpus" in rec else None
    measured = _measured(rec, where, batch * seq, gpus)
    try:
        config = make_config(gpus, **plan)
        if gpus is not None and config.gpus != gpus:
            raise SpecError("tp*pp*dp*cp", config.gpus, f"equal to gpus={gpus}")
        workload = Workload(global_batch=batch, seq_len=seq, dtype=dtype)
        gpus = config.gpus
        if measured is None:  # tokens per second per GPU needed the GPU count
            measured = batch * seq / (float(rec["tokens_per_s_per_gpu"]) * gpus)
        validate_config(m, _NoCluster(), workload, config)
    except PlannerError as e:
        field = getattr(e, "field", None)
        if field is None:
            raise SpecError(where, None, f"a valid run ({e})") from None
        raise SpecError(f"{where}: {field}", e.value, e.allowed) from None
    label = str(rec.get("label") or where)
    cluster_ref = str(rec["cluster"]).strip() if "cluster" in rec else None
    return Run(
        label, m, str(model_ref) if isinstance(model_ref, str) else m.name, cluster_ref, workload, config, measured
    )


def _known_columns(column: str) -> str:
    """What a table column may be: the closest known names and the main ones (one short line)."""
    import difflib

    close = difflib.get_close_matches(column, sorted(KNOWN), n=2)
    guess = f"did you mean {' or '.join(close)}? " if close else ""
    return f"a known column ({guess}model, gpus, global_batch, seq, step_time_s, tp, pp, dp, mb, ...: planner.runs)"


def _stage_counts(where: str, value) -> tuple:
    """``layers_per_stage`` as a tuple of positive integers: a log's tuple, a YAML list or ``"15,17"``."""
    items = value if isinstance(value, (list, tuple)) else str(value).replace(";", ",").replace(" ", ",").split(",")
    items = [x for x in items if str(x).strip()]
    if not items:
        raise SpecError(f"{where}: layers_per_stage", value, "layers on each stage, e.g. 15,17")
    return tuple(_num(where, "layers_per_stage", x, integer=True) for x in items)


class _NoCluster:
    """Stands in for a cluster in :func:`validate_config` (which only reads ``num_gpus``)."""

    num_gpus = 0


def _relative(ref: str, base_dir: Path | None) -> str:
    if base_dir is not None and not Path(ref).is_absolute() and not Path(ref).exists() and (base_dir / ref).exists():
        return str(base_dir / ref)
    return ref


def _measured(rec: dict, where: str, tokens: int, gpus: int | None):
    given = [k for k in MEASURED_KEYS if k in rec]
    if len(given) != 1:
        raise SpecError(
            f"{where}: step_time_s",
            None if not given else ",".join(given),
            "exactly one of step_time_s, tokens_per_s, tokens_per_s_per_gpu",
        )
    k = given[0]
    v = _num(where, k, rec[k])
    if k == "step_time_s":
        return v
    if k == "tokens_per_s":
        return tokens / v
    return tokens / (v * gpus) if gpus else None


def read_table(path: Path, *, model=None) -> list[Run]:
    """Runs from a CSV or YAML table (see the module doc)."""
    text = _read(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError("runs", str(path), f"valid YAML ({str(e).splitlines()[0]})") from None
        if isinstance(data, dict) and "runs" in data:
            data = data["runs"]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise SpecError("runs", str(path), "a YAML list of runs (or {runs: [...]}), each a mapping")
        return [
            run_from_record(r, f"{path}: run {i + 1}", model=model, base_dir=path.parent) for i, r in enumerate(data)
        ]
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise SpecError("runs", str(path), "a CSV file with a header line (the file is empty)")
    runs = []
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if None in row:
            raise SpecError(where, None, f"a row of {len(reader.fieldnames)} fields (as many as the header)")
        if all(_blank(v) for v in row.values()):
            continue
        runs.append(run_from_record(row, where, model=model, base_dir=path.parent))
    if not runs:
        raise SpecError("runs", str(path), "a CSV file with at least one run (only a header was found)")
    return runs


def run_from_log(path: Path, *, model=None, text: str | None = None, given: dict | None = None) -> Run:
    """A :class:`Run` from a Megatron-LM / NeMo log (model from ``model`` or the logged shape).

    ``given``: run fields from flags (keys of :data:`LOG_FLAGS`; ``None`` values ignored) for what
    the log does not state; a flag that contradicts the log is refused. What the run needs and
    neither states (:data:`LOG_NEEDS`, the model's shape) is named, all of it, in one error."""
    log = parse_log(path, text)
    where = str(path)
    given = {k: v for k, v in (given or {}).items() if v is not None}
    for k in given:
        if k not in LOG_FLAGS:
            raise SpecError(f"{where}: given", k, f"one of {', '.join(LOG_FLAGS)}")
    missing = []
    try:
        if model is not None:
            m = resolve_model(model)
            ref = str(model) if isinstance(model, str) else m.name
        else:
            shape = mm.missing_shape(log.args)
            missing = [f"{', '.join(shape)} (or --model)"] if shape else []
            m = None if missing else _logged_model(mm.model_fields(log.args))
            ref = m.name if m else "log"
        rec = {**mg.workload_fields(log.args), **mg.config_fields(log.args, m.layers if m else None)}
    except SpecError as e:
        raise SpecError(f"{where}: {e.field}", e.value, e.allowed) from None
    if "gpus" not in rec and "dp" in rec:  # a dump without world_size: its degrees multiply to it
        rec["gpus"] = rec["dp"] * rec.get("tp", 1) * rec.get("pp", 1) * rec.get("cp", 1)
    flag = {k: f for k, _, f in LOG_NEEDS}
    for k, v in given.items():
        if k in rec and rec[k] != v:
            raise SpecError(f"{where}: {k}", v, f"{rec[k]} as the log states (or leave {flag.get(k, '--' + k)} out)")
        rec[k] = v
    missing += [f"{arg} ({f})" for k, arg, f in LOG_NEEDS if k not in rec]
    if missing:
        raise SpecError(
            f"{where}: missing",
            sum(a.split(" (")[0].count(",") + 1 for a in missing),  # how many; the list is what is allowed
            "stated in the log or given: " + ", ".join(missing),
        )
    rec["step_time_s"] = log.step_time_s
    run = run_from_record(rec, where, model=m)
    return replace(run, label=path.name, model_ref=ref)


#: the fields of a logged shape compared with the presets' to name it (:func:`_logged_model`)
SHAPE_FIELDS = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "activation",
    "experts",
    "moe_ffn_hidden",
)


def _logged_model(fields: dict) -> ModelSpec:
    """The model a log's shape arguments state, named as the preset of the same shape (``llama3-8b``) or, where
    none has it, by its shape (``32L-4096h-32a``): the run table's model column, never the log's file name."""
    from costmodel.spec.presets import load_model, preset_names

    shape = {k: fields[k] for k in SHAPE_FIELDS if k in fields}
    for name in preset_names("models"):
        try:
            preset = load_model(name)
        except (SpecError, ValueError):
            continue
        if all(getattr(preset, k, None) == v for k, v in shape.items()):
            return ModelSpec(name=name, **fields)
    return ModelSpec(name=f"{fields['layers']}L-{fields['hidden']}h-{fields['heads']}a", **fields)


def looks_like_log(path: Path) -> bool:
    return path.suffix.lower() not in (".csv", ".yaml", ".yml", ".json")


def read_runs(paths, *, model=None, given: dict | None = None) -> list[Run]:
    """Runs from every path: CSV/YAML tables, and logs (any other file; ``given``: see :func:`run_from_log`)."""
    runs = []
    for p in map(Path, paths):
        runs.extend([run_from_log(p, model=model, given=given)] if looks_like_log(p) else read_table(p, model=model))
    return runs


def cluster_for(runs: list[Run], cluster=None):
    """The cluster the runs ran on: ``cluster`` (name, file or spec) or the one their ``cluster`` column names."""
    if cluster is None:
        refs = sorted({r.cluster_ref for r in runs if r.cluster_ref})
        if len(refs) != 1:
            raise SpecError(
                "cluster", ",".join(refs) or None, "given (--cluster NAME|FILE), or one cluster named by every run"
            )
        cluster = refs[0]
    return resolve_cluster(cluster)
