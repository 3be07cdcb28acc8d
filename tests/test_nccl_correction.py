"""NCCL's medium-size tree correction (src/graph/tuning.cc treeCorrectionFactor) as the collectives
model applies it: to the tree all-reduce everywhere, to NVLSTree only where NCCL does (Blackwell,
x86 hosts: the b200 preset)."""

from dataclasses import replace

import numpy as np
import pytest

from costmodel.physics.comm.collectives import collective_time_s, nvls_tree_time_s, _tree_bw_s, TREE_BW_FACTOR
from costmodel.spec.errors import SpecError
from costmodel.physics.comm.nccl_correction import TREE_CORRECTION_SIMPLE, tree_correction
from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import LinkSpec


def test_factor_per_power_of_two_from_64_bytes():
    # log2i(nBytes >> 6) indexes the table; 23 entries for the tree, 24 for NVLSTree, 1.0 beyond
    for i, f in enumerate(TREE_CORRECTION_SIMPLE[:23]):
        assert tree_correction(64 * 2**i) == f
        assert tree_correction(64 * 2**i * 1.9) == f  # same power of two
    assert tree_correction(64 * 2**23) == 1.0
    assert tree_correction(64 * 2**23, 24) == TREE_CORRECTION_SIMPLE[23]
    assert tree_correction(63) == 1.0 and tree_correction(1) == 1.0


def test_array_and_scalar_agree():
    sizes = np.array([1.0, 63.0, 64.0, 5e5, 3e6, 1.3e8, 2**29, 2**30, 1e10])
    for n_sizes in (23, 24):
        got = tree_correction(sizes, n_sizes)
        assert list(got) == [tree_correction(float(s), n_sizes) for s in sizes]


def test_tree_bandwidth_term_carries_the_correction():
    # 1 MiB: log2i(2^20 / 64) = 14 -> 0.5; 1 GiB: past the table -> 1
    assert _tree_bw_s(2.0**20, 8, 4, 1e12, 1e9) == pytest.approx(2 * 2**20 / 8e9 / (TREE_BW_FACTOR * 0.5))
    assert _tree_bw_s(2.0**30, 8, 4, 1e12, 1e9) == pytest.approx(2 * 2**30 / 8e9 / TREE_BW_FACTOR)


def test_nvls_tree_corrected_on_b200_only():
    b200 = load_cluster("b200").with_gpus(32)
    off = replace(b200, intra_link=replace(b200.intra_link, nvls_tree_medium_correction=False))
    s = 16 * 2**20  # 16 MiB: factor 0.7 (NVLSTree as NCCL_ALGO=NVLSTree forces it: at this size LL128 rings win)
    assert nvls_tree_time_s(s, 32, 1, b200) > nvls_tree_time_s(s, 32, 1, off)
    big = 2**34  # past the table: no correction
    assert nvls_tree_time_s(big, 32, 1, b200) == nvls_tree_time_s(big, 32, 1, off)
    assert collective_time_s("allreduce", big, 32, 1, b200) == collective_time_s("allreduce", big, 32, 1, off)
    assert not load_cluster("h100-sxm").intra_link.nvls_tree_medium_correction


def test_spec_field_must_be_a_bool():
    with pytest.raises(SpecError, match="nvls_tree_medium_correction"):
        LinkSpec(bw_bytes_per_s=1e9, nvls_tree_medium_correction="yes")
