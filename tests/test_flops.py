"""FLOP accounting: hand-computed cases from the papers' own formulas."""

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.kernels.flops import hardware_flops_per_step, model_flops_per_step
from costmodel.spec.presets import load_model
from costmodel.spec.workload import Workload


def test_gpt3_parameter_count():
    # 12 l h^2 (1 + 13/(12h)) + V h  (Narayanan et al. 2021, section 5.1), tied embeddings
    m = load_model("gpt3-175b")
    l, h, V = 96, 12288, 51200
    ref = 12 * l * h * h * (1 + 13 / (12 * h)) + V * h
    assert abs(m.params / ref - 1) < 0.001
    assert 174e9 < m.params < 176e9


def test_model_flops_match_korthikanti_22b():
    # 22B, B=4, s=2048, 8 GPUs, 1.10 s at 41.5% MFU of 312 TFLOP/s (Korthikanti et al. 2023, Table 5):
    # model FLOPs = 72 B L s h^2 (1 + s/6h + V/12hL) = 1.1435e15
    m = load_model("gpt-22b")
    f = model_flops_per_step(m, Workload(global_batch=4, seq_len=2048), "full")
    assert abs(f / 1.1435e15 - 1) < 0.002
    mfu = f / (1.10 * 8 * 312e12)
    assert abs(mfu - 0.415) < 0.01


def test_full_recompute_adds_one_forward_of_the_stack():
    m = load_model("gpt-22b")
    w = Workload(global_batch=4, seq_len=2048)
    model = model_flops_per_step(m, w, "full")  # the arithmetic below is Korthikanti's full count
    full = hardware_flops_per_step(m, w, ParallelConfig(tp=8, recompute="full"), "full")
    sel = hardware_flops_per_step(m, w, ParallelConfig(tp=8, recompute="selective"), "full")
    none = hardware_flops_per_step(m, w, ParallelConfig(tp=8), "full")
    assert none == model
    assert model < sel < full
    # the stack (no LM head) is recomputed: extra is just under 1/3 of model FLOPs
    assert 0.30 < (full - model) / model < 1 / 3
    # selective recomputes the attention core forward, 4 s^2 h per layer and sequence, against
    # 72 s h^2 (1 + s/6h + V/12hL) model FLOPs: s/(18h) / (1 + s/6h + V/12hL)
    s, h, L, V = 2048, 6144, 48, 51200
    assert sel / model - 1 == pytest.approx(s / (18 * h) / (1 + s / (6 * h) + V / (12 * h * L)), rel=1e-3)


def test_moe_counts_topk_experts_only():
    m = load_model("mixtral-8x7b")
    w = Workload(global_batch=1, seq_len=4096)
    # roughly 6 * active params * tokens plus attention
    approx = 6 * m.active_params * 4096
    assert 0.95 < model_flops_per_step(m, w) / approx < 1.2
