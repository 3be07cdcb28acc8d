"""Pins: the values a user fixes in ``recommend`` are honoured, or refused at once naming the rule.

Every pinned value (:attr:`search.problem.Limits.fixed`) joins the candidate lists of
:mod:`search.candidates` even where the search's own sizing would leave it out (``vp`` above
``--vp-max``, ``mb`` above ``--mb-max``, ``tp`` across nodes, a ``cp`` rank holding few tokens,
any ``recompute_layers``). A pin is refused only by a rule every plan holding it breaks, and
:func:`check_pins` names that rule before any table is built, in the words of
:func:`costmodel.physics.validity.validate_config` (what ``evaluate`` says) wherever it has one.

>>> from costmodel.spec.presets import load_model, load_cluster
>>> from costmodel.spec.workload import Workload
>>> from search.problem import Limits
>>> def pinned(**fixed):
...     return Problem(model=load_model("llama3-8b"), cluster=load_cluster("h100-sxm").with_gpus(64),
...                    workload=Workload(global_batch=512, seq_len=4096), limits=Limits(fixed=fixed))
>>> check_pins(pinned(tp=3))
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: tp=3: must be a divisor of heads=32
>>> check_pins(pinned(ep=2))
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: ep=2: must be 1 for a dense model
>>> check_pins(pinned(tp=16))  # a multiple of kv_heads=8: honoured (across nodes, because pinned)
"""

from __future__ import annotations

import itertools
import math

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError

from .candidates import divisors, most_virtual_stages
from .problem import Problem

DEGREES = ("tp", "pp", "dp", "cp")


def _validate(p: Problem, fields: tuple, **values) -> None:
    """``validate_config`` of a plan holding ``values`` (everything else 1 / off), GPU count unchecked;
    only an error about one of ``fields`` is raised (the neutral values may break other rules)."""
    try:
        c = ParallelConfig(**values)
        validate_config(p.model, p.cluster.with_gpus(0), p.workload, c)
    except SpecError as e:
        if e.field in fields:
            raise


def _within_limits(p: Problem) -> None:
    """A pin the user's own bounds or exclusions forbid (``--zero 3 --no-zero3``, ``--tp 16 --tp-max 8``)."""
    lim = p.limits
    for var, v in lim.fixed.items():
        if v in lim.exclude.get(var, ()):
            raise SpecError(var, v, f"not excluded too (excluded: {', '.join(map(str, lim.exclude[var]))})")
        if var in lim.maximum and v > lim.maximum[var]:
            raise SpecError(var, v, f"at most the {var} maximum {lim.maximum[var]} given with it")
        if var in lim.minimum and v < lim.minimum[var]:
            raise SpecError(var, v, f"at least the {var} minimum {lim.minimum[var]} given with it")


def _recompute_layers(p: Problem) -> None:
    f, m = p.limits.fixed, p.model
    k = f.get("recompute_layers")
    if k is None:
        return
    if f.get("recompute") != "full":  # as evaluate: ParallelConfig refuses it
        ParallelConfig(recompute=f.get("recompute", "none"), recompute_layers=k)
        raise SpecError("recompute_layers", k, "unset unless recompute='full' (give --recompute full)")
    if k and m.dense_layers:
        raise SpecError(
            "recompute_layers",
            k,
            f"0 (all layers) for {m.name}: with {m.dense_layers} leading dense "
            "layers on the first stage the search recomputes every layer of a stage or none",
        )
    pp, vp = f.get("pp"), f.get("vp", 1)
    lps = p.limits.layers_per_stage
    most = max(lps) if lps else m.layers if not pp or pp == 1 else m.layers - (pp - 1) * vp
    if k > most:
        raise SpecError(
            "recompute_layers",
            k,
            f"at most layers per stage = {most}"
            + (f" (the largest stage with pp={pp}, vp={vp})" if pp and pp > 1 and not lps else ""),
        )


def _single(p: Problem) -> None:
    """Rules each pinned value breaks on its own (or with the other pins), evaluate's words first."""
    f, m, w = p.limits.fixed, p.model, p.workload
    if "tp" in f:
        _validate(p, ("tp",), tp=f["tp"])
    if "cp" in f:
        _validate(p, ("cp",), cp=f["cp"])
    if "ep" in f:
        _validate(p, ("ep",), ep=f["ep"], tp=f.get("tp", 1), cp=f.get("cp", 1), dp=f.get("dp", f["ep"]))
    if "pp" in f and f["pp"] > m.layers:
        raise SpecError("pp", f["pp"], f"at most layers={m.layers} (every stage holds a layer)")
    if "vp" in f and f["vp"] > 1:
        pp = f.get("pp")
        if pp == 1:
            _validate(p, ("vp",), vp=f["vp"], pp=1, layers_per_stage=(m.layers,))
        if p.limits.layers_per_stage is None:
            if pp and pp * f["vp"] > most_virtual_stages(p):
                extra = (
                    " + 2 (the embedding and the loss may take a virtual stage each)"
                    if p.framework == "megatron"
                    else ""
                )
                raise SpecError("pp*vp", pp * f["vp"], f"at most layers={m.layers}{extra} (pp={pp}, vp={f['vp']})")
    if f.get("sp") and f.get("tp", 1) > 1:
        _validate(p, ("sp",), tp=f["tp"], cp=f.get("cp", 1), sp=True)
    _recompute_layers(p)
    degrees = {k: f[k] for k in DEGREES if k in f}
    prod, g = math.prod(degrees.values()), p.gpus
    if degrees and (g % prod or (len(degrees) == 4 and prod != g)):
        names = "*".join(degrees)
        what = "equal to" if len(degrees) == 4 else "a divisor of"
        raise SpecError(names, prod, f"{what} the GPU count {g} ({' '.join(f'{k}={v}' for k, v in degrees.items())})")
    dp, mb = f.get("dp"), f.get("mb")
    if dp or mb:
        if w.global_batch % ((dp or 1) * (mb or 1)):
            if dp:
                _validate(p, ("global_batch",), dp=dp, mb=mb or 1)
            raise SpecError("global_batch", w.global_batch, f"a multiple of dp*mb for some dp (mb={mb} is pinned)")


def _skeletons(p: Problem, limit: int = 4096):
    """Plans built from the pins and, for the rest, every degree that divides the GPUs (1 / off
    for the options), at most ``limit`` of them: the plans the pins could belong to."""
    f, g = p.limits.fixed, p.gpus
    axes = {k: [f[k]] if k in f else divisors(g) for k in ("tp", "cp", "pp")}
    for tp, cp, pp in itertools.islice(itertools.product(axes["tp"], axes["cp"], axes["pp"]), limit):
        if g % (tp * cp * pp):
            continue
        dp = f.get("dp", g // (tp * cp * pp))
        per_dp = p.workload.global_batch // dp if p.workload.global_batch % dp == 0 else 1
        mbs = [f["mb"]] if "mb" in f else divisors(per_dp)[:8]
        for mb in mbs:
            # unpinned sp: on for an MoE model (Megatron-Core, whose rules the skeleton is checked by, trains
            # MoE with TP only with it: costmodel.frameworks.rules.moe_needs_sp), a plan the search may choose
            sp = bool(f["sp"]) if "sp" in f else p.model.is_moe
            yield dict(tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, ep=f.get("ep", 1), vp=f.get("vp", 1), sp=sp and tp > 1)


def joint_reason(p: Problem) -> SpecError | None:
    """Why no plan holds all the pins together, as ``evaluate`` would say it of the nearest plan:
    the first rule broken, the unpinned degrees tried from 1 up (``None`` if some plan passes
    every rule, so the cause lies elsewhere, e.g. memory)."""
    errors: dict = {}
    lps = p.limits.layers_per_stage
    for values in _skeletons(p):
        split = lps if lps is not None and len(lps) == values["pp"] else None
        if split is None and values["pp"] > 1 and p.model.layers % (values["pp"] * values["vp"]):
            # uneven stages are searched: any split of whole vp-chunks stands for the plan
            split = _chunk_split(p.model.layers, values["pp"], values["vp"])
            if split is None:
                errors.setdefault(
                    ("pp*vp", "too deep"),
                    SpecError(
                        "pp*vp", values["pp"] * values["vp"], f"at most layers={p.model.layers} with vp dividing it"
                    ),
                )
                continue
        try:
            validate_config(p.model, p.cluster, p.workload, ParallelConfig(**values, layers_per_stage=split))
        except SpecError as e:
            errors.setdefault((e.field, e.allowed), e)
            continue
        return None
    return next(iter(errors.values()), None)


def _chunk_split(layers: int, pp: int, vp: int):
    """Some ``layers_per_stage`` of ``pp`` stages, each >= 1 (any count: a layout places them over
    the ``vp`` chunks), or None."""
    if layers < pp:
        return None
    base, extra = divmod(layers, pp)
    return tuple(base + (i < extra) for i in range(pp))


def check_pins(p: Problem) -> None:
    """Raise :class:`SpecError` for the first pin no plan of ``p`` can hold, naming the rule."""
    if not p.limits.fixed:
        return
    _within_limits(p)
    _single(p)


def refusal(p: Problem) -> SpecError | None:
    """For a problem whose pins leave no candidate plan: the rule that the pins break together."""
    if not p.limits.fixed:
        return None
    return joint_reason(p)
