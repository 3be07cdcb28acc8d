"""``costmodel.physics.memory.stage_contents.chunk_counts`` reads a per-rank split without building its layout (speed):
the counts must be exactly those of :func:`costmodel.spec.layout.from_split`'s layout."""

import random

import pytest

from costmodel.spec import layout
from costmodel.physics.memory import stage_contents
from costmodel.spec.errors import SpecError


def _via_layout(layers, dense, vp, split, stage, mtp):
    lay = layout.from_split(split, vp, mtp)
    per, out = lay.per_rank(), []
    start = sum(per[:stage])
    for n, k in zip(lay.chunks(stage), lay.mtp_chunks(stage)):
        nd = max(0, min(start + n, dense) - start)
        md = k if dense > layers else 0
        out.append((nd + md, n - nd + k - md))
        start += n
    return tuple(out)


def test_split_counts_equal_the_layouts():
    rng = random.Random(0)
    for _ in range(3000):
        pp, vp = rng.randint(1, 9), rng.randint(1, 6)
        split = tuple(rng.randint(0, 20) for _ in range(pp))
        layers = rng.randint(1, 130)
        dense = rng.choice([0, 1, 3, 1 << 30, rng.randint(0, 40)])
        mtp, stage = rng.choice([0, 1, 2]), rng.randrange(pp)
        got = stage_contents._chunk_counts.__wrapped__(layers, dense, pp, vp, split, None, stage, mtp)
        assert got == _via_layout(layers, dense, vp, split, stage, mtp)


def test_odd_split_still_goes_through_the_layout():
    with pytest.raises(SpecError):  # a negative count: the layout's own error, not a silent answer
        stage_contents._chunk_counts.__wrapped__(8, 1 << 30, 2, 1, (9, -1), None, 0, 0)
