"""Measured per-operation tables (issue 38): GEMM and intra-node NCCL collective times read from
AIConfigurator's measurements (``ai-dynamo/aiconfigurator`` @095f58a, Apache-2.0; see ``NOTICE`` and
``data/manifest.json``), context (prefill) attention forward and MoE layer times, interpolated per axis
by the scheme its cost follows (:mod:`.grid`), each number returned with its :class:`Evidence`
(measured, interpolated, extrapolated, assumed).

Owns: the committed data files under ``data/`` (written by ``python -m benchmarks.tables_convert``),
the loader (``store``), the interpolation (``grid``), GEMM and linear-layer look-ups
(``gemm``), context-attention look-ups (``attention``), MoE-layer look-ups (``moe``) and collective look-ups
(``collectives``), serving engines' own TP all-reduce look-ups (``allreduce``) and MLA decode-attention kernel
look-ups (``mla``). Pure numpy at run time.

The lowest sub-floor of ``costmodel.physics`` (below ``kernels``). May import: ``costmodel.spec`` only.
"""

from .allreduce import engine_allreduce_lookup
from .attention import attention_lookup
from .collectives import collective_lookup
from .evidence import KINDS, Evidence
from .gemm import LinearTimes, gemm_lookup, linear_fwd_bwd_lookup
from .mla import mla_decode_lookup
from .moe import moe_lookup
from .store import TableChoice, system_of, table_for

__all__ = [
    "attention_lookup",
    "KINDS",
    "Evidence",
    "LinearTimes",
    "TableChoice",
    "collective_lookup",
    "engine_allreduce_lookup",
    "gemm_lookup",
    "linear_fwd_bwd_lookup",
    "mla_decode_lookup",
    "moe_lookup",
    "system_of",
    "table_for",
]
