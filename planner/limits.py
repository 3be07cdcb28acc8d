"""The one translation of pins and bounds into :class:`search.problem.Limits`, for every caller.

``planner recommend``'s flags (:func:`planner.flags.constraints_from_args`), the keywords of
:func:`planner.recommend` and those of :class:`planner.Planner` (``space``, ``recommend``) all say
what they pin or bound as one dict of constraints, spelled as the CLI flags with ``_``:

* a config variable (:data:`search.problem.VARIABLES`) with one value pins it (``tp=8``); a list, set
  or range of values (``pp=[1, 2, 4]``) allows those only, returned apart (``Planner.space`` filters
  by it; ``recommend`` refuses it); a pinned or listed ``chunks``/``bucket_mb`` is the candidate list too;
* ``<variable>_min`` / ``<variable>_max`` bound it (``tp_max=8`` as ``--tp-max 8``; the old spelling
  ``max_tp`` works with a DeprecationWarning);
* a field of ``Limits`` sets it (``mb_max=4`` as ``--mb-max 4``, ``headroom_bytes``, ``exclude``,
  ``chunk_options`` ...): a field name wins over a bound of the same spelling (``mb_max``, ``vp_max``);
* a stage split (``layers_per_stage``, or Megatron-Core's ``first_stage_layers``, ``last_stage_layers``,
  ``account_for_embedding``, ``account_for_loss`` with ``pp``) is pinned as ``Limits.layers_per_stage``
  (:func:`planner.problem.stage_split`).

Everything is merged over ``base`` (default ``Limits()``): its pins and bounds stay unless restated.

>>> lim, allowed = limits_of(32, {"tp": 8, "pp_max": 4, "mb_max": 2, "zero": [1, 2]})
>>> lim.fixed, lim.maximum, lim.mb_max, allowed
({'tp': 8}, {'pp': 4}, 2, {'zero': {1, 2}})
>>> limits_of(32, {"warp": 2})  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
...
SpecError: warp=2: must be a config variable (tp, pp, ...), <variable>_min/_max, or a search limit (...)
"""

from __future__ import annotations

import warnings
from dataclasses import fields, replace

from costmodel.spec.bounds import most_pp_for_vp
from costmodel.spec.errors import SpecError

from .problem import SPLIT_KEYS, stage_split

#: a value of these types lists the values a variable may take, rather than pinning one
LISTS = (list, tuple, set, frozenset, range)
#: pinned or listed values of these variables are their candidate lists too (``Limits`` field)
OPTION_LISTS = {"chunks": "chunk_options", "bucket_mb": "bucket_mb_options"}


def limits_of(layers: int | None, constraints: dict, base=None, *, stacklevel: int = 2) -> tuple:
    """``(Limits, allowed)``: ``base`` with ``constraints`` (see the module docstring) applied, and
    ``{variable: set of values}`` for each variable given a list of values. ``layers`` (the model's)
    turns Megatron-Core's split keywords into layer counts (needed only when they are given);
    ``stacklevel`` places a deprecation warning at the caller's caller."""
    from search.problem import VARIABLES, Limits

    base = base if base is not None else Limits()
    names = {f.name for f in fields(Limits)} - {"fixed", "minimum", "maximum"}
    rest = {k: v for k, v in constraints.items() if k not in SPLIT_KEYS and k != "layers_per_stage"}
    split = {k: constraints[k] for k in SPLIT_KEYS if constraints.get(k) not in (None, False)}
    kw, fixed, minimum, maximum, allowed = {}, {}, {}, {}, {}
    lps = constraints.get("layers_per_stage")
    if lps is not None or split:  # pp and vp as pinned here, else in base
        kw["layers_per_stage"] = stage_split(
            layers,
            rest.get("pp", base.fixed.get("pp")),
            rest.get("vp", base.fixed.get("vp")),
            layers_per_stage=lps,
            **split,
        )
    for k, v in rest.items():
        if k in names:
            kw[k] = {**base.exclude, **v} if k == "exclude" else v
        elif k in VARIABLES:
            if isinstance(v, LISTS):
                allowed[k] = set(v)
            else:
                fixed[k] = v
        elif k[-4:] in ("_min", "_max") and k[:-4] in VARIABLES:  # tp_max, as --tp-max
            (minimum if k.endswith("_min") else maximum)[k[:-4]] = v
        elif k[:4] in ("min_", "max_") and k[4:] in VARIABLES:  # the old spelling
            new = f"{k[4:]}_{k[:3]}"
            warnings.warn(
                f"{k} is deprecated; write {new} (as --{new.replace('_', '-')})",
                DeprecationWarning,
                stacklevel=stacklevel + 1,
            )
            (minimum if k.startswith("min_") else maximum)[k[4:]] = v
        else:
            raise SpecError(
                k,
                v,
                f"a config variable ({', '.join(VARIABLES)}), <variable>_min/_max, "
                f"or a search limit ({', '.join(sorted(names))})",
            )
    if fixed.get("recompute") == "full" and not any(k.startswith("recompute_layers") for k in rest):
        # ``recompute="full"`` alone is every layer, as Megatron-LM's ``--recompute-granularity full``
        # (TransformerConfig.recompute_method @d98e8a64: "If None, and recompute is enabled, all layers
        # will do recomputation"); 0 is search.problem's "all layers". Unpinned, the search may recompute fewer.
        fixed.setdefault("recompute_layers", base.fixed.get("recompute_layers", 0))
    for k, opt in OPTION_LISTS.items():  # a pinned or listed value must be a candidate too
        if k in fixed:
            kw[opt] = (fixed[k],)
        elif k in allowed:
            kw[opt] = tuple(sorted(allowed[k]))
    if fixed:
        kw["fixed"] = {**base.fixed, **fixed}
    if minimum:
        kw["minimum"] = {**base.minimum, **minimum}
    if maximum:
        kw["maximum"] = {**base.maximum, **maximum}
    lim = replace(base, **kw) if kw else base
    vp = lim.fixed.get("vp")
    if layers and isinstance(vp, int) and vp > 1 and "pp" not in lim.fixed:
        # a pinned interleave bounds the pipeline (and an impossible one is refused here, at once)
        most = most_pp_for_vp(layers, vp)
        if lim.maximum.get("pp", most + 1) > most:
            lim = replace(lim, maximum={**lim.maximum, "pp": most})
    return lim, allowed
