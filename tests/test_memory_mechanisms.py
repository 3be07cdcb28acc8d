"""The memory mechanisms frameworks use to fit (issue 21), each as the framework charges it:
FP8 saved GEMM inputs (Transformer Engine), TE's cached FP8 weight copies and ``--fp8-param-gather``,
Megatron-Core ``--recompute-modules``, BF16 optimizer state (FSDP2 with a BF16 model)."""

from dataclasses import replace

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.physics.memory.stage_memory import (
    activation_bytes_per_layer,
    lm_head_saved_bytes,
    fp8_weight_cache_bytes,
    memory_per_stage,
    model_state_bytes,
)
from costmodel.physics.memory.stage_contents import layer_params
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.emit import megatron_args
from planner.megatron_args import config_fields, parse_command_line

LLAMA = load_model("llama3-70b")
QWEN = load_model("qwen3-235b-a22b")
H100 = load_cluster("h100-sxm")
BF16 = Workload(global_batch=64, seq_len=4096, dtype="bf16")
FP8 = replace(BF16, dtype="fp8")


# ------------------------------------------------------------------ FP8 saved inputs
def test_fp8_linears_save_their_inputs_in_one_byte():
    c = ParallelConfig(tp=8, sp=True, dp=8)
    diff = activation_bytes_per_layer(LLAMA, BF16, c) - activation_bytes_per_layer(LLAMA, FP8, c)
    h, f, t, tokens = LLAMA.hidden, LLAMA.ffn_hidden, 8, 4096
    # QKV and fc1 inputs 2h -> h each (sequence-sharded), fc2 input 2f -> f; the output projection keeps an
    # FP8 copy (heads x head_dim bytes) beside the attention's BF16 output
    assert diff == pytest.approx(tokens * (2 * h / t + (f - LLAMA.heads * LLAMA.head_dim) / t))


def test_torchao_float8_saves_bf16_inputs():
    # torchao's Float8Linear saves the high-precision input it is given (the sharded-input case: no DTensor gather)
    c = ParallelConfig(tp=8, sp=True, dp=8, framework="fsdp2", zero=3, sp_saved_inputs="sharded")
    assert activation_bytes_per_layer(LLAMA, FP8, c) == activation_bytes_per_layer(LLAMA, BF16, c)


def test_dtensor_sp_saves_the_qkv_and_mlp_inputs_all_gathered():
    # torchtitan's TP (parallelize_llama.py@9dec370): PrepareModuleInput gathers the block input, aten.mm saves it;
    # under Float8 PrepareFloat8ModuleInput casts before the gather, so it is saved in FP8
    h, t, tokens = LLAMA.hidden, 8, 4096
    sharded = ParallelConfig(tp=8, sp=True, dp=8, framework="fsdp2", zero=3, sp_saved_inputs="sharded")
    gathered = ParallelConfig(tp=8, sp=True, dp=8, framework="fsdp2", zero=3)
    assert gathered.sp_saved_inputs == "gathered"  # the framework's own
    # BF16: QKV input and MLP input 2 B x h each, whole instead of / t
    assert activation_bytes_per_layer(LLAMA, BF16, gathered) - activation_bytes_per_layer(
        LLAMA, BF16, sharded
    ) == pytest.approx(tokens * (4 * h - 4 * h / t))
    # FP8: 1 B x h each, whole, against the BF16 sharded pair
    assert activation_bytes_per_layer(LLAMA, FP8, gathered) - activation_bytes_per_layer(
        LLAMA, FP8, sharded
    ) == pytest.approx(tokens * (2 * h - 4 * h / t))
    # no SP, or Megatron: nothing changes; and Megatron cannot state 'gathered'
    no_sp = ParallelConfig(tp=8, sp=False, dp=8, framework="fsdp2", zero=3)
    assert activation_bytes_per_layer(LLAMA, BF16, no_sp) == activation_bytes_per_layer(
        LLAMA, BF16, replace(no_sp, sp_saved_inputs="sharded")
    )
    assert ParallelConfig(tp=8, sp=True).sp_saved_inputs == "sharded"
    with pytest.raises(SpecError, match="sp_saved_inputs"):
        ParallelConfig(tp=8, sp=True, sp_saved_inputs="gathered")
    with pytest.raises(SpecError, match="sp_saved_inputs"):
        ParallelConfig(framework="fsdp2", zero=3, sp_saved_inputs="whole")
    assert "sp_saved_inputs" not in gathered.to_dict() and "sp_saved_inputs" not in ParallelConfig().to_dict()
    assert ParallelConfig.from_dict(sharded.to_dict()) == sharded


def test_the_output_head_keeps_the_final_norm_input_and_its_gemm_input():
    h = LLAMA.hidden
    # Megatron SP: both sequence-sharded (2 B x h / t each); no SP: both whole
    assert lm_head_saved_bytes(LLAMA, ParallelConfig(tp=8, sp=True, dp=8)) == 2 * 2 * h / 8
    assert lm_head_saved_bytes(LLAMA, ParallelConfig(tp=8, sp=False, dp=8)) == 2 * 2 * h
    # DTensor SP (torchtitan): the norm input sharded, the head's input all-gathered
    assert (
        lm_head_saved_bytes(LLAMA, ParallelConfig(tp=8, sp=True, dp=8, framework="fsdp2", zero=3)) == 2 * h / 8 + 2 * h
    )


def test_the_output_head_is_charged_on_the_last_stage_with_the_loss(monkeypatch):
    import costmodel.physics.memory.stage_memory as mem

    w = Workload(global_batch=16, seq_len=4096)
    c = ParallelConfig(tp=8, sp=True, pp=2, dp=1)
    first, last = (mem.stage_memory(LLAMA, w, c, s).activations_bytes for s in (0, 1))
    per_token = mem.lm_head_saved_bytes(LLAMA, c)
    monkeypatch.setattr(mem, "lm_head_saved_bytes", lambda model, c: 0.0)
    assert last - mem.stage_memory(LLAMA, w, c, 1).activations_bytes == pytest.approx(per_token * 4096)  # mb 1
    assert mem.stage_memory(LLAMA, w, c, 0).activations_bytes == first


def test_a_chunk_that_frees_its_received_input_holds_one_layer_input_less_per_micro_batch_in_flight():
    from costmodel.physics.memory.stage_memory import stage_memory
    from costmodel.spec.stages import in_flight_profile

    w = Workload(global_batch=32, seq_len=4096)
    c = ParallelConfig(tp=8, sp=True, pp=4, vp=2, dp=1, layers_per_stage=(20, 20, 20, 20))
    freed = replace(c, pp_free_stage_inputs=True)
    held = max(map(sum, in_flight_profile(4, 32, 2, 0)))  # chunk-micro-batches in flight on stage 0 (each chunk alike)
    layer_input = 2 * LLAMA.hidden * 4096 / 8  # the chunk's first norm input, sequence-sharded (mb 1)
    diff = stage_memory(LLAMA, w, c, 0).activations_bytes - stage_memory(LLAMA, w, freed, 0).activations_bytes
    assert diff == pytest.approx(held * layer_input)
    # no pipeline, or full recompute (the checkpoint keeps the input): nothing freed
    for plain in (ParallelConfig(tp=8, sp=True, dp=4), replace(c, recompute="full")):
        assert (
            stage_memory(LLAMA, w, plain, 0).total_bytes
            == stage_memory(LLAMA, w, replace(plain, pp_free_stage_inputs=True), 0).total_bytes
        )
    assert "pp_free_stage_inputs" not in c.to_dict() and ParallelConfig.from_dict(freed.to_dict()) == freed
    with pytest.raises(SpecError, match="pp_free_stage_inputs"):
        ParallelConfig(pp_free_stage_inputs="yes")
    from planner.emit import refuse_unless_runnable

    with pytest.raises(SpecError, match="pp_free_stage_inputs"):
        refuse_unless_runnable("megatron", freed)


# ------------------------------------------------------------------ FP8 weight copies
def test_te_caches_an_fp8_copy_of_each_gemm_weight_unless_fp8_param_gather():
    c = ParallelConfig(tp=8, pp=8, dp=4, zero=1)
    layers = LLAMA.layers // 8
    gemm = layers * (LLAMA.attn_params + LLAMA.mlp_params(LLAMA.ffn_hidden)) / 8
    assert fp8_weight_cache_bytes(LLAMA, FP8, c, 3) == pytest.approx(2 * gemm)  # row-wise + transposed
    assert fp8_weight_cache_bytes(LLAMA, BF16, c, 3) == 0.0
    assert fp8_weight_cache_bytes(LLAMA, FP8, replace(c, fp8_param_gather=True), 3) == 0.0
    plain = memory_per_stage(LLAMA, FP8, c)[3]
    gathered = memory_per_stage(LLAMA, FP8, replace(c, fp8_param_gather=True))[3]
    assert plain.weights_bytes - gathered.weights_bytes == pytest.approx(2 * gemm)


def test_fp8_param_gather_needs_the_distributed_optimizer():
    with pytest.raises(SpecError, match="fp8_param_gather"):
        ParallelConfig(tp=8, dp=4, zero=0, fp8_param_gather=True)


# ------------------------------------------------------------------ recompute modules
def test_moe_and_layernorm_modules_keep_only_the_attention_part_of_an_moe_layer():
    base = ParallelConfig(tp=4, pp=8, dp=8, ep=8, sp=True, zero=1, recompute="selective")
    mods = replace(base, recompute_modules=("layernorm", "moe"))
    kept = activation_bytes_per_layer(QWEN, BF16, mods, moe=True)
    full = activation_bytes_per_layer(QWEN, BF16, base, moe=True)
    assert kept < 0.3 * full
    # the attention part is all that is left: no routed slot, no router, no MLP input
    assert kept == pytest.approx(
        activation_bytes_per_layer(QWEN, BF16, base, moe=False) - 4096 * (2 * QWEN.hidden / 4 + 6 * QWEN.ffn_hidden / 4)
    )
    # a dense layer is unchanged (the TE spec fuses its norms into the GEMMs)
    assert activation_bytes_per_layer(QWEN, BF16, mods) == activation_bytes_per_layer(QWEN, BF16, base)


def test_moe_recompute_costs_the_replayed_moe_forward_in_both_engines():
    base = ParallelConfig(
        tp=4,
        pp=8,
        dp=8,
        ep=8,
        sp=True,
        zero=1,
        recompute="selective",
        mb=1,
        vp=4,
        layers_per_stage=(11, 12, 12, 12, 12, 12, 12, 11),
    )
    mods = replace(base, recompute_modules=("layernorm", "moe"))
    cl, w = H100.with_gpus(256), Workload(global_batch=256, seq_len=4096)
    a0, a1 = (evaluate(QWEN, cl, w, c, engine="analytic") for c in (base, mods))
    g1 = evaluate(QWEN, cl, w, mods, engine="graph")
    assert a1.step_time_s > a0.step_time_s  # the MoE block and its all-to-alls run again
    assert a1.peak_memory_bytes < a0.peak_memory_bytes
    assert abs(a1.step_time_s / g1.step_time_s - 1) < 0.02


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(recompute="full", recompute_modules=("moe",)), "recompute_modules"),
        (dict(recompute="selective", recompute_modules=("shared_experts",)), "recompute_modules"),
        (dict(recompute="selective", recompute_modules=()), "recompute_modules"),
        (dict(recompute="selective", recompute_modules=("moe",), framework="fsdp2", zero=3), "recompute_modules"),
    ],
)
def test_recompute_modules_refused_outside_megatron_selective(kw, field):
    with pytest.raises(SpecError, match=field):
        ParallelConfig(tp=2, dp=2, **kw)


def test_emitted_recompute_modules_and_fp8_param_gather_parse_back():
    c = ParallelConfig(
        tp=4,
        pp=2,
        dp=2,
        ep=8,
        sp=True,
        zero=1,
        recompute="selective",
        recompute_modules=("layernorm", "moe"),
        fp8_param_gather=True,
    )
    line = " ".join(" ".join(a) for a in megatron_args(c, 64, 48, dtype="fp8", moe=True))
    assert "--recompute-modules layernorm moe" in line and "--fp8-param-gather" in line
    f = config_fields(parse_command_line(line))
    assert f["recompute_modules"] == ("layernorm", "moe") and f["fp8_param_gather"] is True
    # Megatron-LM's printed arguments list the modules as a Python list
    printed = config_fields({"recompute_granularity": "selective", "recompute_modules": "['moe', 'layernorm']"})
    assert printed["recompute_modules"] == ("moe", "layernorm")


def test_the_megatron_line_parser_refuses_modules_it_cannot_charge():
    with pytest.raises(SpecError, match="recompute_modules"):
        config_fields(parse_command_line("--recompute-granularity selective --recompute-modules shared_experts"))


# ------------------------------------------------------------------ BF16 optimizer state
def test_a_bf16_model_under_torch_adam_keeps_no_fp32_master():
    c = ParallelConfig(dp=8, zero=3, framework="fsdp2")
    dense = sum(model_state_bytes(LLAMA, c, 0))
    bf16 = sum(model_state_bytes(LLAMA, replace(c, optimizer_dtype="bf16"), 0))
    params = LLAMA.layers * layer_params(LLAMA, c, False)[0] + 2 * LLAMA.embedding_params
    # torchtitan's FP32 parameter is the master: 4 (FP32 weight) + 4 (FP32 gradient) + 8 (m, v), against
    # 2 + 2 (BF16 gradient) + 4 (m, v), over 8 ranks
    assert dense == pytest.approx(16 * params / 8) and bf16 == pytest.approx(8 * params / 8)
    # Megatron's distributed optimizer keeps the BF16 weight, the FP32 gradient buffer and the 12 B sharded state
    meg = model_state_bytes(LLAMA, ParallelConfig(dp=8, zero=1), 0)
    assert meg == pytest.approx((2 * params, 4 * params, 12 * params / 8))


def test_bf16_optimizer_state_only_under_fsdp2_or_nemo_distributed_adam():
    # Megatron-Core zero=1 is NeMo's distributed_fused_adam with optim.dtype bf16 (tests/test_optimizer_dtype_megatron.py)
    assert ParallelConfig(dp=8, zero=1, optimizer_dtype="bf16").optimizer_dtype == "bf16"
    for kw in (dict(zero=0), dict(zero=1, framework="deepspeed")):
        with pytest.raises(SpecError, match="optimizer_dtype"):
            ParallelConfig(dp=8, optimizer_dtype="bf16", **kw)


# ------------------------------------------------------------------ the search runs the same options
def test_a_problem_options_reach_every_plan_of_the_search():
    from search.problem import Limits, Problem
    from search.solve import SolveOptions, solve

    cl, w = H100.with_gpus(256), Workload(global_batch=256, seq_len=16384)  # Megatron-MoE-ModelZoo's Qwen3 rows
    pins = dict(tp=4, pp=8, dp=8, ep=8, cp=1, sp=True, zero=1, recompute="selective", mb=1, vp=4)
    lim = Limits(fixed=pins, layers_per_stage=(11, 12, 12, 12, 12, 12, 12, 11))
    plain = solve(Problem(model=QWEN, cluster=cl, workload=w, limits=lim), SolveOptions(time_limit_s=10))
    mods = solve(
        Problem(model=QWEN, cluster=cl, workload=w, limits=lim, options=(("recompute_modules", ("layernorm", "moe")),)),
        SolveOptions(time_limit_s=10),
    )
    assert plain.status == "INFEASIBLE"  # the MoE activations of 4 chunks in flight need more than 80 GB
    assert mods.status == "OPTIMAL" and mods.best.config.recompute_modules == ("layernorm", "moe")


def test_a_problem_refuses_options_its_framework_cannot_run():
    from search.problem import Problem

    with pytest.raises(SpecError, match="options"):
        Problem(model=QWEN, cluster=H100.with_gpus(8), workload=BF16, options=(("tp", 2),))
    with pytest.raises(SpecError, match="optimizer_dtype"):
        Problem(
            model=QWEN,
            cluster=H100.with_gpus(8),
            workload=BF16,
            framework="deepspeed",
            options=(("optimizer_dtype", "bf16"),),
        )
