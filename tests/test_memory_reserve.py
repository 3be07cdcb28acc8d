"""The memory reserve outside model state and activations (costmodel.physics.memory.stage_memory.reserved_bytes)."""

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.memory.stage_memory import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION,
    NCCL_BUFFSIZE_BYTES,
    NCCL_RING_CHANNELS,
    RESERVED_BYTES,
    memory_per_stage,
    reserved_bytes,
)
from costmodel.spec.presets import load_model
from costmodel.spec.workload import Workload

MiB, GiB = 2**20, 2**30


def test_single_gpu_is_context_and_workspaces_plus_fragmentation():
    assert reserved_bytes(ParallelConfig(), 0.0) == CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES == RESERVED_BYTES
    # 512 MiB + 64 MiB + 5% of 20 GiB = 1.5625 GiB
    assert reserved_bytes(ParallelConfig(), 20 * GiB) == pytest.approx(576 * MiB + 0.05 * 20 * GiB)


def test_nccl_buffers_hand_computed():
    # tp 8, dp 4, cp 2: TP, CP and DP (dp*cp) communicators, 16 channels x 4 MiB each = 192 MiB
    c = ParallelConfig(tp=8, dp=4, cp=2)
    assert reserved_bytes(c) - RESERVED_BYTES == 3 * NCCL_RING_CHANNELS * NCCL_BUFFSIZE_BYTES == 192 * MiB
    # EP 8 all-to-all: 7 peers x 2 channels x both ways x 4 MiB = 112 MiB, plus the EP communicator
    e = ParallelConfig(ep=8, dp=8)
    assert reserved_bytes(e) - reserved_bytes(ParallelConfig(dp=8)) == 64 * MiB + 112 * MiB


def test_reserve_grows_with_communicators_peers_and_activations():
    assert reserved_bytes(ParallelConfig(tp=8, dp=2)) > reserved_bytes(ParallelConfig(tp=8))
    assert reserved_bytes(ParallelConfig(tp=8, pp=2)) > reserved_bytes(ParallelConfig(tp=8))
    assert reserved_bytes(ParallelConfig(ep=16, dp=16)) > reserved_bytes(ParallelConfig(ep=8, dp=16))
    assert reserved_bytes(ParallelConfig(), 2 * GiB) - reserved_bytes(ParallelConfig(), GiB) == pytest.approx(
        FRAGMENTATION * GiB
    )


def test_stage_memory_carries_its_reserve():
    m = load_model("gpt3-175b")
    c = ParallelConfig(tp=8, pp=8, dp=2, mb=1)
    for sm in memory_per_stage(m, Workload(global_batch=64, seq_len=2048), c):
        assert sm.reserved_bytes == pytest.approx(reserved_bytes(c, sm.activations_bytes))
        assert sm.to_dict()["reserved_bytes"] == sm.reserved_bytes
        assert sm.total_bytes == pytest.approx(
            sm.weights_bytes
            + sm.grads_bytes
            + sm.optimizer_bytes
            + sm.activations_bytes
            + sm.buffers_bytes
            + sm.reserved_bytes
        )
