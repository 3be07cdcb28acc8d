"""Parallel degrees a framework cannot run together as the cost model prices a plan (the rules that need the whole
plan's degrees, not one field: :func:`costmodel.frameworks.rules.check` holds every plan to them, and the search's
shapes and ZeRO stages, :mod:`search.candidates`)."""

from __future__ import annotations

from costmodel.spec.errors import SpecError


def check_degrees(
    framework: str,
    *,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    dp: int = 1,
    ep: int = 1,
    zero: int | None = None,
    bf16_model: bool = False,
) -> None:
    """Raise :class:`SpecError` for degrees ``framework`` cannot run together as the plan is priced (``zero`` None:
    its rule is not checked). FSDP2 as torchtitan v0.2.2 runs it:

    * without data- or context-parallel ranks beside TP or PP it applies no ``fully_shard`` and so no FSDP mixed
      precision, and trains in FP32 (``torchtitan/distributed/utils.py`` ``maybe_enable_amp``: "Mixed precision
      training with TP or PP is only supported when FSDP/HSDP/CP is enabled"), which no FSDP2 plan here is priced
      as; a BF16 model (``bf16_model``: the optimizer dtype bf16, ``training.dtype``) trains in BF16 there;
    * ZeRO 0 is its DDP, which replicates over one dimension only (``models/llama3/infra/parallelize.py``, before
      ``apply_ddp``: "DDP has not supported > 1D parallelism"), and with cp > 1 it shards over the CP ranks
      (``ParallelDims`` "fsdp").

    >>> check_degrees("fsdp2", tp=8, dp=1)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: dp=1: must be > 1 (or cp > 1) with tp or pp > 1 under framework=fsdp2 (torchtitan applies fully_shard over the data- and context-parallel ranks only; without them it trains without mixed precision, in FP32)
    >>> check_degrees("fsdp2", tp=8, dp=2), check_degrees("fsdp2", pp=2, dp=1, bf16_model=True)
    (None, None)
    >>> check_degrees("megatron", tp=8, dp=2, zero=0), check_degrees("fsdp2", dp=8, zero=0)
    (None, None)
    """
    if framework != "fsdp2":
        return
    if dp * cp == 1 and (tp > 1 or pp > 1) and not bf16_model:
        raise SpecError(
            "dp",
            dp,
            "> 1 (or cp > 1) with tp or pp > 1 under framework=fsdp2 (torchtitan applies fully_shard over the data- "
            "and context-parallel ranks only; without them it trains without mixed precision, in FP32)",
        )
    if zero == 0 and (cp > 1 or (dp > 1 and (tp, pp, ep) != (1, 1, 1))):
        raise SpecError(
            "zero",
            zero,
            "2 or 3 under framework=fsdp2 with cp > 1, or dp > 1 beside tp, pp or ep > 1 (torchtitan's DDP "
            "replicates over one dimension only: 'DDP has not supported > 1D parallelism')",
        )
