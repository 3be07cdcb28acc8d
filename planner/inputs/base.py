"""A framework configuration read into planner fields (:class:`FrameworkInput`), and reading its text.

The parsers are :mod:`planner.inputs.megatron`, :mod:`planner.inputs.deepspeed` and
:mod:`planner.inputs.torchtitan`; :mod:`planner.inputs` dispatches to them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from costmodel.spec.errors import SpecError


LABELS = {
    "megatron_args": "the Megatron line",
    "deepspeed_config": "the DeepSpeed config",
    "torchtitan_config": "the torchtitan config",
}


@dataclass(frozen=True, kw_only=True)
class FrameworkInput:
    """A framework configuration read into planner fields.

    source : the flag it came from (``megatron_args``, ``deepspeed_config``, ``torchtitan_config``).
    stated : planner knobs the configuration states or implies (CLI dest names: ``tp mb zero bucket_mb ...``,
        ``framework``, ``grad_dtype``, ``global_batch``, ``seq``, ``dtype``, ``gpus``).
    model : :class:`~costmodel.spec.specs.ModelSpec` keywords where the configuration states the whole shape.
    stated_model : shape arguments as stated (``num_layers`` ...), checked against ``--model``.
    deferred : values resolved once the DP size is known (DeepSpeed's batch triple; Megatron's bucket
        that grows with DP; torchtitan's checkpoint frequency).
    """

    source: str
    stated: dict
    model: dict | None = None
    stated_model: dict = field(default_factory=dict)
    deferred: dict = field(default_factory=dict)
    mtp_layers: int | None = None  # Megatron's --mtp-num-layers (0 unset: no MTP); None: not stated by the source
    #: ``hidden_dropout``/``attention_dropout`` the configuration runs (Megatron's 0.1 each when unstated); None: the model's
    dropout: dict | None = None

    @property
    def label(self) -> str:
        return LABELS[self.source]


def read_text(field_name: str, value: str, *, inline_ok: bool) -> str:
    """The configuration text: ``@path`` or an existing path is read; otherwise (Megatron only) the text itself."""
    path = value[1:] if value.startswith("@") else value
    if value.startswith("@") or os.path.isfile(path) or not inline_ok:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as e:
            raise SpecError(field_name, value, f"a readable file ({e.strerror})") from None
    return value
