"""Compare a recommendation with the plan a user runs today (``recommend --baseline``).

The baseline is written either as ``key=value`` pairs (``"tp=8,pp=8,mb=1,sp=on,zero=1"``; the
keys of :data:`costmodel.spec.plan.CONFIG_KEYS` plus ``recompute_layers`` and ``flash_attention``)
or as a Megatron-LM argument line (``--tensor-model-parallel-size 8
--pipeline-model-parallel-size 8 --sequence-parallel ...``; :mod:`planner.megatron_args`).
:func:`compare` says whether the recommended plan's predicted gain is larger than the model's
uncertainty band (:mod:`costmodel.trust.uncertainty`).

>>> parse_baseline("tp=8, pp=8, mb=1, sp=on, recompute=selective")
{'tp': 8, 'pp': 8, 'mb': 1, 'sp': True, 'recompute': 'selective'}
>>> parse_baseline("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --micro-batch-size 1")
{'tp': 8, 'pp': 8, 'mb': 1, 'recompute': 'none', 'chunks': 1, 'framework': 'megatron'}
>>> parse_baseline("tp=8,pp=eight")
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: baseline.pp='eight': must be an integer
"""

from __future__ import annotations

import ast
import inspect
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

from costmodel.spec.plan import CONFIG_KEYS, ParallelConfig
from costmodel.spec.plan_checks import GRAD_DTYPES, RECOMPUTE
from costmodel.spec.errors import SpecError, clip

from . import megatron_args as mg
from .megatron_values import as_bool, as_int
from .problem import make_config

KEYS = tuple(CONFIG_KEYS) + ("recompute_layers", "flash_attention", "grad_dtype")
ALIASES = {
    "vpp": "vp",
    "mbs": "mb",
    "micro_batch": "mb",
    "zero_stage": "zero",
    "sequence_parallel": "sp",
    "bucket": "bucket_mb",
}


def parse_baseline(text: str, layers: int | None = None) -> dict:
    """Config fields of a baseline plan (only those it states).

    ``layers`` (the model's depth) is needed only for Megatron's
    ``--num-layers-per-virtual-pipeline-stage``.
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecError("baseline", text, "a plan such as 'tp=8,pp=8,mb=1' or Megatron-LM arguments")
    if "--" in text:
        args = mg.parse_command_line(text)
        try:
            fields = mg.config_fields(args, layers)
            _warn_unread(args, fields, layers)
            return {**fields, "framework": "megatron"}  # a Megatron-LM line runs Megatron
        except SpecError as e:
            raise SpecError(f"baseline.{e.field}", e.value, e.allowed) from None
    out = {}
    for item in filter(None, (t.strip() for t in re.split(r"[,\s]+", text))):
        key, eq, value = item.partition("=")
        key = ALIASES.get(key.strip().lower(), key.strip().lower())
        if not eq or not value:
            raise SpecError("baseline", item, "key=value pairs separated by commas (e.g. tp=8,pp=8,mb=1)")
        if key not in KEYS:
            raise SpecError("baseline", key, f"one of {', '.join(KEYS)}")
        if key in out:  # tp=8,tp=4 took the last
            raise SpecError(f"baseline.{key}", value.strip(), f"given once (it is given twice in {text.strip()!r})")
        out[key] = _value(key, value.strip())
    if not out:  # ',,,' was an empty plan
        raise SpecError("baseline", text, "a plan such as 'tp=8,pp=8,mb=1' or Megatron-LM arguments")
    return out


@lru_cache(maxsize=1)
def emitted_flags() -> frozenset[str]:
    """Every Megatron-LM flag ``--emit megatron`` can write, named as :func:`planner.megatron_args.parse_command_line`
    names them: the ``--flag`` string constants of the emitter (:mod:`planner.emit.megatron`, :mod:`planner.emit_arch`)
    and its dropout flags, read from the emitter itself so that a flag it learns is known here too."""
    from . import emit_arch
    from .emit import megatron as emit_megatron

    names = set(emit_arch.MEGATRON_DROPOUT)
    for mod in (emit_megatron, emit_arch):
        for node in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"--[a-z0-9][a-z0-9-]*", node.value):
                    names.add(node.value[2:].replace("-", "_"))
    return frozenset(names)


def _warn_unread(args: dict, fields: dict, layers: int | None) -> None:
    """Warn (one line) about the flags of a Megatron-LM line that change nothing in the plan it
    states: a flag whose removal leaves :func:`planner.megatron_args.config_fields` the same is not
    read (a misspelled flag, or a model, data or optimizer flag the problem flags state instead).
    The flags the planner itself emits (:func:`emitted_flags`) are never named: its own line pasted back
    (``--overlap-param-gather``, the architecture flags, ...) is not an error."""
    unread = []
    known = emitted_flags()
    for name in args:
        if name in known:
            continue
        rest = {k: v for k, v in args.items() if k != name}
        try:
            same = mg.config_fields(rest, layers) == fields
        except SpecError:  # the line needs it (e.g. num_layers for a per-chunk layer count)
            same = False
        if same:
            unread.append("--" + name.replace("_", "-"))
    if unread:
        shown = ", ".join(unread[:12]) + (f" and {len(unread) - 12} more" if len(unread) > 12 else "")
        warnings.warn(
            f"baseline: {clip(shown, 400)} change{'s' if len(unread) == 1 else ''} nothing in the plan the planner "
            "evaluates (misspelled, or model, data and optimizer flags that --model, --global-batch and --seq state)"
        )


def _value(key: str, value: str):
    field = f"baseline.{key}"
    if key in ("sp", "flash_attention"):
        try:
            return as_bool(field, value)
        except SpecError:
            raise SpecError(field, value, "on or off") from None
    if key == "recompute":
        if value.lower() not in RECOMPUTE:
            raise SpecError(field, value, f"one of {', '.join(RECOMPUTE)}")
        return value.lower()
    if key == "grad_dtype":
        if value.lower() not in GRAD_DTYPES:
            raise SpecError(field, value, f"one of {', '.join(GRAD_DTYPES)}")
        return value.lower()
    if key == "bucket_mb":
        try:
            return float(value)
        except ValueError:
            raise SpecError(field, value, "a size in MB") from None
    return as_int(field, value)


def baseline_config(text: str, gpus: int | None, layers: int | None = None) -> ParallelConfig:
    """The :class:`ParallelConfig` of a baseline (``dp`` from ``gpus`` when unstated)."""
    return make_config(gpus, **parse_baseline(text, layers))


def _half_width(band, step_s: float) -> float:
    if isinstance(band, (int, float)) and not isinstance(band, bool):
        return float(band)
    lo, hi = band
    return (hi - lo) / 2 / step_s


def compare(recommended_estimate, baseline_estimate, band) -> str:
    """One line: is the recommended plan's gain over the baseline larger than the model's band?

    ``band`` is the recommended plan's step-time band ``(lo_s, hi_s)`` or its relative
    half-width (0.06 for +-6%). Gains are in throughput: ``baseline step / recommended step - 1``.

    >>> from types import SimpleNamespace as E
    >>> compare(E(step_time_s=10.0, fits=True), E(step_time_s=11.2, fits=True), (9.4, 10.6))
    "12% faster, outside the model's ±6% band"
    >>> compare(E(step_time_s=10.0, fits=True), E(step_time_s=10.3, fits=True), 0.06)
    "3% faster, within the model's ±6% band: keep your plan"
    """
    rec, base = recommended_estimate.step_time_s, baseline_estimate.step_time_s
    half = _half_width(band, rec)
    gain = base / rec - 1
    note = "" if getattr(baseline_estimate, "fits", True) else " (your plan does not fit in memory by the model)"
    if gain < 0:
        return f"your plan is {-gain:.0%} faster than the recommendation: keep your plan{note}"
    if gain > half:
        return f"{gain:.0%} faster, outside the model's ±{half:.0%} band{note}"
    return f"{gain:.0%} faster, within the model's ±{half:.0%} band: keep your plan{note}"


@dataclass(frozen=True)
class Comparison:
    """A baseline evaluated next to a recommended plan."""

    baseline: object  # Estimate of the baseline plan
    recommended: object  # Estimate of the recommended plan
    band_s: tuple  # the recommended plan's step-time band
    gain: float  # baseline step / recommended step - 1
    outside_band: bool
    message: str
    band_notes: tuple = ()  # what widened the band, in words (costmodel.trust.uncertainty.assess)
    defaults: dict = field(default_factory=dict)  # tuning knobs the baseline left unstated, at their defaults
    baseline_band_s: tuple | None = None  # the baseline plan's own 80% band
    baseline_band_notes: tuple = ()  # and what widened it

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline.to_dict(),
            "step_time_band_s": list(self.band_s),
            "gain": self.gain,
            "outside_band": self.outside_band,
            "message": self.message,
            "band_notes": list(self.band_notes),
            "baseline_defaults": dict(self.defaults),
            "baseline_step_time_band_s": list(self.baseline_band_s) if self.baseline_band_s else None,
            "baseline_band_notes": list(self.baseline_band_notes),
        }


#: the tuning knobs (planner.tuning.TUNING's CLI names) and the config fields a baseline states them by
TUNING_FIELDS = {
    "mb": "mb",
    "vp": "vp",
    "sp": "sp",
    "zero": "zero",
    "recompute": "recompute",
    "bucket_mb": "bucket_bytes",
    "chunks": "chunks",
}


def unstated_defaults(config: ParallelConfig, stated: dict) -> dict:
    """``{knob: value}`` of the tuning knobs a baseline's ``stated`` fields leave out, at the values
    ``config`` gave them (its defaults): said with the comparison, so a default is not read as a choice."""
    from .tuning import chosen_knobs

    return chosen_knobs(config, [k for k, f in TUNING_FIELDS.items() if f not in stated and k not in stated])


def compare_with_baseline(
    model, cluster, workload, recommended_estimate, baseline, *, engine: str = "graph", band=None
) -> Comparison:
    """Evaluate ``baseline`` (text, dict of fields or :class:`ParallelConfig`) and compare.

    A baseline given as text or fields runs the recommended plan's framework and gradient dtype
    unless it states its own (a Megatron-LM line runs Megatron and states its gradient dtype
    when it has a dtype flag: a gradient dtype other than the recommendation's is said in the
    message). ``band`` defaults to the recommended plan's 80% band: the one :func:`planner.recommend`
    attached to it, else :func:`costmodel.trust.uncertainty.assess`'s.
    """
    from costmodel.api import evaluate
    from costmodel.trust.uncertainty import assess

    rec = recommended_estimate.config
    gpus = cluster.num_gpus or rec.gpus
    software = {"framework": rec.framework, "grad_dtype": rec.grad_dtype}
    stated = None  # a ParallelConfig states every field
    if isinstance(baseline, str):
        stated = parse_baseline(baseline, model.layers)
        config = make_config(gpus, **{**software, **stated})
    elif isinstance(baseline, dict):
        stated = dict(baseline)
        config = make_config(gpus, **{**software, **baseline})
    elif isinstance(baseline, ParallelConfig):
        config = baseline
    else:
        raise SpecError("baseline", baseline, "a plan string, a dict of config fields or a ParallelConfig")
    cl = cluster if cluster.num_gpus else cluster.with_gpus(gpus)
    est = evaluate(model, cl, workload, config, engine=engine)
    b_lo, b_hi, b_notes = assess(model, cl, workload, est)  # the baseline's own band, beside the comparison
    notes = ()
    if band is None and recommended_estimate.step_time_band_s:  # attached by planner.recommend
        band, notes = recommended_estimate.step_time_band_s, tuple(recommended_estimate.band_notes)
    elif band is None:
        lo, hi, notes = assess(model, cl, workload, recommended_estimate)
        band = (lo, hi)
    lo_hi = (
        tuple(band)
        if not isinstance(band, (int, float))
        else (recommended_estimate.step_time_s * (1 - band), recommended_estimate.step_time_s * (1 + band))
    )
    gain = est.step_time_s / recommended_estimate.step_time_s - 1
    half = _half_width(lo_hi, recommended_estimate.step_time_s)
    message = compare(recommended_estimate, est, lo_hi)
    if config.grad_dtype != rec.grad_dtype:
        message += (
            f" (your plan reduces {config.grad_dtype} gradients, the recommendation {rec.grad_dtype}: "
            f"--grad-dtype {config.grad_dtype} plans with yours)"
        )
    return Comparison(
        est,
        recommended_estimate,
        lo_hi,
        gain,
        gain > half,
        message,
        tuple(notes),
        defaults=unstated_defaults(config, stated) if stated is not None else {},
        baseline_band_s=(b_lo, b_hi),
        baseline_band_notes=tuple(b_notes),
    )
