"""Pipeline layouts as Megatron-Core runs them: what each virtual stage holds.

A layout lists ``pp * vp`` virtual stages in Megatron-Core's order: virtual stage ``k`` is model
chunk ``k // pp`` of pipeline rank ``k % pp``, and layers are numbered in that order
(``PipelineParallelLayerLayout.__init__``, ``get_layer_offset``). Each stage holds a number of
decoder layers (``t``, zero allowed), of MTP layers (``m``), and possibly the embedding ``E`` or
the loss / LM head ``L``. The text form is Megatron-Core's ``--pipeline-model-parallel-layout``:
stages separated by ``|``, ``x*n`` repeats a character, ``(...)*n`` a group, commas are cosmetic
(``parse_str_to_list``). Source for every rule below:
``megatron/core/transformer/pipeline_parallel_layer_layout.py`` and
``megatron/training/arguments.py`` at NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553.

A uniform split and the first/last (``--decoder-first/last-pipeline-num-layers``) and account-for
splits are layouts too (:func:`from_split`); :func:`of` gives any plan's layout.

>>> lay = parse("Et*3|(tt|)*29,m|L", pp=16)
>>> lay.vp, lay.per_rank()[:2], lay.at(15, 1)
(2, (5, 4), VirtualStage(decoder=0, mtp=0, embedding=False, loss=True))
>>> str(lay)
'Et*3|(tt|)*29m|L'
>>> validate(lay, layers=61, mtp_layers=1)
>>> validate(parse("tE|t|t|L", pp=2), layers=3)
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: layout='tE|t|t|L': must be a layout whose first layer is the embedding E (Megatron-Core validate_layer_layout: "The first layer must be embedding")
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from costmodel.spec.errors import SpecError

SOURCE = "megatron/core/transformer/pipeline_parallel_layer_layout.py@d98e8a64"
_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


@dataclass(frozen=True, kw_only=True)
class VirtualStage:
    """What one virtual stage (model chunk of a rank) holds: ``decoder`` and ``mtp`` layer counts
    (each >= 0) and whether it holds the embedding (``E``) or the loss and LM head (``L``)."""

    decoder: int = 0
    mtp: int = 0
    embedding: bool = False
    loss: bool = False

    def text(self) -> str:
        """The stage in layout characters, in the only order Megatron-Core accepts: E, t, m, L."""

        def run(ch, k):
            return ch * k if k <= 2 else f"{ch}*{k}"

        return "E" * self.embedding + run("t", self.decoder) + run("m", self.mtp) + "L" * self.loss


@dataclass(frozen=True, kw_only=True)
class Layout:
    """``pp * vp`` virtual stages in Megatron-Core's order (stage ``k``: rank ``k % pp``, chunk ``k // pp``).

    >>> uniform(8, pp=2, vp=2).chunks(1), uniform(8, pp=2, vp=2).layer_ids(1, 1)
    ((2, 2), range(6, 8))
    """

    pp: int
    stages: tuple

    def __post_init__(self):
        object.__setattr__(self, "stages", tuple(self.stages))
        if type(self.pp) is not int or self.pp < 1:
            raise SpecError("pp", self.pp, "a positive integer")
        if not self.stages or len(self.stages) % self.pp:
            raise SpecError(
                "layout",
                str(self),
                f"a number of virtual stages ({len(self.stages)}) divisible by "
                f"pp={self.pp} (Megatron-Core arguments.py: the layout's length divisible by "
                "pipeline_model_parallel_size)",
            )
        for s in self.stages:
            if not isinstance(s, VirtualStage) or min(s.decoder, s.mtp) < 0:
                raise SpecError("layout", str(self), "virtual stages of non-negative layer counts")

    @property
    def vp(self) -> int:
        return len(self.stages) // self.pp

    def at(self, rank: int, chunk: int) -> VirtualStage:
        return self.stages[chunk * self.pp + rank]

    def chunks(self, rank: int) -> tuple[int, ...]:
        """Decoder layers in each of ``rank``'s model chunks, in chunk order."""
        return tuple(self.at(rank, c).decoder for c in range(self.vp))

    def mtp_chunks(self, rank: int) -> tuple[int, ...]:
        """MTP layers in each of ``rank``'s model chunks, in chunk order."""
        return tuple(self.at(rank, c).mtp for c in range(self.vp))

    def per_rank(self) -> tuple[int, ...]:
        """Decoder layers on each pipeline rank."""
        return tuple(sum(self.chunks(r)) for r in range(self.pp))

    def layer_ids(self, rank: int, chunk: int) -> range:
        """The decoder layers (0-based, model order) of one virtual stage (``get_layer_id_list``)."""
        k = chunk * self.pp + rank
        start = sum(s.decoder for s in self.stages[:k])
        return range(start, start + self.stages[k].decoder)

    def rank_layer_ids(self, rank: int) -> list[int]:
        """``rank``'s decoder layers, chunk after chunk."""
        return [i for c in range(self.vp) for i in self.layer_ids(rank, c)]

    def __str__(self) -> str:
        return format_layout(self)


#: the longest unrolled layout :func:`parse` takes (a million layer characters): a repeat count past it is refused
#: before it is unrolled (``(t|)*1000000000`` built a 2 GB string for 49 s before it was refused)
MAX_UNROLLED = 1_000_000


def _unroll(text: str) -> str:
    """Megatron-Core's ``parse_str_to_list`` expansion: commas dropped, ``(...)*n`` then ``x*n`` unrolled.
    OverflowError where a pass would make more than :data:`MAX_UNROLLED` characters."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        made = 0

        def repeat(x):
            nonlocal made
            made += len(x.group(1)) * int(x.group(2))
            if made > MAX_UNROLLED:
                raise OverflowError("layout too long")
            return x.group(1) * int(x.group(2))

        text = re.sub(pattern, repeat, text)
    return text


def parse(text: str, pp: int) -> Layout:
    """A layout string as Megatron-Core parses it, for ``pp`` pipeline ranks.

    The characters of each stage must come in Megatron-Core's order (E, t..., m..., L): any other
    order breaks one of :func:`validate`'s rules, so a stage is kept as its counts and that rule is
    raised here.

    >>> parse("E|(t|)*2,tL", pp=2).stages[1]
    VirtualStage(decoder=1, mtp=0, embedding=False, loss=False)
    >>> parse("Ex|L", pp=2)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: layout='Ex|L': must be made of E, t, m, L, '|', '(...)*n', 'x*n' and commas (Megatron-Core parse_str_to_list: known layer characters E, L, t, m)
    """
    if not isinstance(text, str) or len(text) > 100_000:
        raise SpecError("layout", text, "a layout string such as 'Et*3|(tt|)*29,m|L'")
    try:
        flat = _unroll(text)
    except (OverflowError, MemoryError, ValueError):  # ValueError: a count past int()'s 4,300 digits
        flat = "?"
    if len(flat) > MAX_UNROLLED or any(ch not in "EtmL|" for ch in flat):
        raise SpecError(
            "layout",
            text,
            "made of E, t, m, L, '|', '(...)*n', 'x*n' and commas "
            "(Megatron-Core parse_str_to_list: known layer characters E, L, t, m)",
        )
    stages, order = [], "EtmL"
    for part in flat.split("|"):
        if list(part) != sorted(part, key=order.index):
            _order_rule(text, flat)
        stages.append(
            VirtualStage(decoder=part.count("t"), mtp=part.count("m"), embedding="E" in part, loss="L" in part)
        )
        if part.count("E") > 1 or part.count("L") > 1:
            _order_rule(text, flat)
    if len(stages) % pp:
        raise SpecError(
            "layout",
            text,
            f"a number of virtual stages ({len(stages)}) divisible by pp={pp} "
            "(Megatron-Core arguments.py: the layout's length divisible by "
            "pipeline_model_parallel_size)",
        )
    return Layout(pp=pp, stages=tuple(stages))


def _order_rule(text: str, flat: str) -> None:
    """Raise the rule an out-of-order layout breaks (Megatron-Core checks the flattened layer list)."""
    layers = flat.replace("|", "")
    if layers.count("E") != 1 or layers.count("L") != 1:
        raise SpecError(
            "layout",
            text,
            "a layout with the embedding E and the loss L exactly once each "
            '(Megatron-Core validate_layer_layout: "must be specified exactly once")',
        )
    if not layers.startswith("E"):
        raise SpecError(
            "layout",
            text,
            "a layout whose first layer is the embedding E (Megatron-Core "
            'validate_layer_layout: "The first layer must be embedding")',
        )
    if not layers.endswith("L"):
        raise SpecError(
            "layout",
            text,
            "a layout whose last layer is the loss L (Megatron-Core "
            'validate_layer_layout: "The last layer must be loss")',
        )
    raise SpecError(
        "layout",
        text,
        "a layout with every decoder layer t before the MTP layers m (Megatron-Core "
        'validate_layer_layout: "decoder layers must be placed before MTP layers")',
    )


def format_layout(lay: Layout) -> str:
    """The compact text of a layout: runs of equal stages as ``(..|)*n``, ``t*k`` for ``k > 2``
    (what :func:`parse` reads back to the same layout).

    >>> format_layout(from_split((7, 8, 8, 8, 8, 8, 8, 6), 4))   # DeepSeek-V3's 61 layers, pp=8, vp=4
    'Et|(tt|)*22t|(tt|)*7tL'
    """
    text = [s.text() for s in lay.stages]
    out, i = [], 0
    while i < len(text):
        j = i
        while j + 1 < len(text) and text[j + 1] == text[i]:
            j += 1
        run, t = j - i + 1, text[i]
        if j < len(text) - 1:
            out.append(f"{t}|" if run == 1 else f"({t}|)*{run}")
        else:  # the last stage has no trailing separator
            out.append(t if run == 1 else f"{t}|{t}" if run == 2 else f"({t}|)*{run - 1}{t}")
        i = j + 1
    return "".join(out)


def validate(lay: Layout, layers: int, mtp_layers: int = 0) -> None:
    """Raise :class:`SpecError` naming the first of Megatron-Core's layout rules ``lay`` breaks
    (``validate_layer_layout``), plus the one that places the embedding and the loss: Megatron-Core
    builds them where ``pre_process`` / ``post_process`` is true, the first virtual stage of the first
    rank and the last of the last (``megatron/training/training.py`` ``get_model``), so ``E`` must sit in
    virtual stage 0 and ``L`` in the last one.

    >>> validate(parse("Ett|m||L", pp=2), layers=2, mtp_layers=1)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: layout='Ett|m||L': must be a layout with the MTP layers in the last virtual stage of their rank (Megatron-Core validate_layer_layout: "MTP should be always in the last virtual pipeline stage of that rank")
    """
    text = str(lay)
    st = lay.stages
    if sum(s.embedding for s in st) != 1 or sum(s.loss for s in st) != 1:
        raise SpecError(
            "layout",
            text,
            "a layout with the embedding E and the loss L exactly once each "
            '(Megatron-Core validate_layer_layout: "must be specified exactly once")',
        )
    if not st[0].embedding:
        raise SpecError(
            "layout",
            text,
            "a layout with the embedding E in virtual stage 0 (Megatron-Core builds the "
            "embedding on the first virtual stage of the first rank: pre_process in "
            "training.py get_model; validate_layer_layout: the first layer is E)",
        )
    if not st[-1].loss:
        raise SpecError(
            "layout",
            text,
            "a layout with the loss L in the last virtual stage (Megatron-Core builds the "
            "LM head and loss on the last virtual stage of the last rank: post_process "
            "in training.py get_model; validate_layer_layout: the last layer is L)",
        )
    n = sum(s.decoder for s in st)
    if n != layers:
        raise SpecError(
            "layout",
            text,
            f"a layout of layers={layers} decoder layers t (it has {n}; Megatron-Core "
            "validate_layer_layout: the number of decoder layers must match num_layers)",
        )
    k = sum(s.mtp for s in st)
    if k != mtp_layers:
        what = (
            "the model has none, or --mtp-layers 0 turned them off"
            if mtp_layers == 0
            else f"the model trains {mtp_layers}"
        )
        raise SpecError(
            "layout",
            text,
            f"a layout of {mtp_layers} MTP layers m (it has {k}, {what}; Megatron-Core "
            "validate_layer_layout: the number of mtp layers must match mtp_num_layers)",
        )
    if k:
        first = next(i for i, s in enumerate(st) if s.mtp)
        if any(s.decoder for s in st[first + 1 :]):
            raise SpecError(
                "layout",
                text,
                "a layout with every decoder layer t before the MTP layers m (Megatron-Core "
                'validate_layer_layout: "decoder layers must be placed before MTP layers")',
            )
        if first // lay.pp != lay.vp - 1:
            raise SpecError(
                "layout",
                text,
                "a layout with the MTP layers in the last virtual stage of their rank "
                '(Megatron-Core validate_layer_layout: "MTP should be always in the last '
                'virtual pipeline stage of that rank")',
            )
        if st[first].mtp != k:
            raise SpecError(
                "layout",
                text,
                "a layout with all MTP layers in one virtual stage (Megatron-Core "
                'validate_layer_layout: "All of the MTP layers must be in the same one '
                'virtual pipeline stage")',
            )


def from_chunks(chunks, pp: int, mtp: int = 0) -> Layout:
    """The layout of ``chunks[rank][chunk]`` decoder layers, E on virtual stage 0 and L on the last, and
    ``mtp`` MTP layers with L: where Megatron-Core builds them without a layout, the last virtual stage of
    the last rank (``multi_token_prediction.py`` ``get_mtp_num_layers_to_build``: ``is_pipeline_last_stage``)."""
    vp = len(chunks[0])
    k_last = pp * vp - 1
    return Layout(
        pp=pp,
        stages=tuple(
            VirtualStage(
                decoder=chunks[k % pp][k // pp], embedding=k == 0, loss=k == k_last, mtp=mtp if k == k_last else 0
            )
            for k in range(pp * vp)
        ),
    )


@lru_cache(maxsize=4096)
def from_split(split: tuple[int, ...], vp: int, mtp: int = 0) -> Layout:
    """The layout of a per-rank split: each rank's layers over its ``vp`` chunks as
    :func:`costmodel.spec.stages.chunk_layers` places them (Megatron-Core's first/last and account-for
    splits; the even split when every count is a multiple of ``vp``), ``mtp`` MTP layers with the loss."""
    from costmodel.spec.stages import chunk_layers

    pp = len(split)
    return from_chunks([chunk_layers(n, vp, s, pp) for s, n in enumerate(split)], pp, mtp)


def uniform(layers: int, pp: int, vp: int = 1, mtp: int = 0) -> Layout:
    """The even layout: ``layers / (pp vp)`` decoder layers in every virtual stage (MTP with the loss)."""
    if layers % (pp * vp):
        raise SpecError("pp*vp", pp * vp, f"a divisor of layers={layers} (pp={pp}, vp={vp}) for an even layout")
    return from_split((layers // pp,) * pp, vp, mtp)


def of(model, c) -> Layout:
    """The layout plan ``c`` runs ``model`` with: its own, its per-rank split, or the even one (the
    model's MTP layers with the loss unless the plan's own layout places them)."""
    if c.layout is not None:
        return c.layout
    if c.layers_per_stage is not None:
        return from_split(tuple(c.layers_per_stage), c.vp, model.mtp_layers)
    return uniform(model.layers, c.pp, c.vp, model.mtp_layers)
