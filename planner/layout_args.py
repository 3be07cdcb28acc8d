"""The pipeline split of a Megatron-LM command line, as :class:`~costmodel.spec.plan.ParallelConfig` fields.

Megatron-LM states it one of four ways (``megatron/training/arguments.py`` and
``megatron/core/transformer/transformer_config.py`` at NVIDIA/Megatron-LM@d98e8a64):
``--pipeline-model-parallel-layout`` (the layout, which also sets the interleave),
``--decoder-first/last-pipeline-num-layers``, ``--account-for-embedding/loss-in-pipeline-split``,
or nothing (the even split); the interleave comes from the layout, from
``--num-virtual-stages-per-pipeline-rank`` or from ``--num-layers-per-virtual-pipeline-stage``
(no more than one of the three: arguments.py). :func:`split_fields` returns ``layout`` (the text,
read for ``pp`` ranks by :class:`ParallelConfig`) or ``layers_per_stage``, and ``vp``.

>>> split_fields({"pipeline_model_parallel_layout": "Et|(tt|)*2,tL"}, pp=2, layers=6)
{'layout': 'Et|(tt|)*2tL', 'vp': 2}
>>> split_fields({"decoder_first_pipeline_num_layers": "6", "decoder_last_pipeline_num_layers": "7",
...               "num_virtual_stages_per_pipeline_rank": "1"}, pp=8, layers=61)
{'vp': 1, 'layers_per_stage': (6, 8, 8, 8, 8, 8, 8, 7)}
>>> split_fields({"pipeline_model_parallel_layout": "Et|tL", "num_virtual_stages_per_pipeline_rank": "2"}, 2, 2)
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: pipeline_model_parallel_layout='Et|tL': must be unset with --num-virtual-stages-per-pipeline-rank (Megatron-LM arguments.py: no more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout)
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.layout import parse
from costmodel.spec.stages import megatron_split

INTERLEAVE = (
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "pipeline_model_parallel_layout",
)


def _given(a: dict, name: str) -> bool:
    v = a.get(name)
    return v is not None and v is not False and str(v).lower() not in ("none", "false", "")


def split_fields(a: dict, pp: int, layers: int | None, vp: int | None = None) -> dict:
    """``layout`` / ``layers_per_stage`` and ``vp`` stated by the normalised arguments ``a`` for ``pp``
    ranks of a ``layers``-layer model (``layers`` None: the first/last and account-for flags cannot be
    read and are refused); ``vp``: the interleave other arguments set; ``{}`` when none is given."""
    out: dict = {}
    given = [n for n in INTERLEAVE if _given(a, n)]
    if len(given) > 1:
        raise SpecError(
            given[-1],
            a[given[-1]],
            f"unset with --{given[0].replace('_', '-')} (Megatron-LM "
            "arguments.py: no more than one of --num-layers-per-virtual-pipeline-stage, "
            "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout)",
        )
    text = a.get("pipeline_model_parallel_layout") if _given(a, "pipeline_model_parallel_layout") else None
    # a real argument dump prints an unset value as None (Megatron's _print_args)
    first = a.get("decoder_first_pipeline_num_layers") if _given(a, "decoder_first_pipeline_num_layers") else None
    last = a.get("decoder_last_pipeline_num_layers") if _given(a, "decoder_last_pipeline_num_layers") else None
    emb = _given(a, "account_for_embedding_in_pipeline_split")
    loss = _given(a, "account_for_loss_in_pipeline_split")
    if text is not None:
        for name, on in (
            ("decoder_first_pipeline_num_layers", first is not None),
            ("decoder_last_pipeline_num_layers", last is not None),
            ("account_for_embedding_in_pipeline_split", emb),
            ("account_for_loss_in_pipeline_split", loss),
        ):
            if on:
                raise SpecError(
                    name,
                    a[name],
                    "unset with --pipeline-model-parallel-layout (Megatron-Core "
                    "TransformerConfig: the layout cannot be set with other pipeline "
                    "layout arguments)",
                )
        lay = parse(str(text), pp)
        if vp not in (None, 1, lay.vp):
            raise SpecError(
                "pipeline_model_parallel_layout",
                text,
                f"a layout of {vp} virtual stages per rank, "
                "the interleave the other arguments set (Megatron-Core: virtual_pipeline_model_parallel_size "
                "conflicts with pipeline_model_parallel_layout)",
            )
        return {"layout": str(lay), "vp": lay.vp}
    if _given(a, "num_virtual_stages_per_pipeline_rank"):
        out["vp"] = _int(a, "num_virtual_stages_per_pipeline_rank")
    if first is None and last is None and not emb and not loss:
        return out
    if layers is None:
        raise SpecError("num_layers", None, "given with the first/last or account-for pipeline split flags")
    split = megatron_split(
        layers,
        pp,
        out.get("vp", vp or 1),
        first=None if first is None else _int(a, "decoder_first_pipeline_num_layers"),
        last=None if last is None else _int(a, "decoder_last_pipeline_num_layers"),
        embedding=emb,
        loss=loss,
    )
    if split is not None:
        out["layers_per_stage"] = split
    return out


def _int(a: dict, name: str) -> int:
    try:
        v = int(str(a[name]))
    except ValueError:
        raise SpecError(name, a[name], "an integer") from None
    if v < 1:
        raise SpecError(name, v, "a positive integer")
    return v
