"""The CPU offloads a Megatron-LM line states (optimizer, activation and fine-grained activation offloading) as plan
fields: the part of :mod:`planner.megatron_args` that reads them."""

from __future__ import annotations

from costmodel.spec.errors import SpecError

from .megatron_values import _none, as_bool, as_fraction, as_int


def offload_fields(a: dict) -> dict:
    """Optimizer CPU offload (``costmodel.physics.mechanics.offload``): ``--optimizer-cpu-offload`` with
    ``--optimizer-offload-fraction`` (default 1.0 in Megatron-LM d98e8a64 arguments.py) and
    ``--overlap-cpu-optimizer-d2h-h2d``; without ``--optimizer-cpu-offload`` the other two do nothing
    (``optimizer/__init__.py`` builds the HybridDeviceOptimizer only with it)."""
    if "optimizer_cpu_offload" not in a or not as_bool("optimizer_cpu_offload", a["optimizer_cpu_offload"]):
        return {}
    if "use_precision_aware_optimizer" not in a or not as_bool(
        "use_precision_aware_optimizer", a["use_precision_aware_optimizer"]
    ):
        # arguments.py validate_args asserts it
        raise SpecError(
            "use_precision_aware_optimizer",
            a.get("use_precision_aware_optimizer", "unset"),
            "set with --optimizer-cpu-offload (Megatron-LM asserts it)",
        )
    frac = a.get("optimizer_offload_fraction")
    out = {"optimizer_offload_fraction": 1.0 if _none(frac) else as_fraction("optimizer_offload_fraction", frac)}
    if "overlap_cpu_optimizer_d2h_h2d" in a and out["optimizer_offload_fraction"] > 0:
        out["overlap_cpu_optimizer_d2h_h2d"] = as_bool(
            "overlap_cpu_optimizer_d2h_h2d", a["overlap_cpu_optimizer_d2h_h2d"]
        )
    return out


def act_offload_fields(a: dict) -> dict:
    """Activation CPU offload (``costmodel.physics.mechanics.act_offload``): ``--cpu-offloading-num-layers N`` (Megatron-LM d98e8a64
    ``validate_args`` sets ``cpu_offloading`` for N > 0). Weight offload (``--cpu-offloading-weights``) and the
    double buffer (``--cpu-offloading-double-buffering``) are not modelled, and activations off
    (``--cpu-offloading-activations`` false) offloads nothing: all three refused."""
    n = a.get("cpu_offloading_num_layers")
    n = 0 if _none(n) else as_int("cpu_offloading_num_layers", n)
    on = n > 0 or ("cpu_offloading" in a and as_bool("cpu_offloading", a["cpu_offloading"]))
    if not on:
        return {}
    if "cpu_offloading_weights" in a and as_bool("cpu_offloading_weights", a["cpu_offloading_weights"]):
        raise SpecError("cpu_offloading_weights", a["cpu_offloading_weights"], "false (weight offload is not modelled)")
    if "cpu_offloading_double_buffering" in a and as_bool(
        "cpu_offloading_double_buffering", a["cpu_offloading_double_buffering"]
    ):
        raise SpecError(
            "cpu_offloading_double_buffering",
            a["cpu_offloading_double_buffering"],
            "false (the second reload buffer is not modelled)",
        )
    if "cpu_offloading_activations" in a and not as_bool("cpu_offloading_activations", a["cpu_offloading_activations"]):
        raise SpecError(
            "cpu_offloading_activations", a["cpu_offloading_activations"], "true (only activation offload is modelled)"
        )
    return {"activation_offload_layers": n}


#: Megatron-Core's fine-grained offloading knobs at the defaults this model charges (TransformerConfig at d98e8a64)
FG_OFFLOAD_DEFAULTS = {
    "min_offloaded_tensor_size": (1024 * 1024, "1048576 (the default; another size is not modelled)"),
    "activation_offload_fraction": (1.0, "1.0 (the default; offloading a fraction of the groups is not modelled)"),
    "delta_offload_bytes_across_pp_ranks": (0, "0 (the default; a per-rank offload delta is not modelled)"),
}


def fg_offload_fields(a: dict) -> dict:
    """Fine-grained activation offloading (``costmodel.physics.mechanics.fg_offload``): ``--fine-grained-activation-
    offloading`` with ``--offload-modules`` (without the flag Megatron-LM ignores the modules; with it and none,
    ``TransformerConfig`` asserts). The tuning knobs off their defaults are refused (:data:`FG_OFFLOAD_DEFAULTS`);
    ``--delay-offload-until-cuda-graph`` only moves when the host issues the copies and is read as such."""
    if "fine_grained_activation_offloading" not in a or not as_bool(
        "fine_grained_activation_offloading", a["fine_grained_activation_offloading"]
    ):
        return {}
    mods = a.get("offload_modules")
    names = (
        () if _none(mods) else tuple(m for m in str(mods).strip("[]() ").replace(",", " ").replace("'", " ").split())
    )
    if not names:
        raise SpecError("offload_modules", mods, "a list of modules with --fine-grained-activation-offloading")
    for k, (default, allowed) in FG_OFFLOAD_DEFAULTS.items():
        if k in a and not _none(a[k]):
            v = as_fraction(k, a[k]) if isinstance(default, float) else as_int(k, a[k])
            if v != default:
                raise SpecError(k, a[k], allowed)
    return {"offload_modules": names}  # the module names are checked by ParallelConfig (plan_checks.check_fg_offload)


# --------------------------------------------------------------------------- translations
