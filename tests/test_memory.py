"""Memory model: Korthikanti et al. 2023 activation formulas and ZeRO sharding."""

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.memory.activations import activation_bytes_per_layer
from costmodel.physics.memory.stage_memory import memory_per_stage, model_state_bytes
from costmodel.spec.presets import load_model
from costmodel.spec.workload import Workload

M = load_model("gpt3-175b")
W = Workload(global_batch=64, seq_len=2048)
s, b, h, a, t = 2048, 1, 12288, 96, 8


def act(**kw):
    return activation_bytes_per_layer(M, W, ParallelConfig(mb=b, **kw))


def test_korthikanti_table2_no_parallelism():
    # sbh (34 + 5 a s / h)
    assert act(flash_attention=False) == pytest.approx(s * b * h * (34 + 5 * a * s / h))


def test_korthikanti_table2_tensor_parallel():
    # sbh (10 + 24/t + 5 a s / (h t))
    assert act(tp=t, flash_attention=False) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))


def test_korthikanti_table2_tp_sp_selective():
    # sbh * 34 / t
    assert act(tp=t, sp=True, recompute="selective", flash_attention=False) == pytest.approx(s * b * h * 34 / t)


def test_flash_attention_drops_the_score_term():
    # sbh (10 + 24/t) plus an FP32 log-sum-exp per head and token
    assert act(tp=t, flash_attention=True) == pytest.approx(s * b * h * (10 + 24 / t) + 4 * a / t * s * b)


def test_full_recompute_stores_only_layer_inputs():
    base = ParallelConfig(tp=8, pp=8, mb=1)
    full = ParallelConfig(tp=8, pp=8, mb=1, recompute="full")
    m_none = memory_per_stage(M, W, base)[0].activations_bytes
    m_full = memory_per_stage(M, W, full)[0].activations_bytes
    assert m_full < m_none / 5


def test_first_stage_holds_more_activations_than_last_in_1f1b():
    mem = memory_per_stage(M, W, ParallelConfig(tp=8, pp=8, mb=1))
    assert mem[0].activations_bytes > mem[-1].activations_bytes - 6 * 2048 * 51200 / 8


def test_mixed_precision_adam_is_18_bytes_per_parameter_without_zero():
    w, g, o = model_state_bytes(M, ParallelConfig(tp=8, pp=8, dp=4), 3)
    assert (w + g + o) / w == pytest.approx(18 / 2)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_never_uses_more_memory_than_zero0(zero):
    c0 = ParallelConfig(tp=8, pp=2, dp=8, mb=1)
    cz = ParallelConfig(tp=8, pp=2, dp=8, mb=1, zero=zero)
    for s0, sz in zip(memory_per_stage(M, W, c0), memory_per_stage(M, W, cz)):
        assert sz.total_bytes <= s0.total_bytes


def test_zero_stages_shard_in_order():
    totals = [sum(model_state_bytes(M, ParallelConfig(tp=8, pp=2, dp=8, zero=z), 0)) for z in range(4)]
    assert totals == sorted(totals, reverse=True)
    assert totals[3] == pytest.approx(totals[0] / 8)


def test_experts_sharded_by_ep():
    mx = load_model("mixtral-8x7b")
    w1 = model_state_bytes(mx, ParallelConfig(tp=1, dp=8, ep=1), 0)[0]
    w8 = model_state_bytes(mx, ParallelConfig(tp=1, dp=8, ep=8), 0)[0]
    assert w8 < w1 / 3


def test_a_dense_models_probe_stage_past_its_layers_is_all_dense():
    # the search's tables probe a stage with up to all the model's layers on top of the others'; a
    # dense model's layers there were counted as MoE (an expert GEMM of 0 experts: ZeroDivisionError)
    from costmodel.spec.plan import ParallelConfig
    from costmodel.physics.memory.stage_contents import layer_counts
    from costmodel.spec.presets import load_model

    m = load_model("llama3-8b")  # 32 layers
    c = ParallelConfig(pp=2, dp=1, layers_per_stage=(16, 32))  # a probe: 48 layers on two stages
    assert layer_counts(m, c, 1) == (32, 0)
