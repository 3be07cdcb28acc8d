"""Pipeline layouts (costmodel.spec.layout): Megatron-Core's text form, its rules, and the splits as layouts.

Rules: megatron/core/transformer/pipeline_parallel_layer_layout.py at NVIDIA/Megatron-LM@d98e8a64.
"""

import random
import re

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.layout import Layout, VirtualStage, format_layout, from_split, parse, uniform, validate
from costmodel.spec.stages import chunk_layers, megatron_split


def megatron_parse(text: str) -> list[list[str]]:
    """Megatron-Core's ``parse_str_to_list`` (the two regexes and the split), copied from the file above
    as the reference the layout type must agree with."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return [list(stage) for stage in text.split("|")]


def random_layout(rng: random.Random) -> tuple[Layout, int]:
    pp, vp = rng.randint(1, 6), rng.randint(1, 4)
    counts = [rng.choice([0, 1, 1, 2, 2, 3, 5]) for _ in range(pp * vp)]
    mtp = rng.random() < 0.2 and pp * vp > 1
    stages = [VirtualStage(decoder=n, embedding=k == 0, loss=k == pp * vp - 1) for k, n in enumerate(counts)]
    if mtp:  # MTP after every decoder layer, in the last chunk of some rank: the last stage here
        stages[-1] = VirtualStage(decoder=0, mtp=1, loss=True)
    return Layout(pp=pp, stages=tuple(stages)), sum(s.decoder for s in stages)


def test_the_issue_example_parses_as_megatron_parses_it():
    lay = parse("Et*3|(tt|)*29,m|L", pp=16)
    ref = megatron_parse("Et*3|(tt|)*29,m|L")
    assert len(lay.stages) == len(ref) == 32 and lay.vp == 2
    for st, r in zip(lay.stages, ref):
        assert (st.decoder, st.mtp, st.embedding, st.loss) == (r.count("t"), r.count("m"), "E" in r, "L" in r)
    validate(lay, layers=61, mtp_layers=1)
    # virtual stage k is chunk k // pp of rank k % pp: rank 0 holds stage 0 (E + 3) and stage 16 (2)
    assert lay.chunks(0) == (3, 2) and lay.chunks(15) == (2, 0) and lay.at(14, 1).mtp == 1


def test_format_then_parse_is_the_same_layout_and_megatron_reads_the_same_stages():
    rng = random.Random(7)
    for _ in range(300):
        lay, _ = random_layout(rng)
        text = format_layout(lay)
        assert parse(text, lay.pp) == lay, text
        ref = megatron_parse(text)
        assert [len(r) for r in ref] == [s.decoder + s.mtp + s.embedding + s.loss for s in lay.stages], text


def test_uniform_and_megatron_splits_are_layouts():
    assert uniform(8, pp=2, vp=2) == parse("Ett|tt|tt|ttL", pp=2)
    split = megatron_split(126, 8, 8, embedding=True, loss=True)  # (15, 16, ..., 16, 15)
    lay = from_split(split, 8)
    assert lay.per_rank() == split and lay.chunks(0) == chunk_layers(15, 8, 0, 8)
    validate(lay, layers=126)
    # the config takes the layout's interleave and per-rank counts
    c = ParallelConfig(pp=8, layout=str(lay))
    assert c.vp == 8 and c.layers_per_stage == split and c.to_dict()["layout"] == str(lay)
    assert ParallelConfig.from_dict(c.to_dict()) == c


def test_empty_stages_and_a_rank_without_decoder_layers_are_allowed():
    lay = parse("E|t*4|t*4|L", pp=2)  # rank 0: E and 4 layers, rank 1: 4 layers and the loss
    validate(lay, layers=8)
    assert lay.per_rank() == (4, 4) and lay.chunks(0) == (0, 4)
    lay = parse("Et*4|L", pp=2)  # the last rank holds only the loss
    validate(lay, layers=4)
    assert ParallelConfig(pp=2, layout=lay).layers_per_stage == (4, 0)


@pytest.mark.parametrize(
    "text,pp,layers,mtp,rule",
    [
        ("Et|t|tL", 2, 3, 0, "divisible by pp=2"),
        ("Et|tx|t|L", 2, 2, 0, "known layer characters"),
        ("t|Et|t|L", 2, 3, 0, "virtual stage 0"),
        ("Et|tL|t|", 2, 3, 0, "last virtual stage"),
        ("Et|t|t|tL", 2, 5, 0, "layers=5 decoder layers"),
        ("Et|t|mt|L", 2, 3, 1, "decoder layer t before the MTP"),
        ("Ett|m||L", 2, 2, 1, "last virtual stage of their rank"),
        ("Et|t|m|mL", 2, 2, 2, "all MTP layers in one virtual stage"),
        ("Et|t|tm|L", 2, 3, 0, "0 MTP layers"),
        ("EEt|t|t|L", 2, 3, 0, "exactly once"),
    ],
)
def test_a_layout_megatron_rejects_is_refused_with_its_rule(text, pp, layers, mtp, rule):
    with pytest.raises(SpecError) as e:
        validate(parse(text, pp), layers=layers, mtp_layers=mtp)
    assert rule in str(e.value) and "\n" not in str(e.value) and e.value.field == "layout"


def test_a_layout_for_other_pipeline_ranks_is_refused():
    with pytest.raises(SpecError, match="pp=4"):
        ParallelConfig(pp=4, layout=parse("Et|tL", pp=2))
