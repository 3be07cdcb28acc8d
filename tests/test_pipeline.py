"""Pipeline bubble formulas and in-flight micro-batches."""

import pytest

from costmodel.compose.schedule import bubble_fraction
from costmodel.spec.stages import in_flight_chunks, stage_layers
from costmodel.compose.step import multiplier


def test_no_pipeline_no_bubble():
    assert bubble_fraction(1, 8) == 0.0


@pytest.mark.parametrize("p,m,v,expected", [(8, 64, 1, 7 / 64), (8, 64, 3, 7 / 192), (4, 4, 2, 3 / 8)])
def test_bubble_fraction(p, m, v, expected):
    # (p-1)/m for 1F1B, (p-1)/(v m) interleaved (Narayanan et al. 2021, sections 2.2.1-2.2.2)
    assert bubble_fraction(p, m, v) == pytest.approx(expected)


def test_pipeline_time_is_ideal_plus_bubble():
    t = 2.0
    assert multiplier(64, 8, 1) * t == pytest.approx(64 * t * (1 + 7 / 64))  # the one composition's M


def test_first_stage_holds_p_microbatches_in_1f1b():
    assert [in_flight_chunks(4, 16, 1, s) for s in range(4)] == [4, 3, 2, 1]
    assert in_flight_chunks(8, 3, 1, 0) == 3  # never more than the micro-batches that exist


def test_interleaved_first_stage_matches_korthikanti():
    # first stage holds p (1 + (p-1)/(p v)) micro-batches of a full stage: chunks / v
    p, v = 8, 3
    assert in_flight_chunks(p, 64, v, 0) / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_stage_layers_uniform_and_explicit():
    assert list(stage_layers(8, 4, 3)) == [6, 7]
    assert list(stage_layers(8, 3, 2, (2, 3, 3))) == [5, 6, 7]
