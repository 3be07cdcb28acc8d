"""Turn loose user input (preset names, file paths, plain numbers) into validated specs.

One place for the rules the Python API and every CLI subcommand share: a model or cluster
may be a spec object, a preset name or a JSON/YAML file; ``dp`` defaults to
``gpus / (tp * pp * cp)``. Every bad value raises :class:`~costmodel.spec.errors.SpecError`.

>>> make_config(64, tp=8, pp=4).dp
2
>>> make_config(64, tp=8, pp=3)
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: tp*pp*cp=24: must be a divisor of gpus=64 (tp=8 pp=3 cp=1), or give dp
"""

from __future__ import annotations

import os
from dataclasses import replace

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import ClusterSpec, ModelSpec, _positive_int
from costmodel.spec.workload import Workload


def resolve_model(model) -> ModelSpec:
    """A :class:`ModelSpec` from a spec, a preset name, or a JSON/YAML/HF ``config.json`` path."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load_model(os.fspath(model))
    raise SpecError("model", model, "a ModelSpec, a preset name or a file path")


def resolve_cluster(cluster, gpus: int | None = None) -> ClusterSpec:
    """A :class:`ClusterSpec` (from a spec, preset name or file), sized to ``gpus`` when given."""
    if isinstance(cluster, ClusterSpec):
        spec = cluster
    elif isinstance(cluster, (str, os.PathLike)):
        spec = load_cluster(os.fspath(cluster))
    else:
        raise SpecError("cluster", cluster, "a ClusterSpec, a preset name or a file path")
    _known_calibrated(spec)
    if gpus is not None:
        _positive_int("gpus", gpus)
        spec = spec.with_gpus(gpus)
    return spec


def _known_calibrated(spec: ClusterSpec) -> None:
    """A fitted constant's name (a cluster file's ``calibrated.fitted`` or ``calibrated_constants``) must be one a
    calibration fits: an unknown one (a typo) was silently ignored. Checked here, not in ``costmodel.spec``, whose
    floor may not import the calibration's constants (``costmodel.trust``)."""
    from costmodel.spec.presets import known_keys_hint
    from costmodel.trust.calibration_constants import CONSTANTS

    for name in spec.calibrated_constants:
        if name not in CONSTANTS:
            hint = known_keys_hint(name, list(CONSTANTS))
            raise SpecError("cluster.calibrated_constants", name, f"a calibrated constant ({hint})")


def make_workload(global_batch, seq, dtype: str = "bf16") -> Workload:
    """A training :class:`Workload`; ``seq`` is tokens per sequence."""
    if global_batch is None:
        raise SpecError("global_batch", None, "a positive integer (sequences per step)")
    if seq is None:
        raise SpecError("seq", None, "a positive integer (tokens per sequence)")
    return Workload(global_batch=global_batch, seq_len=seq, dtype=dtype)


def make_config(gpus: int | None = None, base: ParallelConfig | None = None, **fields) -> ParallelConfig:
    """A :class:`ParallelConfig` from ``fields`` (``None`` values are ignored) over ``base``.

    Keys are those of :data:`costmodel.spec.plan.CONFIG_KEYS` plus ``recompute_layers`` and
    ``flash_attention``. Without ``base`` and without ``dp``, ``dp = gpus / (tp * pp * cp)``.
    """
    given = {k: v for k, v in fields.items() if v is not None}
    if base is not None:
        return ParallelConfig.from_dict({**base.to_dict(), **given})
    config = ParallelConfig.from_dict(given)  # validates types and ranges first
    if "dp" in given or gpus is None:
        return config
    _positive_int("gpus", gpus)
    inner = config.tp * config.pp * config.cp
    if gpus % inner:
        raise SpecError(
            "tp*pp*cp", inner, f"a divisor of gpus={gpus} (tp={config.tp} pp={config.pp} cp={config.cp}), or give dp"
        )
    return replace(config, dp=gpus // inner)


#: Megatron-Core's ways to state an uneven split, as keyword names (CLI: ``--first-stage-layers``,
#: ``--last-stage-layers``, ``--account-for-embedding``, ``--account-for-loss``)
SPLIT_KEYS = ("first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss")


def stage_split(
    layers: int,
    pp: int | None,
    vp: int | None,
    *,
    layers_per_stage=None,
    first_stage_layers=None,
    last_stage_layers=None,
    account_for_embedding=False,
    account_for_loss=False,
):
    """Layers per pipeline stage from one way of stating them (``None``: even, nothing stated).

    ``layers_per_stage`` explicitly, or Megatron-Core's ``--decoder-first/last-pipeline-num-layers``
    (``first_stage_layers``, ``last_stage_layers``) or ``--account-for-embedding/loss-in-pipeline-split``
    (:func:`costmodel.spec.stages.megatron_split`). Two ways at once, or a Megatron way without
    ``pp``, raise :class:`SpecError`.

    >>> stage_split(126, 16, 1, account_for_embedding=True, account_for_loss=True)[:3]
    (7, 8, 8)
    >>> stage_split(126, 16, 1, layers_per_stage=(7,) + (8,) * 14 + (7,), first_stage_layers=7)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: first_stage_layers=7: must be unset with layers_per_stage (give the split one way)
    """
    from costmodel.spec.stages import megatron_split

    given = {
        k: v
        for k, v in (
            ("first_stage_layers", first_stage_layers),
            ("last_stage_layers", last_stage_layers),
            ("account_for_embedding", account_for_embedding),
            ("account_for_loss", account_for_loss),
        )
        if v not in (None, False)
    }
    if layers_per_stage is not None:
        if given:
            k = next(iter(given))
            raise SpecError(k, given[k], "unset with layers_per_stage (give the split one way)")
        return tuple(layers_per_stage)
    if not given:
        return None
    if pp is None:
        k = next(iter(given))
        raise SpecError("pp", None, f"given with {k} (a split has one layer count per pipeline stage)")
    return megatron_split(
        layers,
        pp,
        vp or 1,
        first=first_stage_layers,
        last=last_stage_layers,
        embedding=bool(account_for_embedding),
        loss=bool(account_for_loss),
    )
