"""The sanity bounds and value checks every spec runs on its fields.

Sizes far beyond any real model or cluster (:data:`MAX_SIZE`, :data:`MAX_HBM_BYTES`) are refused at once, and
the positive-number checks raise :class:`costmodel.spec.errors.SpecError` naming the field, the value and
what is allowed.
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB

#: HBM per device above which a spec is refused: a sanity bound, not a device limit (16 TiB is ~90x
#: B200's 180 GiB), that catches unit slips (GB given as bytes, ``hbm_gib: 1e30``) and infinities
MAX_HBM_BYTES = 16 * 1024 * GiB


#: sanity bounds on sizes, far beyond any real model or cluster: a typo (an extra three zeros)
#: is refused at once instead of running out of memory or time
MAX_SIZE = {
    "layers": 10_000,
    "hidden": 1_000_000,
    "heads": 100_000,
    "kv_heads": 100_000,
    "head_dim": 100_000,
    "ffn_hidden": 10_000_000,
    "moe_ffn_hidden": 10_000_000,
    "vocab": 100_000_000,
    "experts": 100_000,
    "mtp_layers": 10_000,
    "num_gpus": 1_048_576,
    "gpus_per_node": 1_024,
    "global_batch": 1_048_576,
    "seq_len": 100_000_000,
    "input_len": 100_000_000,
    "output_len": 100_000_000,
}


def _bounded(spec) -> None:
    """Raise SpecError for the first field of ``spec`` above its :data:`MAX_SIZE`."""
    for name, most in MAX_SIZE.items():
        value = getattr(spec, name, None)
        if isinstance(value, int) and value > most:
            raise SpecError(name, value, f"at most {most:,} (a sanity bound)")


def _positive(name: str, value, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < 0 or (value == 0 and not allow_zero) or value != value:
        raise SpecError(name, value, "a non-negative number" if allow_zero else "a positive number")


def _positive_int(name: str, value, allow_zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (value == 0 and not allow_zero):
        raise SpecError(name, value, "a non-negative integer" if allow_zero else "a positive integer")
