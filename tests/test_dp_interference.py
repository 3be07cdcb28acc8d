"""The DP reductions' SM interference in the closed form (costmodel.compose.step.dp_exposure ``interference``) against
the op graph's schedule of the same window (costmodel.engines.graph.dp.dp_tail), which slows compute to
``1 - comm_compute_interference`` while an SM-based transfer progresses."""

import numpy as np
import pytest

from costmodel.compose.stage_terms import dp_interference
from costmodel.compose.step import dp_exposure
from costmodel.engines.graph.dp import dp_tail
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster

H100 = load_cluster("h100-sxm").with_gpus(64)


@pytest.mark.parametrize(
    "backward_s, t_grad_s, buckets, slowed",
    [(2.0, 1.0, 8, True), (1.0, 1.0, 4, True), (2.0, 0.5, 16, True), (0.5, 1.0, 4, False)],
)
def test_closed_form_matches_the_op_graph_window(backward_s, t_grad_s, buckets, slowed):
    window = tuple((f"b{i}", backward_s / buckets, 100e6) for i in range(buckets))
    graph, _ = dp_tail(H100, window, t_grad_s, 100e6, "reducescatter", 8, 8)
    coef = H100.device.comm_compute_interference
    assert coef > 0
    closed = dp_exposure(t_grad_s, 0, 0, 0, buckets, backward_s, backward_s / 2, 0, interference=coef)[0]
    assert closed == pytest.approx(graph, rel=1e-9)
    without = dp_exposure(t_grad_s, 0, 0, 0, buckets, backward_s, backward_s / 2, 0)[0]
    if slowed:  # overlapped: the slowed backward pushes the last piece out
        assert closed > without
    else:  # the reductions queued behind the first outlast the backward and hide its slowdown
        assert closed == without


def test_scalar_and_array_paths_agree():
    args = dict(p=4, v=2, layers=24, pieces=(3.0, 2.0), interference=0.1)
    for t_grad in (0.2, 0.9, 3.0):
        scalar = dp_exposure(t_grad, 0.1, 1e-4, 1e-4, 6, 1.0, 0.5, 1, **args)
        array = dp_exposure(np.array([t_grad]), 0.1, 1e-4, 1e-4, 6, 1.0, 0.5, 1, **args)
        assert scalar[0] == pytest.approx(float(array[0][0]), rel=1e-12)


def test_interference_only_where_sm_engines_carry_the_dp_group():
    c = ParallelConfig(tp=8, dp=8)
    assert dp_interference(H100, c) == H100.device.comm_compute_interference
    sg = load_cluster("sg2262-like").with_gpus(64)  # DMA engines that do not use compute
    assert dp_interference(sg, c) == 0.0
