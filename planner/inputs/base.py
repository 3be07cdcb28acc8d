"""A framework configuration read into planner fields (:class:`FrameworkInput`), and reading its text.

The parsers are :mod:`planner.inputs.megatron`, :mod:`planner.inputs.deepspeed` and
:mod:`planner.inputs.torchtitan`; :mod:`planner.inputs` dispatches to them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from costmodel.spec.bounds import MAX_SPEC_FILE_BYTES, read_text_file


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
    #: token dropping the configuration runs (``moe_capacity_factor``, ``moe_pad_to_capacity``; Megatron: dropless when
    #: unstated); None: the model's
    moe_drop: dict | None = None

    @property
    def label(self) -> str:
        return LABELS[self.source]


def read_text(field_name: str, value: str, *, inline_ok: bool) -> str:
    """The configuration text: ``@path`` or an existing path is read; otherwise (Megatron only) the text itself."""
    path = value[1:] if value.startswith("@") else value
    try:
        exists = os.path.exists(path)  # a device or FIFO too: refused below, never read
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        exists = False
    if value.startswith("@") or exists or not inline_ok:
        # a regular text file of at most MAX_SPEC_FILE_BYTES (a config is a few kB), refused before it is read
        return read_text_file(path, field_name, MAX_SPEC_FILE_BYTES, what="text configuration")
    return value
